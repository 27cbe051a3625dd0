import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// A task delegate that answers `willBeginDelayedRequest` as told and records when it was
/// asked and with what.
final class DelayedBeginDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    typealias Answer = @Sendable (URLRequest) -> (URLSession.DelayedRequestDisposition, URLRequest?)
    private let answer: Answer
    private let asked = Mutex<[(date: Date, url: URL?)]>([])

    init(_ answer: @escaping Answer) {
        self.answer = answer
    }

    var askings: [(date: Date, url: URL?)] { asked.withLock { $0 } }

    func urlSession(_ session: URLSession, task: URLSessionTask, willBeginDelayedRequest request: URLRequest, completionHandler: @escaping @Sendable (URLSession.DelayedRequestDisposition, URLRequest?) -> Void) {
        asked.withLock { $0.append((Date(), request.url)) }
        let (disposition, replacement) = answer(request)
        completionHandler(disposition, replacement)
    }
}

/// When each request reached a scripted server, and its target.
final class Arrivals: Sendable {
    let list = Mutex<[(Date, String)]>([])
}

/// `earliestBeginDate` and `willBeginDelayedRequest`: nothing reaches the server before the
/// date, and the delegate continues, replaces or cancels the load.
@Suite("Delayed begin")
struct DelayedBeginTests {
    /// A server that records when each request arrived and answers with its target.
    func server(_ arrivals: Arrivals) throws -> ScriptedServer {
        try ScriptedServer { connection in
            while let request = connection.readRequest(timeout: 10) {
                arrivals.list.withLock { $0.append((Date(), request.target)) }
                connection.respond(headers: [("Content-Length", "\(request.target.utf8.count)")], body: Array(request.target.utf8))
            }
        }
    }

    /// Loads `request` in a data task whose `earliestBeginDate` is `delay` seconds on (none when
    /// nil). The date is taken just before `resume()`, so a slow test thread does not let it
    /// pass before the task starts.
    func run(_ session: URLSession, _ request: URLRequest, beginningIn delay: TimeInterval?) async -> (Data?, (any Error)?, URLSessionDataTask?) {
        let holder = Mutex<URLSessionDataTask?>(nil)
        let (data, error) = await withCheckedContinuation { (continuation: CheckedContinuation<(Data?, (any Error)?), Never>) in
            let task = session.dataTask(with: request) { data, _, error in continuation.resume(returning: (data, error)) }
            task.earliestBeginDate = delay.map { Date().addingTimeInterval($0) }
            holder.withLock { $0 = task }
            task.resume()
        }
        return (data, error, holder.withLock { $0 })
    }

    @Test("nothing reaches the server before the date; the delegate is asked once, after it, and continues")
    func continues() async throws {
        let arrivals = Arrivals()
        let origin = try server(arrivals)
        defer { origin.stop() }
        let delegate = DelayedBeginDelegate { _ in (.continueLoading, nil) }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (data, error, task) = await run(session, URLRequest(url: origin.url("/first")), beginningIn: 1)
        let earliest = try #require(task?.earliestBeginDate)
        #expect(error == nil, "\(String(describing: error))")
        #expect(data.map { String(decoding: $0, as: UTF8.self) } == "/first")
        let asked = delegate.askings
        #expect(asked.count == 1)
        #expect(asked.first.map { $0.date >= earliest } == true)
        #expect(asked.first?.url == origin.url("/first"))
        let arrived = arrivals.list.withLock { $0 }
        #expect(arrived.count == 1)
        #expect(arrived.first.map { $0.0 >= earliest } == true)
    }

    @Test("useNewRequest loads the replacement, which becomes the current request")
    func replaces() async throws {
        let arrivals = Arrivals()
        let origin = try server(arrivals)
        defer { origin.stop() }
        let replacementURL = origin.url("/replacement")
        let delegate = DelayedBeginDelegate { _ in (.useNewRequest, URLRequest(url: replacementURL)) }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (data, error, task) = await run(session, URLRequest(url: origin.url("/original")), beginningIn: 1)
        #expect(error == nil, "\(String(describing: error))")
        #expect(data.map { String(decoding: $0, as: UTF8.self) } == "/replacement")
        #expect(arrivals.list.withLock { $0.map(\.1) } == ["/replacement"])
        #expect(task?.currentRequest?.url == replacementURL)
        #expect(task?.originalRequest?.url == origin.url("/original"))
    }

    @Test("cancel completes the task as cancelled, and no connection is made")
    func cancels() async throws {
        let arrivals = Arrivals()
        let origin = try server(arrivals)
        defer { origin.stop() }
        let delegate = DelayedBeginDelegate { _ in (.cancel, nil) }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (data, error, _) = await run(session, URLRequest(url: origin.url("/never")), beginningIn: 1)
        #expect((error as? URLError)?.code == .cancelled, "\(String(describing: error))")
        #expect(data == nil)
        #expect(delegate.askings.count == 1)
        #expect(origin.connectionCount == 0)
    }

    @Test("a task cancelled while it waits completes at once as cancelled; the delegate is never asked")
    func cancelledWhileWaiting() async throws {
        let arrivals = Arrivals()
        let origin = try server(arrivals)
        defer { origin.stop() }
        let delegate = DelayedBeginDelegate { _ in (.continueLoading, nil) }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let error = await withCheckedContinuation { (continuation: CheckedContinuation<(any Error)?, Never>) in
            let task = session.dataTask(with: origin.url("/late")) { _, _, error in continuation.resume(returning: error) }
            // A minute on: however slow the machine, the cancel comes while the task waits.
            task.earliestBeginDate = Date().addingTimeInterval(60)
            task.resume()
            task.cancel()
        }
        #expect((error as? URLError)?.code == .cancelled, "\(String(describing: error))")
        try await Task.sleep(for: .milliseconds(500))
        #expect(delegate.askings.isEmpty)
        #expect(origin.connectionCount == 0)
    }

    @Test("a date already past, or none: the task begins at once and the delegate is not asked", arguments: [true, false])
    func pastDate(_ hasDate: Bool) async throws {
        let arrivals = Arrivals()
        let origin = try server(arrivals)
        defer { origin.stop() }
        let delegate = DelayedBeginDelegate { _ in (.cancel, nil) }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (data, error, _) = await run(session, URLRequest(url: origin.url("/now")), beginningIn: hasDate ? -5 : nil)
        #expect(error == nil, "\(String(describing: error))")
        #expect(data.map { String(decoding: $0, as: UTF8.self) } == "/now")
        #expect(delegate.askings.isEmpty)
    }
}
