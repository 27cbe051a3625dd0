import CourierSync
import Foundation

/// A background session's connection to its identifier's daemon (`courier-background`),
/// started when none runs. It forwards the tasks' resume, suspend and cancel, and turns the
/// daemon's messages into the tasks' state and their delegates' calls, on the delegate queue.
///
/// Events (a finished download, an upload's response body, a completion) are acknowledged after
/// the delegate returned: the daemon keeps them until then, so a process that dies first gets
/// them again through its next session. Tasks an earlier session made come back as task objects
/// at connection; once every one of them has completed, the delegate hears
/// `urlSessionDidFinishEvents(forBackgroundURLSession:)`.
final class BackgroundLink: @unchecked Sendable {
    enum Status: Error {
        case connected(FrameSocket)
        /// Another session holds the identifier.
        case inUse
        case failed(String)
        case closed
    }

    struct State {
        var status = Status.closed
        /// Events handed to the delegate queue (a daemon restarted before their acknowledgement
        /// sends them again).
        var seenEvents: Set<Int> = []
        /// Tasks made by an earlier session, not yet completed here.
        var inherited: Set<Int> = []
        var hadInherited = false
        var toldFinishedEvents = false
        var resumeDataWaiters: [Int: @Sendable (Data?) -> Void] = [:]
    }

    let identifier: String
    let directory: URL
    let settings: WireSettings
    private(set) weak var session: URLSession?
    let state = Mutex(State())

    /// How long a session waits for its daemon to start and answer.
    static let connectTimeout: TimeInterval = 15

    init(session: URLSession, identifier: String, configuration: URLSessionConfiguration) {
        self.identifier = identifier
        self.session = session
        self.directory = BackgroundPlace.directory(for: identifier)
        self.settings = WireSettings(configuration)
    }

    /// Connects (starting the daemon when needed), takes the tasks an earlier session left, and
    /// starts reading. Synchronous, as the session's creation is: `getAllTasks` right after it
    /// already lists the inherited tasks.
    func connect() {
        switch open() {
        case .success(let (socket, tasks, last)):
            state.withLock { $0.status = .connected(socket) }
            adopt(tasks, lastTaskIdentifier: last)
            let reader = Thread { [self] in read(socket) }
            reader.name = "courier-background link"
            reader.start()
        case .failure(let failure):
            state.withLock { $0.status = failure }
        }
    }

    /// The session was invalidated: the daemon keeps any task still running.
    func close() {
        let socket = state.withLock { state -> FrameSocket? in
            defer { state.status = .closed }
            if case .connected(let socket) = state.status { return socket }
            return nil
        }
        socket?.shutdown()
    }

    // MARK: Connecting

    func open() -> Result<(FrameSocket, [WireTask], Int), Status> {
        let deadline = Date().addingTimeInterval(Self.connectTimeout)
        var spawnedAt: Date?
        var refusedSince: Date?
        while Date() < deadline {
            if let socket = BackgroundPlace.connect(to: directory) {
                socket.send(ClientMessage.hello(settings: settings))
                switch socket.receive(DaemonMessage.self) {
                case .welcome(let tasks, let last)?:
                    return .success((socket, tasks, last))
                case .refused?:
                    // A session just invalidated may not have been seen to go yet.
                    socket.close()
                    let since = refusedSince ?? Date()
                    refusedSince = since
                    if Date().timeIntervalSince(since) > 2 { return .failure(.inUse) }
                default:
                    // The daemon was exiting as we came: the next one will answer.
                    socket.close()
                }
            } else if spawnedAt.map({ Date().timeIntervalSince($0) > 3 }) ?? true {
                spawnedAt = Date()
                // No daemon to start: waiting would not help.
                if let problem = spawnDaemon() { return .failure(.failed(problem)) }
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return .failure(.failed("The background daemon for \"\(identifier)\" did not answer within \(Int(Self.connectTimeout)) s (its log: \(directory.appendingPathComponent("daemon.log").path))"))
    }

    /// Starts `courier-background` for this directory; a problem's description, or nil.
    private func spawnDaemon() -> String? {
        guard let executable = Self.daemonExecutable() else {
            return "courier-background was not found (set COURIER_BACKGROUND_DAEMON, or install it next to the program or on PATH)"
        }
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let logURL = directory.appendingPathComponent("daemon.log")
            if !FileManager.default.fileExists(atPath: logURL.path) {
                _ = FileManager.default.createFile(atPath: logURL.path, contents: nil, attributes: [.posixPermissions: 0o600])
            }
            let log = try FileHandle(forWritingTo: logURL)
            log.seekToEndOfFile()
            let process = Process()
            process.executableURL = executable
            process.arguments = ["--state", directory.path]
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = log
            process.standardError = log
            try process.run()
            try? log.close()
            return nil
        } catch {
            return "courier-background could not be started: \(error.localizedDescription)"
        }
    }

    /// `$COURIER_BACKGROUND_DAEMON`, else `courier-background` next to this program, else on
    /// `PATH`.
    static func daemonExecutable() -> URL? {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment["COURIER_BACKGROUND_DAEMON"], !path.isEmpty {
            return URL(fileURLWithPath: path)
        }
        var folders: [String] = []
        if let program = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            folders.append((program as NSString).deletingLastPathComponent)
        }
        folders.append((CommandLine.arguments.first.map { ($0 as NSString).deletingLastPathComponent }) ?? "")
        folders += (environment["PATH"] ?? "").split(separator: ":").map(String.init)
        for folder in folders where !folder.isEmpty {
            let candidate = (folder as NSString).appendingPathComponent("courier-background")
            if FileManager.default.isExecutableFile(atPath: candidate) { return URL(fileURLWithPath: candidate) }
        }
        return nil
    }

    // MARK: Tasks

    /// Tells the daemon of a new task (suspended): it exists there even if this process dies
    /// before resuming it.
    func created(_ wire: WireTask) {
        send(.create(wire))
    }

    /// The error a task of this session gets when it cannot reach the daemon; nil when connected.
    private func unavailableError(for task: URLSessionTask) -> URLError? {
        let url = task.originalRequest?.url
        switch state.withLock({ $0.status }) {
        case .connected: return nil
        case .inUse:
            return .courier(.backgroundSessionInUseByAnotherProcess, "Another session uses the background identifier \"\(identifier)\"", url: url)
        case .failed(let message):
            return .courier(.backgroundSessionWasDisconnected, message, url: url)
        case .closed:
            return .courier(.backgroundSessionWasDisconnected, "The background session was invalidated", url: url)
        }
    }

    func resume(_ task: URLSessionTask) {
        let resumed = task.storage.withLock { storage -> Bool in
            guard storage.state == .suspended else { return false }
            storage.state = .running
            storage.started = true
            return true
        }
        guard resumed else { return }
        if let error = unavailableError(for: task) {
            task.reportCompletion(error)
            return
        }
        send(.resume(task: task.taskIdentifier, taskDescription: task.taskDescription))
    }

    func suspend(_ task: URLSessionTask) {
        let suspended = task.storage.withLock { storage -> Bool in
            guard storage.state == .running else { return false }
            storage.state = .suspended
            return true
        }
        if suspended { send(.suspend(task: task.taskIdentifier)) }
    }

    func cancel(_ task: URLSessionTask, producingResumeData waiter: (@Sendable (Data?) -> Void)?) {
        guard task.markCanceling() else {
            if let waiter { task.session.delegateQueue.addOperation { waiter(nil) } }
            return
        }
        if let error = unavailableError(for: task) {
            if let waiter { task.session.delegateQueue.addOperation { waiter(nil) } }
            task.reportCompletion(URLError.courier(.cancelled, "cancelled", url: task.originalRequest?.url, underlying: error))
            return
        }
        if let waiter { state.withLock { $0.resumeDataWaiters[task.taskIdentifier] = waiter } }
        send(.cancel(task: task.taskIdentifier, producingResumeData: waiter != nil))
    }

    func send(_ message: ClientMessage) {
        let socket = state.withLock { state -> FrameSocket? in
            if case .connected(let socket) = state.status { return socket }
            return nil
        }
        socket?.send(message)
    }

    /// Makes task objects for the daemon's tasks this session does not have, and moves the
    /// session's task identifiers past every one the daemon has seen.
    func adopt(_ tasks: [WireTask], lastTaskIdentifier: Int) {
        guard let session else { return }
        var adopted: [Int] = []
        session.registry.withLock { registry in
            registry.nextTaskIdentifier = max(registry.nextTaskIdentifier, lastTaskIdentifier + 1)
            // Task identifiers start at 1: a lower one is not a task this session could have made.
            for wire in tasks where wire.id > 0 && registry.tasks[wire.id] == nil {
                registry.nextTaskIdentifier = max(registry.nextTaskIdentifier, wire.id + 1)
                let request = wire.request.urlRequest
                let task: URLSessionTask = switch wire.kind {
                case .download: BackgroundDownloadTask(session: session, identifier: wire.id, request: request, delivery: .delegate, body: .request)
                case .upload: BackgroundUploadTask(session: session, identifier: wire.id, request: request, delivery: .delegate, body: .request)
                }
                task.storage.withLock { storage in
                    storage.taskDescription = wire.taskDescription
                    storage.state = wire.state == .suspended ? .suspended : .running
                    storage.started = wire.started || wire.state != .suspended
                    storage.response = wire.response?.httpResponse
                    storage.countOfBytesReceived = wire.bytesReceived
                    storage.countOfBytesExpectedToReceive = wire.bytesExpectedToReceive
                    storage.countOfBytesSent = wire.bytesSent
                    storage.countOfBytesExpectedToSend = wire.bytesExpectedToSend
                }
                registry.tasks[wire.id] = task
                adopted.append(wire.id)
            }
        }
        if !adopted.isEmpty {
            state.withLock { state in
                state.inherited.formUnion(adopted)
                state.hadInherited = true
            }
        }
    }
}
