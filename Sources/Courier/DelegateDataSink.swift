import CourierPolicies
import CourierSync
import CourierTransport
import Foundation

/// A data task's events for its delegates: `didReceive response`, `didReceive data` once per
/// read, then metrics and completion.
///
/// Reading waits for the response's disposition, and so do the body and the completion: bytes
/// that arrived meanwhile are held. `.allow` delivers them; `.becomeDownload` turns the task into
/// a download task (`didBecome downloadTask`), whose file receives the held bytes and the rest
/// through a ``FileSink``. A `multipart/x-mixed-replace` body is delivered part by part: a
/// `didReceive response` for each part (its own header fields), then that part's data.
final class DelegateDataSink: TaskSink {
    /// Who hears of the data: resolved once, when the response arrives.
    private struct Receiver {
        let delegate: any URLSessionDataDelegate
        let task: URLSessionDataTask
    }

    private enum Phase {
        /// The delegate has the response and has not answered.
        case awaitingDisposition
        case delivering
        /// Becoming a download: the held bytes go to the file; new ones wait behind them.
        case switching(FileSink)
        /// A download task now: everything goes to its file sink.
        case download(FileSink)
    }

    private struct Pending {
        var receiver: Receiver?
        var phase = Phase.delivering
        var response: URLResponse?
        /// Bytes held while reading waits for the disposition (or for the file of a download
        /// the task is becoming).
        var data = Data()
        /// Reads waiting for the next delivery, which makes one `didReceive data` call for each.
        /// A large read is its own `Data` (``ReadCopies``), taken or copied before the lock is
        /// taken and added here whole, so the delegate queue, which takes them under this lock,
        /// never waits for a large copy; small ones are joined.
        var reads = WaitingReads()
        /// Bytes handed to the delegate queue and not yet delivered.
        var queuedBytes = 0
        var batch = Batch()
        /// A successful completion that came before the disposition.
        var deferredCompletion: TaskOutcome?
        /// The parts of a `multipart/x-mixed-replace` body.
        var multipart: MultipartReplaceParser?
        /// The parts could not be read: the task fails, and later bytes are dropped.
        var multipartFailed = false
        /// Delegate calls whose order matters (data, parts, the completion), in that order,
        /// for the drain that runs them on the delegate queue (``send(_:driver:)``).
        var outbox = SerialCalls()

        /// Adds a large read, or the bytes held for the disposition, after those waiting.
        mutating func add(_ read: Data) -> (startBatch: Bool, crossedHigh: Bool) {
            reads.add(read)
            return added(read.count)
        }

        /// Adds a read under ``ReadCopies/smallest`` after those waiting.
        mutating func add(small read: SmallRead, copies: ReadCopies) -> (startBatch: Bool, crossedHigh: Bool) {
            reads.add(small: read.bytes, copies: copies)
            return added(read.bytes.count)
        }

        /// The reads waiting, for their delivery; the batch closes.
        mutating func takeReads() -> [Data] {
            batch.close()
            return reads.take()
        }

        /// `count` more bytes wait for the delegate: whether a batch opened, and whether the
        /// backlog crossed its high mark.
        private mutating func added(_ count: Int) -> (startBatch: Bool, crossedHigh: Bool) {
            let before = queuedBytes
            queuedBytes += count
            return (batch.open(), BacklogLimits.delivery.crossedHigh(from: before, to: queuedBytes))
        }
    }

    /// A small read's bytes, for ``Pending/add(small:copies:)`` under the lock. They are copied
    /// there and not kept, so they may cross into the lock's region.
    private struct SmallRead: @unchecked Sendable {
        let bytes: UnsafeRawBufferPointer
    }

    private let pending = Mutex(Pending())
    private let copies = ReadCopies.shared

    var backlog: Int {
        let (queued, file) = pending.withLock { pending -> (Int, FileSink?) in
            if case .download(let file) = pending.phase { return (0, file) }
            return (pending.queuedBytes, nil)
        }
        return file?.backlog ?? queued
    }

    var backlogLimits: BacklogLimits {
        if case .download(let file) = pending.withLock({ $0.phase }) { return file.backlogLimits }
        return .delivery
    }

    func begin(_ response: URLResponse, driver: TaskDriver) -> URLError? {
        guard let delegate = driver.dataDelegate, let dataTask = driver.task as? URLSessionDataTask else { return nil }
        let receiver = Receiver(delegate: delegate, task: dataTask)
        if let contentType = (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Type"),
           let boundary = MultipartReplaceParser.boundary(ofContentType: contentType) {
            // Each part has its own response; the whole has none.
            pending.withLock { pending in
                pending.receiver = receiver
                pending.response = response
                pending.multipart = MultipartReplaceParser(boundary: boundary)
            }
            return nil
        }
        pending.withLock { pending in
            pending.receiver = receiver
            pending.response = response
            pending.phase = .awaitingDisposition
        }
        driver.setAwaitingDisposition(true)
        let session = driver.session
        driver.enqueue { [self] in
            delegate.urlSession(session, dataTask: dataTask, didReceive: response) { [self] disposition in
                dispositionArrived(disposition, driver: driver)
            }
        }
        return nil
    }

    func receive(_ bytes: UnsafeRawBufferPointer, from exchange: HTTPExchange?, driver: TaskDriver) -> URLError? {
        enum Route { case none, forward(FileSink), parts(Receiver), deliver(Receiver) }
        let route = pending.withLock { pending -> Route in
            switch pending.phase {
            case .download(let file):
                return .forward(file)
            case .awaitingDisposition, .switching:
                // Reading is paused: at most what the current read brought waits here.
                pending.data.append(contentsOf: bytes)
                return .none
            case .delivering:
                guard let receiver = pending.receiver else { return .none }
                if pending.multipart != nil || pending.multipartFailed { return .parts(receiver) }
                return .deliver(receiver)
            }
        }
        switch route {
        case .none:
            return nil
        case .forward(let file):
            return file.receive(bytes, from: exchange, driver: driver)
        case .parts(let receiver):
            return receiveParts(bytes, receiver, driver: driver)
        case .deliver(let receiver):
            // A delivering task stays delivering. A large read becomes a `Data` outside the
            // lock (see Pending.reads), then joins those not yet delivered; a small one is
            // copied in with the small ones before it (WaitingReads).
            if bytes.count < copies.smallest {
                deliver(small: bytes, receiver, from: exchange, driver: driver)
            } else {
                deliver(copies.data(taking: bytes, from: exchange), receiver, from: exchange, driver: driver)
            }
            return nil
        }
    }

    /// Adds a read to those waiting for the delegate. Its delivery is queued once the loop has
    /// finished the current read: one hop to the delegate queue per batch, not per chunk (an
    /// HTTP/2 read carries several DATA frames).
    private func deliver(_ read: Data, _ receiver: Receiver, from exchange: HTTPExchange?, driver: TaskDriver) {
        let (startBatch, crossedHigh) = pending.withLock { $0.add(read) }
        batchGrew(startBatch: startBatch, crossedHigh: crossedHigh, receiver, from: exchange, driver: driver)
    }

    /// ``deliver(_:_:from:driver:)`` for a read under a quarter of a buffer
    /// (``Pending/add(small:copies:)``).
    private func deliver(small bytes: UnsafeRawBufferPointer, _ receiver: Receiver, from exchange: HTTPExchange?, driver: TaskDriver) {
        let read = SmallRead(bytes: bytes)
        let (startBatch, crossedHigh) = pending.withLock { [copies] in $0.add(small: read, copies: copies) }
        batchGrew(startBatch: startBatch, crossedHigh: crossedHigh, receiver, from: exchange, driver: driver)
    }

    /// After a read joined the batch: reading pauses when the backlog crossed its high mark,
    /// and the delivery of a batch the read opened is queued.
    private func batchGrew(startBatch: Bool, crossedHigh: Bool, _ receiver: Receiver, from exchange: HTTPExchange?, driver: TaskDriver) {
        // The backlog matters to reading only when it crosses a watermark.
        if crossedHigh { driver.updateReading() }
        guard startBatch else { return }
        if let exchange {
            exchange.afterCurrentEvent { [self] in queueDelivery(receiver.delegate, receiver.task, driver) }
        } else {
            queueDelivery(receiver.delegate, receiver.task, driver)
        }
    }

    /// Queues the `didReceive data` calls for the reads pending, unless they are queued already.
    ///
    /// The batch is marked and the call posted under one hold of the lock: the disposition
    /// (on the delegate queue) and the end of the body (on the loop or the protocol thread)
    /// may both get here, and the one that finds the batch queued goes on to send the
    /// completion, which must not overtake the data call.
    private func queueDelivery(_ delegate: any URLSessionDataDelegate, _ dataTask: URLSessionDataTask, _ driver: TaskDriver) {
        let session = driver.session
        let wake = pending.withLock { pending -> Bool in
            guard pending.batch.markQueued() else { return false }
            return pending.outbox.post { [self] in
                let reads = self.pending.withLock { $0.takeReads() }
                var count = 0
                for data in reads {
                    delegate.urlSession(session, dataTask: dataTask, didReceive: data)
                    count += data.count
                }
                delivered(count, driver: driver)
            }
        }
        if wake { wakeDrain(driver) }
    }

    /// Sends `call` to the delegate queue after the calls sent before it.
    ///
    /// The delegate queue is woken once the lock is released. Woken under it (as an
    /// `addOperation` inside the lock was), the queue's thread could run at once on this
    /// thread's core and spin on the lock this thread still held: a fifth of a 1 GiB
    /// download's CPU time with both threads on one core.
    private func send(_ call: @escaping @Sendable () -> Void, driver: TaskDriver) {
        if pending.withLock({ $0.outbox.post(call) }) { wakeDrain(driver) }
    }

    /// Starts a drain on the delegate queue: the outbox had been empty.
    private func wakeDrain(_ driver: TaskDriver) {
        driver.enqueue { [self] in drain() }
    }

    /// Runs the outbox's calls in order, outside the lock, until it is empty.
    private func drain() {
        while true {
            let calls = pending.withLock { $0.outbox.takeAll() }
            guard !calls.isEmpty else { return }
            for call in calls { call.run() }
        }
    }

    /// Bytes reached the delegate: reading resumes when the backlog fell below its mark.
    private func delivered(_ count: Int, driver: TaskDriver) {
        let crossedLow = pending.withLock { pending -> Bool in
            let before = pending.queuedBytes
            pending.queuedBytes -= count
            return BacklogLimits.delivery.crossedLow(from: before, to: pending.queuedBytes)
        }
        if crossedLow { driver.updateReading() }
    }

    // MARK: Disposition

    private func dispositionArrived(_ disposition: URLSession.ResponseDisposition, driver: TaskDriver) {
        switch disposition {
        case .allow:
            let (receiver, startBatch, deferred) = pending.withLock { pending -> (Receiver?, Bool, TaskOutcome?) in
                guard case .awaitingDisposition = pending.phase else { return (nil, false, nil) }
                pending.phase = .delivering
                var startBatch = false
                if !pending.data.isEmpty {
                    startBatch = pending.add(pending.data).startBatch
                    pending.data = Data()
                }
                defer { pending.deferredCompletion = nil }
                return (pending.receiver, startBatch, pending.deferredCompletion)
            }
            if startBatch, let receiver { queueDelivery(receiver.delegate, receiver.task, driver) }
            driver.setAwaitingDisposition(false)
            if let deferred { complete(deferred, driver: driver) }
        case .cancel:
            let deferred = pending.withLock { pending -> TaskOutcome? in
                guard case .awaitingDisposition = pending.phase else { return nil }
                pending.phase = .delivering
                pending.data = Data()
                defer { pending.deferredCompletion = nil }
                return pending.deferredCompletion
            }
            if var deferred {
                // The body had come already: the task ends cancelled all the same.
                let cancelled = URLError.courier(.cancelled, "cancelled", url: driver.currentURL)
                deferred.error = cancelled
                deferred.cacheProposal = nil
                driver.task?.storage.withLock { $0.error = cancelled }
                complete(deferred, driver: driver)
            } else {
                driver.task?.cancel()
            }
        case .becomeDownload:
            becomeDownload(driver: driver)
        case .becomeStream:
            becomeStream(driver: driver)
        }
    }

    /// Turns the task into a stream task on its connection: the delegate hears `didBecome
    /// streamTask` before the stream task's first event. Held body bytes (or a finished body)
    /// mean the connection has moved on: the task fails.
    private func becomeStream(driver: TaskDriver) {
        let receiver = pending.withLock { pending -> Receiver? in
            guard case .awaitingDisposition = pending.phase, let receiver = pending.receiver else { return nil }
            guard pending.data.isEmpty, pending.deferredCompletion == nil else { return nil }
            pending.phase = .delivering
            return receiver
        }
        guard let receiver else {
            let refusal = URLError.courier(.unknown, "The data task cannot become a stream task: its response body had begun.", url: driver.currentURL)
            driver.fail(refusal, with: .deliveryFailed)
            driver.setAwaitingDisposition(false)
            return
        }
        let session = driver.session
        driver.becomeStreamTask { streamTask in
            driver.enqueue { receiver.delegate.urlSession(session, dataTask: receiver.task, didBecome: streamTask) }
        } failed: { error in
            driver.fail(error, with: .deliveryFailed)
            driver.setAwaitingDisposition(false)
        }
    }

    /// Turns the task into a download task: the delegate hears `didBecome downloadTask`, the
    /// held bytes go to a new file, then the rest of the body, and the download delegate's
    /// events follow (for the new task).
    private func becomeDownload(driver: TaskDriver) {
        let threshold = driver.session.slowDiskWriteThreshold.withLock { $0 }
        let file = FileSink(.delegate, slowWriteThreshold: threshold)
        let start = pending.withLock { pending -> (Receiver, URLResponse)? in
            guard case .awaitingDisposition = pending.phase, let receiver = pending.receiver, let response = pending.response else { return nil }
            pending.phase = .switching(file)
            return (receiver, response)
        }
        guard let (receiver, response) = start, let downloadTask = driver.becomeDownloadTask() else { return }
        let session = driver.session
        driver.enqueue {
            receiver.delegate.urlSession(session, dataTask: receiver.task, didBecome: downloadTask)
        }
        if let error = file.begin(response, driver: driver) { driver.fail(error, with: .deliveryFailed) }
        // The held bytes first; any that arrive meanwhile join them, in order.
        var deferred: TaskOutcome?
        while true {
            let held = pending.withLock { pending -> Data? in
                guard !pending.data.isEmpty else {
                    pending.phase = .download(file)
                    deferred = pending.deferredCompletion
                    pending.deferredCompletion = nil
                    return nil
                }
                defer { pending.data = Data() }
                return pending.data
            }
            guard let held else { break }
            if let error = held.withUnsafeBytes({ file.receive($0, from: nil, driver: driver) }) {
                driver.fail(error, with: .deliveryFailed)
            }
        }
        if let deferred { file.complete(deferred, driver: driver) }
        driver.setAwaitingDisposition(false)
    }

    // MARK: multipart/x-mixed-replace

    private enum PartEvent {
        case response(HTTPURLResponse)
        case data(Data)
    }

    /// Splits the bytes into parts and queues each part's response and data, in order.
    private func receiveParts(_ bytes: UnsafeRawBufferPointer, _ receiver: Receiver, driver: TaskDriver) -> URLError? {
        let input = Data(bytes)
        let (events, failed) = pending.withLock { pending -> ([PartEvent], Bool) in
            guard var parser = pending.multipart else { return ([], false) }
            var events: [PartEvent] = []
            let outer = pending.response as? HTTPURLResponse
            var failure: MultipartReplaceParser.Failure?
            input.withUnsafeBytes { bytes in
                do throws(MultipartReplaceParser.Failure) {
                    try parser.parse(bytes) { Self.collect($0, into: &events, outer: outer) }
                } catch {
                    failure = error
                }
            }
            // After a failure nothing more is parsed (the task fails); what came before it is
            // still delivered.
            pending.multipart = failure == nil ? parser : nil
            pending.multipartFailed = failure != nil
            return (events, failure != nil)
        }
        queueParts(events, receiver, driver: driver)
        guard !failed else {
            return .courier(.cannotParseResponse, "A part of the multipart/x-mixed-replace response has a head over \(MultipartReplaceParser.maximumHeadBytes) bytes.", url: driver.currentURL)
        }
        return nil
    }

    /// Adds a parser event to the part events, joining body bytes of one part into one `Data`.
    private static func collect(_ event: MultipartReplaceParser.Event, into events: inout [PartEvent], outer: HTTPURLResponse?) {
        switch event {
        case .partBegan(let fields):
            guard let outer, let url = outer.url else { return }
            var headers: [String: String] = [:]
            for (name, value) in fields { headers[name] = headers[name].map { "\($0), \(value)" } ?? value }
            if let part = HTTPURLResponse(url: url, statusCode: outer.statusCode, httpVersion: "HTTP/1.1", headerFields: headers) {
                events.append(.response(part))
            }
        case .body(let bytes):
            if case .data(var data) = events.last {
                data.append(contentsOf: bytes)
                events[events.count - 1] = .data(data)
            } else {
                events.append(.data(Data(bytes)))
            }
        case .partEnded:
            break
        }
    }

    private func queueParts(_ events: [PartEvent], _ receiver: Receiver, driver: TaskDriver) {
        let session = driver.session
        for event in events {
            switch event {
            case .response(let part):
                send({
                    receiver.delegate.urlSession(session, dataTask: receiver.task, didReceive: part) { disposition in
                        if disposition == .cancel { receiver.task.cancel() }
                    }
                }, driver: driver)
            case .data(let data):
                let crossedHigh = pending.withLock { pending -> Bool in
                    let before = pending.queuedBytes
                    pending.queuedBytes += data.count
                    return BacklogLimits.delivery.crossedHigh(from: before, to: pending.queuedBytes)
                }
                if crossedHigh { driver.updateReading() }
                send({ [self] in
                    receiver.delegate.urlSession(session, dataTask: receiver.task, didReceive: data)
                    delivered(data.count, driver: driver)
                }, driver: driver)
            }
        }
    }

    // MARK: Completion

    func complete(_ outcome: TaskOutcome, driver: TaskDriver) {
        enum Route { case deferred, forward(FileSink), finish(Receiver?, [PartEvent]) }
        let route = pending.withLock { pending -> Route in
            switch pending.phase {
            case .download(let file):
                return .forward(file)
            case .switching:
                pending.deferredCompletion = outcome
                return .deferred
            case .awaitingDisposition where outcome.error == nil:
                // The body came before the delegate answered: the answer decides.
                pending.deferredCompletion = outcome
                return .deferred
            case .awaitingDisposition:
                // A failure or a cancel ends the task whatever the delegate answers.
                pending.phase = .delivering
                pending.data = Data()
                return .finish(pending.receiver, [])
            case .delivering:
                var events: [PartEvent] = []
                if var parser = pending.multipart {
                    let outer = pending.response as? HTTPURLResponse
                    parser.finish { Self.collect($0, into: &events, outer: outer) }
                    pending.multipart = parser
                }
                return .finish(pending.receiver, events)
            }
        }
        switch route {
        case .deferred:
            return
        case .forward(let file):
            file.complete(outcome, driver: driver)
        case .finish(let receiver, let events):
            if let receiver {
                if !events.isEmpty { queueParts(events, receiver, driver: driver) }
                // Bytes still waiting for the end of the loop's read go first.
                queueDelivery(receiver.delegate, receiver.task, driver)
            }
            finish(outcome, driver: driver)
        }
    }

    /// Queues the cache proposal, the metrics and the completion.
    private func finish(_ outcome: TaskOutcome, driver: TaskDriver) {
        let taskDelegate = driver.taskDelegate
        let session = driver.session
        guard let task = driver.task else { return }
        let finish: @Sendable () -> Void = {
            driver.reportMetrics(outcome.metrics)
            taskDelegate?.urlSession(session, task: task, didCompleteWithError: outcome.deliveredError)
            driver.taskCompleted()
        }
        // Apple's order: the last data, `willCacheResponse`, the metrics, the completion.
        if let (proposal, request) = outcome.cacheProposal, let dataTask = task as? URLSessionDataTask, let delegate = driver.dataDelegate {
            send({
                delegate.urlSession(session, dataTask: dataTask, willCacheResponse: proposal) { chosen in
                    driver.store(chosen, for: request)
                    driver.enqueue(finish)
                }
            }, driver: driver)
            return
        }
        send(finish, driver: driver)
    }
}
