import Foundation
import Courier
import Synchronization
import Testing
import _CourierTestSupport

// The code in OrdinaryClient.swift, written for FoundationNetworking, run against Courier and
// real servers on 127.0.0.1: the one-import switch has to hold for behaviour, not just for the
// compiler.

/// What nginx's `/echo` (Resources/echo.js) answers: the request as it arrived.
struct EchoedRequest: Decodable, Sendable {
    var method: String
    var uri: String
    var args: String
    var headers: [String: String]
    var bodyLength: Int
    var bodySHA256: String

    /// A request header, whatever the case the client sent its name in.
    func header(_ name: String) -> String? {
        headers.first { $0.key.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
}

/// A body an app would post.
struct NewNote: Codable, Sendable {
    var title: String
    var tags: [String]
    var pinned: Bool
}

/// A resource an app would fetch.
struct Profile: Codable, Equatable, Sendable {
    var id: Int
    var name: String
    var roles: [String]
}

/// The bytes of a request body as a URLProtocol sees them: Apple hands some bodies over as a
/// stream, so a portable mock reads either.
func bodyData(of request: URLRequest) -> Data? {
    if let body = request.httpBody { return body }
    guard let stream = request.httpBodyStream else { return nil }
    stream.open()
    defer { stream.close() }
    var data = Data()
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = stream.read(&buffer, maxLength: buffer.count)
        if count <= 0 { break }
        data.append(buffer, count: count)
    }
    return data
}

// MARK: - APIClient against nginx

@Suite("APIClient against nginx")
struct APIClientNginxTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    func makeClient() -> APIClient {
        APIClient(baseURL: nginx.baseURL, session: URLSession(configuration: .ephemeral))
    }

    @Test("GET decodes the JSON reply; the query and Accept arrive as built")
    func getDecodes() async throws {
        let client = makeClient()
        defer { client.session.finishTasksAndInvalidate() }
        let query = [URLQueryItem(name: "q", value: "swift on linux"), URLQueryItem(name: "page", value: "2")]
        let reply: EchoedRequest = try await client.get("echo", query: query)
        #expect(reply.method == "GET")
        #expect(reply.uri == "/echo")
        #expect(reply.args == "q=swift%20on%20linux&page=2")
        #expect(reply.header("Accept") == "application/json")
        #expect(reply.bodyLength == 0)
    }

    @Test("the default session, URLSession.shared, serves the client too")
    func sharedSession() async throws {
        let client = APIClient(baseURL: nginx.baseURL)
        let reply: EchoedRequest = try await client.get("echo")
        #expect(reply.method == "GET")
        #expect(reply.args == "")
    }

    @Test("POST sends the encoded JSON body with its Content-Type; nginx saw exactly those bytes")
    func postSendsJSON() async throws {
        let client = makeClient()
        defer { client.session.finishTasksAndInvalidate() }
        let note = NewNote(title: "Ship the one-import switch", tags: ["linux", "swift"], pinned: true)
        let reply: EchoedRequest = try await client.post("echo", body: note)
        let sent = try APIClient.makeEncoder().encode(note)
        #expect(reply.method == "POST")
        #expect(reply.uri == "/echo")
        #expect(reply.header("Content-Type") == "application/json")
        #expect(reply.bodyLength == sent.count)
        #expect(reply.bodySHA256 == SHA256.hex(sent))
    }

    @Test("a status outside 2xx is APIError.badStatus with the server's body", arguments: [404, 418, 500])
    func badStatus(_ code: Int) async throws {
        let client = makeClient()
        defer { client.session.finishTasksAndInvalidate() }
        do {
            let _: EchoedRequest = try await client.get("status/\(code)")
            Issue.record("a \(code) was decoded as a success")
        } catch APIError.badStatus(let status, let body) {
            #expect(status == code)
            #expect(String(decoding: body, as: UTF8.self).hasPrefix("status \(code)"))
        }
    }

    @Test("a 200 that is not the expected JSON is APIError.decoding")
    func decodingFailure() async throws {
        let client = makeClient()
        defer { client.session.finishTasksAndInvalidate() }
        do {
            let _: EchoedRequest = try await client.get("files/hello.txt")
            Issue.record("plain text was decoded as JSON")
        } catch APIError.decoding(let error) {
            #expect(error is DecodingError)
        }
    }

    @Test("a refused connection is APIError.transport carrying the URLError")
    func transportFailure() async throws {
        // A loopback port nothing listens on: the connection is refused at once.
        let closedPort = ClosedLoopbackPort()
        defer { withExtendedLifetime(closedPort) {} }
        let closed = try #require(URL(string: "http://127.0.0.1:\(closedPort.port)"))
        let client = APIClient(baseURL: closed, session: URLSession(configuration: .ephemeral))
        defer { client.session.finishTasksAndInvalidate() }
        do {
            let _: EchoedRequest = try await client.get("echo")
            Issue.record("a request to a closed port succeeded")
        } catch APIError.transport(let error) {
            #expect(error.code == .cannotConnectToHost)
        }
    }
}

// MARK: - APIClient against MockURLProtocol

/// Serialized: the mock's handler is one static, as in the apps that use this pattern.
@Suite("APIClient against MockURLProtocol", .serialized)
struct APIClientMockTests {
    /// Port 1 on loopback: should a request ever get past the mock, it is refused locally.
    func makeClient(_ session: URLSession) throws -> APIClient {
        let baseURL = try #require(URL(string: "http://127.0.0.1:1/api"))
        return APIClient(baseURL: baseURL, session: session)
    }

    @Test("the handler's JSON is decoded; the request reached it as the client built it")
    func mockedGet() async throws {
        let seen = Mutex<[URLRequest]>([])
        MockURLProtocol.requestHandler = { request in
            seen.withLock { $0.append(request) }
            guard let url = request.url,
                  let response = HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: ["Content-Type": "application/json"]) else {
                throw URLError(.badURL)
            }
            return (response, Data(#"{"id":42,"name":"Ada","roles":["admin","author"]}"#.utf8))
        }
        defer { MockURLProtocol.requestHandler = nil }
        let session = MockURLProtocol.makeSession()
        defer { session.finishTasksAndInvalidate() }

        let profile: Profile = try await makeClient(session).get("users/42", query: [URLQueryItem(name: "fields", value: "profile")])
        #expect(profile == Profile(id: 42, name: "Ada", roles: ["admin", "author"]))
        let requests = seen.withLock { $0 }
        #expect(requests.count == 1)
        #expect(requests.first?.httpMethod == "GET")
        #expect(requests.first?.url?.path == "/api/users/42")
        #expect(requests.first?.url?.query == "fields=profile")
        #expect(requests.first?.value(forHTTPHeaderField: "Accept") == "application/json")
    }

    @Test("a POST reaches the handler with its method, Content-Type and body; a 201 is a success")
    func mockedPost() async throws {
        let seen = Mutex<[URLRequest]>([])
        MockURLProtocol.requestHandler = { request in
            seen.withLock { $0.append(request) }
            guard let url = request.url,
                  let response = HTTPURLResponse(url: url, statusCode: 201, httpVersion: "HTTP/1.1", headerFields: ["Content-Type": "application/json"]) else {
                throw URLError(.badURL)
            }
            return (response, Data(#"{"id":7,"name":"note","roles":[]}"#.utf8))
        }
        defer { MockURLProtocol.requestHandler = nil }
        let session = MockURLProtocol.makeSession()
        defer { session.finishTasksAndInvalidate() }

        let note = NewNote(title: "mocked", tags: [], pinned: false)
        let created: Profile = try await makeClient(session).post("notes", body: note)
        #expect(created.id == 7)
        let request = try #require(seen.withLock { $0.first })
        #expect(request.httpMethod == "POST")
        #expect(request.value(forHTTPHeaderField: "Content-Type") == "application/json")
        let body = try #require(bodyData(of: request))
        #expect(try JSONDecoder().decode(NewNote.self, from: body).title == "mocked")
    }

    @Test("a 500 from the handler is APIError.badStatus")
    func mockedServerError() async throws {
        MockURLProtocol.requestHandler = { request in
            guard let url = request.url,
                  let response = HTTPURLResponse(url: url, statusCode: 500, httpVersion: "HTTP/1.1", headerFields: nil) else {
                throw URLError(.badURL)
            }
            return (response, Data(#"{"error":"database down"}"#.utf8))
        }
        defer { MockURLProtocol.requestHandler = nil }
        let session = MockURLProtocol.makeSession()
        defer { session.finishTasksAndInvalidate() }

        do {
            let _: Profile = try await makeClient(session).get("users/1")
            Issue.record("a 500 was decoded as a success")
        } catch APIError.badStatus(let status, let body) {
            #expect(status == 500)
            #expect(body == Data(#"{"error":"database down"}"#.utf8))
        }
    }

    @Test("a URLError the handler throws comes out as APIError.transport")
    func mockedURLError() async throws {
        MockURLProtocol.requestHandler = { _ in throw URLError(.notConnectedToInternet) }
        defer { MockURLProtocol.requestHandler = nil }
        let session = MockURLProtocol.makeSession()
        defer { session.finishTasksAndInvalidate() }

        do {
            let _: Profile = try await makeClient(session).get("users/1")
            Issue.record("the handler's error was lost")
        } catch APIError.transport(let error) {
            #expect(error.code == .notConnectedToInternet)
        }
    }

    struct Outage: Error, Equatable {
        var region: String
    }

    @Test("any other error the handler throws reaches the caller unchanged")
    func mockedOwnError() async throws {
        MockURLProtocol.requestHandler = { _ in throw Outage(region: "eu-west") }
        defer { MockURLProtocol.requestHandler = nil }
        let session = MockURLProtocol.makeSession()
        defer { session.finishTasksAndInvalidate() }

        let client = try makeClient(session)
        await #expect(throws: Outage(region: "eu-west")) {
            let _: Profile = try await client.get("users/1")
        }
    }
}

// MARK: - DownloadManager against nginx

extension DownloadManager {
    /// `download(_:progress:completion:)`, awaited: the moved file and the task's identifier.
    func fetch(_ url: URL) async throws -> (file: URL, task: Int) {
        var identifier = 0
        let file: URL = try await withCheckedThrowingContinuation { continuation in
            identifier = download(url, completion: { continuation.resume(with: $0) }).taskIdentifier
        }
        return (file, identifier)
    }
}

@Suite("DownloadManager against nginx")
struct DownloadManagerTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    /// No cache: each download has to come from the server.
    static func configuration() -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        return configuration
    }

    @Test("two downloads at once are moved into the destination whole, with progress up to their size", .exclusiveDownloadFiles)
    func downloadsFiles() async throws {
        let destination = TestRun.makeDirectory("switch-downloads")
        defer { try? FileManager.default.removeItem(at: destination) }
        let manager = DownloadManager(destinationDirectory: destination, configuration: Self.configuration())
        defer { manager.invalidate() }

        async let large = manager.fetch(nginx.url("/files/1m.bin"))
        async let small = manager.fetch(nginx.url("/files/64k.bin"))
        let finished = try await [large, small]

        for ((file, task), name) in zip(finished, ["1m.bin", "64k.bin"]) {
            let fixture = try #require(NginxServer.fixtures[name])
            #expect(file.path == destination.appendingPathComponent(name).path)
            let bytes = try Data(contentsOf: file)
            #expect(bytes.count == fixture.count)
            #expect(SHA256.hex(bytes) == SHA256.hex(fixture), "\(name) arrived intact")
            let progress = try #require(manager.progress(forTask: task))
            #expect(progress.updates > 0, "\(name): progress was reported")
            #expect(progress.totalBytesWritten == Int64(fixture.count))
            #expect(progress.totalBytesExpectedToWrite == Int64(fixture.count), "nginx sent a Content-Length")
            #expect(progress.fractionCompleted == 1)
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: destination.path).sorted()
        #expect(names == ["1m.bin", "64k.bin"])
    }

    @Test("a 404 is DownloadError.badStatus and nothing lands in the destination", .exclusiveDownloadFiles)
    func missingFile() async throws {
        let destination = TestRun.makeDirectory("switch-downloads-404")
        defer { try? FileManager.default.removeItem(at: destination) }
        let manager = DownloadManager(destinationDirectory: destination, configuration: Self.configuration())
        defer { manager.invalidate() }

        do {
            _ = try await manager.fetch(nginx.url("/files/missing.bin"))
            Issue.record("a 404 page was kept as the file")
        } catch DownloadManager.DownloadError.badStatus(let status) {
            #expect(status == 404)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: destination.path).isEmpty)
    }

    @Test("cancelled with resume data after its first progress, a download goes on from there and ends whole", .exclusiveDownloadFiles)
    func cancelAndResume() async throws {
        let fixture = try #require(NginxServer.fixtures["8m.bin"])
        let destination = TestRun.makeDirectory("switch-downloads-resume")
        defer { try? FileManager.default.removeItem(at: destination) }
        let manager = DownloadManager(destinationDirectory: destination, configuration: Self.configuration())
        defer { manager.invalidate() }

        // /slow/ is sent at 1 MB/s; the download is cancelled from its first progress report
        // (after 256 KiB), on the delegate queue, seconds before it could end. (With a 1 MiB
        // file the margin was 0.75 s, which a run under AddressSanitizer on two loaded cores
        // once took up: the download ended before the cancel came.)
        let (ended, endContinuation) = AsyncStream<Result<URL, any Error>>.makeStream()
        let (produced, producedContinuation) = AsyncStream<Data?>.makeStream()
        let started = Mutex<URLSessionDownloadTask?>(nil)
        let cancelled = Mutex(false)
        let task = manager.download(nginx.url("/slow/8m.bin"), progress: { _ in
            guard let task = started.withLock({ $0 }) else { return }
            let first = cancelled.withLock { done -> Bool in
                defer { done = true }
                return !done
            }
            guard first else { return }
            manager.cancel(task, resumeDataHandler: { data in
                producedContinuation.yield(data)
                producedContinuation.finish()
            })
        }, completion: { result in
            endContinuation.yield(result)
            endContinuation.finish()
            // Should the download end first, the wait for resume data below ends too.
            producedContinuation.finish()
        })
        started.withLock { $0 = task }
        var resumeData: Data?
        for await data in produced {
            resumeData = data
            break
        }
        var firstResult: Result<URL, any Error>?
        for await result in ended {
            firstResult = result
            break
        }
        switch firstResult {
        case .failure(let error):
            #expect((error as? URLError)?.code == .cancelled)
        case .success(let file):
            Issue.record("the download finished (\(file.lastPathComponent)) before it was cancelled")
        case nil:
            Issue.record("the cancelled download never completed")
        }
        let data = try #require(resumeData, "nginx's ETag and byte ranges make the download resumable")

        var resumedTask = 0
        let file: URL = try await withCheckedThrowingContinuation { continuation in
            resumedTask = manager.resume(with: data, completion: { continuation.resume(with: $0) }).taskIdentifier
        }
        #expect(file.lastPathComponent == "8m.bin")
        let bytes = try Data(contentsOf: file)
        #expect(bytes.count == fixture.count)
        #expect(SHA256.hex(bytes) == SHA256.hex(fixture), "the kept part and the rest make the file")
        let progress = try #require(manager.progress(forTask: resumedTask))
        let offset = try #require(progress.resumedAtOffset, "the resumed task went on from an offset")
        #expect(offset > 0 && offset < Int64(fixture.count))
        #expect(progress.totalBytesWritten == Int64(fixture.count), "totals count the bytes kept from before")
    }
}

// MARK: - The caching, cookie-keeping session against nginx

@Suite("makeCachingSession against nginx")
struct CachingSessionTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    // The cache directories stay in the test run's directory, removed with it: the cache
    // writes its disk files after the response is delivered, so deleting them here would race.

    @Test("a max-age response is stored, and the next GET is answered from the cache")
    func cachedAnswer() async throws {
        // An ephemeral configuration's cookie jar: the process-wide one must not collect test cookies.
        let jar = try #require(URLSessionConfiguration.ephemeral.httpCookieStorage)
        let session = makeCachingSession(cacheDirectory: TestRun.makeDirectory("switch-cache"), cookieStorage: jar)
        defer { session.finishTasksAndInvalidate() }
        let cache = try #require(session.configuration.urlCache)
        let request = URLRequest(url: nginx.url("/cache/max-age/hello.txt"))
        #expect(cache.cachedResponse(for: request) == nil)

        let (first, firstResponse) = try await session.data(for: request)
        #expect(Array(first) == NginxServer.fixtures["hello.txt"])
        let stored = try #require(cache.cachedResponse(for: request), "the response was stored")
        #expect(stored.data == first)
        #expect((stored.response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Cache-Control") == "max-age=300")

        let (second, secondResponse) = try await session.data(for: request)
        #expect(second == first)
        // nginx numbers connections and the requests on each: the same numbers again mean the
        // stored response was replayed, not fetched a second time.
        let firstHTTP = try #require(firstResponse as? HTTPURLResponse)
        let secondHTTP = try #require(secondResponse as? HTTPURLResponse)
        #expect(secondHTTP.statusCode == 200)
        #expect(secondHTTP.value(forHTTPHeaderField: "X-Connection") == firstHTTP.value(forHTTPHeaderField: "X-Connection"))
        #expect(secondHTTP.value(forHTTPHeaderField: "X-Connection-Requests") == firstHTTP.value(forHTTPHeaderField: "X-Connection-Requests"))

        // And a request that may only use the cache gets it too.
        var offline = request
        offline.cachePolicy = .returnCacheDataDontLoad
        let (third, _) = try await session.data(for: offline)
        #expect(third == first)
    }

    @Test("cookies a response sets are kept in the storage and sent back where their path allows")
    func keepsCookies() async throws {
        let jar = try #require(URLSessionConfiguration.ephemeral.httpCookieStorage)
        let session = makeCachingSession(cacheDirectory: TestRun.makeDirectory("switch-cookies"), cookieStorage: jar)
        defer { session.finishTasksAndInvalidate() }

        let (_, response) = try await session.data(from: nginx.url("/cookie/set"))
        #expect((response as? HTTPURLResponse)?.statusCode == 204)
        let kept = jar.cookies(for: nginx.url("/cookie/set")) ?? []
        #expect(Set(kept.map(\.name)) == ["nginx", "lasting"])
        let lasting = kept.first { $0.name == "lasting" }
        #expect(lasting?.path == "/cookie")
        #expect(lasting?.isSessionOnly == false, "Max-Age makes it persistent")

        // /echo is outside Path=/cookie: only the cookie for the whole host goes with it.
        let (body, _) = try await session.data(from: nginx.url("/echo"))
        let echoed = try JSONDecoder().decode(EchoedRequest.self, from: body)
        #expect(echoed.header("Cookie") == "nginx=host-only")
        #expect(echoed.header("User-Agent") == "OrdinaryClient/1.0")
    }
}
