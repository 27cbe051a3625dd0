import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// SOCKS5 through pproxy, and the hosts that bypass every proxy.
extension ProxyTests {
    // MARK: - SOCKS5

    @Test("SOCKS5: the proxy resolves the name by default; with CourierSOCKSResolvesLocally it gets the address", arguments: [false, true])
    func socksResolution(_ locally: Bool) async throws {
        let recorder = ProxyTaskRecorder()
        let session = makeSession(TestProxies.socks(socks.openPort, resolvesLocally: locally), recorder)
        defer { session.finishTasksAndInvalidate() }
        let loaded = await loadRecorded(session, recorder, URLRequest(url: URL(string: "http://localhost:\(nginx.port)/files/hello.txt")!))
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.status == 200)
        #expect(loaded.bytes == NginxServer.fixtures["hello.txt"])
        let last = try #require(loaded.last)
        #expect(last.isProxyConnection)
        #expect(last.remotePort == socks.openPort)
        let localPort = try #require(last.localPort)
        let destination = locally ? "127.0.0.1:\(nginx.port)" : "localhost:\(nginx.port)"
        #expect(socks.logLines.contains("socks5 127.0.0.1:\(localPort) -> \(destination)"), "\(socks.log())")
    }

    @Test("https through SOCKS5: TLS and h2 with nginx end to end")
    func socksTLS() async throws {
        let recorder = ProxyTaskRecorder()
        let session = makeSession(TestProxies.socks(socks.openPort), recorder)
        defer { session.finishTasksAndInvalidate() }
        let loaded = await loadRecorded(session, recorder, URLRequest(url: nginx.tlsURL("good", "/files/hello.txt", host: "localhost")))
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.status == 200)
        #expect(loaded.bytes == NginxServer.fixtures["hello.txt"])
        let last = try #require(loaded.last)
        #expect(last.networkProtocolName == "h2")
        #expect(last.isProxyConnection)
        #expect(last.remotePort == socks.openPort)
        let localPort = try #require(last.localPort)
        #expect(socks.logLines.contains("socks5 127.0.0.1:\(localPort) -> localhost:\(goodTLSPort)"), "\(socks.log())")
    }

    @Test("SOCKS5 username/password: the configured pair opens the tunnel")
    func socksCredentials() async throws {
        let recorder = ProxyTaskRecorder()
        let session = makeSession(TestProxies.socks(socks.authPort, user: SOCKSProxyServer.user, password: SOCKSProxyServer.password), recorder)
        defer { session.finishTasksAndInvalidate() }
        let loaded = await loadRecorded(session, recorder, URLRequest(url: URL(string: "http://localhost:\(nginx.port)/files/hello.txt")!))
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.bytes == NginxServer.fixtures["hello.txt"])
        #expect(loaded.last?.remotePort == socks.authPort)
        let localPort = try #require(loaded.last?.localPort)
        #expect(socks.logLines.contains("socks5 127.0.0.1:\(localPort) -> localhost:\(nginx.port)"), "\(socks.log())")
    }

    /// pproxy closes the connection without a SOCKS reply when credentials are wrong or missing
    /// (no 0xFF method, no RFC 1929 failure status): a hang-up before the method selection or
    /// the authentication reply reads as a refusal. The RFC answers are checked against a
    /// scripted proxy (ProxyFaultTests).
    @Test("SOCKS5 credentials wrong or missing: pproxy hangs up, authentication is required and the proxy named", arguments: [true, false])
    func socksCredentialsRefused(_ wrongPassword: Bool) async throws {
        let wrong = "wrong-\(proxyMarker().prefix(8))"
        let dictionary = wrongPassword
            ? TestProxies.socks(socks.authPort, user: SOCKSProxyServer.user, password: wrong)
            : TestProxies.socks(socks.authPort)
        let recorder = ProxyTaskRecorder()
        let session = makeSession(dictionary, recorder)
        defer { session.finishTasksAndInvalidate() }
        let loaded = await loadRecorded(session, recorder, URLRequest(url: URL(string: "http://localhost:\(nginx.port)/files/hello.txt")!))
        #expect(loaded.code == .userAuthenticationRequired, "\(String(describing: loaded.error))")
        #expect((loaded.error as? URLError)?.localizedDescription.contains("127.0.0.1:\(socks.authPort)") == true)
        #expect(loaded.response == nil)
        if wrongPassword {
            #expect(socks.log().contains("b'\(SOCKSProxyServer.user)':b'\(wrong)'"), "\(socks.log())")
        }
    }

    // MARK: - Exceptions

    @Test("ExceptionsList: an origin it lists goes direct, another through squid", arguments: ["127.0.0.1", "127.0.0.0/8", "127.0.0.1:PORT", "127.*"])
    func exceptionsList(_ pattern: String) async throws {
        let marker = proxyMarker()
        let recorder = ProxyTaskRecorder()
        let exception = pattern.replacingOccurrences(of: "PORT", with: "\(nginx.port)")
        let session = makeSession(TestProxies.http(squid.openPort, exceptions: [exception]), recorder)
        defer { session.finishTasksAndInvalidate() }
        let excepted = await loadRecorded(session, recorder, URLRequest(url: nginx.url("/files/hello.txt?proxy-excepted=\(marker)")))
        #expect(excepted.status == 200)
        #expect(excepted.last?.isProxyConnection == false)
        #expect(excepted.last?.remotePort == nginx.port)
        // A name is not an address: localhost is not excepted, and goes through squid.
        let proxied = await loadRecorded(session, recorder, URLRequest(url: URL(string: "http://localhost:\(nginx.port)/files/hello.txt?proxy-control=\(marker)")!))
        #expect(proxied.status == 200)
        #expect(proxied.last?.isProxyConnection == true)
        #expect(await squid.entry { $0.url.contains("proxy-control=\(marker)") }?.status == 200)
        #expect(squid.accessEntries().allSatisfy { !$0.url.contains("proxy-excepted=\(marker)") })
    }

    @Test("ExcludeSimpleHostnames: localhost goes direct, an address literal through squid")
    func simpleHostnames() async throws {
        let marker = proxyMarker()
        let recorder = ProxyTaskRecorder()
        let session = makeSession(TestProxies.http(squid.openPort, excludeSimpleHostnames: true), recorder)
        defer { session.finishTasksAndInvalidate() }
        let simple = await loadRecorded(session, recorder, URLRequest(url: URL(string: "http://localhost:\(nginx.port)/files/hello.txt?proxy-simple=\(marker)")!))
        #expect(simple.status == 200)
        #expect(simple.last?.isProxyConnection == false)
        let literal = await loadRecorded(session, recorder, URLRequest(url: nginx.url("/files/hello.txt?proxy-literal=\(marker)")))
        #expect(literal.status == 200)
        #expect(literal.last?.isProxyConnection == true)
        #expect(await squid.entry { $0.url.contains("proxy-literal=\(marker)") }?.status == 200)
        #expect(squid.accessEntries().allSatisfy { !$0.url.contains("proxy-simple=\(marker)") })
    }
}
