/// `host` as it stands before a port in an authority: in brackets when it is an IPv6 literal.
public func bracketedHost(_ host: String) -> String {
    // Scanned as contiguous bytes: stepping through the UTF-8 view costs several times as much.
    let isIPv6 = host.utf8.withContiguousStorageIfAvailable { $0.contains(UInt8(ascii: ":")) } ?? host.utf8.contains(UInt8(ascii: ":"))
    return isIPv6 ? "[\(host)]" : host
}

/// A proxy a connection goes through, as the configuration names it: what kind, where, and the
/// credentials the proxy protocol itself carries.
public struct ProxyServer: Hashable, Sendable, CustomStringConvertible {
    /// The proxy protocol.
    public enum Kind: Hashable, Sendable {
        /// An HTTP proxy: `http` requests go to it in absolute-form, anything else through a
        /// CONNECT tunnel (RFC 9110 section 9.3.6).
        case http
        /// A SOCKS5 proxy (RFC 1928), which tunnels every request.
        case socks5(SOCKSHostResolution)
    }

    /// Who turns the origin's host name into an address for a SOCKS5 proxy.
    public enum SOCKSHostResolution: Hashable, Sendable {
        /// The proxy: the name is sent as it is and never reaches the local resolver (curl's
        /// `socks5h://`, and Apple's SOCKS proxies).
        case byProxy
        /// The client: the proxy gets an address (curl's `socks5://`).
        case locally
    }

    /// A user name and password configured with the proxy. SOCKS5 sends them in its
    /// username/password sub-negotiation (RFC 1929); an HTTP proxy gets them only as the answer
    /// to its 407 challenge, through the session's authentication.
    public struct Credentials: Hashable, Sendable {
        public var user: String
        public var password: String
        public init(user: String, password: String) {
            self.user = user
            self.password = password
        }
    }

    /// The parts, in one shared box (copy on write). Every request carries an optional proxy
    /// (in its transport request and its connection key), nearly always nil; held inline, the
    /// optional of this struct was copied and destroyed through the runtime's value witnesses
    /// (some 300 instructions a request), and as one reference it is a pointer test and a retain.
    private final class Parts: Sendable {
        let kind: Kind
        let host: String
        let port: UInt16
        let credentials: Credentials?

        init(kind: Kind, host: String, port: UInt16, credentials: Credentials?) {
            self.kind = kind
            self.host = host
            self.port = port
            self.credentials = credentials
        }
    }

    private var parts: Parts

    public var kind: Kind {
        get { parts.kind }
        set { parts = Parts(kind: newValue, host: parts.host, port: parts.port, credentials: parts.credentials) }
    }
    /// The proxy's host, lower-cased; IPv6 literals without brackets.
    public var host: String {
        get { parts.host }
        set { parts = Parts(kind: parts.kind, host: newValue, port: parts.port, credentials: parts.credentials) }
    }
    public var port: UInt16 {
        get { parts.port }
        set { parts = Parts(kind: parts.kind, host: parts.host, port: newValue, credentials: parts.credentials) }
    }
    public var credentials: Credentials? {
        get { parts.credentials }
        set { parts = Parts(kind: parts.kind, host: parts.host, port: parts.port, credentials: newValue) }
    }

    public init(kind: Kind, host: String, port: UInt16, credentials: Credentials? = nil) {
        parts = Parts(kind: kind, host: host.lowercased(), port: port, credentials: credentials)
    }

    public static func == (lhs: ProxyServer, rhs: ProxyServer) -> Bool {
        lhs.parts === rhs.parts || (lhs.kind == rhs.kind && lhs.host == rhs.host && lhs.port == rhs.port && lhs.credentials == rhs.credentials)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(kind)
        hasher.combine(host)
        hasher.combine(port)
        hasher.combine(credentials)
    }

    /// `host:port`, with brackets around an IPv6 literal.
    public var authority: String { "\(bracketedHost(host)):\(port)" }

    /// The proxy as a URL without its credentials, e.g. `socks5h://127.0.0.1:1080`.
    public var description: String {
        switch kind {
        case .http: return "http://\(authority)"
        case .socks5(.byProxy): return "socks5h://\(authority)"
        case .socks5(.locally): return "socks5://\(authority)"
        }
    }
}
