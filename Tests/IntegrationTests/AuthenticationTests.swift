@testable import Courier
import CourierSync
import CourierTransport
import Foundation
import Testing
import _CourierTestSupport

/// Answers 401/407 challenges with a closure and records every challenge it was given.
final class ChallengeAnswerer: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    struct Seen: @unchecked Sendable {
        var space: URLProtectionSpace
        var previousFailureCount: Int
        var proposedUser: String?
        var proposedPassword: String?
        var failureStatus: Int?
        var hasSender: Bool
    }

    typealias Decide = @Sendable (URLAuthenticationChallenge) -> (URLSession.AuthChallengeDisposition, URLCredential?)

    let decide: Decide
    private let seen = Mutex<[Seen]>([])
    private let streams = Mutex(0)
    /// The bytes handed out for `needNewBodyStream`; nil answers nil.
    let newBody: Data?

    init(newBody: Data? = nil, _ decide: @escaping Decide) {
        self.decide = decide
        self.newBody = newBody
    }

    /// Answers every challenge with this user and password.
    convenience init(user: String, password: String, persistence: URLCredential.Persistence = .none) {
        self.init { _ in (.useCredential, URLCredential(user: user, password: password, persistence: persistence)) }
    }

    var challenges: [Seen] { seen.withLock { $0 } }
    var streamRequests: Int { streams.withLock { $0 } }

    func urlSession(_ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        let method = challenge.protectionSpace.authenticationMethod
        guard method == NSURLAuthenticationMethodHTTPBasic || method == NSURLAuthenticationMethodHTTPDigest else {
            // Server trust and client certificates: the test CA is trusted by the process.
            completionHandler(.performDefaultHandling, nil)
            return
        }
        seen.withLock {
            $0.append(Seen(
                space: challenge.protectionSpace, previousFailureCount: challenge.previousFailureCount,
                proposedUser: challenge.proposedCredential?.user, proposedPassword: challenge.proposedCredential?.password,
                failureStatus: (challenge.failureResponse as? HTTPURLResponse)?.statusCode, hasSender: challenge.sender != nil
            ))
        }
        let (disposition, credential) = decide(challenge)
        completionHandler(disposition, credential)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void) {
        streams.withLock { $0 += 1 }
        completionHandler(newBody.map { InputStream(data: $0) })
    }
}

/// HTTP authentication as Apple's URL Loading System does it: challenges to the task delegate,
/// the four dispositions, default handling from the credential storage and the URL, Basic and
/// Digest against httpbin and nginx, the odd challenges against a scripted server, credentials
/// sent again before the server asks, and the 407 path through an HTTP proxy.
@Suite("AuthenticationTests")
struct AuthenticationTests {
    let httpbin: HttpbinServer
    let nginx: NginxServer

    init() throws {
        httpbin = try HttpbinServer.shared()
        nginx = try NginxServer.shared()
    }

    func configuration(storage: URLCredentialStorage? = nil) -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 10
        configuration.urlCredentialStorage = storage
        return configuration
    }

    /// Loads `request` with `answerer` as the session's delegate (completion handler and
    /// delegate modes) or the task's (async modes).
    func load(_ request: URLRequest, via delivery: Delivery, answerer: ChallengeAnswerer?, configuration: URLSessionConfiguration? = nil) async -> (body: Data?, response: HTTPURLResponse?, error: (any Error)?) {
        let configuration = configuration ?? self.configuration()
        switch delivery {
        case .completionHandler:
            let session = URLSession(configuration: configuration, delegate: answerer, delegateQueue: nil)
            defer { session.finishTasksAndInvalidate() }
            let (data, response, error) = await loadWithCompletionHandler(session, request)
            return (data, response as? HTTPURLResponse, error)
        case .delegate:
            let recorder = AnsweringRecorder(answerer)
            let session = URLSession(configuration: configuration, delegate: recorder, delegateQueue: nil)
            defer { session.finishTasksAndInvalidate() }
            let task = session.dataTask(with: request)
            task.resume()
            await recorder.waitForCompletion()
            let record = recorder.snapshot
            return (record.error == nil ? record.data : nil, task.response as? HTTPURLResponse, record.error)
        case .asyncData:
            let session = URLSession(configuration: configuration)
            defer { session.finishTasksAndInvalidate() }
            do {
                let (data, response) = try await session.data(for: request, delegate: answerer)
                return (data, response as? HTTPURLResponse, nil)
            } catch {
                return (nil, nil, error)
            }
        case .download:
            let session = URLSession(configuration: configuration)
            defer { session.finishTasksAndInvalidate() }
            do {
                return try await DownloadFilesLock.holding {
                    let (location, response) = try await session.download(for: request, delegate: answerer)
                    defer { try? FileManager.default.removeItem(at: location) }
                    return (FileManager.default.contents(atPath: location.path), response as? HTTPURLResponse, nil)
                }
            } catch {
                return (nil, nil, error)
            }
        }
    }

    // MARK: - Basic against httpbin and nginx

    @Test("httpbin Basic: the delegate's credential is sent and accepted", arguments: Delivery.allCases)
    func basicWithDelegate(_ delivery: Delivery) async throws {
        let answerer = ChallengeAnswerer(user: "alice", password: "wonder land")
        let loaded = await load(URLRequest(url: httpbin.url("/basic-auth/alice/wonder%20land")), via: delivery, answerer: answerer)
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.response?.statusCode == 200)
        let json = try JSONSerialization.jsonObject(with: try #require(loaded.body)) as? [String: Any]
        #expect(json?["authenticated"] as? Bool == true)
        #expect(json?["user"] as? String == "alice")
        let challenge = try #require(answerer.challenges.first)
        #expect(answerer.challenges.count == 1)
        #expect(challenge.space.host == "127.0.0.1")
        #expect(challenge.space.port == httpbin.port)
        #expect(challenge.space.protocol == NSURLProtectionSpaceHTTP)
        #expect(challenge.space.realm == "Fake Realm")
        #expect(challenge.space.authenticationMethod == NSURLAuthenticationMethodHTTPBasic)
        #expect(!challenge.space.receivesCredentialSecurely)
        #expect(!challenge.space.isProxy())
        #expect(challenge.space.proxyType == nil)
        #expect(challenge.previousFailureCount == 0)
        #expect(challenge.proposedUser == nil)
        #expect(challenge.failureStatus == 401)
        #expect(challenge.hasSender)
    }

    @Test("without a delegate a 401 completes normally with the 401 and its body", arguments: [Delivery.completionHandler, .asyncData])
    func noDelegateDeliversTheChallenge(_ delivery: Delivery) async throws {
        let server = try AnsweringServer { _, _ in
            AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Basic realm=\"r\"")], body: Array("who are you?".utf8))
        }
        let loaded = await load(URLRequest(url: server.url("/private")), via: delivery, answerer: nil)
        #expect(loaded.error == nil)
        #expect(loaded.response?.statusCode == 401)
        #expect(loaded.body.map { String(decoding: $0, as: UTF8.self) } == "who are you?")
        #expect(server.requests.count == 1)
    }

    @Test("a wrong password is challenged again with previousFailureCount 1 and the failed credential proposed")
    func failureCountAndProposedCredential() async throws {
        let attempts = Mutex(0)
        let answerer = ChallengeAnswerer { _ in
            let attempt = attempts.withLock { value -> Int in
                value += 1
                return value
            }
            return (.useCredential, URLCredential(user: "bob", password: attempt == 1 ? "wrong" : "right", persistence: .none))
        }
        let loaded = await load(URLRequest(url: httpbin.url("/basic-auth/bob/right")), via: .completionHandler, answerer: answerer)
        #expect(loaded.response?.statusCode == 200)
        let seen = answerer.challenges
        try #require(seen.count == 2)
        #expect(seen[0].previousFailureCount == 0)
        #expect(seen[0].proposedUser == nil)
        #expect(seen[1].previousFailureCount == 1)
        #expect(seen[1].proposedUser == "bob")
        #expect(seen[1].proposedPassword == "wrong")
    }

    @Test("a delegate that keeps giving a wrong password gets the 401 after 16 attempts")
    func attemptLimit() async throws {
        let server = try AnsweringServer { _, _ in
            AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Basic realm=\"r\"")], body: Array("no".utf8))
        }
        let answerer = ChallengeAnswerer(user: "eve", password: "guess")
        let loaded = await load(URLRequest(url: server.url("/")), via: .asyncData, answerer: answerer)
        #expect(loaded.error == nil)
        #expect(loaded.response?.statusCode == 401)
        #expect(answerer.challenges.count == 16)
        #expect(answerer.challenges.last?.previousFailureCount == 15)
        #expect(server.requests.count == 17)
    }

    @Test("nginx auth_basic over HTTP/1.1 and TLS HTTP/2, with a UTF-8 user and password", arguments: [false, true])
    func nginxBasic(_ tls: Bool) async throws {
        for (user, password) in NginxServer.basicUsers {
            let answerer = ChallengeAnswerer(user: user, password: password)
            let configuration = configuration()
            let url = tls ? nginx.tlsURL("good", "/basic/hello.txt") : nginx.url("/basic/hello.txt")
            let session = URLSession(configuration: configuration, delegate: answerer, delegateQueue: nil)
            defer { session.finishTasksAndInvalidate() }
            let (data, response) = try await session.data(from: url)
            let http = try #require(response as? HTTPURLResponse)
            #expect(http.statusCode == 200, "\(user)")
            #expect(Array(data) == NginxServer.fixtures["hello.txt"])
            let challenge = try #require(answerer.challenges.first)
            #expect(challenge.space.realm == "Courier nginx")
            #expect(challenge.space.protocol == (tls ? NSURLProtectionSpaceHTTPS : NSURLProtectionSpaceHTTP))
            #expect(challenge.space.receivesCredentialSecurely == tls)
        }
    }

    // MARK: - Dispositions and default handling

    @Test("cancelAuthenticationChallenge fails the task with .cancelled", arguments: Delivery.allCases)
    func cancelDisposition(_ delivery: Delivery) async throws {
        let answerer = ChallengeAnswerer { _ in (.cancelAuthenticationChallenge, nil) }
        let loaded = await load(URLRequest(url: httpbin.url("/basic-auth/u/p")), via: delivery, answerer: answerer)
        #expect(urlErrorCode(loaded.error) == .cancelled)
        #expect(answerer.challenges.count == 1)
    }

    @Test("useCredential with no credential, and rejectProtectionSpace with nothing else offered, deliver the 401")
    func continueWithout() async throws {
        for disposition in [URLSession.AuthChallengeDisposition.useCredential, .rejectProtectionSpace] {
            let answerer = ChallengeAnswerer { _ in (disposition, nil) }
            let loaded = await load(URLRequest(url: httpbin.url("/basic-auth/u/p")), via: .completionHandler, answerer: answerer)
            #expect(loaded.error == nil)
            #expect(loaded.response?.statusCode == 401)
        }
    }

    @Test("default handling uses the URL's user and password")
    func urlCredentials() async throws {
        var components = URLComponents(url: httpbin.url("/basic-auth/carol/pa%3Ass"), resolvingAgainstBaseURL: false)!
        components.user = "carol"
        components.password = "pa:ss"
        let url = try #require(components.url)
        let loaded = await load(URLRequest(url: url), via: .asyncData, answerer: nil)
        #expect(loaded.response?.statusCode == 200)
        // A wrong password in the URL is tried once, then the 401 is the result.
        components.password = "nope"
        let wrong = await load(URLRequest(url: components.url!), via: .asyncData, answerer: nil)
        #expect(wrong.response?.statusCode == 401)
    }

    @Test("default handling uses the storage's default credential, proposed to the delegate too")
    func storageDefault() async throws {
        let storage = URLCredentialStorage(store: .memory)
        let space = URLProtectionSpace(host: "127.0.0.1", port: httpbin.port, protocol: NSURLProtectionSpaceHTTP, realm: "Fake Realm", authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
        storage.setDefaultCredential(URLCredential(user: "dave", password: "stored", persistence: .forSession), for: space)
        let loaded = await load(URLRequest(url: httpbin.url("/basic-auth/dave/stored")), via: .asyncData, answerer: nil, configuration: configuration(storage: storage))
        #expect(loaded.response?.statusCode == 200)

        let answerer = ChallengeAnswerer { _ in (.performDefaultHandling, nil) }
        let viaDelegate = await load(URLRequest(url: httpbin.url("/basic-auth/dave/stored")), via: .completionHandler, answerer: answerer, configuration: configuration(storage: storage))
        #expect(viaDelegate.response?.statusCode == 200)
        #expect(answerer.challenges.first?.proposedUser == "dave")
        #expect(answerer.challenges.first?.proposedPassword == "stored")
    }

    @Test("a .forSession credential from the delegate is stored once it works; a .none one is not")
    func delegateCredentialStored() async throws {
        for persistence in [URLCredential.Persistence.forSession, .none] {
            let storage = URLCredentialStorage(store: .memory)
            let answerer = ChallengeAnswerer(user: "erin", password: "pw", persistence: persistence)
            let loaded = await load(URLRequest(url: httpbin.url("/basic-auth/erin/pw")), via: .completionHandler, answerer: answerer, configuration: configuration(storage: storage))
            #expect(loaded.response?.statusCode == 200)
            let space = URLProtectionSpace(host: "127.0.0.1", port: httpbin.port, protocol: NSURLProtectionSpaceHTTP, realm: "Fake Realm", authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
            let stored = storage.credentials(for: space)?["erin"]
            #expect((stored != nil) == (persistence == .forSession))
        }
    }

    // MARK: - Digest against httpbin

    @Test("httpbin Digest with qop=auth", arguments: ["MD5", "SHA-256", "SHA-512"])
    func digest(_ algorithm: String) async throws {
        // (httpbin hashes the decoded path, not the target as sent: no escapes in these URLs.)
        let answerer = ChallengeAnswerer(user: "frank", password: "digest-me")
        let loaded = await load(URLRequest(url: httpbin.url("/digest-auth/auth/frank/digest-me/\(algorithm)")), via: .asyncData, answerer: answerer)
        #expect(loaded.response?.statusCode == 200, "\(algorithm)")
        let json = try JSONSerialization.jsonObject(with: try #require(loaded.body)) as? [String: Any]
        #expect(json?["authenticated"] as? Bool == true)
        #expect(answerer.challenges.first?.space.authenticationMethod == NSURLAuthenticationMethodHTTPDigest)
        #expect(answerer.challenges.first?.space.realm == "me@kennethreitz.com")
        #expect(answerer.challenges.count == 1)
    }

    @Test("httpbin stale_after: a stale nonce is answered again without the delegate (httpbin tracks it in cookies)")
    func httpbinStale() async throws {
        let answerer = ChallengeAnswerer(user: "sam", password: "pw", persistence: .forSession)
        let session = URLSession(configuration: configuration(), delegate: answerer, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let url = httpbin.url("/digest-auth/auth/sam/pw/SHA-256/1")
        for _ in 0..<3 {
            let (_, response) = try await session.data(from: url)
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
        }
        // Asked once; the stale nonces after that were answered with the same credential.
        #expect(answerer.challenges.count == 1)
    }

    @Test("httpbin Digest auth-int (httpbin takes GET only there: the empty body's hash)", arguments: [Delivery.completionHandler, .asyncData])
    func digestIntegrity(_ delivery: Delivery) async throws {
        let request = URLRequest(url: httpbin.url("/digest-auth/auth-int/grace/pw/SHA-256"))
        let answerer = ChallengeAnswerer(user: "grace", password: "pw")
        let loaded = await load(request, via: delivery, answerer: answerer)
        #expect(loaded.response?.statusCode == 200)
        let wrong = ChallengeAnswerer(user: "grace", password: "not pw")
        let refused = await load(request, via: delivery, answerer: wrong)
        #expect(refused.response?.statusCode == 401)
    }

    // MARK: - Challenges from a scripted server

    @Test("Digest auth-int over a POST body, checked by Python's hashlib", arguments: ["MD5", "SHA-256", "SHA-512-256"])
    func integrityChecked(_ algorithm: String) async throws {
        let server = try AnsweringServer { request, _ in
            request.header("Authorization").map { .ok($0) } ?? AnsweringServer.Answer(
                status: 401, reason: "Unauthorized",
                headers: [("WWW-Authenticate", "Digest realm=\"int@test\", nonce=\"n0nce\", opaque=\"op\", qop=\"auth-int\", algorithm=\(algorithm)")], body: []
            )
        }
        var request = URLRequest(url: server.url("/submit?x=1"))
        request.httpMethod = "POST"
        request.httpBody = Data("the body is covered too".utf8)
        let answerer = ChallengeAnswerer(user: "ivy", password: "pw")
        let loaded = await load(request, via: .completionHandler, answerer: answerer)
        let sent = try #require(loaded.body.map { String(decoding: $0, as: UTF8.self) })
        #expect(server.requests.last.map { Data($0.body) } == request.httpBody)
        var parameters: [String: String] = [:]
        for parameter in try #require(try AuthenticationChallengeParserProbe.parameters(sent)) { parameters[parameter.0] = parameter.1 }
        #expect(parameters["qop"] == "auth-int")
        #expect(parameters["uri"] == "/submit?x=1")
        #expect(parameters["opaque"] == "op")
        #expect(parameters["algorithm"] == algorithm)
        let hash = ["MD5": "md5", "SHA-256": "sha256", "SHA-512-256": "sha512_256"][algorithm]!
        let script = """
        import hashlib, sys
        H = lambda s: hashlib.new('\(hash)', s.encode()).hexdigest()
        ha1 = H('ivy:int@test:pw')
        ha2 = H('POST:/submit?x=1:' + H('the body is covered too'))
        print(H(ha1 + ':n0nce:' + sys.argv[1] + ':' + sys.argv[2] + ':auth-int:' + ha2))
        """
        let toolArguments = ["python3", "-c", script, parameters["nc"] ?? "", parameters["cnonce"] ?? ""]
        let expected = try await onOwnThread { try runTool("/usr/bin/env", toolArguments) }
        #expect(parameters["response"] == expected.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    @Test("the strongest offered scheme is answered first; rejecting it moves to the next")
    func strongestFirst() async throws {
        let server = try AnsweringServer { request, _ in
            if let authorization = request.header("Authorization") {
                return .ok(authorization.split(separator: " ").first.map(String.init) ?? "")
            }
            return AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [
                ("WWW-Authenticate", "Basic realm=\"plain\", Digest realm=\"d\", nonce=\"n1\", algorithm=MD5, qop=\"auth\""),
                ("WWW-Authenticate", "Bearer realm=\"api\", Digest realm=\"d\", nonce=\"n2\", algorithm=SHA-256, qop=\"auth,auth-int\""),
            ], body: [])
        }
        let answerer = ChallengeAnswerer(user: "u", password: "p")
        let loaded = await load(URLRequest(url: server.url("/")), via: .asyncData, answerer: answerer)
        #expect(loaded.body.map { String(decoding: $0, as: UTF8.self) } == "Digest")
        let sent = try #require(server.requests.last?.header("Authorization"))
        #expect(sent.contains("algorithm=SHA-256"))
        #expect(sent.contains("nonce=\"n2\""))
        #expect(sent.contains("qop=auth,") || sent.contains("qop=auth"))

        // Rejecting each Digest space falls through to Basic.
        let rejecting = ChallengeAnswerer { challenge in
            challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodHTTPDigest
                ? (.rejectProtectionSpace, nil) : (.useCredential, URLCredential(user: "u", password: "p", persistence: .none))
        }
        let basic = await load(URLRequest(url: server.url("/")), via: .asyncData, answerer: rejecting)
        #expect(basic.body.map { String(decoding: $0, as: UTF8.self) } == "Basic")
        // Two Digest challenges for one realm are one protection space: asked about once.
        #expect(rejecting.challenges.map(\.space.authenticationMethod) == [NSURLAuthenticationMethodHTTPDigest, NSURLAuthenticationMethodHTTPBasic])
    }

    @Test("a refused password counts once per space, whatever the number of Digest algorithms offered for it")
    func failureCountedOncePerSpace() async throws {
        let server = try AnsweringServer { _, _ in
            AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [
                ("WWW-Authenticate", "Digest realm=\"d\", nonce=\"a\", algorithm=SHA-256, qop=\"auth\""),
                ("WWW-Authenticate", "Digest realm=\"d\", nonce=\"b\", algorithm=MD5, qop=\"auth\""),
            ], body: [])
        }
        let attempts = Mutex(0)
        let answerer = ChallengeAnswerer { _ in
            let attempt = attempts.withLock { value -> Int in
                value += 1
                return value
            }
            return attempt < 3 ? (.useCredential, URLCredential(user: "u", password: "wrong", persistence: .none)) : (.useCredential, nil)
        }
        let loaded = await load(URLRequest(url: server.url("/")), via: .asyncData, answerer: answerer)
        #expect(loaded.response?.statusCode == 401)
        #expect(answerer.challenges.map(\.previousFailureCount) == [0, 1, 2])
        #expect(server.requests.count == 3)
        #expect(server.requests.dropFirst().allSatisfy { $0.header("Authorization")?.contains("algorithm=SHA-256") == true })
    }

    @Test("the per-task delegate is asked before the session delegate")
    func taskDelegateFirst() async throws {
        let sessionAnswerer = ChallengeAnswerer(user: "session", password: "s")
        let taskAnswerer = ChallengeAnswerer(user: "task", password: "t")
        let session = URLSession(configuration: configuration(), delegate: sessionAnswerer, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (_, response) = try await session.data(for: URLRequest(url: httpbin.url("/basic-auth/task/t")), delegate: taskAnswerer)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(taskAnswerer.challenges.count == 1)
        #expect(sessionAnswerer.challenges.isEmpty)
    }

    @Test("cancelled while the delegate holds the challenge: the late answer changes nothing")
    func cancelledWhileAsking() async throws {
        let server = try AnsweringServer { _, _ in
            AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Basic realm=\"r\"")], body: [])
        }
        let held = HeldChallenge()
        let session = URLSession(configuration: configuration(), delegate: held, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let outcome = Mutex<(any Error)?>(nil)
        let completed = AsyncFlag()
        var request = URLRequest(url: server.url("/"))
        request.httpMethod = "PUT"
        request.httpBodyStream = InputStream(data: Data("streamed".utf8))
        let task = session.dataTask(with: request) { _, _, error in
            outcome.withLock { $0 = error }
            completed.raise()
        }
        task.resume()
        let answer = await held.nextChallenge()
        task.cancel()
        await completed.wait()
        answer(.useCredential, URLCredential(user: "u", password: "p", persistence: .forSession))
        try await Task.sleep(for: .milliseconds(200))
        #expect(urlErrorCode(outcome.withLock { $0 }) == .cancelled)
        #expect(server.requests.count == 1)
        #expect(held.streamRequests == 0)
    }

    @Test("a user name with a colon goes as it is in Basic")
    func colonInUser() async throws {
        let server = try AnsweringServer { request, _ in
            request.header("Authorization").map { .ok($0) }
                ?? AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Basic realm=\"r\"")], body: [])
        }
        let answerer = ChallengeAnswerer(user: "a:b", password: "c")
        let loaded = await load(URLRequest(url: server.url("/")), via: .asyncData, answerer: answerer)
        #expect(loaded.body.map { String(decoding: $0, as: UTF8.self) } == "Basic " + Data("a:b:c".utf8).base64EncodedString())
    }

    @Test("a credential that cannot be sent fails the task with a reason, once")
    func unsendableCredential() async throws {
        let server = try AnsweringServer { _, _ in
            AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Basic realm=\"r\"")], body: [])
        }
        let answerer = ChallengeAnswerer(user: "line\nbreak", password: "p")
        let loaded = await load(URLRequest(url: server.url("/")), via: .completionHandler, answerer: answerer)
        #expect(urlErrorCode(loaded.error) == .userAuthenticationRequired)
        #expect((loaded.error as? URLError)?.localizedDescription.contains("control character") == true)
        #expect(server.requests.count == 1)
        #expect(answerer.challenges.count == 1)
    }

    @Test("malformed or unknown challenges deliver the 401 without asking anyone", arguments: [
        "Basic realm=\"unterminated",
        "Digest realm=\"r\"",  // no nonce
        "Digest realm=\"r\", nonce=\"n\", algorithm=SHA-1024",
        "Basic realm=\"a\", realm=\"b\"",
        "Bearer realm=\"api\"",
        "Basic,realm=\"r\"",
    ])
    func malformed(_ challenge: String) async throws {
        let server = try AnsweringServer { _, _ in
            AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", challenge)], body: Array("denied".utf8))
        }
        let answerer = ChallengeAnswerer(user: "u", password: "p")
        let loaded = await load(URLRequest(url: server.url("/")), via: .completionHandler, answerer: answerer)
        #expect(loaded.error == nil)
        #expect(loaded.response?.statusCode == 401)
        #expect(loaded.body.map { String(decoding: $0, as: UTF8.self) } == "denied")
        #expect(answerer.challenges.isEmpty)
        #expect(server.requests.count == 1)
    }

    @Test("a stale nonce is answered with the same credential without asking again")
    func staleNonce() async throws {
        let server = try AnsweringServer { request, _ in
            guard let authorization = request.header("Authorization") else {
                return AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Digest realm=\"r\", nonce=\"old\", qop=\"auth\"")], body: [])
            }
            if authorization.contains("nonce=\"old\"") {
                return AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Digest realm=\"r\", nonce=\"new\", qop=\"auth\", stale=true")], body: [])
            }
            return .ok("in")
        }
        let answerer = ChallengeAnswerer(user: "u", password: "p")
        let loaded = await load(URLRequest(url: server.url("/")), via: .asyncData, answerer: answerer)
        #expect(loaded.body.map { String(decoding: $0, as: UTF8.self) } == "in")
        #expect(answerer.challenges.count == 1)
        #expect(server.requests.count == 3)
    }

    @Test("after a success the session sends the credential first: Basic below the directory, Digest with the next nonce count")
    func preemptive() async throws {
        let server = try AnsweringServer { request, _ in
            let authorization = request.header("Authorization") ?? ""
            if request.target.hasPrefix("/basic/"), authorization.hasPrefix("Basic ") { return .ok("basic ok") }
            if request.target.hasPrefix("/digest"), authorization.hasPrefix("Digest ") { return .ok("digest ok") }
            let challenge = request.target.hasPrefix("/basic/") ? "Basic realm=\"b\"" : "Digest realm=\"d\", nonce=\"fixed\", qop=\"auth\""
            return AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", challenge)], body: [])
        }
        let answerer = ChallengeAnswerer(user: "u", password: "p", persistence: .forSession)
        let session = URLSession(configuration: configuration(), delegate: answerer, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        _ = try await session.data(from: server.url("/basic/a/one"))
        _ = try await session.data(from: server.url("/basic/a/two"))
        _ = try await session.data(from: server.url("/basic/other"))
        let basicRequests = server.requests.map { ($0.target, $0.header("Authorization") != nil) }
        // /basic/a/one: challenged and answered; /basic/a/two: sent at once; /basic/other is
        // outside /basic/a/, challenged again.
        #expect(basicRequests.map(\.0) == ["/basic/a/one", "/basic/a/one", "/basic/a/two", "/basic/other", "/basic/other"])
        #expect(basicRequests.map(\.1) == [false, true, true, false, true])

        _ = try await session.data(from: server.url("/digest/1"))
        _ = try await session.data(from: server.url("/digest/2"))
        let digestCounts = server.requests.filter { $0.target.hasPrefix("/digest") }.map { request -> String? in
            guard let value = request.header("Authorization"), let range = value.range(of: "nc=") else { return nil }
            return String(value[range.upperBound...].prefix(8))
        }
        #expect(digestCounts == [nil, "00000001", "00000002"])
        #expect(answerer.challenges.count == 3)

        // Another port is another origin: nothing is sent there unasked.
        let other = try AnsweringServer { request, _ in .ok(request.header("Authorization") ?? "none") }
        let (elsewhere, _) = try await session.data(from: other.url("/basic/a/one"))
        #expect(String(decoding: elsewhere, as: UTF8.self) == "none")
    }

    @Test("one nonce count for the session: a task's hops and another task never repeat an nc")
    func nonceCountsShared() async throws {
        let server = try AnsweringServer { request, _ in
            guard request.header("Authorization") != nil else {
                return AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Digest realm=\"d\", nonce=\"same\", qop=\"auth\"")], body: [])
            }
            return request.target == "/hop" ? .redirect(302, to: "/landed") : .ok("ok")
        }
        let answerer = ChallengeAnswerer(user: "u", password: "p", persistence: .forSession)
        let session = URLSession(configuration: configuration(), delegate: answerer, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        _ = try await session.data(from: server.url("/hop"))
        _ = try await session.data(from: server.url("/other"))
        async let first = session.data(from: server.url("/a"))
        async let second = session.data(from: server.url("/b"))
        _ = try await (first, second)
        let counts = server.requests.compactMap { request -> String? in
            guard let value = request.header("Authorization"), let range = value.range(of: "nc=") else { return nil }
            return String(value[range.upperBound...].prefix(8))
        }
        #expect(counts.count == 5)
        #expect(Set(counts).count == counts.count, "every nc once: \(counts)")
        #expect(Set(counts) == ["00000001", "00000002", "00000003", "00000004", "00000005"])
    }

    @Test("a configured Authorization field is sent, not a remembered credential")
    func configuredAuthorizationWins() async throws {
        let server = try AnsweringServer { request, _ in
            let authorization = request.header("Authorization") ?? ""
            return authorization.hasPrefix("Basic ") || request.target.hasPrefix("/open")
                ? .ok(authorization)
                : AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Basic realm=\"r\"")], body: [])
        }
        let configuration = configuration()
        configuration.httpAdditionalHeaders = ["Authorization": "Bearer token"]
        let answerer = ChallengeAnswerer(user: "u", password: "p", persistence: .forSession)
        let session = URLSession(configuration: configuration, delegate: answerer, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (answered, _) = try await session.data(from: server.url("/open/a/x"))
        #expect(String(decoding: answered, as: UTF8.self) == "Bearer token")
        _ = try await session.data(from: server.url("/closed/a/x"))
        let (after, _) = try await session.data(from: server.url("/open/a/y"))
        #expect(String(decoding: after, as: UTF8.self) == "Bearer token")
    }

    @Test("a request body is sent again with the credential: bytes, a file, a stream through needNewBodyStream")
    func bodyReplayed() async throws {
        let server = try AnsweringServer { request, _ in
            request.header("Authorization") == nil
                ? AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Basic realm=\"r\"")], body: [])
                : .ok(String(decoding: request.body, as: UTF8.self))
        }
        let body = Data("payload that must arrive twice".utf8)
        let answerer = ChallengeAnswerer(newBody: body) { _ in (.useCredential, URLCredential(user: "u", password: "p", persistence: .none)) }
        let session = URLSession(configuration: configuration(), delegate: answerer, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: server.url("/upload"))
        request.httpMethod = "PUT"

        let (fromData, _) = try await session.upload(for: request, from: body)
        #expect(sameBytes(fromData, body))

        let file = FileManager.default.temporaryDirectory.appendingPathComponent("courier-auth-\(UUID().uuidString)")
        try body.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let (fromFile, _) = try await session.upload(for: request, fromFile: file)
        #expect(sameBytes(fromFile, body))

        var streamed = request
        streamed.httpBodyStream = InputStream(data: body)
        let (fromStream, _) = try await session.data(for: streamed)
        #expect(sameBytes(fromStream, body))
        #expect(answerer.streamRequests == 1)
        #expect(server.requests.filter { $0.header("Authorization") != nil }.allSatisfy { Data($0.body) == body })
    }

    @Test("Authorization chosen for one origin is not sent to another after a redirect")
    func notAcrossOrigins() async throws {
        let other = try AnsweringServer { _, _ in .ok("elsewhere") }
        let server = try AnsweringServer { request, _ in
            request.header("Authorization") == nil
                ? AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Basic realm=\"r\"")], body: [])
                : .redirect(302, to: other.url("/landing").absoluteString.replacingOccurrences(of: "127.0.0.1", with: "localhost"))
        }
        let answerer = ChallengeAnswerer(user: "u", password: "p", persistence: .forSession)
        let loaded = await load(URLRequest(url: server.url("/start")), via: .asyncData, answerer: answerer)
        #expect(loaded.body.map { String(decoding: $0, as: UTF8.self) } == "elsewhere")
        #expect(other.requests.count == 1)
        #expect(other.requests.first?.header("Authorization") == nil)
    }

    // MARK: - 407

    @Test("a 407 through the proxy does not confirm the server credential the request carried")
    func proxyChallengeConfirmsNothing() async throws {
        let proxy = try AnsweringServer { request, _ in
            guard let authorization = request.header("Authorization") else {
                return AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Basic realm=\"origin\"")], body: [])
            }
            if request.header("Proxy-Authorization") == nil {
                return AnsweringServer.Answer(status: 407, reason: "Proxy Authentication Required", headers: [("Proxy-Authenticate", "Basic realm=\"gate\"")], body: [])
            }
            return authorization == "Basic " + Data("u:right".utf8).base64EncodedString()
                ? .ok("in")
                : AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Basic realm=\"origin\"")], body: [])
        }
        let answerer = ChallengeAnswerer { challenge in
            if challenge.protectionSpace.isProxy() { return (.useCredential, URLCredential(user: "p", password: "p", persistence: .none)) }
            return challenge.previousFailureCount == 0 ? (.useCredential, URLCredential(user: "u", password: "wrong", persistence: .permanent)) : (.useCredential, nil)
        }
        let storage = URLCredentialStorage(store: .memory)
        let configuration = configuration(storage: storage)
        configuration.connectionProxyDictionary = [kCFNetworkProxiesHTTPEnable: 1, kCFNetworkProxiesHTTPProxy: "127.0.0.1", kCFNetworkProxiesHTTPPort: proxy.port]
        let session = URLSession(configuration: configuration, delegate: answerer, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (_, response) = try await session.data(from: URL(string: "http://origin.invalid/x")!)
        #expect((response as? HTTPURLResponse)?.statusCode == 401)
        #expect(storage.allCredentials.isEmpty)
        #expect(session.preemptiveAuthentication.withLock { $0.entries.isEmpty })
    }

    @Test("a 407 from an origin is a response, never a proxy challenge")
    func proxyChallengeFromOrigin() async throws {
        let server = try AnsweringServer { _, _ in
            AnsweringServer.Answer(status: 407, reason: "Proxy Authentication Required", headers: [("Proxy-Authenticate", "Basic realm=\"proxy\"")], body: Array("407".utf8))
        }
        let answerer = ChallengeAnswerer(user: "u", password: "p")
        let loaded = await load(URLRequest(url: server.url("/")), via: .completionHandler, answerer: answerer)
        #expect(loaded.response?.statusCode == 407)
        #expect(answerer.challenges.isEmpty)
        #expect(server.requests.allSatisfy { $0.header("Proxy-Authorization") == nil })
    }

    @Test("through an HTTP proxy: a 407 is a proxy challenge, Proxy-Authorization goes to the proxy, then a 401 from the origin")
    func proxyChallenge() async throws {
        // The scripted proxy answers in place of the origin: 407 until it has
        // Proxy-Authorization, then 401 until Authorization, then the absolute target it got.
        let proxy = try AnsweringServer { request, _ in
            if request.header("Proxy-Authorization") == nil {
                return AnsweringServer.Answer(status: 407, reason: "Proxy Authentication Required", headers: [("Proxy-Authenticate", "Basic realm=\"gate\"")], body: [])
            }
            if request.header("Authorization") == nil {
                return AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Digest realm=\"origin\", nonce=\"o\", qop=\"auth\"")], body: [])
            }
            return .ok(request.target)
        }
        let answerer = ChallengeAnswerer { challenge in
            challenge.protectionSpace.isProxy()
                ? (.useCredential, URLCredential(user: "proxy-user", password: "proxy-pass", persistence: .forSession))
                : (.useCredential, URLCredential(user: "origin-user", password: "origin-pass", persistence: .forSession))
        }
        let configuration = configuration()
        configuration.connectionProxyDictionary = [kCFNetworkProxiesHTTPEnable: 1, kCFNetworkProxiesHTTPProxy: "127.0.0.1", kCFNetworkProxiesHTTPPort: proxy.port]
        let session = URLSession(configuration: configuration, delegate: answerer, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(from: URL(string: "http://origin.invalid:8080/path?q=1")!)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(String(decoding: data, as: UTF8.self) == "http://origin.invalid:8080/path?q=1")
        let seen = answerer.challenges
        try #require(seen.count == 2)
        #expect(seen[0].space.isProxy())
        #expect(seen[0].space.proxyType == NSURLProtectionSpaceHTTPProxy)
        #expect(seen[0].space.host == "127.0.0.1")
        #expect(seen[0].space.port == proxy.port)
        #expect(seen[0].space.realm == "gate")
        #expect(seen[0].failureStatus == 407)
        #expect(!seen[1].space.isProxy())
        #expect(seen[1].space.host == "origin.invalid")
        #expect(seen[1].space.port == 8080)
        let last = try #require(proxy.requests.last)
        #expect(last.header("Proxy-Authorization") == "Basic " + Data("proxy-user:proxy-pass".utf8).base64EncodedString())
        #expect(last.header("Authorization")?.hasPrefix("Digest username=\"origin-user\"") == true)

        #expect(session.preemptiveAuthentication.withLock { $0.entries.count } == 2)

        // The next request goes with both at once.
        let before = proxy.requests.count
        _ = try await session.data(from: URL(string: "http://origin.invalid:8080/again")!)
        #expect(proxy.requests.count == before + 1)
        #expect(answerer.challenges.count == 2)
    }
}

/// Reads the parameters of an Authorization value (the same syntax as a challenge).
enum AuthenticationChallengeParserProbe {
    static func parameters(_ value: String) throws -> [(String, String)]? {
        // "Digest a=b, c="d"": split after the scheme, then on commas outside quotes.
        guard let space = value.firstIndex(of: " ") else { return nil }
        var result: [(String, String)] = []
        var current = ""
        var quoted = false
        var escaped = false
        for character in value[value.index(after: space)...] + "," {
            if escaped { current.append(character); escaped = false; continue }
            if character == "\\" && quoted { escaped = true; continue }
            if character == "\"" { quoted.toggle(); continue }
            if character == "," && !quoted {
                let parts = current.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                if parts.count == 2 { result.append((parts[0], parts[1])) }
                current = ""
                continue
            }
            current.append(character)
        }
        return result
    }
}

/// Holds the first challenge's answer for the test to give later.
final class HeldChallenge: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    typealias Answer = @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    private let state = Mutex<(answer: Answer?, waiter: CheckedContinuation<Answer, Never>?)>((nil, nil))
    private let streams = Mutex(0)

    var streamRequests: Int { streams.withLock { $0 } }

    func urlSession(_ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        let waiter = state.withLock { state -> CheckedContinuation<Answer, Never>? in
            defer { state.waiter = nil }
            if state.waiter == nil { state.answer = completionHandler }
            return state.waiter
        }
        waiter?.resume(returning: completionHandler)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void) {
        streams.withLock { $0 += 1 }
        completionHandler(InputStream(data: Data("streamed".utf8)))
    }

    func nextChallenge() async -> Answer {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> Answer? in
                if let answer = state.answer { return answer }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

/// A one-shot signal between threads and an awaiting test.
final class AsyncFlag: @unchecked Sendable {
    private let state = Mutex<(raised: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    func raise() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.raised = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let raised = state.withLock { state -> Bool in
                if state.raised { return true }
                state.waiter = continuation
                return false
            }
            if raised { continuation.resume() }
        }
    }
}

/// Passes challenges to an answerer and records the data-delegate events (delegate mode).
final class AnsweringRecorder: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    struct Snapshot {
        var data = Data()
        var error: (any Error)?
    }

    let answerer: ChallengeAnswerer?
    private let state = Mutex(Snapshot())
    private let done = Mutex<(finished: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    init(_ answerer: ChallengeAnswerer?) {
        self.answerer = answerer
    }

    var snapshot: Snapshot { state.withLock { $0 } }

    func urlSession(_ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        guard let answerer else {
            completionHandler(.performDefaultHandling, nil)
            return
        }
        answerer.urlSession(session, task: task, didReceive: challenge, completionHandler: completionHandler)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        state.withLock { $0.data.append(data) }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        state.withLock { $0.error = error }
        let waiter = done.withLock { done -> CheckedContinuation<Void, Never>? in
            done.finished = true
            defer { done.waiter = nil }
            return done.waiter
        }
        waiter?.resume()
    }

    func waitForCompletion() async {
        await withCheckedContinuation { continuation in
            let finished = done.withLock { done -> Bool in
                if done.finished { return true }
                done.waiter = continuation
                return false
            }
            if finished { continuation.resume() }
        }
    }
}
