import CourierSync
import Foundation

/// The `courier-background` process: it carries one background identifier's download and
/// upload tasks, on a session of its own, for whichever process holds the identifier's session
/// (one at a time), and keeps what happened in a journal until that session acknowledges it.
///
/// - State: `<data>/courier/background/<name>/` (``BackgroundPlace``) holds `journal.json`
///   (tasks and unacknowledged events, rewritten whole and renamed into place on every change),
///   `files/` (finished downloads waiting for their `didFinishDownloadingTo`), `daemon.pid` and
///   `daemon.log`.
/// - One daemon per directory: the abstract socket it binds is the lock.
/// - It exits once no session is connected and no task is in flight. A later session starts it
///   again; tasks the journal says were running (the daemon was killed) start over.
@_spi(CourierBackground)
public enum BackgroundDaemonMain {
    /// Runs the daemon for `courier-background --state DIRECTORY`; returns the exit status.
    public static func run(arguments: [String]) -> Int32 {
        guard arguments.count == 2, arguments[0] == "--state", arguments[1].hasPrefix("/") else {
            FileHandle.standardError.write(Data("usage: courier-background --state /absolute/state/directory\n".utf8))
            return 2
        }
        // Detached from the terminal and process group of the process that started it; what
        // it writes (the journal, downloads, its stores) is its user's only.
        _ = setsid()
        umask(0o077)
        signal(SIGPIPE, SIG_IGN)
        signal(SIGHUP, SIG_IGN)
        let directory = URL(fileURLWithPath: arguments[1], isDirectory: true)
        let daemon: BackgroundDaemon
        do {
            daemon = try BackgroundDaemon(directory: directory)
        } catch BackgroundDaemon.StartFailure.alreadyRunning {
            return 0
        } catch {
            FileHandle.standardError.write(Data("courier-background: \(error)\n".utf8))
            return 1
        }
        daemon.serve()
        return 0
    }
}

final class BackgroundDaemon: NSObject, @unchecked Sendable {
    enum StartFailure: Error, CustomStringConvertible {
        case alreadyRunning
        case system(String)

        var description: String {
            switch self {
            case .alreadyRunning: "another daemon serves this directory"
            case .system(let message): message
            }
        }
    }

    /// What survives the daemon: written to `journal.json` on every change.
    struct Journal: Codable {
        var lastTaskIdentifier = 0
        var nextEventID = 1
        var settings: WireSettings?
        var tasks: [WireTask] = []
        var events: [WireEvent] = []
    }

    struct State {
        var journal = Journal()
        var client: FrameSocket?
        var session: URLSession?
        /// The daemon session's task for each wire task in flight.
        var inFlight: [Int: URLSessionTask] = [:]
        /// Wire task identifiers by the daemon session's tasks (of this session or an earlier
        /// one still finishing).
        var wireIDs: [ObjectIdentifier: Int] = [:]
        /// The settings `session` was made with.
        var sessionSettings: WireSettings?
        /// Upload response bodies, gathered until the task completes.
        var uploadBodies: [Int: Data] = [:]
        /// Tasks whose response the session was told of.
        var responseSent: Set<Int> = []
        /// The daemon decided to exit: a session that connects now is turned away unanswered
        /// (it starts the next daemon).
        var closing = false
        /// Progress not sent at once (BackgroundDaemon+Progress.swift), by wire task.
        var progress: [Int: ProgressGate] = [:]
    }

    /// The largest upload response body kept (the rest is dropped).
    static let maximumUploadResponse = 32 << 20

    let directory: URL
    let files: URL
    /// The download files this daemon is writing, so that the next daemon can delete those
    /// a killed one left behind.
    let downloading: InProgressDownloads
    private let journalURL: URL
    private let pidURL: URL
    private let listener: Int32
    let state = Mutex(State())
    /// Every message to the session goes through this queue, in the order it was decided
    /// under the state lock: the journal's order.
    let outbound = DispatchQueue(label: "courier-background outbound")
    let sessionQueue: OperationQueue = {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        return queue
    }()

    init(directory: URL) throws {
        self.directory = directory
        files = directory.appendingPathComponent("files", isDirectory: true)
        downloading = InProgressDownloads(directory.appendingPathComponent("downloading", isDirectory: true))
        journalURL = directory.appendingPathComponent("journal.json")
        pidURL = directory.appendingPathComponent("daemon.pid")
        do {
            try FileManager.default.createDirectory(at: files, withIntermediateDirectories: true)
        } catch {
            throw StartFailure.system("cannot create \(files.path): \(error.localizedDescription)")
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw StartFailure.system("socket: \(String(cString: strerror(errno)))") }
        var (address, length) = BackgroundPlace.socketAddress(for: directory)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0 else {
            let failure = errno
            close(fd)
            if failure == EADDRINUSE { throw StartFailure.alreadyRunning }
            throw StartFailure.system("bind: \(String(cString: strerror(failure)))")
        }
        guard listen(fd, 16) == 0 else {
            close(fd)
            throw StartFailure.system("listen: \(String(cString: strerror(errno)))")
        }
        listener = fd
        super.init()
        try? Data("\(getpid())\n".utf8).write(to: pidURL, options: .atomic)
        // The socket is bound: no other daemon runs here, so what the register lists was
        // left by one that was killed.
        downloading.removeLeftovers()
        let journal = loadJournal()
        state.withLock { $0.journal = journal }
    }

    /// Reads the journal; an unreadable one is kept aside as `journal.json.bad` and the daemon
    /// starts empty, rather than not at all.
    private func loadJournal() -> Journal {
        guard let data = try? Data(contentsOf: journalURL) else { return Journal() }
        if var journal = try? JSONDecoder().decode(Journal.self, from: data) {
            // Whatever was in flight died with the last daemon: it starts over.
            for index in journal.tasks.indices where journal.tasks[index].state != .completed {
                journal.tasks[index].started = false
            }
            return journal
        }
        try? FileManager.default.removeItem(at: journalURL.appendingPathExtension("bad"))
        try? FileManager.default.moveItem(at: journalURL, to: journalURL.appendingPathExtension("bad"))
        return Journal()
    }

    /// Writes the journal; called under the state lock after every change worth keeping.
    func persist(_ journal: Journal) {
        guard let data = try? JSONEncoder().encode(journal) else { return }
        do {
            try data.write(to: journalURL, options: .atomic)
        } catch {
            FileHandle.standardError.write(Data("courier-background: cannot write the journal: \(error.localizedDescription)\n".utf8))
        }
    }

    // MARK: Serving

    /// How long the daemon stays after it became idle: `$COURIER_BACKGROUND_IDLE_EXIT` seconds
    /// (more than 0, at most an hour), else 2. The test command sets a short one, so that each
    /// test's daemon is gone soon after the test.
    static func idleExitSeconds(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> Double {
        guard let text = environment["COURIER_BACKGROUND_IDLE_EXIT"], let seconds = Double(text),
              seconds > 0, seconds <= 3600 else { return 2 }
        return seconds
    }

    /// Restarts what was running, accepts sessions on a thread of its own, and returns (for
    /// the process to exit) once idle: no session and nothing in flight, for
    /// ``idleExitSeconds(_:)`` (four checks a quarter of that apart).
    func serve() {
        let checkInterval = Self.idleExitSeconds() / 4
        let restart = state.withLock { state -> [WireTask] in
            state.journal.tasks.filter { $0.state == .running }
        }
        for task in restart { start(task.id) }
        let acceptor = Thread { [self] in acceptLoop() }
        acceptor.start()
        var idleChecks = 0
        var empty = false
        while true {
            Thread.sleep(forTimeInterval: checkInterval)
            let idle = state.withLock { state -> Bool in
                guard state.client == nil && state.inFlight.isEmpty else { return false }
                if idleChecks >= 3 {
                    state.closing = true
                    empty = state.journal.tasks.isEmpty && state.journal.events.isEmpty
                }
                return true
            }
            idleChecks = idle ? idleChecks + 1 : 0
            if idleChecks >= 4 { break }
        }
        // While the socket is still bound (no other daemon can start here), an identifier
        // with nothing left to tell leaves no state behind; then sessions are turned away: one
        // that connects now sees the socket close and starts a new daemon.
        if empty {
            try? FileManager.default.removeItem(at: directory)
        } else if (try? String(contentsOf: pidURL, encoding: .utf8)) == "\(getpid())\n" {
            try? FileManager.default.removeItem(at: pidURL)
        }
        _ = shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func acceptLoop() {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                return
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            let client = FrameSocket(fd: fd)
            // Only this user's sessions: the tasks carry their credentials and cookies.
            guard client.peerIsSameUser else {
                client.close()
                continue
            }
            let reader = Thread { [self] in serve(client) }
            reader.start()
        }
    }

    /// One session's conversation: `hello`, then its requests until it goes.
    private func serve(_ client: FrameSocket) {
        guard case .hello(let settings)? = client.receive(ClientMessage.self) else {
            client.close()
            return
        }
        let accepted = state.withLock { state -> Bool? in
            if state.closing { return nil }
            guard state.client == nil else { return false }
            state.client = client
            state.journal.settings = settings
            persist(state.journal)
            let tasks = state.journal.tasks
            let last = state.journal.lastTaskIdentifier
            let backlog = state.journal.events
            outbound.async {
                client.send(DaemonMessage.welcome(tasks: tasks, lastTaskIdentifier: last))
                for event in backlog { client.send(DaemonMessage.event(event)) }
            }
            return true
        }
        guard let accepted else {
            client.close()
            return
        }
        guard accepted else {
            client.send(DaemonMessage.refused(reason: "another session uses this background identifier"))
            client.close()
            return
        }
        while let message = client.receive(ClientMessage.self) {
            handle(message)
        }
        state.withLock { state in
            if state.client === client { state.client = nil }
        }
        outbound.async { client.close() }
    }

    private func handle(_ message: ClientMessage) {
        switch message {
        case .hello:
            break
        case .create(var task):
            state.withLock { state in
                guard !state.journal.tasks.contains(where: { $0.id == task.id }) else { return }
                task.state = .suspended
                task.started = false
                state.journal.tasks.append(task)
                state.journal.lastTaskIdentifier = max(state.journal.lastTaskIdentifier, task.id)
                persist(state.journal)
            }
        case .resume(let id, let description):
            let action = state.withLock { state -> (start: Bool, task: URLSessionTask?) in
                guard let index = state.journal.tasks.firstIndex(where: { $0.id == id }),
                      state.journal.tasks[index].state == .suspended else { return (false, nil) }
                state.journal.tasks[index].taskDescription = description
                state.journal.tasks[index].state = .running
                persist(state.journal)
                return (!state.journal.tasks[index].started, state.inFlight[id])
            }
            if action.start {
                start(id)
            } else {
                action.task?.resume()
            }
        case .suspend(let id):
            let task = state.withLock { state -> URLSessionTask? in
                guard let index = state.journal.tasks.firstIndex(where: { $0.id == id }),
                      state.journal.tasks[index].state == .running else { return nil }
                state.journal.tasks[index].state = .suspended
                persist(state.journal)
                return state.inFlight[id]
            }
            task?.suspend()
        case .cancel(let id, let producingResumeData):
            cancel(id, producingResumeData: producingResumeData)
        case .acknowledge(let eventID):
            acknowledge(eventID)
        }
    }

    private func cancel(_ id: Int, producingResumeData: Bool) {
        let inFlight = state.withLock { $0.inFlight[id] }
        if let inFlight {
            if producingResumeData, let download = inFlight as? URLSessionDownloadTask {
                download.cancel { [self] data in send(.resumeData(task: id, data)) }
            } else {
                inFlight.cancel()
            }
            return
        }
        // Never started (or already ended): it completes here, if it had not.
        if producingResumeData { send(.resumeData(task: id, nil)) }
        let url = state.withLock { state in state.journal.tasks.first { $0.id == id }?.request.url }
        complete(id, error: WireError(code: .cancelled, message: "cancelled", url: url))
    }

    private func acknowledge(_ eventID: Int) {
        state.withLock { state in
            guard let index = state.journal.events.firstIndex(where: { $0.id == eventID }) else { return }
            let event = state.journal.events.remove(at: index)
            switch event.kind {
            case .finishedDownload(let path):
                try? FileManager.default.removeItem(atPath: path)
            case .completed:
                state.journal.tasks.removeAll { $0.id == event.task }
            case .receivedData:
                break
            }
            persist(state.journal)
        }
    }

    // MARK: Telling the session

    /// Sends a live message (a response, resume data, an offset), not kept in the journal,
    /// after the task's waiting progress.
    func send(_ message: DaemonMessage) {
        state.withLock { state in
            guard let client = state.client else { return }
            if let id = message.taskID { flushProgress(of: id, in: &state) }
            outbound.async { client.send(message) }
        }
    }

    /// Appends an event to the journal and sends it; called under the state lock.
    func record(_ kind: WireEvent.Kind, task id: Int, in state: inout State) {
        let response = state.journal.tasks.first { $0.id == id }?.response
        let event = WireEvent(id: state.journal.nextEventID, task: id, response: response, kind: kind)
        state.journal.nextEventID += 1
        state.journal.events.append(event)
        persist(state.journal)
        flushProgress(of: id, in: &state)
        if let client = state.client {
            outbound.async { client.send(DaemonMessage.event(event)) }
        }
    }

    /// Completes a wire task: its state, then the `completed` event (after an upload's body).
    func complete(_ id: Int, error: WireError?) {
        state.withLock { state in
            guard let index = state.journal.tasks.firstIndex(where: { $0.id == id }),
                  state.journal.tasks[index].state != .completed else { return }
            state.journal.tasks[index].state = .completed
            if let body = state.uploadBodies.removeValue(forKey: id), !body.isEmpty, error == nil {
                record(.receivedData(body), task: id, in: &state)
            }
            record(.completed(error: error), task: id, in: &state)
            state.progress[id] = nil
        }
    }
}

/// The register of a daemon's download files in progress: one empty file in `downloading/`
/// per download file, named as it is. A download file lives in the temporary directory
/// while its body arrives, and then is moved into `files/`, kept as a partial file for resume
/// data (renamed) or deleted, so a name that still exists under its own name when a daemon
/// starts belongs to a download its killed predecessor never finished.
struct InProgressDownloads: Sendable {
    let directory: URL

    init(_ directory: URL) {
        self.directory = directory
    }

    /// Makes a download file in the temporary directory and registers it; entries whose file
    /// is gone are pruned first, so the register holds no more than the downloads in flight.
    func make() throws -> DownloadFile {
        pruneFinished()
        let file = try DownloadFile.create(in: FileManager.default.temporaryDirectory)
        let entry = directory.appendingPathComponent(file.url.lastPathComponent).path
        let descriptor = open(entry, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        if descriptor >= 0 { close(descriptor) }
        return file
    }

    /// Deletes the download files the register lists (a killed daemon's) and their entries,
    /// and makes the register's folder for this daemon's downloads.
    func removeLeftovers() {
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for name in entries() {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent(name).path
            var status = stat()
            // Only a regular file of this user's, as the download made it, is deleted.
            if lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_uid == geteuid() {
                unlink(path)
            }
            unlink(directory.appendingPathComponent(name).path)
        }
    }

    /// Drops the entries whose download file no longer exists under its name.
    private func pruneFinished() {
        for name in entries() {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent(name).path
            if access(path, F_OK) != 0 { unlink(directory.appendingPathComponent(name).path) }
        }
    }

    /// The names in the register that are download file names.
    private func entries() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.filter { $0.hasPrefix("CourierDownload_") && $0.hasSuffix(".tmp") && !$0.contains("/") }
    }
}
