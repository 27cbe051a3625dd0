import CourierSync
import CourierTransport
import Foundation

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
    func begin(_ response: URLResponse, driver: TaskDriver) -> URLError?
    /// Body bytes, decoded, lent for the call. `exchange` is the exchange that read them (nil
    /// for bytes kept aside), so deliveries can wait for the end of the loop's read.
    func receive(_ bytes: UnsafeRawBufferPointer, from exchange: HTTPExchange?, driver: TaskDriver) -> URLError?
    /// Bytes handed on and not yet consumed (delegate queue, disk): reading pauses above
    /// `backlogLimits.high` and resumes at or below `backlogLimits.low`.
    var backlog: Int { get }
    /// Where reading pauses and resumes for this sink.
    var backlogLimits: BacklogLimits { get }
    /// Delivers the outcome in Apple's order and tells the session the task is over.
    func complete(_ outcome: TaskOutcome, driver: TaskDriver)
}

extension TaskSink {
    var backlog: Int { 0 }
    var backlogLimits: BacklogLimits { .delivery }
}

/// The backlog above which a task stops reading, and at or below which it reads again.
struct BacklogLimits: Sendable {
    var high: Int
    var low: Int

    /// For bytes waiting for the delegate queue: 1 MiB and 256 KiB, four reads of a fast
    /// connection before it pauses. At 4 MiB and 1 MiB the 1 GiB h1 download to a discarding
    /// delegate peaked 1.5 MB higher (30.1–31.6 against 29.0–29.5 MB) in the same time.
    static let delivery = BacklogLimits(high: 1024 * 1024, low: 256 * 1024)

    /// True when a backlog that went from `before` to `after` passed the high mark upwards.
    func crossedHigh(from before: Int, to after: Int) -> Bool { before <= high && after > high }
    /// True when a backlog that went from `before` to `after` passed the low mark downwards.
    func crossedLow(from before: Int, to after: Int) -> Bool { before > low && after <= low }
}

/// How a task ended, as the sinks deliver it.
struct TaskOutcome: Sendable {
    var error: URLError?
    var response: URLResponse?
    var metrics: URLSessionTaskMetrics?
    /// The response to offer the data delegate's `willCacheResponse` before the metrics and the
    /// completion (then stored as it answers), for a sink that delivers through the delegate.
    var cacheProposal: (CachedURLResponse, URLRequest)?
    /// For a download task: how to make resume data, and who asked for it.
    var resume: ResumeOffer?
    /// The error to hand the caller in place of `error`, when the task failed with one it
    /// did not make (a `URLProtocol`'s own error).
    var reportedError: (any Error)?

    /// The error the caller gets.
    var deliveredError: (any Error)? { reportedError ?? error }
}

/// What an async call returns with its response: the body, or the downloaded file.
enum TaskPayload: Sendable {
    case data(Data)
    case file(URL)
}

/// The continuation of an async call, and the outcome of a task that finished before the
/// continuation was stored (cancelled before it started). Kept inside the sink's own lock.
struct AsyncSlot {
    typealias Continuation = UnsafeContinuation<(TaskPayload, URLResponse), any Error>
    typealias Outcome = Result<(TaskPayload, URLResponse), any Error>

    private enum Phase {
        case empty
        case waiting(Continuation)
        case finished(Outcome)
        case delivered
    }

    private var phase = Phase.empty

    /// Stores the continuation; returns the outcome to resume it with at once, if known.
    mutating func wait(_ continuation: Continuation) -> Outcome? {
        if case .finished(let outcome) = phase {
            phase = .delivered
            return outcome
        }
        phase = .waiting(continuation)
        return nil
    }

    /// Records the outcome; returns the continuation to resume with it, if one waits.
    mutating func finish(_ outcome: Outcome) -> Continuation? {
        if case .waiting(let continuation) = phase {
            phase = .delivered
            return continuation
        }
        phase = .finished(outcome)
        return nil
    }

    /// The outcome of a successful load, or its failure.
    static func outcome(_ error: (any Error)?, _ response: URLResponse?, _ payload: TaskPayload, url: URL?) -> Outcome {
        if let error { return .failure(error) }
        guard let response else {
            return .failure(URLError.courier(.badServerResponse, "No response was received.", url: url))
        }
        return .success((payload, response))
    }
}

/// A sink that can answer an async call (`data(for:)`, `download(for:)`).
protocol AsyncDelivering: TaskSink {
    /// Resumes `continuation` with the task's outcome, now or when it is known.
    func wait(_ continuation: AsyncSlot.Continuation)
    /// Ends the async call with `result`, and the task.
    func finishCall(_ result: AsyncSlot.Outcome, driver: TaskDriver)
    /// Takes and drops the lock `finishCall` held, on the caller's side once its await has
    /// returned. The runtime orders the resume before the await's return, but when the
    /// outcome arrives before the awaiting task has suspended, it does so with atomics a
    /// thread checker cannot see; this hold makes the order one it can.
    func settle()
}

extension AsyncDelivering {
    /// Ends the async call with `result` after the task delegate's `metrics`, as on Apple's
    /// platforms: on the delegate queue behind them when there are any (only with a task
    /// delegate), else at once, with no hop and no closure allocated.
    func endCall(with result: AsyncSlot.Outcome, after metrics: URLSessionTaskMetrics?, driver: TaskDriver) {
        guard let metrics else {
            finishCall(result, driver: driver)
            return
        }
        driver.enqueue {
            driver.reportMetrics(metrics)
            self.finishCall(result, driver: driver)
        }
    }
}

/// A data task's body gathered in memory, for a completion handler or an async call.
final class MemorySink: AsyncDelivering {
    enum Receiver: Sendable {
        case handler(@Sendable (Data?, URLResponse?, (any Error)?) -> Void)
        case async
    }

    /// Largest body size reserved up front from a declared Content-Length.
    static let maxReservedBodyBytes = 16 * 1024 * 1024

    private struct Buffer {
        var body = Data()
        /// The declared length of the body (at most ``maxReservedBodyBytes``), 0 when unknown:
        /// what to make room for at the first bytes.
        var expectedLength = 0
        var slot = AsyncSlot()
    }

    let receiver: Receiver
    private let buffer = Mutex(Buffer())

    init(_ receiver: Receiver) {
        self.receiver = receiver
    }

    func wait(_ continuation: AsyncSlot.Continuation) {
        if let early = buffer.withLock({ $0.slot.wait(continuation) }) { continuation.resume(with: early) }
    }

    func begin(_ response: URLResponse, driver: TaskDriver) -> URLError? {
        let length = response.expectedContentLength
        if length > 0 {
            buffer.withLock { $0.expectedLength = Int(min(length, Int64(Self.maxReservedBodyBytes))) }
        }
        return nil
    }

    func receive(_ bytes: UnsafeRawBufferPointer, from exchange: HTTPExchange?, driver: TaskDriver) -> URLError? {
        buffer.withLock { buffer in
            if buffer.body.isEmpty {
                // A body that comes whole in its first bytes (most small ones) is made at its
                // size in one step; a longer one gets room for all of it first.
                if bytes.count >= buffer.expectedLength {
                    buffer.body = Data(bytes)
                    return
                }
                buffer.body.reserveCapacity(buffer.expectedLength)
            }
            buffer.body.append(contentsOf: bytes)
        }
        return nil
    }

    func complete(_ outcome: TaskOutcome, driver: TaskDriver) {
        let data = buffer.withLock { buffer -> Data in
            defer { buffer.body = Data() }
            return buffer.body
        }
        switch receiver {
        case .handler(let handler):
            driver.enqueue {
                driver.reportMetrics(outcome.metrics)
                handler(outcome.error == nil ? data : nil, outcome.response, outcome.deliveredError)
                driver.taskCompleted()
            }
        case .async:
            let result = AsyncSlot.outcome(outcome.deliveredError, outcome.response, .data(data), url: driver.originalURL)
            endCall(with: result, after: outcome.metrics, driver: driver)
        }
    }

    func finishCall(_ result: AsyncSlot.Outcome, driver: TaskDriver) {
        buffer.withLock { $0.slot.finish(result) }?.resume(with: result)
        driver.taskCompleted()
    }

    func settle() {
        buffer.withLock { _ in }
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

/// Calls run in the order given, by one drain at a time, under its owner's lock: `post` says
/// whether a drain must be started (none is running), and the drain calls `takeAll` until it
/// gets nothing, which ends it. The drain runs the calls outside the lock.
///
/// The calls are held in a struct (``Call``), not as bare closures: an array holds a bare
/// closure in its most general form, so each one posted was wrapped in a reabstraction thunk
/// (an allocation) on the way in and again on the way out.
struct SerialCalls {
    /// A posted call.
    struct Call: Sendable {
        let run: @Sendable () -> Void
    }

    private var calls: [Call] = []
    private var draining = false

    /// Adds `call`; true when the caller must start a drain.
    mutating func post(_ call: @escaping @Sendable () -> Void) -> Bool {
        calls.append(Call(run: call))
        guard !draining else { return false }
        draining = true
        return true
    }

    /// The calls posted since the last take; none ends the drain.
    mutating func takeAll() -> [Call] {
        if calls.isEmpty { draining = false }
        defer { calls = [] }
        return calls
    }
}
