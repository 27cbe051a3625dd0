import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// `URLProtocol` subclasses loading a session's requests: the way apps stand in for their
/// servers in tests. Each test owns the `mock://` host it loads (a fresh UUID), so the scripts
/// of tests running side by side never meet.
@Suite("URLProtocol")
struct URLProtocolTests {
    /// A configuration whose requests go to `MockProtocol` first.
    private func mockConfiguration(_ classes: [AnyClass] = [MockProtocol.self]) -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.protocolClasses = classes + (configuration.protocolClasses ?? [])
        return configuration
    }

    @Test("a mock's response and data reach every delivery mode, on the delegate queue, and the protocol is stopped once", arguments: Delivery.allCases)
    func deliveryModes(_ delivery: Delivery) async throws {
        let route = MockRoutes.shared.add { proto in
            let response = HTTPURLResponse(url: proto.request.url!, statusCode: 201, httpVersion: "HTTP/1.1", headerFields: ["X-Mock": "yes", "Content-Type": "text/plain"])!
            proto.client?.urlProtocol(proto, didReceive: response, cacheStoragePolicy: .notAllowed)
            proto.client?.urlProtocol(proto, didLoad: Data("hello, ".utf8))
            proto.client?.urlProtocol(proto, didLoad: Data("mock".utf8))
            proto.client?.urlProtocolDidFinishLoading(proto)
        }
        let loaded = await load(URLRequest(url: route.url("/greeting")), via: delivery, configuration: mockConfiguration())
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.body == Data("hello, mock".utf8))
        #expect(loaded.response?.statusCode == 201)
        #expect(loaded.response?.value(forHTTPHeaderField: "X-Mock") == "yes")
        #expect(loaded.record.offQueue == 0)
        if delivery == .delegate {
            #expect(loaded.record.collapsedEvents.filter { $0 != "metrics" } == ["response", "data", "complete"])
        }
        #expect(await pollUntil { route.stops == 1 })
        #expect(route.starts == 1)
        #expect(route.threads.count == 1, "startLoading and stopLoading run on one thread")
    }

    @Test("bytes(for:) streams a mock's body")
    func asyncBytes() async throws {
        let route = MockRoutes.shared.add { proto in
            proto.client?.urlProtocol(proto, didReceive: URLResponse(url: proto.request.url!, mimeType: "text/plain", expectedContentLength: -1, textEncodingName: nil), cacheStoragePolicy: .notAllowed)
            proto.client?.urlProtocol(proto, didLoad: Data("line one\nline two\n".utf8))
            proto.client?.urlProtocolDidFinishLoading(proto)
        }
        let session = URLSession(configuration: mockConfiguration())
        defer { session.finishTasksAndInvalidate() }
        let (bytes, response) = try await session.bytes(for: URLRequest(url: route.url("/lines")))
        #expect(response.mimeType == "text/plain")
        var lines: [String] = []
        for try await line in bytes.lines { lines.append(line) }
        #expect(lines == ["line one", "line two"])
    }

    @Test("classes are asked in order, ahead of HTTP; a request none takes goes to the network")
    func orderAndFallThrough() async throws {
        let nginx = try NginxServer.shared()
        let route = MockRoutes.shared.add { proto in
            proto.client?.urlProtocol(proto, didLoad: Data("mock".utf8))
            proto.client?.urlProtocolDidFinishLoading(proto)
        }
        let configuration = mockConfiguration([DecliningProtocol.self, MockProtocol.self, SecondMockProtocol.self])
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let (mockBody, mockResponse) = try await session.data(from: route.url("/x"))
        #expect(mockBody == Data("mock".utf8), "MockProtocol, listed before SecondMockProtocol, takes it")
        #expect(!(mockResponse is HTTPURLResponse), "without a response from the protocol, a plain one stands in")
        #expect(DecliningProtocol.asked.load(ordering: .relaxed) > 0)
        let (body, response) = try await session.data(from: nginx.url("/echo"))
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(!body.isEmpty && body != Data("mock".utf8))
    }

    @Test("an HTTP URL a protocol takes never reaches the network")
    func interceptsHTTP() async throws {
        // Port 1 on loopback: were the request sent, it would be refused.
        let url = URL(string: "http://127.0.0.1:1/intercepted")!
        let configuration = mockConfiguration([HTTPInterceptingProtocol.self])
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let (body, response) = try await session.data(from: url)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(body == Data("intercepted GET".utf8))
    }

    @Test("the protocol's own error completes the task unchanged, in every delivery mode", arguments: Delivery.allCases)
    func errorsPassThrough(_ delivery: Delivery) async throws {
        let route = MockRoutes.shared.add { proto in
            proto.client?.urlProtocol(proto, didFailWithError: MockFailure.boom)
        }
        let loaded = await load(URLRequest(url: route.url("/fail")), via: delivery, configuration: mockConfiguration())
        #expect(loaded.error as? MockFailure == .boom, "\(String(describing: loaded.error))")

        let urlErrorRoute = MockRoutes.shared.add { proto in
            proto.client?.urlProtocol(proto, didFailWithError: URLError(.notConnectedToInternet, userInfo: ["mock": "offline"]))
        }
        let offline = await load(URLRequest(url: urlErrorRoute.url("/offline")), via: delivery, configuration: mockConfiguration())
        let error = try #require(offline.error as? URLError)
        #expect(error.code == .notConnectedToInternet)
        #expect(error.userInfo["mock"] as? String == "offline")
    }

    @Test("a protocol's redirect goes to willPerformHTTPRedirection; followed, the first load stops and the next URL loads")
    func redirectFollowed() async throws {
        let target = MockRoutes.shared.add { proto in
            let response = HTTPURLResponse(url: proto.request.url!, statusCode: 200, httpVersion: nil, headerFields: nil)!
            proto.client?.urlProtocol(proto, didReceive: response, cacheStoragePolicy: .notAllowed)
            proto.client?.urlProtocol(proto, didLoad: Data("moved here".utf8))
            proto.client?.urlProtocolDidFinishLoading(proto)
        }
        let targetURL = target.url("/new")
        let origin = MockRoutes.shared.add { proto in
            let response = HTTPURLResponse(url: proto.request.url!, statusCode: 302, httpVersion: nil, headerFields: ["Location": targetURL.absoluteString])!
            proto.client?.urlProtocol(proto, wasRedirectedTo: URLRequest(url: targetURL), redirectResponse: response)
            // Anything after the redirect is ignored.
            proto.client?.urlProtocol(proto, didLoad: Data("stale".utf8))
            proto.client?.urlProtocolDidFinishLoading(proto)
        }
        for delivery in [Delivery.completionHandler, .delegate, .asyncData] {
            let loaded = await load(URLRequest(url: origin.url("/old")), via: delivery, configuration: mockConfiguration())
            #expect(loaded.error == nil, "\(delivery): \(String(describing: loaded.error))")
            #expect(loaded.body == Data("moved here".utf8), "\(delivery)")
            #expect(loaded.response?.url == targetURL, "\(delivery)")
            let hops = loaded.record.hops
            #expect(hops.count == 1 && hops.first?.status == 302 && hops.first?.proposedURL == targetURL, "\(delivery)")
        }
        #expect(await pollUntil { origin.stops == 3 && target.stops == 3 })
    }

    @Test("a refused protocol redirect completes the task with the redirect response")
    func redirectRefused() async throws {
        let origin = MockRoutes.shared.add { proto in
            let response = HTTPURLResponse(url: proto.request.url!, statusCode: 301, httpVersion: nil, headerFields: nil)!
            proto.client?.urlProtocol(proto, wasRedirectedTo: URLRequest(url: URL(string: "mock://nowhere.invalid/")!), redirectResponse: response)
        }
        let recorder = RedirectRecorder { _, _ in nil }
        let loaded = await load(URLRequest(url: origin.url("/old")), via: .delegate, configuration: mockConfiguration(), recorder: recorder)
        #expect(loaded.error == nil)
        #expect(loaded.response?.statusCode == 301)
        #expect(loaded.record.hops.count == 1)
        #expect(loaded.body == Data())
    }

    @Test("cancelling a task stops its protocol and fails the task with .cancelled")
    func cancel() async throws {
        let route = MockRoutes.shared.add { proto in
            let response = HTTPURLResponse(url: proto.request.url!, statusCode: 200, httpVersion: nil, headerFields: nil)!
            proto.client?.urlProtocol(proto, didReceive: response, cacheStoragePolicy: .notAllowed)
            proto.client?.urlProtocol(proto, didLoad: Data("first part".utf8))
            // ... and never finishes.
        }
        let session = URLSession(configuration: mockConfiguration())
        defer { session.finishTasksAndInvalidate() }
        let outcome = Mutex<(any Error)?>(nil)
        let done = Atomic<Bool>(false)
        let task = session.dataTask(with: route.url("/endless")) { _, _, error in
            outcome.withLock { $0 = error }
            done.store(true, ordering: .relaxed)
        }
        task.resume()
        #expect(await pollUntil { route.starts == 1 })
        task.cancel()
        #expect(await pollUntil { done.load(ordering: .relaxed) })
        #expect((outcome.withLock { $0 } as? URLError)?.code == .cancelled)
        #expect(await pollUntil { route.stops == 1 })
    }

    @Test("startLoading runs in a run loop: a protocol may answer from a timer it schedules there")
    func runLoopTimers() async throws {
        let route = MockRoutes.shared.add { proto in
            let client = Unchecked((proto, proto.client))
            _ = Timer.scheduledTimer(withTimeInterval: 0.05, repeats: false) { _ in
                let (proto, client) = client.value
                client?.urlProtocol(proto, didLoad: Data("from a timer".utf8))
                client?.urlProtocolDidFinishLoading(proto)
            }
        }
        let session = URLSession(configuration: mockConfiguration())
        defer { session.finishTasksAndInvalidate() }
        let (body, _) = try await session.data(from: route.url("/later"))
        #expect(body == Data("from a timer".utf8))
    }

    @Test("canonicalRequest(for:) becomes the task's currentRequest and the protocol's request; an upload's bytes are its httpBody")
    func canonicalAndUpload() async throws {
        let route = MockRoutes.shared.add { proto in
            let request = proto.request
            let summary = "\(request.httpMethod ?? "") \(request.value(forHTTPHeaderField: "X-Canonical") ?? "-") \(request.httpBody?.count ?? -1)"
            proto.client?.urlProtocol(proto, didLoad: Data(summary.utf8))
            proto.client?.urlProtocolDidFinishLoading(proto)
        }
        let session = URLSession(configuration: mockConfiguration([CanonicalizingProtocol.self]))
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: route.url("/upload"))
        request.httpMethod = "POST"
        let payload = Data(repeating: 7, count: 1234)
        let result = Mutex<(Data?, URLSessionTask?)>((nil, nil))
        let done = Atomic<Bool>(false)
        let task = session.uploadTask(with: request, from: payload) { data, _, _ in
            result.withLock { $0.0 = data }
            done.store(true, ordering: .relaxed)
        }
        task.resume()
        #expect(await pollUntil { done.load(ordering: .relaxed) })
        #expect(result.withLock { $0.0 } == Data("POST 1 1234".utf8))
        #expect(task.currentRequest?.value(forHTTPHeaderField: "X-Canonical") == "1")
        #expect(task.originalRequest?.value(forHTTPHeaderField: "X-Canonical") == nil)
    }

    @Test("a property set on a request is read by the protocol loading it")
    func properties() async throws {
        let route = MockRoutes.shared.add { proto in
            let mark = URLProtocol.property(forKey: "mock.mark", in: proto.request) as? String ?? "none"
            proto.client?.urlProtocol(proto, didLoad: Data(mark.utf8))
            proto.client?.urlProtocolDidFinishLoading(proto)
        }
        let mutable = NSMutableURLRequest(url: route.url("/marked"))
        URLProtocol.setProperty("marked", forKey: "mock.mark", in: mutable)
        let session = URLSession(configuration: mockConfiguration())
        defer { session.finishTasksAndInvalidate() }
        let (body, _) = try await session.data(for: mutable as URLRequest)
        #expect(body == Data("marked".utf8))
    }

    @Test("a protocol's challenge goes to the task delegate, whose credential reaches the protocol's sender")
    func challenge() async throws {
        let route = MockRoutes.shared.add { proto in
            let space = URLProtectionSpace(host: proto.request.url!.host!, port: 0, protocol: "mock", realm: "mock realm", authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
            let challenge = URLAuthenticationChallenge(
                protectionSpace: space, proposedCredential: nil, previousFailureCount: 0, failureResponse: nil, error: nil,
                sender: proto as! MockProtocol
            )
            proto.client?.urlProtocol(proto, didReceive: challenge)
        }
        let delegate = CredentialGivingDelegate(URLCredential(user: "ann", password: "secret", persistence: .none))
        let session = URLSession(configuration: mockConfiguration(), delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (body, _) = try await session.data(from: route.url("/private"))
        #expect(body == Data("user ann".utf8))
        #expect(delegate.realms == ["mock realm"])
    }

    @Test("a response the protocol lets the cache keep comes back as its cachedResponse, and cachedResponseIsValid delivers it")
    func cache() async throws {
        let fresh = Atomic<Int>(0)
        let fromCache = Atomic<Int>(0)
        let route = MockRoutes.shared.add { proto in
            if let cached = proto.cachedResponse {
                fromCache.add(1, ordering: .relaxed)
                proto.client?.urlProtocol(proto, cachedResponseIsValid: cached)
                return
            }
            fresh.add(1, ordering: .relaxed)
            let response = HTTPURLResponse(url: proto.request.url!, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: ["Cache-Control": "max-age=600"])!
            proto.client?.urlProtocol(proto, didReceive: response, cacheStoragePolicy: .allowedInMemoryOnly)
            proto.client?.urlProtocol(proto, didLoad: Data("kept".utf8))
            proto.client?.urlProtocolDidFinishLoading(proto)
        }
        let configuration = mockConfiguration()
        configuration.urlCache = URLCache(memoryCapacity: 1 << 20, diskCapacity: 0, directory: nil)
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let url = route.url("/cached")
        let (first, _) = try await session.data(from: url)
        let (second, response) = try await session.data(from: url)
        #expect(first == Data("kept".utf8) && second == first)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(fresh.load(ordering: .relaxed) == 1)
        #expect(fromCache.load(ordering: .relaxed) == 1)
    }

    @Test("registerClass serves URLSession.shared only, until unregisterClass; a class that is no URLProtocol is refused")
    func registeredClasses() async throws {
        let url = URL(string: "registered://courier.test/item")!
        #expect(URLProtocol.registerClass(RegisteredProtocol.self))
        let (body, _) = try await URLSession.shared.data(from: url)
        #expect(body == Data("registered".utf8))

        let custom = URLSession(configuration: .ephemeral)
        defer { custom.finishTasksAndInvalidate() }
        await #expect(throws: URLError.self) { _ = try await custom.data(from: url) }

        URLProtocol.unregisterClass(RegisteredProtocol.self)
        do {
            _ = try await URLSession.shared.data(from: url)
            Issue.record("an unregistered class still loaded the request")
        } catch {
            #expect((error as? URLError)?.code == .unsupportedURL)
        }
        #expect(!URLProtocol.registerClass(NSObject.self))
    }

    @Test("a subclass that does not override startLoading fails its task instead of hanging it")
    func missingStartLoading() async throws {
        let session = URLSession(configuration: mockConfiguration([IncompleteProtocol.self]))
        defer { session.finishTasksAndInvalidate() }
        do {
            _ = try await session.data(from: URL(string: "incomplete://courier.test/")!)
            Issue.record("the load succeeded")
        } catch {
            #expect((error as? URLError)?.code == .unsupportedURL)
        }
    }
}

// MARK: Protocols and their scripts

/// A test's script for the `mock://` host it owns, and what happened to its loads.
final class MockRoute: Sendable {
    let host = UUID().uuidString.lowercased()
    let script: @Sendable (URLProtocol) -> Void
    private let record = Mutex<(starts: Int, stops: Int, threads: Set<UInt>)>((0, 0, []))

    init(_ script: @escaping @Sendable (URLProtocol) -> Void) {
        self.script = script
    }

    func url(_ path: String) -> URL { URL(string: "mock://\(host)\(path)")! }
    var starts: Int { record.withLock { $0.starts } }
    var stops: Int { record.withLock { $0.stops } }
    var threads: Set<UInt> { record.withLock { $0.threads } }

    func noteStart() { record.withLock { $0.starts += 1; $0.threads.insert(UInt(pthread_self())) } }
    func noteStop() { record.withLock { $0.stops += 1; $0.threads.insert(UInt(pthread_self())) } }
}

/// The routes of every test, by host.
final class MockRoutes: Sendable {
    static let shared = MockRoutes()
    private let routes = Mutex<[String: MockRoute]>([:])

    func add(_ script: @escaping @Sendable (URLProtocol) -> Void) -> MockRoute {
        let route = MockRoute(script)
        routes.withLock { $0[route.host] = route }
        return route
    }

    func route(for request: URLRequest) -> MockRoute? {
        guard let host = request.url?.host else { return nil }
        return routes.withLock { $0[host.lowercased()] }
    }
}

enum MockFailure: Error, Equatable { case boom }

/// Loads `mock://` URLs by their route's script; answers a challenge it issued by loading
/// "user NAME".
final class MockProtocol: URLProtocol, URLAuthenticationChallengeSender, @unchecked Sendable {
    override class func canInit(with request: URLRequest) -> Bool { request.url?.scheme == "mock" }
    override class func canonicalRequest(for request: URLRequest) -> URLRequest { request }

    override func startLoading() {
        guard let route = MockRoutes.shared.route(for: request) else {
            client?.urlProtocol(self, didFailWithError: URLError(.cannotFindHost))
            return
        }
        route.noteStart()
        route.script(self)
    }

    override func stopLoading() {
        MockRoutes.shared.route(for: request)?.noteStop()
    }

    func use(_ credential: URLCredential, for challenge: URLAuthenticationChallenge) {
        client?.urlProtocol(self, didLoad: Data("user \(credential.user ?? "")".utf8))
        client?.urlProtocolDidFinishLoading(self)
    }

    func continueWithoutCredential(for challenge: URLAuthenticationChallenge) { refuse() }
    func cancel(_ challenge: URLAuthenticationChallenge) { refuse() }
    func performDefaultHandling(for challenge: URLAuthenticationChallenge) { refuse() }
    func rejectProtectionSpaceAndContinue(with challenge: URLAuthenticationChallenge) { refuse() }

    private func refuse() {
        client?.urlProtocol(self, didFailWithError: URLError(.userAuthenticationRequired))
    }
}

/// Would load `mock://` too, but is listed after `MockProtocol`.
final class SecondMockProtocol: URLProtocol, @unchecked Sendable {
    override class func canInit(with request: URLRequest) -> Bool { request.url?.scheme == "mock" }
    override func startLoading() {
        client?.urlProtocol(self, didLoad: Data("second".utf8))
        client?.urlProtocolDidFinishLoading(self)
    }
}

/// Takes nothing; counts how often it was asked.
final class DecliningProtocol: URLProtocol, @unchecked Sendable {
    static let asked = Atomic<Int>(0)
    override class func canInit(with task: URLSessionTask) -> Bool {
        asked.add(1, ordering: .relaxed)
        return false
    }
}

/// Answers `http://127.0.0.1:1/intercepted` itself.
final class HTTPInterceptingProtocol: URLProtocol, @unchecked Sendable {
    override class func canInit(with request: URLRequest) -> Bool { request.url?.path == "/intercepted" }
    override func startLoading() {
        let response = HTTPURLResponse(url: request.url!, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: nil)!
        client?.urlProtocol(self, didReceive: response, cacheStoragePolicy: .notAllowed)
        client?.urlProtocol(self, didLoad: Data("intercepted \(request.httpMethod ?? "")".utf8))
        client?.urlProtocolDidFinishLoading(self)
    }
}

/// `MockProtocol` whose canonical requests carry `X-Canonical: 1`.
final class CanonicalizingProtocol: URLProtocol, @unchecked Sendable {
    override class func canInit(with request: URLRequest) -> Bool { request.url?.scheme == "mock" }
    override class func canonicalRequest(for request: URLRequest) -> URLRequest {
        var canonical = request
        canonical.setValue("1", forHTTPHeaderField: "X-Canonical")
        return canonical
    }
    override func startLoading() { MockRoutes.shared.route(for: request)?.script(self) }
}

/// Registered globally by one test: loads `registered://`.
final class RegisteredProtocol: URLProtocol, @unchecked Sendable {
    override class func canInit(with request: URLRequest) -> Bool { request.url?.scheme == "registered" }
    override func startLoading() {
        client?.urlProtocol(self, didLoad: Data("registered".utf8))
        client?.urlProtocolDidFinishLoading(self)
    }
}

/// Takes `incomplete://` and forgets to override `startLoading`.
final class IncompleteProtocol: URLProtocol, @unchecked Sendable {
    override class func canInit(with request: URLRequest) -> Bool { request.url?.scheme == "incomplete" }
}

/// Answers every task-level challenge with one credential, and notes the realms asked.
final class CredentialGivingDelegate: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    private let credential: URLCredential
    private let asked = Mutex<[String]>([])
    var realms: [String] { asked.withLock { $0 } }

    init(_ credential: URLCredential) {
        self.credential = credential
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        asked.withLock { $0.append(challenge.protectionSpace.realm ?? "") }
        completionHandler(.useCredential, credential)
    }
}

/// `urlSession(_:task:didReceiveInformationalResponse:)`: interim heads before the final one.
@Suite("Informational responses")
struct InformationalResponseDelegateTests {
    final class InterimRecorder: NSObject, URLSessionDataDelegate, @unchecked Sendable {
        let seen = Mutex<[String]>([])
        func urlSession(_ session: URLSession, task: URLSessionTask, didReceiveInformationalResponse response: HTTPURLResponse) {
            seen.withLock { $0.append("\(response.statusCode) \(response.value(forHTTPHeaderField: "Link") ?? "-")") }
        }
        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
            seen.withLock { $0.append("final \((response as? HTTPURLResponse)?.statusCode ?? 0)") }
            completionHandler(.allow)
        }
    }

    @Test("a 103 Early Hints reaches the task delegate, with its fields, before the final response")
    func earlyHints() async throws {
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.write("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
            connection.respond(body: Array("done".utf8))
        }
        defer { server.stop() }
        let recorder = InterimRecorder()
        let session = URLSession(configuration: .ephemeral, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (body, response) = try await session.data(from: server.url("/hints"))
        #expect(body == Data("done".utf8))
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(recorder.seen.withLock { $0 }.first == "103 </style.css>; rel=preload")
    }
}
