import CourierCore
import CourierPolicies
import CourierReactor
import CourierSync
import CourierTransport
import Foundation
import Logging

/// Coordinates a group of tasks: Apple's `URLSession`.
///
/// A session copies its configuration when created. Delegate callbacks and completion handlers
/// run on its `delegateQueue` (a serial queue it creates when none is given), one at a time.
/// A session keeps its delegate until it is invalidated; `didBecomeInvalidWithError` is the
/// last call it makes.
open class URLSession: NSObject, @unchecked Sendable {
    /// What to do with a response: continue, or cancel the task.
    /// What a delayed task does when its `earliestBeginDate` has come: Apple's
    /// `URLSession.DelayedRequestDisposition`.
    public enum DelayedRequestDisposition: Int, Sendable {
        /// Load the request as it is.
        case continueLoading = 0
        /// Load the request given with the disposition instead.
        case useNewRequest = 1
        /// Cancel the task.
        case cancel = 2
    }

    public enum ResponseDisposition: Int, Sendable {
        case cancel = 0
        case allow = 1
        /// The data task becomes a download task: the data delegate hears
        /// `urlSession(_:dataTask:didBecome:)` with it, and the body (what arrived already, then
        /// the rest) goes to its file, reported through the download delegate.
        case becomeDownload = 2
        /// The data task becomes a stream task on its HTTP/1.1 connection, which leaves HTTP
        /// after the response head: the data delegate hears `urlSession(_:dataTask:didBecome:)`
        /// with it, and the stream task reads what the server sends after the head. On an
        /// HTTP/2 connection, or once body bytes have been delivered, the task fails instead.
        case becomeStream = 3
    }

    /// Tasks and invalidation; guarded by the mutex.
    struct Registry {
        var tasks = SlotTable<Int, URLSessionTask>()
        var nextTaskIdentifier = 1
        var delegate: (any URLSessionDelegate)?
        var invalidation = Invalidation.none
    }

    /// - `none` → `finishing` (finishTasksAndInvalidate) or `invalidated` (no tasks left)
    /// - `finishing` → `invalidated` when the last task completes
    enum Invalidation { case none, finishing, invalidated }

    private static let sharedSession = URLSession(configuration: .default, isShared: true)

    /// The shared session: default configuration, no delegate, cannot be invalidated.
    open class var shared: URLSession { sharedSession }

    public let delegateQueue: OperationQueue
    open var sessionDescription: String?
    let frozenConfiguration: URLSessionConfiguration
    /// Where tasks send their exchanges; the session never talks to the transport directly.
    let loader: any Loader
    /// The session's logger (label `courier`, or the configuration's own); secrets redacted.
    let logger: Logger
    /// True when the logger lets `.debug` through: exchanges are then described (their fields
    /// joined into one line), which is not free.
    let logsExchanges: Bool
    /// True when the logger lets `.trace` through (each task's end is logged then).
    let logsTaskEnds: Bool
    /// The origin of the last request built, for the next one to the same origin.
    let origins = OriginMemo()
    /// The follow-up rules every task of the session shares, from the configuration.
    let redirectPolicy: RedirectPolicy
    let retryPolicy: RetryPolicy
    let registry: Mutex<Registry>
    /// A delegate was given at creation; without one, `delegate` is nil for good.
    private let createdWithDelegate: Bool
    /// Makes the file a download task writes to: a new file in the temporary directory. Tests
    /// replace it to reach the failure paths.
    let makeDownloadFile = Mutex(DownloadFileMaker {
        try DownloadFile.create(in: FileManager.default.temporaryDirectory)
    })
    /// How long a download's write on the event loop may take before the download moves to
    /// its writer thread (FileSink). Tests set it to zero to reach the writer.
    let slowDiskWriteThreshold = Mutex<Duration>(FileSink.slowWriteThreshold)
    /// Credentials that answered a challenge, sent again before the server asks (Basic in
    /// the directory that worked, Digest with the next nonce count). One lock of its own,
    /// taken after a task's (session → task → this) and never around user code.
    let preemptiveAuthentication = Mutex(PreemptiveAuthentication())
    /// Set once something is remembered in `preemptiveAuthentication`: until then a request
    /// looks at one atomic flag instead of taking that lock.
    let remembersCredentials = Atomic<Bool>(false)
    /// Which proxy each request goes through: the configuration's
    /// `connectionProxyDictionary`, or the environment when it has none; read once, when the
    /// session is made.
    let proxySelection: ProxySelection
    /// False when no request of the session can take a proxy: the common case costs nothing.
    let mayUseProxy: Bool
    /// True for `URLSession.shared`: the one that consults `URLProtocol.registerClass`'s classes.
    let isShared: Bool
    /// What every request reads of the configuration, read once here (the frozen configuration
    /// never changes; its properties are `open`, so each read was a dynamic call and a retain).
    /// The cache that responses are looked up in and stored in.
    let cache: URLCache?
    /// The configuration's `URLProtocol` classes, in order.
    let configuredProtocolClasses: [URLProtocol.Type]
    /// The cookie store, and whether requests carry its cookies (`httpShouldSetCookies`).
    let cookieStorage: HTTPCookieStorage?
    let setsCookies: Bool
    /// Whether coded bodies are decoded (`courierDecodesContent`).
    let decodesContent: Bool
    /// A background session's connection to its daemon; set once, in `init`.
    private(set) var background: BackgroundLink?

    /// A session with no delegate.
    public convenience init(configuration: URLSessionConfiguration) {
        self.init(configuration: configuration, delegate: nil, delegateQueue: nil)
    }

    /// A session with a delegate, called on `queue` (a new serial queue when nil).
    public convenience init(configuration: URLSessionConfiguration, delegate: (any URLSessionDelegate)?, delegateQueue queue: OperationQueue?) {
        self.init(configuration: configuration, delegate: delegate, delegateQueue: queue, isShared: false)
    }

    private init(configuration: URLSessionConfiguration, delegate: (any URLSessionDelegate)? = nil, delegateQueue queue: OperationQueue? = nil, isShared: Bool) {
        let frozen = configuration.copy() as! URLSessionConfiguration
        self.frozenConfiguration = frozen
        self.isShared = isShared
        self.decodesContent = frozen.courierDecodesContent
        // A session that delivers bodies coded does not use a cache of decoded ones.
        self.cache = frozen.courierDecodesContent ? frozen.urlCache : nil
        self.configuredProtocolClasses = (frozen.protocolClasses ?? []).compactMap { $0 as? URLProtocol.Type }
        self.cookieStorage = frozen.httpCookieStorage
        self.setsCookies = frozen.httpShouldSetCookies
        if let queue {
            self.delegateQueue = queue
        } else {
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 1
            queue.name = "Courier URLSession delegate queue"
            self.delegateQueue = queue
        }
        var transportConfiguration = HTTPTransport.Configuration()
        transportConfiguration.pool.maxConnections = max(1, frozen.httpMaximumConnectionsPerHost)
        transportConfiguration.pool.maxIdleConnections = max(1, frozen.httpMaximumConnectionsPerHost)
        transportConfiguration.connectTimeout = RequestBuilder.duration(frozen.timeoutIntervalForRequest)
        transportConfiguration.tls.minimumVersion = frozen.tlsMinimumSupportedProtocolVersion.tlsVersion ?? .tls1_2
        transportConfiguration.tls.maximumVersion = frozen.tlsMaximumSupportedProtocolVersion.tlsVersion
        transportConfiguration.http2PriorKnowledge = frozen.http2PriorKnowledge
        if frozen.courierHTTP1Only {
            transportConfiguration.tls.applicationProtocols = ["http/1.1"]
            transportConfiguration.http2PriorKnowledge = false
        }
        if let connectTimeout = frozen.courierConnectTimeout {
            transportConfiguration.connectTimeout = RequestBuilder.duration(connectTimeout)
        }
        if let window = frozen.courierHTTP2StreamWindowSize {
            let size = Int32(clamping: max(1, window))
            transportConfiguration.http2.initialStreamWindowSize = size
            transportConfiguration.http2.maximumStreamWindowSize = max(size, transportConfiguration.http2.maximumStreamWindowSize)
        }
        let security = SessionSecurity()
        transportConfiguration.securityDelegate = security
        self.loader = HTTPTransport(configuration: transportConfiguration)
        self.logger = frozen.courierLogger ?? Logger(label: "courier")
        self.logsExchanges = logger.logLevel <= .debug
        self.logsTaskEnds = logger.logLevel <= .trace
        self.redirectPolicy = RedirectPolicy(extraCrossOriginFieldNames: frozen.courierHeadersStrippedOnCrossOriginRedirect)
        self.retryPolicy = RetryPolicy(maximumDelay: frozen.courierMaximumRetryAfterDelay, maximumAttempts: frozen.courierMaximumRetryAttempts)
        self.registry = Mutex(Registry(delegate: delegate))
        self.createdWithDelegate = delegate != nil
        if let dictionary = frozen.connectionProxyDictionary {
            self.proxySelection = .dictionary(dictionary)
        } else {
            self.proxySelection = .environment(ProcessInfo.processInfo.environment)
        }
        self.mayUseProxy = proxySelection.http != .direct || proxySelection.https != .direct
        super.init()
        // Held weakly only when there is a delegate to ask (`SessionSecurity.attach(_:)`).
        // Through the property, which a subclass may override.
        if self.delegate != nil { security.attach(self) }
        if frozen.kind == .background, let identifier = frozen.identifier {
            let link = BackgroundLink(session: self, identifier: identifier, configuration: frozen)
            background = link
            link.connect()
        }
    }

    deinit {
        loader.shutdown()
        background?.close()
    }

    /// The delegate; nil after invalidation.
    open var delegate: (any URLSessionDelegate)? {
        // A session made without a delegate never gets one: no lock to take (every task asks).
        guard createdWithDelegate else { return nil }
        return registry.withLock { $0.delegate }
    }

    /// A copy of the session's configuration.
    open var configuration: URLSessionConfiguration { frozenConfiguration.copy() as! URLSessionConfiguration }

    var isInvalidated: Bool { registry.withLock { $0.invalidation != .none } }

    // MARK: Data tasks

    open func dataTask(with request: URLRequest) -> URLSessionDataTask {
        makeTask(URLSessionDataTask.self, request, delivery: .delegate)
    }

    open func dataTask(with url: URL) -> URLSessionDataTask {
        dataTask(with: URLRequest(url: url))
    }

    open func dataTask(with request: URLRequest, completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> URLSessionDataTask {
        makeTask(URLSessionDataTask.self, request, delivery: .completionHandler(completionHandler))
    }

    open func dataTask(with url: URL, completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> URLSessionDataTask {
        dataTask(with: URLRequest(url: url), completionHandler: completionHandler)
    }

    // MARK: Upload tasks

    open func uploadTask(with request: URLRequest, from bodyData: Data) -> URLSessionUploadTask {
        makeTask(URLSessionUploadTask.self, request, delivery: .delegate, body: .data(bodyData))
    }

    open func uploadTask(with request: URLRequest, fromFile fileURL: URL) -> URLSessionUploadTask {
        makeTask(URLSessionUploadTask.self, request, delivery: .delegate, body: .file(fileURL))
    }

    /// An upload whose body the task delegate gives as a stream when the task starts
    /// (`urlSession(_:task:needNewBodyStream:)`), and again when a redirect or an
    /// authentication challenge needs it resent. The request's own body is ignored, and the
    /// body is sent chunked (a `Content-Length` the caller sets is the stack's to decide).
    open func uploadTask(withStreamedRequest request: URLRequest) -> URLSessionUploadTask {
        makeTask(URLSessionUploadTask.self, request, delivery: .delegate, body: .delegateStream)
    }

    open func uploadTask(with request: URLRequest, from bodyData: Data?, completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> URLSessionUploadTask {
        makeTask(URLSessionUploadTask.self, request, delivery: .completionHandler(completionHandler), body: .data(bodyData ?? Data()))
    }

    open func uploadTask(with request: URLRequest, fromFile fileURL: URL, completionHandler: @escaping @Sendable (Data?, URLResponse?, (any Error)?) -> Void) -> URLSessionUploadTask {
        makeTask(URLSessionUploadTask.self, request, delivery: .completionHandler(completionHandler), body: .file(fileURL))
    }

    // MARK: Download tasks

    /// A task that saves the body to a temporary file, handed to the download delegate's
    /// `didFinishDownloadingTo`.
    open func downloadTask(with request: URLRequest) -> URLSessionDownloadTask {
        makeTask(URLSessionDownloadTask.self, request, delivery: .delegate)
    }

    open func downloadTask(with url: URL) -> URLSessionDownloadTask {
        downloadTask(with: URLRequest(url: url))
    }

    /// A download whose file goes to `completionHandler`; the file is deleted when it returns.
    open func downloadTask(with request: URLRequest, completionHandler: @escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void) -> URLSessionDownloadTask {
        makeTask(URLSessionDownloadTask.self, request, delivery: .fileCompletionHandler(completionHandler))
    }

    open func downloadTask(with url: URL, completionHandler: @escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void) -> URLSessionDownloadTask {
        downloadTask(with: URLRequest(url: url), completionHandler: completionHandler)
    }

    /// A download that goes on from resume data (`cancel(byProducingResumeData:)`, or a failed
    /// download's `URLError.downloadTaskResumeData`): it asks for the rest of the entity, and
    /// its delegate hears `didResumeAtOffset` before any `didWriteData`. Resume data that is not
    /// Courier's, or is damaged, fails the task with `.cannotDecodeRawData` when it starts.
    open func downloadTask(withResumeData resumeData: Data) -> URLSessionDownloadTask {
        resumedDownloadTask(resumeData, delivery: .delegate)
    }

    /// A download that goes on from resume data, its file handed to `completionHandler`.
    open func downloadTask(withResumeData resumeData: Data, completionHandler: @escaping @Sendable (URL?, URLResponse?, (any Error)?) -> Void) -> URLSessionDownloadTask {
        resumedDownloadTask(resumeData, delivery: .fileCompletionHandler(completionHandler))
    }

    func resumedDownloadTask(_ blob: Data, delivery: TaskDriver.Delivery) -> URLSessionDownloadTask {
        do throws(URLError) {
            let data = try ResumeData.decode(blob)
            if let task = backgroundTask(URLSessionDownloadTask.self, data.originalRequest, delivery: delivery, body: .request, resumeData: blob) {
                return task
            }
            let task = makeTask(URLSessionDownloadTask.self, data.originalRequest, delivery: delivery)
            task.driver.resume(from: data, blob: blob)
            return task
        } catch {
            let task = makeTask(URLSessionDownloadTask.self, nil, delivery: delivery)
            task.driver.failWhenStarted(error)
            return task
        }
    }

    // MARK: Invalidation

    /// Lets running tasks finish, then invalidates the session. No effect on `shared`.
    open func finishTasksAndInvalidate() {
        guard !isShared else { return }
        let invalidateNow = registry.withLock { registry -> Bool in
            guard registry.invalidation == .none else { return false }
            registry.invalidation = .finishing
            return registry.tasks.values.allSatisfy { $0.state == .suspended && !$0.storage.withLock(\.started) }
        }
        if invalidateNow { invalidate() }
    }

    /// Cancels every task, then invalidates the session. No effect on `shared`.
    open func invalidateAndCancel() {
        guard !isShared else { return }
        let tasks = registry.withLock { registry -> [URLSessionTask] in
            if registry.invalidation == .none { registry.invalidation = .finishing }
            return registry.tasks.values
        }
        for task in tasks { task.cancel() }
        if tasks.isEmpty { invalidate() }
    }

    // MARK: Flush and reset

    /// Writes the session's cookies and cache to disk and makes every later request use a new
    /// connection; `completionHandler` runs on the delegate queue when done.
    open func flush(completionHandler: @escaping @Sendable () -> Void) {
        loader.retireConnections()
        BlockingPool.shared.submit { [delegateQueue, cookieStorage, cache] in
            cookieStorage?.flush()
            cache?.flush()
            delegateQueue.addOperation { completionHandler() }
        }
    }

    /// Empties the session's cookie storage, cache and credential storage (the files on disk
    /// too, for shared stores: every session using them sees the change, as on Apple
    /// platforms), forgets the credentials the session sends unasked, and makes every later
    /// request use a new connection; `completionHandler` runs on the delegate queue when done.
    open func reset(completionHandler: @escaping @Sendable () -> Void) {
        preemptiveAuthentication.withLock { $0 = PreemptiveAuthentication() }
        remembersCredentials.store(false, ordering: .releasing)
        loader.retireConnections()
        BlockingPool.shared.submit { [delegateQueue, cookieStorage, cache, credentialStorage = frozenConfiguration.urlCredentialStorage] in
            if let cookies = cookieStorage {
                cookies.removeCookies(since: .distantPast)
                cookies.flush()
            }
            if let cache {
                cache.removeAllCachedResponses()
                cache.flush()
            }
            if let credentials = credentialStorage {
                for (space, byUser) in credentials.allCredentials {
                    for credential in byUser.values { credentials.remove(credential, for: space) }
                }
            }
            delegateQueue.addOperation { completionHandler() }
        }
    }

    /// Every task not yet completed.
    open func getAllTasks(completionHandler: @escaping @Sendable ([URLSessionTask]) -> Void) {
        let tasks = liveTasks()
        delegateQueue.addOperation { completionHandler(tasks) }
    }

    /// The tasks not yet completed, by kind.
    open func getTasksWithCompletionHandler(_ completionHandler: @escaping @Sendable ([URLSessionDataTask], [URLSessionUploadTask], [URLSessionDownloadTask]) -> Void) {
        let tasks = liveTasks()
        let uploads = tasks.compactMap { $0 as? URLSessionUploadTask }
        let data = tasks.compactMap { $0 as? URLSessionDataTask }.filter { !($0 is URLSessionUploadTask) }
        let downloads = tasks.compactMap { $0 as? URLSessionDownloadTask }
        delegateQueue.addOperation { completionHandler(data, uploads, downloads) }
    }

    private func liveTasks() -> [URLSessionTask] {
        registry.withLock { $0.tasks.values.sorted { $0.taskIdentifier < $1.taskIdentifier } }.filter { $0.state != .completed }
    }

    // MARK: Internals

    /// Makes and registers a task. In a background session, downloads and uploads go to
    /// ``backgroundTask(_:_:delivery:body:resumeData:)`` unless `inProcess`.
    func makeTask<T: URLSessionTask>(
        _ kind: T.Type, _ request: URLRequest?, delivery: TaskDriver.Delivery, body: TaskDriver.BodySource = .request, inProcess: Bool = false
    ) -> T {
        if !inProcess, let task = backgroundTask(kind, request, delivery: delivery, body: body) { return task }
        typealias Make = (URLSession, Int, URLRequest?, TaskDriver.Delivery, TaskDriver.BodySource) -> URLSessionTask
        let make: Make
        if kind == URLSessionUploadTask.self {
            make = { URLSessionUploadTask(session: $0, identifier: $1, request: $2, delivery: $3, body: $4) }
        } else if kind == URLSessionWebSocketTask.self {
            make = { session, identifier, request, delivery, body in
                let task = URLSessionWebSocketTask(session: session, identifier: identifier, request: request, delivery: delivery, body: body)
                task.socket = WebSocketDriver(task: task, session: session)
                return task
            }
        } else if kind == URLSessionStreamTask.self {
            make = { session, identifier, request, delivery, body in
                let task = URLSessionStreamTask(session: session, identifier: identifier, request: request, delivery: delivery, body: body)
                task.streamDriver = StreamTaskDriver(task: task, session: session)
                return task
            }
        } else if kind == URLSessionDownloadTask.self {
            PartialDownloadFiles.sweepOnce()
            make = { URLSessionDownloadTask(session: $0, identifier: $1, request: $2, delivery: $3, body: $4) }
        } else {
            make = { URLSessionDataTask(session: $0, identifier: $1, request: $2, delivery: $3, body: $4) }
        }
        let identifier = nextTaskIdentifier()
        let task = make(self, identifier, request, delivery, body) as! T
        registry.withLock { $0.tasks[identifier] = task }
        // An async call's task hears once its own delegate is set.
        switch delivery {
        case .async, .asyncBytes: break
        default: announceCreated(task)
        }
        return task
    }

    /// `urlSession(_:didCreateTask:)`, as Apple makes it: synchronously, before the call that
    /// made the task returns (not on the delegate queue), to the task's delegate (whose
    /// default passes it to the session's).
    func announceCreated(_ task: URLSessionTask) {
        guard let delegate = task.delegate ?? (self.delegate as? URLSessionTaskDelegate) else { return }
        delegate.urlSession(self, didCreateTask: task)
    }

    /// Replaces a data task that became a download task: the new task (a new identifier) takes
    /// over the old one's driver and state; the data task is completed and hears nothing more.
    func adoptAsDownload(_ dataTask: URLSessionDataTask) -> URLSessionDownloadTask {
        let identifier = nextTaskIdentifier()
        let download = URLSessionDownloadTask(session: self, identifier: identifier, replacing: dataTask)
        registry.withLock { registry in
            registry.tasks[identifier] = download
            registry.tasks[dataTask.taskIdentifier] = nil
        }
        dataTask.storage.withLock { $0.state = .completed }
        return download
    }

    /// Makes the stream task a data task becomes (`.becomeStream`), in the data task's place.
    func adoptAsStream(_ dataTask: URLSessionDataTask) -> URLSessionStreamTask {
        let identifier = nextTaskIdentifier()
        let stream = URLSessionStreamTask(session: self, identifier: identifier, request: nil, delivery: .delegate, body: .request)
        stream.streamDriver = StreamTaskDriver(task: stream, session: self)
        stream.storage.withLock { storage in
            storage.state = .running
            storage.started = true
        }
        registry.withLock { registry in
            registry.tasks[identifier] = stream
            registry.tasks[dataTask.taskIdentifier] = nil
        }
        dataTask.storage.withLock { $0.state = .completed }
        return stream
    }

    /// A new task's identifier, unique within the session.
    func nextTaskIdentifier() -> Int {
        registry.withLock { registry -> Int in
            defer { registry.nextTaskIdentifier += 1 }
            return registry.nextTaskIdentifier
        }
    }

    /// A task delivered its last callback.
    func taskCompleted(_ task: URLSessionTask) {
        let invalidateNow = registry.withLock { registry -> Bool in
            registry.tasks[task.taskIdentifier] = nil
            return registry.invalidation == .finishing && registry.tasks.values.allSatisfy { !$0.storage.withLock(\.started) }
        }
        if invalidateNow { invalidate() }
    }

    /// Shuts the transport and makes the delegate's last call.
    private func invalidate() {
        let delegate = registry.withLock { registry -> (any URLSessionDelegate)? in
            guard registry.invalidation != .invalidated else { return nil }
            registry.invalidation = .invalidated
            return registry.delegate
        }
        loader.shutdown()
        background?.close()
        delegateQueue.addOperation { [self] in
            delegate?.urlSession(self, didBecomeInvalidWithError: nil)
            registry.withLock { $0.delegate = nil }
        }
    }
}

/// How a session makes download files, held by its `makeDownloadFile` mutex. The closure is
/// wrapped in a struct on purpose: a closure that is itself a `Mutex`'s value goes through the
/// generic `withLock` as an `inout` function value, and each access writes it back wrapped in
/// two more reabstraction thunks. The chain grew by two thunks per download, so every download
/// cost more time and memory than the one before, until a deep enough chain overflowed the stack.
struct DownloadFileMaker: Sendable {
    var make: @Sendable () throws -> DownloadFile

    init(_ make: @escaping @Sendable () throws -> DownloadFile) {
        self.make = make
    }
}
