import CCourierLinux
import CCourierOpenSSL

/// Settings shared by the TLS connections of one kind (an OpenSSL `SSL_CTX`).
public final class TLSContext: @unchecked Sendable {
    /// Which side of the handshake the connections play.
    public enum Role: Sendable {
        case client
        case server(identity: TLSIdentity)
    }

    /// What a server asks of clients' certificates.
    public enum ClientCertificatePolicy: Sendable {
        case none
        /// Ask; carry on without one.
        case request(acceptableIssuers: [TLSCertificate])
        /// Ask, and refuse the handshake without a certificate that verifies against these roots.
        case require(trustedIssuers: [TLSCertificate])
    }

    public struct Configuration: Sendable {
        /// Lowest version offered or accepted; TLS 1.2 by default.
        public var minimumVersion: TLSVersion = .tls1_2
        /// Highest version; nil means the highest OpenSSL supports.
        public var maximumVersion: TLSVersion?
        /// ALPN protocol names in preference order, e.g. ["h2", "http/1.1"].
        public var applicationProtocols: [String] = ["http/1.1"]
        /// Roots that server certificates are verified against (client role).
        public var trustRoots: TrustStore?
        /// Server role only.
        public var clientCertificatePolicy: ClientCertificatePolicy = .none

        public init() {}
    }

    let context: OpaquePointer
    public let role: Role
    public let configuration: Configuration
    /// ALPN protocols in wire format (length-prefixed names).
    let alpnWire: [UInt8]
    /// The chains this client context verified lately (nil for a server's).
    let verificationCache: VerificationCache?

    public init(role: Role, configuration: Configuration) throws(TLSError) {
        guard let method = role.isClient ? TLS_client_method() : TLS_server_method(),
              let context = SSL_CTX_new(method) else {
            throw .invalidConfiguration("cannot create an OpenSSL context: \(OpenSSLErrors.drain().text)")
        }
        self.context = context
        self.role = role
        self.configuration = configuration
        self.verificationCache = role.isClient ? VerificationCache() : nil
        do {
            alpnWire = try Self.alpnWire(configuration.applicationProtocols)
        } catch {
            SSL_CTX_free(context)
            throw error
        }

        _ = courier_SSL_CTX_set_min_proto_version(context, Int32(configuration.minimumVersion.rawValue))
        _ = courier_SSL_CTX_set_max_proto_version(context, Int32(configuration.maximumVersion?.rawValue ?? 0))
        SSL_CTX_set_options(context, courier_SSL_OP_NO_COMPRESSION() | courier_SSL_OP_NO_RENEGOTIATION())
        // SSL_MODE_RELEASE_BUFFERS is left off: with it OpenSSL frees a connection's record
        // buffers whenever they empty and allocates them again for the next record, several
        // allocations a request (about 1,800 instructions a W1 HTTP/2 request, measured with
        // callgrind). Kept, they cost about 34 KB a connection, and idle connections close
        // after the pool's idle timeout.

        switch role {
        case .client:
            if let roots = configuration.trustRoots { SSL_CTX_set1_cert_store(context, roots.store) }
            // TLS 1.3's suites in the order Apple's and Go's clients offer them, which the
            // server follows unless it imposes its own: AES-128-GCM first where the processor
            // has AES instructions (fewer rounds than AES-256, and SHA-256 for the key schedule
            // and transcript), ChaCha20-Poly1305 first where it has none. OpenSSL's own order
            // starts with AES-256-GCM.
            _ = SSL_CTX_set_ciphersuites(context, Self.tls13CipherSuites(aesHardware: courier_has_aes_hardware() != 0))
            // Sessions are kept by the transport, per origin, not in OpenSSL's internal cache.
            _ = courier_SSL_CTX_set_session_cache_mode(context, Int(SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE))
            SSL_CTX_sess_set_new_cb(context, tlsNewSessionCallback)
            SSL_CTX_set_cert_cb(context, tlsClientCertificateCallback, nil)
            SSL_CTX_set_cert_verify_callback(context, tlsVerifyChainCallback, nil)
            if !alpnWire.isEmpty {
                let status = alpnWire.withUnsafeBufferPointer { SSL_CTX_set_alpn_protos(context, $0.baseAddress, UInt32($0.count)) }
                guard status == 0 else {
                    SSL_CTX_free(context)
                    throw .invalidConfiguration("cannot set ALPN protocols")
                }
            }
        case .server(let identity):
            guard SSL_CTX_use_certificate(context, identity.certificate.x509) == 1,
                  SSL_CTX_use_PrivateKey(context, identity.privateKey.key) == 1 else {
                let reason = OpenSSLErrors.drain().text
                SSL_CTX_free(context)
                throw .invalidConfiguration("cannot use the server identity: \(reason)")
            }
            for intermediate in identity.intermediates {
                X509_up_ref(intermediate.x509)
                _ = SSL_CTX_ctrl(context, SSL_CTRL_EXTRA_CHAIN_CERT, 0, UnsafeMutableRawPointer(intermediate.x509))
            }
            SSL_CTX_set_alpn_select_cb(context, tlsALPNSelectCallback, nil)
            switch configuration.clientCertificatePolicy {
            case .none:
                break
            case .request(let issuers), .require(let issuers):
                let required = if case .require = configuration.clientCertificatePolicy { true } else { false }
                let store = X509_STORE_new()
                for issuer in issuers {
                    X509_STORE_add_cert(store, issuer.x509)
                    SSL_CTX_add_client_CA(context, issuer.x509)
                }
                SSL_CTX_set_cert_store(context, store)
                SSL_CTX_set_verify(context, SSL_VERIFY_PEER | (required ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), nil)
            }
        }
        OpenSSLErrors.clear()
    }

    deinit {
        SSL_CTX_free(context)
    }
}

extension TLSContext.Role {
    var isClient: Bool {
        if case .client = self { return true }
        return false
    }
}

/// The ex_data slot where each SSL keeps a pointer to its ``TLSEngine``.
let engineExDataIndex: Int32 = courier_SSL_get_ex_new_index()

/// OpenSSL calls this with each new session (ticket) on the client; the engine keeps it.
private let tlsNewSessionCallback: @convention(c) (OpaquePointer?, OpaquePointer?) -> Int32 = { ssl, session in
    guard let ssl, let session, let engine = TLSEngine.from(ssl) else { return 0 }
    engine.storeNewSession(session)
    return 1
}

/// OpenSSL calls this on the client when the server asks for a certificate: answer with the
/// identity given, or suspend the handshake (-1) so the transport can ask the delegate.
private let tlsClientCertificateCallback: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Int32 = { ssl, _ in
    guard let ssl, let engine = TLSEngine.from(ssl) else { return 1 }
    return engine.clientCertificateRequested()
}

/// OpenSSL calls this on the client in place of `X509_verify_cert`, with the server's chain:
/// the context's ``VerificationCache`` verifies it, or answers from a verification of the same
/// chain for the same name.
private let tlsVerifyChainCallback: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Int32 = { storeContext, _ in
    guard let storeContext else { return 0 }
    guard let raw = X509_STORE_CTX_get_ex_data(storeContext, SSL_get_ex_data_X509_STORE_CTX_idx()),
          let engine = TLSEngine.from(OpaquePointer(raw)), let cache = engine.verificationCache else {
        return X509_verify_cert(storeContext)
    }
    return cache.verify(storeContext, name: engine.verifiedName, time: engine.verificationTime)
}

/// The server's ALPN choice: the first of the client's protocols it also speaks.
private let tlsALPNSelectCallback: @convention(c) (
    OpaquePointer?, UnsafeMutablePointer<UnsafePointer<UInt8>?>?, UnsafeMutablePointer<UInt8>?,
    UnsafePointer<UInt8>?, UInt32, UnsafeMutableRawPointer?
) -> Int32 = { ssl, out, outLength, clientProtocols, clientLength, _ in
    guard let ssl, let engine = TLSEngine.from(ssl), let out, let outLength, let clientProtocols else {
        return SSL_TLSEXT_ERR_NOACK
    }
    return engine.selectApplicationProtocol(out, outLength, clientProtocols, clientLength)
}

extension TLSContext {
    /// The TLS 1.3 cipher suites a client offers, in its order of preference.
    static func tls13CipherSuites(aesHardware: Bool) -> String {
        aesHardware
            ? "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
            : "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384"
    }

    /// ALPN names in wire format: each length-prefixed.
    static func alpnWire(_ names: [String]) throws(TLSError) -> [UInt8] {
        var wire: [UInt8] = []
        for name in names {
            let bytes = Array(name.utf8)
            guard !bytes.isEmpty, bytes.count < 256 else { throw .invalidConfiguration("invalid ALPN protocol name \(name.debugDescription)") }
            wire.append(UInt8(bytes.count))
            wire += bytes
        }
        return wire
    }
}
