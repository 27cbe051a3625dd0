import CourierCore
import Foundation

/// Why a configured proxy cannot be used. The message names the setting (an environment
/// variable or a configuration key) and its value, and says what would be accepted; a
/// password in the value is never repeated in it.
public struct ProxyConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A sentence for the user, naming the setting, its value and what is accepted.
    public var message: String

    /// The message.
    public var description: String { message }

    /// An error with this message.
    public init(_ message: String) {
        self.message = message
    }
}

/// Which proxy each request goes through: one rule per URL scheme, and the hosts that bypass
/// every proxy.
///
/// A pure value: it is built once from the configuration (the process environment, as curl
/// reads it, or a `connectionProxyDictionary`), and asked per request. It never resolves a
/// name: exceptions written as addresses match only URLs whose host is an address literal.
public struct ProxySelection: Sendable, Equatable {
    /// What the requests of one URL scheme do.
    public enum Rule: Sendable, Equatable {
        /// Connect to the origin directly.
        case direct
        /// Go through this proxy.
        case proxy(ProxyServer)
        /// A proxy is configured but cannot be used: the requests fail with this error rather
        /// than quietly go direct, which would send them where the user said they must not go.
        case unusable(ProxyConfigurationError)
    }

    /// The rule for `http` URLs, and `ws` URLs.
    public var http: Rule
    /// The rule for `https` URLs, and `wss` URLs.
    public var https: Rule
    /// The hosts that bypass both rules.
    public var exceptions: ProxyExceptions

    /// A selection with these rules; by default every request connects directly.
    public init(http: Rule = .direct, https: Rule = .direct, exceptions: ProxyExceptions = .none) {
        self.http = http
        self.https = https
        self.exceptions = exceptions
    }

    /// No proxy for any request.
    public static let direct = ProxySelection()

    /// The proxy port when a proxy URL names none: 1080 for every kind of proxy, as curl does.
    public static let defaultProxyPort: UInt16 = 1080

    // MARK: - The environment

    /// The proxy environment as curl reads it.
    ///
    /// 1. `http` (and `ws`) URLs read `http_proxy`, in lower case only: the upper-case name is
    ///    ignored because a CGI program gets a request's `Proxy:` header as `HTTP_PROXY`
    ///    ("httpoxy"), so a client could pick the proxy.
    /// 2. `https` (and `wss`) URLs read `https_proxy`, then `HTTPS_PROXY`.
    /// 3. When a scheme's variable is unset, both read `all_proxy`, then `ALL_PROXY`.
    /// 4. The exceptions are `no_proxy`, then `NO_PROXY`, in curl's syntax
    ///    (``ProxyExceptions/noProxy(_:)``).
    ///
    /// A value that is empty or only white space counts as unset. A variable that is set but
    /// cannot be parsed gives an ``Rule/unusable(_:)`` rule naming it; it does not fall back
    /// to `all_proxy`, so that a typing mistake never sends requests elsewhere.
    public static func environment(_ variables: [String: String]) -> ProxySelection {
        func firstSet(_ names: [String]) -> (name: String, value: String)? {
            for name in names {
                if let value = variables[name], !value.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
                    return (name, value)
                }
            }
            return nil
        }
        func rule(_ names: [String]) -> Rule {
            guard let variable = firstSet(names + ["all_proxy", "ALL_PROXY"]) else { return .direct }
            switch parse(variable.value) {
            case .success(let server): return .proxy(server)
            case .failure(let error): return .unusable(ProxyConfigurationError("environment variable \(variable.name): \(error.message)"))
            }
        }
        let exceptions = firstSet(["no_proxy", "NO_PROXY"]).map { ProxyExceptions.noProxy($0.value) } ?? ProxyExceptions.none
        return ProxySelection(http: rule(["http_proxy"]), https: rule(["https_proxy", "HTTPS_PROXY"]), exceptions: exceptions)
    }

    // MARK: - Choosing

    /// The proxy for a request to `scheme://host:port`; nil when it connects directly.
    ///
    /// - Parameters:
    ///   - scheme: `http`, `https`, `ws` or `wss` (any other scheme connects directly).
    ///   - host: the URL's host; an IPv6 literal may come with or without brackets.
    ///   - port: the URL's port, explicit or the scheme's default.
    /// - Throws: the rule's error when the scheme's proxy is ``Rule/unusable(_:)`` and the
    ///   host is not an exception.
    public func proxy(scheme: String, host: String, port: UInt16) throws(ProxyConfigurationError) -> ProxyServer? {
        let rule: Rule
        switch scheme.lowercased() {
        case "http", "ws": rule = http
        case "https", "wss": rule = https
        default: return nil
        }
        switch rule {
        case .direct:
            return nil
        case .proxy(let server):
            return exceptions.bypasses(host: host, port: port) ? nil : server
        case .unusable(let error):
            if exceptions.bypasses(host: host, port: port) { return nil }
            throw error
        }
    }

    // MARK: - Proxy URLs

    /// Parses a proxy URL as curl does: `host`, `host:port`, `[v6]:port`, or
    /// `scheme://[user[:password]@]host[:port][/]`, with white space around it ignored.
    ///
    /// No scheme and `http` give an HTTP proxy; `socks5` a SOCKS5 proxy that gets addresses;
    /// `socks5h` one that resolves names itself. Other schemes (`https`, `socks4`, `socks4a`, …)
    /// are refused. The port is 1080 when absent (``defaultProxyPort``). The user and password
    /// are percent-decoded; a user without a password gets the empty password.
    ///
    /// - Throws: an error quoting the text (its password masked) and saying what is wrong.
    public static func parseProxyURL(_ text: String) throws(ProxyConfigurationError) -> ProxyServer {
        switch parse(text) {
        case .success(let server): return server
        case .failure(let error): throw error
        }
    }

    /// ``parseProxyURL(_:)`` as a result.
    static func parse(_ text: String) -> Result<ProxyServer, ProxyConfigurationError> {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        func failure(_ problem: String) -> Result<ProxyServer, ProxyConfigurationError> {
            .failure(ProxyConfigurationError("proxy URL '\(masked(trimmed))': \(problem)"))
        }
        guard !trimmed.isEmpty else { return .failure(ProxyConfigurationError("proxy URL is empty; write host[:port] or scheme://host[:port]")) }
        var rest = Substring(trimmed)

        // 1. The scheme, when there is one, picks the kind.
        var kind = ProxyServer.Kind.http
        if let separator = rest.range(of: "://") {
            let scheme = rest[..<separator.lowerBound]
            guard isValidScheme(scheme) else { return failure("'\(scheme)' is not a URL scheme; use http://, socks5:// or socks5h://") }
            switch scheme.lowercased() {
            case "http": kind = .http
            case "socks5": kind = .socks5(.locally)
            case "socks5h": kind = .socks5(.byProxy)
            default: return failure("proxy scheme '\(scheme)' is not supported; use http://, socks5:// or socks5h://")
            }
            rest = rest[separator.upperBound...]
        }

        // 2. The authority ends at the first "/", "?" or "#" (RFC 3986 section 3.2); all that
        //    may follow is a lone "/".
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        let trailer = rest[authorityEnd...]
        guard trailer.isEmpty || trailer == "/" else {
            return failure("a proxy URL has no path, query or fragment; write scheme://[user[:password]@]host[:port]")
        }
        var authority = rest[..<authorityEnd]

        // 3. User information runs to the last "@", as in browsers and curl, so that an
        //    unescaped "@" in a password still parses.
        var credentials: ProxyServer.Credentials?
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            authority = authority[authority.index(after: at)...]
            if !userInfo.isEmpty {
                let colon = userInfo.firstIndex(of: ":")
                let user = userInfo[..<(colon ?? userInfo.endIndex)]
                let password = colon.map { userInfo[userInfo.index(after: $0)...] } ?? ""
                guard let decodedUser = String(user).removingPercentEncoding, let decodedPassword = String(password).removingPercentEncoding else {
                    return failure("the user name or password is not valid percent-encoding")
                }
                credentials = ProxyServer.Credentials(user: decodedUser, password: decodedPassword)
            }
        }

        // 4. The host, in brackets when it is an IPv6 literal, then an optional port.
        let host: Substring
        let portText: Substring?
        if authority.first == "[" {
            guard let close = authority.firstIndex(of: "]") else { return failure("the '[' of an IPv6 address is not closed by ']'") }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if after.isEmpty {
                portText = nil
            } else if after.first == ":" {
                portText = after.dropFirst()
            } else {
                return failure("'\(after)' follows the IPv6 address; only :port may")
            }
            guard IPAddressLiteral.ipv6(Array(host.utf8)[...]) != nil else {
                return failure("'\(host)' is not an IPv6 address")
            }
        } else {
            let colons = authority.filter { $0 == ":" }.count
            guard colons <= 1 else { return failure("'\(authority)' has more than one ':'; write an IPv6 address in brackets, as in [::1]:1080") }
            if let colon = authority.firstIndex(of: ":") {
                host = authority[..<colon]
                portText = authority[authority.index(after: colon)...]
            } else {
                host = authority
                portText = nil
            }
            guard !host.isEmpty else { return failure("the proxy URL has no host") }
            if let problem = hostNameProblem(host) { return failure(problem) }
        }
        guard !host.isEmpty else { return failure("the proxy URL has no host") }

        // 5. An empty port (`host:`) is the default port, as RFC 3986 section 3.2.3 allows.
        var port = defaultProxyPort
        if let portText, !portText.isEmpty {
            guard let number = parsePort(portText.utf8) else { return failure("port '\(portText)' is not a number from 1 to 65535") }
            port = number
        }
        return .success(ProxyServer(kind: kind, host: String(host), port: port, credentials: credentials))
    }

    /// True for `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )` (RFC 3986 section 3.1).
    private static func isValidScheme(_ scheme: Substring) -> Bool {
        guard let first = scheme.utf8.first, ProxyASCII.isLetter(first) else { return false }
        return scheme.utf8.allSatisfy { ProxyASCII.isLetter($0) || ProxyASCII.isDigit($0) || $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") }
    }

    /// What is wrong with a proxy host name, or nil. Letters, digits, `-`, `.` and `_` (common
    /// in internal names) are accepted; internationalized names must come in their `xn--` form,
    /// since Courier's pure layer has no IDNA mapping.
    private static func hostNameProblem(_ host: Substring) -> String? {
        if host.utf8.contains(where: { $0 >= 0x80 }) {
            return "host '\(host)' is not ASCII; write an internationalized name in its xn-- form"
        }
        let valid = host.utf8.allSatisfy {
            ProxyASCII.isLetter($0) || ProxyASCII.isDigit($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_")
        }
        return valid ? nil : "host '\(host)' has characters a host name cannot have"
    }

    /// A port from 1 to 65535 written in decimal digits (leading zeros allowed), or nil.
    static func parsePort<Digits: Collection<UInt8>>(_ digits: Digits) -> UInt16? {
        guard !digits.isEmpty else { return nil }
        var value = 0
        for byte in digits {
            guard ProxyASCII.isDigit(byte) else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
            guard value <= Int(UInt16.max) else { return nil }
        }
        return value == 0 ? nil : UInt16(value)
    }

    /// The text with the password of its user information replaced by `****`, for messages:
    /// everything from the first `:` of the part before the last `@` up to that `@`.
    static func masked(_ text: String) -> String {
        let afterScheme = text.range(of: "://")?.upperBound ?? text.startIndex
        let rest = text[afterScheme...]
        guard let at = rest.lastIndex(of: "@"), let colon = rest[..<at].firstIndex(of: ":") else { return text }
        return String(text[..<text.index(after: colon)]) + "****" + String(text[at...])
    }
}
