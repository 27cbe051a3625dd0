import CourierReactor

/// Hears what happens on an ``UpgradedConnection``; called on its loop, one call at a time.
public protocol UpgradedConnectionHandler: AnyObject {
    /// Bytes arrived, lent for the call.
    func connection(_ connection: UpgradedConnection, didRead bytes: UnsafeRawBufferPointer)
    /// The peer finished sending; `cleanly` is false when TLS ended without close_notify.
    func connectionDidReadEOF(_ connection: UpgradedConnection, cleanly: Bool)
    /// Everything written has been handed to the kernel.
    func connectionDidDrainWrites(_ connection: UpgradedConnection)
    /// The connection failed; it is closed.
    func connection(_ connection: UpgradedConnection, didFail error: TransportError)
}

/// A connection that left HTTP after a 101 (RFC 9110 section 15.2.2): the byte stream, TCP or
/// TLS, now the caller's, with the bytes that followed the 101 in the same read. It belongs to
/// no pool; its owner closes it. Confined to its event loop: call everything there (``loop``).
public final class UpgradedConnection: TransportStreamDelegate, @unchecked Sendable {
    public let loop: EventLoop
    private let stream: TransportStream
    /// Read before a handler was there to take them: the bytes after the 101, then whatever
    /// came until ``start(_:)``.
    private var early: [UInt8]
    private var earlyEnd: (cleanly: Bool, error: TransportError?)?
    private weak var handler: UpgradedConnectionHandler?
    private var started = false
    private(set) public var isClosed = false

    init(stream: TransportStream, leftover: [UInt8]) {
        self.loop = stream.loop
        self.stream = stream
        self.early = leftover
        stream.delegate = self
        // Nothing more is read until a handler takes the connection.
        stream.pauseReading()
    }

    /// Hands the connection to `handler` (held weakly: its owner keeps both alive): the bytes
    /// read so far come first, then reading goes on.
    public func start(_ handler: UpgradedConnectionHandler) {
        loop.assertInEventLoop()
        guard !started else { return }
        started = true
        self.handler = handler
        if !early.isEmpty {
            let bytes = early
            early = []
            bytes.withUnsafeBytes { handler.connection(self, didRead: $0) }
        }
        if let end = earlyEnd {
            earlyEnd = nil
            if let error = end.error {
                handler.connection(self, didFail: error)
            } else {
                handler.connectionDidReadEOF(self, cleanly: end.cleanly)
            }
            return
        }
        if !isClosed { stream.resumeReading() }
    }

    /// Queues `bytes` for sending.
    public func write(_ bytes: UnsafeRawBufferPointer) {
        loop.assertInEventLoop()
        guard !isClosed else { return }
        stream.write([bytes])
    }

    /// Bytes queued and not yet handed to the kernel.
    public var pendingWriteBytes: Int { stream.pendingWriteBytes }

    /// Stops reading (back-pressure: nobody takes what arrives).
    public func pauseReading() {
        guard !isClosed else { return }
        stream.pauseReading()
    }

    public func resumeReading() {
        guard !isClosed, started else { return }
        stream.resumeReading()
    }

    /// Closes the connection (with close_notify on TLS); no handler call follows.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        handler = nil
        stream.close()
    }

    // MARK: TransportStreamDelegate

    func streamDidRead(_ bytes: UnsafeRawBufferPointer) {
        guard started, let handler else {
            early.append(contentsOf: bytes)
            return
        }
        handler.connection(self, didRead: bytes)
    }

    func streamDidReadEOF(cleanly: Bool) {
        guard started, let handler else {
            earlyEnd = (cleanly, nil)
            return
        }
        handler.connectionDidReadEOF(self, cleanly: cleanly)
    }

    func streamDidDrainWrites() {
        guard started, let handler else { return }
        handler.connectionDidDrainWrites(self)
    }

    func streamDidFail(_ error: TransportError) {
        isClosed = true
        guard started, let handler else {
            earlyEnd = (false, error)
            return
        }
        self.handler = nil
        handler.connection(self, didFail: error)
    }
}
