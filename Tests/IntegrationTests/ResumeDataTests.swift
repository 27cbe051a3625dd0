@testable import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// Records a download's delegate callbacks for the resume tests: didResumeAtOffset, progress,
/// the finished file's bytes (read before the file is deleted), resume-data handlers the test
/// started through it, and the completion.
final class ResumeRecorder: NSObject, URLSessionDownloadDelegate, @unchecked Sendable {
    struct Record: @unchecked Sendable {
        /// "resume", "write" (a run of them counted once), "finish", "resumeData", "metrics",
        /// "complete", in order.
        var events: [String] = []
        var resumes: [(offset: Int64, expected: Int64)] = []
        var written: [(bytes: Int64, total: Int64, expected: Int64)] = []
        var contents: Data?
        /// What each resume-data handler got.
        var resumeData: [Data?] = []
        var error: (any Error)?
        var completions = 0
        /// Callbacks and handlers that ran off the session's delegate queue.
        var offQueue = 0

        var totalWritten: Int64 { written.last?.total ?? 0 }
        var sha256: String? { contents.map { SHA256.hex($0) } }
    }

    /// Called inside didWriteData (on the delegate queue) with totalBytesWritten.
    typealias WriteHook = @Sendable (ResumeRecorder, URLSession, URLSessionDownloadTask, Int64) -> Void

    let record = Mutex(Record())
    private let onWrite: WriteHook?

    init(onWrite: WriteHook? = nil) {
        self.onWrite = onWrite
    }

    var snapshot: Record { record.withLock { $0 } }

    /// Forgets everything, for the next task of the session.
    func reset() {
        record.withLock { $0 = Record() }
    }

    private func note(_ session: URLSession, _ event: String, _ update: (inout Record) -> Void = { _ in }) {
        let onQueue = OperationQueue.current === session.delegateQueue
        record.withLock { record in
            if event != "write" || record.events.last != "write" { record.events.append(event) }
            if !onQueue { record.offQueue += 1 }
            update(&record)
        }
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didResumeAtOffset fileOffset: Int64, expectedTotalBytes: Int64) {
        note(session, "resume") { $0.resumes.append((offset: fileOffset, expected: expectedTotalBytes)) }
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        note(session, "write") { $0.written.append((bytes: bytesWritten, total: totalBytesWritten, expected: totalBytesExpectedToWrite)) }
        onWrite?(self, session, downloadTask, totalBytesWritten)
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        let contents = FileManager.default.contents(atPath: location.path)
        note(session, "finish") { $0.contents = contents }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
        note(session, "metrics")
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        note(session, "complete") { record in
            record.error = error
            record.completions += 1
        }
    }

    /// Cancels `task` by producing resume data; the handler's call is recorded as "resumeData".
    func cancelRecordingResumeData(_ task: URLSessionDownloadTask, session: URLSession) {
        task.cancel(byProducingResumeData: { data in
            self.note(session, "resumeData") { $0.resumeData.append(data) }
        })
    }

    /// The same, waiting for the handler: what it got.
    func cancelProducingResumeData(_ task: URLSessionDownloadTask, session: URLSession) async -> Data? {
        cancelRecordingResumeData(task, session: session)
        guard await pollUntil({ !self.snapshot.resumeData.isEmpty }) else {
            Issue.record("the resume data handler was not called")
            return nil
        }
        return snapshot.resumeData.first ?? nil
    }

    /// Waits for didCompleteWithError; false after `timeout`.
    func waitForCompletion(timeout: Duration = .seconds(30)) async -> Bool {
        await pollUntil(timeout: timeout) { self.snapshot.completions > 0 }
    }
}

/// Polls `condition` every few milliseconds; false when it still fails after `timeout`.
func pollUntil(timeout: Duration = .seconds(20), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return true
}

/// Courier's partial download files (`CourierPartial_…`) in the temporary directory now.
func partialFilesPresent() -> Set<String> {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: FileManager.default.temporaryDirectory.path)) ?? []
    return Set(names.filter { $0.hasPrefix("CourierPartial_") })
}

/// Deletes the partial files that are not in `before`: those of resume data a test made and
/// left unused.
func removePartialFiles(except before: Set<String>) {
    for name in partialFilesPresent().subtracting(before) {
        try? FileManager.default.removeItem(at: FileManager.default.temporaryDirectory.appendingPathComponent(name))
    }
}

/// Starts a download of `request`, waits until its file holds `offset` bytes (where the server
/// holds the rest back), cancels it producing resume data (the handler form, or the async form),
/// and waits for the task to complete. Returns the resume data and what the delegate saw; the
/// recorder is reset for the session's next task.
func interruptDownload(
    _ request: URLRequest, session: URLSession, recorder: ResumeRecorder, server: ResumableServer, at offset: Int,
    usingAsyncCancel: Bool = false, sourceLocation: SourceLocation = #_sourceLocation
) async throws -> (data: Data?, record: ResumeRecorder.Record) {
    server.pause(at: offset)
    let task = session.downloadTask(with: request)
    task.resume()
    let reached = await pollUntil { task.countOfBytesReceived >= Int64(offset) }
    try #require(reached, "the file reached \(offset) bytes", sourceLocation: sourceLocation)
    let data: Data?
    if usingAsyncCancel {
        data = await task.cancelByProducingResumeData()
    } else {
        data = await recorder.cancelProducingResumeData(task, session: session)
    }
    let completed = await recorder.waitForCompletion()
    server.release()
    try #require(completed, "the cancelled task completed", sourceLocation: sourceLocation)
    let record = recorder.snapshot
    recorder.reset()
    return (data, record)
}

/// One resume test's setup: the partial files present before it, a ``ResumableServer``, a
/// ``ResumeRecorder``, and an uncached session with the recorder as its delegate. Made at the
/// start of a test, followed by `defer { fixture.close() }`.
struct ResumeFixture {
    let partials: Set<String>
    let server: ResumableServer
    let recorder: ResumeRecorder
    let session: URLSession

    init(behaviour: ResumableServer.Behaviour = .init()) throws {
        let partials = partialFilesPresent()
        let recorder = ResumeRecorder()
        self.partials = partials
        self.server = try ResumableServer(behaviour: behaviour)
        self.recorder = recorder
        self.session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
    }

    /// Lets the session finish its tasks and invalidate, stops the server, and deletes the
    /// partial files made since `partials`, in that order.
    func close() {
        session.finishTasksAndInvalidate()
        server.stop()
        removePartialFiles(except: partials)
    }

    /// ``interruptDownload(_:session:recorder:server:at:usingAsyncCancel:sourceLocation:)`` in
    /// this session, of `request` (by default a GET of the server's file).
    func interrupt(
        _ request: URLRequest? = nil, at offset: Int, usingAsyncCancel: Bool = false, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> (data: Data?, record: ResumeRecorder.Record) {
        try await interruptDownload(
            request ?? URLRequest(url: server.url()), session: session, recorder: recorder, server: server, at: offset,
            usingAsyncCancel: usingAsyncCancel, sourceLocation: sourceLocation
        )
    }

    /// Resumes `data` in a download task of this session and requires its completion; returns
    /// what the recorder saw then.
    @discardableResult
    func resumeDownload(_ data: Data, sourceLocation: SourceLocation = #_sourceLocation) async throws -> ResumeRecorder.Record {
        session.downloadTask(withResumeData: data).resume()
        let done = await recorder.waitForCompletion()
        try #require(done, sourceLocation: sourceLocation)
        return recorder.snapshot
    }
}

/// Checks a resumed download that succeeded from `offset`: one didResumeAtOffset before any
/// write, progress counted from the offset up to the whole length, the server's bytes exactly.
func expectResumed(
    _ record: ResumeRecorder.Record, at offset: Int64, length: Int, sha256: String, sourceLocation: SourceLocation = #_sourceLocation
) {
    let total = Int64(length)
    #expect(record.error == nil, "\(String(describing: record.error))", sourceLocation: sourceLocation)
    #expect(record.resumes.count == 1, "didResumeAtOffset once", sourceLocation: sourceLocation)
    #expect(record.resumes.first?.offset == offset, sourceLocation: sourceLocation)
    if offset > 0 {
        #expect(record.resumes.first?.expected == total, "expectedTotalBytes is the whole length", sourceLocation: sourceLocation)
    }
    #expect(record.events.first == "resume", "didResumeAtOffset comes before any write: \(record.events)", sourceLocation: sourceLocation)
    #expect(record.events.filter { $0 == "finish" }.count == 1, sourceLocation: sourceLocation)
    if let first = record.written.first {
        #expect(first.total == offset + first.bytes, "totalBytesWritten counts the bytes already in the file", sourceLocation: sourceLocation)
    }
    #expect(record.written.map { $0.bytes }.reduce(0, +) == total - offset, sourceLocation: sourceLocation)
    #expect(record.totalWritten == total, sourceLocation: sourceLocation)
    let totals = record.written.map { $0.total }
    #expect(totals == totals.sorted(), sourceLocation: sourceLocation)
    #expect(record.written.allSatisfy { $0.expected == total }, "totalBytesExpectedToWrite is the whole length", sourceLocation: sourceLocation)
    #expect(record.sha256 == sha256, "the file is the server's body", sourceLocation: sourceLocation)
    #expect(record.offQueue == 0, sourceLocation: sourceLocation)
}

/// A flag set once, from any thread.
final class ResumeFlag: Sendable {
    private let value = Atomic<Bool>(false)

    var isSet: Bool { value.load(ordering: .relaxed) }

    func set() { value.store(true, ordering: .relaxed) }

    /// True for the first caller only.
    func claim() -> Bool { !value.exchange(true, ordering: .relaxed) }
}

/// How a server declines to continue a resumed download.
enum RangeRefusal: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// It ignores Range and sends the whole body (200).
    case rangeIgnored
    /// The entity's validator changed, so If-Range fails and the whole body comes (200).
    case validatorChanged
    /// A 416.
    case unsatisfiable
    /// A 206 whose Content-Range starts before the file's end.
    case wrongContentRange

    var testDescription: String { rawValue }
}

/// Download resume data against ``ResumableServer`` (and nginx in +Failures): producing it by
/// cancelling or by a broken transfer, resuming it in every form, and the server answers that
/// make Courier start over. Serialized, and every test holds the download-files lock: they look
/// at the partial files in the temporary directory.
@Suite("Download resume data", .serialized)
struct ResumeDataTests {
    static let offset = 1024 * 1024 + 4321

    @Test("cancel(byProducingResumeData:) mid-body, then downloadTask(withResumeData:): the handler once, on the queue, before didComplete; Range and If-Range on the wire; the same bytes", .exclusiveDownloadFiles, arguments: [ResumableServer.Validator.strongETag, .lastModified])
    func delegateResume(_ validator: ResumableServer.Validator) async throws {
        let fixture = try ResumeFixture(behaviour: .init(validator: validator))
        defer { fixture.close() }
        let server = fixture.server

        let (resumeData, first) = try await fixture.interrupt(at: Self.offset)
        let data = try #require(resumeData)
        #expect(first.resumeData.count == 1, "the handler is called once")
        #expect(first.offQueue == 0, "the handler runs on the delegate queue")
        let handled = try #require(first.events.firstIndex(of: "resumeData"))
        let completed = try #require(first.events.firstIndex(of: "complete"))
        #expect(handled < completed, "the handler comes before didCompleteWithError: \(first.events)")
        #expect(!first.events.contains("finish"))
        #expect(urlErrorCode(first.error) == .cancelled)

        let record = try await fixture.resumeDownload(data)
        expectResumed(record, at: Int64(Self.offset), length: server.body.count, sha256: server.sha256)
        // A late second call of the handler would show here.
        #expect(fixture.recorder.snapshot.resumeData.isEmpty)
        let requests = server.requests
        #expect(requests.count == 2)
        #expect(requests.first?.range == nil && requests.first?.ifRange == nil)
        #expect(requests.last?.method == "GET")
        #expect(requests.last?.range == "bytes=\(Self.offset)-")
        #expect(requests.last?.ifRange == (validator == .strongETag ? server.strongETag : server.lastModified), "If-Range: the strong ETag, else the Last-Modified date")
        #expect(requests.last?.status == 206)
    }

    @Test("cancelByProducingResumeData() and download(resumeFrom:) in async code, in another session", .exclusiveDownloadFiles)
    func asyncResume() async throws {
        let fixture = try ResumeFixture()
        defer { fixture.close() }
        let (server, partials) = (fixture.server, fixture.partials)
        let (resumeData, first) = try await fixture.interrupt(at: Self.offset, usingAsyncCancel: true)
        let data = try #require(resumeData)
        #expect(urlErrorCode(first.error) == .cancelled)

        let plain = URLSession(configuration: .uncached)
        defer { plain.finishTasksAndInvalidate() }
        let (location, response) = try await plain.download(resumeFrom: data)
        let contents = try Data(contentsOf: location)
        try? FileManager.default.removeItem(at: location)
        #expect(SHA256.hex(contents) == server.sha256)
        #expect(response is HTTPURLResponse)
        #expect(server.requests.last?.range == "bytes=\(Self.offset)-")
        #expect(server.requests.last?.ifRange == server.strongETag)
        #expect(server.requests.last?.status == 206)
        let consumed = await pollUntil(timeout: .seconds(2)) { partialFilesPresent() == partials }
        #expect(consumed, "no partial file is left once the caller removed the download")
    }

    @Test("completion handlers: the resume-data handler comes before the task's completion handler; downloadTask(withResumeData:completionHandler:) hands over the whole file", .exclusiveDownloadFiles)
    func completionHandlerResume() async throws {
        let partials = partialFilesPresent()
        defer { removePartialFiles(except: partials) }
        let server = try ResumableServer()
        defer { server.stop() }
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let log = HandlerLog()

        server.pause(at: Self.offset)
        let task = session.downloadTask(with: server.url()) { location, _, error in
            log.note(session, "completion", location: location, error: error)
        }
        task.resume()
        let reached = await pollUntil { task.countOfBytesReceived >= Int64(Self.offset) }
        try #require(reached)
        task.cancel(byProducingResumeData: { data in
            log.note(session, "resumeData", resumeData: data)
        })
        let finished = await pollUntil { log.entries.count == 2 }
        server.release()
        try #require(finished, "both handlers were called: \(log.entries.map(\.event))")
        #expect(log.entries.map(\.event) == ["resumeData", "completion"])
        #expect(log.entries.allSatisfy { $0.onQueue })
        #expect(urlErrorCode(log.entries.last?.error) == .cancelled)
        let data = try #require(log.entries.first?.resumeData)

        let resumed = HandlerLog()
        session.downloadTask(withResumeData: data) { location, _, error in
            resumed.note(session, "completion", location: location, error: error)
        }.resume()
        let done = await pollUntil(timeout: .seconds(30)) { resumed.entries.count == 1 }
        try #require(done)
        let entry = try #require(resumed.entries.first)
        #expect(entry.error == nil)
        #expect(entry.contents.map { SHA256.hex($0) } == server.sha256)
        let requests = server.requests
        #expect(requests.count == 2)
        let start = try #require(requests.last?.status == 206 ? requests.last?.firstByte : nil, "the resumed request got a 206")
        #expect(start > 0 && start <= Self.offset, "it went on from the bytes in the file")
        #expect(requests.last?.range == "bytes=\(start)-")
        let path = try #require(entry.location?.path)
        let gone = await pollUntil(timeout: .seconds(2)) { !FileManager.default.fileExists(atPath: path) && partialFilesPresent() == partials }
        #expect(gone, "the file is deleted once the handler returned")
    }

    @Test("a body cut short fails with resume data in the error; three cuts, three resumes, one whole file", .exclusiveDownloadFiles)
    func cutThreeTimes() async throws {
        let fixture = try ResumeFixture()
        defer { fixture.close() }
        let (server, recorder, session, partials) = (fixture.server, fixture.recorder, fixture.session, fixture.partials)
        let cuts: [(offset: Int, cut: ResumableServer.Cut)] = [(1024 * 1024 + 1000, .reset), (2 * 1024 * 1024 + 4321, .close), (3 * 1024 * 1024 + 77, .reset)]
        for cut in cuts { server.cut(at: [cut.offset], with: cut.cut) }

        var task = session.downloadTask(with: server.url())
        var offsets: [Int64] = []
        for attempt in cuts.indices {
            task.resume()
            let done = await recorder.waitForCompletion()
            try #require(done)
            let record = recorder.snapshot
            recorder.reset()
            let error = try #require(record.error as? URLError, "attempt \(attempt) fails")
            #expect(error.code == .networkConnectionLost)
            let data = try #require(error.downloadTaskResumeData, "attempt \(attempt)'s error carries resume data")
            #expect((error.userInfo[URLSessionDownloadTaskResumeData] as? Data) == data, "the same data under the user-info key")
            #expect(!record.events.contains("finish"))
            if attempt > 0 {
                #expect(record.resumes.count == 1)
                #expect(record.events.first == "resume")
                if let offset = record.resumes.first?.offset { offsets.append(offset) }
            } else {
                #expect(record.resumes.isEmpty, "a download that is not resumed has no didResumeAtOffset")
            }
            #expect(!partialFilesPresent().subtracting(partials).isEmpty, "the partial file is kept for the resume data")
            task = session.downloadTask(withResumeData: data)
        }
        task.resume()
        let done = await recorder.waitForCompletion()
        try #require(done)
        let last = recorder.snapshot
        if let offset = last.resumes.first?.offset { offsets.append(offset) }
        try #require(offsets.count == 3)
        expectResumed(last, at: offsets[2], length: server.body.count, sha256: server.sha256)

        let requests = server.requests
        try #require(requests.count == 4)
        #expect(requests[0].range == nil)
        for (index, request) in requests.dropFirst().enumerated() {
            #expect(request.status == 206)
            #expect(Int64(request.firstByte) == offsets[index], "the request went on from the offset the delegate was told")
            #expect(request.range == "bytes=\(offsets[index])-")
            #expect(request.ifRange == server.strongETag)
            #expect(request.firstByte > 0 && request.firstByte <= cuts[index].offset)
        }
        #expect(offsets == offsets.sorted())
        #expect(offsets[1] == Int64(cuts[1].offset), "after a clean close every byte sent is in the file")
        let consumed = await pollUntil(timeout: .seconds(2)) { partialFilesPresent() == partials }
        #expect(consumed, "the successful resume consumed the partial file")
    }

    @Test("a resumed request the server does not continue starts over: didResumeAtOffset(0), the same bytes", .exclusiveDownloadFiles, arguments: RangeRefusal.allCases)
    func restart(_ refusal: RangeRefusal) async throws {
        let fixture = try ResumeFixture()
        defer { fixture.close() }
        let (server, partials) = (fixture.server, fixture.partials)
        let (resumeData, _) = try await fixture.interrupt(at: Self.offset)
        let data = try #require(resumeData)
        let oldTag = server.strongETag
        switch refusal {
        case .rangeIgnored: server.update { $0.honoursRange = false }
        case .validatorChanged: server.changeValidators()
        case .unsatisfiable: server.answer416ToNextRange()
        case .wrongContentRange: server.answerWrongContentRangeToNextRange()
        }

        let record = try await fixture.resumeDownload(data)
        expectResumed(record, at: 0, length: server.body.count, sha256: server.sha256)
        let requests = server.requests
        let resumed = try #require(requests.count > 1 ? requests[1] : nil)
        #expect(resumed.range == "bytes=\(Self.offset)-")
        #expect(resumed.ifRange == oldTag)
        switch refusal {
        case .rangeIgnored, .validatorChanged:
            #expect(resumed.status == 200)
            #expect(requests.count == 2)
        case .unsatisfiable, .wrongContentRange:
            #expect(resumed.status == (refusal == .unsatisfiable ? 416 : 206))
            #expect(requests.count == 3, "the request is sent again")
            #expect(requests.last?.range == nil && requests.last?.ifRange == nil, "without Range and If-Range")
            #expect(requests.last?.status == 200)
        }
        let consumed = await pollUntil(timeout: .seconds(2)) { partialFilesPresent() == partials }
        #expect(consumed)
    }

    @Test("resume data outlives its session: a new session resumes it after the first was invalidated", .exclusiveDownloadFiles)
    func newSession() async throws {
        let first = try ResumeFixture()
        // Its session's finishTasksAndInvalidate is a no-op once invalidated below; covers an early exit.
        defer { first.close() }
        let server = first.server
        let (resumeData, _) = try await first.interrupt(at: Self.offset)
        first.session.invalidateAndCancel()
        let data = try #require(resumeData)

        let recorder = ResumeRecorder()
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        session.downloadTask(withResumeData: data).resume()
        let done = await recorder.waitForCompletion()
        try #require(done)
        expectResumed(recorder.snapshot, at: Int64(Self.offset), length: server.body.count, sha256: server.sha256)
        #expect(server.requests.last?.range == "bytes=\(Self.offset)-")
    }

    @Test("the partial file: CourierPartial_*.partial in the temporary directory, kept with the resume data, consumed by the resume", .exclusiveDownloadFiles)
    func partialFileLifecycle() async throws {
        let fixture = try ResumeFixture()
        defer { fixture.close() }
        let (server, partials) = (fixture.server, fixture.partials)
        let downloads = downloadFilesPresent()
        let (resumeData, _) = try await fixture.interrupt(at: Self.offset)
        let data = try #require(resumeData)

        let kept = partialFilesPresent().subtracting(partials)
        #expect(kept.count == 1)
        let name = try #require(kept.first)
        #expect(name.hasPrefix("CourierPartial_") && name.hasSuffix(".partial"), "\(name)")
        let path = FileManager.default.temporaryDirectory.appendingPathComponent(name).path
        let contents = FileManager.default.contents(atPath: path)
        #expect(contents?.count == Self.offset, "the partial file holds the bytes written")
        let intact = contents.map { Array($0) } == Array(server.body[..<Self.offset])
        #expect(intact, "the partial file holds the body's first bytes")
        let left = await downloadFilesLeft(besides: downloads)
        #expect(left.isEmpty, "no CourierDownload_ file is left once the task ended: \(left)")

        let record = try await fixture.resumeDownload(data)
        expectResumed(record, at: Int64(Self.offset), length: server.body.count, sha256: server.sha256)
        let consumed = await pollUntil(timeout: .seconds(2)) { partialFilesPresent() == partials }
        #expect(consumed, "the partial file is deleted after a successful resume")
        let leftAfterResume = await downloadFilesLeft(besides: downloads)
        #expect(leftAfterResume.isEmpty, "\(leftAfterResume)")
    }

    @Test("a plain cancel() gives no resume data and leaves no file", .exclusiveDownloadFiles)
    func plainCancel() async throws {
        let fixture = try ResumeFixture()
        defer { fixture.close() }
        let (server, recorder, session, partials) = (fixture.server, fixture.recorder, fixture.session, fixture.partials)
        let downloads = downloadFilesPresent()
        server.pause(at: Self.offset)
        let task = session.downloadTask(with: server.url())
        task.resume()
        let reached = await pollUntil { task.countOfBytesReceived >= Int64(Self.offset) }
        try #require(reached)
        task.cancel()
        let done = await recorder.waitForCompletion()
        server.release()
        try #require(done)
        let error = try #require(recorder.snapshot.error as? URLError)
        #expect(error.code == .cancelled)
        #expect(error.downloadTaskResumeData == nil)
        #expect(!error.userInfo.keys.contains(URLSessionDownloadTaskResumeData))
        #expect(partialFilesPresent() == partials, "no partial file is kept")
        let left = await downloadFilesLeft(besides: downloads)
        #expect(left.isEmpty, "the download file is deleted: \(left)")
    }

    @Test("a partial file gone before the resume: a plain GET from the start, didResumeAtOffset(0), still the whole file", .exclusiveDownloadFiles)
    func partialFileGone() async throws {
        let fixture = try ResumeFixture()
        defer { fixture.close() }
        let (server, partials) = (fixture.server, fixture.partials)
        let (resumeData, _) = try await fixture.interrupt(at: Self.offset)
        let data = try #require(resumeData)
        let kept = partialFilesPresent().subtracting(partials)
        try #require(kept.count == 1)
        for name in kept {
            try FileManager.default.removeItem(at: FileManager.default.temporaryDirectory.appendingPathComponent(name))
        }

        let record = try await fixture.resumeDownload(data)
        expectResumed(record, at: 0, length: server.body.count, sha256: server.sha256)
        let requests = server.requests
        #expect(requests.count == 2)
        #expect(requests.last?.range == nil && requests.last?.ifRange == nil, "nothing to go on from: no Range")
        #expect(requests.last?.status == 200)
    }
}

/// What completion and resume-data handlers got, in the order they ran.
final class HandlerLog: Sendable {
    struct Entry: Sendable {
        var event: String
        var onQueue: Bool
        var resumeData: Data?
        var location: URL?
        /// The file's bytes, read inside the handler.
        var contents: Data?
        var error: (any Error)?
    }

    private let storage = Mutex<[Entry]>([])

    var entries: [Entry] { storage.withLock { $0 } }

    func note(_ session: URLSession, _ event: String, resumeData: Data? = nil, location: URL? = nil, error: (any Error)? = nil) {
        let onQueue = OperationQueue.current === session.delegateQueue
        let contents = location.flatMap { FileManager.default.contents(atPath: $0.path) }
        let entry = Entry(event: event, onQueue: onQueue, resumeData: resumeData, location: location, contents: contents, error: error)
        storage.withLock { $0.append(entry) }
    }
}
