import CourierTransport
import Foundation
import Synchronization

/// Where a task's final response goes: one sink per delivery mode (completion `Data`, async
/// result, delegate data, download file). The driver decides *what* is delivered — which
/// response, which (decoded) bytes, which outcome; a sink decides only *how* the caller hears of
/// it, in Apple's order, on the delegate queue.
///
/// Calls arrive one at a time for a task: `begin`, then `receive` zero or more times (on the
/// exchange's event loop, or on the delegate queue for a redirect body kept aside), then
/// `complete` once. A sink never calls into the driver while holding its own lock.
protocol TaskSink: AnyObject, Sendable {
    /// The response to deliver arrived. Nil, or the error that fails the task (a download
    /// file that cannot be created).
    func begin(_ response: HTTPURLResponse, driver: TaskDriver) -> URLError?
    /// Body bytes, decoded, lent for the call. `exchange` is the exchange that read them (nil
    /// for bytes kept aside), so deliveries can wait for the end of the loop's read.
    func receive(_ bytes: UnsafeRawBufferPointer, from exchange: HTTPExchange?, driver: TaskDriver) -> URLError?
    /// Bytes handed on and not yet consumed (delegate queue, disk): reading pauses above
    /// `TaskDriver.deliveryHighWatermark`.
    var backlog: Int { get }
    /// Delivers the outcome in Apple's order and tells the session the task is over.
    func complete(_ outcome: TaskOutcome, driver: TaskDriver)
}

extension TaskSink {
    var backlog: Int { 0 }
}

/// How a task ended, as the sinks deliver it.
struct TaskOutcome: Sendable {
    var error: URLError?
    var response: HTTPURLResponse?
    var metrics: URLSessionTaskMetrics?
}

/// What an async call returns with its response: the body, or the downloaded file.
enum TaskPayload: Sendable {
    case data(Data)
    case file(URL)
}

/// The continuation of an async call, and the outcome of a task that finished before the
/// continuation was stored (cancelled before it started).
final class AsyncResult: Sendable {
    typealias Continuation = UnsafeContinuation<(TaskPayload, URLResponse), any Error>
    typealias Outcome = Result<(TaskPayload, URLResponse), any Error>

    private enum Slot {
        case empty
        case waiting(Continuation)
        case finished(Outcome)
        case delivered
    }

    private let slot = Mutex(Slot.empty)

    /// Stores the continuation, or resumes it at once when the outcome is already known.
    func wait(_ continuation: Continuation) {
        let early = slot.withLock { slot -> Outcome? in
            if case .finished(let outcome) = slot {
                slot = .delivered
                return outcome
            }
            slot = .waiting(continuation)
            return nil
        }
        if let early { continuation.resume(with: early) }
    }

    /// Resumes the continuation with `outcome`, now or when it arrives.
    func resume(_ outcome: Outcome) {
        let continuation = slot.withLock { slot -> Continuation? in
            if case .waiting(let continuation) = slot {
                slot = .delivered
                return continuation
            }
            slot = .finished(outcome)
            return nil
        }
        continuation?.resume(with: outcome)
    }

    /// The outcome of a successful load, or its failure.
    static func outcome(_ error: URLError?, _ response: URLResponse?, _ payload: TaskPayload, url: URL?) -> Outcome {
        if let error { return .failure(error) }
        guard let response else {
            return .failure(URLError.courier(.badServerResponse, "No response was received.", url: url))
        }
        return .success((payload, response))
    }
}

/// A data task's body gathered in memory, for a completion handler or an async call.
final class MemorySink: TaskSink {
    enum Receiver: Sendable {
        case handler(@Sendable (Data?, URLResponse?, (any Error)?) -> Void)
        case async(AsyncResult)
    }

    /// Largest body size reserved up front from a declared Content-Length.
    static let maxReservedBodyBytes = 16 * 1024 * 1024

    let receiver: Receiver
    private let body = Mutex(Data())

    init(_ receiver: Receiver) {
        self.receiver = receiver
    }

    func begin(_ response: HTTPURLResponse, driver: TaskDriver) -> URLError? {
        let length = response.expectedContentLength
        if length > 0 {
            body.withLock { $0.reserveCapacity(Int(min(length, Int64(Self.maxReservedBodyBytes)))) }
        }
        return nil
    }

    func receive(_ bytes: UnsafeRawBufferPointer, from exchange: HTTPExchange?, driver: TaskDriver) -> URLError? {
        body.withLock { $0.append(contentsOf: bytes) }
        return nil
    }

    func complete(_ outcome: TaskOutcome, driver: TaskDriver) {
        let data = body.withLock { body -> Data in
            defer { body = Data() }
            return body
        }
        switch receiver {
        case .handler(let handler):
            driver.enqueue {
                driver.reportMetrics(outcome.metrics)
                handler(outcome.error == nil ? data : nil, outcome.response, outcome.error)
                driver.taskCompleted()
            }
        case .async(let result):
            if outcome.metrics != nil { driver.enqueue { driver.reportMetrics(outcome.metrics) } }
            result.resume(AsyncResult.outcome(outcome.error, outcome.response, .data(data), url: driver.originalURL))
            driver.taskCompleted()
        }
    }
}

/// A data task's events for its delegates: `didReceive response` (reading waits for the
/// disposition), `didReceive data` once per read, then metrics and completion.
final class DelegateDataSink: TaskSink {
    /// Who hears of the data: resolved once, when the response arrives.
    private struct Receiver {
        let delegate: any URLSessionDataDelegate
        let task: URLSessionDataTask
    }

    private struct Pending {
        var receiver: Receiver?
        /// Bytes waiting for the next `didReceive data` call, which takes them all.
        var data = Data()
        /// Bytes handed to the delegate queue and not yet delivered.
        var queuedBytes = 0
        var batch = Batch()
    }

    private let pending = Mutex(Pending())

    var backlog: Int { pending.withLock { $0.queuedBytes } }

    func begin(_ response: HTTPURLResponse, driver: TaskDriver) -> URLError? {
        guard let delegate = driver.dataDelegate, let dataTask = driver.task as? URLSessionDataTask else { return nil }
        pending.withLock { $0.receiver = Receiver(delegate: delegate, task: dataTask) }
        driver.setAwaitingDisposition(true)
        let session = driver.session
        driver.enqueue {
            delegate.urlSession(session, dataTask: dataTask, didReceive: response) { disposition in
                driver.dispositionArrived(disposition)
            }
        }
        return nil
    }

    func receive(_ bytes: UnsafeRawBufferPointer, from exchange: HTTPExchange?, driver: TaskDriver) -> URLError? {
        // Bytes join those not yet delivered; the delivery is queued once the loop has
        // finished the current read: one hop to the delegate queue per batch, not per chunk
        // (an HTTP/2 read carries several DATA frames).
        let outcome = pending.withLock { pending -> (receiver: Receiver, startBatch: Bool, crossedHigh: Bool)? in
            guard let receiver = pending.receiver else { return nil }
            let before = pending.queuedBytes
            pending.queuedBytes += bytes.count
            pending.data.append(contentsOf: bytes)
            let crossedHigh = before <= TaskDriver.deliveryHighWatermark && pending.queuedBytes > TaskDriver.deliveryHighWatermark
            return (receiver, pending.batch.open(), crossedHigh)
        }
        guard let (receiver, startBatch, crossedHigh) = outcome else { return nil }
        let delegate = receiver.delegate, dataTask = receiver.task
        // The backlog matters to reading only when it crosses a watermark.
        if crossedHigh { driver.updateReading() }
        if startBatch {
            if let exchange {
                exchange.afterCurrentEvent { [self] in queueDelivery(delegate, dataTask, driver) }
            } else {
                queueDelivery(delegate, dataTask, driver)
            }
        }
        return nil
    }

    /// Queues the `didReceive data` call for the bytes pending, unless it is queued already.
    private func queueDelivery(_ delegate: any URLSessionDataDelegate, _ dataTask: URLSessionDataTask, _ driver: TaskDriver) {
        guard pending.withLock({ $0.batch.markQueued() }) else { return }
        let session = driver.session
        driver.enqueue { [self] in
            let data = pending.withLock { pending -> Data in
                pending.batch.close()
                defer { pending.data = Data() }
                return pending.data
            }
            delegate.urlSession(session, dataTask: dataTask, didReceive: data)
            let crossedLow = pending.withLock { pending -> Bool in
                let before = pending.queuedBytes
                pending.queuedBytes -= data.count
                return before > TaskDriver.deliveryLowWatermark && pending.queuedBytes <= TaskDriver.deliveryLowWatermark
            }
            if crossedLow { driver.updateReading() }
        }
    }

    func complete(_ outcome: TaskOutcome, driver: TaskDriver) {
        // Bytes still waiting for the end of the loop's read go first.
        if let receiver = pending.withLock({ $0.receiver }) {
            queueDelivery(receiver.delegate, receiver.task, driver)
        }
        let taskDelegate = driver.taskDelegate
        let session = driver.session
        guard let task = driver.task else { return }
        driver.enqueue {
            driver.reportMetrics(outcome.metrics)
            taskDelegate?.urlSession(session, task: task, didCompleteWithError: outcome.error)
            driver.taskCompleted()
        }
    }
}

/// One call to the delegate queue that gathers what arrives meanwhile (the bytes of a whole
/// read): opened by the first arrival, queued once (when the loop has finished the read, or
/// before the completion, whichever comes first), closed when the call runs and takes
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
