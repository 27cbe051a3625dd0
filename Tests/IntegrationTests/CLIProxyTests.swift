import Foundation
import Testing
import _CourierTestSupport

/// `courier -x`, `--proxy-user`, `--socks5`, `--socks5-hostname`, `--noproxy` and the proxy
/// environment variables, as curl users know them, against squid and pproxy.
@Suite("courier proxies")
struct CLIProxyTests {
    let nginx: NginxServer
    let squid: SquidServer
    let socks: SOCKSProxyServer

    init() throws {
        nginx = try NginxServer.shared()
        squid = try SquidServer.shared()
        socks = try SOCKSProxyServer.shared()
    }

    /// Runs courier (bounded by -m) with `environment` as the only proxy variables.
    func courier(_ arguments: [String], environment: [String: String] = [:]) async throws -> (status: Int32, stdout: String, stderr: String) {
        try #require(try await runCourier(["-m", "30"] + arguments, environment: environment), "the courier executable is built with the tests")
    }

    var hello: String { "Hello from nginx\n" }
    var squidURL: String { "http://127.0.0.1:\(squid.openPort)" }
    var caFile: String { nginx.certificates.caPEM }

    /// A URL for nginx's hello.txt that no other test asks for.
    func markedURL(_ marker: String) -> String { nginx.url("/files/hello.txt?cli-proxy=\(marker)").absoluteString }

    /// True when squid logged no request for `marker` (it would have by the time courier exited
    /// with the body; a second of slack covers squid's logging).
    func squidNeverSaw(_ marker: String) async -> Bool {
        await squid.entry(within: .seconds(1)) { $0.url.contains(marker) } == nil
    }

    @Test("-x http://127.0.0.1:PORT: the request goes to squid in absolute-form; -v names the proxy")
    func forwarded() async throws {
        let marker = proxyMarker()
        let run = try await courier(["-v", "-x", squidURL, markedURL(marker)])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == hello)
        #expect(run.stderr.contains("* Using proxy \(squidURL) (from -x)"), "\(run.stderr)")
        #expect(run.stderr.contains("*   Trying 127.0.0.1:\(squid.openPort)...\n* Connected to"), "\(run.stderr)")
        let entry = try #require(await squid.entry { $0.url.contains(marker) })
        #expect(entry.method == "GET")
        #expect(entry.url == markedURL(marker))
        #expect(entry.port == squid.openPort)
        #expect(entry.status == 200)
    }

    @Test("-x with an https URL: a CONNECT tunnel through squid, --cacert for nginx's certificate")
    func tunnel() async throws {
        let port = nginx.tlsPorts["h1"]!
        let before = squid.tunnelCount(to: "localhost:\(port)", port: squid.openPort)
        let run = try await courier(["-v", "--cacert", caFile, "-x", squidURL, "https://localhost:\(port)/files/hello.txt"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == hello)
        #expect(run.stderr.contains("*   Trying 127.0.0.1:\(squid.openPort)...\n"), "\(run.stderr)")
        #expect(run.stderr.contains("* Tunnel through the proxy 127.0.0.1:\(squid.openPort) is open\n"), "\(run.stderr)")
        #expect(await squid.tunnelLogged(to: "localhost:\(port)", port: squid.openPort, after: before), "\(squid.accessLog())")
    }

    @Test("squid's 407 for http: --proxy-user (or the -x URL's user) answers it; without, the 407 is the answer")
    func forwardedAuthentication() async throws {
        let proxy = "http://127.0.0.1:\(squid.authPort)"
        let marker = proxyMarker()
        let answered = try await courier(["-x", proxy, "--proxy-user", "\(SquidServer.user):\(SquidServer.password)", markedURL(marker)])
        #expect(answered.status == 0, "\(answered.stderr)")
        #expect(answered.stdout == hello)
        let entry = try #require(await squid.entry { $0.url.contains(marker) && $0.status == 200 })
        #expect(entry.user == SquidServer.user)
        #expect(entry.port == squid.authPort)

        let inURL = proxyMarker()
        let fromURL = try await courier(["-x", "http://\(SquidServer.user):\(SquidServer.password)@127.0.0.1:\(squid.authPort)", markedURL(inURL)])
        #expect(fromURL.status == 0, "\(fromURL.stderr)")
        #expect(fromURL.stdout == hello)
        #expect(await squid.entry { $0.url.contains(inURL) && $0.status == 200 }?.user == SquidServer.user)

        let unanswered = try await courier(["-i", "-x", proxy, markedURL(proxyMarker())])
        #expect(unanswered.status == 0, "\(unanswered.stderr)")
        #expect(unanswered.stdout.hasPrefix("HTTP/1.1 407"), "\(unanswered.stdout)")
    }

    @Test("squid's 407 to CONNECT: --proxy-user answers it; without it, or with a wrong one, courier fails (URLError -1013)")
    func tunnelAuthentication() async throws {
        let proxy = "http://127.0.0.1:\(squid.authPort)"
        let port = nginx.tlsPorts["h1"]!
        let url = "https://127.0.0.1:\(port)/files/hello.txt"
        let before = squid.tunnelCount(to: "127.0.0.1:\(port)", port: squid.authPort, user: SquidServer.user)
        let answered = try await courier(["--cacert", caFile, "-x", proxy, "--proxy-user", "\(SquidServer.user):\(SquidServer.password)", url])
        #expect(answered.status == 0, "\(answered.stderr)")
        #expect(answered.stdout == hello)
        #expect(await squid.tunnelLogged(to: "127.0.0.1:\(port)", port: squid.authPort, user: SquidServer.user, after: before), "\(squid.accessLog())")

        // An unknown user for the wrong credential: squid merges concurrent checks of one user name.
        for extra in [[], ["--proxy-user", "stranger-\(proxyMarker().prefix(8)):wrong"]] {
            let refused = try await courier(["--cacert", caFile, "-x", proxy] + extra + [url])
            #expect(refused.status == 56, "curl's 56 for a refused CONNECT: \(extra): \(refused.stderr)")
            #expect(refused.stdout.isEmpty)
            #expect(refused.stderr.contains("(URLError -1013)"), "\(extra): \(refused.stderr)")
        }
    }

    /// A fresh origin on its own port, so pproxy's log line for it is this test's alone.
    func socksOrigin() throws -> AnsweringServer {
        try AnsweringServer { _, _ in .ok("through pproxy") }
    }

    @Test("--socks5-hostname: pproxy gets the name; --socks5: pproxy gets the address", arguments: ["--socks5-hostname", "--socks5"])
    func socksOptions(_ option: String) async throws {
        let origin = try socksOrigin()
        let run = try await courier(["-v", option, "127.0.0.1:\(socks.openPort)", "http://localhost:\(origin.port)/socks"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "through pproxy")
        let scheme = option == "--socks5" ? "socks5" : "socks5h"
        #expect(run.stderr.contains("* Using proxy \(scheme)://127.0.0.1:\(socks.openPort) (from \(option))"), "\(run.stderr)")
        // -v follows the dial live: the proxy's address, then its tunnel.
        #expect(run.stderr.contains("*   Trying 127.0.0.1:\(socks.openPort)...\n"), "\(run.stderr)")
        #expect(run.stderr.contains("* Tunnel through the proxy 127.0.0.1:\(socks.openPort) is open\n"), "\(run.stderr)")
        let destinations = socks.destinations()
        if option == "--socks5" {
            #expect(destinations.contains("127.0.0.1:\(origin.port)"), "\(socks.log())")
            #expect(!destinations.contains("localhost:\(origin.port)"))
        } else {
            #expect(destinations.contains("localhost:\(origin.port)"), "\(socks.log())")
            #expect(!destinations.contains("127.0.0.1:\(origin.port)"))
        }
        #expect(origin.requests.map(\.target) == ["/socks"])
    }

    @Test("--noproxy 127.0.0.1 with -x: the request goes direct")
    func noProxyOption() async throws {
        let marker = proxyMarker()
        let run = try await courier(["-v", "-x", squidURL, "--noproxy", "127.0.0.1", markedURL(marker)])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == hello)
        #expect(!run.stderr.contains("Using proxy"), "\(run.stderr)")
        #expect(run.stderr.contains("*   Trying 127.0.0.1:\(nginx.port)...\n"), "\(run.stderr)")
        #expect(!run.stderr.contains("Trying 127.0.0.1:\(squid.openPort)"))
        #expect(await squidNeverSaw(marker))
    }

    // MARK: - The environment

    @Test("http_proxy sends http through squid")
    func httpProxyVariable() async throws {
        let marker = proxyMarker()
        let run = try await courier(["-v", markedURL(marker)], environment: ["http_proxy": squidURL])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == hello)
        #expect(run.stderr.contains("* Using proxy \(squidURL) (from the environment)"), "\(run.stderr)")
        #expect(run.stderr.contains("*   Trying 127.0.0.1:\(squid.openPort)...\n"), "\(run.stderr)")
        let entry = try #require(await squid.entry { $0.url.contains(marker) })
        #expect(entry.status == 200)
        #expect(entry.port == squid.openPort)
    }

    @Test("HTTP_PROXY alone is ignored (httpoxy): the request goes direct")
    func upperCaseHTTPProxyIgnored() async throws {
        let marker = proxyMarker()
        let run = try await courier(["-v", markedURL(marker)], environment: ["HTTP_PROXY": squidURL])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == hello)
        #expect(!run.stderr.contains("Using proxy"), "\(run.stderr)")
        #expect(run.stderr.contains("*   Trying 127.0.0.1:\(nginx.port)...\n"), "\(run.stderr)")
        #expect(!run.stderr.contains("Trying 127.0.0.1:\(squid.openPort)"))
        #expect(await squidNeverSaw(marker))
    }

    @Test("https_proxy and HTTPS_PROXY tunnel https through squid", arguments: ["https_proxy", "HTTPS_PROXY"])
    func httpsProxyVariable(_ name: String) async throws {
        let port = nginx.tlsPorts["h1"]!
        let before = squid.tunnelCount(to: "127.0.0.1:\(port)", port: squid.openPort)
        let run = try await courier(["-v", "--cacert", caFile, "https://127.0.0.1:\(port)/files/hello.txt"], environment: [name: squidURL])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == hello)
        #expect(run.stderr.contains("* Using proxy \(squidURL) (from the environment)"), "\(run.stderr)")
        #expect(run.stderr.contains("*   Trying 127.0.0.1:\(squid.openPort)...\n"), "\(run.stderr)")
        #expect(run.stderr.contains("* Tunnel through the proxy 127.0.0.1:\(squid.openPort) is open\n"), "\(run.stderr)")
        #expect(await squid.tunnelLogged(to: "127.0.0.1:\(port)", port: squid.openPort, after: before), "\(squid.accessLog())")
    }

    @Test("https_proxy does not apply to http URLs")
    func httpsProxyNotForHTTP() async throws {
        let marker = proxyMarker()
        let run = try await courier(["-v", markedURL(marker)], environment: ["https_proxy": squidURL])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("*   Trying 127.0.0.1:\(nginx.port)...\n"), "\(run.stderr)")
        #expect(!run.stderr.contains("Trying 127.0.0.1:\(squid.openPort)"))
        #expect(await squidNeverSaw(marker))
    }

    @Test("all_proxy=socks5h://: pproxy carries the request and resolves the name")
    func allProxyVariable() async throws {
        let origin = try socksOrigin()
        let proxy = "socks5h://127.0.0.1:\(socks.openPort)"
        let run = try await courier(["-v", "http://localhost:\(origin.port)/all"], environment: ["all_proxy": proxy])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "through pproxy")
        #expect(run.stderr.contains("* Using proxy \(proxy) (from the environment)"), "\(run.stderr)")
        #expect(socks.destinations().contains("localhost:\(origin.port)"), "\(socks.log())")
        #expect(origin.requests.map(\.target) == ["/all"])
    }

    @Test("a user and password in http_proxy answer the proxy's 407")
    func credentialInProxyVariable() async throws {
        let marker = proxyMarker()
        let proxy = "http://\(SquidServer.user):\(SquidServer.password)@127.0.0.1:\(squid.authPort)"
        let run = try await courier([markedURL(marker)], environment: ["http_proxy": proxy])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == hello)
        #expect(await squid.entry { $0.url.contains(marker) && $0.status == 200 }?.user == SquidServer.user)
    }

    @Test("no_proxy=127.0.0.0/8 sends 127.0.0.1 direct despite http_proxy")
    func noProxyVariable() async throws {
        let marker = proxyMarker()
        let run = try await courier(["-v", markedURL(marker)], environment: ["http_proxy": squidURL, "no_proxy": "127.0.0.0/8"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == hello)
        #expect(!run.stderr.contains("Using proxy"), "\(run.stderr)")
        #expect(run.stderr.contains("*   Trying 127.0.0.1:\(nginx.port)...\n"), "\(run.stderr)")
        #expect(!run.stderr.contains("Trying 127.0.0.1:\(squid.openPort)"))
        #expect(await squidNeverSaw(marker))
    }

    @Test("--proxy-user answers an HTTP proxy from http_proxy, and authenticates to a SOCKS5 proxy from all_proxy")
    func proxyUserWithEnvironmentProxy() async throws {
        let marker = proxyMarker()
        let run = try await courier(
            ["--proxy-user", "\(SquidServer.user):\(SquidServer.password)", markedURL(marker)],
            environment: ["http_proxy": "http://127.0.0.1:\(squid.authPort)"]
        )
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == hello)
        #expect(await squid.entry { $0.url.contains(marker) && $0.status == 200 }?.user == SquidServer.user)

        let origin = try socksOrigin()
        let socksRun = try await courier(
            ["--proxy-user", "\(SOCKSProxyServer.user):\(SOCKSProxyServer.password)", "http://localhost:\(origin.port)/socks"],
            environment: ["all_proxy": "socks5h://127.0.0.1:\(socks.authPort)"]
        )
        #expect(socksRun.status == 0, "\(socksRun.stderr)")
        #expect(socksRun.stdout == "through pproxy")
        #expect(socks.destinations().contains("localhost:\(origin.port)"), "\(socks.log())")
    }
}
