import CourierCore
import CourierReactor

/// Why a proxy did not give a connection to the origin.
public enum ProxyFailure: Sendable, Equatable, CustomStringConvertible {
    /// The proxy itself could not be reached.
    case unreachable(ProxyServer, ConnectError)
    /// An HTTP proxy answered CONNECT with a status other than 2xx; `target` is the
    /// `host:port` asked for, `sentAuthorization` the `Proxy-Authorization` the CONNECT carried
    /// (so a request can tell whether its own credential was refused). A 407 carries the
    /// proxy's challenge in the head.
    case tunnelRefused(ProxyServer, HTTPResponseHead, target: String, sentAuthorization: String?)
    /// A SOCKS5 proxy refused, failed or broke its protocol.
    case socks(ProxyServer, SOCKS5Error)
    /// An HTTP proxy's reply to CONNECT was not HTTP, or bytes followed it before the tunnel
    /// was used.
    case malformedReply(ProxyServer, String)
    /// The proxy closed or reset the connection before the tunnel was ready.
    case closed(ProxyServer, SystemError?)
    /// The proxy (its connect or its tunnel) did not answer before the connect deadline.
    case timedOut(ProxyServer)
    /// The CONNECT request could not be written: its target or `Proxy-Authorization` holds
    /// bytes (CR, LF, controls, spaces in the target) that would add lines to it. Nothing was
    /// sent.
    case invalidTunnelRequest(ProxyServer, String)

    /// The proxy that failed.
    public var proxy: ProxyServer {
        switch self {
        case .unreachable(let proxy, _), .tunnelRefused(let proxy, _, _, _), .socks(let proxy, _),
             .malformedReply(let proxy, _), .closed(let proxy, _), .timedOut(let proxy),
             .invalidTunnelRequest(let proxy, _):
            return proxy
        }
    }

    public var description: String {
        switch self {
        case .unreachable(let proxy, let error):
            return "could not connect to the proxy \(proxy.authority): \(error)"
        case .tunnelRefused(let proxy, let head, let target, _):
            let reason = head.reason.isEmpty ? "" : " \(head.reason)"
            return "the proxy \(proxy.authority) refused the tunnel to \(target): \(head.status)\(reason)"
        case .socks(let proxy, let error):
            return "SOCKS5 proxy \(proxy.authority): \(error)"
        case .malformedReply(let proxy, let why):
            return "the proxy \(proxy.authority) sent a bad reply to CONNECT: \(why)"
        case .closed(let proxy, let error):
            let cause = error.map { ": \($0)" } ?? ""
            return "the proxy \(proxy.authority) closed the connection before the tunnel was ready\(cause)"
        case .timedOut(let proxy):
            return "the proxy \(proxy.authority) did not open the connection in time"
        case .invalidTunnelRequest(let proxy, let why):
            return "no CONNECT request was sent to the proxy \(proxy.authority): \(why)"
        }
    }
}
