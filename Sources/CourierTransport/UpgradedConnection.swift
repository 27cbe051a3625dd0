import CourierCore
import CourierReactor
import CourierTLS
import Foundation

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

/// A connection that is its owner's byte stream, TCP or TLS, and no HTTP connection: one that
/// left HTTP after a 101 (RFC 9110 section 15.2.2), with the bytes that followed the 101 in the
/// same read, or one opened for a stream task (``HTTPTransport/openConnection(host:port:proxy:owner:completion:)``).
/// It belongs to no pool; its owner closes it. Confined to its event loop: call everything
/// there (``loop``).
public final class UpgradedConnection: TransportStreamDelegate, @unchecked Sendable {
    public let loop: EventLoop
    private var stream: TransportStream
    /// What a TLS handshake started later needs (trust roots, session cache, security delegate).
    var environment: TransportEnvironment?
    /// ``closeWrite()`` was asked for: the FIN goes once the queued bytes have drained.
    private var writeClosing = false
    private(set) public var isWriteClosed = false
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
        guard !isClosed, !writeClosing else { return }
        stream.write(bytes)
    }

    /// True once TLS runs on the connection.
    public var isSecure: Bool { stream.tls != nil }

    /// Ends this side's bytes once the queued ones are sent (close_notify first on TLS, then
    /// FIN); reading goes on. ``isWriteClosed`` turns true when the FIN is sent.
    public func closeWrite() {
        loop.assertInEventLoop()
        guard !isClosed, !writeClosing else { return }
        writeClosing = true
        stream.finishWriting()
        shutdownWriteIfDrained()
    }

    private func shutdownWriteIfDrained() {
        guard writeClosing, !isWriteClosed, !isClosed, stream.pendingWriteBytes == 0 else { return }
        isWriteClosed = true
        stream.shutdownWrite()
    }

    /// Starts TLS on a plain connection as a client of `host` (STARTTLS), with the transport's
    /// trust and client-certificate rules, its challenges naming `owner`. No ALPN is offered.
    /// Reading pauses for the handshake and resumes as before once it succeeds; on failure
    /// the connection is closed and the handler hears nothing more. `completion` runs on the loop.
    public func startTLS(
        host: String, port: UInt16, owner: (any ConnectionOwner)?, completion: @escaping (Result<Void, TransportError>) -> Void
    ) {
        loop.assertInEventLoop()
        guard !isClosed, !writeClosing, let plain = stream as? PlainStream, let environment else {
            completion(.failure(.localProtocol(StartTLSRefusal())))
            return
        }
        let origin = Origin(scheme: .https, host: host, port: port)
        let engine: TLSEngine
        do throws(TLSError) {
            engine = try TLSEngine(
                context: environment.tlsContext(), role: .client(serverName: host),
                verificationTime: Int64(Date().timeIntervalSince1970),
                session: environment.sessionCache.session(for: TLSStream.sessionKey(origin)), applicationProtocols: []
            )
        } catch {
            completion(.failure(.dial(.tls(error))))
            return
        }
        let tls = TLSStream(
            channel: plain.channel, engine: engine, origin: origin, sessionCache: environment.sessionCache,
            securityDelegate: environment.securityDelegate, exchangeForChallenge: { nil }, owner: owner
        )
        plain.delegate = nil
        stream = tls
        tls.startHandshake(deadline: .now + environment.connectTimeout) { [self] result in
            switch result {
            case .success:
                guard !isClosed else { return }
                tls.delegate = self
                completion(.success(()))
            case .failure(let failure):
                // The stream closed its channel.
                isClosed = true
                handler = nil
                completion(.failure(.dial(failure)))
            }
        }
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
        shutdownWriteIfDrained()
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

/// ``UpgradedConnection/startTLS(host:port:owner:completion:)`` on a connection that is closed,
/// closing, TLS already, or made without a transport.
struct StartTLSRefusal: LocalProtocolError {
    var description: String { "TLS cannot start on this connection: it is closed, its writing is closed, or it is TLS already" }
}
