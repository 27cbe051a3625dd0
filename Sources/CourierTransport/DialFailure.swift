import CourierReactor
import CourierTLS

/// Why a connection could not be made ready: dialing, the proxy, the TLS handshake, or trust.
public enum DialFailure: Error, Sendable, Equatable, CustomStringConvertible {
    case connect(ConnectError)
    case tls(TLSError)
    /// The server's certificate was not trusted (by default handling or by the delegate).
    case untrusted(CertificateFailure)
    /// A challenge was cancelled by the delegate.
    case cancelled
    /// The connection closed during the handshake.
    case closedDuringHandshake
    /// HTTP/2 could not be started on the ready connection (nghttp2 could not set up a session).
    case http2Setup(String)
    /// The proxy could not be reached or did not open the tunnel.
    case proxy(ProxyFailure)

    public var description: String {
        switch self {
        case .connect(let error): return error.description
        case .tls(let error): return error.description
        case .untrusted(let failure): return "the server certificate is not trusted: \(failure)"
        case .cancelled: return "cancelled"
        case .closedDuringHandshake: return "the connection closed during the TLS handshake"
        case .http2Setup(let why): return "could not start HTTP/2: \(why)"
        case .proxy(let failure): return failure.description
        }
    }
}
