@testable import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Records download-delegate callbacks: progress, the file's bytes as handed over, whether the
/// file was still there, and the order of events.
final class DownloadRecorder: NSObject, URLSessionDownloadDelegate, @unchecked Sendable {
    struct Record {
        var events: [String] = []
        var written: [(Int64, Int64, Int64)] = []
        var location: URL?
        var contents: Data?
        var error: (any Error)?
        var offQueue = 0
    }

    let record = Mutex(Record())
    private let finished = Mutex<(done: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))
    /// Called inside didWriteData, on the delegate queue.
    let onWrite: (@Sendable (URLSessionDownloadTask) -> Void)?

    init(onWrite: (@Sendable (URLSessionDownloadTask) -> Void)? = nil) {
        self.onWrite = onWrite
    }

    private func note(_ session: URLSession, _ event: String) {
        record.withLock { record in
            if record.events.last != event || event != "write" { record.events.append(event) }
            if OperationQueue.current !== session.delegateQueue { record.offQueue += 1 }
        }
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        note(session, "write")
        record.withLock { $0.written.append((bytesWritten, totalBytesWritten, totalBytesExpectedToWrite)) }
        onWrite?(downloadTask)
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        note(session, "finish")
        let contents = FileManager.default.contents(atPath: location.path)
        record.withLock { record in
            record.location = location
            record.contents = contents
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
        note(session, "metrics")
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        note(session, "complete")
        record.withLock { $0.error = error }
        let waiter = finished.withLock { state -> CheckedContinuation<Void, Never>? in
            state.done = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    func waitForCompletion() async {
        await withCheckedContinuation { continuation in
            let done = finished.withLock { state -> Bool in
                if !state.done { state.waiter = continuation }
                return state.done
            }
            if done { continuation.resume() }
        }
    }
}

/// The download files Courier has in the temporary directory now.
/// What this process's open descriptors that point at a download file point at (a deleted file
/// shows with " (deleted)" after its path).
func openDownloadFileDescriptors() -> [String] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return names.compactMap { name in
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)"),
              target.contains("/CourierDownload_") else { return nil }
        return target
    }
}

/// The `CourierDownload_` files in the temporary directory. A test takes this set at its start
/// and checks at its end with ``downloadFilesLeft(besides:patience:)``, which looks only for
/// files outside it: the file of a download that ended in another test just before may still
/// be on its way out when the set is taken, and go during the test (a whole-suite run failed
/// once on comparing the sets for equality that way).
func downloadFilesPresent() -> Set<String> {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: FileManager.default.temporaryDirectory.path)) ?? []
    return Set(names.filter { $0.hasPrefix("CourierDownload_") })
}

/// The download files in the temporary directory that are not in `before`, once none has
/// gone for `patience`, each with its size and age: empty when the test left none. A file of
/// the test's own stays, and fails it; a deletion that trails the completion, or a download of
/// another test that slipped past ``DownloadFilesLock``, ends within the wait (and the message
/// then says which file outlived it, for finding the download it belonged to).
func downloadFilesLeft(besides before: Set<String>, patience: Duration = .seconds(10)) async -> [String] {
    let deadline = ContinuousClock.now + patience
    var left = downloadFilesPresent().subtracting(before)
    while !left.isEmpty, ContinuousClock.now < deadline {
        try? await Task.sleep(for: .milliseconds(20))
        left = downloadFilesPresent().subtracting(before)
    }
    let directory = FileManager.default.temporaryDirectory
    return left.sorted().map { name in
        let attributes = try? FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(name).path)
        let size = (attributes?[.size] as? NSNumber)?.int64Value ?? -1
        let age = (attributes?[.modificationDate] as? Date).map { String(format: "%.1f s", Date().timeIntervalSince($0)) } ?? "?"
        return "\(name) (\(size) bytes, modified \(age) ago)"
    }
}

/// How a download task with a completion handler ended: with its file (whole or not), or with
/// an error.
enum DownloadEnding: Sendable {
    case finished(whole: Bool)
    case failed(URLError.Code?, String)
}

/// Download tasks against nginx: the body streams to a temporary file that is handed over and
/// then deleted. Serialized: the tests look at which download files exist.
@Suite("Download tasks", .serialized)
struct DownloadTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    /// Where a download's writes happen: on the loop while the disk is quick, on the writer once
    /// it is slow (a zero threshold makes every write look slow).
    enum Disk: String, CaseIterable, Sendable {
        case quick, slow

        func apply(to session: URLSession) {
            if self == .slow { session.slowDiskWriteThreshold.withLock { $0 = .zero } }
        }
    }

    @Test("the delegate gets progress, then the file, then metrics and completion; the file is deleted after", .exclusiveDownloadFiles, arguments: ["/files/8m.bin", "/chunked/1m.bin"], Disk.allCases)
    func delegateDownload(_ path: String, _ disk: Disk) async throws {
        let before = downloadFilesPresent()
        let recorder = DownloadRecorder()
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        disk.apply(to: session)
        defer { session.finishTasksAndInvalidate() }
        let task = session.downloadTask(with: nginx.url(path))
        #expect(task.state == .suspended)
        task.resume()
        await recorder.waitForCompletion()
        let record = recorder.record.withLock { $0 }
        let name = String(path.split(separator: "/").last!)
        let fixture = try #require(NginxServer.fixtures[name])
        #expect(record.error == nil)
        #expect(record.events == ["write", "finish", "metrics", "complete"])
        #expect(record.offQueue == 0)
        let intact = record.contents.map(Array.init) == fixture
        #expect(intact, "the file differs from the served one")
        let location = try #require(record.location)
        #expect(!FileManager.default.fileExists(atPath: location.path), "the file is deleted once the delegate returns")
        #expect(record.written.map(\.0).reduce(0, +) == Int64(fixture.count), "progress adds up to the body")
        #expect(record.written.last?.1 == Int64(fixture.count))
        let totals = record.written.map(\.1)
        #expect(totals == totals.sorted())
        #expect(record.written.allSatisfy { $0.2 == (path.hasPrefix("/chunked/") ? -1 : Int64(fixture.count)) })
        #expect(task.countOfBytesReceived == Int64(fixture.count))
        #expect((task.response as? HTTPURLResponse)?.statusCode == 200)
        #expect(task.state == .completed)
        let left = await downloadFilesLeft(besides: before)
        #expect(left.isEmpty, "no download file is left behind: \(left)")
    }

    @Test("a completion handler gets the file, which is gone after it returns; the delegate's download callbacks are skipped", .exclusiveDownloadFiles)
    func completionHandler() async throws {
        let recorder = DownloadRecorder()
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (location, contents, response, error) = await withCheckedContinuation { continuation in
            session.downloadTask(with: nginx.url("/files/1m.bin")) { location, response, error in
                let contents = location.flatMap { FileManager.default.contents(atPath: $0.path) }
                continuation.resume(returning: (location, contents, response, error))
            }.resume()
        }
        #expect(error == nil)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let intact = contents.map(Array.init) == NginxServer.fixtures["1m.bin"]
        #expect(intact)
        let path = try #require(location?.path)
        // Deleted on the delegate queue right after the handler returned.
        for _ in 0..<200 where FileManager.default.fileExists(atPath: path) { try await Task.sleep(for: .milliseconds(10)) }
        #expect(!FileManager.default.fileExists(atPath: path))
        let events = recorder.record.withLock { $0.events }
        #expect(!events.contains("finish") && !events.contains("write") && !events.contains("complete"))
    }

    @Test("download(for:) returns a file the caller owns, and the response", .exclusiveDownloadFiles)
    func asyncDownload() async throws {
        let (location, response) = try await URLSession.shared.download(from: nginx.url("/chunked/8m.bin"))
        defer { try? FileManager.default.removeItem(at: location) }
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let contents = try Data(contentsOf: location)
        let intact = Array(contents) == NginxServer.fixtures["8m.bin"]
        #expect(intact)
    }

    @Test("a 404 still downloads its body and completes without an error", .exclusiveDownloadFiles)
    func notFound() async throws {
        let (location, response) = try await URLSession.shared.download(from: nginx.url("/files/missing.txt"))
        defer { try? FileManager.default.removeItem(at: location) }
        #expect((response as? HTTPURLResponse)?.statusCode == 404)
        let contents = try Data(contentsOf: location)
        #expect(!contents.isEmpty)
    }

    @Test("cancelling mid-body fails with .cancelled and deletes the partial file", .exclusiveDownloadFiles)
    func cancelMidBody() async throws {
        let before = downloadFilesPresent()
        // The body stops after its first MiB until the server is stopped: however late the
        // delegate queue runs the first didWriteData, the body cannot be complete by then.
        let server = try ResumableServer(size: 8 * 1024 * 1024)
        defer { server.stop() }
        server.pause(at: 1024 * 1024)
        let recorder = DownloadRecorder(onWrite: { $0.cancel() })
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.downloadTask(with: server.url())
        task.resume()
        await recorder.waitForCompletion()
        let record = recorder.record.withLock { $0 }
        #expect(urlErrorCode(record.error) == .cancelled)
        #expect(!record.events.contains("finish"))
        #expect(task.countOfBytesReceived < 8 * 1024 * 1024)
        let left = await downloadFilesLeft(besides: before)
        #expect(left.isEmpty, "the partial file is deleted: \(left)")
    }

    @Test("cancelling the Swift task cancels download(for:)", .exclusiveDownloadFiles)
    func swiftCancellation() async throws {
        let before = downloadFilesPresent()
        // The body stops after its first MiB until the server is stopped: the download is
        // surely still running when the cancel comes, however slow the machine.
        let server = try ResumableServer(size: 8 * 1024 * 1024)
        defer { server.stop() }
        server.pause(at: 1024 * 1024)
        let load = Task { try await URLSession.shared.download(from: server.url()) }
        try await Task.sleep(for: .milliseconds(100))
        load.cancel()
        let result = await load.result
        #expect(throws: URLError.self) { try result.get() }
        #expect(urlErrorCode(result.error) == .cancelled)
        let left = await downloadFilesLeft(besides: before)
        #expect(left.isEmpty, "no download file is left behind: \(left)")
    }

    @Test("a file that cannot be written fails the task with .cannotWriteToFile and is deleted (mid-body, or when the last bytes are written at the end)", .exclusiveDownloadFiles, arguments: ["/files/1m.bin", "/files/hello.txt"], Disk.allCases)
    func writeFailure(_ resource: String, _ disk: Disk) async throws {
        let session = URLSession(configuration: .uncached)
        disk.apply(to: session)
        defer { session.finishTasksAndInvalidate() }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("courier-readonly-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        session.makeDownloadFile.withLock { make in
            // Opened for reading only: every write fails.
            make.make = { DownloadFile(url: URL(fileURLWithPath: path), descriptor: open(path, O_RDONLY | O_CLOEXEC)) }
        }
        let error = await #expect(throws: URLError.self) {
            try await session.download(from: nginx.url(resource))
        }
        #expect(error?.code == .cannotWriteToFile)
        #expect(error?.failingURL == nginx.url(resource))
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test("a full disk (a tmpfs with no room, ENOSPC from the kernel) fails the download with .cannotWriteToFile, saying why, and leaves no partial file")
    func fullDisk() async throws {
        let probe = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("courier-download-probe")
        try #require(FileManager.default.isExecutableFile(atPath: probe.path), "courier-download-probe is built with the tests")
        let source = nginx.url("/files/1m.bin").absoluteString
        let run = try await onOwnThread { try FullFileSystem.run(probe, [source]) }
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.hasPrefix("error \(URLError.Code.cannotWriteToFile.rawValue) "), "\(run.stdout)")
        #expect(run.stdout.contains(String(cString: strerror(ENOSPC))), "\(run.stdout)")
        #expect(run.leftovers.isEmpty, "the partial download was removed: \(run.leftovers)")
    }

    @Test("under courierKeepsPartialDownloads, a full disk keeps what was written even when the body arrived whole before its one write failed")
    func fullDiskKeepsPartialOfLastWrite() async throws {
        // 64 KiB fit in the writer's first 256 KiB chunk, so nothing is written before the task
        // completes; the 16 KiB file system then takes part of that one write.
        try await expectPartialKeptOnFullDisk(["--off-loop", nginx.url("/files/64k.bin").absoluteString], received: 64 * 1024)
    }

    @Test("under courierKeepsPartialDownloads, a resumable download cut short keeps what was written when flushing its buffer fills the disk, and says the write failed")
    func fullDiskKeepsPartialOfResumableFailure() async throws {
        // 40 KiB of a 64 KiB entity with a strong ETag, then a close: resume data is offered.
        // The 40 KiB wait in the file's buffer until the download stops, and flushing them
        // into a 16 KiB file system is the write that fails.
        let server = try ResumableServer(size: 64 * 1024)
        defer { server.stop() }
        server.cut(at: [40 * 1024], with: .close)
        try await expectPartialKeptOnFullDisk([server.url().absoluteString], received: 40 * 1024)
    }

    /// Runs courier-download-probe with `--keep-partial` and `arguments` over a 16 KiB full file
    /// system, and checks the outcome: `.cannotWriteToFile` for ENOSPC, and a partial file of
    /// part of the `received` bytes, named in the error and left where it was written.
    private func expectPartialKeptOnFullDisk(_ arguments: [String], received: Int) async throws {
        let probe = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("courier-download-probe")
        try #require(FileManager.default.isExecutableFile(atPath: probe.path), "courier-download-probe is built with the tests")
        let run = try await onOwnThread { try FullFileSystem.run(probe, ["--keep-partial"] + arguments, size: 16 * 1024) }
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n")
        #expect(lines.first?.hasPrefix("error \(URLError.Code.cannotWriteToFile.rawValue) ") == true, "\(run.stdout)")
        #expect(run.stdout.contains(String(cString: strerror(ENOSPC))), "\(run.stdout)")
        let partialSize = lines.dropFirst().first.flatMap { $0.hasPrefix("partial ") ? Int($0.dropFirst(8)) : nil }
        #expect((partialSize ?? 0) > 0 && (partialSize ?? 0) < received, "the written part is kept: \(run.stdout)")
        #expect(run.leftovers.count == 1, "the partial file stays where it was written: \(run.leftovers)")
    }

    @Test("a directory where no file can be made fails the task with .cannotCreateFile", .exclusiveDownloadFiles)
    func createFailure() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        session.makeDownloadFile.withLock { make in
            make.make = { try DownloadFile.create(in: URL(fileURLWithPath: "/nonexistent-courier-directory")) }
        }
        let error = await #expect(throws: URLError.self) {
            try await session.download(from: nginx.url("/files/hello.txt"))
        }
        #expect(error?.code == .cannotCreateFile)
    }

    @Test("a cancel that races with the start leaves no file and no descriptor behind", .exclusiveDownloadFiles)
    func cancelDuringStart() async throws {
        let before = downloadFilesPresent()
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let taskBox = Mutex<URLSessionDownloadTask?>(nil)
        session.makeDownloadFile.withLock { make in
            // The cancel lands after the task began starting and before its file is recorded.
            make.make = {
                taskBox.withLock { $0 }?.cancel()
                return try DownloadFile.create(in: FileManager.default.temporaryDirectory)
            }
        }
        let error = await withCheckedContinuation { continuation in
            let task = session.downloadTask(with: nginx.url("/files/1m.bin")) { _, _, error in
                continuation.resume(returning: error)
            }
            taskBox.withLock { $0 = task }
            task.resume()
        }
        #expect(urlErrorCode(error) == .cancelled)
        let left = await downloadFilesLeft(besides: before)
        #expect(left.isEmpty, "the file made during the start is deleted: \(left)")
        // Other tests open sockets meanwhile, so the check names the download file's descriptor
        // rather than counting them all.
        #expect(openDownloadFileDescriptors().isEmpty, "the file's descriptor is closed")
    }

    @Test("cancels from another thread around the response's arrival leave no file and no descriptor behind", .exclusiveDownloadFiles)
    func cancelAroundTheResponse() async throws {
        let before = downloadFilesPresent()
        // Each response comes 2 ms after its request, so that a cancel can land before it.
        let body = deterministicBytes(count: 4096, seed: 41)
        let server = try ScriptedServer { connection in
            while connection.readRequest(timeout: 10) != nil {
                usleep(2000)
                connection.respond(body: body)
            }
        }
        defer { server.stop() }
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let url = server.url("/file")
        // Each cancel comes from this thread after a delay spread over twice what a whole
        // download takes here, so that they land before the response, while it is handed to
        // the task, and after the end; none leaves a file.
        let outcomes = await onOwnThread { () -> (cancelled: Int, finished: Int, other: [String]) in
            var counts = (cancelled: 0, finished: 0, other: [String]())
            // Timed on a warm connection (a sanitizer's build is several times slower than a
            // plain one); the delays are spun, since a sleep can outlast the download.
            var took = Duration.zero
            for _ in 0..<2 {
                let timed = DispatchSemaphore(value: 0)
                let started = ContinuousClock.now
                session.downloadTask(with: url) { _, _, _ in timed.signal() }.resume()
                timed.wait()
                took = ContinuousClock.now - started
            }
            let spread = max(Int(took / .nanoseconds(1)) * 2, 20_000)
            for round in 0..<300 {
                let done = DispatchSemaphore(value: 0)
                let ending = Mutex<DownloadEnding?>(nil)
                let task = session.downloadTask(with: url) { location, _, error in
                    let whole = location.flatMap { FileManager.default.contents(atPath: $0.path) }.map { Array($0) == body } ?? false
                    ending.withLock { $0 = error.map { .failed(($0 as? URLError)?.code, "\($0)") } ?? .finished(whole: whole) }
                    done.signal()
                }
                task.resume()
                let until = ContinuousClock.now + .nanoseconds((round * 7_919_011) % spread)
                while ContinuousClock.now < until {}
                task.cancel()
                done.wait()
                switch ending.withLock({ $0 }) {
                case .finished(whole: true)?: counts.finished += 1
                case .failed(.cancelled?, _)?: counts.cancelled += 1
                case let other: counts.other.append(String(describing: other))
                }
            }
            return counts
        }
        #expect(outcomes.other.isEmpty, "each task was cancelled or finished whole: \(outcomes.other)")
        #expect(outcomes.cancelled > 0 && outcomes.finished > 0, "the cancels landed before and after the end: \(outcomes)")
        let left = await downloadFilesLeft(besides: before)
        #expect(left.isEmpty, "no download file is left behind: \(left)")
        #expect(openDownloadFileDescriptors().isEmpty, "no download file's descriptor is open")
    }

    @Test("an HTTP/2 stream refused after part of its body fails instead of being sent again", .exclusiveDownloadFiles)
    func refusedAfterPartialBody() async throws {
        let body = [UInt8](repeating: 0x61, count: 5000)
        let server = try ScriptedServer { connection in
            guard HTTP2Script.awaitRequest(connection) else { return }
            connection.write(HTTP2Script.settings + HTTP2Script.settingsAck + HTTP2Script.headers(stream: 1))
            if connection.index == 0 {
                // Part of the body, then "refused": replaying it would deliver the part twice.
                connection.write(HTTP2Script.data(stream: 1, Array(body[..<1000]), end: false))
                connection.write(HTTP2Script.reset(stream: 1, code: 7))
            } else {
                connection.write(HTTP2Script.data(stream: 1, body, end: true))
            }
            _ = connection.readToEOF(timeout: 5)
        }
        defer { server.stop() }
        let configuration = URLSessionConfiguration.uncached
        configuration.http2PriorKnowledge = true
        let session = URLSession(configuration: configuration)
        defer { session.invalidateAndCancel() }
        let before = downloadFilesPresent()
        let error = await #expect(throws: URLError.self) {
            let (location, _) = try await session.download(from: server.url("/file"))
            let length = (try? Data(contentsOf: location).count) ?? -1
            try? FileManager.default.removeItem(at: location)
            Issue.record("the download succeeded with \(length) bytes")
        }
        #expect(error?.code == .networkConnectionLost)
        #expect(server.connectionCount == 1, "the stream was not sent again")
        let left = await downloadFilesLeft(besides: before)
        #expect(left.isEmpty, "no download file is left behind: \(left)")
    }

    @Test("tasks released as soon as they complete: nothing left on the loop touches them", .exclusiveDownloadFiles, arguments: ["download", "data"])
    func releasedAtCompletion(_ kind: String) async throws {
        // The last read both ends the body and completes the task; the batch of progress or
        // data queued for the end of that read must not reach the task once it is gone.
        for _ in 0..<200 {
            let recorder = DownloadRecorder()
            let data = RecordingDelegate()
            let session = URLSession(configuration: .uncached, delegate: kind == "download" ? recorder : data, delegateQueue: nil)
            if kind == "download" {
                session.downloadTask(with: nginx.url("/files/64k.bin")).resume()
                await recorder.waitForCompletion()
                #expect(recorder.record.withLock { $0.error } == nil)
            } else {
                session.dataTask(with: nginx.url("/files/64k.bin")).resume()
                await data.waitForCompletion()
                #expect(data.record.withLock { $0.data.count } == 64 * 1024)
            }
            session.invalidateAndCancel()
        }
    }

    @Test("download tasks are listed by getTasksWithCompletionHandler", .exclusiveDownloadFiles)
    func listed() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.invalidateAndCancel() }
        let download = session.downloadTask(with: nginx.url("/files/hello.txt"))
        let data = session.dataTask(with: nginx.url("/files/hello.txt"))
        let (dataTasks, uploads, downloads) = await withCheckedContinuation { continuation in
            session.getTasksWithCompletionHandler { continuation.resume(returning: ($0, $1, $2)) }
        }
        #expect(dataTasks.map(\.taskIdentifier) == [data.taskIdentifier])
        #expect(uploads.isEmpty)
        #expect(downloads.map(\.taskIdentifier) == [download.taskIdentifier])
    }

    @Test("an HTTP/2 download over TLS arrives whole", .exclusiveDownloadFiles)
    func http2() async throws {
        let recorder = DownloadRecorder()
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        session.downloadTask(with: nginx.tlsURL("good", "/files/8m.bin")).resume()
        await recorder.waitForCompletion()
        let record = recorder.record.withLock { $0 }
        #expect(record.error == nil)
        let intact = record.contents.map(Array.init) == NginxServer.fixtures["8m.bin"]
        #expect(intact)
    }
}

extension Result {
    var error: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

/// Just enough of HTTP/2 on the server side to script a response frame by frame (no HPACK
/// beyond the one-byte `:status: 200`).
enum HTTP2Script {
    static func frame(type: UInt8, flags: UInt8, stream: UInt32, _ payload: [UInt8]) -> [UInt8] {
        let length = payload.count
        return [UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff), type, flags,
                UInt8(stream >> 24 & 0x7f), UInt8(stream >> 16 & 0xff), UInt8(stream >> 8 & 0xff), UInt8(stream & 0xff)] + payload
    }

    static let settings = frame(type: 4, flags: 0, stream: 0, [])
    static let settingsAck = frame(type: 4, flags: 1, stream: 0, [])

    /// HEADERS with END_HEADERS: `:status: 200` (static table index 8).
    static func headers(stream: UInt32) -> [UInt8] { frame(type: 1, flags: 4, stream: stream, [0x88]) }

    static func data(stream: UInt32, _ bytes: [UInt8], end: Bool) -> [UInt8] {
        frame(type: 0, flags: end ? 1 : 0, stream: stream, bytes)
    }

    static func reset(stream: UInt32, code: UInt32) -> [UInt8] {
        frame(type: 3, flags: 0, stream: stream, [UInt8(code >> 24), UInt8(code >> 16 & 0xff), UInt8(code >> 8 & 0xff), UInt8(code & 0xff)])
    }

    /// Reads the client preface and frames until the first HEADERS frame; false on EOF.
    static func awaitRequest(_ connection: ScriptedConnection) -> Bool {
        var bytes: [UInt8] = []
        var offset = 24
        while true {
            while bytes.count >= offset + 9 {
                let length = Int(bytes[offset]) << 16 | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2])
                if bytes[offset + 3] == 1 { return true }
                offset += 9 + length
            }
            let more = connection.readAvailable(timeout: 5)
            if more.isEmpty { return false }
            bytes += more
        }
    }
}
