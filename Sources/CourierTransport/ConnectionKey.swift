import CourierCore

/// Which requests may share a connection: two share one only when their keys are equal.
///
/// The TLS settings (trust roots, client identity, version bounds, ALPN list) belong to the
/// transport, one set per session, so every key of a transport implies the same TLS identity.
public struct ConnectionKey: Hashable, Sendable, CustomStringConvertible {
    /// How a connection reaches the server its requests are for.
    public enum Route: Hashable, Sendable {
        /// A TCP connection to the origin.
        case direct
        /// An HTTP proxy that takes `http` requests in absolute-form and forwards them; the
        /// connection ends at the proxy and carries requests for any origin.
        case forwardingProxy(ProxyServer)
        /// A tunnel through the proxy (HTTP CONNECT or SOCKS5) to the origin; TLS, when the
        /// origin is https, runs end to end inside it.
        case tunnel(ProxyServer)
    }

    /// The origin whose requests the connection carries; for a forwarding proxy, the proxy
    /// itself, since requests for every origin share its connections.
    public var origin: Origin
    public var route: Route
    /// The connections carry HTTP/1.1 only, whatever TLS could negotiate (requests that ask
    /// for a protocol upgrade, which HTTP/2 cannot do): ALPN offers `http/1.1` alone and prior
    /// knowledge of HTTP/2 is ignored.
    public var http1Only = false

    public init(origin: Origin, route: Route) {
        self.origin = origin
        self.route = route
    }

    /// The key of a request for `origin` through `proxy`: an `http` request to an HTTP proxy
    /// is forwarded, anything else through a proxy is tunnelled.
    public init(origin: Origin, proxy: ProxyServer?) {
        guard let proxy else {
            self.init(origin: origin, route: .direct)
            return
        }
        if case .http = proxy.kind, origin.scheme == .http {
            self.init(origin: Origin(scheme: .http, host: proxy.host, port: proxy.port), route: .forwardingProxy(proxy))
        } else {
            self.init(origin: origin, route: .tunnel(proxy))
        }
    }

    /// The proxy the connection goes through; nil when direct.
    public var proxy: ProxyServer? {
        switch route {
        case .direct: return nil
        case .forwardingProxy(let proxy), .tunnel(let proxy): return proxy
        }
    }

    public var description: String {
        let suffix = http1Only ? " (HTTP/1.1 only)" : ""
        switch route {
        case .direct: return origin.description + suffix
        case .forwardingProxy(let proxy): return "\(proxy) (forwarding)" + suffix
        case .tunnel(let proxy): return "\(origin) via \(proxy)" + suffix
        }
    }
}
