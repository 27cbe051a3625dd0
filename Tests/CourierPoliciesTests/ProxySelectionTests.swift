import CourierCore
import CourierPolicies
import Testing
import _CourierTestSupport

/// A proxy server value, for the tables.
private func server(_ kind: ProxyServer.Kind, _ host: String, _ port: UInt16, user: String? = nil, password: String = "") -> ProxyServer {
    ProxyServer(kind: kind, host: host, port: port, credentials: user.map { ProxyServer.Credentials(user: $0, password: password) })
}

/// The error `parseProxyURL` throws for a text, or nil when it parses.
private func parseError(_ text: String) -> ProxyConfigurationError? {
    do throws(ProxyConfigurationError) {
        _ = try ProxySelection.parseProxyURL(text)
        return nil
    } catch {
        return error
    }
}

@Suite("ProxySelection")
struct ProxySelectionTests {
    // MARK: - The environment

    /// One row: the variables, a request's scheme, and the proxy it must get.
    struct EnvironmentCase: Sendable, CustomStringConvertible {
        var name: String
        var variables: [String: String]
        var scheme: String
        var expected: ProxyServer?
        var description: String { name }
    }

    static let environmentCases: [EnvironmentCase] = [
        .init(name: "http_proxy serves http", variables: ["http_proxy": "proxy.test:3128"], scheme: "http", expected: server(.http, "proxy.test", 3128)),
        .init(name: "HTTP_PROXY is ignored (httpoxy)", variables: ["HTTP_PROXY": "proxy.test:3128"], scheme: "http", expected: nil),
        .init(name: "HTTP_PROXY ignored, all_proxy used", variables: ["HTTP_PROXY": "a.test:1", "all_proxy": "b.test:2"], scheme: "http", expected: server(.http, "b.test", 2)),
        .init(name: "http_proxy does not serve https", variables: ["http_proxy": "proxy.test:3128"], scheme: "https", expected: nil),
        .init(name: "https_proxy serves https", variables: ["https_proxy": "secure.test:8080"], scheme: "https", expected: server(.http, "secure.test", 8080)),
        .init(name: "HTTPS_PROXY serves https", variables: ["HTTPS_PROXY": "SECURE.test:8080"], scheme: "https", expected: server(.http, "secure.test", 8080)),
        .init(name: "https_proxy before HTTPS_PROXY", variables: ["https_proxy": "a.test:1", "HTTPS_PROXY": "b.test:2"], scheme: "https", expected: server(.http, "a.test", 1)),
        .init(name: "empty https_proxy is unset", variables: ["https_proxy": "", "HTTPS_PROXY": "b.test:2"], scheme: "https", expected: server(.http, "b.test", 2)),
        .init(name: "blank https_proxy is unset", variables: ["https_proxy": "  ", "HTTPS_PROXY": "b.test:2"], scheme: "https", expected: server(.http, "b.test", 2)),
        .init(name: "all_proxy for http", variables: ["all_proxy": "socks5h://socks.test"], scheme: "http", expected: server(.socks5(.byProxy), "socks.test", 1080)),
        .init(name: "all_proxy for https", variables: ["all_proxy": "socks5h://socks.test"], scheme: "https", expected: server(.socks5(.byProxy), "socks.test", 1080)),
        .init(name: "ALL_PROXY", variables: ["ALL_PROXY": "socks5://socks.test:9050"], scheme: "https", expected: server(.socks5(.locally), "socks.test", 9050)),
        .init(name: "all_proxy before ALL_PROXY", variables: ["all_proxy": "a.test:1", "ALL_PROXY": "b.test:2"], scheme: "http", expected: server(.http, "a.test", 1)),
        .init(name: "empty http_proxy falls back to all_proxy", variables: ["http_proxy": "", "all_proxy": "x.test:1"], scheme: "http", expected: server(.http, "x.test", 1)),
        .init(name: "empty all_proxy falls back to ALL_PROXY", variables: ["all_proxy": "", "ALL_PROXY": "y.test:2"], scheme: "http", expected: server(.http, "y.test", 2)),
        .init(name: "the scheme's variable before all_proxy", variables: ["https_proxy": "s.test:1", "all_proxy": "x.test:2"], scheme: "https", expected: server(.http, "s.test", 1)),
        .init(name: "ws follows http", variables: ["http_proxy": "p.test:1", "https_proxy": "s.test:2"], scheme: "ws", expected: server(.http, "p.test", 1)),
        .init(name: "wss follows https", variables: ["http_proxy": "p.test:1", "https_proxy": "s.test:2"], scheme: "wss", expected: server(.http, "s.test", 2)),
        .init(name: "other schemes connect directly", variables: ["all_proxy": "x.test:1"], scheme: "ftp", expected: nil),
        .init(name: "nothing set", variables: [:], scheme: "https", expected: nil),
        .init(
            name: "credentials are percent-decoded", variables: ["https_proxy": "http://u%40x:p%3Aw@p.test:3128/"], scheme: "https",
            expected: server(.http, "p.test", 3128, user: "u@x", password: "p:w")
        ),
    ]

    @Test("environment variable precedence", arguments: environmentCases)
    func environment(_ row: EnvironmentCase) throws {
        let selection = ProxySelection.environment(row.variables)
        #expect(try selection.proxy(scheme: row.scheme, host: "origin.test", port: 443) == row.expected)
    }

    @Test("an environment without proxies is the direct selection")
    func directEnvironment() {
        #expect(ProxySelection.environment([:]) == .direct)
        #expect(ProxySelection.environment(["HTTP_PROXY": "p.test:1", "no_proxy": "", "http_proxy": " "]) == .direct)
    }

    /// One row: the variables, a host, and whether it bypasses the proxy.
    struct NoProxyVariableCase: Sendable, CustomStringConvertible {
        var variables: [String: String]
        var host: String
        var bypasses: Bool
        var description: String { "\(variables.sorted { $0.key < $1.key }) \(host)" }
    }

    @Test("no_proxy before NO_PROXY; empty counts as unset", arguments: [
        NoProxyVariableCase(variables: ["no_proxy": "a.test", "NO_PROXY": "b.test"], host: "a.test", bypasses: true),
        NoProxyVariableCase(variables: ["no_proxy": "a.test", "NO_PROXY": "b.test"], host: "b.test", bypasses: false),
        NoProxyVariableCase(variables: ["NO_PROXY": "b.test"], host: "b.test", bypasses: true),
        NoProxyVariableCase(variables: ["no_proxy": "", "NO_PROXY": "b.test"], host: "b.test", bypasses: true),
        NoProxyVariableCase(variables: [:], host: "b.test", bypasses: false),
    ])
    func noProxyVariables(_ row: NoProxyVariableCase) throws {
        var variables = row.variables
        variables["http_proxy"] = "proxy.test:3128"
        let selection = ProxySelection.environment(variables)
        let expected = row.bypasses ? nil : server(.http, "proxy.test", 3128)
        #expect(try selection.proxy(scheme: "http", host: row.host, port: 80) == expected)
    }

    @Test("a set but unusable variable fails its scheme, names the variable and never falls back")
    func unusableVariable() throws {
        let selection = ProxySelection.environment([
            "https_proxy": "https://secure.test:443", "all_proxy": "fallback.test:1", "http_proxy": "plain.test:3128", "no_proxy": "internal.test",
        ])
        guard case .unusable(let error) = selection.https else {
            Issue.record("https must be unusable, got \(selection.https)")
            return
        }
        #expect(error.message.contains("https_proxy"))
        #expect(error.message.contains("'https://secure.test:443'"))
        #expect(error.message.contains("proxy scheme 'https' is not supported; use http://, socks5:// or socks5h://"))
        #expect(error.description == error.message)
        #expect(selection.http == .proxy(server(.http, "plain.test", 3128)))
        #expect(throws: error) { try selection.proxy(scheme: "https", host: "origin.test", port: 443) }
        #expect(throws: error) { try selection.proxy(scheme: "wss", host: "origin.test", port: 443) }
        #expect(try selection.proxy(scheme: "https", host: "a.internal.test", port: 443) == nil)
        #expect(try selection.proxy(scheme: "http", host: "origin.test", port: 80) == server(.http, "plain.test", 3128))
    }

    // MARK: - Proxy URLs

    /// One row: a proxy URL and the server it names.
    struct ParseCase: Sendable, CustomStringConvertible {
        var text: String
        var expected: ProxyServer
        var description: String { text }
    }

    static let parseCases: [ParseCase] = [
        .init(text: "proxy.test", expected: server(.http, "proxy.test", 1080)),
        .init(text: "proxy.test:3128", expected: server(.http, "proxy.test", 3128)),
        .init(text: "  Proxy.Test:8080\n", expected: server(.http, "proxy.test", 8080)),
        .init(text: "http://proxy.test:3128", expected: server(.http, "proxy.test", 3128)),
        .init(text: "HTTP://proxy.test:3128/", expected: server(.http, "proxy.test", 3128)),
        .init(text: "http://proxy.test", expected: server(.http, "proxy.test", 1080)),
        .init(text: "proxy.test:", expected: server(.http, "proxy.test", 1080)),
        .init(text: "proxy.test:00080", expected: server(.http, "proxy.test", 80)),
        .init(text: "proxy.test:65535", expected: server(.http, "proxy.test", 65535)),
        .init(text: "proxy.test:1", expected: server(.http, "proxy.test", 1)),
        .init(text: "10.0.0.1:3128", expected: server(.http, "10.0.0.1", 3128)),
        .init(text: "internal_proxy:80", expected: server(.http, "internal_proxy", 80)),
        .init(text: "socks5://127.0.0.1", expected: server(.socks5(.locally), "127.0.0.1", 1080)),
        .init(text: "socks5h://socks.test:9050", expected: server(.socks5(.byProxy), "socks.test", 9050)),
        .init(text: "SOCKS5H://socks.test", expected: server(.socks5(.byProxy), "socks.test", 1080)),
        .init(text: "[::1]:8080", expected: server(.http, "::1", 8080)),
        .init(text: "[::1]", expected: server(.http, "::1", 1080)),
        .init(text: "http://[2001:DB8::1]/", expected: server(.http, "2001:db8::1", 1080)),
        .init(text: "socks5h://[::ffff:192.0.2.1]:1081", expected: server(.socks5(.byProxy), "::ffff:192.0.2.1", 1081)),
        .init(text: "http://user:secret@proxy.test:3128", expected: server(.http, "proxy.test", 3128, user: "user", password: "secret")),
        .init(text: "http://user@proxy.test", expected: server(.http, "proxy.test", 1080, user: "user", password: "")),
        .init(text: "user:pw@proxy.test:3128", expected: server(.http, "proxy.test", 3128, user: "user", password: "pw")),
        .init(text: "socks5://user:pw@[::1]:1085", expected: server(.socks5(.locally), "::1", 1085, user: "user", password: "pw")),
        .init(text: "http://p%40ss%3Aw:p%2Fss%25@proxy.test", expected: server(.http, "proxy.test", 1080, user: "p@ss:w", password: "p/ss%")),
        .init(text: "http://user:p@ss@proxy.test", expected: server(.http, "proxy.test", 1080, user: "user", password: "p@ss")),
        .init(text: "http://a:b:c@proxy.test", expected: server(.http, "proxy.test", 1080, user: "a", password: "b:c")),
        .init(text: "http://:only-password@proxy.test", expected: server(.http, "proxy.test", 1080, user: "", password: "only-password")),
        .init(text: "http://@proxy.test", expected: server(.http, "proxy.test", 1080)),
    ]

    @Test("accepted proxy URLs", arguments: parseCases)
    func parses(_ row: ParseCase) throws {
        let parsed = try ProxySelection.parseProxyURL(row.text)
        #expect(parsed == row.expected)
        #expect(parsed.credentials == row.expected.credentials)
    }

    /// One row: a proxy URL that is refused, and what its message must say.
    struct ErrorCase: Sendable, CustomStringConvertible {
        var text: String
        var mentions: [String]
        var description: String { text }
    }

    static let errorCases: [ErrorCase] = [
        .init(text: "", mentions: ["empty"]),
        .init(text: "   ", mentions: ["empty"]),
        .init(text: "https://proxy.test:443", mentions: ["'https://proxy.test:443'", "proxy scheme 'https' is not supported; use http://, socks5:// or socks5h://"]),
        .init(text: "socks4://proxy.test", mentions: ["proxy scheme 'socks4' is not supported"]),
        .init(text: "socks4a://proxy.test", mentions: ["proxy scheme 'socks4a' is not supported"]),
        .init(text: "ftp://proxy.test", mentions: ["proxy scheme 'ftp' is not supported"]),
        .init(text: "://proxy.test", mentions: ["'://proxy.test'", "not a URL scheme"]),
        .init(text: "http://", mentions: ["'http://'", "no host"]),
        .init(text: "http://:8080", mentions: ["'http://:8080'", "no host"]),
        .init(text: "http://user@", mentions: ["no host"]),
        .init(text: "x:99999", mentions: ["port '99999'", "1 to 65535"]),
        .init(text: "x:0", mentions: ["port '0'"]),
        .init(text: "x:-1", mentions: ["port '-1'"]),
        .init(text: "x:80a", mentions: ["port '80a'"]),
        .init(text: "[", mentions: ["'['", "not closed"]),
        .init(text: "http://[::1", mentions: ["'http://[::1'", "not closed"]),
        .init(text: "[::1]x", mentions: ["'x' follows the IPv6 address"]),
        .init(text: "[not-v6]:80", mentions: ["'not-v6' is not an IPv6 address"]),
        .init(text: "[1.2.3.4]", mentions: ["'1.2.3.4' is not an IPv6 address"]),
        .init(text: "[]", mentions: ["'' is not an IPv6 address"]),
        .init(text: "::::", mentions: ["'::::'", "brackets"]),
        .init(text: "::1", mentions: ["'::1'", "brackets"]),
        .init(text: "proxy.test:3128:1", mentions: ["'proxy.test:3128:1'", "more than one ':'"]),
        .init(text: "http://proxy.test:3128/path", mentions: ["'http://proxy.test:3128/path'", "no path, query or fragment"]),
        .init(text: "http://proxy.test?x=1", mentions: ["no path, query or fragment"]),
        .init(text: "http://proxy.test#f", mentions: ["no path, query or fragment"]),
        .init(text: "http://us%zzer@proxy.test", mentions: ["percent-encoding"]),
        .init(text: "http://prøxy.test", mentions: ["'prøxy.test'", "xn--"]),
        .init(text: "http://a b.test", mentions: ["host 'a b.test'"]),
        .init(text: "http://proxy.test:99999", mentions: ["port '99999'"]),
    ]

    @Test("refused proxy URLs name what is wrong", arguments: errorCases)
    func refuses(_ row: ErrorCase) throws {
        let error = try #require(parseError(row.text), "\(row.text) must be refused")
        for text in row.mentions {
            #expect(error.message.contains(text), "\(error.message) should mention \(text)")
        }
    }

    @Test("a password never appears in an error message", arguments: [
        "http://user:s3cret@proxy.test:99999", "https://user:s3cret@proxy.test", "http://user:s3cret@proxy.test/path", "user:s3cret@[::1",
    ])
    func passwordMasked(_ text: String) throws {
        let error = try #require(parseError(text))
        #expect(!error.message.contains("s3cret"))
        #expect(error.message.contains("user:****@"))
        let unusable = ProxySelection.environment(["https_proxy": text]).https
        guard case .unusable(let wrapped) = unusable else {
            Issue.record("expected an unusable rule, got \(unusable)")
            return
        }
        #expect(!wrapped.message.contains("s3cret"))
    }

    /// No input traps: random texts over the characters that matter to the parsers either parse
    /// to a sensible server or are refused; the exception parsers take them too.
    @Test("random input never traps")
    func randomInput() {
        var random = SplitMix64(seed: 0x5052_4F58_5953_454C)
        let pieces = [
            ":", "/", "[", "]", "@", "%", "%4", "%41", ".", "a", "Z", "1", "9", "0", " ", "*", ",", "ø", "\u{0}", "::", "://",
            "http://", "socks5h://", "ff", "255", "256", "65536", "-", "_", "<local>", "\t",
        ]
        for _ in 0..<3000 {
            var text = ""
            for _ in 0..<random.inRange(0...12) { text += random.pick(pieces) }
            if let parsed = try? ProxySelection.parseProxyURL(text) {
                #expect(!parsed.host.isEmpty, "\(text)")
                #expect(parsed.port >= 1, "\(text)")
                #expect(parsed.host == parsed.host.lowercased(), "\(text)")
            }
            _ = ProxyExceptions.noProxy(text).bypasses(host: text, port: 80)
            _ = ProxyExceptions.exceptionsList([text], excludeSimpleHostnames: true).bypasses(host: text, port: 80)
            _ = ProxyExceptions.noProxy("*.a, 10.0.0.0/8, [::1]:80").bypasses(host: text, port: 80)
        }
    }

    // MARK: - Exceptions

    /// One row: an exception list, a request's host and port, and whether it bypasses the proxy.
    struct BypassCase: Sendable, CustomStringConvertible {
        var list: String
        var host: String
        var port: UInt16
        var bypasses: Bool
        init(_ list: String, _ host: String, port: UInt16 = 443, _ bypasses: Bool) {
            self.list = list
            self.host = host
            self.port = port
            self.bypasses = bypasses
        }
        var description: String { "\(list) | \(host):\(port) → \(bypasses)" }
    }

    static let noProxyCases: [BypassCase] = [
        // Names: the name and what lies under it, at label boundaries.
        .init("example.com", "example.com", true),
        .init("example.com", "a.example.com", true),
        .init("example.com", "a.b.example.com", port: 80, true),
        .init("example.com", "badexample.com", false),
        .init("example.com", "xample.com", false),
        .init("example.com", "example.com.evil.test", false),
        .init(".example.com", "example.com", true),
        .init(".example.com", "a.example.com", true),
        .init(".example.com", "badexample.com", false),
        .init("*.example.com", "example.com", true),
        .init("*.example.com", "a.example.com", true),
        // Trailing dots and case.
        .init("example.com.", "a.example.com", true),
        .init("example.com", "a.example.com.", true),
        .init("example.com", "example.com.", true),
        .init("EXAMPLE.com", "a.Example.COM", true),
        // Everything.
        .init("*", "anything.test", true),
        .init("*", "10.1.2.3", true),
        .init("*", "::1", true),
        .init("a.test, *", "b.test", true),
        // Separators and empty entries.
        .init("a.test,b.test c.test\td.test", "c.test", true),
        .init("a.test,b.test c.test\td.test", "d.test", true),
        .init("a.test,b.test c.test\td.test", "e.test", false),
        .init(",, ,a.test,,", "a.test", true),
        .init("", "a.test", false),
        // IPv4 addresses and ranges; never by name, never across families.
        .init("10.0.0.0/8", "10.1.2.3", true),
        .init("10.0.0.0/8", "11.0.0.1", false),
        .init("10.1.2.3/8", "10.9.9.9", true),
        .init("192.168.1.0/24", "192.168.1.255", true),
        .init("192.168.1.0/24", "192.168.2.1", false),
        .init("192.168.1.7", "192.168.1.7", true),
        .init("192.168.1.7", "192.168.1.8", false),
        .init("0.0.0.0/0", "203.0.113.9", true),
        .init("10.0.0.0/33", "10.0.0.1", false),
        .init("10.0.0.0/8", "::ffff:10.0.0.1", false),
        .init("10.0.0.0/8", "10.example.test", false),
        .init("0.1", "10.0.0.1", false),
        .init("10/8", "10.1.1.1", false),
        // IPv6 addresses and ranges, with or without brackets.
        .init("::1", "::1", true),
        .init("::1", "[::1]", true),
        .init("[::1]", "::1", true),
        .init("::1", "0.0.0.1", false),
        .init("2001:db8::/32", "2001:db8:1::5", true),
        .init("2001:db8::/32", "2001:db9::1", false),
        .init("2001:DB8::/32", "2001:0db8::1", true),
        .init("fe80::/10", "febf::1", true),
        .init("fe80::/10", "fec0::1", false),
        .init("[2001:db8::]/48", "2001:db8:0:1::1", true),
        .init("[2001:db8::/48]", "2001:db8:1::1", false),
        .init("::1/129", "::1", false),
        .init("[::1", "::1", false),
        // Ports.
        .init("localhost:8080", "localhost", port: 8080, true),
        .init("localhost:8080", "localhost", port: 80, false),
        .init("example.com:443", "a.example.com", port: 443, true),
        .init("example.com:443", "a.example.com", port: 8443, false),
        .init("[::1]:443", "::1", port: 443, true),
        .init("[::1]:443", "::1", port: 80, false),
        .init("[2001:db8::]/32:443", "2001:db8::7", port: 443, true),
        .init("[2001:db8::]/32:443", "2001:db8::7", port: 80, false),
        .init("10.0.0.1:80", "10.0.0.1", port: 80, true),
        .init("10.0.0.1:80", "10.0.0.1", port: 81, false),
        .init("::1:443", "::1", port: 443, false),
        .init("localhost:notaport", "localhost", port: 80, false),
        .init("localhost:0", "localhost", port: 80, false),
    ]

    @Test("no_proxy", arguments: noProxyCases)
    func noProxy(_ row: BypassCase) {
        #expect(ProxyExceptions.noProxy(row.list).bypasses(host: row.host, port: row.port) == row.bypasses)
    }

    @Test("empty lists are no exceptions")
    func emptyLists() {
        #expect(ProxyExceptions.noProxy("") == ProxyExceptions.none)
        #expect(ProxyExceptions.noProxy(" , ,") == ProxyExceptions.none)
        #expect(ProxyExceptions.exceptionsList([], excludeSimpleHostnames: false) == ProxyExceptions.none)
        #expect(!ProxyExceptions.none.bypasses(host: "localhost", port: 80))
    }

    /// One row: Apple patterns, the simple-host-name flag, a host, and whether it bypasses.
    struct ExceptionsListCase: Sendable, CustomStringConvertible {
        var patterns: [String]
        var excludeSimpleHostnames: Bool
        var host: String
        var bypasses: Bool
        init(_ patterns: [String], simple: Bool = false, _ host: String, _ bypasses: Bool) {
            self.patterns = patterns
            self.excludeSimpleHostnames = simple
            self.host = host
            self.bypasses = bypasses
        }
        var description: String { "\(patterns) simple=\(excludeSimpleHostnames) | \(host) → \(bypasses)" }
    }

    static let exceptionsListCases: [ExceptionsListCase] = [
        .init(["*"], "a.test", true),
        .init(["*.example.com"], "a.example.com", true),
        .init(["*.example.com"], "example.com", false),
        .init([".example.com"], "a.b.example.com", true),
        .init([".example.com"], "example.com", false),
        .init(["example.com"], "example.com", true),
        .init(["example.com"], "a.example.com", true),
        .init(["example.com"], "badexample.com", false),
        .init([" example.com "], "EXAMPLE.com", true),
        .init(["*.local"], "printer.local", true),
        .init(["*.local"], "local", false),
        .init(["192.168.*"], "192.168.4.4", true),
        .init(["192.168.*"], "192.169.0.1", false),
        .init(["*example.com"], "badexample.com", true),
        .init(["*.example.*"], "a.example.org", true),
        .init(["*.example.*"], "example.org", false),
        .init(["169.254/16"], "169.254.10.1", true),
        .init(["169.254/16"], "169.255.0.1", false),
        .init(["10/8"], "10.200.0.1", true),
        .init(["192.168.1.0/24"], "192.168.1.9", true),
        .init(["192.168.1.0/24"], "192.168.0.9", false),
        .init(["fe80::/10"], "fe80::1", true),
        .init(["[::1]"], "::1", true),
        .init(["<local>"], "intranet", true),
        .init(["<local>"], "intranet.test", false),
        .init(["<local>"], "::1", false),
        .init([], simple: true, "intranet", true),
        .init([], simple: true, "intranet.", true),
        .init([], simple: true, "a.test", false),
        .init([], simple: true, "::1", false),
        .init([], simple: false, "intranet", false),
        .init(["a.test", "10.0.0.0/8"], "10.3.3.3", true),
        .init(["a.test", "10.0.0.0/8"], "b.test", false),
    ]

    @Test("Apple's ExceptionsList", arguments: exceptionsListCases)
    func exceptionsList(_ row: ExceptionsListCase) {
        let exceptions = ProxyExceptions.exceptionsList(row.patterns, excludeSimpleHostnames: row.excludeSimpleHostnames)
        #expect(exceptions.bypasses(host: row.host, port: 443) == row.bypasses)
    }

    // MARK: - Choosing a proxy

    /// What a request gets.
    enum Outcome: Sendable, Equatable {
        case direct
        case through(ProxyServer)
        case fails
    }

    /// One row: a request and what it gets from ``mixed``.
    struct ChoiceCase: Sendable, CustomStringConvertible {
        var scheme: String
        var host: String
        var port: UInt16
        var expected: Outcome
        var description: String { "\(scheme)://\(host):\(port)" }
    }

    static let brokenHTTPS = ProxyConfigurationError("https_proxy: proxy scheme 'https' is not supported")
    static let plainProxy = server(.http, "proxy.test", 3128)
    /// An HTTP proxy for http, an unusable rule for https, and exceptions.
    static let mixed = ProxySelection(http: .proxy(plainProxy), https: .unusable(brokenHTTPS), exceptions: .noProxy("internal.test, 10.0.0.0/8, [::1]"))

    static let choiceCases: [ChoiceCase] = [
        .init(scheme: "http", host: "origin.test", port: 80, expected: .through(plainProxy)),
        .init(scheme: "ws", host: "origin.test", port: 80, expected: .through(plainProxy)),
        .init(scheme: "http", host: "a.internal.test", port: 80, expected: .direct),
        .init(scheme: "http", host: "10.1.1.1", port: 8080, expected: .direct),
        .init(scheme: "http", host: "::1", port: 80, expected: .direct),
        .init(scheme: "https", host: "origin.test", port: 443, expected: .fails),
        .init(scheme: "wss", host: "origin.test", port: 443, expected: .fails),
        .init(scheme: "https", host: "internal.test", port: 443, expected: .direct),
        .init(scheme: "wss", host: "10.2.3.4", port: 443, expected: .direct),
        .init(scheme: "https", host: "[::1]", port: 443, expected: .direct),
        .init(scheme: "https", host: "11.0.0.1", port: 443, expected: .fails),
        .init(scheme: "ftp", host: "origin.test", port: 21, expected: .direct),
    ]

    @Test("proxy(scheme:host:port:)", arguments: choiceCases)
    func choice(_ row: ChoiceCase) {
        let outcome: Outcome
        do throws(ProxyConfigurationError) {
            outcome = try Self.mixed.proxy(scheme: row.scheme, host: row.host, port: row.port).map(Outcome.through) ?? Outcome.direct
        } catch {
            #expect(error == Self.brokenHTTPS)
            outcome = .fails
        }
        #expect(outcome == row.expected)
    }

    @Test("the direct selection never proxies")
    func direct() throws {
        #expect(try ProxySelection.direct.proxy(scheme: "https", host: "origin.test", port: 443) == nil)
        #expect(ProxySelection.direct == ProxySelection(http: .direct, https: .direct, exceptions: ProxyExceptions.none))
    }
}
