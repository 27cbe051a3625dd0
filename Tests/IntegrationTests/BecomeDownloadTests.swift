@testable import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// A session delegate for data tasks that may become download tasks: answers `didReceive
/// response` with `disposition` (at once, or after `delayMilliseconds` from another thread) and
/// records every data and download event with the task it came for.
final class BecomeDownloadRecorder: NSObject, URLSessionDataDelegate, URLSessionDownloadDelegate, @unchecked Sendable {
    struct Completion {
        var task: Int
        var error: (any Error)?
    }

    struct Record {
        /// Event names in order; consecutive "data" and "write" are collapsed.
        var events: [String] = []
        var responseTask: Int?
        var downloadTask: URLSessionDownloadTask?
        /// The data task `didBecome` named.
        var becameFrom: URLSessionDataTask?
        var becomeCount = 0
        var dataTaskStateAtBecome: URLSessionTask.State?
        var downloadStateAtBecome: URLSessionTask.State?
        var data = Data()
        var dataTasks: Set<Int> = []
        var written: [(bytes: Int64, total: Int64, expected: Int64)] = []
        var writeTasks: Set<Int> = []
        var finishTasks: [Int] = []
        var location: URL?
        var contents: Data?
        var metricsTasks: [Int] = []
        var completions: [Completion] = []
        /// Asked inside didBecome: what getAllTasks and getTasksWithCompletionHandler listed.
        var liveTasks: [Int]?
        var liveByKind: (data: [Int], uploads: [Int], downloads: [Int])?
        var offQueue = 0
    }

    let record = Mutex(Record())
    let disposition: URLSession.ResponseDisposition
    let delayMilliseconds: Int?
    let asksForTasksOnBecome: Bool

    init(disposition: URLSession.ResponseDisposition, delayMilliseconds: Int? = nil, asksForTasksOnBecome: Bool = false) {
        self.disposition = disposition
        self.delayMilliseconds = delayMilliseconds
        self.asksForTasksOnBecome = asksForTasksOnBecome
    }

    var snapshot: Record { record.withLock { $0 } }

    private func note(_ session: URLSession, _ event: String, _ update: (inout Record) -> Void = { _ in }) {
        record.withLock { record in
            if !((event == "data" || event == "write") && record.events.last == event) { record.events.append(event) }
            if OperationQueue.current !== session.delegateQueue { record.offQueue += 1 }
            update(&record)
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        note(session, "response") { record in
            record.responseTask = dataTask.taskIdentifier
        }
        let answer = self.disposition
        guard let delay = delayMilliseconds else {
            completionHandler(answer)
            return
        }
        // Later, from another thread.
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(delay)) {
            completionHandler(answer)
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didBecome downloadTask: URLSessionDownloadTask) {
        note(session, "become") { record in
            record.becomeCount += 1
            record.downloadTask = downloadTask
            record.dataTaskStateAtBecome = dataTask.state
            record.downloadStateAtBecome = downloadTask.state
            record.becameFrom = dataTask
        }
        guard asksForTasksOnBecome else { return }
        session.getAllTasks { [self] tasks in
            record.withLock { $0.liveTasks = tasks.map(\.taskIdentifier) }
        }
        session.getTasksWithCompletionHandler { [self] data, uploads, downloads in
            let kinds = (data: data.map(\.taskIdentifier), uploads: uploads.map(\.taskIdentifier), downloads: downloads.map(\.taskIdentifier))
            record.withLock { $0.liveByKind = kinds }
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        note(session, "data") { record in
            record.data.append(data)
            record.dataTasks.insert(dataTask.taskIdentifier)
        }
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        note(session, "write") { record in
            record.written.append((bytes: bytesWritten, total: totalBytesWritten, expected: totalBytesExpectedToWrite))
            record.writeTasks.insert(downloadTask.taskIdentifier)
        }
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        // The file is deleted when this returns: read it now.
        let contents = FileManager.default.contents(atPath: location.path)
        note(session, "finish") { record in
            record.finishTasks.append(downloadTask.taskIdentifier)
            record.location = location
            record.contents = contents
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
        note(session, "metrics") { $0.metricsTasks.append(task.taskIdentifier) }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        note(session, "complete") { $0.completions.append(Completion(task: task.taskIdentifier, error: error)) }
    }

    /// Waits for the first didCompleteWithError, then a moment more for any call that should
    /// not come (a second completion); false after `timeout`.
    func waitForCompletion(timeout: Duration = .seconds(20)) async -> Bool {
        guard await pollUntil(timeout: timeout, { self.snapshot.completions.count > 0 }) else { return false }
        try? await Task.sleep(for: .milliseconds(150))
        return true
    }
}

/// Small bodies that arrive whole (or nearly) while the delegate has not answered yet.
enum HeldBody: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case hello, hundred, sixtyFourK, empty, scriptedOneWrite

    var testDescription: String { rawValue }

    /// Bytes written by the scripted server in one write with its head: they are all read
    /// before the delegate answers.
    static let scriptedBody: [UInt8] = {
        var random = SplitMix64(seed: 0xB0D1)
        return (0..<1000).map { index in index % 97 == 0 ? UInt8(ascii: "\r") : UInt8(truncatingIfNeeded: random.next()) }
    }()

    /// The URL to load, the body it serves, and the server to keep alive meanwhile.
    func source(_ nginx: NginxServer) throws -> (url: URL, body: [UInt8], server: ScriptedServer?) {
        switch self {
        case .hello: return (nginx.url("/files/hello.txt"), NginxServer.fixtures["hello.txt"]!, nil)
        case .hundred: return (nginx.url("/files/100.bin"), NginxServer.fixtures["100.bin"]!, nil)
        case .sixtyFourK: return (nginx.url("/files/64k.bin"), NginxServer.fixtures["64k.bin"]!, nil)
        case .empty: return (nginx.url("/files/empty.txt"), NginxServer.fixtures["empty.txt"]!, nil)
        case .scriptedOneWrite:
            let body = Self.scriptedBody
            let server = try ScriptedServer { connection in
                guard connection.readRequest() != nil else { return }
                connection.respond(headers: [("Content-Type", "application/octet-stream")], body: body)
                connection.readToEOF(timeout: 3)
            }
            return (server.url("/held"), body, server)
        }
    }
}

/// `URLSession.ResponseDisposition.becomeDownload`: a data task whose delegate answers
/// `didReceive response` with it goes on as a new download task, whose file holds the whole
/// body; and late answers, which hold the body until they come.
@Suite("Data tasks that become downloads")
struct BecomeDownloadTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    /// Runs a data task for `request` in a new session whose delegate is `recorder`, expects the
    /// task's completion, and runs `check` with the data task; the session is invalidated after
    /// `check`.
    func load(
        _ request: URLRequest, with recorder: BecomeDownloadRecorder, sourceLocation: SourceLocation = #_sourceLocation,
        check: (URLSessionDataTask) async throws -> Void
    ) async throws {
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let dataTask = session.dataTask(with: request)
        dataTask.resume()
        #expect(await recorder.waitForCompletion(), sourceLocation: sourceLocation)
        try await check(dataTask)
    }

    /// The checks every successful becomeDownload shares.
    func expectBecameDownload(
        _ recorder: BecomeDownloadRecorder, dataTask: URLSessionDataTask, request: URLRequest, body: [UInt8], expectedLength: Int64?,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let record = recorder.snapshot
        let download = try #require(record.downloadTask, "didBecome downloadTask was called", sourceLocation: sourceLocation)
        let id = download.taskIdentifier

        // Events: the data task's response, then the download task's events only.
        let expected = body.isEmpty
            ? ["response", "become", "finish", "metrics", "complete"]
            : ["response", "become", "write", "finish", "metrics", "complete"]
        #expect(record.events == expected, sourceLocation: sourceLocation)
        #expect(record.becomeCount == 1, sourceLocation: sourceLocation)
        #expect(record.offQueue == 0, "every call on the delegate queue", sourceLocation: sourceLocation)
        #expect(record.responseTask == dataTask.taskIdentifier, sourceLocation: sourceLocation)
        #expect(record.becameFrom === dataTask, "didBecome names the data task", sourceLocation: sourceLocation)

        // The new task: a new identifier, the same requests.
        #expect(id != dataTask.taskIdentifier, sourceLocation: sourceLocation)
        #expect(download.originalRequest == dataTask.originalRequest, sourceLocation: sourceLocation)
        #expect(download.originalRequest?.url == request.url, sourceLocation: sourceLocation)
        #expect(download.currentRequest?.url == dataTask.currentRequest?.url, sourceLocation: sourceLocation)
        #expect(record.dataTaskStateAtBecome == .completed, sourceLocation: sourceLocation)

        // The data task hears nothing more: no data, no completion.
        #expect(record.data.isEmpty, "no didReceive data for the data task", sourceLocation: sourceLocation)
        #expect(record.dataTasks.isEmpty, sourceLocation: sourceLocation)
        #expect(record.completions.count == 1, "one completion", sourceLocation: sourceLocation)
        #expect(record.completions.first?.task == id, "the completion is the download task's", sourceLocation: sourceLocation)
        #expect(record.completions.first.map { $0.error == nil } == true, "\(String(describing: record.completions.first?.error))", sourceLocation: sourceLocation)
        #expect(record.metricsTasks == [id], sourceLocation: sourceLocation)
        #expect(dataTask.state == .completed, sourceLocation: sourceLocation)
        #expect(download.state == .completed, sourceLocation: sourceLocation)
        #expect(download.error == nil, sourceLocation: sourceLocation)
        #expect((download.response as? HTTPURLResponse)?.statusCode == 200, sourceLocation: sourceLocation)

        // The file: the whole body, including what came before the disposition.
        #expect(record.finishTasks == [id], sourceLocation: sourceLocation)
        let contents = try #require(record.contents, "the file was readable in didFinishDownloadingTo", sourceLocation: sourceLocation)
        #expect(contents.count == body.count, sourceLocation: sourceLocation)
        let intact = Array(contents) == body
        #expect(intact, "the file holds the whole body", sourceLocation: sourceLocation)
        if let location = record.location {
            #expect(!FileManager.default.fileExists(atPath: location.path), "the file is deleted once the delegate returns", sourceLocation: sourceLocation)
        }
        #expect(download.countOfBytesReceived == Int64(body.count), sourceLocation: sourceLocation)

        // Progress, for the download task, adds up to the body.
        if !body.isEmpty {
            #expect(record.writeTasks == [id], sourceLocation: sourceLocation)
            #expect(record.written.map(\.bytes).reduce(0, +) == Int64(body.count), sourceLocation: sourceLocation)
            #expect(record.written.last?.total == Int64(body.count), sourceLocation: sourceLocation)
            let totals = record.written.map(\.total)
            #expect(totals == totals.sorted(), sourceLocation: sourceLocation)
            if let expectedLength {
                #expect(record.written.allSatisfy { $0.expected == expectedLength }, sourceLocation: sourceLocation)
            }
        }
    }

    @Test("answered at once: didBecome, then the download task's progress, file and completion; the data task is done", .exclusiveDownloadFiles, arguments: ["/files/8m.bin", "/chunked/1m.bin"])
    func becomeDownloadAtOnce(_ path: String) async throws {
        let before = downloadFilesPresent()
        let recorder = BecomeDownloadRecorder(disposition: .becomeDownload)
        let request = URLRequest(url: nginx.url(path))
        try await load(request, with: recorder) { dataTask in
            let name = String(path.split(separator: "/").last!)
            let fixture = try #require(NginxServer.fixtures[name])
            try expectBecameDownload(recorder, dataTask: dataTask, request: request, body: fixture,
                                     expectedLength: path.hasPrefix("/chunked/") ? -1 : Int64(fixture.count))
            let left = await downloadFilesLeft(besides: before)
            #expect(left.isEmpty, "no download file is left behind: \(left)")
        }
    }

    @Test("answered 300 ms late from another thread: the body that arrived meanwhile waits and goes to the file first", .exclusiveDownloadFiles, arguments: HeldBody.allCases)
    func becomeDownloadLate(_ held: HeldBody) async throws {
        let before = downloadFilesPresent()
        let (url, body, server) = try held.source(nginx)
        defer { server?.stop() }
        let recorder = BecomeDownloadRecorder(disposition: .becomeDownload, delayMilliseconds: 300)
        let request = URLRequest(url: url)
        try await load(request, with: recorder) { dataTask in
            try expectBecameDownload(recorder, dataTask: dataTask, request: request, body: body, expectedLength: Int64(body.count))
            let left = await downloadFilesLeft(besides: before)
            #expect(left.isEmpty, "no download file is left behind: \(left)")
        }
    }

    @Test("getAllTasks during the download lists the download task, running, and not the data task", .exclusiveDownloadFiles)
    func tasksDuringDownload() async throws {
        let recorder = BecomeDownloadRecorder(disposition: .becomeDownload, asksForTasksOnBecome: true)
        // Served at 1 MB/s: the download runs for about a second after didBecome.
        let request = URLRequest(url: nginx.url("/slow/1m.bin"))
        try await load(request, with: recorder) { dataTask in
            #expect(await pollUntil(timeout: .seconds(5)) { recorder.snapshot.liveTasks != nil && recorder.snapshot.liveByKind != nil })
            let record = recorder.snapshot
            let download = try #require(record.downloadTask)
            #expect(record.downloadStateAtBecome == .running)
            #expect(record.dataTaskStateAtBecome == .completed)
            #expect(record.liveTasks == [download.taskIdentifier])
            #expect(record.liveByKind?.data.isEmpty == true, "the data task is no longer listed")
            #expect(record.liveByKind?.uploads.isEmpty == true)
            #expect(record.liveByKind?.downloads == [download.taskIdentifier])
            try expectBecameDownload(recorder, dataTask: dataTask, request: request, body: NginxServer.fixtures["1m.bin"]!, expectedLength: 1024 * 1024)
        }
    }

    @Test("a late .allow still delivers every byte that waited, then the completion", arguments: HeldBody.allCases)
    func allowLate(_ held: HeldBody) async throws {
        let (url, body, server) = try held.source(nginx)
        defer { server?.stop() }
        let recorder = BecomeDownloadRecorder(disposition: .allow, delayMilliseconds: 300)
        try await load(URLRequest(url: url), with: recorder) { dataTask in
            let record = recorder.snapshot
            #expect(record.events == (body.isEmpty ? ["response", "metrics", "complete"] : ["response", "data", "metrics", "complete"]))
            #expect(record.offQueue == 0)
            #expect(record.becomeCount == 0)
            #expect(record.downloadTask == nil)
            let intact = Array(record.data) == body
            #expect(intact, "every byte, in order: got \(record.data.count) of \(body.count)")
            if !body.isEmpty { #expect(record.dataTasks == [dataTask.taskIdentifier]) }
            #expect(record.completions.count == 1)
            #expect(record.completions.first?.task == dataTask.taskIdentifier)
            #expect(record.completions.first.map { $0.error == nil } == true)
            #expect(record.written.isEmpty && record.finishTasks.isEmpty, "no download events")
            #expect(dataTask.state == .completed)
            #expect(dataTask.countOfBytesReceived == Int64(body.count))
        }
    }

    @Test("a late .cancel on a body that arrived fails with .cancelled and delivers no data", arguments: [HeldBody.hundred, .scriptedOneWrite])
    func cancelLate(_ held: HeldBody) async throws {
        let (url, _, server) = try held.source(nginx)
        defer { server?.stop() }
        let recorder = BecomeDownloadRecorder(disposition: .cancel, delayMilliseconds: 300)
        try await load(URLRequest(url: url), with: recorder) { dataTask in
            let record = recorder.snapshot
            #expect(record.events.filter { $0 != "metrics" } == ["response", "complete"])
            #expect(record.data.isEmpty)
            #expect(record.becomeCount == 0)
            #expect(record.completions.count == 1)
            #expect(record.completions.first?.task == dataTask.taskIdentifier)
            #expect(urlErrorCode(record.completions.first?.error) == .cancelled)
            #expect(dataTask.state == .completed)
            // The task's own error too, also when the body had come before the answer.
            #expect(urlErrorCode(dataTask.error) == .cancelled)
        }
    }

    @Test("a data task with a completion handler ignores the delegate's disposition question: no didBecome, the whole body to the handler")
    func completionHandlerTask() async throws {
        let recorder = BecomeDownloadRecorder(disposition: .becomeDownload)
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (data, response, error) = await loadWithCompletionHandler(session, URLRequest(url: nginx.url("/files/64k.bin")))
        #expect(error == nil)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let intact = data.map(Array.init) == NginxServer.fixtures["64k.bin"]
        #expect(intact)
        let record = recorder.snapshot
        #expect(record.becomeCount == 0)
        #expect(!record.events.contains("response"))
        #expect(!record.events.contains("finish"))
    }
}
