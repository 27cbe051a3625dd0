import CourierReactor
import CourierSync
import CourierTransport
import Dispatch
import Foundation

/// A download task's body, written to a temporary file; off the event loop as soon as the disk
/// is slow.
///
/// Writing to the page cache is a memory copy: while each write takes less than
/// `slowWriteThreshold` (10 ms), the loop writes the bytes of a read itself (through the file's 256 KiB
/// buffer), which on a busy CPU is what keeps a download as fast as the network (handing every
/// chunk to another thread cost a third of the throughput with client and loop on one core).
/// The first write that takes longer moves the download off the loop for good: from then on the
/// loop only copies a read into a 256 KiB chunk and a full chunk goes to the sink's writer (a
/// serial dispatch queue). A slow disk therefore stalls its loop at most once, for one write:
/// when more than 2 MiB wait for the disk, the task stops reading until the writer is down to
/// 1 MiB. Completion goes through the writer, so the file is whole and closed before anyone
/// hears of it. `didWriteData` is reported for every 256 KiB written.
final class FileSink: AsyncDelivering {
    enum Receiver: Sendable {
        /// `didFinishDownloadingTo`, then metrics and completion; the file is deleted after.
        case delegate
        /// A completion handler given the file, which is deleted when it returns.
        case handler(@Sendable (URL?, URLResponse?, (any Error)?) -> Void)
        /// An async call; the caller owns the file.
        case async
    }

    /// Bytes gathered on the loop before they go to the writer: one write system call and one
    /// hand-off per 256 KiB.
    static let chunkBytes = 256 * 1024
    /// Reading pauses when more than eight chunks (2 MiB) wait for the writer, resumes at four.
    static let limits = BacklogLimits(high: 8 * chunkBytes, low: 4 * chunkBytes)
    /// Written chunks kept for reuse (as many as can wait, and two more), so that no chunk is
    /// allocated anew (a 256 KiB allocation is an mmap and page faults); more are freed.
    static let spareChunks = 10

    /// A chunk's memory, reused: a fresh 256 KiB allocation per chunk would be an mmap, page
    /// faults and an munmap each time.
    final class Chunk: @unchecked Sendable {
        let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: FileSink.chunkBytes, alignment: 16)
        var count = 0

        var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: storage[..<count]) }
        var room: Int { storage.count - count }

        /// Appends what fits of `bytes`; returns how many were taken.
        func append(_ bytes: UnsafeRawBufferPointer) -> Int {
            let taken = min(room, bytes.count)
            if taken > 0 { storage.baseAddress!.advanced(by: count).copyMemory(from: bytes.baseAddress!, byteCount: taken) }
            count += taken
            return taken
        }

        deinit { storage.deallocate() }
    }

    /// Where the writes happen.
    enum Mode {
        /// On the event loop, in the read that brought the bytes.
        case onLoop
        /// On the writer, after a write on the loop was slow.
        case offLoop
    }

    /// A write on the loop that takes longer than this moves the download off the loop. 10 ms:
    /// a 256 KiB page-cache write takes about a hundredth of that, and a file system's journal
    /// commit or the writeback of an earlier file can hold one write for a few milliseconds
    /// without the disk being slow; a slow disk (a USB stick, a network file system) passes it
    /// at once.
    static let slowWriteThreshold = Duration.milliseconds(10)

    private struct State {
        var file: DownloadFile?
        var mode = Mode.onLoop
        /// Bytes handed to the file (from its start: a resumed download counts those it kept),
        /// and those not yet reported by `didWriteData`.
        var bytesWritten: Int64 = 0
        /// Bytes a resumed download kept at the start of the file.
        var offset: Int64 = 0
        var unreported: Int64 = 0
        /// The chunk being filled on the loop.
        var chunk: Chunk?
        /// Written chunks, ready to be filled again.
        var spare: [Chunk] = []
        /// Bytes given to the writer and not yet written.
        var bytesInFlight = 0
        /// Set once a write failed: further bytes are refused.
        var failed = false
        /// Set by `complete`: a file made after it (a cancel that raced with `begin`) is
        /// deleted at once.
        var completed = false
        /// True while `begin` makes the file; a completion meanwhile waits for it.
        var beginning = false
        /// A completion that arrived while the file was being made, run by `begin`.
        var deferredCompletion: (@Sendable () -> Void)?
        var slot = AsyncSlot()
    }

    let receiver: Receiver
    private let state = Mutex(State())
    /// Writes, progress and completion, in order, off the event loop. A dispatch queue, not
    /// the blocking pool: the pool's few threads also serve name lookups and body streams,
    /// which downloads must never hold up.
    private let writer = DispatchQueue(label: "courier.download-writer")
    /// The threshold of this sink (tests lower it to reach the writer).
    let slowWriteThreshold: Duration

    init(_ receiver: Receiver, slowWriteThreshold: Duration = FileSink.slowWriteThreshold) {
        self.receiver = receiver
        self.slowWriteThreshold = slowWriteThreshold
    }

    func wait(_ continuation: AsyncSlot.Continuation) {
        if let early = state.withLock({ $0.slot.wait(continuation) }) { continuation.resume(with: early) }
    }

    /// Bytes given to the writer and not yet on disk (the chunk being filled is not backlog:
    /// it is bounded by its size).
    var backlog: Int { state.withLock { $0.bytesInFlight } }

    var backlogLimits: BacklogLimits { Self.limits }

    func begin(_ response: URLResponse, driver: TaskDriver) -> URLError? {
        // A task whose completion was delivered already went without a file: none is made,
        // since nothing would remove it, and a resumed download's partial file stays as its
        // resume data left it. (Every ending known to reach here comes after this on the same
        // thread, or waits for it below; this keeps a new one from leaving a file.) From here
        // on, a completion that comes while the file is made waits for it.
        let ended = state.withLock { state -> Bool in
            if !state.completed { state.beginning = true }
            return state.completed
        }
        if ended { return nil }
        let placement = driver.resumePlacement(for: response)
        let made = makeFile(placement, response: response, driver: driver)
        // A cancel that raced with the making completed the task meanwhile: the file goes
        // before anyone hears of the completion.
        let deferred = state.withLock { state -> (@Sendable () -> Void)? in
            state.beginning = false
            if !state.completed, case .success(let file) = made {
                state.file = file
                state.offset = placement?.offset ?? 0
                state.bytesWritten = state.offset
            }
            defer { state.deferredCompletion = nil }
            return state.deferredCompletion
        }
        if let deferred {
            if case .success(let file) = made { file.remove() }
            deferred()
            return nil
        }
        switch made {
        case .success:
            if let placement, placement.reportsResume { reportResume(placement, driver: driver) }
            return nil
        case .failure(let error):
            return error
        }
    }

    /// The file the body goes to: a resumed download's partial file (emptied unless the
    /// response continues it), else a new one.
    private func makeFile(_ placement: ResumePlacement?, response: URLResponse, driver: TaskDriver) -> Result<DownloadFile, URLError> {
        if let placement, let partial = placement.partial {
            guard placement.offset > 0 || partial.startOver() else {
                let error = partial.writeError(url: response.url, fallback: "The partial download could not be emptied.")
                partial.remove()
                return .failure(error)
            }
            return .success(partial)
        }
        do {
            return .success(try driver.session.makeDownloadFile.withLock { $0.make }())
        } catch {
            let message = (error as? DownloadFileError)?.message ?? "Cannot create the download file: \(error)."
            return .failure(.courier(.cannotCreateFile, message, url: response.url))
        }
    }

    func receive(_ bytes: UnsafeRawBufferPointer, from exchange: HTTPExchange?, driver: TaskDriver) -> URLError? {
        let onLoop = state.withLock { state -> DownloadFile? in
            guard case .onLoop = state.mode, !state.failed else { return nil }
            return state.file
        }
        if let file = onLoop { return writeOnLoop(bytes, to: file, driver: driver) }
        var remaining = bytes
        while !remaining.isEmpty {
            let full = state.withLock { state -> (DownloadFile, Chunk, crossedHigh: Bool)? in
                guard !state.failed, let file = state.file else {
                    remaining = UnsafeRawBufferPointer(start: nil, count: 0)
                    return nil
                }
                let chunk = state.chunk ?? state.spare.popLast() ?? Chunk()
                let taken = chunk.append(remaining)
                remaining = UnsafeRawBufferPointer(rebasing: remaining[taken...])
                guard chunk.room == 0 else {
                    state.chunk = chunk
                    return nil
                }
                state.chunk = nil
                let before = state.bytesInFlight
                state.bytesInFlight += chunk.count
                return (file, chunk, Self.limits.crossedHigh(from: before, to: state.bytesInFlight))
            }
            if let (file, chunk, crossedHigh) = full {
                // The backlog matters to reading only when it crosses a watermark.
                if crossedHigh { driver.updateReading() }
                write(chunk, to: file, driver: driver)
            }
        }
        if let file = state.withLock({ $0.failed ? $0.file : nil }), file.failure != nil {
            return file.writeError(url: driver.currentURL)
        }
        return nil
    }

    /// Writes a read's bytes on the loop, timing the write; a slow one moves the download off
    /// the loop.
    private func writeOnLoop(_ bytes: UnsafeRawBufferPointer, to file: DownloadFile, driver: TaskDriver) -> URLError? {
        let started = MonotonicInstant.now
        guard file.write(bytes) else {
            state.withLock { $0.failed = true }
            return file.writeError(url: driver.currentURL)
        }
        let took = MonotonicInstant.now - started
        let slow = took > slowWriteThreshold
        if slow {
            driver.logger.debug("download moved off the event loop", metadata: ["task": "\(driver.identifier)", "write": "\(took)"])
        }
        let report = state.withLock { state -> (count: Int64, total: Int64)? in
            if slow { state.mode = .offLoop }
            state.bytesWritten += Int64(bytes.count)
            state.unreported += Int64(bytes.count)
            guard state.unreported >= Int64(Self.chunkBytes) else { return nil }
            defer { state.unreported = 0 }
            return (state.unreported, state.bytesWritten)
        }
        if let report { reportProgress(report.count, total: report.total, driver: driver) }
        return nil
    }

    /// Writes a chunk on the writer, then reports progress, keeps the chunk for reuse
    /// and lets reading resume.
    private func write(_ chunk: Chunk, to file: DownloadFile, driver: TaskDriver) {
        writer.async { [self] in
            let count = chunk.count
            let written = file.write(chunk.bytes)
            chunk.count = 0
            let crossedLow = state.withLock { state -> Bool in
                let before = state.bytesInFlight
                state.bytesInFlight -= count
                if !written { state.failed = true }
                if state.spare.count < Self.spareChunks { state.spare.append(chunk) }
                return Self.limits.crossedLow(from: before, to: state.bytesInFlight)
            }
            guard written else {
                // Fail now, not at the next read: reading may be paused waiting for this very
                // writer, and the rest of the body would only be thrown away.
                driver.fail(file.writeError(url: driver.currentURL), with: .deliveryFailed)
                return
            }
            let total = state.withLock { state -> Int64 in
                state.bytesWritten += Int64(count)
                return state.bytesWritten
            }
            reportProgress(Int64(count), total: total, driver: driver)
            if crossedLow { driver.updateReading() }
        }
    }

    /// Queues `didWriteData` for a delegate receiver. A resumed download counts the bytes it
    /// kept in both totals.
    private func reportProgress(_ count: Int64, total: Int64, driver: TaskDriver) {
        guard case .delegate = receiver, let delegate = driver.downloadDelegate,
              let task = driver.task as? URLSessionDownloadTask else { return }
        let session = driver.session
        let offset = state.withLock { $0.offset }
        driver.enqueue {
            let remaining = task.countOfBytesExpectedToReceive
            let expected = remaining >= 0 ? remaining + offset : remaining
            delegate.urlSession(session, downloadTask: task, didWriteData: count, totalBytesWritten: total, totalBytesExpectedToWrite: expected)
        }
    }

    /// Queues `didResumeAtOffset` for a delegate receiver, before any `didWriteData`.
    private func reportResume(_ placement: ResumePlacement, driver: TaskDriver) {
        guard case .delegate = receiver, let delegate = driver.downloadDelegate,
              let task = driver.task as? URLSessionDownloadTask else { return }
        let session = driver.session
        driver.enqueue {
            delegate.urlSession(session, downloadTask: task, didResumeAtOffset: placement.offset, expectedTotalBytes: placement.expectedTotal)
        }
    }

    func complete(_ outcome: TaskOutcome, driver: TaskDriver) {
        let waitsForBegin = state.withLock { state -> Bool in
            state.completed = true
            guard state.beginning else { return false }
            state.deferredCompletion = { [self] in finishCompletion(outcome, driver: driver) }
            return true
        }
        if !waitsForBegin { finishCompletion(outcome, driver: driver) }
    }

    /// Writes what is left, settles the file and delivers the outcome, through the writer.
    private func finishCompletion(_ outcome: TaskOutcome, driver: TaskDriver) {
        let (file, rest) = state.withLock { state -> (DownloadFile?, Chunk?) in
            state.spare = []
            defer { state.chunk = nil }
            return (state.file, state.chunk)
        }
        let keepsPartial = driver.session.frozenConfiguration.courierKeepsPartialDownloads
        writer.async { [self] in
            var error = outcome.error
            var resumeData: Data?
            var partial: URL?
            if let file, error != nil, let recipe = outcome.resume?.recipe, file.failure == nil {
                writeLast(rest, to: file)
                // A last write that fails (the chunk, or the file's buffer flushed as it closes)
                // leaves a file no offset describes: no resume data, but the caller may keep it.
                if keepsPartial, file.failure != nil || !file.close() {
                    (error, partial) = handOver(file, after: error, url: driver.currentURL)
                } else {
                    (resumeData, partial) = keep(file, recipe: recipe)
                }
            } else if let file, error != nil, keepsPartial {
                writeLast(rest, to: file)
                (error, partial) = handOver(file, after: error, url: driver.currentURL)
            } else if let file {
                if error == nil { writeLast(rest, to: file) }
                // What the loop wrote since the last report, and the last chunk.
                let last = state.withLock { state -> (count: Int64, total: Int64) in
                    defer { state.unreported = 0 }
                    return (state.unreported, state.bytesWritten)
                }
                if error == nil, last.count > 0 { reportProgress(last.count, total: last.total, driver: driver) }
                if error == nil, keepsPartial, !file.close() {
                    // The body arrived whole and its last write (or the close) failed: what was
                    // written stays for the caller, as it does when a write fails mid-body.
                    (error, partial) = handOver(file, after: error, url: driver.currentURL)
                } else {
                    error = settle(file, error, url: driver.currentURL)
                }
            } else {
                resumeData = outcome.resume?.unchanged
            }
            if let handler = outcome.resume?.handler {
                // cancel(byProducingResumeData:) hears before the completion.
                let produced = resumeData
                driver.enqueue { handler(produced) }
            } else if let resumeData, let failure = error {
                error = failure.adding(resumeData: resumeData)
            }
            if keepsPartial, let partial, let failure = error { error = failure.adding(partialDownload: partial) }
            let settled = resumeData == nil && partial == nil ? file : nil
            var settledOutcome = TaskOutcome(error: error, response: outcome.response, metrics: outcome.metrics)
            if error == outcome.error { settledOutcome.reportedError = outcome.reportedError }
            deliver(settledOutcome, file: settled, driver: driver)
        }
    }

    /// Keeps the file of a download that stopped mid-body, its last chunk written, as a partial
    /// file; its resume data and the kept file, or nils (and the file is gone) when it could not
    /// be kept.
    private func keep(_ file: DownloadFile, recipe: ResumeOffer.Recipe) -> (Data?, URL?) {
        let offset = state.withLock { $0.bytesWritten }
        guard file.failure == nil, let kept = file.keep() else {
            file.remove()
            return (nil, nil)
        }
        guard let data = recipe.resumeData(file: kept, offset: offset).encoded() else {
            unlink(kept.path)
            return (nil, nil)
        }
        return (data, kept)
    }

    /// Hands a download's file to the caller as its partial file
    /// (``URLSessionConfiguration/courierKeepsPartialDownloads``): the error to report, a failed
    /// write outranking `error`, and the file (nil when nothing was written).
    private func handOver(_ file: DownloadFile, after error: URLError?, url: URL?) -> (URLError?, URL?) {
        let reported = file.failure != nil ? file.writeError(url: error?.failingURL ?? url) : error
        return (reported, file.handOver())
    }

    /// Writes the chunk the loop was filling when the task ended, and counts it.
    private func writeLast(_ rest: Chunk?, to file: DownloadFile) {
        guard let rest, rest.count > 0, file.write(rest.bytes) else { return }
        state.withLock { state in
            state.bytesWritten += Int64(rest.count)
            state.unreported += Int64(rest.count)
        }
    }

    /// Closes a finished download (a failed write or close fails the task), or deletes the file
    /// of a failed one; a write failure outranks the cancellation it caused.
    private func settle(_ file: DownloadFile, _ error: URLError?, url: URL?) -> URLError? {
        if let error {
            file.remove()
            if file.failure != nil { return file.writeError(url: error.failingURL ?? url) }
            return error
        }
        guard !file.close() else { return nil }
        file.remove()
        return file.writeError(url: url)
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
                taskDelegate?.urlSession(session, task: task, didCompleteWithError: outcome.deliveredError)
                driver.taskCompleted()
            }
        case .handler(let handler):
            driver.enqueue {
                driver.reportMetrics(outcome.metrics)
                handler(location, outcome.response, outcome.deliveredError)
                file?.remove()
                driver.taskCompleted()
            }
        case .async:
            // The caller owns a downloaded file from here on.
            let result: AsyncSlot.Outcome = location.map { AsyncSlot.outcome(nil, outcome.response, .file($0), url: driver.originalURL) }
                ?? .failure(outcome.deliveredError ?? URLError.courier(.badServerResponse, "No response was received.", url: driver.originalURL))
            endCall(with: result, after: outcome.metrics, driver: driver)
        }
    }

    func finishCall(_ result: AsyncSlot.Outcome, driver: TaskDriver) {
        state.withLock { $0.slot.finish(result) }?.resume(with: result)
        driver.taskCompleted()
    }

    func settle() {
        state.withLock { _ in }
    }
}
