import CourierSync
import Foundation

/// The value of a byte count not known in advance (`countOfBytesExpectedToReceive` with no
/// `Content-Length`, say).
public let NSURLSessionTransferSizeUnknown: Int64 = -1

/// One load: Apple's `URLSessionTask`. Created suspended; nothing happens until `resume()`.
open class URLSessionTask: NSObject, NSCopying, @unchecked Sendable {
    /// The life of a task: `.suspended` at creation → `.running` (resume) ⇄ `.suspended`
    /// (suspend) → `.canceling` (cancel) → `.completed`.
    public enum State: Int, Sendable {
        case running = 0
        case suspended = 1
        case canceling = 2
        case completed = 3
    }

    public static let defaultPriority: Float = 0.5
    public static let lowPriority: Float = 0.25
    public static let highPriority: Float = 0.75

    /// What user code can read and write; guarded by the mutex.
    struct Storage {
        var state = State.suspended
        var started = false
        var currentRequest: URLRequest?
        var response: URLResponse?
        var error: (any Error)?
        var countOfBytesReceived: Int64 = 0
        var countOfBytesSent: Int64 = 0
        var countOfBytesExpectedToSend: Int64 = 0
        var countOfBytesExpectedToReceive: Int64 = 0
        var countOfBytesClientExpectsToSend: Int64 = -1
        var countOfBytesClientExpectsToReceive: Int64 = -1
        var taskDescription: String?
        var priority: Float = URLSessionTask.defaultPriority
        var earliestBeginDate: Date?
        var delegate: (any URLSessionTaskDelegate)?
        var progress: Progress?
    }

    let storage: Mutex<Storage>
    /// Set once `delegate` has been given one: until then reading it takes no lock.
    private let delegateWasSet = Atomic<Bool>(false)
    private let identifier: Int
    private let original: URLRequest?
    let session: URLSession
    /// Carries the task through its exchanges.
    var driver: TaskDriver!
    /// Progress of the transfer; its total is the expected byte count once known. Made on first
    /// use (a Progress is costly and most tasks never show one) from the counts so far.
    open var progress: Progress {
        storage.withLock { storage -> Progress in
            if let existing = storage.progress { return existing }
            let made = Progress(totalUnitCount: storage.response?.expectedContentLength ?? -1)
            made.completedUnitCount = storage.countOfBytesReceived
            storage.progress = made
            return made
        }
    }

    init(session: URLSession, identifier: Int, request: URLRequest?, delivery: TaskDriver.Delivery, body: TaskDriver.BodySource) {
        self.session = session
        self.identifier = identifier
        self.original = request
        self.storage = Mutex(Storage(currentRequest: request))
        super.init()
        self.driver = TaskDriver(task: self, session: session, delivery: delivery, body: body)
    }

    /// A task of no session's making, as Apple's deprecated `URLSessionTask()` gives: for
    /// subclasses that stand in for tasks in tests (overriding `resume()` and the rest). It has
    /// no request: resumed as it is, it completes with `.unsupportedURL`.
    public override init() {
        let session = URLSession.shared
        self.session = session
        self.identifier = session.nextTaskIdentifier()
        self.original = nil
        self.storage = Mutex(Storage(currentRequest: nil))
        super.init()
        let body = TaskDriver.BodySource.request
        self.driver = TaskDriver(task: self, session: session, delivery: .delegate, body: body)
    }

    /// A task that takes over `task`'s load: its requests, state, counts and driver (a data
    /// task that became a download task).
    init(session: URLSession, identifier: Int, replacing task: URLSessionTask) {
        self.session = session
        self.identifier = identifier
        self.original = task.originalRequest
        let taken = task.storage.withLock { $0 }
        self.storage = Mutex(taken)
        super.init()
        if taken.delegate != nil { delegateWasSet.store(true, ordering: .releasing) }
        self.driver = task.driver
    }

    /// Unique within the session.
    open var taskIdentifier: Int { identifier }
    /// The request the task was created with.
    open var originalRequest: URLRequest? { original }
    /// The request being loaded (after redirects).
    open var currentRequest: URLRequest? { storage.withLock { $0.currentRequest } }
    /// The response, once its head arrived.
    open var response: URLResponse? { storage.withLock { $0.response } }
    /// The error the task failed with; nil while running and on success.
    open var error: (any Error)? { storage.withLock { $0.error } }
    open var state: State { storage.withLock { $0.state } }
    open var countOfBytesReceived: Int64 { storage.withLock { $0.countOfBytesReceived } }
    open var countOfBytesSent: Int64 { storage.withLock { $0.countOfBytesSent } }
    open var countOfBytesExpectedToSend: Int64 { storage.withLock { $0.countOfBytesExpectedToSend } }
    open var countOfBytesExpectedToReceive: Int64 { storage.withLock { $0.countOfBytesExpectedToReceive } }

    /// A hint of the bytes the client expects to send; -1 when unknown. Informational.
    open var countOfBytesClientExpectsToSend: Int64 {
        get { storage.withLock { $0.countOfBytesClientExpectsToSend } }
        set { storage.withLock { $0.countOfBytesClientExpectsToSend = newValue } }
    }

    /// A hint of the bytes the client expects to receive; -1 when unknown. Informational.
    open var countOfBytesClientExpectsToReceive: Int64 {
        get { storage.withLock { $0.countOfBytesClientExpectsToReceive } }
        set { storage.withLock { $0.countOfBytesClientExpectsToReceive = newValue } }
    }

    open var taskDescription: String? {
        get { storage.withLock { $0.taskDescription } }
        set { storage.withLock { $0.taskDescription = newValue } }
    }

    /// Relative priority from 0 (lowest) to 1 (highest), told to the server as an RFC 9218
    /// `Priority: u=N` field (urgency 7 to 0) on every request the task sends, unless the
    /// default (0.5, urgency 3) or a `Priority` field the caller set says it already. Servers
    /// that schedule by it (HTTP/2 and HTTP/1.1 alike) serve urgent responses first.
    open var priority: Float {
        get { storage.withLock { $0.priority } }
        set { storage.withLock { $0.priority = min(max(newValue, 0), 1) } }
    }

    /// Courier extension: the current request as it went on the wire, with the fields Courier
    /// added (Host, User-Agent, Accept, Accept-Language, framing). Nil until it was sent.
    open var requestAsSent: URLRequest? { driver.requestAsSent }

    /// The task's own delegate; it receives task events before the session's delegate.
    open var delegate: (any URLSessionTaskDelegate)? {
        get {
            // Most tasks never get a delegate, and the driver asks a few times a request.
            guard delegateWasSet.load(ordering: .acquiring) else { return nil }
            return storage.withLock { $0.delegate }
        }
        set {
            storage.withLock { storage in
                // Raised before the lock is given up: a reader that still sees it down read
                // before this setter was done, as a reader waiting for the lock would have.
                if newValue != nil { delegateWasSet.store(true, ordering: .releasing) }
                storage.delegate = newValue
            }
        }
    }

    /// The earliest time the load may begin: a task resumed before it waits (no connection,
    /// no byte sent), then asks its delegate's `willBeginDelayedRequest` whether to continue,
    /// load another request, or cancel. Set it before `resume()`. Apple honours it only in
    /// background sessions; Courier honours it in every session.
    open var earliestBeginDate: Date? {
        get { storage.withLock { $0.earliestBeginDate } }
        set { storage.withLock { $0.earliestBeginDate = newValue } }
    }

    /// Starts the task, or continues it after `suspend()`.
    open func resume() {
        let action = storage.withLock { storage -> ResumeAction in
            guard storage.state == .suspended else { return .none }
            storage.state = .running
            if storage.started { return .continueReading }
            storage.started = true
            return .start
        }
        switch action {
        case .none: break
        case .start: driver.start()
        case .continueReading: driver.setSuspended(false)
        }
    }

    private enum ResumeAction { case none, start, continueReading }

    /// Pauses the task: it stops reading (no data is lost) until `resume()`.
    open func suspend() {
        let paused = storage.withLock { storage -> Bool in
            guard storage.state == .running else { return false }
            storage.state = .suspended
            return storage.started
        }
        if paused { driver.setSuspended(true) }
    }

    /// Cancels the task: it completes with `URLError(.cancelled)`.
    open func cancel() {
        if markCanceling() { driver.cancel() }
    }

    /// Moves a task that was never started to `.running`; false when it had started (or
    /// ended). For the tasks that run as soon as they are resumed and cannot be suspended.
    func markStarted() -> Bool {
        storage.withLock { storage -> Bool in
            guard storage.state == .suspended, !storage.started else { return false }
            storage.state = .running
            storage.started = true
            return true
        }
    }

    /// Completes the task with `error` for a driver of its own (WebSocket, stream): the state
    /// and error first, then `didCompleteWithError` on the delegate queue, after which the
    /// session lets the task go.
    func reportCompletion(_ error: (any Error)?) {
        storage.withLock { storage in
            storage.state = .completed
            storage.error = error
        }
        let session = self.session
        let delegate = self.delegate ?? (session.delegate as? URLSessionTaskDelegate)
        session.delegateQueue.addOperation {
            delegate?.urlSession(session, task: self, didCompleteWithError: error)
            session.taskCompleted(self)
        }
    }

    /// Moves a running or suspended task to `.canceling`; false when it was already ending.
    func markCanceling() -> Bool {
        storage.withLock { storage -> Bool in
            guard storage.state == .running || storage.state == .suspended else { return false }
            storage.state = .canceling
            return true
        }
    }

    open override func copy() -> Any { self }
    open func copy(with zone: NSZone? = nil) -> Any { self }

    open override var description: String {
        "<\(type(of: self)) \(taskIdentifier)> { \(original?.url?.absoluteString ?? "nil") }"
    }
}

extension URLSessionTask: ProgressReporting {}

/// A task that delivers the response body in memory: Apple's `URLSessionDataTask`.
open class URLSessionDataTask: URLSessionTask, @unchecked Sendable {}

/// A data task that sends a body from memory, a file or a stream: Apple's `URLSessionUploadTask`.
open class URLSessionUploadTask: URLSessionDataTask, @unchecked Sendable {}

/// A task that saves the response body to a temporary file: Apple's `URLSessionDownloadTask`.
///
/// The body streams to disk as it arrives, so memory use does not depend on its size. The file
/// is handed over by `didFinishDownloadingTo` or the completion handler and deleted when they
/// return; `download(for:)` leaves it to the caller.
///
/// A download can go on later where it stopped: `cancel(byProducingResumeData:)` keeps the
/// partial file and describes it in resume data, and a transfer that breaks mid-body puts resume
/// data in its error (`URLError.downloadTaskResumeData`). Resume data exists only when the
/// request was a GET whose response had a strong ETag or a Last-Modified date, accepted byte
/// ranges, and was not content-coded. `URLSession.downloadTask(withResumeData:)` asks for the
/// rest with `Range` and `If-Range`: a 206 continues the file, anything else starts it over,
/// and `didResumeAtOffset` tells which.
open class URLSessionDownloadTask: URLSessionTask, @unchecked Sendable {
    /// Cancels the download and gives `completionHandler` (on the delegate queue, before the
    /// completion) resume data for `URLSession.downloadTask(withResumeData:)`, or nil when the
    /// download cannot be resumed. The partial file the data names is kept until it is
    /// resumed, or for seven days.
    open func cancel(byProducingResumeData completionHandler: @escaping @Sendable (Data?) -> Void) {
        guard markCanceling() else {
            session.delegateQueue.addOperation { completionHandler(nil) }
            return
        }
        driver.cancel(producingResumeData: completionHandler)
    }

    /// Cancels the download and returns its resume data, or nil when it cannot be resumed.
    open func cancelByProducingResumeData() async -> Data? {
        await withCheckedContinuation { continuation in
            cancel(byProducingResumeData: { continuation.resume(returning: $0) })
        }
    }
}
