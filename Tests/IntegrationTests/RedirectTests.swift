import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// HTTP redirects as Apple's URL Loading System follows them: which statuses, how far, how the
/// method and body change, how a Location is resolved, what the delegate is asked, which
/// fields stay behind on another origin, and what the metrics say. Against nginx's
/// `/redirect/…` locations, httpbin, and scripted servers for the odd Locations.
@Suite("RedirectTests")
struct RedirectTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    /// A fresh ephemeral session; invalidate it when done.
    func session() -> URLSession {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 10
        return URLSession(configuration: configuration)
    }

    // MARK: - Statuses and the hop limit

    @Test("301, 302, 303, 307 and 308 are followed to the target", arguments: [301, 302, 303, 307, 308], Delivery.allCases)
    func followsEachStatus(_ status: Int, _ delivery: Delivery) async throws {
        let start = nginx.url("/redirect/\(status)")
        let loaded = await load(URLRequest(url: start), via: delivery)
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        let response = try #require(loaded.response)
        #expect(response.statusCode == 200)
        #expect(response.url?.absoluteString == nginx.url("/echo").absoluteString)
        let echo = try EchoReply(loaded.body)
        #expect(echo.method == "GET")
        #expect(echo.uri == "/echo")
        if let task = loaded.task {
            #expect(task.originalRequest?.url?.absoluteString == start.absoluteString)
            #expect(task.currentRequest?.url?.absoluteString == nginx.url("/echo").absoluteString)
        }
    }

    @Test("16 redirects are followed; the 17th fails with httpTooManyRedirects, unsent")
    func hopLimit() async throws {
        // /c/N answers with a redirect to /c/N-1, and /c/0 with 200.
        let server = try AnsweringServer { request, _ in
            let remaining = Int(request.target.split(separator: "/").last ?? "") ?? 0
            return remaining > 0 ? .redirect(302, to: "/c/\(remaining - 1)") : .ok("arrived")
        }
        let session = session()
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(from: server.url("/c/16"))
        #expect(String(decoding: data, as: UTF8.self) == "arrived")
        #expect(response.url?.absoluteString == server.url("/c/0").absoluteString)
        #expect(server.requests.count == 17)

        let tooFar = try AnsweringServer { request, _ in
            let remaining = Int(request.target.split(separator: "/").last ?? "") ?? 0
            return remaining > 0 ? .redirect(302, to: "/c/\(remaining - 1)") : .ok("arrived")
        }
        await expectURLError(.httpTooManyRedirects) { _ = try await session.data(from: tooFar.url("/c/17")) }
        #expect(tooFar.requests.count == 17, "the original request and 16 followed redirects; the 17th redirect is not followed")
        #expect(!tooFar.requests.contains { $0.target == "/c/0" })
    }

    @Test("httpbin: /redirect/16 arrives, /redirect/17 fails with httpTooManyRedirects")
    func httpbinHopLimit() async throws {
        let httpbin = try HttpbinServer.shared()
        let session = session()
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(from: httpbin.url("/redirect/16"))
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(response.url?.absoluteString == httpbin.url("/get").absoluteString)
        #expect(try HttpbinReply(data).url == httpbin.url("/get").absoluteString)
        await expectURLError(.httpTooManyRedirects) { _ = try await session.data(from: httpbin.url("/redirect/17")) }
    }

    @Test("a redirect loop fails with httpTooManyRedirects", arguments: Delivery.allCases)
    func loop(_ delivery: Delivery) async throws {
        let loaded = await load(URLRequest(url: nginx.url("/redirect/loop")), via: delivery)
        #expect(urlErrorCode(loaded.error) == .httpTooManyRedirects, "\(String(describing: loaded.error))")
        #expect(loaded.body == nil)
    }

    @Test("a 3xx without Location is delivered as it is", arguments: [Delivery.delegate, .asyncData, .completionHandler])
    func noLocation(_ delivery: Delivery) async throws {
        let server = try AnsweringServer { _, _ in .status(301, body: "moved, but nowhere") }
        let loaded = await load(URLRequest(url: server.url("/old")), via: delivery)
        #expect(loaded.error == nil)
        #expect(loaded.response?.statusCode == 301)
        #expect(loaded.body.map { String(decoding: $0, as: UTF8.self) } == "moved, but nowhere")
        #expect(loaded.record.hops.isEmpty, "there is nothing to ask the delegate about")
        #expect(server.requests.count == 1)
    }

    // MARK: - Method and body

    @Test("301 and 302 turn POST into GET and drop the body", arguments: [301, 302], [Delivery.completionHandler, .asyncData])
    func postBecomesGet(_ status: Int, _ delivery: Delivery) async throws {
        var request = URLRequest(url: nginx.url("/redirect/\(status)"))
        request.httpMethod = "POST"
        request.httpBody = Data("field=value".utf8)
        let loaded = await load(request, via: delivery)
        #expect(loaded.error == nil)
        let echo = try EchoReply(loaded.body)
        #expect(echo.method == "GET")
        #expect(echo.bodyLength == 0)
        #expect(echo.header("Content-Length") == nil)
        #expect(echo.header("Transfer-Encoding") == nil)
    }

    @Test("303 turns every method but HEAD into GET and drops the body and its content fields", arguments: ["POST", "PUT", "PATCH", "DELETE"])
    func seeOther(_ method: String) async throws {
        var request = URLRequest(url: nginx.url("/redirect/303"))
        request.httpMethod = method
        request.httpBody = Data(deterministicBytes(count: 5000, seed: 31))
        request.setValue("text/plain", forHTTPHeaderField: "Content-Type")
        request.setValue("identity", forHTTPHeaderField: "Content-Encoding")
        request.setValue("en", forHTTPHeaderField: "Content-Language")
        request.setValue("/original", forHTTPHeaderField: "Content-Location")
        request.setValue("yes", forHTTPHeaderField: "X-Kept")
        let session = session()
        defer { session.finishTasksAndInvalidate() }
        let (data, _) = try await session.data(for: request)
        let echo = try EchoReply(data)
        #expect(echo.method == "GET")
        #expect(echo.bodyLength == 0)
        for name in ["Content-Type", "Content-Length", "Content-Encoding", "Content-Language", "Content-Location", "Transfer-Encoding"] {
            #expect(echo.header(name) == nil, "\(name) describes the dropped body")
        }
        #expect(echo.header("X-Kept") == "yes", "other caller fields stay")
    }

    @Test("303 leaves HEAD a HEAD")
    func seeOtherHead() async throws {
        var request = URLRequest(url: nginx.url("/redirect/303"))
        request.httpMethod = "HEAD"
        let session = session()
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 200)
        #expect(http.url?.absoluteString == nginx.url("/echo").absoluteString)
        #expect(http.value(forHTTPHeaderField: "X-Method") == "HEAD")
        #expect(data.isEmpty)
    }

    @Test("307 and 308 keep the method and send the body again", arguments: [307, 308], ["POST", "PUT"])
    func keepMethodAndBody(_ status: Int, _ method: String) async throws {
        let body = Data(deterministicBytes(count: 100_000, seed: UInt64(status)))
        var request = URLRequest(url: nginx.url("/redirect/\(status)"))
        request.httpMethod = method
        request.httpBody = body
        request.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
        for delivery in [Delivery.completionHandler, .asyncData] {
            let loaded = await load(request, via: delivery)
            #expect(loaded.error == nil)
            #expect(loaded.response?.url?.absoluteString == nginx.url("/echo").absoluteString)
            let echo = try EchoReply(loaded.body)
            #expect(echo.method == method, "\(delivery)")
            #expect(echo.bodyLength == body.count, "\(delivery)")
            #expect(echo.bodySHA256 == body.sha256Hex, "\(delivery)")
            #expect(echo.header("Content-Type") == "application/octet-stream")
        }
    }

    @Test("307 and 308 send an upload task's Data and file bodies again", arguments: [307, 308])
    func uploadsFollow(_ status: Int) async throws {
        let body = Data(deterministicBytes(count: 200_000, seed: 40 + UInt64(status)))
        var request = URLRequest(url: nginx.url("/redirect/\(status)"))
        request.httpMethod = "POST"
        let session = session()
        defer { session.finishTasksAndInvalidate() }

        let (fromData, dataResponse) = try await session.upload(for: request, from: body)
        #expect(dataResponse.url?.absoluteString == nginx.url("/echo").absoluteString)
        let dataEcho = try EchoReply(fromData)
        #expect(dataEcho.method == "POST")
        #expect(dataEcho.bodySHA256 == body.sha256Hex)

        let file = TestRun.makeDirectory("redirect-upload").appendingPathComponent("body.bin")
        try body.write(to: file)
        defer { try? FileManager.default.removeItem(at: file.deletingLastPathComponent()) }
        let (fromFile, fileResponse) = try await session.upload(for: request, fromFile: file)
        #expect(fileResponse.url?.absoluteString == nginx.url("/echo").absoluteString)
        let fileEcho = try EchoReply(fromFile)
        #expect(fileEcho.method == "POST")
        #expect(fileEcho.bodyLength == body.count)
        #expect(fileEcho.bodySHA256 == body.sha256Hex)

        let completion = await withCheckedContinuation { continuation in
            session.uploadTask(with: request, from: body) { data, response, error in
                continuation.resume(returning: (data, response, error))
            }.resume()
        }
        #expect(completion.2 == nil)
        #expect(try EchoReply(completion.0).bodySHA256 == body.sha256Hex)
    }

    @Test("httpbin's redirect-to: POST becomes GET after 301, 302, 303 and stays POST after 307, 308", arguments: [301, 302, 303, 307, 308])
    func httpbinRedirectTo(_ status: Int) async throws {
        let httpbin = try HttpbinServer.shared()
        // Only ever a target on this machine.
        let target = httpbin.url("/anything/landed")
        var components = try #require(URLComponents(url: httpbin.url("/redirect-to"), resolvingAgainstBaseURL: false))
        components.queryItems = [URLQueryItem(name: "url", value: target.absoluteString), URLQueryItem(name: "status_code", value: String(status))]
        var request = URLRequest(url: try #require(components.url))
        request.httpMethod = "POST"
        request.httpBody = Data("hello=world".utf8)
        request.setValue("text/plain", forHTTPHeaderField: "Content-Type")
        let session = session()
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(for: request)
        #expect(response.url?.absoluteString == target.absoluteString)
        let reply = try HttpbinReply(data)
        let keeps = status == 307 || status == 308
        #expect(reply.method == (keeps ? "POST" : "GET"))
        #expect(reply.data == (keeps ? "hello=world" : ""))
        #expect(reply.url == target.absoluteString)
    }

    // MARK: - Locations

    @Test("a Location is resolved against the request URL (RFC 3986); the request's fragment is kept when the Location has none", arguments: [
        ("/a/b/c?x=1", "../x", "/a/x"),
        ("/a/b/c", "x", "/a/b/x"),
        ("/a/b/c", "?q=1", "/a/b/c?q=1"),
        ("/a/b/c", "//HOST/path?y=2", "/path?y=2"),
        ("/a/b/c", "/d#new", "/d#new"),
        ("/a/b/c#frag", "/d", "/d#frag"),
        ("/a/b/c#frag", "../x?y=2", "/a/x?y=2#frag"),
        ("/a/b/c#frag", "//HOST/path", "/path#frag"),
        ("/a/b/c#frag", "/d#other", "/d#other"),
    ])
    func locationResolution(_ entry: (String, String, String)) async throws {
        let (startPath, location, expectedPath) = entry
        let original = String(startPath.split(separator: "#", maxSplits: 1)[0])
        let server = try AnsweringServer { request, port in
            guard request.target == original else { return .ok(request.target) }
            return .redirect(302, to: location.replacingOccurrences(of: "HOST", with: "127.0.0.1:\(port)"))
        }
        let start = try #require(URL(string: "http://127.0.0.1:\(server.port)\(startPath)"))
        let expected = "http://127.0.0.1:\(server.port)\(expectedPath)"
        let sentTarget = String(expectedPath.split(separator: "#", maxSplits: 1)[0])
        for delivery in [Delivery.completionHandler, .asyncData] {
            let loaded = await load(URLRequest(url: start), via: delivery)
            #expect(loaded.error == nil)
            #expect(loaded.body.map { String(decoding: $0, as: UTF8.self) } == sentTarget, "the fragment never goes on the wire")
            #expect(loaded.response?.url?.absoluteString == expected, "\(delivery)")
            #expect(loaded.record.hops.first?.proposedURL?.absoluteString == expected, "\(delivery)")
            if let task = loaded.task {
                #expect(task.currentRequest?.url?.absoluteString == expected)
                #expect(task.originalRequest?.url?.absoluteString == start.absoluteString)
            }
        }
    }

    @Test("a Location with a scheme Courier does not load fails with unsupportedURL", arguments: Delivery.allCases)
    func unsupportedScheme(_ delivery: Delivery) async throws {
        let loaded = await load(URLRequest(url: nginx.url("/redirect/unsupported-scheme")), via: delivery)
        #expect(urlErrorCode(loaded.error) == .unsupportedURL, "\(String(describing: loaded.error))")
        #expect(loaded.body == nil)
    }

    @Test("an absolute Location is followed", arguments: [Delivery.asyncData, .download])
    func absoluteLocation(_ delivery: Delivery) async throws {
        let loaded = await load(URLRequest(url: nginx.url("/redirect/absolute")), via: delivery)
        #expect(loaded.error == nil)
        #expect(loaded.response?.url?.absoluteString == nginx.url("/files/hello.txt").absoluteString)
        #expect(loaded.body.map(Array.init) == NginxServer.fixtures["hello.txt"])
    }

    @Test("currentRequest follows the hops, originalRequest stays, response.url is the final URL", arguments: [Delivery.completionHandler, .delegate])
    func currentAndOriginalRequest(_ delivery: Delivery) async throws {
        let start = nginx.url("/redirect/hop1")
        let final = nginx.url("/files/hello.txt")
        let loaded = await load(URLRequest(url: start), via: delivery)
        #expect(loaded.error == nil)
        #expect(loaded.body.map(Array.init) == NginxServer.fixtures["hello.txt"], "only the final body is delivered")
        #expect(loaded.response?.statusCode == 200)
        #expect(loaded.response?.url?.absoluteString == final.absoluteString)
        let task = try #require(loaded.task)
        #expect(task.originalRequest?.url?.absoluteString == start.absoluteString)
        #expect(task.currentRequest?.url?.absoluteString == final.absoluteString)
        #expect((task.response as? HTTPURLResponse)?.url?.absoluteString == final.absoluteString)
    }

    // MARK: - The delegate

    @Test("the delegate is asked once per hop with the 3xx response and the proposed request")
    func delegateAskedPerHop() async throws {
        let loaded = await load(URLRequest(url: nginx.url("/redirect/hop1")), via: .delegate)
        #expect(loaded.error == nil)
        let hops = loaded.record.hops
        #expect(hops.map(\.status) == [302, 302])
        #expect(hops.map { $0.responseURL?.absoluteString } == [nginx.url("/redirect/hop1").absoluteString, nginx.url("/redirect/hop2").absoluteString])
        #expect(hops.map(\.location) == ["/redirect/hop2", "/files/hello.txt"])
        #expect(hops.map { $0.proposedURL?.absoluteString } == [nginx.url("/redirect/hop2").absoluteString, nginx.url("/files/hello.txt").absoluteString])
        #expect(hops.map(\.proposedMethod) == ["GET", "GET"])
        #expect(loaded.record.offQueue == 0)
        #expect(Array(loaded.record.data) == NginxServer.fixtures["hello.txt"])
    }

    @Test("a followed redirect: willPerformHTTPRedirection, then the final response, data, metrics, completion", arguments: [301, 307])
    func delegateOrder(_ status: Int) async throws {
        let loaded = await load(URLRequest(url: nginx.url("/redirect/\(status)")), via: .delegate)
        #expect(loaded.error == nil)
        #expect(loaded.record.collapsedEvents == ["redirect", "response", "data", "metrics", "complete"])
        #expect(loaded.record.hops.map(\.status) == [status])
    }

    @Test("refusing a redirect completes the task successfully with the 3xx response and its body", arguments: Delivery.allCases)
    func refuse(_ delivery: Delivery) async throws {
        let start = nginx.url("/redirect/hop1")
        let loaded = await load(URLRequest(url: start), via: delivery, recorder: RedirectRecorder { _, _ in nil })
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.record.hops.count == 1)
        let response = try #require(loaded.response)
        #expect(response.statusCode == 302)
        #expect(response.url?.absoluteString == start.absoluteString)
        #expect(response.value(forHTTPHeaderField: "Location") == "/redirect/hop2")
        let body = String(decoding: loaded.body ?? Data(), as: UTF8.self)
        #expect(body.contains("302 Found"), "the redirect's own body: \(body)")
        if let task = loaded.task {
            #expect(task.currentRequest?.url?.absoluteString == start.absoluteString)
        }
        if delivery == .delegate {
            #expect(loaded.record.collapsedEvents == ["redirect", "response", "data", "metrics", "complete"])
        }
    }

    @Test("the request the delegate hands back is the one loaded", arguments: [Delivery.delegate, .asyncData, .completionHandler])
    func delegateModifiesRequest(_ delivery: Delivery) async throws {
        let recorder = RedirectRecorder { _, proposed in
            var changed = proposed
            changed.url = proposed.url.flatMap { URL(string: $0.absoluteString + "?changed=1") }
            changed.setValue("from-the-delegate", forHTTPHeaderField: "X-Redirect-Header")
            return changed
        }
        let loaded = await load(URLRequest(url: nginx.url("/redirect/302")), via: delivery, recorder: recorder)
        #expect(loaded.error == nil)
        let echo = try EchoReply(loaded.body)
        #expect(echo.args == "changed=1")
        #expect(echo.header("X-Redirect-Header") == "from-the-delegate")
        #expect(loaded.response?.url?.absoluteString == nginx.url("/echo?changed=1").absoluteString)
        if let task = loaded.task {
            #expect(task.currentRequest?.value(forHTTPHeaderField: "X-Redirect-Header") == "from-the-delegate")
        }
    }

    // MARK: - Another origin

    /// The caller's secrets on a request that starts at `/start`.
    static func requestWithSecrets(_ url: URL) -> URLRequest {
        var request = URLRequest(url: url)
        request.setValue("Bearer secret-token", forHTTPHeaderField: "Authorization")
        request.setValue("Basic cHJveHk6c2VjcmV0", forHTTPHeaderField: "Proxy-Authorization")
        request.setValue("session=abc123", forHTTPHeaderField: "Cookie")
        request.setValue("key-123", forHTTPHeaderField: "X-Api-Key")
        request.setValue("kept", forHTTPHeaderField: "X-Other")
        return request
    }

    @Test("Authorization, Proxy-Authorization and Cookie set by the caller do not go to another origin", arguments: ["another port", "another host"])
    func crossOriginStripsCredentials(_ variant: String) async throws {
        let landing = try AnsweringServer { _, _ in .ok("landed") }
        let origin = try AnsweringServer { request, port in
            guard request.target == "/start" else { return .ok("landed") }
            // A different port, or the same port under another name: either is another origin.
            let location = variant == "another port" ? "http://127.0.0.1:\(landing.port)/landing" : "http://localhost:\(port)/landing"
            return .redirect(302, to: location)
        }
        for delivery in [Delivery.asyncData, .completionHandler] {
            let loaded = await load(Self.requestWithSecrets(origin.url("/start")), via: delivery)
            #expect(loaded.error == nil)
            #expect(loaded.body.map { String(decoding: $0, as: UTF8.self) } == "landed")
        }
        let first = try #require(origin.requests.first)
        #expect(first.header("Authorization") == "Bearer secret-token")
        #expect(first.header("Cookie") == "session=abc123")
        let arrivals = (variant == "another port" ? landing.requests : origin.requests).filter { $0.target == "/landing" }
        #expect(arrivals.count == 2)
        for arrival in arrivals {
            #expect(arrival.header("Authorization") == nil)
            #expect(arrival.header("Proxy-Authorization") == nil)
            #expect(arrival.header("Cookie") == nil)
            #expect(arrival.header("X-Api-Key") == "key-123", "not stripped unless configured")
            #expect(arrival.header("X-Other") == "kept")
        }
    }

    @Test("credentials and cookies set by the caller stay on a same-origin redirect")
    func sameOriginKeepsCredentials() async throws {
        let server = try AnsweringServer { request, _ in
            request.target == "/start" ? .redirect(307, to: "/landing") : .ok("landed")
        }
        let loaded = await load(Self.requestWithSecrets(server.url("/start")), via: .asyncData)
        #expect(loaded.error == nil)
        let arrival = try #require(server.requests.first { $0.target == "/landing" })
        #expect(arrival.header("Authorization") == "Bearer secret-token")
        #expect(arrival.header("Cookie") == "session=abc123")
        #expect(arrival.header("X-Api-Key") == "key-123")
        #expect(arrival.header("X-Other") == "kept")
    }

    @Test("courierHeadersStrippedOnCrossOriginRedirect strips the named fields on another origin, ignoring case")
    func configuredCrossOriginFields() async throws {
        #expect(URLSessionConfiguration.ephemeral.courierHeadersStrippedOnCrossOriginRedirect.isEmpty)
        #expect(URLSessionConfiguration.default.courierHeadersStrippedOnCrossOriginRedirect.isEmpty)
        let landing = try AnsweringServer { _, _ in .ok("landed") }
        let origin = try AnsweringServer { request, _ in
            switch request.target {
            case "/start": return .redirect(302, to: "http://127.0.0.1:\(landing.port)/landing")
            case "/start-same": return .redirect(302, to: "/landing")
            default: return .ok("landed")
            }
        }
        let configuration = URLSessionConfiguration.ephemeral
        configuration.courierHeadersStrippedOnCrossOriginRedirect = ["x-API-key"]
        #expect(configuration.courierHeadersStrippedOnCrossOriginRedirect.count == 1)
        for delivery in [Delivery.asyncData, .delegate] {
            let cross = await load(Self.requestWithSecrets(origin.url("/start")), via: delivery, configuration: configuration)
            #expect(cross.error == nil)
            let same = await load(Self.requestWithSecrets(origin.url("/start-same")), via: delivery, configuration: configuration)
            #expect(same.error == nil)
        }
        let crossArrivals = landing.requests
        #expect(crossArrivals.count == 2)
        for arrival in crossArrivals {
            #expect(arrival.header("X-Api-Key") == nil)
            #expect(arrival.header("Authorization") == nil)
            #expect(arrival.header("X-Other") == "kept")
        }
        let sameArrivals = origin.requests.filter { $0.target == "/landing" }
        #expect(sameArrivals.count == 2)
        for arrival in sameArrivals {
            #expect(arrival.header("X-Api-Key") == "key-123", "a same-origin hop keeps it")
            #expect(arrival.header("Authorization") == "Bearer secret-token")
        }
    }

    // MARK: - Metrics

    @Test("metrics: one transaction per hop, with that hop's request, and redirectCount")
    func metricsPerHop() async throws {
        let loaded = await load(URLRequest(url: nginx.url("/redirect/hop1")), via: .delegate)
        #expect(loaded.error == nil)
        let metrics = try #require(loaded.record.metrics)
        #expect(metrics.redirectCount == 2)
        #expect(metrics.transactionMetrics.count == 3)
        #expect(metrics.transactionMetrics.map { $0.request.url?.absoluteString } == [
            nginx.url("/redirect/hop1").absoluteString, nginx.url("/redirect/hop2").absoluteString, nginx.url("/files/hello.txt").absoluteString,
        ])
        #expect(metrics.transactionMetrics.map { ($0.response as? HTTPURLResponse)?.statusCode } == [302, 302, 200])
    }

    @Test("metrics of 16 followed redirects: 17 transactions, redirectCount 16")
    func metricsOfSixteenHops() async throws {
        let server = try AnsweringServer { request, _ in
            let remaining = Int(request.target.split(separator: "/").last ?? "") ?? 0
            return remaining > 0 ? .redirect(307, to: "/c/\(remaining - 1)") : .ok("arrived")
        }
        let loaded = await load(URLRequest(url: server.url("/c/16")), via: .delegate)
        #expect(loaded.error == nil)
        #expect(loaded.record.hops.count == 16)
        let metrics = try #require(loaded.record.metrics)
        #expect(metrics.redirectCount == 16)
        #expect(metrics.transactionMetrics.count == 17)
        #expect(metrics.transactionMetrics.map { $0.request.url?.path ?? "" } == (0...16).reversed().map { "/c/\($0)" })
    }

    @Test("a fresh session's first transaction to localhost has domain lookup dates")
    func domainLookupDates() async throws {
        let start = try #require(URL(string: "http://localhost:\(nginx.port)/redirect/hop1"))
        let loaded = await load(URLRequest(url: start), via: .delegate)
        #expect(loaded.error == nil)
        let metrics = try #require(loaded.record.metrics)
        #expect(metrics.redirectCount == 2)
        let first = try #require(metrics.transactionMetrics.first)
        #expect(first.request.url?.absoluteString == start.absoluteString)
        let lookupStart = try #require(first.domainLookupStartDate)
        let lookupEnd = try #require(first.domainLookupEndDate)
        #expect(lookupStart <= lookupEnd)
        #expect(metrics.transactionMetrics.last?.request.url?.absoluteString == "http://localhost:\(nginx.port)/files/hello.txt")
    }
}
