import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Small helpers

/// getAllTasks, waited for.
private func backgroundAllTasks(_ session: URLSession) async -> [URLSessionTask] {
    await withCheckedContinuation { continuation in
        session.getAllTasks { continuation.resume(returning: $0) }
    }
}

/// getTasksWithCompletionHandler, waited for.
private func backgroundTasksByKind(_ session: URLSession) async -> (data: [URLSessionDataTask], uploads: [URLSessionUploadTask], downloads: [URLSessionDownloadTask]) {
    await withCheckedContinuation { continuation in
        session.getTasksWithCompletionHandler { data, uploads, downloads in
            continuation.resume(returning: (data, uploads, downloads))
        }
    }
}

/// getAllTasks until it lists something (a new session may still be reconnecting): what it
/// listed then, or an empty list after `timeout`.
private func backgroundInheritedTasks(_ session: URLSession, timeout: Duration = .seconds(120)) async -> [URLSessionTask] {
    let deadline = ContinuousClock.now + timeout
    while true {
        let tasks = await backgroundAllTasks(session)
        if !tasks.isEmpty || ContinuousClock.now >= deadline { return tasks }
        try? await Task.sleep(for: .milliseconds(20))
    }
}

/// Releases the server's held response until `condition` holds; false after `timeout`.
/// `release()` only acts on a response held at that moment, and the hold may begin a moment
/// after the client saw its first bytes, so it is repeated.
private func keepReleasing(_ server: ResumableServer, timeout: Duration = .seconds(120), until condition: () -> Bool) async -> Bool {
    await pollUntil(timeout: timeout) {
        server.release()
        return condition()
    }
}

/// What a completion handler or a resume-data handler got.
private final class BackgroundHandlerBox: Sendable {
    private let storage = Mutex<(called: Bool, error: (any Error)?, data: Data?)>((false, nil, nil))

    func note(error: (any Error)? = nil, data: Data? = nil) {
        storage.withLock { $0 = (true, error, data) }
    }

    var called: Bool { storage.withLock { $0.called } }
    var error: (any Error)? { storage.withLock { $0.error } }
    var data: Data? { storage.withLock { $0.data } }
}

/// A small file of its own for a test, in a folder deleted by `remove()`.
private struct BackgroundScratchFile {
    let folder = TestRun.makeDirectory("background-file")
    let url: URL

    init(name: String = "body.bin", contents: Data) {
        url = folder.appendingPathComponent(name)
        _ = FileManager.default.createFile(atPath: url.path, contents: contents)
    }

    func remove() {
        try? FileManager.default.removeItem(at: folder)
    }
}

/// The tasks a background session refuses, each failing when resumed.
enum BackgroundRefusedTask: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case uploadFromData, uploadFromStream, dataTaskWithCompletionHandler, downloadWithCompletionHandler, uploadFromFileWithCompletionHandler

    var hasCompletionHandler: Bool {
        switch self {
        case .uploadFromData, .uploadFromStream: false
        case .dataTaskWithCompletionHandler, .downloadWithCompletionHandler, .uploadFromFileWithCompletionHandler: true
        }
    }

    var testDescription: String {
        switch self {
        case .uploadFromData: "uploadTask(with:from:)"
        case .uploadFromStream: "uploadTask(withStreamedRequest:)"
        case .dataTaskWithCompletionHandler: "dataTask(with:completionHandler:)"
        case .downloadWithCompletionHandler: "downloadTask(with:completionHandler:)"
        case .uploadFromFileWithCompletionHandler: "uploadTask(with:fromFile:completionHandler:)"
        }
    }
}

/// How `XDG_DATA_HOME` is set for the probe of the state-directory test.
enum BackgroundDataHome: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// An absolute path: the state goes under it.
    case absolute
    /// A relative path, which the XDG rules say to ignore: the state goes under `~/.local/share`.
    case relative

    var testDescription: String { "XDG_DATA_HOME \(rawValue)" }
}

// MARK: - The tests

/// Background sessions (`URLSessionConfiguration.background(withIdentifier:)`): download tasks
/// and uploads from files carried by the `courier-background` daemon, which outlives the
/// process that made them; a later session with the identifier, in this process or another,
/// gets the tasks back with their events. Other processes are `courier-background-probe`.
///
/// Every test has an identifier of its own and deletes its state directory at the end. The
/// transfers a test needs to be still running when it looks are held by ``ResumableServer``
/// (`pause(at:)`) until the test releases them, so nothing depends on how fast anything is.
/// Serialized (each test starts daemons and other processes), and the downloads hold the
/// download-files lock: the daemon's files are made while they run.
@Suite("Background sessions", .serialized)
struct BackgroundSessionTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    @Test(
        "a download runs in the courier-background daemon: progress to the whole file, didFinishDownloadingTo with a file in the state directory that is gone after the callback, didCompleteWithError; no metrics, no urlSessionDidFinishEvents",
        .exclusiveDownloadFiles
    )
    func download() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let server = try ResumableServer()
        defer { server.stop() }
        // Held after its first MiB, so the transfer is surely in the daemon when the test looks.
        server.pause(at: 1024 * 1024)
        let recorder = BackgroundRecorder()
        let session = fixture.makeSession(recorder)
        let task = session.downloadTask(with: server.url())
        #expect(task.state == .suspended)
        task.resume()
        let id = task.taskIdentifier
        try #require(await recorder.waitForWrite(of: id), "the first bytes came: \(recorder.names())")

        let pidText = (try? String(contentsOf: fixture.directory.appendingPathComponent("daemon.pid"), encoding: .utf8)) ?? ""
        let pid = try #require(BackgroundState.daemonPID(in: fixture.directory), "daemon.pid holds a pid and a newline: \(pidText.debugDescription)")
        #expect(pidText == "\(pid)\n")
        #expect(pid != getpid(), "the transfer runs in another process")
        #expect(BackgroundState.isRunningDaemon(pid), "daemon.pid names a running courier-background")

        let done = await keepReleasing(server) { !recorder.completions(of: id).isEmpty }
        try #require(done, "the download completed: \(recorder.names())")
        let body = server.body
        #expect(recorder.completions(of: id).count == 1)
        #expect(recorder.error(of: id) == nil, "\(String(describing: recorder.error(of: id)))")
        #expect(recorder.names(of: id) == ["write", "finish", "complete"], "progress, the file, the completion; no metrics")
        let finish = try #require(recorder.finishes(of: id).first)
        #expect(recorder.finishes(of: id).count == 1)
        #expect(finish.contents.map { sameBytes($0, body) } == true, "the file is the served one")
        let state = fixture.directory.resolvingSymlinksInPath().path + "/"
        let folder = finish.location.deletingLastPathComponent().resolvingSymlinksInPath().path + "/"
        #expect(folder.hasPrefix(state), "the file is in the state directory: \(finish.location.path)")
        let gone = await pollUntil(timeout: .seconds(30)) { !FileManager.default.fileExists(atPath: finish.location.path) }
        #expect(gone, "the file is deleted once the callback returned")

        let writes = recorder.writes(of: id)
        #expect(writes.map { $0.bytes }.reduce(0, +) == Int64(body.count), "progress adds up to the body")
        #expect(writes.last?.total == Int64(body.count))
        let totals = writes.map { $0.total }
        #expect(totals == totals.sorted())
        #expect(writes.allSatisfy { $0.expected == Int64(body.count) }, "the Content-Length is the expected total")
        let response = try #require(task.response as? HTTPURLResponse)
        #expect(response.statusCode == 200)
        #expect(task.state == .completed)
        #expect(recorder.objects(of: id).allSatisfy { $0 === task }, "the callbacks get the task object the session made")
        #expect(recorder.offQueue == 0, "every callback runs on the delegate queue")
        #expect(server.requests.count == 1)

        // A session with no inherited tasks never hears urlSessionDidFinishEvents.
        try await Task.sleep(for: .seconds(1))
        #expect(recorder.count("finishEvents") == 0)
        #expect(recorder.count("metrics") == 0)
    }

    @Test(
        "the state directory is <data>/courier/background/<identifier with every byte outside [A-Za-z0-9._-] and a leading dot as %XX>, <data> being an absolute XDG_DATA_HOME, else ~/.local/share; daemon.pid in it names the running daemon",
        .exclusiveDownloadFiles, arguments: BackgroundDataHome.allCases
    )
    func stateDirectory(_ dataHome: BackgroundDataHome) async throws {
        let filesBefore = downloadFilesPresent()
        let uuid = UUID().uuidString
        let identifier = ".bg test/\(uuid)/ü%"
        let name = "%2Ebg%20test%2F\(uuid)%2F%C3%BC%25"
        #expect(BackgroundState.name(identifier) == name)

        let scratch = TestRun.makeDirectory("background-data")
        defer { try? FileManager.default.removeItem(at: scratch) }
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_DATA_HOME"] = dataHome == .absolute ? scratch.appendingPathComponent("data").path : "relative-data"
        let fixture = BackgroundFixture(identifier: identifier, environment: environment)
        defer { fixture.close() }
        let home = environment["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? FileManager.default.homeDirectoryForCurrentUser.path
        let expected = dataHome == .absolute
            ? scratch.path + "/data/courier/background/" + name
            : home + "/.local/share/courier/background/" + name
        #expect(fixture.directory.path == expected)

        let server = try ResumableServer()
        defer { server.stop() }
        // Held after its first MiB: the download runs as long as the test looks.
        server.pause(at: 1024 * 1024)
        let probe = try fixture.startProbe(server.url(), description: "state directory", ending: .hold, environment: environment, currentDirectory: scratch)
        let started = await probe.started()
        try #require(started != nil, "the probe started its download: \(probe.errors)")

        let daemon = await BackgroundState.waitForDaemon(in: fixture.directory)
        let pid = try #require(daemon, "daemon.pid in \(expected) names a running courier-background")
        let text = try String(contentsOf: fixture.directory.appendingPathComponent("daemon.pid"), encoding: .utf8)
        #expect(text == "\(pid)\n", "the pid in decimal, then a newline")
        let siblings = try FileManager.default.contentsOfDirectory(atPath: fixture.directory.deletingLastPathComponent().path)
        #expect(siblings.contains(name))
        switch dataHome {
        case .absolute:
            #expect(siblings == [name], "nothing else under the new XDG_DATA_HOME")
            #expect(!FileManager.default.fileExists(atPath: BackgroundState.directory(identifier).path), "nothing in this process's data directory")
        case .relative:
            #expect(!FileManager.default.fileExists(atPath: scratch.appendingPathComponent("relative-data").path), "the relative XDG_DATA_HOME is ignored")
        }

        // No session is left to start another daemon once the probe is gone.
        #expect(await probe.endHolding())
        kill(pid, SIGKILL)
        #expect(await pollUntil(timeout: .seconds(30)) { !BackgroundState.isRunningDaemon(pid) })
        // The killed daemon's download file: no daemon comes after it here to delete it.
        for name in downloadFilesPresent().subtracting(filesBefore) {
            try? FileManager.default.removeItem(at: FileManager.default.temporaryDirectory.appendingPathComponent(name))
        }
    }

    @Test(
        "a task of a process that exited or was killed mid-transfer comes back to a new session: a download task with its identifier, request and description; its events follow, then urlSessionDidFinishEvents once, after the last didCompleteWithError",
        .exclusiveDownloadFiles, arguments: [BackgroundProbe.Ending.exit, .kill]
    )
    func inheritedFromAnotherProcess(_ ending: BackgroundProbe.Ending) async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let server = try ResumableServer()
        defer { server.stop() }
        server.pause(at: 1024 * 1024 + 123)
        let url = server.url("/inherited.bin")
        let description = "inherited — ü \(UUID().uuidString)"
        let probe = try fixture.startProbe(url, description: description, ending: ending)
        let started = await probe.started()
        let id = try #require(started, "the probe started its download: \(probe.errors)")
        try #require(await probe.exited(), "the probe ended")
        if ending == .kill {
            #expect(probe.process.terminationReason == .uncaughtSignal && probe.process.terminationStatus == SIGKILL)
        } else {
            #expect(probe.process.terminationReason == .exit && probe.process.terminationStatus == 0, "\(probe.errors)")
        }

        let kept = TestRun.makeDirectory("background-kept")
        defer { try? FileManager.default.removeItem(at: kept) }
        let recorder = BackgroundRecorder(keepFilesIn: kept)
        let session = fixture.makeSession(recorder)
        // The server holds the transfer: the task is still running whenever the session looks.
        let tasks = await backgroundInheritedTasks(session)
        try #require(tasks.count == 1, "the probe's task comes back: \(tasks)")
        let task = try #require(tasks.first as? URLSessionDownloadTask, "as a download task: \(tasks)")
        #expect(task.taskIdentifier == id)
        #expect(task.originalRequest?.url == url)
        #expect(task.taskDescription == description)
        let kinds = await backgroundTasksByKind(session)
        #expect(kinds.data.isEmpty && kinds.uploads.isEmpty)
        #expect(kinds.downloads.count == 1 && kinds.downloads.first === task, "getTasksWithCompletionHandler has the same task object")

        let finished = await keepReleasing(server) { recorder.count("finishEvents") > 0 }
        try #require(finished, "urlSessionDidFinishEvents came: \(recorder.names())")
        #expect(Array(recorder.names().suffix(3)) == ["finish", "complete", "finishEvents"], "\(recorder.names())")
        #expect(recorder.completions(of: id).count == 1)
        #expect(recorder.error(of: id) == nil, "\(String(describing: recorder.error(of: id)))")
        let finishes = recorder.finishes(of: id)
        #expect(finishes.count == 1)
        let finish = try #require(finishes.first)
        let moved = try #require(finish.kept, "the file could be moved during the callback")
        let contents = try Data(contentsOf: moved)
        #expect(sameBytes(contents, server.body), "the moved file is the whole body")
        #expect(finish.contents.map { sameBytes($0, server.body) } == true)
        #expect(!FileManager.default.fileExists(atPath: finish.location.path))
        #expect(recorder.writes(of: id).last?.total == Int64(server.body.count), "progress goes on to the whole body")
        #expect(recorder.objects(of: id).allSatisfy { $0 === task }, "the callbacks get the task object getAllTasks gave")
        #expect(task.state == .completed)
        #expect((task.response as? HTTPURLResponse)?.statusCode == 200)

        try await Task.sleep(for: .seconds(1))
        #expect(recorder.count("finishEvents") == 1, "once")
        #expect(recorder.events.last?.name == "finishEvents", "nothing after it: \(recorder.names())")
        #expect(await backgroundAllTasks(session).isEmpty)
        #expect(server.requests.count == 1, "the daemon's one request carried the whole download")
    }

    @Test(
        "a download that went on after its process exited: the next session hears didFinishDownloadingTo with the whole file, didCompleteWithError and urlSessionDidFinishEvents, in that order",
        .exclusiveDownloadFiles
    )
    func eventsKeptForTheNextSession() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let server = try ResumableServer()
        defer { server.stop() }
        // Held until the probe is gone, so it cannot hear the end itself.
        server.pause(at: 1024 * 1024)
        let url = server.url("/kept.bin")
        let description = "kept events"
        let probe = try fixture.startProbe(url, description: description, ending: .exit)
        let id = try #require(await probe.started(), "the probe started its download: \(probe.errors)")
        try #require(await probe.exited())
        // Released with no session connected, and given time to finish so: the events wait in
        // the daemon. (On a slow day it finishes later, with the session there: the same events.)
        _ = await pollUntil(timeout: .seconds(5)) {
            server.release()
            return false
        }

        let recorder = BackgroundRecorder()
        let session = fixture.makeSession(recorder)
        _ = session
        let finished = await keepReleasing(server) { recorder.count("finishEvents") > 0 }
        try #require(finished, "urlSessionDidFinishEvents came: \(recorder.names())")
        #expect(Array(recorder.names().suffix(3)) == ["finish", "complete", "finishEvents"], "\(recorder.names())")
        #expect(recorder.completions(of: id).count == 1)
        #expect(recorder.error(of: id) == nil, "\(String(describing: recorder.error(of: id)))")
        let finish = try #require(recorder.finishes(of: id).first)
        #expect(recorder.finishes(of: id).count == 1)
        #expect(finish.contents.map { sameBytes($0, server.body) } == true, "the whole body")
        let gone = await pollUntil(timeout: .seconds(30)) { !FileManager.default.fileExists(atPath: finish.location.path) }
        #expect(gone, "the file is deleted once the callback returned")
        let objects = recorder.objects(of: id)
        #expect(objects.count == 1, "one task object for the task")
        let task = try #require(objects.first as? URLSessionDownloadTask, "a download task: \(objects)")
        #expect(task.originalRequest?.url == url)
        #expect(task.taskDescription == description)
        #expect(task.state == .completed)
        #expect((task.response as? HTTPURLResponse)?.statusCode == 200)
        try await Task.sleep(for: .seconds(1))
        #expect(recorder.count("finishEvents") == 1)
    }

    @Test(
        "an event is acknowledged only once the delegate returned: a process killed inside didFinishDownloadingTo leaves it to the next session, with the whole file",
        .exclusiveDownloadFiles
    )
    func unacknowledgedEventDeliveredAgain() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let url = nginx.url("/files/1m.bin")
        let description = "killed in didFinishDownloadingTo"
        let probe = try fixture.startProbe(url, description: description, ending: .killInFinish)
        try #require(await probe.exited(), "the probe ended")
        let id = try #require(BackgroundProbe.startedIdentifier(in: probe.printed), "the probe started its download: \(probe.errors)")
        #expect(probe.printed.contains("finishing\n"), "the probe got didFinishDownloadingTo: \(probe.printed) \(probe.errors)")
        #expect(probe.process.terminationReason == .uncaughtSignal, "it died inside the callback")

        let recorder = BackgroundRecorder()
        let session = fixture.makeSession(recorder)
        _ = session
        try #require(await recorder.waitForFinishEvents(), "urlSessionDidFinishEvents came: \(recorder.names())")
        #expect(Array(recorder.names().suffix(3)) == ["finish", "complete", "finishEvents"], "\(recorder.names())")
        let finishes = recorder.finishes(of: id)
        #expect(finishes.count == 1, "didFinishDownloadingTo again")
        let served = try #require(NginxServer.fixtures["1m.bin"])
        #expect(finishes.first?.contents.map { sameBytes($0, served) } == true, "the file was kept for it, whole")
        #expect(recorder.completions(of: id).count == 1)
        #expect(recorder.error(of: id) == nil, "\(String(describing: recorder.error(of: id)))")
        let task = try #require(recorder.objects(of: id).first as? URLSessionDownloadTask)
        #expect(task.taskDescription == description)
        #expect(task.originalRequest?.url == url)
        if let location = finishes.first?.location {
            let gone = await pollUntil(timeout: .seconds(30)) { !FileManager.default.fileExists(atPath: location.path) }
            #expect(gone, "this time the callback returned: the file is deleted")
        }
    }

    @Test(
        "a daemon SIGKILLed mid-transfer is replaced by a new one for the connected session, which downloads the file again from the start: the whole body, one didCompleteWithError",
        .exclusiveDownloadFiles
    )
    func daemonKilled() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let filesBefore = downloadFilesPresent()
        let server = try ResumableServer()
        defer { server.stop() }
        // The first response is held after 1 MiB and stays so: only the restart can finish.
        server.pause(at: 1024 * 1024 + 77)
        let recorder = BackgroundRecorder()
        let (_, task) = try await fixture.startDownload(of: server.url(), recorder)
        let id = task.taskIdentifier
        let daemon = await BackgroundState.waitForDaemon(in: fixture.directory)
        let first = try #require(daemon, "daemon.pid names the running daemon")
        #expect(kill(first, SIGKILL) == 0)

        try #require(await recorder.waitForCompletion(of: id), "the download completed: \(recorder.names())")
        #expect(recorder.completions(of: id).count == 1)
        #expect(recorder.error(of: id) == nil, "\(String(describing: recorder.error(of: id)))")
        let finishes = recorder.finishes(of: id)
        #expect(finishes.count == 1)
        #expect(finishes.first?.contents.map { sameBytes($0, server.body) } == true, "the whole body")
        #expect((task.response as? HTTPURLResponse)?.statusCode == 200)
        #expect(task.state == .completed)

        let replacement = await BackgroundState.waitForDaemon(in: fixture.directory, otherThan: first)
        #expect(replacement != nil, "a new daemon runs for the session")
        let requests = server.requests
        #expect(requests.count >= 2, "the download was started again: \(requests)")
        #expect(requests.last?.range == nil, "from the start, without Range")
        #expect(requests.last?.status == 200)
        let left = await downloadFilesLeft(besides: filesBefore)
        #expect(left.isEmpty, "the new daemon deleted the download file the killed one was writing: \(left)")
    }

    @Test(
        "while another process holds the identifier, this process's tasks fail with .backgroundSessionInUseByAnotherProcess; once it exits, a new session gets its task back",
        .exclusiveDownloadFiles
    )
    func inUseByAnotherProcess() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let server = try ResumableServer()
        defer { server.stop() }
        server.pause(at: 1024 * 1024)
        let url = server.url("/held.bin")
        let description = "held by the probe"
        let probe = try fixture.startProbe(url, description: description, ending: .hold)
        let id = try #require(await probe.started(), "the probe started its download: \(probe.errors)")

        let refused = BackgroundRecorder()
        let second = fixture.makeSession(refused)
        let task = second.downloadTask(with: nginx.url("/files/hello.txt"))
        task.resume()
        try #require(await refused.waitForCompletion(of: task.taskIdentifier), "the task failed: \(refused.names())")
        let error = refused.error(of: task.taskIdentifier)
        #expect(urlErrorCode(error) == .backgroundSessionInUseByAnotherProcess, "\(String(describing: error))")
        #expect(refused.finishes(of: task.taskIdentifier).isEmpty)
        #expect(probe.process.isRunning, "the probe still holds the identifier")
        second.invalidateAndCancel()
        try #require(await refused.waitForInvalidation())

        try #require(await probe.endHolding(), "the probe is gone")
        let recorder = BackgroundRecorder()
        let session = fixture.makeSession(recorder)
        let tasks = await backgroundInheritedTasks(session)
        #expect(tasks.map(\.taskIdentifier) == [id], "the probe's task, still held by the server, comes back")
        #expect(tasks.first?.taskDescription == description)
        let finished = await keepReleasing(server) { recorder.count("finishEvents") > 0 }
        try #require(finished, "urlSessionDidFinishEvents came: \(recorder.names())")
        #expect(recorder.error(of: id) == nil, "\(String(describing: recorder.error(of: id)))")
        #expect(recorder.finishes(of: id).first?.contents.map { sameBytes($0, server.body) } == true, "the whole body")
        #expect(server.requests.count == 1, "the refused session's invalidation did not touch the probe's task")
    }

    @Test(
        "a second session with an identifier in use in this process: its tasks fail with .backgroundSessionInUseByAnotherProcess, and invalidating it leaves the first session's task alone",
        .exclusiveDownloadFiles
    )
    func inUseInThisProcess() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let server = try ResumableServer()
        defer { server.stop() }
        server.pause(at: 1024 * 1024)
        let holder = BackgroundRecorder()
        let first = fixture.makeSession(holder)
        let held = first.downloadTask(with: server.url())
        held.resume()
        try #require(await holder.waitForWrite(of: held.taskIdentifier), "the first session's download runs: \(holder.names())")

        let refused = BackgroundRecorder()
        let second = fixture.makeSession(refused)
        let task = second.downloadTask(with: nginx.url("/files/hello.txt"))
        task.resume()
        try #require(await refused.waitForCompletion(of: task.taskIdentifier), "the task failed: \(refused.names())")
        let error = refused.error(of: task.taskIdentifier)
        #expect(urlErrorCode(error) == .backgroundSessionInUseByAnotherProcess, "\(String(describing: error))")
        second.invalidateAndCancel()
        try #require(await refused.waitForInvalidation())

        let done = await keepReleasing(server) { !holder.completions(of: held.taskIdentifier).isEmpty }
        try #require(done, "the first session's download completed: \(holder.names())")
        #expect(holder.error(of: held.taskIdentifier) == nil, "\(String(describing: holder.error(of: held.taskIdentifier)))")
        #expect(holder.finishes(of: held.taskIdentifier).first?.contents.map { sameBytes($0, server.body) } == true, "the whole body")
    }

    @Test(
        "cancel(byProducingResumeData:) gives resume data; downloadTask(withResumeData:) goes on from it: didResumeAtOffset > 0 first, a Range request, the whole body",
        .exclusiveDownloadFiles
    )
    func resumeData() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let server = try ResumableServer()
        defer { server.stop() }
        let held = 1024 * 1024 + 4321
        server.pause(at: held)
        let recorder = BackgroundRecorder()
        let (session, task) = try await fixture.startDownload(of: server.url(), recorder)

        let handler = BackgroundHandlerBox()
        task.cancel(byProducingResumeData: { handler.note(data: $0) })
        try #require(await pollUntil(timeout: .seconds(120)) { handler.called }, "the resume data handler was called")
        try #require(await recorder.waitForCompletion(of: task.taskIdentifier))
        #expect(urlErrorCode(recorder.error(of: task.taskIdentifier)) == .cancelled)
        #expect(recorder.finishes(of: task.taskIdentifier).isEmpty)
        let data = try #require(handler.data, "resume data for a response with an ETag and Accept-Ranges")

        let resumed = session.downloadTask(withResumeData: data)
        resumed.resume()
        let id = resumed.taskIdentifier
        #expect(id != task.taskIdentifier)
        try #require(await recorder.waitForCompletion(of: id), "the resumed download completed: \(recorder.names(of: id))")
        #expect(recorder.error(of: id) == nil, "\(String(describing: recorder.error(of: id)))")
        let resumes = recorder.resumes(of: id)
        #expect(resumes.count == 1)
        let offset = try #require(resumes.first?.offset)
        #expect(offset > 0 && offset <= Int64(held), "it goes on from the bytes the daemon had: \(offset)")
        #expect(recorder.names(of: id).first == "resume", "didResumeAtOffset comes first: \(recorder.names(of: id))")
        #expect(recorder.finishes(of: id).first?.contents.map { sameBytes($0, server.body) } == true, "the whole body")
        #expect(recorder.writes(of: id).last?.total == Int64(server.body.count))
        let last = try #require(server.requests.last)
        #expect(last.range == "bytes=\(offset)-")
        #expect(last.ifRange == server.strongETag)
        #expect(last.status == 206)
    }

    @Test(
        "invalidateAndCancel cancels the daemon's tasks with .cancelled; a later session with the identifier has no tasks and hears no urlSessionDidFinishEvents",
        .exclusiveDownloadFiles
    )
    func invalidateAndCancel() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let server = try ResumableServer()
        defer { server.stop() }
        server.pause(at: 1024 * 1024)
        let recorder = BackgroundRecorder()
        let (session, task) = try await fixture.startDownload(of: server.url(), recorder)
        let id = task.taskIdentifier

        session.invalidateAndCancel()
        try #require(await recorder.waitForCompletion(of: id))
        #expect(urlErrorCode(recorder.error(of: id)) == .cancelled, "\(String(describing: recorder.error(of: id)))")
        #expect(recorder.finishes(of: id).isEmpty)
        try #require(await recorder.waitForInvalidation())
        let names = recorder.names()
        #expect((names.firstIndex(of: "complete") ?? .max) < (names.firstIndex(of: "invalid") ?? .max), "\(names)")

        // A download of the new session's own shows it connected before it is asked for tasks.
        let later = BackgroundRecorder()
        let next = fixture.makeSession(later)
        let own = next.downloadTask(with: nginx.url("/files/hello.txt"))
        own.resume()
        try #require(await later.waitForCompletion(of: own.taskIdentifier), "\(later.names())")
        #expect(later.error(of: own.taskIdentifier) == nil, "the identifier is free again")
        #expect(await backgroundAllTasks(next).isEmpty, "no task comes back")
        try await Task.sleep(for: .seconds(1))
        #expect(later.names().filter { $0 != "write" } == ["finish", "complete"], "only its own download's events")
        #expect(server.requests.count == 1, "the cancelled download was not started again")
    }

    @Test(
        "in a background session, an upload from data or a stream, and any task made with a completion handler, fail when resumed with URLError(.unknown) saying so",
        arguments: BackgroundRefusedTask.allCases
    )
    func refusedTasks(_ kind: BackgroundRefusedTask) async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let recorder = BackgroundRecorder()
        let session = fixture.makeSession(recorder)
        let file = BackgroundScratchFile(contents: Data("an upload body\n".utf8))
        defer { file.remove() }
        var put = URLRequest(url: nginx.url("/echo"))
        put.httpMethod = "PUT"
        let hello = nginx.url("/files/hello.txt")
        let handler = BackgroundHandlerBox()
        let task: URLSessionTask = switch kind {
        case .uploadFromData: session.uploadTask(with: put, from: Data("an upload body\n".utf8))
        case .uploadFromStream: session.uploadTask(withStreamedRequest: put)
        case .dataTaskWithCompletionHandler: session.dataTask(with: hello) { _, _, error in handler.note(error: error) }
        case .downloadWithCompletionHandler: session.downloadTask(with: hello) { _, _, error in handler.note(error: error) }
        case .uploadFromFileWithCompletionHandler: session.uploadTask(with: put, fromFile: file.url) { _, _, error in handler.note(error: error) }
        }
        task.resume()

        let error: (any Error)?
        if kind.hasCompletionHandler {
            try #require(await pollUntil(timeout: .seconds(120)) { handler.called }, "the completion handler was called")
            error = handler.error
        } else {
            try #require(await recorder.waitForCompletion(of: task.taskIdentifier), "the task completed: \(recorder.names())")
            error = recorder.error(of: task.taskIdentifier)
        }
        let failure = try #require(error as? URLError, "\(String(describing: error))")
        #expect(failure.code == .unknown)
        #expect(failure.localizedDescription.contains("background session"), "\(failure.localizedDescription)")
    }

    @Test(
        "progress of a background download comes at most once per 50 ms (and once before the file): the sums and the order are those of every write, in far fewer calls",
        .exclusiveDownloadFiles
    )
    func progressIsMerged() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let file = try nginx.largeFile(megabytes: 32)
        let size = Int64(32 << 20)
        let recorder = BackgroundRecorder()
        let session = fixture.makeSession(recorder)
        let task = session.downloadTask(with: nginx.url(file.path))
        let start = ContinuousClock.now
        task.resume()
        let id = task.taskIdentifier
        try #require(await recorder.waitForCompletion(of: id), "the download completed: \(recorder.names())")
        let elapsed = ContinuousClock.now - start
        #expect(recorder.error(of: id) == nil, "\(String(describing: recorder.error(of: id)))")
        #expect(recorder.finishes(of: id).first?.contents?.count == Int(size))
        let writes = recorder.writes(of: id)
        #expect(writes.map { $0.bytes }.reduce(0, +) == size, "the merged progress adds up to the body")
        #expect(writes.last?.total == size)
        let totals = writes.map { $0.total }
        #expect(totals == totals.sorted() && Set(totals).count == totals.count, "each call reports more than the one before")
        // The daemon writes 256 KiB at a time: 128 calls unmerged. Merged, one when the first
        // bytes are written, then at most one per 50 ms, and one before the file is handed over.
        let intervals = Int(elapsed / .milliseconds(50))
        #expect(writes.count <= intervals + 2, "\(writes.count) calls in \(elapsed)")
        #expect(recorder.names(of: id).suffix(2) == ["finish", "complete"])
    }

    @Test("a download of a file: or a data: URL in a background session fails with .unsupportedURL", arguments: ["file", "data"])
    func unsupportedScheme(_ scheme: String) async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let recorder = BackgroundRecorder()
        let session = fixture.makeSession(recorder)
        let file = BackgroundScratchFile(name: "local.txt", contents: Data("a local file\n".utf8))
        defer { file.remove() }
        let dataURL = try #require(URL(string: "data:,a%20data%20URL"))
        let url = scheme == "file" ? file.url : dataURL
        let task = session.downloadTask(with: url)
        task.resume()
        try #require(await recorder.waitForCompletion(of: task.taskIdentifier), "the task completed: \(recorder.names())")
        let error = recorder.error(of: task.taskIdentifier)
        #expect(urlErrorCode(error) == .unsupportedURL, "\(String(describing: error))")
        #expect(recorder.finishes(of: task.taskIdentifier).isEmpty)
    }

    @Test("a data task without a completion handler runs in the process as in a default session: the response, the body, the completion")
    func dataTaskInProcess() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let recorder = BackgroundRecorder()
        let session = fixture.makeSession(recorder)
        let task = session.dataTask(with: nginx.url("/files/64k.bin"))
        task.resume()
        let id = task.taskIdentifier
        try #require(await recorder.waitForCompletion(of: id), "the task completed: \(recorder.names())")
        #expect(recorder.error(of: id) == nil, "\(String(describing: recorder.error(of: id)))")
        let names = recorder.names(of: id)
        #expect(names.first == "response" && names.last == "complete", "\(names)")
        let body = recorder.bodies(of: id).reduce(Data(), +)
        let served = try #require(NginxServer.fixtures["64k.bin"])
        #expect(sameBytes(body, served))
        #expect((task.response as? HTTPURLResponse)?.statusCode == 200)
        #expect(task.state == .completed)
    }

    @Test("an upload from a file runs in the daemon: didSendBodyData up to the file's length, the response body whole in one didReceive(data:), then didCompleteWithError")
    func uploadFromFile() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let payload = Data(deterministicBytes(count: 3 * 1024 * 1024 + 5, seed: 0xB6))
        let file = BackgroundScratchFile(contents: payload)
        defer { file.remove() }
        let recorder = BackgroundRecorder()
        let session = fixture.makeSession(recorder)
        var request = URLRequest(url: nginx.url("/echo"))
        request.httpMethod = "PUT"
        let task = session.uploadTask(with: request, fromFile: file.url)
        task.resume()
        let id = task.taskIdentifier
        try #require(await recorder.waitForCompletion(of: id), "the upload completed: \(recorder.names(of: id))")
        #expect(recorder.error(of: id) == nil, "\(String(describing: recorder.error(of: id)))")

        let response = try #require(task.response as? HTTPURLResponse)
        #expect(response.statusCode == 200)
        #expect(response.value(forHTTPHeaderField: "X-Body-Length") == "\(payload.count)")
        #expect(response.value(forHTTPHeaderField: "X-Body-SHA256") == payload.sha256Hex)
        let bodies = recorder.bodies(of: id)
        #expect(bodies.count == 1, "the response body comes whole, in one didReceive(data:)")
        let reply = try EchoReply(bodies.first)
        #expect(reply.method == "PUT")
        #expect(reply.bodyLength == payload.count)
        #expect(reply.bodySHA256 == payload.sha256Hex, "nginx got the file's bytes")
        #expect(Array(recorder.names(of: id).suffix(2)) == ["data", "complete"], "\(recorder.names(of: id))")

        let sends = recorder.sends(of: id)
        #expect(!sends.isEmpty, "didSendBodyData reports the upload")
        #expect(sends.map { $0.bytes }.reduce(0, +) == Int64(payload.count))
        #expect(sends.last?.total == Int64(payload.count))
        #expect(sends.allSatisfy { $0.expected == Int64(payload.count) }, "the file's length is the expected total")
        #expect(task.state == .completed)
    }

    @Test("redirects are always followed, even when the delegate would refuse them: the file is the last hop's", .exclusiveDownloadFiles)
    func redirectsFollowed() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let recorder = BackgroundRecorder(refusesRedirects: true)
        let session = fixture.makeSession(recorder)
        let url = nginx.url("/redirect/hop1")
        let task = session.downloadTask(with: url)
        task.resume()
        let id = task.taskIdentifier
        try #require(await recorder.waitForCompletion(of: id), "the download completed: \(recorder.names())")
        #expect(recorder.error(of: id) == nil, "\(String(describing: recorder.error(of: id)))")
        let served = try #require(NginxServer.fixtures["hello.txt"])
        #expect(recorder.finishes(of: id).first?.contents.map { Array($0) } == served, "hop1 → hop2 → /files/hello.txt")
        let response = try #require(task.response as? HTTPURLResponse)
        #expect(response.statusCode == 200)
        #expect(response.url?.path == "/files/hello.txt")
        #expect(task.originalRequest?.url == url)
    }

    @Test("no challenge reaches the delegate: a file behind Basic authentication gets the default handling, which without a credential downloads the 401", .exclusiveDownloadFiles)
    func challengesGetDefaultHandling() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let recorder = BackgroundRecorder()
        let session = fixture.makeSession(recorder)
        let task = session.downloadTask(with: nginx.url("/basic/hello.txt"))
        task.resume()
        let id = task.taskIdentifier
        try #require(await recorder.waitForCompletion(of: id), "the download completed: \(recorder.names())")
        #expect(recorder.error(of: id) == nil, "\(String(describing: recorder.error(of: id)))")
        #expect(recorder.count("challenge") == 0, "\(recorder.names())")
        #expect((task.response as? HTTPURLResponse)?.statusCode == 401)
        #expect(recorder.finishes(of: id).count == 1, "the 401's body is the download")
    }

    @Test("without a daemon to start (COURIER_BACKGROUND_DAEMON names no program), the session's download fails at once with .backgroundSessionWasDisconnected, saying why")
    func missingDaemon() async throws {
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        var environment = ProcessInfo.processInfo.environment
        environment["COURIER_BACKGROUND_DAEMON"] = "/nonexistent/courier-background"
        let probe = try BackgroundProbe(identifier: fixture.identifier, url: nginx.url("/files/hello.txt"), description: "no daemon", ending: .exit, environment: environment)
        defer { probe.stop() }
        #expect(await probe.exited(timeout: .seconds(60)), "the probe gave up well before its own 60 s wait")
        #expect(probe.process.terminationStatus == 1)
        #expect(BackgroundProbe.startedIdentifier(in: probe.printed) == nil)
        #expect(probe.errors.contains("Code=\(URLError.backgroundSessionWasDisconnected.rawValue)") || probe.errors.contains("backgroundSessionWasDisconnected"), "\(probe.errors)")
        #expect(probe.errors.contains("could not be started"), "\(probe.errors)")
    }

    @Test("the configuration's proxy reaches the daemon: a background download goes through the session's SOCKS5 proxy", .exclusiveDownloadFiles)
    func proxyReachesTheDaemon() async throws {
        let socks = try SOCKSProxyServer.shared()
        let fixture = BackgroundFixture()
        defer { fixture.close() }
        let recorder = BackgroundRecorder()
        let session = fixture.makeSession(recorder) { $0.connectionProxyDictionary = TestProxies.socks(socks.openPort) }
        // A URL of its own: the daemons share the on-disk URLCache, and an earlier test's
        // /files/64k.bin can still be fresh there (nginx sends Last-Modified, so it is cached
        // for a tenth of its age), which answers without any connection, proxy or not.
        let task = session.downloadTask(with: nginx.url("/files/64k.bin?via-socks=\(UUID().uuidString)"))
        task.resume()
        let id = task.taskIdentifier
        try #require(await recorder.waitForCompletion(of: id), "the download completed: \(recorder.names())")
        #expect(recorder.error(of: id) == nil, "\(String(describing: recorder.error(of: id)))")
        #expect(recorder.finishes(of: id).first?.contents.map { Array($0) } == NginxServer.fixtures["64k.bin"])
        // pproxy's log line may trail the bytes it relayed on a busy machine.
        let carried = await pollUntil(timeout: .seconds(30)) { socks.destinations().contains { $0.contains("\(nginx.port)") } }
        #expect(carried, "the proxy carried it: \(socks.destinations()); pproxy: \(socks.log())")
    }
}
