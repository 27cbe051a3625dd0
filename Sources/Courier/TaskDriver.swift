import CourierCore
import CourierHTTP1
import CourierPolicies
import CourierReactor
import CourierSync
import CourierTransport
import Foundation
import Logging

/// Carries one task through its exchanges: the thin driver of the session layer
/// (docs/internals/session.md).
///
/// `TaskStateMachine` decides; the driver acts: it sends exchanges through the session's
/// ``Loader``, asks the delegate where Apple asks it, decodes the body, and hands the result to
/// the task's ``TaskSink``. Transport callbacks arrive on an event loop, user calls (cancel,
/// suspend) on any thread, delegate answers on the delegate queue.
///
/// Locking: one lock per task, `state`. Order: session → task → exchange (and a sink's own lock
/// after the task's). User code never runs under the lock: decisions are taken under it and
/// carried out after it is released.
final class TaskDriver: HTTPExchangeDelegate, @unchecked Sendable {
    /// How results reach the caller.
    enum Delivery {
        /// Through the delegates: response, data, metrics, completion.
        case delegate
        /// Through a completion handler on the delegate queue; data and completion delegate
        /// callbacks are skipped.
        case completionHandler(@Sendable (Data?, URLResponse?, (any Error)?) -> Void)
        /// Through a completion handler given the downloaded file, which is deleted when the
        /// handler returns; download-completion delegate callbacks are skipped.
        case fileCompletionHandler(@Sendable (URL?, URLResponse?, (any Error)?) -> Void)
        /// Through an async call; data callbacks are skipped.
        case async
        /// Through `bytes(for:)`: the response to the call, the body to its async sequence.
        case asyncBytes
    }

    /// Where the request body comes from.
    enum BodySource {
        /// The request's `httpBody` or `httpBodyStream`.
        case request
        /// Bytes given to an upload task.
        case data(Data)
        /// A file given to an upload task, streamed from disk (opened anew for each exchange).
        case file(URL)
        /// A stream the task delegate gives when the task starts
        /// (`uploadTask(withStreamedRequest:)`); becomes `.request` with that stream.
        case delegateStream
    }

    struct State {
        var machine: TaskStateMachine
        /// The exchange in flight; callbacks from any other are stale and ignored.
        var exchange: HTTPExchange?
        /// The request of the current hop (the task's `currentRequest`).
        var request: URLRequest?
        var bodySource: BodySource
        /// What went to the transport for the current hop.
        var transportRequest: TransportRequest?
        /// The response head of the current exchange.
        /// The response of the current exchange (an `HTTPURLResponse`), or of a `data:` or
        /// `file:` load (a plain `URLResponse`).
        var response: URLResponse?
        /// The body of a redirect response, kept until the delegate decides.
        var keptBody = Data()
        /// Decodes the body of the delivered response; nil for identity.
        var decoder: ContentDecoder?
        /// Decoded body bytes of the current exchange (for its transaction metrics).
        var decodedBytes: Int64 = 0
        /// Why the task failed, once something failed.
        var failure: URLError?
        var transactions: [URLSessionTaskTransactionMetrics] = []
        var startDate = Date()
        /// When the whole task must be over (the resource timeout), fixed at the first hop.
        @PackedInstant var deadline: MonotonicInstant?
        var suspended = false
        var awaitingDisposition = false
        /// What the exchange was last told: paused or not.
        var readingPaused = false
        /// Whether transactions are recorded: only a task delegate receives metrics.
        var collectsMetrics = false
        /// Set by `cancel()`: an exchange started after it (between hops) is cancelled at once.
        var cancelRequested = false
        /// The HTTP proxy the current exchange goes through, whose 407 the task answers; nil:
        /// direct or through SOCKS.
        var proxy: ProxyHop?
        /// The current exchange's 407 came from a CONNECT tunnel: when no credential answers
        /// it, the task fails (the proxy's reply is no response of the origin's).
        var tunnelRefused = false
        /// Times the request went again after a tunnel refused with another request's credential.
        var tunnelRequeues = 0
        /// The `data:` or `file:` load under way, in place of an exchange.
        var localLoad: LocalLoad?
        /// The `URLProtocol` load under way, in place of an exchange.
        var protocolLoad: URLProtocolLoad?
        /// The request a protocol redirected to, while the delegate decides.
        var protocolRedirect: URLRequest?
        /// The error the task completes with when it is not the `failure` itself (a
        /// protocol's own error, passed on unchanged).
        var reportedError: (any Error)?
        var authentication = AuthenticationState()
        var cache = CacheState()
        /// The resume data a download task was made from, and how far it got.
        var resume: ResumeState?
        /// The current exchange asked for the rest of a resumed download.
        var resumeRangeSent = false
        /// The handler of `cancel(byProducingResumeData:)`, until the task ends.
        var resumeDataHandler: (@Sendable (Data?) -> Void)?
        /// The final response went to the sink (its body may follow).
        var responseDelivered = false
        /// Why the task fails as soon as it starts (resume data that cannot be read).
        var startFailure: URLError?
    }

    /// Largest redirect body kept aside while the delegate decides; a larger one is not
    /// followed but delivered as the response (nothing is lost, memory stays bounded).
    static let maxKeptRedirectBytes = 1024 * 1024

    /// The task: held from the driver's making until the task's last callback
    /// (``taskCompleted()``), then dropped, so that a late transport callback finds nil and
    /// does nothing. The session holds the task just as long, so the cycle task → driver →
    /// task outlives nothing. A reference under a lock of its own rather than a weak one: a
    /// weak reference gives the task a side table, and with one every retain and release of
    /// the task takes the runtime's slow path.
    let taskSlot: Mutex<URLSessionTask?>
    var task: URLSessionTask? {
        get { taskSlot.withLock { $0 } }
        set { taskSlot.withLock { $0 = newValue } }
    }
    let session: URLSession
    let sink: TaskSink
    /// The sink again, for an async task: what its caller awaits.
    let asyncSink: (any AsyncDelivering)?
    let identifier: Int
    let originalURL: URL?
    let state: Mutex<State>
    /// Set once the task chose a credential (``AuthenticationState``): until then a request
    /// checks this flag instead of taking the lock to look.
    let hasChosenCredential = Atomic<Bool>(false)

    init(task: URLSessionTask, session: URLSession, delivery: Delivery, body: BodySource) {
        self.taskSlot = Mutex(task)
        self.session = session
        self.identifier = task.taskIdentifier
        self.originalURL = task.originalRequest?.url
        let machine = TaskStateMachine(policy: session.redirectPolicy, retryPolicy: session.retryPolicy)
        self.state = Mutex(State(machine: machine, request: task.originalRequest, bodySource: body))
        // Read only for a download: the session's lock is not taken for other tasks.
        var threshold: Duration { session.slowDiskWriteThreshold.withLock { $0 } }
        switch (task is URLSessionDownloadTask, delivery) {
        case (true, .delegate): (sink, asyncSink) = (FileSink(.delegate, slowWriteThreshold: threshold), nil)
        case (true, .fileCompletionHandler(let handler)): (sink, asyncSink) = (FileSink(.handler(handler), slowWriteThreshold: threshold), nil)
        case (true, .async):
            let file = FileSink(.async, slowWriteThreshold: threshold)
            (sink, asyncSink) = (file, file)
        case (_, .completionHandler(let handler)): (sink, asyncSink) = (MemorySink(.handler(handler)), nil)
        case (false, .async):
            let memory = MemorySink(.async)
            (sink, asyncSink) = (memory, memory)
        case (false, .asyncBytes): (sink, asyncSink) = (BytesSink(), nil)
        default: (sink, asyncSink) = (DelegateDataSink(), nil)
        }
        (sink as? BytesSink)?.attach(self)
    }

    var logger: Logger { session.logger }
    /// The URL of the current hop.
    var currentURL: URL? { state.withLock { currentURL(in: $0) } }

    /// The URL of the current hop, for code that already holds the state's lock.
    func currentURL(in state: State) -> URL? { state.request?.url ?? originalURL }

    // MARK: Control (any thread)

    func start() {
        if let failure = prepareResume() {
            fail(failure, with: .cancelRequested)
            return
        }
        if session.isInvalidated {
            state.withLock { $0.failure = .courier(.cancelled, "The session was invalidated before the task started.", url: originalURL) }
            run(state.withLock { $0.machine.handle(.cancelRequested) })
            return
        }
        if case .delegateStream = state.withLock({ $0.bodySource }) {
            askForFirstBodyStream()
            return
        }
        if let date = task?.earliestBeginDate, date.timeIntervalSinceNow > 0 {
            // Delayed: nothing is sent before the date; then the delegate decides.
            DispatchQueue.global().asyncAfter(wallDeadline: .now() + date.timeIntervalSinceNow) { [self] in beginDelayed() }
            return
        }
        begin()
    }

    /// A streamed upload starts with its delegate's `needNewBodyStream`: the stream becomes
    /// the request's body (the request's own body is ignored, as Apple does). No stream, or no
    /// delegate to give one, fails the task.
    private func askForFirstBodyStream() {
        let url = originalURL
        guard let task, let delegate = Self.taskDelegate(of: task, in: session) else {
            fail(.courier(.requestBodyStreamExhausted, "A streamed upload needs a delegate that gives its body (urlSession(_:task:needNewBodyStream:)).", url: url), with: .cancelRequested)
            return
        }
        let session = self.session
        enqueue { [self] in
            delegate.urlSession(session, task: task, needNewBodyStream: { [self] stream in
                guard let stream else {
                    fail(.courier(.requestBodyStreamExhausted, "The delegate gave no body stream for the streamed upload.", url: url), with: .cancelRequested)
                    return
                }
                state.withLock { state in
                    state.bodySource = .request
                    state.request?.httpBody = nil
                    state.request?.httpBodyStream = stream
                }
                start()
            })
        }
    }

    /// Feeds the machine its start.
    private func begin() {
        run(state.withLock { state in
            state.startDate = Date()
            return state.machine.handle(.started)
        })
    }

    /// The earliest begin date came: asks the task delegate (on the delegate queue) whether to
    /// continue, load another request, or cancel.
    private func beginDelayed() {
        let request = state.withLock { state in state.machine.isFinished || state.cancelRequested ? nil : state.request }
        guard let request else { return }
        guard let task, let delegate = Self.taskDelegate(of: task, in: session) else {
            begin()
            return
        }
        let session = self.session
        enqueue { [self] in
            delegate.urlSession(session, task: task, willBeginDelayedRequest: request) { [self] disposition, replacement in
                switch disposition {
                case .continueLoading:
                    begin()
                case .useNewRequest:
                    if let replacement {
                        state.withLock { $0.request = replacement }
                        task.storage.withLock { $0.currentRequest = replacement }
                    }
                    begin()
                case .cancel:
                    task.cancel()
                }
            }
        }
    }

    func cancel() {
        logger.debug("task cancelled", metadata: ["task": "\(identifier)"])
        run(state.withLock { state in
            state.cancelRequested = true
            return state.machine.handle(.cancelRequested)
        })
    }

    func setSuspended(_ suspended: Bool) {
        state.withLock { $0.suspended = suspended }
        updateReading()
    }

    func setAwaitingDisposition(_ awaiting: Bool) {
        state.withLock { $0.awaitingDisposition = awaiting }
        updateReading()
    }

    /// Makes the data task a download task that carries on with this driver; nil when the
    /// task is gone or is no data task.
    func becomeDownloadTask() -> URLSessionDownloadTask? {
        guard let dataTask = task as? URLSessionDataTask else { return nil }
        let download = session.adoptAsDownload(dataTask)
        task = download
        return download
    }

    /// Tells the exchange to pause or resume when what the task needs changed. The wish is
    /// recorded under the task's lock, so the latest decision is the one that holds.
    func updateReading() {
        let target = state.withLock { state -> (exchange: HTTPExchange?, local: LocalLoad?)? in
            // Read under the task's lock (task → sink is the lock order), so a drain that
            // happens meanwhile cannot be missed by a pause decided on an older backlog.
            let backlog = sink.backlog
            let limits = sink.backlogLimits
            let wanted = state.suspended || state.awaitingDisposition || backlog > limits.high
            let resume = !state.suspended && !state.awaitingDisposition && backlog <= limits.low
            guard state.exchange != nil || state.localLoad != nil else { return nil }
            if wanted && !state.readingPaused {
                state.readingPaused = true
                state.exchange?.recordPauseWish(true)
                return (state.exchange, state.localLoad)
            }
            if resume && state.readingPaused {
                state.readingPaused = false
                state.exchange?.recordPauseWish(false)
                return (state.exchange, state.localLoad)
            }
            return nil
        }
        guard let target else { return }
        target.exchange?.applyPauseWish()
        target.local?.readingChanged()
    }

    // MARK: Carrying out the machine's actions

    /// Carries out actions in order, outside the lock.
    func run(_ actions: TaskStateMachine.Actions) {
        // By position, not `for in`: the iterator's optionals cost a metadata call each to destroy.
        for position in 0..<actions.count {
            switch actions[position] {
            case .startExchange:
                startExchange()
            case .deliverResponse:
                deliverResponse()
            case .keepBodyAside:
                break
            case .scheduleRetry(let delay):
                scheduleRetry(after: delay)
            case .askRedirectDelegate(let redirect):
                askRedirectDelegate(redirect)
            case .askForCredential:
                enqueue { [self] in askForCredential() }
            case .deliverKeptResponse:
                let kept = state.withLock { state -> Data in
                    defer { state.keptBody = Data() }
                    return state.keptBody
                }
                let decoder = state.withLock { state -> ContentDecoder? in
                    if state.decoder == nil { state.decodedBytes += Int64(kept.count) }
                    return state.decoder
                }
                kept.withUnsafeBytes { deliverBody($0, from: nil, decoder: decoder) }
            case .cancelExchange:
                let (exchange, local, loaded) = state.withLock { ($0.exchange, $0.localLoad, $0.protocolLoad) }
                exchange?.cancel()
                if let loaded { cancelProtocolLoad(loaded) }
                if let local {
                    // A local load reports its cancellation as an exchange does: as its failure.
                    local.cancel()
                    fail(.courier(.cancelled, "cancelled", url: currentURL), with: .exchangeFailed)
                }
            case .finish(let ending):
                finish(ending)
            }
        }
    }

    /// Sends the current request as a new exchange.
    func startExchange() {
        // One look at the state for what the hop needs; a protocol load of the hop before (a
        // redirect it reported) ends here.
        let (request, source, deadline, resumeRange, endedLoad) = state.withLock { state in
            defer { state.protocolLoad = nil }
            return (state.request, state.bodySource, state.deadline, state.resumeRange, state.protocolLoad)
        }
        endedLoad?.stop()
        // The protocol classes are asked first.
        let task = self.task
        if let task, let type = session.protocolClass(for: task), let request {
            startProtocolLoad(type, task: task, request: request)
            return
        }
        if let url = request?.url, LocalLoad.loads(url) {
            startLocalLoad(url)
            return
        }
        var transportRequest: TransportRequest
        var hop: ProxyHop?
        var sent: (server: SentCredential?, proxy: SentCredential?) = (nil, nil)
        do {
            guard let request, let url = request.url else { throw URLError.courier(.unsupportedURL, "The task has no request.", url: nil) }
            let proxy = try proxy(for: url)
            transportRequest = try RequestBuilder.make(request, configuration: session.frozenConfiguration, body: source, proxy: proxy, origins: session.origins)
            if let resumeRange { Self.addResumeRange(resumeRange, to: &transportRequest) }
            if let proxy, case .http = proxy.kind {
                hop = ProxyHop(server: proxy, isTunnel: transportRequest.origin.scheme == .https, tunnelTarget: transportRequest.origin.hostAndPort)
            }
            addCookies(to: &transportRequest, request: request)
            sent = addAuthorization(to: &transportRequest, request: request, source: source, proxy: hop)
            switch consultCache(request, transportRequest: &transportRequest) {
            case .send:
                break
            case .answer(let stored):
                answerFromCache(stored)
                return
            case .fail(let error):
                throw error
            }
        } catch {
            state.withLock { $0.failure = error as? URLError ?? .courier(.unknown, "\(error)", url: request?.url) }
            run(state.withLock { $0.machine.handle(.exchangeFailed) })
            return
        }
        // Timings feed URLSessionTaskMetrics, which only a task delegate receives.
        let collectsMetrics = Self.taskDelegate(of: task, in: session) != nil
        transportRequest.collectsTimings = collectsMetrics
        if let deadline { transportRequest.deadline = deadline }
        let expectedToSend: Int64
        switch transportRequest.body {
        case .empty: expectedToSend = 0
        case .bytes(let data): expectedToSend = Int64(data.count)
        case .stream(_, let length): expectedToSend = length ?? -1
        }
        let priority = task?.storage.withLock { storage -> Float in
            storage.countOfBytesExpectedToSend = expectedToSend
            storage.countOfBytesSent = 0
            return storage.priority
        }
        if let priority, let urgency = Self.urgency(forPriority: priority), !transportRequest.head.fields.contains("Priority") {
            transportRequest.head.fields.append(name: "Priority", value: "u=\(urgency)")
        }
        // The exchange is known before it starts, so no callback can find it missing. The
        // transport is read once: it has a side table (its pools hold it weakly), so each
        // retain and release of it takes the runtime's slow path.
        let loader = session.loader
        let exchange = loader.makeExchange(transportRequest, delegate: self)
        let proceed = state.withLock { state -> Bool in
            guard !state.machine.isFinished else { return false }
            state.deadline = transportRequest.deadline
            state.collectsMetrics = collectsMetrics
            state.transportRequest = transportRequest
            state.proxy = hop
            state.tunnelRefused = false
            state.resumeRangeSent = resumeRange != nil
            state.authentication.sentServer = sent.server
            state.authentication.sentProxy = sent.proxy
            state.exchange = exchange
            state.response = nil
            state.decoder = nil
            state.decodedBytes = 0
            if state.readingPaused { exchange.recordPauseWish(true) }
            // A cancel between hops found no exchange to stop: this one is stopped before it
            // starts (the transport fails a cancelled exchange at once).
            if state.cancelRequested { exchange.cancel() }
            return true
        }
        guard proceed else { return }
        if session.logsExchanges {
            logger.debug("exchange", metadata: [
                "task": "\(identifier)", "method": "\(transportRequest.head.method)", "url": "\(LogRedaction.url(request?.url))",
                "headers": "\(LogRedaction.describe(transportRequest.head.fields))",
            ])
        }
        loader.start(exchange)
    }

    /// The RFC 9218 urgency (0 most urgent, 7 least) of a task's `priority` (0 to 1); nil for
    /// the default priority, whose urgency 3 is the protocol's default and goes unsaid.
    static func urgency(forPriority priority: Float) -> Int? {
        let urgency = min(max(Int(((1 - priority) * 7).rounded(.down)), 0), 7)
        return urgency == 3 ? nil : urgency
    }

    /// Sends the same request again after `delay` seconds (a 503 or 429 with Retry-After).
    private func scheduleRetry(after delay: Double) {
        logger.debug("retry after Retry-After", metadata: ["task": "\(identifier)", "seconds": "\(delay)"])
        state.withLock { $0.keptBody = Data() }
        DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [self] in
            run(state.withLock { $0.machine.handle(.retryTimerFired) })
        }
    }

    /// Hands the current response to the sink, with a decoder for its content codings.
    private func deliverResponse() {
        guard let (response, fromCache, fromProtocol) = state.withLock({ state in
            state.response.map { ($0, state.cache.answeredFromCache, state.protocolLoad != nil) }
        }) else { return }
        var decoder: ContentDecoder?
        // A body from the cache was stored as delivered: decoded already; a protocol's body is
        // delivered as the protocol gives it.
        if !fromCache, !fromProtocol, session.decodesContent,
           let coding = (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Encoding"),
           let codings = ContentCoding.codings(fromContentEncoding: coding), !codings.isEmpty {
            let limits = session.frozenConfiguration.courierContentDecodingLimits
            guard codings.count <= limits.maximumCodings else {
                let message = "The response's body is coded \(codings.count) times; at most \(limits.maximumCodings) codings are decoded (courierContentDecodingLimits.maximumCodings)."
                fail(.courier(.cannotDecodeContentData, message, url: response.url), with: .deliveryFailed)
                return
            }
            decoder = ContentDecoder(codings: codings, limits: limits)
        }
        state.withLock { state in
            state.decoder = decoder
            state.responseDelivered = true
        }
        let progress = task?.storage.withLock { storage -> Progress? in
            storage.response = response
            storage.countOfBytesExpectedToReceive = response.expectedContentLength
            return storage.progress
        }
        progress?.totalUnitCount = response.expectedContentLength
        if let error = sink.begin(response, driver: self) {
            fail(error, with: .deliveryFailed)
        }
    }

    /// Records why the task failed and feeds the machine the event. A failure while a finished
    /// machine still delivers (a refused redirect's response) is kept for that completion.
    func fail(_ error: URLError, with event: TaskStateMachine.Event) {
        let actions = state.withLock { state -> TaskStateMachine.Actions in
            if state.failure == nil { state.failure = error }
            return state.machine.handle(event)
        }
        run(actions)
    }

    /// Completes the task: builds the metrics and hands the outcome to the sink.
    private func finish(_ ending: TaskStateMachine.Ending) {
        var decodeFailure: URLError?
        if ending == .success { decodeFailure = finishDecoding() }
        // A complete, storable response goes to the cache: through the data delegate's
        // `willCacheResponse` where Apple asks it, else straight away.
        var cacheProposal: (CachedURLResponse, URLRequest)?
        if ending == .success, decodeFailure == nil, session.cache != nil,
           state.withLock({ $0.failure == nil }), let proposal = self.cacheProposal() {
            if asksWillCacheResponse {
                cacheProposal = proposal
            } else {
                store(proposal.0, for: proposal.1)
            }
        }
        let task = self.task
        let taskDelegate = Self.taskDelegate(of: task, in: session)
        var endedLoad: LocalLoad?
        var endedProtocolLoad: URLProtocolLoad?
        var leftoverPartial: (file: DownloadFile, keep: Bool)?
        let outcome = state.withLock { state -> TaskOutcome in
            // The URL is copied out only for an error made here: a success does not need it.
            let error: URLError?
            switch ending {
            case .success: error = decodeFailure ?? state.failure
            case .cancelled: error = state.failure ?? .courier(.cancelled, "cancelled", url: currentURL(in: state))
            case .redirectFailed(let failure): error = Self.error(for: failure, url: currentURL(in: state))
            case .exchangeFailed, .deliveryFailed: error = state.failure ?? .courier(.unknown, "The task failed.", url: currentURL(in: state))
            }
            let (offer, leftover, keepLeftover) = resumeOffer(ending: ending, error: error, in: &state)
            leftoverPartial = leftover.map { ($0, keepLeftover) }
            state.exchange = nil
            endedLoad = state.localLoad
            state.localLoad = nil
            endedProtocolLoad = state.protocolLoad
            state.protocolLoad = nil
            state.decoder = nil
            var metrics: URLSessionTaskMetrics?
            if taskDelegate != nil {
                metrics = URLSessionTaskMetrics(
                    transactionMetrics: state.transactions,
                    taskInterval: DateInterval(start: state.startDate, end: max(state.startDate, Date())),
                    redirectCount: state.machine.redirectCount
                )
            }
            var outcome = TaskOutcome(error: error, response: state.response, metrics: metrics, cacheProposal: cacheProposal, resume: offer)
            if error != nil, error == state.failure { outcome.reportedError = state.reportedError }
            return outcome
        }
        endedLoad?.cancel()
        endedProtocolLoad?.stop()
        if let (file, keep) = leftoverPartial {
            // A partial file no response reached: kept for the resume data offered again, else deleted.
            if keep { _ = file.close() } else { file.remove() }
        }
        let progress = task?.storage.withLock { storage -> Progress? in
            storage.state = .completed
            storage.error = outcome.deliveredError
            if storage.response == nil { storage.response = outcome.response }
            return storage.progress
        }
        if let progress, outcome.error == nil {
            // A finished task's progress is complete, its length known or not.
            let total = max(progress.totalUnitCount, progress.completedUnitCount, 1)
            progress.totalUnitCount = total
            progress.completedUnitCount = total
        }
        if let error = outcome.error {
            logger.debug("task failed", metadata: ["task": "\(identifier)", "error": "\(error.code.rawValue) \(error.localizedDescription)"])
        } else if session.logsTaskEnds {
            logger.trace("task finished", metadata: ["task": "\(identifier)", "status": "\((outcome.response as? HTTPURLResponse)?.statusCode ?? 0)"])
        }
        sink.complete(outcome, driver: self)
    }

    static func error(for failure: RedirectPolicy.Failure, url: URL?) -> URLError {
        switch failure {
        case .tooManyRedirects(let limit):
            return .courier(.httpTooManyRedirects, "More than \(limit) redirects were followed.", url: url)
        case .badLocation(let location):
            return .courier(.badServerResponse, "The redirect's Location is not a URL: \(location).", url: url)
        }
    }
}
