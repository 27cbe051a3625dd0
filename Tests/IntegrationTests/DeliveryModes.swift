import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// The ways a caller receives a body, each a different sink in the session layer; behaviour
/// that must not depend on the sink is checked through several of them.
enum Delivery: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// `dataTask(with:completionHandler:)`.
    case completionHandler
    /// `dataTask(with:)` and a session delegate that collects `didReceive data`.
    case delegate
    /// `data(for:delegate:)`.
    case asyncData
    /// `download(for:delegate:)`; the file's contents are the body.
    case download

    var testDescription: String { rawValue }
}

/// What one load produced.
struct Loaded: @unchecked Sendable {
    var body: Data?
    var response: HTTPURLResponse?
    var error: (any Error)?
    /// The task, in the modes that hand it out (completion handler and delegate).
    var task: URLSessionTask?
    /// What the redirect recorder saw (every mode has one).
    var record: RedirectRecorder.Record
}

/// Loads `request` through `delivery` on a fresh session built from `configuration`.
/// `recorder` answers redirects (it follows them by default) and records the delegate
/// callbacks: it is the session's delegate in the completion-handler and delegate modes, and the
/// task's delegate in the async modes.
func load(
    _ request: URLRequest, via delivery: Delivery, configuration: URLSessionConfiguration = .ephemeral,
    recorder: RedirectRecorder = RedirectRecorder()
) async -> Loaded {
    switch delivery {
    case .completionHandler:
        let session = URLSession(configuration: configuration, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        var started: URLSessionDataTask?
        let (data, response, error) = await withCheckedContinuation { continuation in
            let task = session.dataTask(with: request) { data, response, error in
                continuation.resume(returning: (data, response, error))
            }
            started = task
            task.resume()
        }
        return Loaded(body: data, response: response as? HTTPURLResponse, error: error, task: started, record: recorder.snapshot)
    case .delegate:
        let session = URLSession(configuration: configuration, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.dataTask(with: request)
        task.resume()
        await recorder.waitForCompletion()
        let record = recorder.snapshot
        return Loaded(body: record.error == nil ? record.data : nil, response: task.response as? HTTPURLResponse, error: record.error, task: task, record: record)
    case .asyncData:
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        do {
            let (data, response) = try await session.data(for: request, delegate: recorder)
            return Loaded(body: data, response: response as? HTTPURLResponse, record: recorder.snapshot)
        } catch {
            return Loaded(error: error, record: recorder.snapshot)
        }
    case .download:
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        do {
            // Other tests watch the temporary directory's download files (DownloadTests).
            return try await DownloadFilesLock.holding {
                let (location, response) = try await session.download(for: request, delegate: recorder)
                defer { try? FileManager.default.removeItem(at: location) }
                return Loaded(body: FileManager.default.contents(atPath: location.path), response: response as? HTTPURLResponse, record: recorder.snapshot)
            }
        } catch {
            return Loaded(error: error, record: recorder.snapshot)
        }
    }
}

/// Records a task's redirects and delegate callbacks in order, and answers
/// `willPerformHTTPRedirection` with `decide` (by default the proposed request: follow it).
final class RedirectRecorder: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    /// One `willPerformHTTPRedirection` call.
    struct Hop: Sendable {
        /// The 3xx response's status, URL and Location field.
        var status: Int
        var responseURL: URL?
        var location: String?
        /// The request the session proposed.
        var proposedURL: URL?
        var proposedMethod: String?
    }

    struct Record: @unchecked Sendable {
        /// "redirect", "response", "data", "metrics", "complete", in order.
        var events: [String] = []
        var hops: [Hop] = []
        var data = Data()
        var metrics: URLSessionTaskMetrics?
        var error: (any Error)?
        var completed = false
        /// Callbacks that ran off the session's delegate queue.
        var offQueue = 0

        /// Events with consecutive "data" collapsed into one.
        var collapsedEvents: [String] {
            events.reduce(into: [String]()) { result, event in
                if event == "data" && result.last == "data" { return }
                result.append(event)
            }
        }
    }

    private let record = Mutex(Record())
    private let waiter = Mutex<CheckedContinuation<Void, Never>?>(nil)
    let decide: @Sendable (HTTPURLResponse, URLRequest) -> URLRequest?
    /// The answer to `willCacheResponse` (by default the proposed response).
    let decideCache: @Sendable (CachedURLResponse) -> CachedURLResponse?

    init(
        decide: @escaping @Sendable (HTTPURLResponse, URLRequest) -> URLRequest? = { _, proposed in proposed },
        decideCache: @escaping @Sendable (CachedURLResponse) -> CachedURLResponse? = { $0 }
    ) {
        self.decide = decide
        self.decideCache = decideCache
    }

    /// A copy of what was recorded so far.
    var snapshot: Record { record.withLock { $0 } }

    private func note(_ session: URLSession, _ event: String, _ update: (inout Record) -> Void = { _ in }) {
        let onQueue = OperationQueue.current === session.delegateQueue
        record.withLock { record in
            record.events.append(event)
            if !onQueue { record.offQueue += 1 }
            update(&record)
        }
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        note(session, "redirect") { record in
            record.hops.append(Hop(
                status: response.statusCode, responseURL: response.url, location: response.value(forHTTPHeaderField: "Location"),
                proposedURL: request.url, proposedMethod: request.httpMethod
            ))
        }
        completionHandler(decide(response, request))
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        note(session, "response")
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        note(session, "data") { $0.data.append(data) }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, willCacheResponse proposedResponse: CachedURLResponse, completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void) {
        note(session, "willCache")
        completionHandler(decideCache(proposedResponse))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
        note(session, "metrics") { $0.metrics = metrics }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        note(session, "complete") { record in
            record.error = error
            record.completed = true
        }
        waiter.withLock { $0?.resume(); $0 = nil }
    }

    /// Waits for `didCompleteWithError`.
    func waitForCompletion() async {
        await withCheckedContinuation { continuation in
            waiter.withLock { $0 = continuation }
            if record.withLock({ $0.completed }) { waiter.withLock { $0?.resume(); $0 = nil } }
        }
    }
}

/// What nginx's `/echo` (Resources/echo.js) answered: the request as nginx received it.
struct EchoReply: Decodable {
    var method: String
    var uri: String
    var args: String
    var headers: [String: String]
    var bodyLength: Int
    var bodySHA256: String

    init(_ data: Data?) throws {
        self = try JSONDecoder().decode(EchoReply.self, from: data ?? Data())
    }

    /// A request header as nginx received it, ignoring the name's case.
    func header(_ name: String) -> String? {
        headers.first { $0.key.lowercased() == name.lowercased() }?.value
    }
}

/// What httpbin answered (`/anything`, `/headers`, `/gzip`, `/deflate`, `/brotli`, `/get`).
struct HttpbinReply: Decodable {
    var method: String?
    var url: String?
    var data: String?
    var headers: [String: String]
    var gzipped: Bool?
    var deflated: Bool?
    var brotli: Bool?

    init(_ data: Data?) throws {
        self = try JSONDecoder().decode(HttpbinReply.self, from: data ?? Data())
    }

    /// A request header as httpbin received it, ignoring the name's case.
    func header(_ name: String) -> String? {
        headers.first { $0.key.lowercased() == name.lowercased() }?.value
    }
}

/// A scripted HTTP/1.1 server that answers every request on a connection with `handler` and
/// records the requests in the order they arrived.
final class AnsweringServer: @unchecked Sendable {
    /// One answer: status, header fields (Content-Length is added), body.
    struct Answer: Sendable {
        var status: Int = 200
        var reason: String = "OK"
        var headers: [(String, String)] = []
        var body: [UInt8] = []

        static func redirect(_ status: Int, to location: String) -> Answer {
            Answer(status: status, reason: "Redirect", headers: [("Location", location)], body: Array("redirect \(status)\n".utf8))
        }

        static func ok(_ body: String) -> Answer {
            Answer(headers: [("Content-Type", "text/plain")], body: Array(body.utf8))
        }

        /// Any status with a plain-text body and no other fields (a 3xx without Location).
        static func status(_ status: Int, body: String) -> Answer {
            Answer(status: status, reason: "Status", headers: [("Content-Type", "text/plain")], body: Array(body.utf8))
        }
    }

    let server: ScriptedServer
    private let state: State

    /// What the connection threads share: the requests so far and the server's port.
    private final class State: Sendable {
        let received = Mutex<[ScriptedRequest]>([])
        let port = Mutex(0)
    }

    /// `handler` gets the request and this server's port.
    init(_ handler: @escaping @Sendable (ScriptedRequest, Int) -> Answer) throws {
        let state = State()
        self.state = state
        server = try ScriptedServer { connection in
            while let request = connection.readRequest(timeout: 5) {
                state.received.withLock { $0.append(request) }
                let answer = handler(request, state.port.withLock { $0 })
                connection.respond(status: answer.status, reason: answer.reason, headers: answer.headers, body: answer.body)
            }
        }
        state.port.withLock { $0 = server.port }
    }

    var port: Int { server.port }

    func url(_ path: String) -> URL { server.url(path) }

    /// The requests received so far.
    var requests: [ScriptedRequest] { state.received.withLock { $0 } }
}

