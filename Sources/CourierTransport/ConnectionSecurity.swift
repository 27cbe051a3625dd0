import CourierSync
import CourierTLS
import Foundation

/// TLS settings of a transport.
public struct TLSSettings: Sendable {
    /// Lowest protocol version; TLS 1.2 by default.
    public var minimumVersion: TLSVersion = .tls1_2
    /// Highest protocol version; nil for the highest available.
    public var maximumVersion: TLSVersion?
    /// ALPN protocols offered, in preference order.
    public var applicationProtocols = ["h2", "http/1.1"]
    /// Roots to verify servers against; nil for the system's trust store.
    public var trustRoots: TrustStore?

    public init() {}
}

/// Who a connection serving no exchange belongs to (a stream task's): its TLS challenges name
/// it, so they can be raised on the right task.
public protocol ConnectionOwner: AnyObject, Sendable {}

/// A server presented its certificates on a new connection: trust them or not.
public struct ServerTrustRequest: Sendable {
    public var origin: Origin
    /// The chain as the server sent it, leaf first.
    public var chain: [TLSCertificate]
    /// The verdict of verification against the trust roots, with host checking.
    public var verdict: Result<Void, CertificateFailure>
    /// The request the connection is being made for (the oldest waiting one), if any.
    public var exchange: HTTPExchange?
    /// The owner of a connection made for no request.
    public var owner: (any ConnectionOwner)? = nil
}

/// The answer to a ``ServerTrustRequest``.
public enum ServerTrustDecision: Sendable {
    case accept
    case reject(CertificateFailure)
    /// The challenge was cancelled: the requests waiting for the connection are cancelled.
    case cancel
}

/// A server asked for a client certificate.
public struct ClientIdentityRequest: Sendable {
    public var origin: Origin
    /// DER distinguished names of the issuers the server accepts (may be empty).
    public var acceptableIssuers: [[UInt8]]
    public var exchange: HTTPExchange?
    public var owner: (any ConnectionOwner)? = nil
}

/// The answer to a ``ClientIdentityRequest``.
public enum ClientIdentityDecision: Sendable {
    case identity(TLSIdentity)
    /// Go on without a certificate; the server decides whether that is enough.
    case none
    case cancel
}

/// Makes the TLS decisions Apple's URLSession hands to its delegate. Called from event loops;
/// the completion may be called on any thread.
public protocol ConnectionSecurityDelegate: AnyObject, Sendable {
    func evaluateServerTrust(_ request: ServerTrustRequest, completion: @escaping @Sendable (ServerTrustDecision) -> Void)
    func chooseClientIdentity(_ request: ClientIdentityRequest, completion: @escaping @Sendable (ClientIdentityDecision) -> Void)
}

/// The system's trust store, read once per process from the usual bundle locations and, as
/// OpenSSL's default verify paths do, OpenSSL's hashed certificate directories.
public enum SystemTrustStore {
    /// Candidate bundle files; `SSL_CERT_FILE` comes first when set (and the process is not
    /// setuid: ``TrustStore/environmentValue(_:)``).
    static var candidates: [String] {
        var paths: [String] = []
        if let override = TrustStore.environmentValue("SSL_CERT_FILE") { paths.append(override) }
        paths += ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"]
        return paths
    }

    /// The roots of the first bundle that can be read, then those of the hashed directories
    /// (`SSL_CERT_DIR`, else OpenSSL's own, /etc/ssl/certs on Debian): a root installed there
    /// with `openssl rehash` but not in the bundle is trusted, as curl and OpenSSL's tools trust
    /// it. With neither, the store is empty and every server is untrusted unless a delegate
    /// decides otherwise; nil only when OpenSSL cannot allocate even an empty store, which fails
    /// closed the same way (no root, nothing trusted).
    public static let shared: TrustStore? = {
        let bundle = candidates.lazy.compactMap { path in
            FileManager.default.contents(atPath: path).flatMap { try? TrustStore(pemBundle: Array($0)) }
        }.first
        guard let store = bundle ?? (try? TrustStore(certificates: [])) else { return nil }
        // A directory OpenSSL cannot take leaves the bundle's roots as they are.
        try? store.addHashedDirectories(TrustStore.defaultHashedDirectories)
        return store
    }()
}

/// Resumable TLS sessions per origin, bounded, most recent kept.
final class TLSSessionCache: Sendable {
    private struct State {
        var sessions: [String: TLSSession] = [:]
        var order: [String] = []
    }

    private let state = Mutex(State())
    /// Origins remembered at most.
    static let capacity = 128

    func session(for key: String) -> TLSSession? {
        state.withLock { $0.sessions[key] }
    }

    func store(_ session: TLSSession, for key: String) {
        state.withLock { state in
            if state.sessions.updateValue(session, forKey: key) == nil {
                state.order.append(key)
                if state.order.count > Self.capacity {
                    state.sessions[state.order.removeFirst()] = nil
                }
            }
        }
    }

    func remove(_ key: String) {
        state.withLock { state in
            state.sessions[key] = nil
            state.order.removeAll { $0 == key }
        }
    }
}
