import ArgumentParser
import Courier
import CourierCore
import CourierPolicies
import Foundation

/// curl's proxy options. Without them the environment decides, as for curl (`http_proxy`,
/// `https_proxy`, `all_proxy`, `no_proxy`).
struct ProxyOptions: ParsableArguments {
    @Option(name: [.customShort("x"), .customLong("proxy")], help: "Use this proxy for every request: [http://|socks5://|socks5h://][USER:PASSWORD@]HOST[:PORT] (port 1080 when absent, as curl).")
    var proxy: String?

    @Option(name: .customLong("proxy-user"), help: "USER:PASSWORD for the proxy: the answer to an HTTP proxy's 407, or SOCKS5 username/password authentication.")
    var proxyUser: String?

    @Option(name: .customLong("socks5"), help: "Use this SOCKS5 proxy, HOST[:PORT]; host names are resolved here.")
    var socks5: String?

    @Option(name: .customLong("socks5-hostname"), help: "Use this SOCKS5 proxy, HOST[:PORT]; the proxy resolves host names.")
    var socks5Hostname: String?

    @Option(name: .customLong("noproxy"), help: "Hosts that bypass the proxy, comma-separated, in no_proxy's syntax (* for all); overrides no_proxy.")
    var noProxy: String?

    /// What the options settled: the proxy a request to the URL takes, for -v, and the
    /// credential that answers an HTTP proxy's challenge.
    struct Choice {
        var proxy: ProxyServer?
        var source: String
        var credential: URLCredential?
    }

    /// Sets the session's proxies from the options and says which proxy `url` goes through.
    func apply(to configuration: URLSessionConfiguration, url: URL) throws -> Choice {
        let given = [proxy.map { ($0, "-x") }, socks5.map { ("socks5://" + $0, "--socks5") }, socks5Hostname.map { ("socks5h://" + $0, "--socks5-hostname") }].compactMap { $0 }
        guard given.count <= 1 else { throw ValidationError("-x, --socks5 and --socks5-hostname exclude each other") }
        var credentials: ProxyServer.Credentials?
        if let proxyUser {
            guard let colon = proxyUser.firstIndex(of: ":") else {
                throw ValidationError("--proxy-user needs USER:PASSWORD")
            }
            credentials = ProxyServer.Credentials(user: String(proxyUser[..<colon]), password: String(proxyUser[proxyUser.index(after: colon)...]))
        }
        let selection: ProxySelection
        let source: String
        if let (text, option) = given.first {
            var server: ProxyServer
            do {
                server = try ProxySelection.parseProxyURL(text)
            } catch {
                throw ValidationError("\(option): \(error)")
            }
            if let credentials { server.credentials = credentials }
            // curl: the environment's no_proxy applies to -x too, unless --noproxy replaces it.
            let environment = ProcessInfo.processInfo.environment
            let exceptions = noProxy ?? [environment["no_proxy"], environment["NO_PROXY"]].compactMap { $0 }.first { !$0.isEmpty }
            configuration.connectionProxyDictionary = Self.dictionary(for: server, noProxy: exceptions)
            selection = ProxySelection(http: .proxy(server), https: .proxy(server), exceptions: exceptions.map(ProxyExceptions.noProxy) ?? ProxyExceptions.none)
            source = option
        } else {
            if let noProxy {
                // curl: --noproxy replaces the environment's list.
                setenv("no_proxy", noProxy, 1)
                unsetenv("NO_PROXY")
            }
            selection = .environment(ProcessInfo.processInfo.environment)
            source = "the environment"
        }
        var chosen: ProxyServer?
        if let scheme = url.scheme?.lowercased(), var host = url.host(percentEncoded: false) {
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            let port = UInt16(clamping: url.port ?? (scheme == "https" ? 443 : 80))
            do {
                chosen = try selection.proxy(scheme: scheme, host: host.lowercased(), port: port)
            } catch {
                throw ValidationError("the proxy from \(source) cannot be used: \(error)")
            }
        }
        if let credentials, var server = chosen, given.isEmpty {
            // curl: --proxy-user applies to a proxy from the environment too. A SOCKS5 proxy
            // carries it in its handshake, so the session is given that proxy with it.
            server.credentials = credentials
            chosen = server
            if case .socks5 = server.kind {
                configuration.connectionProxyDictionary = Self.dictionary(for: server, noProxy: noProxy ?? ProcessInfo.processInfo.environment["no_proxy"] ?? ProcessInfo.processInfo.environment["NO_PROXY"])
            }
        }
        var credential: URLCredential?
        if let server = chosen, case .http = server.kind, let user = server.credentials {
            credential = URLCredential(user: user.user, password: user.password, persistence: .forSession)
        }
        return Choice(proxy: chosen, source: source, credential: credential)
    }

    /// The `connectionProxyDictionary` that sends every request through `server`.
    static func dictionary(for server: ProxyServer, noProxy: String?) -> [AnyHashable: Any] {
        var dictionary: [AnyHashable: Any] = [:]
        switch server.kind {
        case .http:
            dictionary[kCFNetworkProxiesHTTPEnable] = 1
            dictionary[kCFNetworkProxiesHTTPProxy] = server.host
            dictionary[kCFNetworkProxiesHTTPPort] = Int(server.port)
            dictionary[kCFNetworkProxiesHTTPSEnable] = 1
            dictionary[kCFNetworkProxiesHTTPSProxy] = server.host
            dictionary[kCFNetworkProxiesHTTPSPort] = Int(server.port)
        case .socks5(let resolution):
            dictionary[kCFNetworkProxiesSOCKSEnable] = 1
            dictionary[kCFNetworkProxiesSOCKSProxy] = server.host
            dictionary[kCFNetworkProxiesSOCKSPort] = Int(server.port)
            dictionary[kCourierProxiesSOCKSResolvesLocally] = resolution == .locally
            if let credentials = server.credentials {
                dictionary[kCFStreamPropertySOCKSUser] = credentials.user
                dictionary[kCFStreamPropertySOCKSPassword] = credentials.password
            }
        }
        if let noProxy {
            // no_proxy's entries match a host and its subdomains, with or without a leading
            // dot; an exceptions-list entry does so only without one.
            let entries = noProxy.split(whereSeparator: { $0 == "," || $0 == " " }).map { entry -> String in
                var entry = String(entry)
                while entry.hasPrefix(".") { entry.removeFirst() }
                if entry.hasPrefix("*.") { entry.removeFirst(2) }
                return entry
            }.filter { !$0.isEmpty }
            dictionary[kCFNetworkProxiesExceptionsList] = entries
        }
        return dictionary
    }
}
