import CourierCore
import CourierTransport
import Foundation
import Synchronization

/// Carries one task through the transport and delivers what happens, in Apple's order, to the
/// task's completion handler, continuation or delegates.
///
/// Transport callbacks arrive on an event loop; user calls (cancel, suspend) on any thread.
/// The runner's state sits behind a mutex; user code runs only on the session's delegate queue
/// (completion handlers, delegates) or wherever a continuation resumes its awaiting task.
final class TaskRunner: HTTPExchangeDelegate, @unchecked Sendable {
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
        /// Through a continuation (async API); data callbacks are skipped.
        case async
    }

    /// What an async task returns with its response: the body, or the downloaded file.
    enum Payload {
        case data(Data)
        case file(URL)
    }

    typealias Continuation = UnsafeContinuation<(Payload, URLResponse), any Error>

    /// Where the request body comes from.
    enum BodySource {
        /// The request's `httpBody` or `httpBodyStream`.
        case request
        /// Bytes given to an upload task.
        case data(Data)
        /// A file given to an upload task, streamed from disk.
        case file(URL)
    }

    struct State {
        var exchange: HTTPExchange?
        var continuation: Continuation?
        var body = Data()
        var response: HTTPURLResponse?
        var suspended = false
        var awaitingDisposition = false
        /// Bytes handed to the delegate queue and not yet delivered.
        var queuedBytes = 0
        /// Body bytes waiting for the next `didReceive data` call, which takes them all.
        var pendingData = Data()
        var dataBatch = Batch()
        /// What the exchange was last told: paused or not.
        var readingPaused = false
        var cancelRequested = false
        var finished = false
        /// The outcome of an async task that finished before its continuation was stored (it
        /// was cancelled before it started).
        var earlyOutcome: Result<(Payload, URLResponse), any Error>?
        /// The file a download task writes to; nil for other tasks.
        var file: DownloadFile?
        /// Body bytes in the file, and the count last reported through `didWriteData`.
        var bytesWritten: Int64 = 0
        var bytesReported: Int64 = 0
        var progressBatch = Batch()
        var startDate = Date()
        var transactions: [URLSessionTaskTransactionMetrics] = []
        var request: URLRequest?
        /// What went to the transport, from which the request as sent is rebuilt on demand.
        var transportRequest: TransportRequest?
    }

    /// Delegate-queue backlog above which the connection stops reading.
    static let deliveryHighWatermark = 4 * 1024 * 1024
    /// Backlog below which reading resumes.
    static let deliveryLowWatermark = 1024 * 1024
    /// Largest body size reserved up front from a declared Content-Length.
    static let maxReservedBodyBytes = 16 * 1024 * 1024

    unowned let task: URLSessionTask
    let delivery: Delivery
    let bodySource: BodySource
    let state = Mutex(State())

    init(task: URLSessionTask, delivery: Delivery, body: BodySource) {
        self.task = task
        self.delivery = delivery
        self.bodySource = body
    }

    var session: URLSession { task.session }

    /// Stores the continuation of an async call before the task starts; resumes it at once when
    /// the task already finished (cancelled before it could start).
    func setContinuation(_ continuation: Continuation) {
        let early = state.withLock { state -> Result<(Payload, URLResponse), any Error>? in
            if let outcome = state.earlyOutcome { return outcome }
            state.continuation = continuation
            return nil
        }
        if let early { continuation.resume(with: early) }
    }

    // MARK: Control

    func start() {
        guard let request = task.currentRequest else {
            finish(.courier(.unsupportedURL, "The task has no request.", url: nil), metrics: nil)
            return
        }
        if session.isInvalidated {
            finish(.courier(.cancelled, "The session was invalidated before the task started.", url: request.url), metrics: nil)
            return
        }
        var transportRequest: TransportRequest
        do {
            transportRequest = try RequestBuilder.make(request, configuration: session.frozenConfiguration, body: bodySource)
            // Timings feed URLSessionTaskMetrics, which only a task delegate receives.
            transportRequest.collectsTimings = taskDelegate != nil
        } catch {
            finish(error, metrics: nil)
            return
        }
        var file: DownloadFile?
        if task is URLSessionDownloadTask {
            do {
                file = try session.makeDownloadFile.withLock { $0 }()
            } catch {
                let message = (error as? DownloadFileError)?.message ?? "Cannot create the download file: \(error)."
                finish(.courier(.cannotCreateFile, message, url: request.url), metrics: nil)
                return
            }
        }
        let expectedToSend: Int64
        switch transportRequest.body {
        case .empty: expectedToSend = 0
        case .bytes(let data): expectedToSend = Int64(data.count)
        case .stream(_, let length): expectedToSend = length ?? -1
        }
        task.storage.withLock { $0.countOfBytesExpectedToSend = expectedToSend }
        // A cancel that raced with this start may have finished the task already; from here on
        // a cancel goes through the exchange.
        let proceed = state.withLock { state -> Bool in
            guard !state.finished else { return false }
            state.request = request
            state.transportRequest = transportRequest
            state.file = file
            return true
        }
        guard proceed else {
            file?.remove()
            return
        }
        // The exchange is known before it starts, so no callback can find it missing.
        let exchange = session.transport.makeExchange(transportRequest, delegate: self)
        let cancelNow = state.withLock { state -> Bool in
            state.exchange = exchange
            if state.readingPaused { exchange.recordPauseWish(true) }
            return state.cancelRequested
        }
        if cancelNow {
            exchange.cancel()
        }
        session.transport.start(exchange)
    }

    func cancel() {
        let (exchange, neverStarted) = state.withLock { state -> (HTTPExchange?, Bool) in
            state.cancelRequested = true
            return (state.exchange, state.exchange == nil && state.request == nil)
        }
        if let exchange {
            exchange.cancel()
        } else if neverStarted {
            finish(.courier(.cancelled, "cancelled", url: task.originalRequest?.url), metrics: nil)
        }
    }

    func setSuspended(_ suspended: Bool) {
        state.withLock { $0.suspended = suspended }
        updateReading()
    }

    /// Tells the exchange to pause or resume when what the task needs changed. The wish is
    /// recorded under the runner's lock, so the latest decision is the one that holds.
    private func updateReading() {
        let exchange = state.withLock { state -> HTTPExchange? in
            let wanted = state.suspended || state.awaitingDisposition || state.queuedBytes > Self.deliveryHighWatermark
            let resume = !state.suspended && !state.awaitingDisposition && state.queuedBytes <= Self.deliveryLowWatermark
            guard let exchange = state.exchange else { return nil }
            if wanted && !state.readingPaused {
                state.readingPaused = true
                exchange.recordPauseWish(true)
                return exchange
            }
            if resume && state.readingPaused {
                state.readingPaused = false
                exchange.recordPauseWish(false)
                return exchange
            }
            return nil
        }
        exchange?.applyPauseWish()
    }

    // MARK: HTTPExchangeDelegate (on an event loop)

    func exchange(_ exchange: HTTPExchange, didSendBodyBytes totalBytesSent: Int64) {
        let (previous, expected) = task.storage.withLock { storage -> (Int64, Int64) in
            let previous = storage.countOfBytesSent
            storage.countOfBytesSent = totalBytesSent
            return (previous, storage.countOfBytesExpectedToSend)
        }
        guard let delegate = taskDelegate else { return }
        let session = self.session, task = self.task
        enqueue {
            delegate.urlSession(session, task: task, didSendBodyData: totalBytesSent - previous, totalBytesSent: totalBytesSent, totalBytesExpectedToSend: expected)
        }
    }

    func exchange(_ exchange: HTTPExchange, didReceiveHead head: HTTPResponseHead) {
        guard let url = state.withLock({ $0.request?.url }) else { return }
        let response = HTTPURLResponse(url: url, head: head)
        task.storage.withLock { storage in
            storage.response = response
            storage.countOfBytesExpectedToReceive = response.expectedContentLength
        }
        task.progressIfCreated?.totalUnitCount = response.expectedContentLength
        if task is URLSessionDownloadTask {
            state.withLock { $0.response = response }
            return
        }
        switch delivery {
        case .delegate:
            state.withLock { $0.response = response }
            guard let delegate = dataDelegate, let dataTask = task as? URLSessionDataTask else { return }
            state.withLock { $0.awaitingDisposition = true }
            updateReading()
            let session = self.session
            enqueue {
                delegate.urlSession(session, dataTask: dataTask, didReceive: response) { [self] disposition in
                    dispositionArrived(disposition)
                }
            }
        case .completionHandler, .fileCompletionHandler, .async:
            let length = response.expectedContentLength
            state.withLock { state in
                state.response = response
                if length > 0 { state.body.reserveCapacity(Int(min(length, Int64(Self.maxReservedBodyBytes)))) }
            }
        }
    }

    func exchange(_ exchange: HTTPExchange, didReceiveBodyBytes bytes: UnsafeRawBufferPointer) {
        if let file = state.withLock({ $0.file }) {
            write(bytes, to: file, exchange: exchange)
            return
        }
        let received = task.storage.withLock { storage -> Int64 in
            storage.countOfBytesReceived += Int64(bytes.count)
            return storage.countOfBytesReceived
        }
        task.progressIfCreated?.completedUnitCount = received
        switch delivery {
        case .delegate:
            guard let delegate = dataDelegate, let dataTask = task as? URLSessionDataTask else { return }
            // Bytes join those not yet delivered; the delivery is queued once the loop has
            // finished the current read: one hop to the delegate queue per batch, not per
            // chunk (an HTTP/2 read carries several DATA frames).
            let startBatch = state.withLock { state -> Bool in
                state.queuedBytes += bytes.count
                state.pendingData.append(contentsOf: bytes)
                return state.dataBatch.open()
            }
            updateReading()
            if startBatch {
                exchange.afterCurrentEvent { [self] in queueDelivery(delegate, dataTask) }
            }
        case .completionHandler, .fileCompletionHandler, .async:
            state.withLock { $0.body.append(contentsOf: bytes) }
        }
    }

    /// Queues the `didReceive data` call for the bytes pending, unless it is queued already.
    /// Touches only what it is given: it may run after the task completed.
    private func queueDelivery(_ delegate: any URLSessionDataDelegate, _ dataTask: URLSessionDataTask) {
        guard state.withLock({ $0.dataBatch.markQueued() }) else { return }
        let session = dataTask.session
        session.delegateQueue.addOperation { [self] in
            let data = state.withLock { state -> Data in
                state.dataBatch.close()
                defer { state.pendingData = Data() }
                return state.pendingData
            }
            delegate.urlSession(session, dataTask: dataTask, didReceive: data)
            state.withLock { $0.queuedBytes -= data.count }
            updateReading()
        }
    }

    /// Download tasks: appends body bytes to the file and reports progress. A failed write
    /// cancels the exchange (off this call, which runs inside the connection's parse); the task
    /// then fails with `.cannotWriteToFile`.
    private func write(_ bytes: UnsafeRawBufferPointer, to file: DownloadFile, exchange: HTTPExchange) {
        guard file.write(bytes) else {
            DispatchQueue.global().async { exchange.cancel() }
            return
        }
        let count = Int64(bytes.count)
        let received = task.storage.withLock { storage -> Int64 in
            storage.countOfBytesReceived += count
            return storage.countOfBytesReceived
        }
        task.progressIfCreated?.completedUnitCount = received
        guard case .delegate = delivery, let delegate = downloadDelegate, let downloadTask = task as? URLSessionDownloadTask else { return }
        // As for data: one progress call per read, queued when the loop has finished it.
        let startBatch = state.withLock { state -> Bool in
            state.bytesWritten += count
            return state.progressBatch.open()
        }
        if startBatch { exchange.afterCurrentEvent { [self] in queueProgress(delegate, downloadTask) } }
    }

    /// Queues the `didWriteData` call for the bytes written since the last one, unless it is
    /// queued already. Touches only what it is given: it may run after the task completed.
    private func queueProgress(_ delegate: any URLSessionDownloadDelegate, _ downloadTask: URLSessionDownloadTask) {
        guard state.withLock({ $0.progressBatch.markQueued() }) else { return }
        let session = downloadTask.session
        session.delegateQueue.addOperation { [self] in
            let (written, total) = state.withLock { state -> (Int64, Int64) in
                state.progressBatch.close()
                defer { state.bytesReported = state.bytesWritten }
                return (state.bytesWritten - state.bytesReported, state.bytesWritten)
            }
            guard written > 0 else { return }
            let expected = downloadTask.countOfBytesExpectedToReceive
            delegate.urlSession(session, downloadTask: downloadTask, didWriteData: written, totalBytesWritten: total, totalBytesExpectedToWrite: expected)
        }
    }

    func exchange(_ exchange: HTTPExchange, didCompleteWithTrailers trailers: HTTPFields?, metrics: ExchangeMetrics) {
        finish(nil, metrics: metrics)
    }

    func exchange(_ exchange: HTTPExchange, didFailWith error: TransportError, metrics: ExchangeMetrics) {
        let url = state.withLock { $0.request?.url } ?? task.originalRequest?.url
        finish(.from(error, url: url), metrics: metrics)
    }

    // MARK: Completion

    private func dispositionArrived(_ disposition: URLSession.ResponseDisposition) {
        switch disposition {
        case .allow:
            state.withLock { $0.awaitingDisposition = false }
            updateReading()
        case .cancel:
            task.cancel()
        }
    }

    /// Completes the task once: records the outcome, then delivers metrics and the result in
    /// Apple's order.
    private func finish(_ failure: URLError?, metrics: ExchangeMetrics?) {
        let taskDelegate = self.taskDelegate
        let outcome = state.withLock { state -> (Data, HTTPURLResponse?, Continuation?, URLSessionTaskMetrics?, DownloadFile?)? in
            guard !state.finished else { return nil }
            state.finished = true
            state.exchange = nil
            var taskMetrics: URLSessionTaskMetrics?
            if taskDelegate != nil {
                if let metrics, let request = state.request {
                    state.transactions.append(URLSessionTaskTransactionMetrics(
                        request: state.transportRequest.map { Self.wireRequest(request, $0) } ?? request,
                        response: state.response, metrics: metrics,
                        bodyBytesAfterDecoding: metrics.responseBodyBytesReceived
                    ))
                }
                taskMetrics = URLSessionTaskMetrics(
                    transactionMetrics: state.transactions,
                    taskInterval: DateInterval(start: state.startDate, end: max(state.startDate, Date())),
                    redirectCount: 0
                )
            }
            let body = state.body
            state.body = Data()
            let continuation = state.continuation
            state.continuation = nil
            return (body, state.response, continuation, taskMetrics, state.file)
        }
        guard let (body, response, continuation, taskMetrics, file) = outcome else { return }
        let error = failure.map { settle(file, after: $0) } ?? settle(file)
        task.storage.withLock { storage in
            storage.state = .completed
            storage.error = error
        }
        let session = self.session, task = self.task
        let reportMetrics: @Sendable () -> Void = {
            if let taskDelegate, let taskMetrics { taskDelegate.urlSession(session, task: task, didFinishCollecting: taskMetrics) }
        }
        switch delivery {
        case .async:
            if taskDelegate != nil { enqueue(reportMetrics) }
            let outcome: Result<(Payload, URLResponse), any Error>
            if let error {
                outcome = .failure(error)
            } else if let response {
                // The caller owns a downloaded file from here on.
                outcome = .success((file.map { .file($0.url) } ?? .data(body), response))
            } else {
                file?.remove()
                outcome = .failure(URLError.courier(.badServerResponse, "No response was received.", url: task.originalRequest?.url))
            }
            if let continuation {
                continuation.resume(with: outcome)
            } else {
                // Finished before the continuation was stored: it is resumed when it arrives.
                let late = state.withLock { state -> Continuation? in
                    if let stored = state.continuation {
                        state.continuation = nil
                        return stored
                    }
                    state.earlyOutcome = outcome
                    return nil
                }
                late?.resume(with: outcome)
            }
            session.taskCompleted(task)
        case .completionHandler(let handler):
            enqueue {
                reportMetrics()
                handler(error == nil ? body : nil, response, error)
                session.taskCompleted(task)
            }
        case .fileCompletionHandler(let handler):
            enqueue {
                reportMetrics()
                handler(error == nil ? file?.url : nil, response, error)
                file?.remove()
                session.taskCompleted(task)
            }
        case .delegate:
            // Bytes (or progress) still waiting for the end of the loop's read go first.
            if let delegate = dataDelegate, let dataTask = task as? URLSessionDataTask { queueDelivery(delegate, dataTask) }
            if file != nil, let delegate = downloadDelegate as (any URLSessionDownloadDelegate)?, let downloadTask = task as? URLSessionDownloadTask {
                queueProgress(delegate, downloadTask)
            }
            let downloadDelegate = self.downloadDelegate
            enqueue {
                if error == nil, let file, let downloadDelegate, let downloadTask = task as? URLSessionDownloadTask {
                    downloadDelegate.urlSession(session, downloadTask: downloadTask, didFinishDownloadingTo: file.url)
                }
                file?.remove()
                reportMetrics()
                taskDelegate?.urlSession(session, task: task, didCompleteWithError: error)
                session.taskCompleted(task)
            }
        }
    }

    /// A failed task's download file is deleted; a write failure outranks the cancellation it
    /// caused.
    private func settle(_ file: DownloadFile?, after error: URLError) -> URLError {
        guard let file else { return error }
        file.remove()
        if let reason = file.failure { return .courier(.cannotWriteToFile, reason, url: error.failingURL) }
        return error
    }

    /// A finished download's file is closed; a failed write or close fails the task.
    private func settle(_ file: DownloadFile?) -> URLError? {
        guard let file, !file.close() else { return nil }
        file.remove()
        let url = state.withLock { $0.request?.url }
        return .courier(.cannotWriteToFile, file.failure ?? "The download could not be written.", url: url)
    }

    /// The request as sent, once it was handed to the transport.
    var requestAsSent: URLRequest? {
        state.withLock { state in
            guard let request = state.request, let transportRequest = state.transportRequest else { return nil }
            return Self.wireRequest(request, transportRequest)
        }
    }

    /// `request` with the fields Courier actually sends: Host, the merged caller, configured
    /// and default fields, and the framing field.
    static func wireRequest(_ request: URLRequest, _ transportRequest: TransportRequest) -> URLRequest {
        var sent = request
        sent.allHTTPHeaderFields = nil
        sent.setValue(transportRequest.head.authority, forHTTPHeaderField: "Host")
        for field in transportRequest.head.fields.fields where !["host", "content-length", "transfer-encoding", "connection"].contains(field.name.lowercased()) {
            sent.addValue(field.value, forHTTPHeaderField: field.name)
        }
        switch transportRequest.body {
        case .empty:
            if transportRequest.head.method.expectsRequestContent { sent.setValue("0", forHTTPHeaderField: "Content-Length") }
        case .bytes(let data):
            sent.setValue(String(data.count), forHTTPHeaderField: "Content-Length")
        case .stream(_, let length?):
            sent.setValue(String(length), forHTTPHeaderField: "Content-Length")
        case .stream(_, nil):
            sent.setValue("chunked", forHTTPHeaderField: "Transfer-Encoding")
        }
        return sent
    }

    // MARK: Delegates

    /// The delegate for task events: the task's own, else the session's.
    private var taskDelegate: (any URLSessionTaskDelegate)? {
        task.delegate ?? (session.delegate as? URLSessionTaskDelegate)
    }

    /// The delegate for data events: the task's own when it handles them, else the session's.
    private var dataDelegate: (any URLSessionDataDelegate)? {
        (task.delegate as? URLSessionDataDelegate) ?? (session.delegate as? URLSessionDataDelegate)
    }

    /// The delegate for download events: the task's own when it handles them, else the session's.
    private var downloadDelegate: (any URLSessionDownloadDelegate)? {
        (task.delegate as? URLSessionDownloadDelegate) ?? (session.delegate as? URLSessionDownloadDelegate)
    }

    /// Runs `work` on the session's delegate queue, after everything queued before it.
    private func enqueue(_ work: @escaping @Sendable () -> Void) {
        session.delegateQueue.addOperation(work)
    }
}

/// One call to the delegate queue that gathers what arrives meanwhile (the bytes or progress of
/// a whole read): opened by the first arrival, queued once (when the loop has finished the
/// read, or before the completion, whichever comes first), closed when the call runs and takes
/// everything gathered.
struct Batch {
    private var isOpen = false
    private var isQueued = false

    /// Opens a batch; false when one is open already (what arrived joins it).
    mutating func open() -> Bool {
        guard !isOpen else { return false }
        isOpen = true
        isQueued = false
        return true
    }

    /// Marks the open batch queued; false when none is open or it is queued already.
    mutating func markQueued() -> Bool {
        guard isOpen, !isQueued else { return false }
        isQueued = true
        return true
    }

    /// Closes the batch: what arrives from now on opens the next.
    mutating func close() {
        isOpen = false
    }
}
