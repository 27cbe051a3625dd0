import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// URLSession over HTTP/1.1 against a real nginx on loopback.
@Suite("HTTP/1.1 against nginx")
struct HTTP1NginxTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    @Test("GET returns the file, its status and headers")
    func getFile() async throws {
        let (data, response) = try await URLSession.shared.data(from: nginx.url("/files/hello.txt"))
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 200)
        #expect(Array(data) == NginxServer.fixtures["hello.txt"])
        #expect(http.expectedContentLength == Int64(data.count))
        #expect(http.value(forHTTPHeaderField: "content-length") == String(data.count))
        #expect(http.url == nginx.url("/files/hello.txt"))
        #expect(http.httpVersion == "HTTP/1.1")
        #expect(http.allHeaderFields["Server"] as? String != nil)
    }

    @Test("a 404 completes normally with its response")
    func notFound() async throws {
        let (data, response) = try await URLSession.shared.data(from: nginx.url("/files/missing.txt"))
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 404)
        #expect(!data.isEmpty)
        #expect(http.mimeType == "text/html")
    }

    @Test("status codes pass through", arguments: [200, 201, 202, 400, 403, 410, 500, 503])
    func statusCodes(_ code: Int) async throws {
        let (_, response) = try await URLSession.shared.data(from: nginx.url("/status/\(code)"))
        #expect((response as? HTTPURLResponse)?.statusCode == code)
    }

    @Test("HEAD has headers and no body")
    func head() async throws {
        var request = URLRequest(url: nginx.url("/files/1m.bin"))
        request.httpMethod = "HEAD"
        let (data, response) = try await URLSession.shared.data(for: request)
        #expect(data.isEmpty)
        #expect(response.expectedContentLength == Int64(1024 * 1024))
    }

    @Test("large identity and chunked bodies arrive whole", arguments: ["/files/8m.bin", "/chunked/8m.bin", "/chunked/1m.bin", "/files/empty.txt", "/chunked/100.bin"])
    func bodies(_ path: String) async throws {
        let (data, response) = try await URLSession.shared.data(from: nginx.url(path))
        let name = String(path.split(separator: "/").last!)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(data.count == NginxServer.fixtures[name]!.count)
        let intact = Array(data) == NginxServer.fixtures[name]!
        #expect(intact, "the body differs from the file")
        if path.hasPrefix("/chunked/") {
            #expect(response.expectedContentLength == -1, "chunked responses have no declared length")
        }
    }

    @Test("POST sends the body with Content-Length and a default Content-Type")
    func post() async throws {
        let body = Data(deterministicBytes(count: 300_000, seed: 9))
        var request = URLRequest(url: nginx.url("/echo?x=1"))
        request.httpMethod = "POST"
        request.httpBody = body
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.value(forHTTPHeaderField: "X-Method") == "POST")
        #expect(http.value(forHTTPHeaderField: "X-Body-Length") == "300000")
        #expect(http.value(forHTTPHeaderField: "X-Body-SHA256") == body.sha256Hex)
        let echo = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        let headers = echo?["headers"] as? [String: String]
        #expect(headers?["Content-Length"] == "300000")
        #expect(headers?["Content-Type"] == "application/x-www-form-urlencoded")
        #expect(headers?["Transfer-Encoding"] == nil)
        #expect(echo?["args"] as? String == "x=1")
    }

    @Test("a streamed body goes out chunked, without Content-Length")
    func streamedBody() async throws {
        let body = Data(deterministicBytes(count: 200_000, seed: 11))
        var request = URLRequest(url: nginx.url("/echo"))
        request.httpMethod = "PUT"
        request.httpBodyStream = InputStream(data: body)
        request.setValue("999", forHTTPHeaderField: "Content-Length")
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.value(forHTTPHeaderField: "X-Body-SHA256") == body.sha256Hex)
        let echo = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        let headers = echo?["headers"] as? [String: String]
        #expect(headers?["Transfer-Encoding"] == "chunked")
        #expect(headers?["Content-Length"] == nil, "a caller-set Content-Length never changes the framing")
    }

    @Test("PUT stores a file that GET returns")
    func putThenGet() async throws {
        let body = Data(deterministicBytes(count: 70_000, seed: 12))
        let url = nginx.url("/dav/\(UUID().uuidString).bin")
        var put = URLRequest(url: url)
        put.httpMethod = "PUT"
        let (_, putResponse) = try await URLSession.shared.upload(for: put, from: body)
        #expect((putResponse as? HTTPURLResponse)?.statusCode == 201)
        let (data, _) = try await URLSession.shared.data(from: url)
        #expect(sameBytes(data, body))
    }

    @Test("an upload from a file is streamed with Content-Length")
    func uploadFromFile() async throws {
        let body = Data(deterministicBytes(count: 3 * 1024 * 1024 + 17, seed: 13))
        let file = TestRun.makeDirectory("upload").appendingPathComponent("body.bin")
        try body.write(to: file)
        var request = URLRequest(url: nginx.url("/echo"))
        request.httpMethod = "POST"
        let (data, response) = try await URLSession.shared.upload(for: request, fromFile: file)
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Body-SHA256") == body.sha256Hex)
        let echo = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        #expect((echo?["headers"] as? [String: String])?["Content-Length"] == String(body.count))
    }

    @Test("sequential requests reuse one keep-alive connection")
    func keepAlive() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        var connections: Set<String> = []
        for _ in 0..<10 {
            let (_, response) = try await session.data(from: nginx.url("/files/100.bin"))
            connections.insert(nginxConnection(response) ?? "?")
        }
        #expect(connections.count == 1)
    }

    @Test("Connection: close retires the connection")
    func connectionClose() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        var connections: Set<String> = []
        for _ in 0..<3 {
            let (data, response) = try await session.data(from: nginx.url("/close/hello.txt"))
            #expect(Array(data) == NginxServer.fixtures["hello.txt"])
            connections.insert(nginxConnection(response) ?? "?")
        }
        #expect(connections.count == 3)
    }

    @Test("httpMaximumConnectionsPerHost bounds concurrent connections")
    func connectionLimit() async throws {
        let configuration = URLSessionConfiguration.uncached
        configuration.httpMaximumConnectionsPerHost = 2
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let connections = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    let (data, response) = try await session.data(from: nginx.url("/files/64k.bin"))
                    #expect(data.count == 64 * 1024)
                    return nginxConnection(response) ?? "?"
                }
            }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(connections.count <= 2)
        #expect(connections.count >= 1)
    }

    @Test("a server that closes after 10 requests and after 1 s idle: every request still succeeds")
    func serverClosesOften() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let base = "http://127.0.0.1:\(nginx.limitedPort)"
        var connections: Set<String> = []
        for round in 0..<3 {
            for _ in 0..<25 {
                let (data, response) = try await session.data(from: URL(string: "\(base)/files/100.bin")!)
                #expect(data.count == 100)
                connections.insert(nginxConnection(response) ?? "?")
            }
            // Longer than keepalive_timeout: nginx closes the idle connections meanwhile.
            if round < 2 { try await Task.sleep(for: .milliseconds(1300)) }
        }
        #expect(connections.count >= 8, "keepalive_requests 10 forces a new connection every 10 requests")
        let total = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<60 {
                group.addTask { try await session.data(from: URL(string: "\(base)/files/64k.bin")!).0.count }
            }
            return try await group.reduce(0, +)
        }
        #expect(total == 60 * 65536)
    }

    @Test("headers: request beats configuration beats defaults")
    func headerPrecedence() async throws {
        let configuration = URLSessionConfiguration.uncached
        configuration.httpAdditionalHeaders = ["X-Config": "config", "X-Both": "config", "User-Agent": "ConfiguredAgent/1"]
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: nginx.url("/echo"))
        request.setValue("request", forHTTPHeaderField: "x-both")
        request.setValue("evil.example", forHTTPHeaderField: "Host")
        let (data, _) = try await session.data(for: request)
        let echo = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        let headers = try #require(echo?["headers"] as? [String: String])
        #expect(headers["X-Config"] == "config")
        #expect(headers["x-both"] == "request")
        #expect(headers["User-Agent"] == "ConfiguredAgent/1")
        #expect(headers["Accept"] == "*/*")
        #expect(headers["Host"] == "127.0.0.1:\(nginx.port)", "Host always matches the URL")
        #expect(headers["Accept-Language"] != nil)
    }

    @Test("delegate callbacks come in Apple's order, on the delegate queue, one at a time")
    func delegateOrder() async throws {
        let recorder = RecordingDelegate()
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.dataTask(with: nginx.url("/chunked/1m.bin"))
        #expect(task.state == .suspended)
        task.resume()
        await recorder.waitForCompletion()
        #expect(recorder.collapsedEvents == ["response", "data", "metrics", "complete"])
        let record = recorder.record.withLock { $0 }
        #expect(record.data.count == 1024 * 1024)
        #expect(record.error == nil)
        #expect(record.offQueue == 0)
        #expect(record.concurrent == 0)
        #expect(task.state == .completed)
        #expect(task.countOfBytesReceived == 1024 * 1024)
        let transaction = try #require(record.metrics?.transactionMetrics.first)
        #expect(transaction.networkProtocolName == "http/1.1")
        #expect(transaction.remotePort == nginx.port)
        #expect(transaction.countOfResponseBodyBytesReceived == Int64(1024 * 1024), "chunk framing is not body")
        #expect(transaction.countOfResponseHeaderBytesReceived > 100)
        #expect(transaction.isReusedConnection == false)
    }

    @Test("disposition .cancel cancels the task")
    func dispositionCancel() async throws {
        let recorder = RecordingDelegate(disposition: .cancel)
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        session.dataTask(with: nginx.url("/files/8m.bin")).resume()
        await recorder.waitForCompletion()
        #expect(urlErrorCode(recorder.record.withLock { $0.error }) == .cancelled)
        #expect(!recorder.collapsedEvents.contains("data"))
    }

    @Test("completion handlers get data, response and no error")
    func completionHandler() async throws {
        let (data, response, error) = await loadWithCompletionHandler(URLSession.shared, URLRequest(url: nginx.url("/files/64k.bin")))
        #expect(error == nil)
        #expect(data?.count == 64 * 1024)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
    }

    @Test("suspend stops delivery without losing data; resume finishes the body")
    func suspendAndResume() async throws {
        let suspended = Mutex(false)
        let recorder = RecordingDelegate(onData: { task in
            let first = suspended.withLock { done -> Bool in
                defer { done = true }
                return !done
            }
            if first { task.suspend() }
        })
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.dataTask(with: nginx.url("/files/8m.bin"))
        task.resume()
        while !suspended.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
        try await Task.sleep(for: .milliseconds(300))
        let whileSuspended = recorder.record.withLock { $0.data.count }
        #expect(task.state == .suspended)
        try await Task.sleep(for: .milliseconds(200))
        #expect(recorder.record.withLock { $0.data.count } == whileSuspended, "no data is delivered while suspended")
        #expect(whileSuspended < 8 * 1024 * 1024)
        task.resume()
        await recorder.waitForCompletion()
        let record = recorder.record.withLock { $0 }
        #expect(record.error == nil)
        let intact = Array(record.data) == NginxServer.fixtures["8m.bin"]
        #expect(intact, "the body differs from the file")
    }

    @Test("finishTasksAndInvalidate makes didBecomeInvalidWithError the last call")
    func invalidation() async throws {
        final class InvalidationDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
            let events = Mutex<[String]>([])
            let invalidated = Mutex<CheckedContinuation<Void, Never>?>(nil)
            func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
                events.withLock { $0.append("complete") }
            }
            func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {
                events.withLock { $0.append("invalid") }
                invalidated.withLock { $0?.resume(); $0 = nil }
            }
        }
        let delegate = InvalidationDelegate()
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        for _ in 0..<3 { session.dataTask(with: nginx.url("/files/64k.bin")).resume() }
        await withCheckedContinuation { continuation in
            delegate.invalidated.withLock { $0 = continuation }
            session.finishTasksAndInvalidate()
        }
        #expect(delegate.events.withLock { $0 } == ["complete", "complete", "complete", "invalid"])
        // The session lets its delegate go once didBecomeInvalidWithError has returned, and this
        // task resumed from inside that call: it may look before the release.
        let released = await pollUntil(timeout: .seconds(10)) { session.delegate == nil }
        #expect(released, "the session still holds its delegate after invalidation")
    }
}
