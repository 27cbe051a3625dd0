import CourierCore
import CourierPolicies
import Foundation

// The keys of `URLSessionConfiguration.connectionProxyDictionary`, with the string values
// Apple's CFNetwork gives them, so that `kCFNetworkProxiesHTTPEnable as String` reads the same
// on both platforms.

/// Whether `http` URLs use the HTTP proxy: a number or Bool, nonzero to enable.
public let kCFNetworkProxiesHTTPEnable = "HTTPEnable"
/// The HTTP proxy's host for `http` URLs.
public let kCFNetworkProxiesHTTPProxy = "HTTPProxy"
/// The HTTP proxy's port for `http` URLs (80 when absent).
public let kCFNetworkProxiesHTTPPort = "HTTPPort"
/// Whether `https` URLs use an HTTP proxy, through CONNECT tunnels.
public let kCFNetworkProxiesHTTPSEnable = "HTTPSEnable"
/// The host of the proxy for `https` URLs.
public let kCFNetworkProxiesHTTPSProxy = "HTTPSProxy"
/// The port of the proxy for `https` URLs (443 when absent).
public let kCFNetworkProxiesHTTPSPort = "HTTPSPort"
/// Whether a SOCKS5 proxy carries the URLs that have no HTTP(S) proxy.
public let kCFNetworkProxiesSOCKSEnable = "SOCKSEnable"
/// The SOCKS proxy's host.
public let kCFNetworkProxiesSOCKSProxy = "SOCKSProxy"
/// The SOCKS proxy's port (1080 when absent).
public let kCFNetworkProxiesSOCKSPort = "SOCKSPort"
/// Hosts that bypass every proxy: an array of patterns (`example.com`, `*.example.com`,
/// `10.0.0.0/8`, `169.254/16`, `*`, `<local>`).
public let kCFNetworkProxiesExceptionsList = "ExceptionsList"
/// Whether host names without a dot bypass every proxy.
public let kCFNetworkProxiesExcludeSimpleHostnames = "ExcludeSimpleHostnames"
/// Whether a proxy auto-configuration (PAC) file decides: not supported by Courier; a
/// dictionary that enables it fails its requests rather than bypass the proxy it names.
public let kCFNetworkProxiesProxyAutoConfigEnable = "ProxyAutoConfigEnable"
/// Courier's own key, not CFNetwork's: when true, the origin's host name is resolved here and
/// the SOCKS5 proxy gets an address (curl's `socks5://`); by default the proxy resolves it
/// (curl's `socks5h://`, Apple's behaviour) and the name never reaches the local resolver.
public let kCourierProxiesSOCKSResolvesLocally = "CourierSOCKSResolvesLocally"
/// The SOCKS5 user name (RFC 1929).
public let kCFStreamPropertySOCKSUser = "kCFStreamPropertySOCKSUser"
/// The SOCKS5 password (RFC 1929).
public let kCFStreamPropertySOCKSPassword = "kCFStreamPropertySOCKSPassword"

extension ProxySelection {
    /// The proxies a `connectionProxyDictionary` names. An HTTP(S) proxy serves its scheme;
    /// the SOCKS proxy serves a scheme that has none. SOCKS5 host names are resolved by the
    /// proxy, as Apple's are, unless ``kCourierProxiesSOCKSResolvesLocally`` says otherwise. A value of the wrong type makes that scheme's requests fail
    /// with a message naming the key, never go direct.
    static func dictionary(_ dictionary: [AnyHashable: Any]) -> ProxySelection {
        var values: [String: Any] = [:]
        for (key, value) in dictionary {
            if let name = key.base as? String { values[name] = value }
        }
        var selection = ProxySelection.direct
        if isEnabled(values[kCFNetworkProxiesProxyAutoConfigEnable]) {
            let error = ProxyConfigurationError("connectionProxyDictionary enables \(kCFNetworkProxiesProxyAutoConfigEnable): proxy auto-configuration (PAC) is not supported; name the proxies with HTTPProxy, HTTPSProxy or SOCKSProxy")
            return ProxySelection(http: .unusable(error), https: .unusable(error))
        }
        var socks = ProxySelection.Rule.direct
        if isEnabled(values[kCFNetworkProxiesSOCKSEnable]) {
            socks = rule(host: values[kCFNetworkProxiesSOCKSProxy], port: values[kCFNetworkProxiesSOCKSPort], hostKey: kCFNetworkProxiesSOCKSProxy, portKey: kCFNetworkProxiesSOCKSPort, defaultPort: 1080) { host, port in
                var credentials: ProxyServer.Credentials?
                if let user = values[kCFStreamPropertySOCKSUser] as? String {
                    credentials = ProxyServer.Credentials(user: user, password: values[kCFStreamPropertySOCKSPassword] as? String ?? "")
                }
                let resolution: ProxyServer.SOCKSHostResolution = isEnabled(values[kCourierProxiesSOCKSResolvesLocally]) ? .locally : .byProxy
                return ProxyServer(kind: .socks5(resolution), host: host, port: port, credentials: credentials)
            }
        }
        selection.http = socks
        selection.https = socks
        if isEnabled(values[kCFNetworkProxiesHTTPEnable]) {
            selection.http = rule(host: values[kCFNetworkProxiesHTTPProxy], port: values[kCFNetworkProxiesHTTPPort], hostKey: kCFNetworkProxiesHTTPProxy, portKey: kCFNetworkProxiesHTTPPort, defaultPort: 80) {
                ProxyServer(kind: .http, host: $0, port: $1)
            }
        }
        if isEnabled(values[kCFNetworkProxiesHTTPSEnable]) {
            selection.https = rule(host: values[kCFNetworkProxiesHTTPSProxy], port: values[kCFNetworkProxiesHTTPSPort], hostKey: kCFNetworkProxiesHTTPSProxy, portKey: kCFNetworkProxiesHTTPSPort, defaultPort: 443) {
                ProxyServer(kind: .http, host: $0, port: $1)
            }
        }
        let patterns = values[kCFNetworkProxiesExceptionsList] as? [String] ?? []
        let simple = isEnabled(values[kCFNetworkProxiesExcludeSimpleHostnames])
        if !patterns.isEmpty || simple {
            selection.exceptions = .exceptionsList(patterns, excludeSimpleHostnames: simple)
        }
        return selection
    }

    /// A flag as CFNetwork reads one: a Bool, a nonzero number, or a string of one.
    private static func isEnabled(_ value: Any?) -> Bool {
        switch value {
        case let flag as Bool: return flag
        case let number as Int: return number != 0
        case let number as NSNumber: return number.intValue != 0
        case let text as String: return (Int(text) ?? 0) != 0 || text.lowercased() == "true"
        default: return false
        }
    }

    private static func rule(
        host: Any?, port: Any?, hostKey: String, portKey: String, defaultPort: UInt16,
        make: (String, UInt16) -> ProxyServer
    ) -> Rule {
        guard var name = host as? String, !name.trimmingCharacters(in: .whitespaces).isEmpty else {
            return .unusable(ProxyConfigurationError("connectionProxyDictionary enables a proxy but \(hostKey) is not a host name (\(host.map { "\($0)" } ?? "absent"))"))
        }
        name = name.trimmingCharacters(in: .whitespaces)
        if name.hasPrefix("[") && name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        let number: Int?
        switch port {
        case nil: number = Int(defaultPort)
        case let value as Int: number = value
        case let value as NSNumber: number = value.intValue
        case let value as String: number = Int(value.trimmingCharacters(in: .whitespaces))
        default: number = nil
        }
        guard let number, (1...65535).contains(number) else {
            return .unusable(ProxyConfigurationError("connectionProxyDictionary's \(portKey) is not a port from 1 to 65535 (\(port.map { "\($0)" } ?? ""))"))
        }
        return .proxy(make(name, UInt16(number)))
    }
}
