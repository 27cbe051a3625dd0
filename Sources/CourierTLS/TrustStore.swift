import CCourierLinux
import CCourierOpenSSL

/// A set of trusted root certificates (an OpenSSL `X509_STORE`), such as the system's bundle.
///
/// A store from a PEM bundle parses a certificate only when a verification looks for its
/// subject (``PEMBundleIndex``); one from certificates holds them all. Share it between contexts.
public final class TrustStore: @unchecked Sendable {
    let store: OpaquePointer
    private let index: PEMBundleIndex?
    private let given: [TLSCertificate]

    /// Roots from PEM text, e.g. the contents of /etc/ssl/certs/ca-certificates.crt.
    public init(pemBundle: [UInt8]) throws(TLSError) {
        guard let index = PEMBundleIndex(pem: pemBundle) else { throw .invalidConfiguration("no PEM certificate found") }
        guard let store = X509_STORE_new() else { throw .invalidConfiguration("out of memory") }
        guard PEMBundleLookup.attach(index, to: store) else {
            X509_STORE_free(store)
            OpenSSLErrors.clear()
            throw .invalidConfiguration("out of memory")
        }
        self.store = store
        self.index = index
        self.given = []
    }

    /// Roots from certificates.
    public init(certificates: [TLSCertificate]) throws(TLSError) {
        guard let store = X509_STORE_new() else { throw .invalidConfiguration("out of memory") }
        for certificate in certificates {
            X509_STORE_add_cert(store, certificate.x509)
        }
        OpenSSLErrors.clear()
        self.store = store
        self.index = nil
        self.given = certificates
    }

    /// Also looks for roots in OpenSSL's hashed directories (`list`, separated by colons): files
    /// named by the hash of their subject (`HASH.0`, as `openssl rehash` or `c_rehash` names
    /// them), read when verification looks for that subject, after the roots the store holds.
    /// Directories that do not exist are skipped. Call before the store is shared.
    public func addHashedDirectories(_ list: String) throws(TLSError) {
        guard !list.isEmpty else { return }
        guard let lookup = X509_STORE_add_lookup(store, X509_LOOKUP_hash_dir()),
              X509_LOOKUP_ctrl(lookup, X509_L_ADD_DIR, list, Int(X509_FILETYPE_PEM), nil) == 1 else {
            let reason = OpenSSLErrors.drain().text
            throw .invalidConfiguration("cannot use the certificate directories \(list): \(reason)")
        }
    }

    /// The hashed directories OpenSSL reads by default: `SSL_CERT_DIR` when set, else the one
    /// it was built with (`/usr/lib/ssl/certs` on Debian, a link to `/etc/ssl/certs`).
    public static var defaultHashedDirectories: String {
        environmentValue(String(cString: X509_get_default_cert_dir_env())) ?? String(cString: X509_get_default_cert_dir())
    }

    /// A variable of the environment that chooses roots (`SSL_CERT_FILE`, `SSL_CERT_DIR`), read
    /// as OpenSSL reads them: never in a process that runs with privileges its file gave it
    /// (setuid, setgid, file capabilities), where the environment is its caller's and would
    /// let the caller pick what the process trusts.
    public static func environmentValue(_ name: String) -> String? {
        courier_secure_getenv(name).map { String(cString: $0) }
    }

    /// How many roots it holds.
    public var count: Int { index?.count ?? given.count }

    /// The roots it holds; a store from a PEM bundle parses them all for this.
    public var certificates: [TLSCertificate] { index?.allCertificates() ?? given }

    /// How many certificates OpenSSL's store holds parsed.
    var parsedCount: Int {
        guard X509_STORE_lock(store) == 1 else { return 0 }
        defer { X509_STORE_unlock(store) }
        return Int(courier_sk_X509_OBJECT_num(X509_STORE_get0_objects(store)))
    }

    deinit {
        X509_STORE_free(store)
    }
}

/// Chain and host verification outside a handshake: what `SecTrustEvaluateWithError` does.
public enum TrustEvaluation {
    /// Verifies that `chain` (leaf first) leads to a trusted root, is valid at `time` (seconds
    /// since 1970) and names `host` (a DNS name or an IP address; nil skips the name check).
    ///
    /// Roots: `roots` unless `anchors` are given; with anchors, only the anchors when
    /// `anchorsOnly`, else the anchors as well as `roots`.
    public static func evaluate(
        chain: [TLSCertificate], host: String?, roots: TrustStore?, anchors: [TLSCertificate]?,
        anchorsOnly: Bool, time: Int64
    ) -> Result<Void, CertificateFailure> {
        guard let leaf = chain.first else { return .failure(.noCertificate) }
        var attempts: [(store: OpaquePointer?, anchors: [TLSCertificate]?)] = []
        if let anchors {
            attempts.append((nil, anchors))
            if !anchorsOnly, let roots { attempts.append((roots.store, nil)) }
        } else if let roots {
            attempts.append((roots.store, nil))
        }
        guard !attempts.isEmpty else { return .failure(.unknownRoot) }
        var firstFailure: CertificateFailure?
        for attempt in attempts {
            let code = verify(leaf: leaf, intermediates: Array(chain.dropFirst()), store: attempt.store, anchors: attempt.anchors, host: host, time: time)
            if code == X509_V_OK { return .success(()) }
            if firstFailure == nil { firstFailure = failure(forVerifyCode: code) }
        }
        return .failure(firstFailure ?? .unknownRoot)
    }

    /// OpenSSL's X509_V_ERR code for one verification attempt.
    private static func verify(
        leaf: TLSCertificate, intermediates: [TLSCertificate], store: OpaquePointer?, anchors: [TLSCertificate]?,
        host: String?, time: Int64
    ) -> Int32 {
        guard let context = X509_STORE_CTX_new() else { return X509_V_ERR_OUT_OF_MEM }
        defer { X509_STORE_CTX_free(context) }
        let emptyStore = store == nil ? X509_STORE_new() : nil
        defer { if let emptyStore { X509_STORE_free(emptyStore) } }
        let untrusted = courier_sk_X509_new_null()
        defer { courier_sk_X509_free(untrusted) }
        for certificate in intermediates { _ = courier_sk_X509_push(untrusted, certificate.x509) }
        guard X509_STORE_CTX_init(context, store ?? emptyStore, leaf.x509, untrusted) == 1 else {
            OpenSSLErrors.clear()
            return X509_V_ERR_UNSPECIFIED
        }
        var trustedStack: OpaquePointer?
        if let anchors {
            trustedStack = courier_sk_X509_new_null()
            for anchor in anchors { _ = courier_sk_X509_push(trustedStack, anchor.x509) }
            X509_STORE_CTX_set0_trusted_stack(context, trustedStack)
        }
        defer { if let trustedStack { courier_sk_X509_free(trustedStack) } }
        _ = X509_STORE_CTX_set_default(context, "ssl_server")
        let parameters = X509_STORE_CTX_get0_param(context)
        X509_VERIFY_PARAM_set_time(parameters, time_t(time))
        if let host { configureHostCheck(parameters, host) }
        let result = X509_verify_cert(context)
        OpenSSLErrors.clear()
        return result == 1 ? X509_V_OK : X509_STORE_CTX_get_error(context)
    }

    /// Makes verification check `host`: an IP address against iPAddress names, else a DNS name
    /// (no partial wildcards).
    static func configureHostCheck(_ parameters: OpaquePointer?, _ host: String) {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if X509_VERIFY_PARAM_set1_ip_asc(parameters, bare) == 1 { return }
        OpenSSLErrors.clear()
        X509_VERIFY_PARAM_set_hostflags(parameters, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
        _ = bare.withCString { X509_VERIFY_PARAM_set1_host(parameters, $0, 0) }
    }

    /// Courier's reading of an X509_V_ERR code.
    public static func failure(forVerifyCode code: Int32) -> CertificateFailure {
        switch code {
        case X509_V_ERR_CERT_HAS_EXPIRED: return .expired
        case X509_V_ERR_CERT_NOT_YET_VALID: return .notYetValid
        case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN,
             X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT,
             X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE, X509_V_ERR_CERT_UNTRUSTED:
            return .unknownRoot
        case X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH: return .hostnameMismatch
        default:
            let reason = X509_verify_cert_error_string(Int(code)).map { String(cString: $0) } ?? "error \(code)"
            return .untrusted(code: code, reason: reason)
        }
    }
}
