import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// A delegate that gives a streamed upload its body, each time it is asked, and collects the
/// response.
final class StreamGivingDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let makeStream: @Sendable () -> InputStream?
    private struct Record {
        var asked = 0
        var body = Data()
        var response: HTTPURLResponse?
        var sent: [Int64] = []
        var continuation: CheckedContinuation<(any Error)?, Never>?
    }
    private let record = Mutex(Record())

    init(_ makeStream: @escaping @Sendable () -> InputStream?) {
        self.makeStream = makeStream
    }

    var asked: Int { record.withLock { $0.asked } }
    var body: Data { record.withLock { $0.body } }
    var response: HTTPURLResponse? { record.withLock { $0.response } }
    var totalsSent: [Int64] { record.withLock { $0.sent } }

    func run(_ task: URLSessionTask) async -> (any Error)? {
        await withCheckedContinuation { continuation in
            record.withLock { $0.continuation = continuation }
            task.resume()
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void) {
        record.withLock { $0.asked += 1 }
        completionHandler(makeStream())
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        record.withLock { $0.sent.append(totalBytesSent) }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        record.withLock { $0.response = response as? HTTPURLResponse }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        record.withLock { $0.body.append(data) }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let continuation = record.withLock { record in
            defer { record.continuation = nil }
            return record.continuation
        }
        continuation?.resume(returning: error)
    }
}

/// `uploadTask(withStreamedRequest:)`: the body comes from the delegate's
/// `needNewBodyStream`, chunked unless the request declares its length, and is asked for again
/// when a redirect must resend it.
@Suite("Streamed uploads")
struct StreamedUploadTests {
    let payload = Data(deterministicBytes(count: 300 * 1024, seed: 41))

    /// A server that reads one request and answers with its framing and body length.
    func framingServer(_ seen: Arrivals) throws -> ScriptedServer {
        try ScriptedServer { connection in
            guard let request = connection.readRequest(timeout: 10) else { return }
            let framing = request.header("Transfer-Encoding") ?? "length \(request.header("Content-Length") ?? "none")"
            seen.list.withLock { $0.append((Date(), framing)) }
            connection.respond(headers: [("Content-Length", "\(request.body.count)")], body: request.body)
        }
    }

    @Test("the delegate's stream is the body, sent chunked; the request's own body is ignored")
    func chunkedFromDelegate() async throws {
        let seen = Arrivals()
        let server = try framingServer(seen)
        defer { server.stop() }
        let payload = self.payload
        let delegate = StreamGivingDelegate { InputStream(data: payload) }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: server.url("/upload"))
        request.httpMethod = "PUT"
        request.httpBody = Data("ignored".utf8)
        let task = session.uploadTask(withStreamedRequest: request)
        let error = await delegate.run(task)
        #expect(error == nil, "\(String(describing: error))")
        #expect(delegate.asked == 1)
        #expect(sameBytes(delegate.body, payload))
        #expect(seen.list.withLock { $0.map(\.1) } == ["chunked"])
        #expect(delegate.totalsSent.last == Int64(payload.count))
        #expect(task.countOfBytesExpectedToSend == -1)
    }

    @Test("a caller's Content-Length does not change the framing: the stream goes chunked, whole")
    func declaredLength() async throws {
        let seen = Arrivals()
        let server = try framingServer(seen)
        defer { server.stop() }
        let payload = self.payload
        let delegate = StreamGivingDelegate { InputStream(data: payload) }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: server.url("/upload"))
        request.httpMethod = "POST"
        request.setValue("\(payload.count)", forHTTPHeaderField: "Content-Length")
        let task = session.uploadTask(withStreamedRequest: request)
        let error = await delegate.run(task)
        #expect(error == nil, "\(String(describing: error))")
        #expect(sameBytes(delegate.body, payload))
        #expect(seen.list.withLock { $0.map(\.1) } == ["chunked"])
        #expect(task.countOfBytesExpectedToSend == -1)
    }

    @Test("no stream from the delegate fails the task before any connection")
    func noStream() async throws {
        let seen = Arrivals()
        let server = try framingServer(seen)
        defer { server.stop() }
        let delegate = StreamGivingDelegate { nil }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: server.url("/upload"))
        request.httpMethod = "POST"
        let error = await delegate.run(session.uploadTask(withStreamedRequest: request))
        #expect((error as? URLError)?.code == .requestBodyStreamExhausted, "\(String(describing: error))")
        #expect(server.connectionCount == 0)
    }

    @Test("a 307 asks the delegate for the stream again, and the new hop gets the whole body")
    func redirectAsksAgain() async throws {
        let nginx = try NginxServer.shared()
        let payload = self.payload
        let delegate = StreamGivingDelegate { InputStream(data: payload) }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: nginx.url("/redirect/307"))
        request.httpMethod = "POST"
        let error = await delegate.run(session.uploadTask(withStreamedRequest: request))
        #expect(error == nil, "\(String(describing: error))")
        #expect(delegate.asked == 2)
        #expect(delegate.response?.statusCode == 200)
        #expect(delegate.response?.value(forHTTPHeaderField: "X-Method") == "POST")
        #expect(delegate.response?.value(forHTTPHeaderField: "X-Body-Length") == "\(payload.count)")
        #expect(delegate.response?.value(forHTTPHeaderField: "X-Body-SHA256") == SHA256.hex(payload))
    }

    @Test("a delegate with only the async needNewBodyStreamForTask is asked through it, at the start and for a 307")
    func asyncForm() async throws {
        let nginx = try NginxServer.shared()
        let payload = self.payload
        let delegate = AsyncStreamDelegate { InputStream(data: payload) }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: nginx.url("/redirect/307"))
        request.httpMethod = "POST"
        let task = session.uploadTask(withStreamedRequest: request)
        let error = await delegate.run(task)
        #expect(error == nil, "\(String(describing: error))")
        #expect(delegate.asked == 2)
        let response = try #require(task.response as? HTTPURLResponse)
        #expect(response.statusCode == 200)
        #expect(response.value(forHTTPHeaderField: "X-Body-SHA256") == SHA256.hex(payload))
    }

    @Test("a task delegate without either form passes the question to the session delegate's async form")
    func asyncFormThroughSessionDelegate() async throws {
        let nginx = try NginxServer.shared()
        let payload = self.payload
        let sessionDelegate = AsyncStreamDelegate { InputStream(data: payload) }
        let session = URLSession(configuration: .uncached, delegate: sessionDelegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: nginx.url("/echo"))
        request.httpMethod = "PUT"
        let task = session.uploadTask(withStreamedRequest: request)
        let taskDelegate = BodylessTaskDelegate()
        task.delegate = taskDelegate
        let error = await sessionDelegate.run(task)
        #expect(error == nil, "\(String(describing: error))")
        #expect(sessionDelegate.asked == 1)
        #expect(taskDelegate.sent > 0, "the task's own delegate still hears the progress")
        let response = try #require(task.response as? HTTPURLResponse)
        #expect(response.value(forHTTPHeaderField: "X-Body-Length") == "\(payload.count)")
    }
}

/// Gives the body only through the async form of `needNewBodyStream`.
final class AsyncStreamDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let makeStream: @Sendable () -> InputStream?
    private let state = Mutex<(asked: Int, continuation: CheckedContinuation<(any Error)?, Never>?)>((0, nil))
    var asked: Int { state.withLock { $0.asked } }

    init(_ makeStream: @escaping @Sendable () -> InputStream?) {
        self.makeStream = makeStream
    }

    func run(_ task: URLSessionTask) async -> (any Error)? {
        await withCheckedContinuation { continuation in
            state.withLock { $0.continuation = continuation }
            task.resume()
        }
    }

    func urlSession(_ session: URLSession, needNewBodyStreamForTask task: URLSessionTask) async -> InputStream? {
        state.withLock { $0.asked += 1 }
        return makeStream()
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let continuation = state.withLock { state in
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume(returning: error)
    }
}

/// A task's own delegate that only watches the upload's progress.
final class BodylessTaskDelegate: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    private let total = Mutex<Int64>(0)
    var sent: Int64 { total.withLock { $0 } }

    func urlSession(_ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        total.withLock { $0 = totalBytesSent }
    }
}
