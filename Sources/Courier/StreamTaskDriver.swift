import CourierCore
import CourierPolicies
import CourierSync
import CourierTransport
import Foundation

/// Carries one stream task: its connection (``UpgradedConnection``, opened by the transport)
/// and the queue of what the caller asked for. Callers' calls come from any thread and land in
/// an inbox under `shared`; everything else is confined to the connection's loop, where the
/// inbox is drained and the reads, writes and turns (TLS, closing, capturing) are served in order.
final class StreamTaskDriver: UpgradedConnectionHandler, ConnectionOwner, @unchecked Sendable {
    typealias ReadCompletion = @Sendable (Result<(Data, Bool), any Error>) -> Void
    typealias WriteCompletion = @Sendable ((any Error)?) -> Void

    /// A turn that waits for what was asked before it.
    enum Turn {
        /// TLS, once the writes before it are sent.
        case startTLS
        /// close_notify and FIN, once the writes before it are sent.
        case closeWrite
        /// Reading stops, once the reads before it are done.
        case closeRead
        /// The streams take over, once the reads and writes before it are done.
        case capture
    }

    fileprivate enum Operation {
        case read(id: Int, minimum: Int, maximum: Int, completion: ReadCompletion)
        case write(id: Int, data: Data, completion: WriteCompletion)
        case turn(Turn)
    }

    private enum Phase {
        case idle
        case connecting
        case open(UpgradedConnection)
        case ended
    }

    private struct Shared {
        var phase = Phase.idle
        var inbox: [Operation] = []
        var nextID = 1
        /// A drain of the inbox is queued on the loop.
        var drainQueued = false
        /// Why operations fail from now on.
        var failure: (any Error)?
        /// The task has completed (or its streams were captured): its own calls fail.
        var taskEnded = false
        var cancelled = false
    }

    private struct PendingRead {
        var id: Int
        var minimum: Int
        var maximum: Int
        var completion: ReadCompletion
    }

    private struct HandedWrite {
        var id: Int
        /// The total handed to the connection once this write's bytes were.
        var end: Int64
        var completion: WriteCompletion
    }

    /// Unread bytes above which the socket is not read while no read waits.
    static let inboundHigh = 1 << 20
    /// Bytes queued in the connection above which further writes wait.
    static let outboundHigh = 256 << 10

    weak var task: URLSessionStreamTask?
    let session: URLSession
    /// The host and port, set when the task is made.
    var target: (host: String, port: Int) = ("", 0)
    private let shared = Mutex(Shared())
    /// Bytes read and not yet taken, for `hasBytesAvailable` off the loop.
    let availableBytes = Atomic<Int>(0)
    let sawEndOfStream = Atomic<Bool>(false)

    // Loop-confined.
    private var connection: UpgradedConnection?
    private var inbound: [UInt8] = []
    private var inboundStart = 0
    private var inboundEnded = false
    private var readClosed = false
    private var writeClosing = false
    private var reads: [PendingRead] = []
    /// Writes not yet handed to the connection, and turns, in the order asked.
    private var outgoing: [Operation] = []
    private var handed: [HandedWrite] = []
    private var handedTotal: Int64 = 0
    private var tlsInProgress = false
    private var readClosedTold = false
    private var writeClosedTold = false
    private var readingPaused = false
    /// The streams that took the connection over.
    private weak var capturedInput: StreamTaskInputStream?
    private weak var capturedOutput: StreamTaskOutputStream?
    private var captured = false

    init(task: URLSessionStreamTask, session: URLSession) {
        self.task = task
        self.session = session
    }

    // MARK: Calls from any thread

    func open() {
        let proceed = shared.withLock { shared -> Bool in
            guard case .idle = shared.phase, !shared.cancelled else { return false }
            shared.phase = .connecting
            return true
        }
        guard proceed else { return }
        let (host, port) = target
        guard !host.isEmpty, (1...65535).contains(port) else {
            end(URLError.courier(.badURL, "A stream task needs a host name and a port from 1 to 65535 (got \"\(host)\", \(port)).", url: nil))
            return
        }
        let proxy: ProxyServer?
        do throws(ProxyConfigurationError) {
            proxy = session.mayUseProxy ? try session.proxySelection.proxy(scheme: "https", host: host, port: UInt16(port)) : nil
        } catch {
            end(URLError.courier(.unsupportedURL, "The configured proxy cannot be used: \(error).", url: nil))
            return
        }
        session.loader.openConnection(host: host, port: UInt16(port), proxy: proxy, owner: self) { [self] result in
            switch result {
            case .success(let connection):
                let keep = shared.withLock { shared -> Bool in
                    guard case .connecting = shared.phase else { return false }
                    shared.phase = .open(connection)
                    shared.drainQueued = true
                    return true
                }
                guard keep else {
                    connection.close()
                    return
                }
                self.connection = connection
                connection.start(self)
                drainInbox()
            case .failure(let error):
                end(URLError.from(error, url: nil))
            }
        }
    }

    /// Takes over a connection that left HTTP (`.becomeStream`); called on its loop.
    func adopt(_ connection: UpgradedConnection, host: String, port: Int) {
        target = (host, port)
        shared.withLock { shared in
            shared.phase = .open(connection)
            shared.drainQueued = true
        }
        self.connection = connection
        connection.start(self)
        drainInbox()
    }

    func read(minimum: Int, maximum: Int, timeout: TimeInterval, completion: @escaping ReadCompletion, fromStreams: Bool = false) {
        submit(timeout: timeout, fromStreams: fromStreams) { id in
            .read(id: id, minimum: max(1, minimum), maximum: max(1, maximum, minimum), completion: completion)
        } failed: { error in
            completion(.failure(error))
        }
    }

    func write(_ data: Data, timeout: TimeInterval, completion: @escaping WriteCompletion, fromStreams: Bool = false) {
        submit(timeout: timeout, fromStreams: fromStreams) { id in
            .write(id: id, data: data, completion: completion)
        } failed: { error in
            completion(error)
        }
    }

    func enqueue(_ turn: Turn, fromStreams: Bool = false) {
        submit(timeout: 0, fromStreams: fromStreams) { _ in .turn(turn) } failed: { _ in }
    }

    func cancel() {
        let connection = shared.withLock { shared -> UpgradedConnection? in
            shared.cancelled = true
            if case .open(let connection) = shared.phase { return connection }
            return nil
        }
        let error = URLError.courier(.cancelled, "cancelled", url: nil)
        guard let connection else {
            end(error)
            return
        }
        connection.loop.execute { [self] in fail(error) }
    }

    private func submit(
        timeout: TimeInterval, fromStreams: Bool, make: (Int) -> Operation, failed: @escaping @Sendable (any Error) -> Void
    ) {
        var refused: Operation?
        var failure: (any Error)?
        var id = 0
        let loop = shared.withLock { shared -> EventLoopHandle? in
            id = shared.nextID
            shared.nextID += 1
            let operation = make(id)
            if let ended = shared.failure {
                failure = ended
                return nil
            }
            if shared.taskEnded && !fromStreams {
                refused = operation
                return nil
            }
            shared.inbox.append(operation)
            guard case .open(let connection) = shared.phase, !shared.drainQueued else { return nil }
            shared.drainQueued = true
            return EventLoopHandle(connection: connection)
        }
        if let failure {
            failed(failure)
            return
        }
        if let refused {
            Self.refuseAfterClose(refused)
            return
        }
        if timeout > 0 {
            let operation = id
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [weak self] in self?.timeOut(operation) }
        }
        loop?.connection.loop.execute { [self] in drainInbox() }
    }

    /// What a call gets once the task closed cleanly: reads are at the end, writes have nowhere to go.
    private static func refuseAfterClose(_ operation: Operation) {
        switch operation {
        case .read(_, _, _, let completion): completion(.success((Data(), true)))
        case .write(_, _, let completion): completion(POSIXError(.EPIPE))
        case .turn: break
        }
    }

    /// An operation's time ran out: it fails, unless it is done or handed on.
    private func timeOut(_ id: Int) {
        let timedOut = URLError.courier(.timedOut, "The stream task's read or write timed out.", url: nil)
        let (removed, connection) = shared.withLock { shared -> (Operation?, UpgradedConnection?) in
            if let index = shared.inbox.firstIndex(where: { $0.id == id }) {
                return (shared.inbox.remove(at: index), nil)
            }
            if case .open(let connection) = shared.phase { return (nil, connection) }
            return (nil, nil)
        }
        if let removed {
            Self.fail(removed, with: timedOut)
            return
        }
        connection?.loop.execute { [self] in
            if let index = reads.firstIndex(where: { $0.id == id }) {
                reads.remove(at: index).completion(.failure(timedOut))
            } else if let index = outgoing.firstIndex(where: { $0.id == id }) {
                Self.fail(outgoing.remove(at: index), with: timedOut)
            } else if let index = handed.firstIndex(where: { $0.id == id }) {
                // Its bytes are queued and still go; the caller stops waiting for them.
                handed.remove(at: index).completion(timedOut)
            }
            process()
        }
    }

    // MARK: On the loop

    private func drainInbox() {
        let taken = shared.withLock { shared -> [Operation] in
            shared.drainQueued = false
            defer { shared.inbox = [] }
            return shared.inbox
        }
        for operation in taken {
            switch operation {
            case .read(let id, let minimum, let maximum, let completion):
                if readClosed || (inboundEnded && inboundCount == 0 && reads.isEmpty) {
                    completion(.success((Data(), true)))
                } else {
                    reads.append(PendingRead(id: id, minimum: minimum, maximum: maximum, completion: completion))
                }
            case .write, .turn:
                outgoing.append(operation)
            }
        }
        process()
    }

    private var inboundCount: Int { inbound.count - inboundStart }

    /// Serves what can be served now, in order.
    private func process() {
        guard let connection, !connection.isClosed else { return }
        serveReads()
        turns: while let next = outgoing.first {
            switch next {
            case .read:
                outgoing.removeFirst()
            case .write(let id, let data, let completion):
                if writeClosing {
                    outgoing.removeFirst()
                    completion(POSIXError(.EPIPE))
                    continue
                }
                guard !tlsInProgress, connection.pendingWriteBytes < Self.outboundHigh else { break turns }
                outgoing.removeFirst()
                data.withUnsafeBytes { connection.write($0) }
                handedTotal += Int64(data.count)
                handed.append(HandedWrite(id: id, end: handedTotal, completion: completion))
            case .turn(let turn):
                guard !tlsInProgress else { break turns }
                switch turn {
                case .startTLS:
                    guard handed.isEmpty else { break turns }
                    outgoing.removeFirst()
                    startTLS(on: connection)
                    break turns
                case .closeWrite:
                    outgoing.removeFirst()
                    writeClosing = true
                    connection.closeWrite()
                case .closeRead:
                    guard reads.isEmpty else { break turns }
                    outgoing.removeFirst()
                    closeReading()
                case .capture:
                    guard handed.isEmpty, reads.isEmpty else { break turns }
                    outgoing.removeFirst()
                    capture()
                }
            }
        }
        completeSentWrites(on: connection)
        if writeClosing, connection.isWriteClosed, !writeClosedTold {
            writeClosedTold = true
            tell { delegate, session, task in delegate.urlSession(session, writeClosedFor: task) }
        }
        updateReading(on: connection)
        completeIfClosed()
    }

    private func serveReads() {
        while let read = reads.first {
            let available = inboundCount
            let atEnd = inboundEnded || readClosed
            guard available >= read.minimum || atEnd else { break }
            let count = min(available, read.maximum)
            let data = Data(inbound[inboundStart..<(inboundStart + count)])
            inboundStart += count
            if inboundStart == inbound.count {
                inbound.removeAll(keepingCapacity: inbound.capacity <= Self.inboundHigh)
                inboundStart = 0
            } else if inboundStart > inbound.count / 2 {
                inbound.removeFirst(inboundStart)
                inboundStart = 0
            }
            availableBytes.store(inboundCount, ordering: .relaxed)
            reads.removeFirst()
            read.completion(.success((data, atEnd && inboundCount == 0)))
        }
    }

    private func completeSentWrites(on connection: UpgradedConnection) {
        // TLS queues more bytes than it was given: counting the queue against the plaintext
        // only ever completes writes late, never early.
        let sent = handedTotal - Int64(connection.pendingWriteBytes)
        while let first = handed.first, first.end <= sent {
            handed.removeFirst()
            first.completion(nil)
        }
    }

    private func updateReading(on connection: UpgradedConnection) {
        let full = reads.isEmpty && inboundCount >= Self.inboundHigh
        if full && !readingPaused {
            readingPaused = true
            connection.pauseReading()
        } else if !full && readingPaused && !readClosed {
            readingPaused = false
            connection.resumeReading()
        }
    }

    private func startTLS(on connection: UpgradedConnection) {
        tlsInProgress = true
        connection.startTLS(host: target.host, port: UInt16(target.port), owner: self) { [self] result in
            tlsInProgress = false
            switch result {
            case .success: process()
            case .failure(let error): fail(URLError.from(error, url: nil))
            }
        }
    }

    private func closeReading() {
        guard !readClosed else { return }
        readClosed = true
        inbound = []
        inboundStart = 0
        availableBytes.store(0, ordering: .relaxed)
        connection?.pauseReading()
        tellReadClosed()
    }

    private func tellReadClosed() {
        guard !readClosedTold else { return }
        readClosedTold = true
        tell { delegate, session, task in delegate.urlSession(session, readClosedFor: task) }
    }

    /// Both directions closed, nothing left to serve: the task completes and the connection closes.
    private func completeIfClosed() {
        guard !captured, inboundEnded || readClosed, inboundCount == 0, writeClosedTold,
              reads.isEmpty, outgoing.isEmpty, handed.isEmpty else { return }
        connection?.close()
        end(nil)
    }

    /// Fails what is pending, closes the connection, and ends the task with `error`.
    private func fail(_ error: any Error) {
        shared.withLock { shared in
            if shared.failure == nil { shared.failure = error }
        }
        let pendingReads = reads
        let pendingOutgoing = outgoing
        let pendingHanded = handed
        reads = []
        outgoing = []
        handed = []
        connection?.close()
        for read in pendingReads { read.completion(.failure(error)) }
        for operation in pendingOutgoing { Self.fail(operation, with: error) }
        for write in pendingHanded { write.completion(error) }
        capturedInput?.connectionEnded(error)
        capturedOutput?.connectionEnded(error)
        end(error)
    }

    private static func fail(_ operation: Operation, with error: any Error) {
        switch operation {
        case .read(_, _, _, let completion): completion(.failure(error))
        case .write(_, _, let completion): completion(error)
        case .turn: break
        }
    }

    // MARK: Capturing

    private func capture() {
        guard let task else { return }
        captured = true
        let input = StreamTaskInputStream(driver: self)
        let output = StreamTaskOutputStream(driver: self)
        capturedInput = input
        capturedOutput = output
        if inboundEnded { input.endArrived() }
        let session = self.session
        let delegate = streamDelegate
        let streams = CapturedStreams(input: input, output: output)
        session.delegateQueue.addOperation {
            delegate?.urlSession(session, streamTask: task, didBecome: streams.input, outputStream: streams.output)
        }
        end(nil)
    }

    /// The captured input stream was closed or released: the task's reading ends with it.
    func streamsReleased() {
        shared.withLock { shared in
            if case .open(let connection) = shared.phase { connection.loop.execute { [self] in releaseIfUnused() } }
        }
    }

    private func releaseIfUnused() {
        guard captured, capturedInput == nil, capturedOutput == nil else { return }
        connection?.close()
        shared.withLock { $0.phase = .ended }
    }

    // MARK: UpgradedConnectionHandler

    func connection(_ connection: UpgradedConnection, didRead bytes: UnsafeRawBufferPointer) {
        guard !readClosed else { return }
        inbound.append(contentsOf: bytes)
        availableBytes.store(inboundCount, ordering: .relaxed)
        capturedInput?.bytesArrived()
        process()
    }

    func connectionDidReadEOF(_ connection: UpgradedConnection, cleanly: Bool) {
        inboundEnded = true
        sawEndOfStream.store(true, ordering: .relaxed)
        capturedInput?.endArrived()
        tellReadClosed()
        process()
    }

    func connectionDidDrainWrites(_ connection: UpgradedConnection) {
        process()
    }

    func connection(_ connection: UpgradedConnection, didFail error: TransportError) {
        fail(URLError.from(error, url: nil))
    }

    // MARK: Telling

    private var streamDelegate: URLSessionStreamDelegate? {
        (task?.delegate as? URLSessionStreamDelegate) ?? (session.delegate as? URLSessionStreamDelegate)
    }

    private func tell(_ call: @escaping @Sendable (URLSessionStreamDelegate, URLSession, URLSessionStreamTask) -> Void) {
        guard !captured, let task, let delegate = streamDelegate else { return }
        let session = self.session
        session.delegateQueue.addOperation { call(delegate, session, task) }
    }

    /// Completes the task once: with nil (closed, or captured) or the error.
    private func end(_ error: (any Error)?) {
        let (first, waiting) = shared.withLock { shared -> (Bool, [Operation]) in
            guard !shared.taskEnded else { return (false, []) }
            shared.taskEnded = true
            if !captured { shared.phase = .ended }
            if let error, shared.failure == nil { shared.failure = error }
            // What never reached the loop (the connection failed, or never came) ends here.
            defer { if !captured { shared.inbox = [] } }
            return (true, captured ? [] : shared.inbox)
        }
        for operation in waiting {
            if let error { Self.fail(operation, with: error) } else { Self.refuseAfterClose(operation) }
        }
        guard first, let task else { return }
        task.reportCompletion(error)
    }
}

/// The streams carried to the delegate queue.
private struct CapturedStreams: @unchecked Sendable {
    let input: InputStream
    let output: OutputStream
}

/// A connection carried across threads to reach its loop.
private struct EventLoopHandle: @unchecked Sendable {
    let connection: UpgradedConnection
}

extension StreamTaskDriver.Operation {
    var id: Int {
        switch self {
        case .read(let id, _, _, _), .write(let id, _, _): return id
        case .turn: return 0
        }
    }
}
