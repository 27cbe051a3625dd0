import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A background session's delegate: every callback as an ``Event``, in order, with the task
/// objects the callbacks were given. didFinishDownloadingTo reads the file's bytes inside the
/// callback, after moving the file out of the state directory when `keepFilesIn` is set.
final class BackgroundRecorder: NSObject, URLSessionDownloadDelegate, URLSessionDataDelegate, @unchecked Sendable {
    enum Event: Sendable {
        case write(task: Int, bytes: Int64, total: Int64, expected: Int64)
        case resume(task: Int, offset: Int64, expected: Int64)
        /// `kept`: where the file was moved to, if it was; `contents`: its bytes then.
        case finish(task: Int, location: URL, kept: URL?, contents: Data?)
        case sent(task: Int, bytes: Int64, total: Int64, expected: Int64)
        case response(task: Int)
        case data(task: Int, Data)
        case complete(task: Int, error: (any Error)?)
        case redirect(task: Int)
        case challenge
        case metrics(task: Int)
        /// urlSessionDidFinishEvents(forBackgroundURLSession:).
        case finishEvents
        /// didBecomeInvalidWithError.
        case invalid

        var name: String {
            switch self {
            case .write: "write"
            case .resume: "resume"
            case .finish: "finish"
            case .sent: "sent"
            case .response: "response"
            case .data: "data"
            case .complete: "complete"
            case .redirect: "redirect"
            case .challenge: "challenge"
            case .metrics: "metrics"
            case .finishEvents: "finishEvents"
            case .invalid: "invalid"
            }
        }

        var task: Int? {
            switch self {
            case .write(let task, _, _, _), .resume(let task, _, _), .finish(let task, _, _, _), .sent(let task, _, _, _),
                 .response(let task), .data(let task, _), .complete(let task, _), .redirect(let task), .metrics(let task):
                task
            case .challenge, .finishEvents, .invalid:
                nil
            }
        }
    }

    private struct State {
        var events: [Event] = []
        var objects: [Int: [URLSessionTask]] = [:]
        var offQueue = 0
    }

    private let state = Mutex(State())
    private let keepFilesIn: URL?
    private let refusesRedirects: Bool

    /// `keepFilesIn`: a folder the downloaded files are moved to, during the callback.
    /// `refusesRedirects`: willPerformHTTPRedirection answers nil (if it is asked at all).
    init(keepFilesIn: URL? = nil, refusesRedirects: Bool = false) {
        self.keepFilesIn = keepFilesIn
        self.refusesRedirects = refusesRedirects
    }

    private func note(_ session: URLSession, _ task: URLSessionTask?, _ event: Event) {
        let onQueue = OperationQueue.current === session.delegateQueue
        state.withLock { state in
            state.events.append(event)
            if !onQueue { state.offQueue += 1 }
            if let task, !(state.objects[task.taskIdentifier] ?? []).contains(where: { $0 === task }) {
                state.objects[task.taskIdentifier, default: []].append(task)
            }
        }
    }

    // MARK: Callbacks

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        note(session, downloadTask, .write(task: downloadTask.taskIdentifier, bytes: bytesWritten, total: totalBytesWritten, expected: totalBytesExpectedToWrite))
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didResumeAtOffset fileOffset: Int64, expectedTotalBytes: Int64) {
        note(session, downloadTask, .resume(task: downloadTask.taskIdentifier, offset: fileOffset, expected: expectedTotalBytes))
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        var kept: URL?
        if let keepFilesIn {
            let destination = keepFilesIn.appendingPathComponent("task-\(downloadTask.taskIdentifier)-\(UUID().uuidString)")
            if (try? FileManager.default.moveItem(at: location, to: destination)) != nil { kept = destination }
        }
        let contents = FileManager.default.contents(atPath: (kept ?? location).path)
        note(session, downloadTask, .finish(task: downloadTask.taskIdentifier, location: location, kept: kept, contents: contents))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        note(session, task, .sent(task: task.taskIdentifier, bytes: bytesSent, total: totalBytesSent, expected: totalBytesExpectedToSend))
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        note(session, dataTask, .response(task: dataTask.taskIdentifier))
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        note(session, dataTask, .data(task: dataTask.taskIdentifier, data))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        note(session, task, .complete(task: task.taskIdentifier, error: error))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void) {
        note(session, task, .redirect(task: task.taskIdentifier))
        completionHandler(refusesRedirects ? nil : request)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        note(session, task, .challenge)
        completionHandler(.performDefaultHandling, nil)
    }

    func urlSession(_ session: URLSession, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        note(session, nil, .challenge)
        completionHandler(.performDefaultHandling, nil)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
        note(session, task, .metrics(task: task.taskIdentifier))
    }

    func urlSessionDidFinishEvents(forBackgroundURLSession session: URLSession) {
        note(session, nil, .finishEvents)
    }

    func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {
        note(session, nil, .invalid)
    }

    // MARK: What was recorded

    var events: [Event] { state.withLock { $0.events } }

    /// Callbacks that ran off the session's delegate queue.
    var offQueue: Int { state.withLock { $0.offQueue } }

    /// The events' names (of one task's events, or of all), a run of writes or of sends as one.
    func names(of task: Int? = nil) -> [String] {
        let chosen = events.filter { task == nil || $0.task == task }
        return chosen.map(\.name).reduce(into: [String]()) { names, name in
            if (name == "write" || name == "sent") && names.last == name { return }
            names.append(name)
        }
    }

    func count(_ name: String) -> Int {
        events.filter { $0.name == name }.count
    }

    /// The errors of the task's didCompleteWithError calls (one, normally).
    func completions(of task: Int) -> [(any Error)?] {
        events.compactMap { event -> (any Error)?? in
            guard case .complete(task, let error) = event else { return nil }
            return .some(error)
        }
    }

    /// The error of the task's first completion (nil also when there was none: check
    /// ``completions(of:)`` for that).
    func error(of task: Int) -> (any Error)? {
        completions(of: task).first ?? nil
    }

    func finishes(of task: Int) -> [(location: URL, kept: URL?, contents: Data?)] {
        events.compactMap { event -> (location: URL, kept: URL?, contents: Data?)? in
            guard case .finish(task, let location, let kept, let contents) = event else { return nil }
            return (location, kept, contents)
        }
    }

    func writes(of task: Int) -> [(bytes: Int64, total: Int64, expected: Int64)] {
        events.compactMap { event -> (bytes: Int64, total: Int64, expected: Int64)? in
            guard case .write(task, let bytes, let total, let expected) = event else { return nil }
            return (bytes, total, expected)
        }
    }

    func resumes(of task: Int) -> [(offset: Int64, expected: Int64)] {
        events.compactMap { event -> (offset: Int64, expected: Int64)? in
            guard case .resume(task, let offset, let expected) = event else { return nil }
            return (offset, expected)
        }
    }

    func sends(of task: Int) -> [(bytes: Int64, total: Int64, expected: Int64)] {
        events.compactMap { event -> (bytes: Int64, total: Int64, expected: Int64)? in
            guard case .sent(task, let bytes, let total, let expected) = event else { return nil }
            return (bytes, total, expected)
        }
    }

    func bodies(of task: Int) -> [Data] {
        events.compactMap { event -> Data? in
            guard case .data(task, let data) = event else { return nil }
            return data
        }
    }

    /// The distinct task objects the callbacks about `task` were given.
    func objects(of task: Int) -> [URLSessionTask] {
        state.withLock { $0.objects[task] ?? [] }
    }

    var isInvalidated: Bool { count("invalid") > 0 }

    // MARK: Waiting

    /// Waits until `condition` holds for the events; false after `timeout`.
    func waitFor(timeout: Duration = .seconds(120), _ condition: ([Event]) -> Bool) async -> Bool {
        await pollUntil(timeout: timeout) { condition(self.events) }
    }

    func waitForWrite(of task: Int) async -> Bool {
        await waitFor { $0.contains { $0.name == "write" && $0.task == task } }
    }

    func waitForCompletion(of task: Int) async -> Bool {
        await waitFor { $0.contains { $0.name == "complete" && $0.task == task } }
    }

    func waitForFinishEvents() async -> Bool {
        await waitFor { $0.contains { $0.name == "finishEvents" } }
    }

    func waitForInvalidation() async -> Bool {
        await waitFor { $0.contains { $0.name == "invalid" } }
    }
}
