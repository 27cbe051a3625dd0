import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// A session delegate for proxied loads: answers 401/407 challenges with `answer` and records
/// them, and keeps each task's metrics by task identifier. Server trust is left to default
/// handling (the test CA is in the process's trust store).
final class ProxyTaskRecorder: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    struct Challenge: @unchecked Sendable {
        var space: URLProtectionSpace
        var previousFailureCount: Int
        var proposedUser: String?
        var failureStatus: Int?
    }

    private struct Record: @unchecked Sendable {
        var challenges: [Challenge] = []
        var metrics: [Int: URLSessionTaskMetrics] = [:]
    }

    typealias Answer = @Sendable (URLAuthenticationChallenge) -> (URLSession.AuthChallengeDisposition, URLCredential?)
    private let answer: Answer
    private let record = Mutex(Record())

    init(_ answer: @escaping Answer = { _ in (.performDefaultHandling, nil) }) {
        self.answer = answer
    }

    /// Answers a proxy's challenge with squid's user and `password`, anything else by default.
    static func answeringProxy(password: String = SquidServer.password, persistence: URLCredential.Persistence = .forSession) -> ProxyTaskRecorder {
        ProxyTaskRecorder { challenge in
            challenge.protectionSpace.isProxy()
                ? (.useCredential, URLCredential(user: SquidServer.user, password: password, persistence: persistence))
                : (.performDefaultHandling, nil)
        }
    }

    var challenges: [Challenge] { record.withLock { $0.challenges } }

    func transactions(of task: URLSessionTask?) -> [URLSessionTaskTransactionMetrics] {
        guard let task else { return [] }
        return record.withLock { $0.metrics[task.taskIdentifier]?.transactionMetrics ?? [] }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        let method = challenge.protectionSpace.authenticationMethod
        guard method == NSURLAuthenticationMethodHTTPBasic || method == NSURLAuthenticationMethodHTTPDigest else {
            completionHandler(.performDefaultHandling, nil)
            return
        }
        record.withLock {
            $0.challenges.append(Challenge(
                space: challenge.protectionSpace, previousFailureCount: challenge.previousFailureCount,
                proposedUser: challenge.proposedCredential?.user, failureStatus: (challenge.failureResponse as? HTTPURLResponse)?.statusCode
            ))
        }
        let (disposition, credential) = answer(challenge)
        completionHandler(disposition, credential)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
        record.withLock { $0.metrics[task.taskIdentifier] = metrics }
    }
}

/// What one completion-handler load produced, with the task's transactions.
struct ProxiedLoad: @unchecked Sendable {
    var body: Data?
    var response: HTTPURLResponse?
    var error: (any Error)?
    var transactions: [URLSessionTaskTransactionMetrics]

    var status: Int? { response?.statusCode }
    var bytes: [UInt8]? { body.map { Array($0) } }
    var text: String? { body.map { String(decoding: $0, as: UTF8.self) } }
    var code: URLError.Code? { urlErrorCode(error) }
    var last: URLSessionTaskTransactionMetrics? { transactions.last }
}

/// Loads `request` with a completion handler on a session whose delegate is `recorder`; the
/// metrics are reported before the handler runs, so they are there when this returns.
func loadRecorded(_ session: URLSession, _ recorder: ProxyTaskRecorder, _ request: URLRequest, started onStart: (@Sendable (URLSessionDataTask) -> Void)? = nil) async -> ProxiedLoad {
    var started: URLSessionDataTask?
    let (data, response, error) = await withCheckedContinuation { continuation in
        let task = session.dataTask(with: request) { data, response, error in
            continuation.resume(returning: (data, response, error))
        }
        started = task
        onStart?(task)
        task.resume()
    }
    return ProxiedLoad(body: data, response: response as? HTTPURLResponse, error: error, transactions: recorder.transactions(of: started))
}

/// `connectionProxyDictionary` values for the tests.
enum TestProxies {
    /// An HTTP proxy on 127.0.0.1:`port` for http (forwarded) and https (CONNECT) URLs.
    static func http(_ port: Int, exceptions: [String]? = nil, excludeSimpleHostnames: Bool = false) -> [AnyHashable: Any] {
        var dictionary: [AnyHashable: Any] = [
            kCFNetworkProxiesHTTPEnable: 1, kCFNetworkProxiesHTTPProxy: "127.0.0.1", kCFNetworkProxiesHTTPPort: port,
            kCFNetworkProxiesHTTPSEnable: 1, kCFNetworkProxiesHTTPSProxy: "127.0.0.1", kCFNetworkProxiesHTTPSPort: port,
        ]
        if let exceptions { dictionary[kCFNetworkProxiesExceptionsList] = exceptions }
        if excludeSimpleHostnames { dictionary[kCFNetworkProxiesExcludeSimpleHostnames] = true }
        return dictionary
    }

    /// A SOCKS5 proxy on 127.0.0.1:`port` for every URL.
    static func socks(_ port: Int, resolvesLocally: Bool = false, user: String? = nil, password: String? = nil) -> [AnyHashable: Any] {
        var dictionary: [AnyHashable: Any] = [kCFNetworkProxiesSOCKSEnable: 1, kCFNetworkProxiesSOCKSProxy: "127.0.0.1", kCFNetworkProxiesSOCKSPort: port]
        if resolvesLocally { dictionary[kCourierProxiesSOCKSResolvesLocally] = true }
        if let user { dictionary[kCFStreamPropertySOCKSUser] = user }
        if let password { dictionary[kCFStreamPropertySOCKSPassword] = password }
        return dictionary
    }
}

extension URLSessionConfiguration {
    /// An uncached configuration with these proxies and no credential storage (nothing is
    /// answered by default unless the proxy's URL carries a credential).
    static func proxied(_ dictionary: [AnyHashable: Any], timeout: TimeInterval = 20) -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.uncached
        configuration.connectionProxyDictionary = dictionary
        configuration.urlCredentialStorage = nil
        configuration.timeoutIntervalForRequest = timeout
        return configuration
    }
}

/// A marker no other test puts in a URL, so a shared log's line can be told apart.
func proxyMarker() -> String { UUID().uuidString.lowercased() }

extension SquidServer {
    /// The first access-log entry satisfying `predicate`, polled without holding a thread, up to
    /// `timeout`; nil when none appears.
    func entry(within timeout: Duration = .seconds(10), where predicate: (SquidLogEntry) -> Bool) async -> SquidLogEntry? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let found = accessEntries().first(where: predicate) { return found }
            if ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(50))
        }
    }

    /// The CONNECT tunnels to `target` through `port` with this status and user logged so far.
    /// Tests that check a tunnel count before and after: squid logs a tunnel when it closes, and
    /// other tests only ever add entries (a parallel test can make this pass, never fail).
    func tunnelCount(to target: String, port: Int, status: Int = 200, user: String? = nil) -> Int {
        accessEntries().filter { $0.method == "CONNECT" && $0.url == target && $0.port == port && $0.status == status && $0.user == user }.count
    }

    /// Waits until more than `count` such tunnels are logged.
    func tunnelLogged(to target: String, port: Int, user: String? = nil, after count: Int, within timeout: Duration = .seconds(10)) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while tunnelCount(to: target, port: port, user: user) <= count {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return true
    }
}

extension SOCKSProxyServer {
    /// The lines of pproxy's log.
    var logLines: [String] { log().split(separator: "\n").map(String.init) }
}

/// Proxies against real ones on loopback: squid (HTTP, forwarding and CONNECT, with and without
/// Basic proxy authentication) and pproxy (SOCKS5), with nginx and httpbin as origins.
@Suite("Proxies")
struct ProxyTests {
    let nginx: NginxServer
    let httpbin: HttpbinServer
    let squid: SquidServer
    let socks: SOCKSProxyServer

    init() throws {
        nginx = try NginxServer.shared()
        httpbin = try HttpbinServer.shared()
        squid = try SquidServer.shared()
        socks = try SOCKSProxyServer.shared()
    }

    func makeSession(_ dictionary: [AnyHashable: Any], _ recorder: ProxyTaskRecorder) -> URLSession {
        URLSession(configuration: .proxied(dictionary), delegate: recorder, delegateQueue: nil)
    }

    var goodTLSPort: Int { nginx.tlsPorts["good"]! }

    // MARK: - HTTP proxy: forwarding and tunnels

    @Test("http through squid: absolute-form to the proxy, nginx's 200, a proxy connection in the metrics")
    func forwarded() async throws {
        let marker = proxyMarker()
        let url = nginx.url("/files/hello.txt?proxy-test=\(marker)")
        let recorder = ProxyTaskRecorder()
        let session = makeSession(TestProxies.http(squid.openPort), recorder)
        defer { session.finishTasksAndInvalidate() }
        let loaded = await loadRecorded(session, recorder, URLRequest(url: url))
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.status == 200)
        #expect(loaded.bytes == NginxServer.fixtures["hello.txt"])
        #expect(loaded.response?.value(forHTTPHeaderField: "Via")?.contains("courier-squid") == true)
        let last = try #require(loaded.last)
        #expect(last.isProxyConnection)
        #expect(last.remoteAddress == "127.0.0.1")
        #expect(last.remotePort == squid.openPort)
        #expect(last.networkProtocolName == "http/1.1")
        let entry = try #require(await squid.entry { $0.url.contains(marker) })
        #expect(entry.method == "GET")
        #expect(entry.url == url.absoluteString)
        #expect(entry.port == squid.openPort)
        #expect(entry.status == 200)
        #expect(entry.user == nil)
    }

    @Test("one connection to the proxy carries requests for two origins")
    func reusePerProxy() async throws {
        let marker = proxyMarker()
        let recorder = ProxyTaskRecorder()
        let session = makeSession(TestProxies.http(squid.openPort), recorder)
        defer { session.finishTasksAndInvalidate() }
        let first = await loadRecorded(session, recorder, URLRequest(url: nginx.url("/files/hello.txt?proxy-reuse=\(marker)")))
        // httpbin shows Via only with show_env.
        let second = await loadRecorded(session, recorder, URLRequest(url: httpbin.url("/get?show_env=1&proxy-reuse=\(marker)")))
        #expect(first.status == 200)
        #expect(second.status == 200)
        #expect(try HttpbinReply(second.body).header("Via")?.contains("courier-squid") == true)
        let one = try #require(first.last)
        let two = try #require(second.last)
        #expect(!one.isReusedConnection)
        #expect(two.isReusedConnection)
        #expect(one.isProxyConnection && two.isProxyConnection)
        #expect(one.remotePort == squid.openPort)
        #expect(two.remotePort == squid.openPort)
        #expect(one.localPort == two.localPort)
        // squid logs a transaction as it ends, which may be just after the client has the response.
        #expect(await squid.entry { $0.url.contains("/get?") && $0.url.contains(marker) }?.status == 200)
        #expect(squid.accessEntries().filter { $0.url.contains(marker) }.map(\.status) == [200, 200])
    }

    @Test("https through squid: a CONNECT tunnel, TLS with nginx inside it, h2 by ALPN")
    func tunnel() async throws {
        let target = "127.0.0.1:\(goodTLSPort)"
        let before = squid.tunnelCount(to: target, port: squid.openPort)
        let recorder = ProxyTaskRecorder()
        let session = makeSession(TestProxies.http(squid.openPort), recorder)
        let loaded = await loadRecorded(session, recorder, URLRequest(url: nginx.tlsURL("good", "/files/hello.txt")))
        session.finishTasksAndInvalidate()
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.status == 200)
        #expect(loaded.bytes == NginxServer.fixtures["hello.txt"])
        #expect(loaded.response?.value(forHTTPHeaderField: "X-Server-Protocol") == "HTTP/2.0")
        let last = try #require(loaded.last)
        #expect(last.networkProtocolName == "h2")
        #expect(last.isProxyConnection)
        #expect(last.remotePort == squid.openPort)
        #expect(last.negotiatedTLSProtocolVersion != nil)
        // squid logs the tunnel once it closes: invalidating the session closes it.
        #expect(await squid.tunnelLogged(to: target, port: squid.openPort, after: before), "\(squid.accessLog())")
    }

    @Test("every delivery mode gets nginx's exact bytes through squid", arguments: Delivery.allCases, ["http", "https"])
    func deliveries(_ delivery: Delivery, _ scheme: String) async throws {
        let marker = proxyMarker()
        let path = "/files/64k.bin?proxy-delivery=\(marker)"
        let url = scheme == "http" ? nginx.url(path) : nginx.tlsURL("good", path, host: "localhost")
        let loaded = await load(URLRequest(url: url), via: delivery, configuration: .proxied(TestProxies.http(squid.openPort)))
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.response?.statusCode == 200)
        #expect(loaded.body.map { Array($0) } == NginxServer.fixtures["64k.bin"])
        if delivery == .completionHandler || delivery == .delegate {
            // These two modes report metrics before completion.
            #expect(loaded.record.metrics?.transactionMetrics.last?.isProxyConnection == true)
        }
        if scheme == "http" {
            let entry = await squid.entry { $0.url.contains(marker) }
            #expect(entry?.status == 200)
            #expect(entry?.port == squid.openPort)
        }
    }

    // MARK: - 407

    @Test("a 407 to a forwarded request: an HTTP proxy challenge for squid, answered, 200; squid logs the user")
    func forwardedChallengeAnswered() async throws {
        let marker = proxyMarker()
        let recorder = ProxyTaskRecorder.answeringProxy()
        let session = makeSession(TestProxies.http(squid.authPort), recorder)
        defer { session.finishTasksAndInvalidate() }
        let loaded = await loadRecorded(session, recorder, URLRequest(url: nginx.url("/files/hello.txt?proxy-auth=\(marker)")))
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.status == 200)
        #expect(loaded.bytes == NginxServer.fixtures["hello.txt"])
        let challenges = recorder.challenges
        try #require(challenges.count == 1)
        let space = challenges[0].space
        #expect(space.isProxy())
        #expect(space.proxyType == NSURLProtectionSpaceHTTPProxy)
        #expect(space.host == "127.0.0.1")
        #expect(space.port == squid.authPort)
        #expect(space.realm == SquidServer.realm)
        #expect(space.authenticationMethod == NSURLAuthenticationMethodHTTPBasic)
        #expect(challenges[0].previousFailureCount == 0)
        #expect(challenges[0].failureStatus == 407)
        let entry = try #require(await squid.entry { $0.url.contains(marker) && $0.status == 200 })
        #expect(entry.user == SquidServer.user)
        #expect(entry.port == squid.authPort)
        #expect(squid.accessEntries().filter { $0.url.contains(marker) }.map(\.status) == [407, 200])
    }

    @Test("a 407 to a forwarded request nobody answers is the response")
    func forwardedChallengeUnanswered() async throws {
        let marker = proxyMarker()
        let recorder = ProxyTaskRecorder()
        let session = makeSession(TestProxies.http(squid.authPort), recorder)
        defer { session.finishTasksAndInvalidate() }
        let loaded = await loadRecorded(session, recorder, URLRequest(url: nginx.url("/files/hello.txt?proxy-407=\(marker)")))
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.status == 407)
        #expect(loaded.response?.value(forHTTPHeaderField: "Proxy-Authenticate")?.hasPrefix("Basic") == true)
        #expect(recorder.challenges.count == 1)
        #expect(loaded.last?.isProxyConnection == true)
        let entry = try #require(await squid.entry { $0.url.contains(marker) })
        #expect(entry.status == 407)
        #expect(entry.user == nil)
    }

    @Test("a 407 to CONNECT: an HTTPS proxy challenge, answered, then TLS and h2 through the tunnel")
    func tunnelChallengeAnswered() async throws {
        let target = "127.0.0.1:\(goodTLSPort)"
        let before = squid.tunnelCount(to: target, port: squid.authPort, user: SquidServer.user)
        let recorder = ProxyTaskRecorder.answeringProxy()
        let session = makeSession(TestProxies.http(squid.authPort), recorder)
        let loaded = await loadRecorded(session, recorder, URLRequest(url: nginx.tlsURL("good", "/files/hello.txt")))
        session.finishTasksAndInvalidate()
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.status == 200)
        #expect(loaded.bytes == NginxServer.fixtures["hello.txt"])
        #expect(loaded.last?.networkProtocolName == "h2")
        #expect(loaded.last?.isProxyConnection == true)
        #expect(loaded.last?.remotePort == squid.authPort)
        let challenges = recorder.challenges
        try #require(challenges.count == 1)
        #expect(challenges[0].space.isProxy())
        #expect(challenges[0].space.proxyType == NSURLProtectionSpaceHTTPSProxy)
        #expect(challenges[0].space.host == "127.0.0.1")
        #expect(challenges[0].space.port == squid.authPort)
        #expect(challenges[0].space.realm == SquidServer.realm)
        #expect(challenges[0].failureStatus == 407)
        #expect(await squid.tunnelLogged(to: target, port: squid.authPort, user: SquidServer.user, after: before), "\(squid.accessLog())")
    }

    @Test("a 407 to CONNECT nobody answers fails the task: the proxy's reply is not the origin's")
    func tunnelChallengeUnanswered() async throws {
        let recorder = ProxyTaskRecorder()
        let session = makeSession(TestProxies.http(squid.authPort), recorder)
        defer { session.finishTasksAndInvalidate() }
        let loaded = await loadRecorded(session, recorder, URLRequest(url: nginx.tlsURL("good", "/files/hello.txt")))
        #expect(loaded.code == .userAuthenticationRequired, "\(String(describing: loaded.error))")
        #expect(loaded.response == nil)
        #expect(loaded.body == nil)
        #expect((loaded.error as? URLError)?.localizedDescription.contains("407") == true)
        #expect(recorder.challenges.map { $0.space.proxyType ?? "none" } == [NSURLProtectionSpaceHTTPSProxy])
    }

    @Test("an origin's 407 inside a tunnel is its response, never the proxy's challenge")
    func originProxyChallengeInsideTunnel() async throws {
        let recorder = ProxyTaskRecorder { _ in (.useCredential, URLCredential(user: "phished", password: "secret", persistence: .none)) }
        let session = makeSession(TestProxies.http(squid.openPort), recorder)
        defer { session.finishTasksAndInvalidate() }
        let loaded = await loadRecorded(session, recorder, URLRequest(url: nginx.tlsURL("good", "/origin-407")))
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.response?.statusCode == 407)
        #expect(recorder.challenges.isEmpty)
    }

    @Test("a proxy that refuses every credential to CONNECT: the task fails, bounded, and the 407 is never the result")
    func tunnelRefusesEveryCredential() async throws {
        let wrong = "wrong-\(proxyMarker())"
        // A user squid does not know: squid merges concurrent checks of one user name, so a
        // wrong password for the real user can ride on another test's right one.
        let stranger = "stranger-\(proxyMarker().prefix(8))"
        let recorder = ProxyTaskRecorder { _ in (.useCredential, URLCredential(user: stranger, password: wrong, persistence: .none)) }
        let session = makeSession(TestProxies.http(squid.authPort), recorder)
        defer { session.finishTasksAndInvalidate() }
        let loaded = await loadRecorded(session, recorder, URLRequest(url: nginx.tlsURL("good", "/files/hello.txt")))
        #expect(loaded.code == .userAuthenticationRequired, "\(String(describing: loaded.error))")
        #expect(loaded.response == nil)
        #expect(loaded.body == nil)
        #expect(recorder.challenges.count > 1)
        #expect(recorder.challenges.count <= 16)
    }

    @Test("a wrong proxy password: each 407 asks again with a growing failure count, until the delegate cancels")
    func tunnelWrongPassword() async throws {
        let wrong = "wrong-\(proxyMarker())"
        // A user squid does not know (see tunnelRefusesEveryCredential).
        let stranger = "stranger-\(proxyMarker().prefix(8))"
        let recorder = ProxyTaskRecorder { challenge in
            guard challenge.previousFailureCount < 2 else { return (.cancelAuthenticationChallenge, nil) }
            return (.useCredential, URLCredential(user: stranger, password: wrong, persistence: .none))
        }
        let session = makeSession(TestProxies.http(squid.authPort), recorder)
        defer { session.finishTasksAndInvalidate() }
        let loaded = await loadRecorded(session, recorder, URLRequest(url: nginx.tlsURL("good", "/files/hello.txt")))
        #expect(loaded.code == .cancelled, "\(String(describing: loaded.error))")
        let challenges = recorder.challenges
        #expect(challenges.map(\.previousFailureCount) == [0, 1, 2])
        #expect(challenges.allSatisfy { $0.space.proxyType == NSURLProtectionSpaceHTTPSProxy && $0.failureStatus == 407 })
        #expect(challenges.dropFirst().allSatisfy { $0.proposedUser == stranger })
    }

    // MARK: - Proxy-Authorization stays with the proxy

    @Test("after an authenticated tunnel, an excepted host gets no Proxy-Authorization; the proxy keeps getting it")
    func credentialNotToExceptedHost() async throws {
        let marker = proxyMarker()
        let recorder = ProxyTaskRecorder.answeringProxy()
        // Only httpbin's port bypasses the proxy; nginx on 127.0.0.1 goes through it.
        let session = makeSession(TestProxies.http(squid.authPort, exceptions: ["127.0.0.1:\(httpbin.port)"]), recorder)
        defer { session.finishTasksAndInvalidate() }
        let tunnelled = await loadRecorded(session, recorder, URLRequest(url: nginx.tlsURL("good", "/files/hello.txt", host: "localhost")))
        #expect(tunnelled.status == 200, "\(String(describing: tunnelled.error))")
        #expect(recorder.challenges.count == 1)

        let direct = await loadRecorded(session, recorder, URLRequest(url: httpbin.url("/headers?show_env=1")))
        #expect(direct.status == 200)
        let reply = try HttpbinReply(direct.body)
        #expect(reply.header("Proxy-Authorization") == nil)
        #expect(reply.header("Via") == nil)
        #expect(direct.last?.isProxyConnection == false)
        #expect(direct.last?.remotePort == httpbin.port)

        // The session did remember the credential: the next proxied request carries it unasked.
        let again = await loadRecorded(session, recorder, URLRequest(url: nginx.url("/files/hello.txt?proxy-remembered=\(marker)")))
        #expect(again.status == 200)
        #expect(recorder.challenges.count == 1)
        let entry = try #require(await squid.entry { $0.url.contains(marker) })
        #expect(entry.status == 200)
        #expect(entry.user == SquidServer.user)
        #expect(squid.accessEntries().filter { $0.url.contains(marker) }.count == 1)
    }

    @Test("a caller's Proxy-Authorization never reaches an origin: forwarded, tunnelled or direct")
    func callerProxyAuthorization() async throws {
        let marker = proxyMarker()
        let value = "Basic " + Data("caller:secret".utf8).base64EncodedString()
        let recorder = ProxyTaskRecorder()
        let directRecorder = ProxyTaskRecorder()
        let proxied = makeSession(TestProxies.http(squid.openPort), recorder)
        let direct = makeSession([:], directRecorder)
        defer {
            proxied.finishTasksAndInvalidate()
            direct.finishTasksAndInvalidate()
        }
        func request(_ url: URL) -> URLRequest {
            var request = URLRequest(url: url)
            request.setValue(value, forHTTPHeaderField: "Proxy-Authorization")
            return request
        }
        let forwarded = await loadRecorded(proxied, recorder, request(httpbin.url("/headers?show_env=1&proxy-caller=\(marker)")))
        #expect(forwarded.status == 200)
        let reply = try HttpbinReply(forwarded.body)
        #expect(reply.header("Proxy-Authorization") == nil)
        #expect(reply.header("Via")?.contains("courier-squid") == true, "it went through squid")
        #expect(await squid.entry { $0.url.contains(marker) }?.status == 200)

        let tunnelled = await loadRecorded(proxied, recorder, request(nginx.tlsURL("good", "/echo")))
        #expect(tunnelled.status == 200, "\(String(describing: tunnelled.error))")
        #expect(tunnelled.last?.isProxyConnection == true)
        #expect(try EchoReply(tunnelled.body).header("Proxy-Authorization") == nil)

        for url in [nginx.tlsURL("good", "/echo"), nginx.url("/echo")] {
            let loaded = await loadRecorded(direct, directRecorder, request(url))
            #expect(loaded.status == 200, "\(url)")
            #expect(loaded.last?.isProxyConnection == false)
            #expect(try EchoReply(loaded.body).header("Proxy-Authorization") == nil, "\(url)")
        }
    }

    @Test("a redirect from a proxied origin to an excepted one goes direct, without Proxy-Authorization")
    func redirectToExceptedHost() async throws {
        let marker = proxyMarker()
        let recorder = ProxyTaskRecorder.answeringProxy()
        let session = makeSession(TestProxies.http(squid.authPort, exceptions: ["127.0.0.1"]), recorder)
        defer { session.finishTasksAndInvalidate() }
        let target = httpbin.url("/headers?show_env=1&proxy-redirect=\(marker)").absoluteString
        let encoded = try #require(target.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-"))))
        let start = try #require(URL(string: "http://localhost:\(httpbin.port)/redirect-to?url=\(encoded)"))
        let loaded = await loadRecorded(session, recorder, URLRequest(url: start))
        #expect(loaded.status == 200, "\(String(describing: loaded.error))")
        #expect(loaded.response?.url?.absoluteString == target)
        let reply = try HttpbinReply(loaded.body)
        #expect(reply.header("Proxy-Authorization") == nil)
        #expect(reply.header("Via") == nil)
        #expect(recorder.challenges.count == 1)
        #expect(loaded.transactions.first?.isProxyConnection == true)
        #expect(loaded.transactions.first?.remotePort == squid.authPort)
        #expect(loaded.last?.isProxyConnection == false)
        #expect(loaded.last?.remotePort == httpbin.port)
        let hop = try #require(await squid.entry { $0.url.contains(marker) && $0.status == 302 })
        #expect(hop.url.hasPrefix("http://localhost:\(httpbin.port)/redirect-to?"))
        #expect(hop.user == SquidServer.user)
    }
}
