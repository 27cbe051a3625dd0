#if canImport(Glibc)
import Glibc
#endif
import CCourierOpenSSL
import CourierCore

/// A resumable TLS session (an OpenSSL `SSL_SESSION`), kept per origin by the transport.
public final class TLSSession: @unchecked Sendable {
    let session: OpaquePointer

    init(taking session: OpaquePointer) {
        self.session = session
    }

    deinit {
        SSL_SESSION_free(session)
    }
}

/// The methods of every engine's input and output BIOs (see `courier_input_*` and
/// `courier_output_*` in the OpenSSL shim), made on first use (thread-safely, as every Swift
/// global). OpenSSL only reads them.
nonisolated(unsafe) private let inputMethod: OpaquePointer? = courier_input_new_method()
nonisolated(unsafe) private let outputMethod: OpaquePointer? = courier_output_new_method()

/// One TLS connection as a sans-IO engine over in-memory BIOs: ciphertext from the network
/// is fed in, plaintext is read out; plaintext is written in, ciphertext is drained out for the
/// network. It never touches a file descriptor and never reads the clock: the verification
/// time is an argument.
///
/// Server certificates are verified during the handshake (chain to the context's roots, validity
/// at the given time, host name or IP), but a failure does not abort it: the verdict is kept in
/// ``verificationResult`` for the transport to act on (and for a delegate to overrule, as
/// Apple's server-trust challenge allows). No application data should be written before that
/// decision.
///
/// Handshake states: in progress → (client certificate requested → in progress) → established,
/// or failed. Confined to one thread at a time.
public final class TLSEngine {
    public enum Role: Sendable {
        /// A client connecting to `serverName` (sent as SNI unless it is an IP address, and
        /// checked against the certificate).
        case client(serverName: String)
        case server
    }

    /// Where the handshake stands.
    public enum HandshakeStatus: Equatable {
        /// More ciphertext is needed (drain the output first).
        case inProgress
        /// The server asked for a client certificate; answer with ``provideClientIdentity(_:)``.
        /// The DER distinguished names of the issuers it accepts, when it listed any.
        case needsClientIdentity(acceptableIssuers: [[UInt8]])
        /// Done; application data may flow once the peer is trusted.
        case established
        case failed(TLSError)
    }

    /// What a read found.
    public enum ReadOutcome: Equatable {
        /// This many plaintext bytes were read.
        case bytes(Int)
        /// No plaintext until more ciphertext arrives.
        case needsMoreInput
        /// The peer closed: `clean` when it sent close_notify first.
        case closed(clean: Bool)
        case failed(TLSError)
    }

    enum ClientIdentityState {
        case notRequested
        case requested(acceptableIssuers: [[UInt8]])
        case provided(TLSIdentity)
        case declined
    }

    let ssl: OpaquePointer
    private let readBIO: OpaquePointer
    /// The two BIOs' own state, read here without a call into OpenSSL (they live as long as
    /// the `SSL`, which owns the BIOs; the output BIO is reached only through its state).
    private let input: UnsafePointer<courier_input_state>
    private let output: UnsafeMutablePointer<courier_output_state>
    private let context: TLSContext
    public let role: Role
    /// The name or address the server's certificate is checked against (client role), and the
    /// time it is checked at.
    let verifiedName: String
    let verificationTime: Int64
    private var clientIdentity = ClientIdentityState.notRequested
    private var newSession: OpaquePointer?
    private var failure: TLSError?
    public private(set) var isHandshakeComplete = false

    /// An engine for one connection. `verificationTime` is seconds since 1970; `session`
    /// resumes an earlier session with the same server; `applicationProtocols`, when given,
    /// replaces the context's ALPN list for this connection (a client that needs HTTP/1.1).
    public init(context: TLSContext, role: Role, verificationTime: Int64, session: TLSSession? = nil, applicationProtocols: [String]? = nil) throws(TLSError) {
        // The BIOs are Courier's own (courier_input_*, courier_output_*): OpenSSL's memory BIO
        // would zero the space for every byte received before copying it in, and would cost
        // each record sent a copy out and control calls. An empty input means "wait for more",
        // not end of stream, until feedEndOfInput().
        guard let ssl = SSL_new(context.context) else {
            throw .invalidConfiguration("cannot create a TLS connection: \(OpenSSLErrors.drain().text)")
        }
        guard let inputMethod, let readBIO = BIO_new(inputMethod) else {
            let text = OpenSSLErrors.drain().text
            SSL_free(ssl)
            throw .invalidConfiguration("cannot create a TLS connection's input buffer: \(text)")
        }
        guard let outputMethod, let writeBIO = BIO_new(outputMethod) else {
            let text = OpenSSLErrors.drain().text
            BIO_free(readBIO)
            SSL_free(ssl)
            throw .invalidConfiguration("cannot create a TLS connection's output buffer: \(text)")
        }
        SSL_set_bio(ssl, readBIO, writeBIO)
        self.ssl = ssl
        self.readBIO = readBIO
        // Both BIOs' create callbacks set their state, or BIO_new failed above.
        self.input = courier_input_state_of(readBIO)
        self.output = courier_output_state_of(writeBIO)
        self.context = context
        self.role = role
        self.verificationTime = verificationTime
        if case .client(let serverName) = role {
            verifiedName = serverName.hasPrefix("[") ? String(serverName.dropFirst().dropLast()) : serverName
        } else {
            verifiedName = ""
        }
        SSL_set_ex_data(ssl, engineExDataIndex, Unmanaged.passUnretained(self).toOpaque())
        switch role {
        case .client:
            SSL_set_connect_state(ssl)
            if SocketAddressCheck.isIPAddress(verifiedName) == false {
                _ = verifiedName.withCString { courier_SSL_set_tlsext_host_name(ssl, $0) }
            }
            let parameters = SSL_get0_param(ssl)
            X509_VERIFY_PARAM_set_time(parameters, time_t(verificationTime))
            TrustEvaluation.configureHostCheck(parameters, verifiedName)
            SSL_set_verify(ssl, SSL_VERIFY_NONE, nil)
            if let session { SSL_set_session(ssl, session.session) }
            if let applicationProtocols {
                let wire = try TLSContext.alpnWire(applicationProtocols)
                // OpenSSL's ALPN setters return 0 on success.
                guard wire.withUnsafeBufferPointer({ SSL_set_alpn_protos(ssl, $0.baseAddress, UInt32($0.count)) }) == 0 else {
                    throw .invalidConfiguration("cannot set ALPN protocols")
                }
            }
        case .server:
            SSL_set_accept_state(ssl)
        }
        OpenSSLErrors.clear()
    }

    deinit {
        SSL_free(ssl)
        if let newSession { SSL_SESSION_free(newSession) }
    }

    /// The context's verification cache, for a client.
    var verificationCache: VerificationCache? { context.verificationCache }

    static func from(_ ssl: OpaquePointer) -> TLSEngine? {
        guard let raw = SSL_get_ex_data(ssl, engineExDataIndex) else { return nil }
        return Unmanaged<TLSEngine>.fromOpaque(raw).takeUnretainedValue()
    }

    // MARK: Bytes in and out

    /// Hands ciphertext from the network to the engine. Should memory run out, the bytes are
    /// dropped, and the connection fails as a stream with bytes missing does.
    public func feed(_ ciphertext: UnsafeRawBufferPointer) {
        guard ciphertext.count > 0, let bytes = ciphertext.baseAddress else { return }
        _ = courier_input_append(readBIO, bytes, ciphertext.count)
    }

    /// Room for at least `minimum` bytes of ciphertext after those the engine holds, for the
    /// network to read into: fed back to ``feed(_:)`` as they are, they are taken where they
    /// lie instead of being copied. Nil when memory ran out. Valid until the next call on
    /// the engine.
    public func receiveSpace(minimum: Int) -> UnsafeMutableRawBufferPointer? {
        var length = 0
        guard minimum > 0, let space = courier_input_space(readBIO, minimum, &length) else { return nil }
        return UnsafeMutableRawBufferPointer(start: space, count: length)
    }

    /// Tells the engine the network connection ended: reads then report the close.
    public func feedEndOfInput() {
        courier_input_end(readBIO)
    }

    /// True when ciphertext waits to be sent.
    public var hasOutput: Bool { output.pointee.length > 0 }

    /// Moves the ciphertext waiting to be sent into `buffer`.
    public func drainOutput(into buffer: inout ByteBuffer) {
        takeOutput { buffer.write($0) }
    }

    /// Hands the ciphertext waiting to be sent to `send`, where it lies, then forgets it:
    /// `send` must copy what it does not send at once, and the bytes are valid until it writes
    /// to the engine again (what it writes waits for the next call). Nothing is called when
    /// none waits.
    public func takeOutput<E: Error>(_ send: (UnsafeRawBufferPointer) throws(E) -> Void) throws(E) {
        let count = output.pointee.length
        guard count > 0 else { return }
        // Only what was handed over is forgotten, even when `send` throws: it was handed over.
        defer { courier_output_consume(output, count) }
        try send(UnsafeRawBufferPointer(start: output.pointee.bytes, count: count))
    }

    // MARK: Handshake

    /// Advances the handshake as far as the input allows.
    public func handshake() -> HandshakeStatus {
        if let failure { return .failed(failure) }
        if isHandshakeComplete { return .established }
        OpenSSLErrors.clear()
        let result = SSL_do_handshake(ssl)
        if result == 1 {
            isHandshakeComplete = true
            return .established
        }
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return .inProgress
        case SSL_ERROR_WANT_X509_LOOKUP:
            if case .requested(let issuers) = clientIdentity { return .needsClientIdentity(acceptableIssuers: issuers) }
            return .inProgress
        default:
            let error = classify(handshake: true)
            failure = error
            return .failed(error)
        }
    }

    /// Answers a client-certificate request: an identity to present, or nil to go on without.
    public func provideClientIdentity(_ identity: TLSIdentity?) {
        clientIdentity = identity.map { .provided($0) } ?? .declined
    }

    /// Called from OpenSSL's certificate callback.
    func clientCertificateRequested() -> Int32 {
        switch clientIdentity {
        case .notRequested:
            var issuers: [[UInt8]] = []
            if let names = SSL_get_client_CA_list(ssl) {
                for index in 0..<courier_sk_X509_NAME_num(names) {
                    if let name = courier_sk_X509_NAME_value(names, index) { issuers.append(TLSCertificate.encode(name)) }
                }
            }
            clientIdentity = .requested(acceptableIssuers: issuers)
            return -1
        case .requested:
            return -1
        case .declined:
            return 1
        case .provided(let identity):
            let chain = courier_sk_X509_new_null()
            for certificate in identity.intermediates { _ = courier_sk_X509_push(chain, certificate.x509) }
            let ok = SSL_use_cert_and_key(ssl, identity.certificate.x509, identity.privateKey.key, chain, 1)
            courier_sk_X509_free(chain)
            return ok == 1 ? 1 : 0
        }
    }

    func storeNewSession(_ session: OpaquePointer) {
        if let newSession { SSL_SESSION_free(newSession) }
        newSession = session
    }

    /// The newest session the server issued, for resuming later; taken once.
    public func takeNewSession() -> TLSSession? {
        guard let session = newSession else { return nil }
        newSession = nil
        return TLSSession(taking: session)
    }

    func selectApplicationProtocol(
        _ out: UnsafeMutablePointer<UnsafePointer<UInt8>?>, _ outLength: UnsafeMutablePointer<UInt8>,
        _ client: UnsafePointer<UInt8>, _ clientLength: UInt32
    ) -> Int32 {
        guard !context.alpnWire.isEmpty else { return SSL_TLSEXT_ERR_NOACK }
        // Walk our preferences in order; point into the client's list for the match.
        var ours = 0
        while ours < context.alpnWire.count {
            let length = Int(context.alpnWire[ours])
            let name = context.alpnWire[(ours + 1)..<(ours + 1 + length)]
            var theirs = 0
            while theirs < Int(clientLength) {
                let theirLength = Int(client[theirs])
                if theirLength == length && UnsafeBufferPointer(start: client + theirs + 1, count: theirLength).elementsEqual(name) {
                    out.pointee = UnsafePointer(client + theirs + 1)
                    outLength.pointee = UInt8(length)
                    return SSL_TLSEXT_ERR_OK
                }
                theirs += 1 + theirLength
            }
            ours += 1 + length
        }
        return SSL_TLSEXT_ERR_NOACK
    }

    // MARK: Application data

    /// Encrypts plaintext; the ciphertext is then drained with ``drainOutput(into:)``.
    public func write(_ plaintext: UnsafeRawBufferPointer) throws(TLSError) {
        if let failure { throw failure }
        var offset = 0
        while offset < plaintext.count {
            let chunk = min(plaintext.count - offset, Int(Int32.max))
            let written = SSL_write(ssl, plaintext.baseAddress! + offset, Int32(chunk))
            guard written > 0 else {
                let error = classify(handshake: false)
                failure = error
                throw error
            }
            offset += Int(written)
        }
    }

    /// Decrypts into `buffer` what the input holds.
    public func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadOutcome {
        if let failure { return .failed(failure) }
        OpenSSLErrors.clear()
        let count = SSL_read(ssl, buffer.baseAddress, Int32(min(buffer.count, Int(Int32.max))))
        if count > 0 { return .bytes(Int(count)) }
        switch SSL_get_error(ssl, count) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return .needsMoreInput
        case SSL_ERROR_ZERO_RETURN:
            return .closed(clean: true)
        case SSL_ERROR_SYSCALL:
            OpenSSLErrors.clear()
            return .closed(clean: false)
        default:
            let (text, reason) = OpenSSLErrors.drain()
            if reason == SSL_R_UNEXPECTED_EOF_WHILE_READING { return .closed(clean: false) }
            let error = classify(text: text, reason: reason, handshake: false)
            failure = error
            return .failed(error)
        }
    }

    /// True when anything received waits inside the engine: decrypted bytes or records
    /// taken into OpenSSL's buffers (SSL_has_pending), or bytes fed but not yet taken. False
    /// means a read can only answer that it needs more input.
    public var hasBufferedInput: Bool { input.pointee.end > input.pointee.start || SSL_has_pending(ssl) == 1 }

    /// Queues close_notify.
    public func close() {
        guard isHandshakeComplete else { return }
        _ = SSL_shutdown(ssl)
        OpenSSLErrors.clear()
    }

    // MARK: What was negotiated

    /// The ALPN protocol the server chose, if any.
    public var negotiatedApplicationProtocol: String? {
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    public var negotiatedVersion: TLSVersion? {
        TLSVersion(rawValue: UInt16(truncatingIfNeeded: SSL_version(ssl)))
    }

    /// The IANA number of the cipher suite.
    public var negotiatedCipherSuite: UInt16? {
        guard let cipher = SSL_get_current_cipher(ssl) else { return nil }
        return SSL_CIPHER_get_protocol_id(cipher)
    }

    /// OpenSSL's name of the cipher suite.
    public var negotiatedCipherName: String? {
        guard let cipher = SSL_get_current_cipher(ssl), let name = SSL_CIPHER_get_name(cipher) else { return nil }
        return String(cString: name)
    }

    /// True when an earlier session was resumed.
    public var isSessionResumed: Bool { SSL_session_reused(ssl) == 1 }

    /// The server's chain as it sent it, leaf first.
    public var peerCertificateChain: [TLSCertificate] {
        guard let chain = SSL_get_peer_cert_chain(ssl) else {
            if let leaf = SSL_get1_peer_certificate(ssl) { return [TLSCertificate(taking: leaf)] }
            return []
        }
        var certificates: [TLSCertificate] = []
        for index in 0..<courier_sk_X509_num(chain) {
            if let certificate = courier_sk_X509_value(chain, index) { certificates.append(TLSCertificate(retaining: certificate)) }
        }
        return certificates
    }

    /// The verdict of the handshake's certificate verification (client role).
    public var verificationResult: Result<Void, CertificateFailure> {
        guard SSL_get0_peer_certificate(ssl) != nil else { return .failure(.noCertificate) }
        let code = Int32(truncatingIfNeeded: SSL_get_verify_result(ssl))
        return code == X509_V_OK ? .success(()) : .failure(TrustEvaluation.failure(forVerifyCode: code))
    }

    // MARK: Errors

    private func classify(handshake: Bool) -> TLSError {
        let (text, reason) = OpenSSLErrors.drain()
        return classify(text: text, reason: reason, handshake: handshake)
    }

    /// Turns OpenSSL's reason into Courier's error, using what is known of client identities.
    private func classify(text: String, reason: Int32, handshake: Bool) -> TLSError {
        switch reason {
        case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
            return .clientCertificateRequired
        case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
            if case .declined = clientIdentity { return .clientCertificateRequired }
        case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE, SSL_R_TLSV1_ALERT_UNKNOWN_CA, SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN,
             SSL_R_TLSV1_ALERT_DECRYPT_ERROR, SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE, SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
            if case .provided = clientIdentity { return .clientCertificateRejected(text) }
        case SSL_R_NO_RENEGOTIATION, SSL_R_TLSV1_ALERT_NO_RENEGOTIATION:
            return .renegotiationRefused
        default:
            break
        }
        return handshake ? .handshakeFailed(text) : .protocolViolation(text)
    }
}

/// Tells IP literals from host names without a resolver.
enum SocketAddressCheck {
    static func isIPAddress(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }
}
