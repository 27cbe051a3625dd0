import CourierCore
import CourierHTTP1
import CourierPool
import CourierReactor
import Foundation

/// One HTTP/1.1 connection: a transport stream (TCP or TLS), the response parser and request encoder, and
/// the exchange it is carrying. Confined to its event loop.
///
/// Lifecycle: created on a connected socket → idle ⇄ carrying one exchange → closed. After a
/// response it goes back to its pool when the server allows reuse, the request body was sent
/// whole and no stray byte followed the response; otherwise it closes. A protocol error always
/// closes it.
final class HTTP1Connection: TransportStreamDelegate {
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
    @exclusivity(unchecked) private var parser = HTTP1ResponseParser()
    @exclusivity(unchecked) private(set) var active: Active?
    @exclusivity(unchecked) private var requestsCarried = 0
    /// Response bytes read while the exchange was paused, waiting to be parsed.
    @exclusivity(unchecked) private var stash = ByteBuffer()
    @exclusivity(unchecked) var sendBuffer = ByteBuffer(capacity: 1024)
    /// The field lines of the last shared set of fields sent (the default fields), copied
    /// into the next request that carries the same set.
    @exclusivity(unchecked) private var encodedFieldLines: HTTP1RequestEncoder.EncodedFieldLines?
    @exclusivity(unchecked) private var timeoutTimer: TimerID?
    /// When `timeoutTimer` fires; kept for the next exchange whose timeout is no earlier.
    @exclusivity(unchecked) private var timeoutTimerFires: MonotonicInstant?
    /// The pool's idle timer, kept across exchanges (see ``IdleTimer``). Its closure holds the
    /// connection until ``IdleTimer/cancel()``, which the close and the hand-off call.
    private lazy var poolIdleTimer = IdleTimer(loop: loop) { [self] in
        pool?.idleTimeoutFired(id)
    }
    /// What the stream tells, passed on to this connection (see ``StreamEvents``).
    private lazy var streamEvents = StreamEvents(self)
    @exclusivity(unchecked) private(set) var isClosed = false
    let establishedAt: MonotonicInstant
    let connectTimings: ConnectTimings

    /// Stream-body chunk size read per blocking call.
    static let bodyChunkSize = 64 * 1024
    /// Bytes queued in the channel above which a request body waits for a drain; also the most
    /// of a body given as bytes written at once.
    static let bodyHighWatermark = 256 * 1024

    init(id: PoolConnectionID, stream: TransportStream, pool: PoolDriver, timings: ConnectTimings) {
        self.id = id
        self.loop = stream.loop
        self.stream = stream
        self.pool = pool
        self.owner = pool
        self.establishedAt = .now
        self.connectTimings = timings
        stream.delegate = streamEvents
    }

    /// The details every exchange's metrics share (see ``ExchangeMetrics``).
    @exclusivity(unchecked) private var details: ConnectionDetails?

    // MARK: Carrying an exchange

    /// Sends `exchange`'s request and starts reading its response.
    func execute(_ exchange: HTTPExchange) {
        loop.assertInEventLoop()
        // A reused connection must be quiet: bytes the server sent unasked (or its close)
        // could otherwise be taken for the answer to this request.
        if !isClosed && active == nil && requestsCarried > 0 && stream.isUnfitForReuse {
            close()
        }
        guard !isClosed, active == nil else {
            // The pool handed over a connection that died meanwhile: let the pool retry it.
            owner?.requeueAfterStaleConnection(exchange, closedConnection: id)
            return
        }
        guard let pausedEarly = exchange.claim(for: self) else {
            // Cancelled on its way here: the connection is free again.
            exchange.fail(.cancelled)
            pool?.connectionReleased(id)
            return
        }
        cancelPoolIdleTimer()
        requestsCarried += 1
        let request = exchange.request
        var metrics = ExchangeMetrics(
            for: exchange, on: stream, reused: requestsCarried > 1, connectTimings: connectTimings, protocolName: "http/1.1",
            details: &details
        )
        let timed = request.collectsTimings
        if timed { metrics.requestStart = .now }
        exchange.delegate.exchange(exchange, didMakeProgress: .requestSent(reusedConnection: requestsCarried > 1, http2: false))

        let framing = request.framing
        var bodyProgress = BodyProgress.complete
        // A body given as bytes goes out with the head up to the high-water mark; a longer one
        // follows from where it lies as the channel drains, so that the channel never holds a
        // copy of more than that much of it.
        var bodyWithHead: Data?
        switch request.body {
        case .empty: break
        case .bytes(let data):
            if !data.isEmpty { bodyWithHead = data }
            if data.count > Self.bodyHighWatermark { bodyProgress = .bytes(data, sent: Self.bodyHighWatermark) }
        case .stream(let producer, let length): bodyProgress = .streaming(producer, length: length, reading: false)
        }
        sendBuffer.clear()
        // HTTPTransport.start validated the head before it reached the pool.
        HTTP1RequestEncoder.encodeValidatedHead(request.head, framing: framing, upgrade: request.upgrades, into: &sendBuffer, reusing: &encodedFieldLines)
        metrics.requestHeaderBytesSent = Int64(sendBuffer.readableBytes)
        if let spare = spareActive {
            spareActive = nil
            spare.restart(exchange: exchange, metrics: metrics, body: bodyProgress, lastActivity: loop.now)
            active = spare
        } else {
            active = Active(exchange: exchange, metrics: metrics, body: bodyProgress, lastActivity: loop.now)
        }
        parser.expectResponse(to: request.head.method)
        armTimeout(request.idleTimeout, deadline: request.deadline)

        if let data = bodyWithHead {
            let first = min(data.count, Self.bodyHighWatermark)
            data.withUnsafeBytes { body in
                sendBuffer.withReadableBytes { head in stream.write([head, UnsafeRawBufferPointer(rebasing: body[..<first])]) }
            }
            bodySent(Int64(first))
        } else {
            sendBuffer.withReadableBytes { stream.write($0) }
        }
        if timed, let current = active, case .complete = current.body {
            current.metrics.requestEnd = .now
        }
        if pausedEarly { setReadingPaused(true, for: exchange) }
        pumpBody()
    }

    /// Cancels `exchange` if this connection carries it: the connection closes, since the rest
    /// of the response would have to be read and thrown away.
    func cancel(_ exchange: HTTPExchange) {
        guard let current = active, current.exchange === exchange else { return }
        failActive(.cancelled)
        close()
    }

    /// Pauses or resumes reading for `exchange`.
    func setReadingPaused(_ paused: Bool, for exchange: HTTPExchange) {
        guard active?.exchange === exchange, active!.readingPaused != paused else { return }
        active!.readingPaused = paused
        if paused {
            stream.pauseReading()
        } else {
            active!.lastActivity = loop.now
            drainStash()
            // Unless the exchange paused again. One that ended meanwhile leaves the connection
            // idle or carrying the next exchange, and either must read.
            if !isClosed && !(active?.readingPaused ?? false) { stream.resumeReading() }
        }
    }

    // MARK: TransportStreamDelegate

    func streamDidRead(_ bytes: UnsafeRawBufferPointer) {
        guard active != nil else {
            // Bytes with no request outstanding: a stray or pipelined response nobody asked
            // for. It could be mistaken for the next response, so the connection retires.
            close()
            return
        }
        active!.receivedResponseBytes = true
        active!.lastActivity = loop.now
        if !stash.isEmpty || active!.readingPaused {
            stash.write(bytes)
            return
        }
        readEnd = bytes.baseAddress.map { $0 + bytes.count }
        parse(bytes)
        readEnd = nil
    }

    func streamDidReadEOF(cleanly: Bool) {
        guard active != nil else {
            close()
            return
        }
        endedCleanly = cleanly
        if !stash.isEmpty || active!.readingPaused {
            // Let the paused exchange read what it has first; the end is seen after that.
            pendingEOF = true
            return
        }
        handleEOF()
    }

    func streamDidDrainWrites() {
        guard active != nil else { return }
        active!.lastActivity = loop.now
        pumpBody()
    }

    func streamDidFail(_ error: TransportError) {
        isClosed = true
        if active != nil {
            connectionFailedUnderExchange(error)
        }
        closeAndTellPool()
    }

    @exclusivity(unchecked) private var pendingEOF = false
    /// Where the read ``streamDidRead(_:)`` is parsing ends, while it is; nil once its receive
    /// buffer has been taken (``takeReceiveBuffer(holding:for:replacement:)``, in
    /// HTTP1Connection+ReceiveBuffer.swift).
    @exclusivity(unchecked) var readEnd: UnsafeRawPointer?
    /// Nesting depth of ``parse(_:)``; while above zero, a finished exchange waits for the
    /// parse to end (see ``finishActive(trailers:)``).
    @exclusivity(unchecked) private var parseDepth = 0
    /// The `Active` of a response that ended inside ``parse(_:)``, whose connection is released
    /// (or closed) and whose completion is delivered when the parse is over; then made the
    /// spare if nothing else holds it. Its trailers and whether the connection is reusable
    /// wait beside it: a stored `Completion?` (the metrics and all) was copied and destroyed
    /// through its type metadata, some 900 instructions a request.
    @exclusivity(unchecked) private var finishedInParse: Active?
    @exclusivity(unchecked) private var trailersAfterParse: HTTPFields?
    @exclusivity(unchecked) private var reusableAfterParse = false
    /// An `Active` for the next exchange: one allocation fewer a request on a kept-alive
    /// connection.
    @exclusivity(unchecked) private var spareActive: Active?

    /// False when TLS ended without close_notify: a close-delimited body is then truncated.
    @exclusivity(unchecked) private var endedCleanly = true

    // MARK: Parsing

    /// Feeds received bytes to the parser and delivers the events, until the bytes run out, the
    /// exchange pauses, or the response ends.
    private func parse(_ bytes: UnsafeRawBufferPointer) {
        parseDepth += 1
        defer {
            parseDepth -= 1
            if parseDepth == 0 && finishedInParse != nil {
                // Made before the `Active` becomes the spare, which clears its metrics.
                let completion = completionAfterParse()
                keepFinishedAsSpare()
                complete(completion)
            }
        }
        var offset = 0
        while active != nil {
            let step: HTTP1ParseStep
            do {
                step = try parser.next(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            } catch {
                failActive(.remoteProtocol(error))
                close()
                return
            }
            let base = offset
            offset += step.consumed
            guard let event = step.event else { break }
            if case .head(let head) = event, head.status == 101, active!.exchange.request.upgrades {
                handOff(head, leftover: UnsafeRawBufferPointer(rebasing: bytes[offset...]))
                return
            }
            deliver(event, from: bytes, at: base)
            if active == nil {
                // The response ended; bytes left over mean the server sent more than asked.
                if offset < bytes.count {
                    if finishedInParse != nil { reusableAfterParse = false }
                    close()
                }
                return
            }
            if active!.readingPaused {
                stash.write(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
                return
            }
        }
    }

    private func deliver(_ event: HTTP1ResponseEvent, from bytes: UnsafeRawBufferPointer, at base: Int) {
        guard let current = active else { return }
        switch event {
        case .head(let head):
            active!.headDelivered = true
            if current.exchange.request.collectsTimings { active!.metrics.responseStart = .now }
            active!.metrics.responseHeaderBytesReceived = Int64(parser.lastHeadByteCount)
            if head.status == 101 {
                // Courier does not offer protocol switching on HTTP/1 exchanges.
                failActive(.remoteProtocol(UnexpectedUpgradeError()))
                close()
                return
            }
            current.exchange.delegate.exchange(current.exchange, didReceiveHead: head)
        case .informational(let head):
            current.exchange.delegate.exchange(current.exchange, didReceiveInformationalHead: head)
        case .body(let range):
            let slice = UnsafeRawBufferPointer(rebasing: bytes[(base + range.lowerBound)..<(base + range.upperBound)])
            active!.metrics.responseBodyBytesReceived += Int64(slice.count)
            current.exchange.delegate.exchange(current.exchange, didReceiveBodyBytes: slice)
        case .end(let trailers):
            finishActive(trailers: trailers)
        }
    }

    private func drainStash() {
        if stash.isEmpty {
            // Even with nothing stashed the parser may hold an event: the end of a body whose
            // last bytes were delivered just before the exchange paused.
            if active != nil { parse(UnsafeRawBufferPointer(start: nil, count: 0)) }
        } else {
            let pending = stash.readableBytesArray()
            stash.clear()
            pending.withUnsafeBytes { parse($0) }
        }
        if pendingEOF && stash.isEmpty && (active == nil || !active!.readingPaused) {
            handleEOF()
        }
    }

    private func handleEOF() {
        pendingEOF = false
        guard active != nil else {
            close()
            return
        }
        do {
            if !endedCleanly && parser.isReadingUntilClose {
                // Without close_notify the end of the body cannot be told from a cut.
                connectionFailedUnderExchange(.connectionLost(nil))
            } else if case .end(let trailers)? = try parser.finish() {
                finishActive(trailers: trailers)
            } else {
                connectionFailedUnderExchange(.connectionLost(nil))
            }
        } catch {
            if error.isTruncation {
                connectionFailedUnderExchange(.connectionLost(nil))
            } else {
                failActive(.remoteProtocol(error))
            }
        }
        close()
    }

    /// The connection died under the exchange. When no response byte had arrived on a reused
    /// connection, the request is retried once on a new connection (if it may be); otherwise
    /// it fails.
    private func connectionFailedUnderExchange(_ error: TransportError) {
        guard let current = active else { return }
        if !current.receivedResponseBytes && current.metrics.isReusedConnection {
            if current.exchange.claimRetry(requireIdempotent: true) {
                active = nil
                cancelTimeout()
                owner?.requeueAfterStaleConnection(current.exchange, closedConnection: id)
                return
            }
        }
        failActive(error)
    }

    // MARK: Finishing

    /// Ends the current exchange with its response complete (`trailers`, if any) and, when the
    /// connection can carry another request, gives it back to the pool. The two endings are two
    /// functions, not one taking a `Result`: such a `Result` (TransportError nests deep) is
    /// destroyed through its type metadata.
    private func finishActive(trailers: HTTPFields?) {
        guard let current = endActive() else { return }
        let bodyComplete: Bool
        if case .complete = current.body { bodyComplete = true } else { bodyComplete = false }
        let reusable = parser.connectionReuse == .keepAlive && bodyComplete && stash.isEmpty && !pendingEOF
        // Released at once, the pool could hand this connection a waiting request right
        // here, and bytes still being parsed would be taken for its response: inside a
        // parse, everything waits until the parse has checked for leftovers.
        if parseDepth > 0 {
            finishedInParse = current
            trailersAfterParse = trailers
            reusableAfterParse = reusable
        } else {
            complete(Completion(exchange: current.exchange, trailers: trailers, metrics: current.metrics, reusable: reusable))
        }
    }

    /// Ends the current exchange with `error`.
    func failActive(_ error: TransportError) {
        guard let current = endActive() else { return }
        current.exchange.fail(error, metrics: current.metrics)
    }

    /// The current exchange, taken off the connection with its last metrics recorded; nil
    /// when there is none.
    private func endActive() -> Active? {
        guard let current = active else { return nil }
        active = nil
        if current.exchange.request.collectsTimings { current.metrics.responseEnd = .now }
        current.metrics.requestBodyBytesSent = current.bodyBytesSent
        return current
    }

    /// The completion of the response that ended in the parse just over (``finishedInParse``).
    private func completionAfterParse() -> Completion {
        let finished = finishedInParse!
        defer { trailersAfterParse = nil }
        return Completion(exchange: finished.exchange, trailers: trailersAfterParse, metrics: finished.metrics, reusable: reusableAfterParse)
    }

    /// Keeps the `Active` of a response that ended in the parse just over for the next
    /// exchange, unless something still holds it (it is then left to go).
    private func keepFinishedAsSpare() {
        guard var finished = finishedInParse else { return }
        finishedInParse = nil
        guard isKnownUniquelyReferenced(&finished) else { return }
        finished.clear()
        spareActive = finished
    }

    /// Gives the connection back to the pool (or closes it), then tells the exchange's delegate.
    /// In this order, a caller that sends its next request as soon as it hears of this one's
    /// end finds the connection idle, rather than opening another.
    private func complete(_ completion: Completion) {
        if completion.reusable && !isClosed {
            pool?.connectionReleased(id)
        } else {
            close()
        }
        if completion.exchange.markFinished() {
            completion.exchange.delegate.exchange(completion.exchange, didCompleteWithTrailers: completion.trailers, metrics: completion.metrics)
        }
    }

    /// The server switched protocols for an exchange that asked it to (a 101): the stream, with
    /// the bytes after the 101, leaves this connection and its pool for the exchange's owner.
    private func handOff(_ head: HTTPResponseHead, leftover: UnsafeRawBufferPointer) {
        guard let current = active else { return }
        current.metrics.responseHeaderBytesReceived = Int64(parser.lastHeadByteCount)
        if current.exchange.request.collectsTimings {
            current.metrics.responseStart = .now
            current.metrics.responseEnd = current.metrics.responseStart
        }
        current.metrics.requestBodyBytesSent = current.bodyBytesSent
        let upgraded = leaveHTTP(leftover: Array(leftover))
        if current.exchange.markFinished() {
            current.exchange.delegate.exchange(current.exchange, didUpgradeWith: head, connection: upgraded, metrics: current.metrics)
        } else {
            upgraded.close()
        }
    }

    /// The data task's `.becomeStream`: the stream, with the bytes after the head, leaves this
    /// connection and its pool, as after a 101. Only before any body byte was delivered and
    /// with the request sent whole.
    func detach(_ exchange: HTTPExchange) -> UpgradedConnection? {
        guard !isClosed, let current = active, current.exchange === exchange, current.headDelivered,
              current.metrics.responseBodyBytesReceived == 0, case .complete = current.body else { return nil }
        let detached = leaveHTTP(leftover: [])
        guard exchange.markFinished() else {
            detached.close()
            return nil
        }
        return detached
    }

    /// Takes the stream out of HTTP and out of the pool, without closing it: the exchange is
    /// dropped, the timers stop, and the stream goes, with `leftover` and then the stashed
    /// bytes read after it, to a new ``UpgradedConnection`` its owner can also start TLS on.
    private func leaveHTTP(leftover: [UInt8]) -> UpgradedConnection {
        active = nil
        isClosed = true
        cancelTimeout()
        poolIdleTimer.cancel()
        var bytes = leftover
        if !stash.isEmpty {
            bytes += stash.readableBytesArray()
            stash.clear()
        }
        let environment = pool?.environment ?? owner?.environment
        pool?.connectionClosed(id)
        pool = nil
        streamEvents.target = nil
        let connection = UpgradedConnection(stream: stream, leftover: bytes)
        connection.environment = environment
        return connection
    }

    /// Closes the socket and tells the pool; idempotent.
    func close() {
        guard !isClosed else { return }
        isClosed = true
        if active != nil { failActive(.connectionLost(nil)) }
        closeAndTellPool()
    }

    private func closeAndTellPool() {
        cancelTimeout()
        poolIdleTimer.cancel()
        stream.close()
        pool?.connectionClosed(id)
        pool = nil
        streamEvents.target = nil
    }

    // MARK: Timers

    private func armTimeout(_ timeout: Duration, deadline: MonotonicInstant?) {
        var first = MonotonicInstant.now + timeout
        if let deadline { first = min(first, deadline) }
        if timeoutTimer != nil, let fires = timeoutTimerFires, fires <= first { return }
        cancelTimeout()
        // Strong captures, here and below: the close cancels the timer (see StreamEvents).
        timeoutTimer = loop.scheduleTimer(at: first) { [self] in timeoutFired() }
        timeoutTimerFires = first
    }

    /// Checks the active exchange, whichever armed the timer: re-arms for the time left since
    /// its last byte (busy exchanges cost no timer work per read), or times it out.
    private func timeoutFired() {
        timeoutTimer = nil
        guard let current = active else { return }
        let timeout = current.exchange.request.idleTimeout
        let now = MonotonicInstant.now
        if let deadline = current.exchange.request.deadline, now >= deadline {
            failActive(.timedOut)
            close()
            return
        }
        let silent = now - current.lastActivity
        if current.readingPaused || silent < timeout {
            var remaining = current.readingPaused ? timeout : timeout - silent
            if let deadline = current.exchange.request.deadline { remaining = min(remaining, deadline - now) }
            timeoutTimerFires = now + remaining
            timeoutTimer = loop.scheduleTimer(at: now + remaining) { [self] in timeoutFired() }
            return
        }
        failActive(.timedOut)
        close()
    }

    private func cancelTimeout() {
        if let timeoutTimer { loop.cancelTimer(timeoutTimer) }
        timeoutTimer = nil
    }

    /// Starts the pool's idle timer for this connection.
    func schedulePoolIdleTimer(_ delay: Duration) {
        poolIdleTimer.start(after: delay)
    }

    func cancelPoolIdleTimer() {
        poolIdleTimer.stop()
    }
}

/// A 101 Switching Protocols answered a plain HTTP exchange.
struct UnexpectedUpgradeError: RemoteProtocolError {
    var description: String { "unexpected 101 Switching Protocols response" }
}

extension HTTP1Connection {
    /// The stream's delegate in the connection's place.
    ///
    /// A stream holds its delegate weakly, and any weak reference to an object gives it a side
    /// table, after which every retain and release of it takes the runtime's slow path: about
    /// eight of each a W1 request for the connection, which the pool, its handle and the
    /// exchange retain. So the stream holds this small object weakly instead, and it holds the
    /// connection strongly until the connection closes or hands its stream off, which sets
    /// `target` to nil and ends that cycle; an event after that is dropped, never delivered to
    /// a connection that is gone. Nothing else refers to the connection weakly: its timers hold
    /// it strongly until they fire or the close cancels them.
    final class StreamEvents: StreamEventsForwarder {
        @exclusivity(unchecked) var target: HTTP1Connection?

        init(_ connection: HTTP1Connection) {
            target = connection
        }
    }
}
