import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

#if canImport(Glibc)
import Glibc
#endif

// MARK: - The state directory and the daemon

/// Where a background identifier's state lives, by the documented rules, and the daemon named
/// in it. Computed here on its own, not asked of Courier, so the tests check the layout.
enum BackgroundState {
    /// `<name>`: the identifier's UTF-8 bytes, those outside `[A-Za-z0-9._-]` (and a leading
    /// `.`) written as `%XX`, upper-case.
    static func name(_ identifier: String) -> String {
        let hex = Array("0123456789ABCDEF")
        var name = ""
        for (index, byte) in identifier.utf8.enumerated() {
            let plain = (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
                || (byte == UInt8(ascii: ".") && index > 0)
            if plain {
                name.append(Character(Unicode.Scalar(byte)))
            } else {
                name += "%\(hex[Int(byte >> 4)])\(hex[Int(byte & 0xF)])"
            }
        }
        return name
    }

    /// `<data>`: `$XDG_DATA_HOME` when set and absolute, else `$HOME/.local/share`.
    static func dataDirectory(environment: [String: String]) -> URL {
        if let value = environment["XDG_DATA_HOME"], value.hasPrefix("/") {
            return URL(fileURLWithPath: value, isDirectory: true)
        }
        let home = environment["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? FileManager.default.homeDirectoryForCurrentUser.path
        return URL(fileURLWithPath: home, isDirectory: true).appendingPathComponent(".local/share", isDirectory: true)
    }

    /// `<data>/courier/background/<name>/` for a process with `environment`.
    static func directory(_ identifier: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        // Built as a path: the name's `%` must stay as it is.
        URL(fileURLWithPath: dataDirectory(environment: environment).path + "/courier/background/" + name(identifier), isDirectory: true)
    }

    /// The pid in `daemon.pid` (decimal, then a newline); nil without a well-formed one.
    static func daemonPID(in directory: URL) -> pid_t? {
        guard let text = try? String(contentsOf: directory.appendingPathComponent("daemon.pid"), encoding: .utf8), text.hasSuffix("\n") else {
            return nil
        }
        return pid_t(text.dropLast())
    }

    /// True when `pid` is a live (not zombie) `courier-background` process.
    static func isRunningDaemon(_ pid: pid_t) -> Bool {
        guard pid > 0 else { return false }
        let stat = readBackgroundProcFile("/proc/\(pid)/stat")
        guard let close = stat.lastIndex(of: ")"),
              let state = stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).first,
              state != "Z", state != "X",
              let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")
        else { return false }
        var name = URL(fileURLWithPath: executable).lastPathComponent
        // A binary rebuilt while the daemon runs shows as deleted.
        if name.hasSuffix(" (deleted)") { name.removeLast(" (deleted)".count) }
        return name == "courier-background"
    }

    /// Waits (up to `timeout`) for `daemon.pid` to name a running daemon other than `old`.
    static func waitForDaemon(in directory: URL, otherThan old: pid_t? = nil, timeout: Duration = .seconds(60)) async -> pid_t? {
        var found: pid_t?
        _ = await pollUntil(timeout: timeout) {
            guard let pid = daemonPID(in: directory), pid != old, isRunningDaemon(pid) else { return false }
            found = pid
            return true
        }
        return found
    }

    /// Lets the directory's daemon exit (it is left with nothing to do), ending it after
    /// `patience` seconds if it has not; blocking, for clean-ups.
    static func stopDaemon(in directory: URL, patience: Double = 10) {
        guard let pid = daemonPID(in: directory), isRunningDaemon(pid) else { return }
        if waitBlocking(seconds: patience, { !isRunningDaemon(pid) }) { return }
        kill(pid, SIGTERM)
        if waitBlocking(seconds: 10, { !isRunningDaemon(pid) }) { return }
        kill(pid, SIGKILL)
        _ = waitBlocking(seconds: 10) { !isRunningDaemon(pid) }
    }
}

/// A /proc file read to its end (they report a size of 0, so it is read until EOF).
private func readBackgroundProcFile(_ path: String) -> String {
    guard let file = fopen(path, "r") else { return "" }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = chunk.withUnsafeMutableBytes { fread($0.baseAddress, 1, $0.count, file) }
        if count <= 0 { break }
        bytes += chunk[..<count]
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// Polls `condition` every 10 ms, blocking the thread; false when it still fails after `seconds`.
/// For clean-ups, which run in `defer`.
private func waitBlocking(seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while !condition() {
        if Date() >= deadline { return false }
        usleep(10_000)
    }
    return true
}

// MARK: - The delegate

/// A background session's delegate: every callback as an ``Event``, in order, with the task
/// objects the callbacks were given. didFinishDownloadingTo reads the file's bytes inside the
/// callback, after moving the file out of the state directory when `keepFilesIn` is set.
final class BackgroundRecorder: NSObject, URLSessionDownloadDelegate, URLSessionDataDelegate, @unchecked Sendable {
    enum Event: Sendable {
        case write(task: Int, bytes: Int64, total: Int64, expected: Int64)
        case resume(task: Int, offset: Int64, expected: Int64)
        /// `kept`: where the file was moved to, if it was; `contents`: its bytes then.
        case finish(task: Int, location: URL, kept: URL?, contents: Data?)
        case sent(task: Int, bytes: Int64, total: Int64, expected: Int64)
        case response(task: Int)
        case data(task: Int, Data)
        case complete(task: Int, error: (any Error)?)
        case redirect(task: Int)
        case challenge
        case metrics(task: Int)
        /// urlSessionDidFinishEvents(forBackgroundURLSession:).
        case finishEvents
        /// didBecomeInvalidWithError.
        case invalid

        var name: String {
            switch self {
            case .write: "write"
            case .resume: "resume"
            case .finish: "finish"
            case .sent: "sent"
            case .response: "response"
            case .data: "data"
            case .complete: "complete"
            case .redirect: "redirect"
            case .challenge: "challenge"
            case .metrics: "metrics"
            case .finishEvents: "finishEvents"
            case .invalid: "invalid"
            }
        }

        var task: Int? {
            switch self {
            case .write(let task, _, _, _), .resume(let task, _, _), .finish(let task, _, _, _), .sent(let task, _, _, _),
                 .response(let task), .data(let task, _), .complete(let task, _), .redirect(let task), .metrics(let task):
                task
            case .challenge, .finishEvents, .invalid:
                nil
            }
        }
    }

    private struct State {
        var events: [Event] = []
        var objects: [Int: [URLSessionTask]] = [:]
        var offQueue = 0
    }

    private let state = Mutex(State())
    private let keepFilesIn: URL?
    private let refusesRedirects: Bool

    /// `keepFilesIn`: a folder the downloaded files are moved to, during the callback.
    /// `refusesRedirects`: willPerformHTTPRedirection answers nil (if it is asked at all).
    init(keepFilesIn: URL? = nil, refusesRedirects: Bool = false) {
        self.keepFilesIn = keepFilesIn
        self.refusesRedirects = refusesRedirects
    }

    private func note(_ session: URLSession, _ task: URLSessionTask?, _ event: Event) {
        let onQueue = OperationQueue.current === session.delegateQueue
        state.withLock { state in
            state.events.append(event)
            if !onQueue { state.offQueue += 1 }
            if let task, !(state.objects[task.taskIdentifier] ?? []).contains(where: { $0 === task }) {
                state.objects[task.taskIdentifier, default: []].append(task)
            }
        }
    }

    // MARK: Callbacks

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        note(session, downloadTask, .write(task: downloadTask.taskIdentifier, bytes: bytesWritten, total: totalBytesWritten, expected: totalBytesExpectedToWrite))
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didResumeAtOffset fileOffset: Int64, expectedTotalBytes: Int64) {
        note(session, downloadTask, .resume(task: downloadTask.taskIdentifier, offset: fileOffset, expected: expectedTotalBytes))
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        var kept: URL?
        if let keepFilesIn {
            let destination = keepFilesIn.appendingPathComponent("task-\(downloadTask.taskIdentifier)-\(UUID().uuidString)")
            if (try? FileManager.default.moveItem(at: location, to: destination)) != nil { kept = destination }
        }
        let contents = FileManager.default.contents(atPath: (kept ?? location).path)
        note(session, downloadTask, .finish(task: downloadTask.taskIdentifier, location: location, kept: kept, contents: contents))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        note(session, task, .sent(task: task.taskIdentifier, bytes: bytesSent, total: totalBytesSent, expected: totalBytesExpectedToSend))
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        note(session, dataTask, .response(task: dataTask.taskIdentifier))
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        note(session, dataTask, .data(task: dataTask.taskIdentifier, data))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        note(session, task, .complete(task: task.taskIdentifier, error: error))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void) {
        note(session, task, .redirect(task: task.taskIdentifier))
        completionHandler(refusesRedirects ? nil : request)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        note(session, task, .challenge)
        completionHandler(.performDefaultHandling, nil)
    }

    func urlSession(_ session: URLSession, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        note(session, nil, .challenge)
        completionHandler(.performDefaultHandling, nil)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
        note(session, task, .metrics(task: task.taskIdentifier))
    }

    func urlSessionDidFinishEvents(forBackgroundURLSession session: URLSession) {
        note(session, nil, .finishEvents)
    }

    func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {
        note(session, nil, .invalid)
    }

    // MARK: What was recorded

    var events: [Event] { state.withLock { $0.events } }

    /// Callbacks that ran off the session's delegate queue.
    var offQueue: Int { state.withLock { $0.offQueue } }

    /// The events' names (of one task's events, or of all), a run of writes or of sends as one.
    func names(of task: Int? = nil) -> [String] {
        let chosen = events.filter { task == nil || $0.task == task }
        return chosen.map(\.name).reduce(into: [String]()) { names, name in
            if (name == "write" || name == "sent") && names.last == name { return }
            names.append(name)
        }
    }

    func count(_ name: String) -> Int {
        events.filter { $0.name == name }.count
    }

    /// The errors of the task's didCompleteWithError calls (one, normally).
    func completions(of task: Int) -> [(any Error)?] {
        events.compactMap { event -> (any Error)?? in
            guard case .complete(task, let error) = event else { return nil }
            return .some(error)
        }
    }

    /// The error of the task's first completion (nil also when there was none: check
    /// ``completions(of:)`` for that).
    func error(of task: Int) -> (any Error)? {
        completions(of: task).first ?? nil
    }

    func finishes(of task: Int) -> [(location: URL, kept: URL?, contents: Data?)] {
        events.compactMap { event -> (location: URL, kept: URL?, contents: Data?)? in
            guard case .finish(task, let location, let kept, let contents) = event else { return nil }
            return (location, kept, contents)
        }
    }

    func writes(of task: Int) -> [(bytes: Int64, total: Int64, expected: Int64)] {
        events.compactMap { event -> (bytes: Int64, total: Int64, expected: Int64)? in
            guard case .write(task, let bytes, let total, let expected) = event else { return nil }
            return (bytes, total, expected)
        }
    }

    func resumes(of task: Int) -> [(offset: Int64, expected: Int64)] {
        events.compactMap { event -> (offset: Int64, expected: Int64)? in
            guard case .resume(task, let offset, let expected) = event else { return nil }
            return (offset, expected)
        }
    }

    func sends(of task: Int) -> [(bytes: Int64, total: Int64, expected: Int64)] {
        events.compactMap { event -> (bytes: Int64, total: Int64, expected: Int64)? in
            guard case .sent(task, let bytes, let total, let expected) = event else { return nil }
            return (bytes, total, expected)
        }
    }

    func bodies(of task: Int) -> [Data] {
        events.compactMap { event -> Data? in
            guard case .data(task, let data) = event else { return nil }
            return data
        }
    }

    /// The distinct task objects the callbacks about `task` were given.
    func objects(of task: Int) -> [URLSessionTask] {
        state.withLock { $0.objects[task] ?? [] }
    }

    var isInvalidated: Bool { count("invalid") > 0 }

    // MARK: Waiting

    /// Waits until `condition` holds for the events; false after `timeout`.
    func waitFor(timeout: Duration = .seconds(120), _ condition: ([Event]) -> Bool) async -> Bool {
        await pollUntil(timeout: timeout) { condition(self.events) }
    }

    func waitForWrite(of task: Int) async -> Bool {
        await waitFor { $0.contains { $0.name == "write" && $0.task == task } }
    }

    func waitForCompletion(of task: Int) async -> Bool {
        await waitFor { $0.contains { $0.name == "complete" && $0.task == task } }
    }

    func waitForFinishEvents() async -> Bool {
        await waitFor { $0.contains { $0.name == "finishEvents" } }
    }

    func waitForInvalidation() async -> Bool {
        await waitFor { $0.contains { $0.name == "invalid" } }
    }
}

// MARK: - The probe

/// A run of `courier-background-probe` (built next to the test binary): a background session
/// in another process, with one download task (see its main.swift). Its stdout and stderr go
/// to files, not pipes: the daemon it may start could inherit a pipe and keep it open.
final class BackgroundProbe {
    enum Ending: String, Sendable, CustomTestStringConvertible {
        /// exit(0) after the first didWriteData.
        case exit = "--exit"
        /// SIGKILL inside the first didWriteData.
        case kill = "--kill"
        /// Connected until stdin reaches end of file.
        case hold = "--hold"
        /// SIGKILL inside didFinishDownloadingTo.
        case killInFinish = "--kill-in-finish"

        var testDescription: String {
            switch self {
            case .exit: "exits"
            case .kill: "is killed"
            case .hold: "holds"
            case .killInFinish: "is killed in didFinishDownloadingTo"
            }
        }
    }

    static var executable: URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("courier-background-probe")
    }

    let process: Process
    private let folder: URL
    private let output: URL
    private let errorsFile: URL
    private let input: Pipe?

    init(identifier: String, url: URL, description: String, ending: Ending, environment: [String: String]? = nil, currentDirectory: URL? = nil) throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.executable.path), "courier-background-probe is built with the tests")
        let folder = TestRun.makeDirectory("background-probe")
        let output = folder.appendingPathComponent("stdout")
        let errorsFile = folder.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errorsFile.path, contents: nil)
        let process = Process()
        process.executableURL = Self.executable
        process.arguments = [identifier, url.absoluteString, "--description", description, ending.rawValue]
        if let environment { process.environment = environment }
        if let currentDirectory { process.currentDirectoryURL = currentDirectory }
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = try FileHandle(forWritingTo: errorsFile)
        let input = ending == .hold ? Pipe() : nil
        if let input {
            process.standardInput = input
        } else {
            process.standardInput = FileHandle.nullDevice
        }
        try process.run()
        self.process = process
        self.folder = folder
        self.output = output
        self.errorsFile = errorsFile
        self.input = input
    }

    /// What it printed on stdout so far.
    var printed: String { (try? String(contentsOf: output, encoding: .utf8)) ?? "" }

    /// What it printed on stderr so far.
    var errors: String { (try? String(contentsOf: errorsFile, encoding: .utf8)) ?? "" }

    /// N of a `started N` line in `text`.
    static func startedIdentifier(in text: String) -> Int? {
        for line in text.split(separator: "\n") where line.hasPrefix("started ") {
            return Int(line.dropFirst("started ".count))
        }
        return nil
    }

    /// The task identifier it printed as `started N`; nil when it exited without, or after `timeout`.
    func started(timeout: Duration = .seconds(120)) async -> Int? {
        _ = await pollUntil(timeout: timeout) { Self.startedIdentifier(in: printed) != nil || !process.isRunning }
        return Self.startedIdentifier(in: printed)
    }

    /// Waits for it to exit; false after `timeout`.
    func exited(timeout: Duration = .seconds(120)) async -> Bool {
        await pollUntil(timeout: timeout) { !process.isRunning }
    }

    /// Ends a holding probe: closes its stdin and waits for it to exit, terminating it (SIGTERM)
    /// if the end of file does not reach it (a process that inherited the pipe's write end keeps
    /// it open). Either way its session is gone once this returns true.
    func endHolding() async -> Bool {
        try? input?.fileHandleForWriting.close()
        if await exited(timeout: .seconds(60)) { return true }
        process.terminate()
        return await exited(timeout: .seconds(30))
    }

    /// Ends it however it is, and deletes its output; blocking, for clean-ups.
    func stop() {
        try? input?.fileHandleForWriting.close()
        if process.isRunning, !waitBlocking(seconds: 10, { !process.isRunning }) {
            process.terminate()
            if !waitBlocking(seconds: 10, { !process.isRunning }) {
                kill(process.processIdentifier, SIGKILL)
                _ = waitBlocking(seconds: 10) { !process.isRunning }
            }
        }
        try? FileManager.default.removeItem(at: folder)
    }
}

// MARK: - One test's identifier

/// One test's background identifier (unique: `bg-test-<UUID>`) with the sessions and probes the
/// test made for it. ``close()`` ends the probes, invalidates and cancels the sessions, lets
/// the daemon go, and deletes the identifier's state directory.
final class BackgroundFixture {
    let identifier: String
    /// The identifier's state directory, for the environment its daemon runs in.
    let directory: URL
    private var sessions: [(session: URLSession, recorder: BackgroundRecorder)] = []
    private var probes: [BackgroundProbe] = []

    init(identifier: String = "bg-test-\(UUID().uuidString)", environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.identifier = identifier
        self.directory = BackgroundState.directory(identifier, environment: environment)
    }

    /// A background session with the identifier and `recorder` as its delegate.
    /// A new session's download of `url`, resumed, once its first bytes were written.
    func startDownload(of url: URL, _ recorder: BackgroundRecorder, sourceLocation: SourceLocation = #_sourceLocation) async throws -> (URLSession, URLSessionDownloadTask) {
        let session = makeSession(recorder)
        let task = session.downloadTask(with: url)
        task.resume()
        try #require(await recorder.waitForWrite(of: task.taskIdentifier), "the first bytes came: \(recorder.names())", sourceLocation: sourceLocation)
        return (session, task)
    }

    func makeSession(_ recorder: BackgroundRecorder, configure: (URLSessionConfiguration) -> Void = { _ in }) -> URLSession {
        let configuration = URLSessionConfiguration.background(withIdentifier: identifier)
        configure(configuration)
        let session = URLSession(configuration: configuration, delegate: recorder, delegateQueue: nil)
        sessions.append((session, recorder))
        return session
    }

    /// Starts `courier-background-probe` for the identifier: a download of `url` with
    /// `description`, in another process.
    func startProbe(
        _ url: URL, description: String, ending: BackgroundProbe.Ending, environment: [String: String]? = nil, currentDirectory: URL? = nil
    ) throws -> BackgroundProbe {
        let probe = try BackgroundProbe(
            identifier: identifier, url: url, description: description, ending: ending, environment: environment, currentDirectory: currentDirectory
        )
        probes.append(probe)
        return probe
    }

    func close() {
        for probe in probes { probe.stop() }
        for (session, _) in sessions { session.invalidateAndCancel() }
        for (_, recorder) in sessions { _ = waitBlocking(seconds: 30) { recorder.isInvalidated } }
        BackgroundState.stopDaemon(in: directory)
        try? FileManager.default.removeItem(at: directory)
    }
}

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
