import CourierCore
import CourierPool
import CourierReactor
import CourierSync

/// Receives the progress of one exchange. Called on the event loop of the connection carrying
/// it, one call at a time; keep each call short (copy the bytes, hand work elsewhere).
public protocol HTTPExchangeDelegate: AnyObject, Sendable {
    /// Request body bytes written so far (total).
    func exchange(_ exchange: HTTPExchange, didSendBodyBytes totalBytesSent: Int64)
    /// An interim 1xx head arrived (not 101); the final head is still to come.
    func exchange(_ exchange: HTTPExchange, didReceiveInformationalHead head: HTTPResponseHead)
    /// The final response head arrived.
    func exchange(_ exchange: HTTPExchange, didReceiveHead head: HTTPResponseHead)
    /// Body bytes arrived, lent for the duration of the call.
    func exchange(_ exchange: HTTPExchange, didReceiveBodyBytes bytes: UnsafeRawBufferPointer)
    /// The response is complete. Called once, unless the exchange failed.
    func exchange(_ exchange: HTTPExchange, didCompleteWithTrailers trailers: HTTPFields?, metrics: ExchangeMetrics)
    /// The exchange failed. Called once, unless it completed.
    func exchange(_ exchange: HTTPExchange, didFailWith error: TransportError, metrics: ExchangeMetrics)
    /// The server switched protocols for a request that asked it to (``TransportRequest/upgrades``):
    /// the connection is the delegate's from here on, to keep and ``UpgradedConnection/start(_:)``
    /// (or close). Called once, in place of completion; then nothing more about the exchange.
    func exchange(_ exchange: HTTPExchange, didUpgradeWith head: HTTPResponseHead, connection: UpgradedConnection, metrics: ExchangeMetrics)
    /// A step of opening its connection or sending its request happened (``ConnectionProgress``).
    func exchange(_ exchange: HTTPExchange, didMakeProgress progress: ConnectionProgress)
}

extension HTTPExchangeDelegate {
    /// Interim heads are of no interest by default.
    public func exchange(_ exchange: HTTPExchange, didReceiveInformationalHead head: HTTPResponseHead) {}

    /// A delegate that never asks for an upgrade never gets one; should it, the connection is
    /// closed rather than left open with nobody reading it.
    public func exchange(_ exchange: HTTPExchange, didUpgradeWith head: HTTPResponseHead, connection: UpgradedConnection, metrics: ExchangeMetrics) {
        connection.close()
    }
}

/// One request travelling through the transport, and the caller's handle on it: cancel it,
/// or pause and resume the delivery of its response (back-pressure).
///
/// Thread-safe. While waiting in a pool it is owned by the pool driver; once given to a
/// connection, control calls hop to that connection's loop.
public final class HTTPExchange: Sendable {
    enum Phase {
        /// Not yet handed to a pool.
        case created
        /// Waiting in a pool for a connection.
        case queued(PoolDriver, PoolRequestID)
        /// On a connection.
        case executing(ConnectionHandle)
        /// Completed or failed; nothing more will be delivered.
        case finished
    }

    struct State {
        var phase = Phase.created
        /// Asked to pause before reaching a connection; applied when it does.
        var pausedEarly = false
        /// Cancelled while on its way from the pool to a connection.
        var cancelRequested = false
        /// Retries made after stale or refusing connections.
        var retries = 0
    }

    public let request: TransportRequest
    public let delegate: HTTPExchangeDelegate
    /// Everything the exchange knows, guarded by its mutex.
    let state = Mutex(State())
    /// When the exchange entered the transport; loop threads add the rest.
    let createdAt = MonotonicInstant.now
    /// The HTTP/2 stream that carries the exchange, 0 when none: written and read only on the
    /// loop of the `HTTP2Connection` that opened the stream, which trusts it only when that
    /// stream's record names this exchange (a cancel or a pause finds the stream by it).
    nonisolated(unsafe) var http2StreamID: Int32 = 0

    init(request: TransportRequest, delegate: HTTPExchangeDelegate) {
        self.request = request
        self.delegate = delegate
    }

    /// Stops the exchange; the delegate gets `.cancelled` unless it already finished.
    public func cancel() {
        let phase = state.withLock { state -> Phase in
            state.cancelRequested = true
            return state.phase
        }
        switch phase {
        case .created, .finished:
            break
        case .queued(let driver, let id):
            driver.cancel(id)
        case .executing(let connection):
            connection.onLoop { $0.cancel(self) }
        }
    }

    /// Stops delivering response bytes until ``resumeReading()``; the connection stops reading.
    public func pauseReading() {
        recordPauseWish(true)
        applyPauseWish()
    }

    /// Delivers response bytes again.
    public func resumeReading() {
        recordPauseWish(false)
        applyPauseWish()
    }

    /// Records whether the response should be paused, without acting yet. Callers that decide
    /// under their own lock record there, then call ``applyPauseWish()`` outside it: whatever
    /// order the applications run in, each applies the latest wish, so a stale decision can
    /// never win.
    public func recordPauseWish(_ paused: Bool) {
        state.withLock { $0.pausedEarly = paused }
    }

    /// Makes the connection carrying the exchange follow the latest pause wish.
    public func applyPauseWish() {
        let phase = state.withLock { $0.phase }
        guard case .executing(let connection) = phase else { return }
        connection.onLoop { connection in
            let paused = self.state.withLock { $0.pausedEarly }
            connection.setReadingPaused(paused, for: self)
        }
    }

    /// Takes the HTTP/1.1 connection carrying the exchange out of HTTP once its response head
    /// has arrived (URLSession's `.becomeStream`): `completion` gets it, with the bytes read
    /// after the head, on its loop; nil when the exchange is not on a connection that can be
    /// taken (HTTP/2, finished, body bytes already delivered). Nothing more is said of the
    /// exchange after a success.
    public func detachConnection(_ completion: @escaping @Sendable (UpgradedConnection?) -> Void) {
        let phase = state.withLock { $0.phase }
        guard case .executing(let connection) = phase else {
            completion(nil)
            return
        }
        connection.onLoop { connection in completion(connection.detach(self)) }
    }

    /// Marks the exchange finished; returns false when it already was (so the caller must not
    /// deliver anything). A streamed body's producer is told, so its source is closed even when
    /// the body was not sent to its end (a writer feeding a bound stream pair learns at once).
    func markFinished() -> Bool {
        let first = state.withLock { state in
            if case .finished = state.phase { return false }
            state.phase = .finished
            return true
        }
        if first, case .stream(let producer, _) = request.body { producer.finish() }
        return first
    }

    /// Runs `job` on the exchange's event loop once the event being handled is over, so what one
    /// read delivers (several HTTP/2 DATA frames, say) can be handed on together; runs it at
    /// once when called off that loop.
    public func afterCurrentEvent(_ job: @escaping () -> Void) {
        let phase = state.withLock { $0.phase }
        if case .executing(let handle) = phase, handle.loop.inEventLoop {
            handle.loop.executeSoon(job)
        } else {
            job()
        }
    }

    /// Takes the receive buffer of the exchange's event loop, which holds `bytes`, and puts
    /// `replacement()` (``EventLoop/readBufferSize`` bytes from
    /// `UnsafeMutableRawPointer.allocate`) in its place; the caller owns what it gets.
    ///
    /// Only from inside ``HTTPExchangeDelegate/exchange(_:didReceiveBodyBytes:)``, for the
    /// bytes it was handed, and only on HTTP/1 when they end the read being parsed, so nothing
    /// after them is still to be looked at; nil otherwise, with nothing changed. A large body
    /// read this way reaches its reader with no copy.
    public func takeReceiveBuffer(
        holding bytes: UnsafeRawBufferPointer, replacement: () -> UnsafeMutableRawPointer
    ) -> UnsafeMutableRawPointer? {
        guard case .executing(let handle) = state.withLock({ $0.phase }) else { return nil }
        return handle.connection.takeReceiveBuffer(holding: bytes, for: self, replacement: replacement)
    }

    /// Fails the exchange unless it already finished.
    func fail(_ error: TransportError, metrics: ExchangeMetrics = ExchangeMetrics()) {
        guard markFinished() else { return }
        var metrics = metrics
        if metrics.fetchStart == nil { metrics.fetchStart = createdAt }
        // A proxy that failed the dial was still the route taken.
        if case .dial(.proxy(let failure)) = error { metrics.proxy = failure.proxy }
        delegate.exchange(self, didFailWith: error, metrics: metrics)
    }
}

/// A reference to a connection that may be used from any thread, but only touched on its loop.
struct ConnectionHandle: @unchecked Sendable {
    let connection: any PooledConnection

    var loop: EventLoop { connection.loop }

    /// Runs `body` with the connection and `value` on its loop: at once when already there, else
    /// at once in the loop's place when the loop is idle (``EventLoop/runBorrowing(_:_:)``), else
    /// queued. For a caller that holds no lock. When `body` captures nothing (pass what it needs
    /// in `value`) and runs at once, nothing is allocated: the connection, the value and `body`
    /// travel together to a job that captures nothing either.
    func onLoopBorrowing<Value: Sendable>(_ value: Value, _ body: @escaping @Sendable (any PooledConnection, Value) -> Void) {
        connection.loop.runBorrowing((self, value, body)) { job in job.2(job.0.connection, job.1) }
    }

    /// ``onLoop(_:)`` with `value` for `body`, allocating nothing in the same case as
    /// ``onLoopBorrowing(_:_:)``.
    func onLoop<Value: Sendable>(_ value: Value, _ body: @escaping @Sendable (any PooledConnection, Value) -> Void) {
        connection.loop.runOrQueue((self, value, body)) { job in job.2(job.0.connection, job.1) }
    }

    /// Runs `body` with the connection on its loop: at once when already there, else queued.
    func onLoop(_ body: @escaping @Sendable (any PooledConnection) -> Void) {
        connection.loop.runOrQueue((self, body)) { job in job.1(job.0.connection) }
    }
}
