import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// What a scripted proxy read, shared with its connection threads.
final class ScriptedProxyLog: Sendable {
    private let requests = Mutex<[ScriptedRequest]>([])
    private let chunks = Mutex<[[UInt8]]>([])

    func add(_ request: ScriptedRequest) { requests.withLock { $0.append(request) } }
    func add(_ bytes: [UInt8]) { chunks.withLock { $0.append(bytes) } }

    /// The HTTP requests (CONNECT or forwarded) read, in order.
    var httpRequests: [ScriptedRequest] { requests.withLock { $0 } }
    /// The raw messages read (SOCKS5), in order.
    var messages: [[UInt8]] { chunks.withLock { $0 } }
}

extension ScriptedConnection {
    /// Reads until at least `count` bytes came, EOF or `timeout`; returns all that came. The
    /// client sends each SOCKS5 message only after the previous reply, so nothing of the next
    /// message is read with it.
    func readBytes(_ count: Int, timeout: TimeInterval = 5) -> [UInt8] {
        let deadline = Date().addingTimeInterval(timeout)
        var bytes: [UInt8] = []
        while bytes.count < count {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { break }
            let chunk = readAvailable(timeout: remaining)
            if chunk.isEmpty { break }
            bytes += chunk
        }
        return bytes
    }
}

/// Proxies that misbehave, scripted byte by byte: refusals, garbage, resets, silence, SOCKS5
/// replies of every kind, and configurations that cannot be used.
@Suite("Proxy faults")
struct ProxyFaultTests {
    /// Through an HTTP proxy this takes a CONNECT tunnel to localhost:4443.
    static let tunnelled = URL(string: "https://localhost:4443/x")!

    /// Loads `request` through the proxies of `dictionary`; returns the task's outcome.
    func load(_ request: URLRequest, through dictionary: [AnyHashable: Any]) async -> (body: Data?, response: URLResponse?, error: (any Error)?) {
        let session = URLSession(configuration: .proxied(dictionary, timeout: 10))
        defer { session.finishTasksAndInvalidate() }
        let (data, response, error) = await loadWithCompletionHandler(session, request)
        return (data, response, error)
    }

    /// A proxy that reads the CONNECT request, writes `reply` in one write, and waits for the
    /// client to hang up.
    func connectProxy(replying reply: String, log: ScriptedProxyLog) throws -> ScriptedServer {
        try ScriptedServer { connection in
            guard let request = connection.readRequest(timeout: 5) else { return }
            log.add(request)
            connection.write(reply)
            connection.readToEOF(timeout: 10)
        }
    }

    // MARK: - HTTP CONNECT

    @Test("CONNECT refused (403, 502): cannot connect to host; the message names the proxy and the status", arguments: [(403, "Forbidden"), (502, "Bad Gateway")])
    func tunnelRefused(_ refusal: (Int, String)) async throws {
        let log = ScriptedProxyLog()
        let proxy = try connectProxy(replying: "HTTP/1.1 \(refusal.0) \(refusal.1)\r\nContent-Length: 0\r\n\r\n", log: log)
        let result = await load(URLRequest(url: Self.tunnelled), through: TestProxies.http(proxy.port))
        #expect(urlErrorCode(result.error) == .cannotConnectToHost, "\(String(describing: result.error))")
        #expect(result.response == nil)
        let message = (result.error as? URLError)?.localizedDescription ?? ""
        #expect(message.contains("\(refusal.0)"), "\(message)")
        #expect(message.contains("127.0.0.1:\(proxy.port)"), "\(message)")
        let connect = try #require(log.httpRequests.first)
        #expect(connect.method == "CONNECT")
        #expect(connect.target == "localhost:4443")
        #expect(connect.version == "HTTP/1.1")
        #expect(connect.header("Host") == "localhost:4443")
        #expect(connect.header("Proxy-Authorization") == nil)
        #expect(proxy.connectionCount == 1)
    }

    @Test("a 407 to CONNECT without a challenge Courier can answer: authentication required, nothing asked")
    func tunnelChallengeWithoutScheme() async throws {
        let log = ScriptedProxyLog()
        let proxy = try connectProxy(replying: "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n", log: log)
        let recorder = ProxyTaskRecorder { _ in (.useCredential, URLCredential(user: "u", password: "p", persistence: .none)) }
        let session = URLSession(configuration: .proxied(TestProxies.http(proxy.port), timeout: 10), delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let loaded = await loadRecorded(session, recorder, URLRequest(url: Self.tunnelled))
        #expect(loaded.code == .userAuthenticationRequired, "\(String(describing: loaded.error))")
        #expect(loaded.response == nil)
        #expect(recorder.challenges.isEmpty)
        #expect(log.httpRequests.count == 1)
        #expect(proxy.connectionCount == 1)
    }

    @Test("a 407 to CONNECT sets no cookie: only its status and challenges are read")
    func tunnelChallengeSetsNoCookie() async throws {
        let log = ScriptedProxyLog()
        let proxy = try connectProxy(
            replying: "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"scripted\"\r\nSet-Cookie: planted=1; Secure; Path=/\r\nContent-Length: 0\r\n\r\n",
            log: log
        )
        let recorder = ProxyTaskRecorder { _ in (.cancelAuthenticationChallenge, nil) }
        let configuration = URLSessionConfiguration.proxied(TestProxies.http(proxy.port), timeout: 10)
        configuration.httpCookieAcceptPolicy = .always
        let cookies = try #require(configuration.httpCookieStorage)
        let session = URLSession(configuration: configuration, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let loaded = await loadRecorded(session, recorder, URLRequest(url: Self.tunnelled))
        #expect(loaded.code == .cancelled, "\(String(describing: loaded.error))")
        #expect(recorder.challenges.count == 1)
        #expect(recorder.challenges.first?.space.realm == "scripted")
        #expect(cookies.cookies?.isEmpty ?? true, "\(String(describing: cookies.cookies))")
    }

    @Test("a caller's Proxy-Authorization goes on the CONNECT")
    func callerCredentialOnConnect() async throws {
        let log = ScriptedProxyLog()
        let proxy = try connectProxy(replying: "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", log: log)
        var request = URLRequest(url: Self.tunnelled)
        request.setValue("Basic Y2FsbGVyOnNlY3JldA==", forHTTPHeaderField: "Proxy-Authorization")
        let result = await load(request, through: TestProxies.http(proxy.port))
        #expect(urlErrorCode(result.error) == .cannotConnectToHost)
        #expect(log.httpRequests.first?.header("Proxy-Authorization") == "Basic Y2FsbGVyOnNlY3JldA==")
        #expect(proxy.connectionCount == 1)
    }

    @Test("a CONNECT reply that is not HTTP: bad server response")
    func tunnelGarbage() async throws {
        let log = ScriptedProxyLog()
        let proxy = try connectProxy(replying: "NOT HTTP\r\n\r\n", log: log)
        let result = await load(URLRequest(url: Self.tunnelled), through: TestProxies.http(proxy.port))
        #expect(urlErrorCode(result.error) == .badServerResponse, "\(String(describing: result.error))")
        #expect((result.error as? URLError)?.localizedDescription.contains("127.0.0.1:\(proxy.port)") == true)
        #expect(log.httpRequests.count == 1)
    }

    @Test("bytes right after the CONNECT's 200, before the client spoke: bad server response")
    func tunnelBytesAfterReply() async throws {
        let log = ScriptedProxyLog()
        let proxy = try connectProxy(replying: "HTTP/1.1 200 Connection established\r\n\r\nEXTRA BYTES", log: log)
        let result = await load(URLRequest(url: Self.tunnelled), through: TestProxies.http(proxy.port))
        #expect(urlErrorCode(result.error) == .badServerResponse, "\(String(describing: result.error))")
        #expect(log.httpRequests.count == 1)
        #expect(proxy.connectionCount == 1)
    }

    @Test("a proxy that resets the connection on CONNECT: connection lost")
    func tunnelReset() async throws {
        let log = ScriptedProxyLog()
        let proxy = try ScriptedServer { connection in
            guard let request = connection.readRequest(timeout: 5) else { return }
            log.add(request)
            connection.reset()
        }
        let result = await load(URLRequest(url: Self.tunnelled), through: TestProxies.http(proxy.port))
        #expect(urlErrorCode(result.error) == .networkConnectionLost, "\(String(describing: result.error))")
        #expect(log.httpRequests.first?.method == "CONNECT")
        #expect(proxy.connectionCount == 1)
    }

    @Test("a proxy that never answers CONNECT: timed out at the request's timeout")
    func tunnelStall() async throws {
        let log = ScriptedProxyLog()
        // Long reads: on a loaded machine the CONNECT may come late, and the script must not
        // close before the client's timer fires, however late.
        let proxy = try ScriptedServer { connection in
            guard let request = connection.readRequest(timeout: 60) else { return }
            log.add(request)
            connection.readToEOF(timeout: 60)
        }
        var request = URLRequest(url: Self.tunnelled)
        // Under the session's 10 s, and long enough that the CONNECT is surely sent first.
        request.timeoutInterval = 5
        let result = await load(request, through: TestProxies.http(proxy.port))
        #expect(urlErrorCode(result.error) == .timedOut, "\(String(describing: result.error))")
        // The script records the CONNECT on its own thread, which may run after the failure.
        _ = await pollUntil(timeout: .seconds(30)) { log.httpRequests.count >= 1 }
        #expect(log.httpRequests.count == 1)
        #expect(proxy.connectionCount == 1)
    }

    @Test("nothing listens on the proxy's port: cannot connect, and the message names the proxy", arguments: ["http", "https", "socks"])
    func unreachable(_ kind: String) async throws {
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        let port = closed.port
        let dictionary = kind == "socks" ? TestProxies.socks(port) : TestProxies.http(port)
        let url = URL(string: kind == "http" ? "http://127.0.0.1:9/x" : "https://127.0.0.1:9/x")!
        let result = await load(URLRequest(url: url), through: dictionary)
        #expect(urlErrorCode(result.error) == .cannotConnectToHost, "\(String(describing: result.error))")
        let message = (result.error as? URLError)?.localizedDescription ?? ""
        #expect(message.contains("proxy 127.0.0.1:\(port)"), "\(message)")
    }

    // MARK: - SOCKS5

    /// A SOCKS5 proxy that reads the greeting (`greetingLength` bytes), answers `methodReply`,
    /// then runs `rest`.
    func socksProxy(greetingLength: Int = 3, methodReply: [UInt8], log: ScriptedProxyLog, rest: @escaping @Sendable (ScriptedConnection) -> Void = { _ in }) throws -> ScriptedServer {
        try ScriptedServer { connection in
            log.add(connection.readBytes(greetingLength))
            connection.write(methodReply)
            rest(connection)
            connection.readToEOF(timeout: 10)
        }
    }

    static let domainConnect: [UInt8] = [5, 1, 0, 3, 9] + Array("localhost".utf8) + [0x04, 0xD2]

    @Test("SOCKS5 refuses every method when none are configured (05 FF): user authentication required")
    func socksNoAcceptableMethod() async throws {
        let log = ScriptedProxyLog()
        let proxy = try socksProxy(methodReply: [0x05, 0xFF], log: log)
        let result = await load(URLRequest(url: URL(string: "http://localhost:1234/")!), through: TestProxies.socks(proxy.port))
        #expect(urlErrorCode(result.error) == .userAuthenticationRequired, "\(String(describing: result.error))")
        #expect((result.error as? URLError)?.localizedDescription.contains("127.0.0.1:\(proxy.port)") == true)
        #expect(log.messages == [[5, 1, 0]])
    }

    @Test("SOCKS5 username/password rejected (RFC 1929 status 1): user authentication required")
    func socksCredentialsRejected() async throws {
        let log = ScriptedProxyLog()
        let proxy = try socksProxy(greetingLength: 4, methodReply: [0x05, 0x02], log: log) { connection in
            log.add(connection.readBytes(11))
            connection.write([0x01, 0x01])
        }
        let result = await load(URLRequest(url: URL(string: "http://localhost:1234/")!), through: TestProxies.socks(proxy.port, user: "user", password: "pass"))
        #expect(urlErrorCode(result.error) == .userAuthenticationRequired, "\(String(describing: result.error))")
        #expect(log.messages == [[5, 2, 0, 2], [1, 4] + Array("user".utf8) + [4] + Array("pass".utf8)])
        #expect(proxy.connectionCount == 1)
    }

    @Test("SOCKS5 connect reply 5 (connection refused): cannot connect to host")
    func socksConnectRefused() async throws {
        let log = ScriptedProxyLog()
        let proxy = try socksProxy(methodReply: [0x05, 0x00], log: log) { connection in
            log.add(connection.readBytes(Self.domainConnect.count))
            connection.write([5, 5, 0, 1, 0, 0, 0, 0, 0, 0])
        }
        let result = await load(URLRequest(url: URL(string: "http://localhost:1234/")!), through: TestProxies.socks(proxy.port))
        #expect(urlErrorCode(result.error) == .cannotConnectToHost, "\(String(describing: result.error))")
        #expect((result.error as? URLError)?.localizedDescription.contains("connection refused") == true)
        #expect(log.messages == [[5, 1, 0], Self.domainConnect])
        #expect(proxy.connectionCount == 1)
    }

    @Test("a reply of version 4 to a SOCKS5 greeting: bad server response")
    func socksWrongVersion() async throws {
        let log = ScriptedProxyLog()
        let proxy = try socksProxy(methodReply: [0x04, 0x00], log: log)
        let result = await load(URLRequest(url: URL(string: "http://localhost:1234/")!), through: TestProxies.socks(proxy.port))
        #expect(urlErrorCode(result.error) == .badServerResponse, "\(String(describing: result.error))")
        #expect(log.messages == [[5, 1, 0]])
        #expect(proxy.connectionCount == 1)
    }

    @Test("a whole SOCKS5 exchange: the CONNECT names the destination, then HTTP on the same connection", arguments: ["ipv6", "domain"])
    func socksExchange(_ kind: String) async throws {
        let loopback6: [UInt8] = Array(repeating: 0, count: 15) + [1]
        let url: URL
        let connect: [UInt8]
        let reply: [UInt8]
        let host: String
        let target: String
        if kind == "ipv6" {
            url = URL(string: "http://[::1]:8080/x")!
            connect = [5, 1, 0, 4] + loopback6 + [0x1F, 0x90]
            reply = [5, 0, 0, 4] + loopback6 + [0x1F, 0x90]
            host = "[::1]:8080"
            target = "/x"
        } else {
            url = URL(string: "http://localhost:1234/")!
            connect = Self.domainConnect
            reply = [5, 0, 0, 1, 127, 0, 0, 1, 0x04, 0xD2]
            host = "localhost:1234"
            target = "/"
        }
        let log = ScriptedProxyLog()
        let proxy = try socksProxy(methodReply: [0x05, 0x00], log: log) { connection in
            log.add(connection.readBytes(connect.count))
            connection.write(reply)
            guard let request = connection.readRequest(timeout: 5) else { return }
            log.add(request)
            connection.respond(headers: [("Content-Type", "text/plain")], body: Array("through the scripted SOCKS5 proxy".utf8))
        }
        let result = await load(URLRequest(url: url), through: TestProxies.socks(proxy.port))
        #expect(result.error == nil, "\(String(describing: result.error))")
        #expect((result.response as? HTTPURLResponse)?.statusCode == 200)
        #expect(result.body.map { String(decoding: $0, as: UTF8.self) } == "through the scripted SOCKS5 proxy")
        #expect(log.messages == [[5, 1, 0], connect])
        let request = try #require(log.httpRequests.first)
        #expect(request.method == "GET")
        #expect(request.target == target)
        #expect(request.header("Host") == host)
        #expect(proxy.connectionCount == 1)
    }

    // MARK: - Unusable configurations

    @Test("a proxy dictionary that cannot be used fails the task with a message naming the key; nothing goes direct", arguments: ["HTTPProxy", "HTTPPort", "ProxyAutoConfigEnable"])
    func unusableDictionary(_ key: String) async throws {
        let origin = try AnsweringServer { _, _ in .ok("direct") }
        let dictionary: [AnyHashable: Any]
        switch key {
        case "HTTPProxy": dictionary = [kCFNetworkProxiesHTTPEnable: 1]
        case "HTTPPort": dictionary = [kCFNetworkProxiesHTTPEnable: 1, kCFNetworkProxiesHTTPProxy: "127.0.0.1", kCFNetworkProxiesHTTPPort: 70000]
        default: dictionary = [kCFNetworkProxiesProxyAutoConfigEnable: 1]
        }
        let result = await load(URLRequest(url: origin.url("/must-not-arrive")), through: dictionary)
        #expect(urlErrorCode(result.error) == .unsupportedURL, "\(String(describing: result.error))")
        #expect((result.error as? URLError)?.localizedDescription.contains(key) == true, "\(String(describing: result.error))")
        #expect(result.response == nil)
        #expect(origin.requests.isEmpty)
        #expect(origin.server.connectionCount == 0)
    }
}
