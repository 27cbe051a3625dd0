import CourierTransport
import Dispatch
import Foundation
import Synchronization

/// A download task's body, written to a temporary file off the event loop.
///
/// The loop only copies the bytes of a read into a 256 KiB chunk; a full chunk goes to the
/// sink's serial writer queue, which writes it and reports progress (`didWriteData`, after the
/// bytes are on disk). A slow disk therefore stalls no connection: when more than
/// `TaskDriver.deliveryHighWatermark` bytes wait for the disk, the task stops reading until
/// the writer catches up. Completion goes through the same queue, so the file is whole and
/// closed before anyone hears of it.
final class FileSink: TaskSink {
    enum Receiver: Sendable {
        /// `didFinishDownloadingTo`, then metrics and completion; the file is deleted after.
        case delegate
        /// A completion handler given the file, which is deleted when it returns.
        case handler(@Sendable (URL?, URLResponse?, (any Error)?) -> Void)
        /// An async call; the caller owns the file.
        case async(AsyncResult)
    }

    /// Bytes gathered on the loop before they go to the writer.
    static let chunkBytes = DownloadFile.bufferSize

    private struct State {
        var file: DownloadFile?
        var chunk = Data()
        /// Bytes given to the writer and not yet written.
        var bytesInFlight = 0
        /// Set once a write failed: further bytes are refused.
        var failed = false
        /// Set by `complete`: a file made after it (a cancel that raced with `begin`) is
        /// deleted at once.
        var completed = false
    }

    let receiver: Receiver
    private let state = Mutex(State())
    private let writer = DispatchQueue(label: "courier.download-writer")
    /// Body bytes on disk; only the writer queue touches it.
    private nonisolated(unsafe) var bytesWritten: Int64 = 0

    init(_ receiver: Receiver) {
        self.receiver = receiver
    }

    var backlog: Int { state.withLock { $0.bytesInFlight + $0.chunk.count } }

    func begin(_ response: HTTPURLResponse, driver: TaskDriver) -> URLError? {
        let file: DownloadFile
        do {
            file = try driver.session.makeDownloadFile.withLock { $0 }()
        } catch {
            let message = (error as? DownloadFileError)?.message ?? "Cannot create the download file: \(error)."
            return .courier(.cannotCreateFile, message, url: response.url)
        }
        let late = state.withLock { state -> Bool in
            guard !state.completed else { return true }
            state.file = file
            return false
        }
        if late { file.remove() }
        return nil
    }

    func receive(_ bytes: UnsafeRawBufferPointer, from exchange: HTTPExchange?, driver: TaskDriver) -> URLError? {
        let full = state.withLock { state -> (DownloadFile, Data)? in
            guard !state.failed, let file = state.file else { return nil }
            if state.chunk.isEmpty { state.chunk.reserveCapacity(Self.chunkBytes) }
            state.chunk.append(contentsOf: bytes)
            guard state.chunk.count >= Self.chunkBytes else { return nil }
            defer { state.chunk = Data() }
            state.bytesInFlight += state.chunk.count
            return (file, state.chunk)
        }
        if let (file, chunk) = full {
            driver.updateReading()
            write(chunk, to: file, driver: driver)
        }
        if let failure = state.withLock({ $0.failed ? $0.file?.failure : nil }) {
            return .courier(.cannotWriteToFile, failure, url: driver.currentURL)
        }
        return nil
    }

    /// Writes a chunk on the writer queue, then reports progress and lets reading resume.
    private func write(_ chunk: Data, to file: DownloadFile, driver: TaskDriver) {
        writer.async { [self] in
            let written = chunk.withUnsafeBytes { file.write($0) }
            state.withLock { state in
                state.bytesInFlight -= chunk.count
                if !written { state.failed = true }
            }
            guard written else { return }
            bytesWritten += Int64(chunk.count)
            reportProgress(Int64(chunk.count), driver: driver)
            driver.updateReading()
        }
    }

    /// Queues `didWriteData` for a delegate receiver.
    private func reportProgress(_ count: Int64, driver: TaskDriver) {
        guard case .delegate = receiver, let delegate = driver.downloadDelegate,
              let task = driver.task as? URLSessionDownloadTask else { return }
        let total = bytesWritten
        let session = driver.session
        driver.enqueue {
            let expected = task.countOfBytesExpectedToReceive
            delegate.urlSession(session, downloadTask: task, didWriteData: count, totalBytesWritten: total, totalBytesExpectedToWrite: expected)
        }
    }

    func complete(_ outcome: TaskOutcome, driver: TaskDriver) {
        let (file, rest) = state.withLock { state -> (DownloadFile?, Data) in
            state.completed = true
            defer { state.chunk = Data() }
            return (state.file, state.chunk)
        }
        writer.async { [self] in
            var error = outcome.error
            if let file {
                if error == nil, !rest.isEmpty {
                    if rest.withUnsafeBytes({ file.write($0) }) {
                        bytesWritten += Int64(rest.count)
                        reportProgress(Int64(rest.count), driver: driver)
                    }
                }
                error = settle(file, error, url: driver.currentURL)
            }
            deliver(TaskOutcome(error: error, response: outcome.response, metrics: outcome.metrics), file: file, driver: driver)
        }
    }

    /// Closes a finished download (a failed write or close fails the task), or deletes the file
    /// of a failed one; a write failure outranks the cancellation it caused.
    private func settle(_ file: DownloadFile, _ error: URLError?, url: URL?) -> URLError? {
        if let error {
            file.remove()
            if let reason = file.failure { return .courier(.cannotWriteToFile, reason, url: error.failingURL ?? url) }
            return error
        }
        guard !file.close() else { return nil }
        file.remove()
        return .courier(.cannotWriteToFile, file.failure ?? "The download could not be written.", url: url)
    }

    private func deliver(_ outcome: TaskOutcome, file: DownloadFile?, driver: TaskDriver) {
        let location = outcome.error == nil ? file?.url : nil
        switch receiver {
        case .delegate:
            let downloadDelegate = driver.downloadDelegate, taskDelegate = driver.taskDelegate
            let session = driver.session
            guard let task = driver.task else {
                file?.remove()
                return
            }
            driver.enqueue {
                if let location, let downloadDelegate, let downloadTask = task as? URLSessionDownloadTask {
                    downloadDelegate.urlSession(session, downloadTask: downloadTask, didFinishDownloadingTo: location)
                }
                file?.remove()
                driver.reportMetrics(outcome.metrics)
                taskDelegate?.urlSession(session, task: task, didCompleteWithError: outcome.error)
                driver.taskCompleted()
            }
        case .handler(let handler):
            driver.enqueue {
                driver.reportMetrics(outcome.metrics)
                handler(location, outcome.response, outcome.error)
                file?.remove()
                driver.taskCompleted()
            }
        case .async(let result):
            if outcome.metrics != nil { driver.enqueue { driver.reportMetrics(outcome.metrics) } }
            if let location {
                // The caller owns a downloaded file from here on.
                result.resume(AsyncResult.outcome(nil, outcome.response, .file(location), url: driver.originalURL))
            } else {
                result.resume(.failure(outcome.error ?? URLError.courier(.badServerResponse, "No response was received.", url: driver.originalURL)))
            }
            driver.taskCompleted()
        }
    }
}
