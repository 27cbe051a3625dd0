import CourierCore
import CourierHTTP1
import CourierReactor
import CourierSync
import CourierTransport
import DequeModule
import Dispatch

/// One HTTP/1.1 connection with up to `depth` requests pipelined on it (`-P`, as h2load's `-m`
/// does for HTTP/1.1): the requests go out back to back without waiting, the responses come
/// back in order, and each response lets one more request out.
///
/// It speaks HTTP/1.1 itself over a connection from ``HTTPTransport/openConnection(host:port:proxy:owner:completion:)``
/// (TLS started on it for https, without ALPN), with Courier's request encoder and response
/// parser: the transport's own connections send one request at a time. A server that closes
/// the connection (`Connection: close`, keepalive_requests, an idle close) leaves the requests
/// it did not answer to be sent again on a new connection; on a connection that answered none,
/// they count as failed, so that a server that answers nothing ends the run.
///
/// Everything but the counters is confined to the current connection's loop; between
/// connections nothing runs but the dial.
final class PipelineWorker: UpgradedConnectionHandler, LoadWorker, @unchecked Sendable {
    private struct Entry {
        var intended: MonotonicInstant
        var sent: MonotonicInstant
    }

    private let transport: HTTPTransport
    private let origin: Origin
    private let method: HTTPMethod
    private let requestBytes: [UInt8]
    private let depth: Int
    private let timeout: Duration
    private let plan: Plan
    private let finished: @Sendable () -> Void
    private let stats = Mutex(LoadStats())

    private var connection: UpgradedConnection?
    /// Bumped for every connection, so that a timer of an earlier one does nothing.
    private var generation = 0
    private var parser = HTTP1ResponseParser()
    /// Sent and not yet answered, oldest first.
    private var outstanding = Deque<Entry>()
    /// Claimed requests to send on the next connection (the last one closed under them).
    private var pending: [MonotonicInstant] = []
    private var answeredOnConnection = 0
    private var pacer: Pacer
    private var pacingTimerArmed = false
    private var timeoutTimer: TimerID?
    private var exhausted = false
    private var reported = false

    init(
        transport: HTTPTransport, origin: Origin, head: HTTPRequestHead, body: [UInt8], depth: Int, timeout: Duration,
        pacer: Pacer, plan: Plan, finished: @escaping @Sendable () -> Void
    ) throws(HTTPFieldError) {
        self.transport = transport
        self.origin = origin
        self.method = head.method
        var buffer = ByteBuffer()
        let framing: HTTP1BodyFraming = body.isEmpty && !head.method.expectsRequestContent ? .none : .contentLength(Int64(body.count))
        try HTTP1RequestEncoder.encodeHead(head, framing: framing, into: &buffer)
        buffer.write(contentsOf: body)
        self.requestBytes = buffer.readableBytesArray()
        self.depth = depth
        self.timeout = timeout
        self.pacer = pacer
        self.plan = plan
        self.finished = finished
    }

    func start() { connect() }

    func snapshot() -> LoadStats { stats.withLock { $0 } }

    // MARK: Connections

    private func connect() {
        if pending.isEmpty && !exhausted && !claimNew(into: &pending, count: 1) { exhausted = true }
        if exhausted && pending.isEmpty {
            end()
            return
        }
        transport.openConnection(host: origin.host, port: origin.port, proxy: nil, owner: nil) { [self] result in
            switch result {
            case .success(let connection):
                guard origin.scheme == .https else {
                    ready(connection)
                    return
                }
                connection.startTLS(host: origin.host, port: origin.port, owner: nil) { [self] result in
                    switch result {
                    case .success: ready(connection)
                    case .failure(let error): dialFailed(error)
                    }
                }
            case .failure(let error):
                dialFailed(error)
            }
        }
    }

    /// The requests waiting for this connection fail with the dial; the next dial gets new ones.
    private func dialFailed(_ error: TransportError) {
        let failed = pending.count
        pending = []
        stats.withLock { $0.errors[LoadStats.kind(error), default: 0] += failed }
        connect()
    }

    private func ready(_ connection: UpgradedConnection) {
        self.connection = connection
        generation += 1
        parser = HTTP1ResponseParser()
        answeredOnConnection = 0
        stats.withLock { $0.connectionsOpened += 1 }
        connection.start(self)
        let now = MonotonicInstant.now
        let resent = pending
        pending = []
        for intended in resent { outstanding.append(Entry(intended: intended, sent: now)) }
        send(count: resent.count)
        fill()
        armTimeoutCheck()
    }

    /// Closes the connection. The requests it left unanswered are sent again on the next one,
    /// or, when it answered nothing or they timed out, fail as `kind` ("read" when the server
    /// simply closed).
    private func closeAndReconnect(failing kind: String?) {
        closeQuietly()
        let unanswered = outstanding.map(\.intended)
        outstanding.removeAll()
        if kind == "timeout" || answeredOnConnection == 0 {
            if !unanswered.isEmpty { stats.withLock { $0.errors[kind ?? "read", default: 0] += unanswered.count } }
        } else {
            pending = unanswered
        }
        connect()
    }

    private func end() {
        guard !reported else { return }
        reported = true
        finished()
    }

    // MARK: Requests

    /// Claims up to `count` new requests that are due, appending their intended starts; false
    /// once the plan has no more to give.
    private func claimNew(into list: inout [MonotonicInstant], count: Int) -> Bool {
        var claimed = 0
        var granted = true
        while claimed < count {
            guard let intended = pacer.take(now: .now) else { break }
            guard plan.claim() else {
                granted = false
                break
            }
            list.append(intended)
            claimed += 1
        }
        if claimed > 0 { stats.withLock { $0.started += claimed } }
        return granted
    }

    /// Sends as many new requests as the depth allows and are due; arms the pacing timer for
    /// the next one when it is not due yet.
    private func fill() {
        guard let connection else { return }
        var intended: [MonotonicInstant] = []
        if !exhausted && outstanding.count < depth {
            if !claimNew(into: &intended, count: depth - outstanding.count) { exhausted = true }
        }
        let now = MonotonicInstant.now
        for start in intended { outstanding.append(Entry(intended: start, sent: now)) }
        send(count: intended.count)
        if !exhausted && outstanding.count < depth && !pacingTimerArmed && pacer.interval != nil {
            // A dispatch timer, not the loop's: epoll_wait's millisecond resolution would add
            // up to a millisecond to every paced request's latency.
            pacingTimerArmed = true
            let current = generation
            let loop = connection.loop
            let delay = max(.zero, pacer.next - .now)
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(delay.nanoseconds)) { [self] in
                loop.execute { [self] in
                    guard generation == current else { return }
                    pacingTimerArmed = false
                    fill()
                }
            }
        }
        if exhausted && outstanding.isEmpty {
            closeQuietly()
            end()
        }
    }

    private func send(count: Int) {
        guard count > 0, let connection else { return }
        var batch: [UInt8] = []
        batch.reserveCapacity(requestBytes.count * count)
        for _ in 0..<count { batch.append(contentsOf: requestBytes) }
        batch.withUnsafeBytes { connection.write($0) }
        if parser.isIdle { parser.expectResponse(to: method) }
    }

    private func closeQuietly() {
        guard let connection else { return }
        if let timer = timeoutTimer { connection.loop.cancelTimer(timer) }
        pacingTimerArmed = false
        timeoutTimer = nil
        connection.close()
        self.connection = nil
    }

    /// Checks now and then that the oldest request in flight is younger than the timeout.
    private func armTimeoutCheck() {
        guard let connection else { return }
        let current = generation
        let period = min(timeout, .milliseconds(250))
        timeoutTimer = connection.loop.scheduleTimer(after: period) { [self] in
            guard generation == current, self.connection != nil else { return }
            timeoutTimer = nil
            if let oldest = outstanding.first, MonotonicInstant.now - oldest.sent >= timeout {
                closeAndReconnect(failing: "timeout")
            } else {
                armTimeoutCheck()
            }
        }
    }

    // MARK: UpgradedConnectionHandler

    func connection(_ connection: UpgradedConnection, didRead bytes: UnsafeRawBufferPointer) {
        var offset = 0
        var completed: [Entry] = []
        var received: Int64 = 0
        var statuses: [Int] = []
        var outcome: String?? = .none  // .some(nil): the server closes; .some(kind): failed
        let end = MonotonicInstant.now
        parsing: while true {
            if parser.isIdle {
                guard !outstanding.isEmpty else {
                    // Bytes that answer no request: the connection cannot be trusted.
                    if offset < bytes.count { outcome = .some("read") }
                    break
                }
                parser.expectResponse(to: method)
            }
            let step: HTTP1ParseStep
            do {
                step = try parser.next(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            } catch {
                outcome = .some("read")
                break
            }
            offset += step.consumed
            guard let event = step.event else { break }
            switch event {
            case .head(let head):
                statuses.append(head.status)
            case .informational:
                break
            case .body(let range):
                received += Int64(range.count)
            case .end:
                completed.append(outstanding.removeFirst())
                answeredOnConnection += 1
                if parser.connectionReuse != .keepAlive {
                    outcome = .some(nil)
                    break parsing
                }
            }
        }
        stats.withLock { stats in
            for status in statuses { stats.recordStatus(status) }
            stats.bytes += received
            stats.completed += completed.count
            for entry in completed { stats.record(latencyFrom: entry.intended, to: end) }
        }
        if case .some(let kind) = outcome {
            closeAndReconnect(failing: kind)
        } else {
            fill()
        }
    }

    func connectionDidReadEOF(_ connection: UpgradedConnection, cleanly: Bool) {
        if parser.isReadingUntilClose, case .end? = try? parser.finish() {
            let entry = outstanding.removeFirst()
            answeredOnConnection += 1
            stats.withLock {
                $0.completed += 1
                $0.record(latencyFrom: entry.intended, to: .now)
            }
        }
        closeAndReconnect(failing: nil)
    }

    func connectionDidDrainWrites(_ connection: UpgradedConnection) {}

    func connection(_ connection: UpgradedConnection, didFail error: TransportError) {
        closeAndReconnect(failing: LoadStats.kind(error))
    }
}
