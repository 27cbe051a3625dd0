import CourierSync
import CourierTransport
import Foundation

/// The sink of `bytes(for:)`: hands the response to the waiting call, then queues the body's
/// chunks for the ``URLSession/AsyncBytes`` iterator. A consumer slower than the network
/// fills the queue past ``limits``' high mark, which pauses reading; taking chunks below the
/// low mark resumes it, so memory stays bounded whatever the body's size.
final class BytesSink: TaskSink, @unchecked Sendable {
    typealias ResponseContinuation = CheckedContinuation<URLResponse, any Error>
    /// Chunks are byte arrays, not `Data`: the iterator reads them a byte at a time, and each
    /// read of a `Data` checks its storage object for exclusive access at run time.
    typealias ChunkContinuation = CheckedContinuation<[UInt8]?, any Error>

    /// Pauses reading above 1 MiB queued, resumes at 256 KiB.
    static let limits = BacklogLimits(high: 1024 * 1024, low: 256 * 1024)

    private struct State {
        var responseWaiter: ResponseContinuation?
        /// The response, or the failure, that came before anyone waited for it.
        var early: Result<URLResponse, any Error>?
        var chunks: [[UInt8]] = []
        var queuedBytes = 0
        var chunkWaiter: ChunkContinuation?
        /// The end of the body: nil while it streams, then success or the task's error.
        var end: Result<Void, any Error>?
    }

    private let state = Mutex(State())
    /// The driver, for reading decisions; set when the task is made.
    private let driverBox = Mutex<TaskDriver?>(nil)

    var backlog: Int { state.withLock { $0.queuedBytes } }
    var backlogLimits: BacklogLimits { Self.limits }

    func attach(_ driver: TaskDriver) {
        driverBox.withLock { $0 = driver }
    }

    /// Waits for the response (or the task's failure before it).
    func waitForResponse(_ continuation: ResponseContinuation) {
        let early = state.withLock { state -> Result<URLResponse, any Error>? in
            if let early = state.early { return early }
            state.responseWaiter = continuation
            return nil
        }
        if let early { continuation.resume(with: early) }
    }

    /// The next chunk of the body; nil at its end. Throws the task's error.
    func nextChunk(_ continuation: ChunkContinuation) {
        enum Answer { case chunk([UInt8], resumeReading: Bool), end(Result<Void, any Error>), wait }
        let answer = state.withLock { state -> Answer in
            if !state.chunks.isEmpty {
                let chunk = state.chunks.removeFirst()
                let before = state.queuedBytes
                state.queuedBytes -= chunk.count
                return .chunk(chunk, resumeReading: Self.limits.crossedLow(from: before, to: state.queuedBytes))
            }
            if let end = state.end { return .end(end) }
            state.chunkWaiter = continuation
            return .wait
        }
        switch answer {
        case .chunk(let chunk, let resumeReading):
            if resumeReading { driverBox.withLock { $0 }?.updateReading() }
            continuation.resume(returning: chunk)
        case .end(.success):
            continuation.resume(returning: nil)
        case .end(.failure(let error)):
            continuation.resume(throwing: error)
        case .wait:
            break
        }
    }

    // MARK: TaskSink

    func begin(_ response: URLResponse, driver: TaskDriver) -> URLError? {
        let waiter = state.withLock { state -> ResponseContinuation? in
            guard let waiter = state.responseWaiter else {
                state.early = .success(response)
                return nil
            }
            state.responseWaiter = nil
            state.early = .success(response)
            return waiter
        }
        waiter?.resume(returning: response)
        return nil
    }

    func receive(_ bytes: UnsafeRawBufferPointer, from exchange: HTTPExchange?, driver: TaskDriver) -> URLError? {
        let chunk = [UInt8](bytes)
        let (waiter, crossedHigh) = state.withLock { state -> (ChunkContinuation?, Bool) in
            if let waiter = state.chunkWaiter {
                state.chunkWaiter = nil
                return (waiter, false)
            }
            let before = state.queuedBytes
            state.chunks.append(chunk)
            state.queuedBytes += chunk.count
            return (nil, Self.limits.crossedHigh(from: before, to: state.queuedBytes))
        }
        if crossedHigh { driver.updateReading() }
        waiter?.resume(returning: chunk)
        return nil
    }

    func complete(_ outcome: TaskOutcome, driver: TaskDriver) {
        // The end reaches the sequence's reader after the task delegate's metrics, when it gets any.
        if let metrics = outcome.metrics {
            driver.enqueue {
                driver.reportMetrics(metrics)
                self.end(outcome, driver: driver)
            }
        } else {
            end(outcome, driver: driver)
        }
    }

    private func end(_ outcome: TaskOutcome, driver: TaskDriver) {
        let end: Result<Void, any Error> = outcome.deliveredError.map { .failure($0) } ?? .success(())
        let (responseWaiter, early, chunkWaiter) = state.withLock { state -> (ResponseContinuation?, Result<URLResponse, any Error>, ChunkContinuation?) in
            state.end = end
            if state.early == nil {
                // The task failed before its response: the call itself throws.
                let failure: any Error = outcome.deliveredError ?? URLError.courier(.badServerResponse, "No response was received.", url: driver.originalURL)
                state.early = .failure(failure)
            }
            defer {
                state.responseWaiter = nil
                state.chunkWaiter = nil
            }
            return (state.responseWaiter, state.early ?? .failure(URLError(.unknown)), state.chunkWaiter)
        }
        responseWaiter?.resume(with: early)
        switch end {
        case .success: chunkWaiter?.resume(returning: nil)
        case .failure(let error): chunkWaiter?.resume(throwing: error)
        }
        driverBox.withLock { $0 = nil }
        driver.taskCompleted()
    }
}

extension URLSession {
    /// A response body as an asynchronous sequence of bytes, read as the consumer asks for
    /// them: Apple's `URLSession.AsyncBytes`. A slow consumer pauses the transfer (memory
    /// stays bounded); cancelling the Swift task that iterates cancels the load, and so does
    /// dropping the iterator before the end. Iterate it once.
    public struct AsyncBytes: AsyncSequence, Sendable {
        public typealias Element = UInt8

        /// The data task carrying the transfer.
        public let task: URLSessionDataTask
        let sink: BytesSink

        public func makeAsyncIterator() -> Iterator {
            Iterator(consumer: Consumer(task: task, sink: sink))
        }

        /// Reads the bytes a chunk at a time and hands them out one by one.
        ///
        /// Design note: a byte comes from the chunk in hand without a suspension or a hop. The
        /// fast path is inlinable, and the loop's `next(isolation:)` runs on the caller's
        /// executor: a plain nonisolated `next()` called from an actor (a `for try await` on the
        /// main actor) hopped to the global executor and back for every byte, and 8 MB took
        /// minutes.
        public struct Iterator: AsyncIteratorProtocol {
            @usableFromInline let consumer: Consumer
            @usableFromInline var chunk: [UInt8] = []
            @usableFromInline var index = 0

            init(consumer: Consumer) {
                self.consumer = consumer
            }

            @inlinable
            public mutating func next() async throws -> UInt8? {
                try await next(isolation: nil)
            }

            @inlinable
            public mutating func next(isolation actor: isolated (any Actor)?) async throws -> UInt8? {
                if index < chunk.count {
                    defer { index &+= 1 }
                    return chunk[index]
                }
                return try await nextFromNewChunk(isolation: actor)
            }

            /// Waits for the next chunk that has bytes, on `actor`; nil at the end of the body.
            @usableFromInline
            mutating func nextFromNewChunk(isolation actor: isolated (any Actor)?) async throws -> UInt8? {
                while true {
                    guard let next = try await consumer.nextChunk(isolation: actor) else { return nil }
                    if next.isEmpty { continue }
                    chunk = next
                    index = 1
                    return chunk[0]
                }
            }
        }

        /// The iterator's link to the task: it cancels the task when the Swift task is
        /// cancelled, or when it is dropped before the body ended.
        @usableFromInline
        final class Consumer: @unchecked Sendable {
            let task: URLSessionDataTask
            let sink: BytesSink
            private let ended = Atomic<Bool>(false)

            init(task: URLSessionDataTask, sink: BytesSink) {
                self.task = task
                self.sink = sink
            }

            func nextChunk(isolation actor: isolated (any Actor)?) async throws -> [UInt8]? {
                let task = self.task
                do {
                    let chunk = try await withTaskCancellationHandler(
                        operation: { try await withCheckedThrowingContinuation(isolation: actor) { continuation in sink.nextChunk(continuation) } },
                        onCancel: { task.cancel() },
                        isolation: actor
                    )
                    if chunk == nil { ended.store(true, ordering: .relaxed) }
                    return chunk
                } catch {
                    ended.store(true, ordering: .relaxed)
                    throw error
                }
            }

            deinit {
                if !ended.load(ordering: .relaxed) { task.cancel() }
            }
        }
    }

    /// Starts loading `request` and returns when its response arrives, with the body to read
    /// as it comes. Redirects, challenges and metrics go to `delegate` (or the session's); the
    /// response and data callbacks do not. Cancelling the Swift task cancels the load.
    public func bytes(for request: URLRequest, delegate: (any URLSessionTaskDelegate)? = nil) async throws -> (AsyncBytes, URLResponse) {
        let task = makeTask(URLSessionDataTask.self, request, delivery: .asyncBytes)
        guard let sink = task.driver.sink as? BytesSink else { preconditionFailure("a bytes task has a bytes sink") }
        if let delegate { task.delegate = delegate }
        announceCreated(task)
        let response = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                sink.waitForResponse(continuation)
                task.resume()
            }
        } onCancel: {
            task.cancel()
        }
        return (AsyncBytes(task: task, sink: sink), response)
    }

    /// ``bytes(for:delegate:)`` for a URL.
    public func bytes(from url: URL, delegate: (any URLSessionTaskDelegate)? = nil) async throws -> (AsyncBytes, URLResponse) {
        try await bytes(for: URLRequest(url: url), delegate: delegate)
    }
}
