import Courier
import CourierSync
import Foundation
import Logging
import Testing
import _CourierTestSupport

/// The session layer's own behaviour beyond redirects and decoding: the opt-in Retry-After
/// retry, and what its logs may show.
@Suite("Session pipeline: retries and logging")
struct SessionPipelineTests {
    /// A server that answers the first `failures` requests on a connection with `status` and a
    /// Retry-After, then 200 with the attempt number; it records the methods it saw.
    final class RetryServer: @unchecked Sendable {
        let methods = Records()
        var server: ScriptedServer!

        /// The methods of the requests received.
        var seen: [String] { methods.all.withLock { $0.map(\.1) } }

        init(status: Int, retryAfter: String, failures: Int) throws {
            server = try ScriptedServer { [methods] connection in
                var attempt = 0
                while let request = connection.readRequest(timeout: 5) {
                    attempt += 1
                    methods.all.withLock { $0.append((.info, request.method)) }
                    if attempt <= failures {
                        connection.respond(status: status, reason: "Busy", headers: [("Retry-After", retryAfter), ("Content-Length", "4")], body: Array("busy".utf8))
                    } else {
                        let body = Array("attempt \(attempt)".utf8)
                        connection.respond(status: 200, headers: [("Content-Length", "\(body.count)")], body: body)
                    }
                }
            }
        }
    }

    /// Collects metrics for a task.
    final class MetricsDelegate: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
        let metrics = Mutex<URLSessionTaskMetrics?>(nil)
        func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
            self.metrics.withLock { $0 = metrics }
        }
    }

    func session(retryDelay: TimeInterval) -> URLSession {
        let configuration = URLSessionConfiguration.uncached
        configuration.courierMaximumRetryAfterDelay = retryDelay
        return URLSession(configuration: configuration)
    }

    @Test("a 503 with a short Retry-After is sent again when the session opts in; each attempt is a transaction")
    func retried() async throws {
        let server = try RetryServer(status: 503, retryAfter: "0", failures: 1)
        let delegate = MetricsDelegate()
        let session = session(retryDelay: 1)
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(for: URLRequest(url: server.server.url("/busy")), delegate: delegate)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(String(decoding: data, as: UTF8.self) == "attempt 2")
        #expect(server.seen == ["GET", "GET"])
        let metrics = try #require(delegate.metrics.withLock { $0 })
        #expect(metrics.transactionMetrics.count == 2)
        #expect((metrics.transactionMetrics.first?.response as? HTTPURLResponse)?.statusCode == 503)
        #expect(metrics.redirectCount == 0)
    }

    @Test("429 is retried too; attempts are bounded and the last answer is delivered")
    func bounded() async throws {
        let server = try RetryServer(status: 429, retryAfter: "0", failures: 10)
        let session = session(retryDelay: 1)
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(from: server.server.url("/limited"))
        #expect((response as? HTTPURLResponse)?.statusCode == 429)
        #expect(String(decoding: data, as: UTF8.self) == "busy")
        #expect(server.seen.count == 3, "the first attempt and the two retries allowed by default")
    }

    @Test("no retry by default, for a POST, or for a Retry-After past the bound")
    func notRetried() async throws {
        for (delay, method, retryAfter) in [(0.0, "GET", "0"), (1.0, "POST", "0"), (1.0, "GET", "30")] {
            let server = try RetryServer(status: 503, retryAfter: retryAfter, failures: 1)
            let session = session(retryDelay: delay)
            var request = URLRequest(url: server.server.url("/once"))
            request.httpMethod = method
            if method == "POST" { request.httpBody = Data("x".utf8) }
            let (_, response) = try await session.data(for: request)
            #expect((response as? HTTPURLResponse)?.statusCode == 503, "\(method), bound \(delay), Retry-After \(retryAfter)")
            #expect(server.seen.count == 1)
            session.finishTasksAndInvalidate()
        }
    }

    @Test("cancelling a task that waits to retry completes it with cancelled")
    func cancelWhileWaiting() async throws {
        // A minute's Retry-After, under the bound: however slow the machine, the retry is still
        // pending when the cancel comes.
        let server = try RetryServer(status: 503, retryAfter: "60", failures: 1)
        let records = Records()
        let handler = CapturingHandler(records: records)
        let configuration = URLSessionConfiguration.uncached
        configuration.courierMaximumRetryAfterDelay = 120
        configuration.courierLogger = Logger(label: "courier-test") { _ in handler }
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        // The task logs when it starts to wait (TaskDriver.scheduleRetry): the cancel waits for
        // that, not for a guessed delay that a loaded machine may overrun.
        let waiting: @Sendable () -> Bool = { records.all.withLock { $0.contains { $0.1.hasPrefix("retry after Retry-After") } } }
        let error = await withCheckedContinuation { continuation in
            let task = session.dataTask(with: server.server.url("/wait")) { _, _, error in continuation.resume(returning: error) }
            task.resume()
            Task {
                _ = await pollUntil(timeout: .seconds(30), waiting)
                task.cancel()
            }
        }
        #expect(waiting(), "the task was waiting to retry when it was cancelled")
        #expect(urlErrorCode(error) == .cancelled)
    }

    /// Where the captured records go.
    final class Records: Sendable {
        let all = Mutex<[(Logger.Level, String)]>([])
    }

    /// Keeps every log record.
    struct CapturingHandler: LogHandler {
        let records: Records
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String, file: String, function: String, line: UInt) {
            let all = self.metadata.merging(metadata ?? [:]) { $1 }
            records.all.withLock { $0.append((level, "\(message) \(all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))")) }
        }
    }

    @Test("logs trace exchanges and redirects, never show credentials or cookies, and say nothing at info for a success")
    func logging() async throws {
        let nginx = try NginxServer.shared()
        let records = Records()
        let handler = CapturingHandler(records: records)
        let configuration = URLSessionConfiguration.uncached
        configuration.courierLogger = Logger(label: "courier-test") { _ in handler }
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        // A redirect on the same origin keeps the credentials, so both exchanges carry them.
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.respond(status: 302, reason: "Found", headers: [("Location", nginx.url("/echo").absoluteString), ("Content-Length", "0")])
        }
        var request = URLRequest(url: URL(string: "http://user:secret-password-3@127.0.0.1:\(server.port)/start")!)
        request.setValue("Bearer secret-token-1", forHTTPHeaderField: "Authorization")
        request.setValue("session=secret-cookie-2", forHTTPHeaderField: "Cookie")
        request.setValue("visible-value", forHTTPHeaderField: "X-Plain")
        let (_, response) = try await session.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let all = records.all.withLock { $0 }
        let text = all.map(\.1).joined(separator: "\n")
        #expect(text.contains("redirect"))
        #expect(text.contains("exchange"))
        #expect(text.contains("task finished"), "a task's end is logged at trace")
        #expect(text.contains("visible-value"))
        #expect(text.contains("<redacted>"))
        #expect(!text.contains("secret-token-1"))
        #expect(!text.contains("secret-cookie-2"))
        #expect(!text.contains("secret-password-3"), "a URL's password is not logged")
        #expect(text.contains("user:redacted@127.0.0.1"), "\(text)")
        #expect(all.allSatisfy { $0.0 < .info }, "a successful request logs nothing at info or above")
    }

    /// Refuses every redirect, remembering the Location it was offered.
    final class RefusingDelegate: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
        let offered = Mutex<[String]>([])
        func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void) {
            offered.withLock { $0.append(request.url?.absoluteString ?? "") }
            completionHandler(nil)
        }
    }

    @Test("a redirect to an app's own scheme is offered to the delegate, which refuses it and reads the Location (OAuth)")
    func customSchemeOffered() async throws {
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.respond(status: 302, reason: "Found", headers: [("Location", "myapp://callback?code=42"), ("Content-Length", "0")])
        }
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let delegate = RefusingDelegate()
        let (_, response) = try await session.data(for: URLRequest(url: server.url("/authorize")), delegate: delegate)
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 302)
        #expect(http.value(forHTTPHeaderField: "Location") == "myapp://callback?code=42")
        #expect(delegate.offered.withLock { $0 } == ["myapp://callback?code=42"])
    }

    /// Answers the redirect only after a pause, so a cancel lands between two hops.
    final class SlowDelegate: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
        func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void) {
            task.cancel()
            completionHandler(request)
        }
    }

    @Test("a cancel while the delegate decides a redirect completes the task with cancelled; the next hop is not sent")
    func cancelBetweenHops() async throws {
        let hits = Records()
        let server = try ScriptedServer { connection in
            while let request = connection.readRequest(timeout: 2) {
                hits.all.withLock { $0.append((.info, request.target)) }
                connection.respond(status: 302, reason: "Found", headers: [("Location", "/next"), ("Content-Length", "0")])
            }
        }
        let session = URLSession(configuration: .uncached, delegate: SlowDelegate(), delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let error = await withCheckedContinuation { continuation in
            session.dataTask(with: server.url("/first")) { _, _, error in continuation.resume(returning: error) }.resume()
        }
        #expect(urlErrorCode(error) == .cancelled)
        #expect(hits.all.withLock { $0.map(\.1) } == ["/first"])
    }

    /// Gives a new stream with the same bytes when asked, counting the requests.
    final class StreamDelegate: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
        let body: Data
        let asked = Mutex(0)
        let givesStream: Bool
        init(body: Data, givesStream: Bool) {
            self.body = body
            self.givesStream = givesStream
        }
        func urlSession(_ session: URLSession, task: URLSessionTask, needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void) {
            asked.withLock { $0 += 1 }
            completionHandler(givesStream ? InputStream(data: body) : nil)
        }
    }

    @Test("a 307 or 308 of a streamed body asks needNewBodyStream and sends the new stream", arguments: [307, 308])
    func newBodyStream(_ status: Int) async throws {
        let nginx = try NginxServer.shared()
        let body = Data(deterministicBytes(count: 100_000, seed: 77))
        var request = URLRequest(url: nginx.url("/redirect/\(status)"))
        request.httpMethod = "POST"
        request.httpBodyStream = InputStream(data: body)
        let delegate = StreamDelegate(body: body, givesStream: true)
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(for: request, delegate: delegate)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let echo = try EchoReply(data)
        #expect(echo.method == "POST")
        #expect(echo.bodyLength == body.count)
        #expect(echo.bodySHA256 == body.sha256Hex)
        #expect(delegate.asked.withLock { $0 } == 1)
    }

    @Test("without a new stream the redirect fails with requestBodyStreamExhausted; a 303 needs none")
    func noNewBodyStream() async throws {
        let nginx = try NginxServer.shared()
        let body = Data("streamed".utf8)
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        for delegate in [StreamDelegate(body: body, givesStream: false), nil] {
            var request = URLRequest(url: nginx.url("/redirect/307"))
            request.httpMethod = "PUT"
            request.httpBodyStream = InputStream(data: body)
            do {
                _ = try await session.data(for: request, delegate: delegate)
                Issue.record("expected requestBodyStreamExhausted")
            } catch let error as URLError {
                #expect(error.code == .requestBodyStreamExhausted, "\(error.localizedDescription)")
            }
        }
        var seeOther = URLRequest(url: nginx.url("/redirect/303"))
        seeOther.httpMethod = "POST"
        seeOther.httpBodyStream = InputStream(data: body)
        let delegate = StreamDelegate(body: body, givesStream: true)
        let (data, _) = try await session.data(for: seeOther, delegate: delegate)
        #expect(try EchoReply(data).method == "GET")
        #expect(delegate.asked.withLock { $0 } == 0, "a body that is dropped is not asked for")
    }
}
