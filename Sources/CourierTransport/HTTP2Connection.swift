import CourierCore
import CourierHTTP2
import CourierPool
import CourierReactor
import Foundation

/// One HTTP/2 connection: a transport stream, the nghttp2 client core, and the exchanges it
/// carries as concurrent streams. Confined to its event loop.
///
/// A paused exchange stops consuming its stream's DATA, so flow control stops that stream's
/// sender while the others go on; what arrived before the pause waits in the stream's stash.
final class HTTP2Connection: TransportStreamDelegate, HTTP2SessionDelegate, PooledConnection, TurnEndHandler {
    /// Where a stream's request body comes from.
    enum BodySource {
        case none
        case bytes(Data, offset: Int)
        /// `chunk` is what was read last; `reading` while a read runs off the loop.
        case producer(RequestBodyProducer, chunk: Data, offset: Int, ended: Bool, reading: Bool)
    }

    /// One stream's state. A class: it is updated for every frame, and a struct would be
    /// copied out of the table and back each time (its stash with it).
    final class Stream {
        let exchange: HTTPExchange
        @exclusivity(unchecked) var metrics: ExchangeMetrics
        @exclusivity(unchecked) var body: BodySource
        @exclusivity(unchecked) var bodyBytesSent: Int64 = 0
        @exclusivity(unchecked) var paused = false
        /// DATA that came while the stream was paused (HTTP2Connection+Stash.swift).
        @exclusivity(unchecked) var stash = Stash()
        @exclusivity(unchecked) var receivedResponseBytes = false
        @exclusivity(unchecked) var trailers: HTTPFields?
        @exclusivity(unchecked) var lastActivity: MonotonicInstant
        /// The stream ended while its reader was paused: completion waits for the stash.
        @exclusivity(unchecked) var endedWhilePaused = false
        /// Its receive window, grown while the round trip holds it back.
        @exclusivity(unchecked) var window: StreamWindow

        init(exchange: HTTPExchange, metrics: ExchangeMetrics, body: BodySource, lastActivity: MonotonicInstant, window: StreamWindow) {
            self.exchange = exchange
            self.metrics = metrics
            self.body = body
            self.lastActivity = lastActivity
            self.window = window
        }
    }

    let id: PoolConnectionID
    let loop: EventLoop
    let stream: TransportStream
    /// Told of the connection's events until it closes; nil after, so no late event reaches it.
    ///
    /// Both references to the pool are strong. The pool holds its open connections, so until
    /// the connection closes the two hold each other; the close ends that, since the pool then
    /// drops the connection (and every connection of a pool that shuts down is closed). A weak
    /// reference would give the pool a side table, and every retain and release of it, about
    /// eight of each a request, would take the runtime's slow path.
    @exclusivity(unchecked) var pool: PoolDriver?
    /// The same pool, kept after the connection closes: an exchange that reaches the connection
    /// just as it dies must still go back to the pool to be retried.
    @exclusivity(unchecked) private var owner: PoolDriver?
    /// Set when the connection has started to fail its streams on its way to closing: from then
    /// on it takes no new exchange and frees no stream slot in the pool, which would otherwise
    /// hand a waiting request to a connection about to die.
    @exclusivity(unchecked) private var isRetiring = false
    /// True while nghttp2 is receiving or sending: its callbacks reach the pool, which may hand
    /// this connection a new exchange at once, and nghttp2 must not be re-entered to send it.
    /// A flush asked for meanwhile runs when the outer call returns.
    @exclusivity(unchecked) private var inSessionIO = false
    /// The connection opens no more streams (see ``retireFromPool()``).
    @exclusivity(unchecked) private var isExhausted = false
    @exclusivity(unchecked) private var flushRequested = false
    /// A flush is due at the end of the loop's turn (``requestFlushAtEndOfTurn()``).
    @exclusivity(unchecked) private var flushAtTurnEnd = false
    /// A flush is queued on the cooperative pool (``requestFlushAfterCallersPeers()``).
    @exclusivity(unchecked) private var flushQueuedInPool = false
    /// The loop timer that sends a queued flush the pool has not run in time.
    @exclusivity(unchecked) private var queuedFlushTimer: TimerID?
    /// How the flushes queued on the pool went, for tests to see which path sent a request.
    struct QueuedFlushCounts {
        var queued = 0
        var sentByTask = 0
        var sentByTimer = 0
    }
    @exclusivity(unchecked) private(set) var queuedFlushCounts = QueuedFlushCounts()
    /// The longest a request waits for the flush queued on the pool
    /// (``HTTP2Configuration/queuedFlushDelayLimit``).
    private let queuedFlushDelayLimit: Duration
    /// A new stream's receive window, and the most it grows to (``StreamWindow``).
    let streamWindow: StreamWindow
    /// The shortest round trip seen from a SETTINGS or PING of ours to its acknowledgement, in
    /// nanoseconds: what a stream's window is measured against. Nil until the first.
    @exclusivity(unchecked) private(set) var roundTrip: Int64?
    /// A PING has been acknowledged. The SETTINGS' sample alone is not trusted to size a
    /// window: it is taken as the connection starts, and a peer or client busy then (another
    /// download writing to disk, say) makes it long enough that any reader passes for one the
    /// round trip holds back (``StreamWindow``).
    @exclusivity(unchecked) private(set) var roundTripConfirmed = false
    /// When the SETTINGS went out (with the preface, at the first flush).
    private let settingsSentAt: MonotonicInstant
    /// When the PING still unanswered went out (an idle connection's, or one measuring the
    /// round trip for a window); nil when none is.
    @exclusivity(unchecked) var pingSentAt: MonotonicInstant?
    /// Times a stream's window grew, for tests.
    @exclusivity(unchecked) private(set) var streamWindowGrowths = 0
    // Internal, not private, as are the timers below, `flush()` and `finishStream(_:_:)`, for
    // the extensions in HTTP2Connection+Timers.swift and +Stash.swift; loop only, like all of
    // the connection.
    @exclusivity(unchecked) var session: HTTP2ClientSession!
    @exclusivity(unchecked) var streams = SlotTable<Int32, Stream>(step: 2)
    @exclusivity(unchecked) private var outgoing = ByteBuffer()
    @exclusivity(unchecked) private var streamsCarried = 0
    @exclusivity(unchecked) private(set) var isClosed = false
    /// The one timer for every stream's timeouts, and when it fires (``checkTimeouts()``).
    @exclusivity(unchecked) var timeoutTimer: TimerID?
    @exclusivity(unchecked) var timeoutTimerFires: MonotonicInstant?
    /// The pool's idle timer, kept across streams (see ``IdleTimer``). Its closure, and the
    /// ping timer's, hold the connection until ``IdleTimer/cancel()``, which the close calls.
    lazy var poolIdleTimer = IdleTimer(loop: loop) { [self] in
        pool?.idleTimeoutFired(id)
    }
    /// While idle, a PING every ``idlePingInterval``; kept across streams too.
    lazy var pingTimer = IdleTimer(loop: loop) { [self] in pingWhileIdle() }
    /// What the stream and the nghttp2 session tell, passed on to this connection (see
    /// ``Events``).
    private lazy var events = Events(self)
    private let connectTimings: ConnectTimings
    /// Streams assumed allowed until the server's SETTINGS say otherwise (RFC 9113 section
    /// 6.5.2 recommends no fewer than 100).
    static let assumedMaxConcurrentStreams = 100
    /// Retries of a stream a server refused (never processed, so always safe). A server that
    /// caps requests per connection refuses the overflow each time; the resource timeout bounds
    /// the whole.
    static let maxRefusedRetries = 16
    /// How often an idle connection is checked with PING; a missing answer by the next check
    /// closes it.
    static let idlePingInterval = Duration.seconds(30)

    init(
        id: PoolConnectionID, stream: TransportStream, pool: PoolDriver, configuration: HTTP2Configuration,
        timings: ConnectTimings
    ) throws(HTTP2Error) {
        self.id = id
        self.loop = stream.loop
        self.stream = stream
        self.pool = pool
        self.owner = pool
        self.connectTimings = timings
        queuedFlushDelayLimit = configuration.queuedFlushDelayLimit
        streamWindow = StreamWindow(
            size: Int(configuration.initialStreamWindowSize), maximum: Int(configuration.maximumStreamWindowSize)
        )
        // The SETTINGS go out with the preface at the flush below.
        settingsSentAt = .now
        session = try HTTP2ClientSession(configuration: configuration)
        session.delegate = events
        stream.delegate = events
        flush()
    }

    /// The details every exchange's metrics share (see ``ExchangeMetrics``).
    @exclusivity(unchecked) private var details: ConnectionDetails?

    // MARK: Carrying exchanges

    func execute(_ exchange: HTTPExchange) {
        loop.assertInEventLoop()
        guard !isClosed, !isRetiring, session.goAwayLastStreamID == nil, session.connectionFailure == nil, !isExhausted else {
            // Closed or going away: this connection will open no stream for it.
            owner?.requeueAfterStaleConnection(exchange, closedConnection: id)
            if !isClosed && !isRetiring { pool?.streamClosed(id) }
            return
        }
        guard let pausedEarly = exchange.claim(for: self) else {
            exchange.fail(.cancelled)
            pool?.streamClosed(id)
            return
        }
        cancelPoolIdleTimer()
        streamsCarried += 1
        let request = exchange.request
        var metrics = ExchangeMetrics(
            for: exchange, on: stream, reused: streamsCarried > 1, connectTimings: connectTimings, protocolName: "h2",
            details: &details
        )
        metrics.requestStart = .now
        exchange.delegate.exchange(exchange, didMakeProgress: .requestSent(reusedConnection: streamsCarried > 1, http2: true))

        // The framing rule is the request's (one rule for both versions); on HTTP/2 an empty
        // body is no DATA at all, the headers end the stream.
        let kind: HTTP2RequestBody
        let source: BodySource
        switch (request.framing, request.body) {
        case (.none, _), (.contentLength(0), .empty), (.contentLength(0), .bytes):
            (kind, source) = (.none, .none)
        case (_, .empty):
            (kind, source) = (.none, .none)
        case (.contentLength(let length), .bytes(let data)):
            (kind, source) = (.known(length: length), .bytes(data, offset: 0))
        case (.chunked, .bytes(let data)):
            (kind, source) = (.streamed, .bytes(data, offset: 0))
        case (.contentLength(let length), .stream(let producer, _)):
            (kind, source) = (.known(length: length), .producer(producer, chunk: Data(), offset: 0, ended: false, reading: false))
        case (.chunked, .stream(let producer, _)):
            (kind, source) = (.streamed, .producer(producer, chunk: Data(), offset: 0, ended: false, reading: false))
        }
        let streamID: Int32
        do {
            streamID = try session.submitValidatedRequest(request.head, body: kind)
        } catch .invalidRequest(let error) {
            exchange.fail(.localProtocol(error), metrics: metrics)
            pool?.streamClosed(id)
            return
        } catch {
            // This connection is done opening streams; another one can carry the request.
            retireFromPool()
            pool?.streamClosed(id)
            owner?.requeueAfterStaleConnection(exchange, closedConnection: id)
            return
        }
        if case .none = source { metrics.requestEnd = .now }
        streams[streamID] = Stream(exchange: exchange, metrics: metrics, body: source, lastActivity: .now, window: streamWindow)
        exchange.http2StreamID = streamID
        if !session.canOpenStream { retireFromPool() }
        armTimeout(request.idleTimeout, deadline: request.deadline)
        if pausedEarly { setReadingPaused(true, for: exchange) }
        if streams.count > 1, loop.isBorrowedByCurrentThread, withUnsafeCurrentTask(body: { $0 != nil }) {
            requestFlushAfterCallersPeers()
        } else {
            requestFlushAtEndOfTurn()
        }
    }

    /// The open stream carrying `exchange` (a cancel, a reader's pause or resume): the id the
    /// exchange keeps, when this connection's record of that stream names it.
    func streamID(of exchange: HTTPExchange) -> Int32? {
        let streamID = exchange.http2StreamID
        guard streamID > 0, streams[streamID]?.exchange === exchange else { return nil }
        return streamID
    }

    func cancel(_ exchange: HTTPExchange) {
        guard let streamID = streamID(of: exchange) else { return }
        finishStream(streamID, .failure(.cancelled))
        session.cancelStream(streamID)
        flush()
    }

    // MARK: Bytes

    /// Sends at the end of the loop's turn: the requests that tasks resumed in the same turn
    /// submit go out in one TLS record and one write instead of one each.
    private func requestFlushAtEndOfTurn() {
        guard !flushAtTurnEnd else { return }
        flushAtTurnEnd = true
        loop.atEndOfTurn(self)
    }

    /// Sends once the tasks queued behind the caller's have run: the requests that tasks
    /// resumed together submit from the cooperative pool go out in one TLS record and one write.
    ///
    /// Design note: a task that submits from the pool borrows the parked loop, and the borrow's
    /// turn ends with its own request, so flushing at the end of the turn sent every request of
    /// a multiplexed burst alone (an `SSL_write` of ~7,600 instructions and a system call each).
    /// The flush is therefore queued as a task of the caller's priority, which the pool runs
    /// after the jobs already waiting in it (the tasks the loop resumed with the caller's); any
    /// read on this connection flushes sooner, and a loop timer bounds the wait should the pool
    /// be busy with long jobs (``queuedFlushDelayLimit``). Only with another stream open: a
    /// lone request is sent at once, as nothing would join it.
    ///
    /// The gathering holds only for peers of the caller's priority or above, waiting on the
    /// global executor: a caller above its peers' priority has its flush run before them (each
    /// of them then queues its own), and a flush task that finds the loop busy, as when it runs
    /// beside a caller still submitting, goes through the loop's queue. Either way every request
    /// is sent, only in more records.
    private func requestFlushAfterCallersPeers() {
        guard !flushQueuedInPool else { return }
        flushQueuedInPool = true
        queuedFlushCounts.queued += 1
        let bound = LoopBound(self, loop: loop)
        Task.detached(priority: Task.currentPriority) {
            bound.loop.runBorrowing(bound) { $0.value.queuedFlushDue(byTimer: false) }
        }
        queuedFlushTimer = loop.scheduleTimer(after: queuedFlushDelayLimit) { [self] in
            queuedFlushTimer = nil
            queuedFlushDue(byTimer: true)
        }
    }

    private func queuedFlushDue(byTimer: Bool) {
        guard flushQueuedInPool else { return }
        endQueuedFlush()
        if byTimer { queuedFlushCounts.sentByTimer += 1 } else { queuedFlushCounts.sentByTask += 1 }
        flush()
    }

    /// No flush is queued any more: the timer that bounds it is cancelled.
    private func endQueuedFlush() {
        flushQueuedInPool = false
        if let queuedFlushTimer {
            loop.cancelTimer(queuedFlushTimer)
            self.queuedFlushTimer = nil
        }
    }

    func loopTurnDidEnd() {
        flushAtTurnEnd = false
        flush()
    }

    /// Sends what the session has queued, then acts on a connection error it found; loop only.
    func flush() {
        guard !isClosed else { return }
        if inSessionIO {
            flushRequested = true
            return
        }
        repeat {
            flushRequested = false
            outgoing.clear()
            inSessionIO = true
            session.drainOutput(into: &outgoing)
            inSessionIO = false
            if !outgoing.isEmpty { outgoing.withReadableBytes { stream.write($0) } }
        } while flushRequested && !isClosed
        guard !isClosed else { return }
        if let failure = session.connectionFailure {
            failAll(.remoteProtocol(failure))
            close()
        } else if !session.wantsRead && !session.wantsWrite && streams.isEmpty {
            close()
        }
    }

    func streamDidRead(_ bytes: UnsafeRawBufferPointer) {
        do {
            inSessionIO = true
            defer { inSessionIO = false }
            try session.receive(bytes)
        } catch {
            failAll(.remoteProtocol(error))
            close()
            return
        }
        flush()
    }

    func streamDidReadEOF(cleanly: Bool) {
        connectionLost(.connectionLost(nil))
    }

    func streamDidDrainWrites() {
        for (streamID, current) in streams {
            if case .producer(_, _, _, _, false) = current.body { session.resumeBody(streamID: streamID) }
        }
        flush()
    }

    func streamDidFail(_ error: TransportError) {
        isClosed = true
        connectionLost(error)
        closeAndTellPool()
    }

    /// The connection died: streams that never saw a response byte are retried when they may
    /// be; the rest fail.
    private func connectionLost(_ error: TransportError) {
        isRetiring = true
        for (streamID, current) in streams {
            // A stream that already has response bytes cannot be sent again: what was delivered
            // would be delivered twice.
            let refused = !current.receivedResponseBytes && (session.goAwayLastStreamID.map { streamID > $0 } ?? false)
            if refused && current.exchange.claimRetry(requireIdempotent: false, allowed: Self.maxRefusedRetries) {
                // Above the GOAWAY's last stream id: the server never processed it.
                dropStream(streamID)
                owner?.requeueAfterStaleConnection(current.exchange, closedConnection: id)
            } else if !current.receivedResponseBytes && current.metrics.isReusedConnection
                && current.exchange.claimRetry(requireIdempotent: true) {
                dropStream(streamID)
                owner?.requeueAfterStaleConnection(current.exchange, closedConnection: id)
            } else {
                finishStream(streamID, .failure(error))
            }
        }
        close()
    }

    private func failAll(_ error: TransportError) {
        isRetiring = true
        for streamID in streams.keys { finishStream(streamID, .failure(error)) }
    }

    // MARK: HTTP2SessionDelegate

    func http2Stream(_ streamID: Int32, didReceiveHead head: HTTPResponseHead) {
        // One lookup: the stream is a class, changed where the table holds it.
        guard let current = streams[streamID] else { return }
        current.receivedResponseBytes = true
        current.lastActivity = .now
        current.metrics.responseStart = .now
        let exchange = current.exchange
        exchange.delegate.exchange(exchange, didReceiveHead: head)
    }

    func http2Stream(_ streamID: Int32, didReceiveInformationalHead head: HTTPResponseHead) {
        guard let current = streams[streamID] else { return }
        current.lastActivity = .now
        current.exchange.delegate.exchange(current.exchange, didReceiveInformationalHead: head)
    }

    func http2Stream(_ streamID: Int32, didReceiveData bytes: UnsafeRawBufferPointer) {
        guard let current = streams[streamID] else {
            session.consume(streamID: streamID, count: bytes.count)
            return
        }
        current.lastActivity = .now
        current.metrics.responseBodyBytesReceived += Int64(bytes.count)
        // Behind the stash while any of it waits, so the delegate gets the bytes in order.
        if current.paused || current.stash.waiting > 0 {
            current.stash.append(bytes, window: current.window.size)
            return
        }
        current.exchange.delegate.exchange(current.exchange, didReceiveBodyBytes: bytes)
        session.consume(streamID: streamID, count: bytes.count)
        switch current.window.credit(bytes.count, roundTrip: roundTripConfirmed ? roundTrip : nil, now: { .now }) {
        case .keep:
            break
        case .grew(let size):
            session.setStreamWindow(streamID, to: size)
            streamWindowGrowths += 1
        case .needsRoundTrip:
            // Measured by a PING, which the flush after this read sends; the window grows, if
            // it should, at a period after the answer.
            if pingSentAt == nil {
                pingSentAt = .now
                session.ping()
            }
        }
    }

    func http2Stream(_ streamID: Int32, didReceiveTrailers trailers: HTTPFields) {
        streams[streamID]?.trailers = trailers
    }

    func http2Stream(_ streamID: Int32, didCloseWith error: HTTP2StreamError?) {
        guard let current = streams[streamID] else { return }
        switch error {
        case nil:
            if current.paused || current.stash.waiting > 0 {
                // Deliver what is stashed first; completion follows when reading resumes.
                current.endedWhilePaused = true
                return
            }
            finishStream(streamID, .success(current.trailers))
        case .refused:
            // Never processed by the server: safe to send again on another connection, unless
            // the server answered in part (what was delivered would be delivered twice).
            if !current.receivedResponseBytes && current.exchange.claimRetry(requireIdempotent: false, allowed: Self.maxRefusedRetries) {
                dropStream(streamID)
                pool?.requeueAfterStaleConnection(current.exchange, closedConnection: id)
                pool?.streamClosed(id)
            } else {
                finishStream(streamID, .failure(.connectionLost(nil)))
            }
        case .reset:
            finishStream(streamID, .failure(.connectionLost(nil)))
        case .cancelled:
            finishStream(streamID, .failure(.cancelled))
        case .protocolError, .headerListTooLarge:
            finishStream(streamID, .failure(.remoteProtocol(error!)))
        }
    }

    func http2DidReceiveMaxConcurrentStreams(_ limit: Int) {
        pool?.http2SettingsReceived(id, maxConcurrentStreams: limit)
    }

    /// Stops the pool from giving this connection new streams, as when the server sends
    /// GOAWAY; the connection closes once its last stream ends.
    private func retireFromPool() {
        guard !isExhausted else { return }
        isExhausted = true
        pool?.goAwayReceived(id)
        if streams.isEmpty { close() }
    }

    func http2DidReceiveGoAway(lastStreamID: Int32, errorCode: UInt32) {
        pool?.goAwayReceived(id)
    }

    func http2DidReceivePingAcknowledgement() {
        if let sent = pingSentAt {
            noteRoundTrip(since: sent)
            roundTripConfirmed = true
        }
        pingSentAt = nil
    }

    func http2DidReceiveSettingsAcknowledgement() {
        noteRoundTrip(since: settingsSentAt)
    }

    /// Keeps the shortest round trip: a longer one waited in a queue on the way.
    private func noteRoundTrip(since sent: MonotonicInstant) {
        let sample = MonotonicInstant.now.nanoseconds &- sent.nanoseconds
        roundTrip = min(roundTrip ?? sample, sample)
    }

    // MARK: Finishing

    /// Ends a stream's exchange with a result and tells the pool a stream is free; loop only.
    func finishStream(_ streamID: Int32, _ result: Result<HTTPFields?, TransportError>) {
        guard let current = streams[streamID] else { return }
        dropStream(streamID)
        current.metrics.responseEnd = .now
        current.metrics.requestBodyBytesSent = current.bodyBytesSent
        // The slot is free before the delegate hears: a request sent as soon as this one ends
        // finds room on this connection rather than dialing another.
        if !isClosed && !isRetiring { pool?.streamClosed(id) }
        switch result {
        case .success(let trailers):
            if current.exchange.markFinished() {
                current.exchange.delegate.exchange(current.exchange, didCompleteWithTrailers: trailers, metrics: current.metrics)
            }
        case .failure(let error):
            current.exchange.fail(error, metrics: current.metrics)
        }
        if isExhausted && streams.isEmpty { close() }
    }

    private func dropStream(_ streamID: Int32) {
        guard let current = streams.removeValue(forKey: streamID) else { return }
        if current.exchange.http2StreamID == streamID { current.exchange.http2StreamID = 0 }
        // Bytes stashed for a paused stream were never credited: give them back to the
        // connection window, or a few abandoned paused streams would stall every other one.
        if current.stash.waiting > 0 { session.consume(streamID: streamID, count: current.stash.waiting) }
    }

    func close() {
        guard !isClosed else { return }
        isClosed = true
        failAll(.connectionLost(nil))
        closeAndTellPool()
    }

    private func closeAndTellPool() {
        poolIdleTimer.cancel()
        pingTimer.cancel()
        if let timeoutTimer { loop.cancelTimer(timeoutTimer) }
        timeoutTimer = nil
        endQueuedFlush()
        stream.close()
        pool?.connectionClosed(id)
        pool = nil
        events.target = nil
    }
}

extension HTTP2Connection {
    /// A stream of a multiplexed connection cannot become the whole connection.
    func detach(_ exchange: HTTPExchange) -> UpgradedConnection? { nil }

    /// A stream's DATA lies among other frames in the receive buffer: nobody takes it.
    func takeReceiveBuffer(
        holding bytes: UnsafeRawBufferPointer, for exchange: HTTPExchange, replacement: () -> UnsafeMutableRawPointer
    ) -> UnsafeMutableRawPointer? { nil }
}
