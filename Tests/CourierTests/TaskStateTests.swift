import Courier
import CourierSync
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

// MARK: Helpers

/// A URL on 127.0.0.1 at a port nothing listens on: the port is found by binding port 0 and
/// closing the socket. Loopback only; these tests never reach an outside host.
private func closedLoopbackURL(path: String = "/closed") -> URL {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    precondition(fd >= 0, "socket() failed")
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    precondition(bound == 0, "bind() failed")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let named = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    precondition(named == 0, "getsockname() failed")
    let port = Int(UInt16(bigEndian: address.sin_port))
    return URL(string: "http://127.0.0.1:\(port)\(path)")!
}

/// What a completion handler received, and where it ran.
private struct Outcome: Sendable {
    var data: Data?
    var response: URLResponse?
    var error: (any Error)?
    var ranOnDelegateQueue: Bool

    var code: URLError.Code? { (error as? URLError)?.code }
}

/// Records completion-handler calls and lets a test wait for the first.
private final class CompletionRecorder: Sendable {
    private struct State {
        var outcomes: [Outcome] = []
        var waiters: [CheckedContinuation<Outcome, Never>] = []
    }

    private let state = Mutex(State())

    /// A completion handler for a task of `session`.
    func handler(for session: URLSession) -> @Sendable (Data?, URLResponse?, (any Error)?) -> Void {
        { [self] data, response, error in
            let onQueue = OperationQueue.current === session.delegateQueue
            record(Outcome(data: data, response: response, error: error, ranOnDelegateQueue: onQueue))
        }
    }

    private func record(_ outcome: Outcome) {
        let waiters = state.withLock { state -> [CheckedContinuation<Outcome, Never>] in
            state.outcomes.append(outcome)
            let waiters = state.waiters
            state.waiters = []
            return waiters
        }
        for waiter in waiters { waiter.resume(returning: outcome) }
    }

    /// The first call's arguments, once it happened.
    func first() async -> Outcome {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> Outcome? in
                if let first = state.outcomes.first { return first }
                state.waiters.append(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    var calls: Int { state.withLock { $0.outcomes.count } }
}

/// Records the task-level delegate calls of a session.
private final class EventDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private struct State {
        var events: [String] = []
        var error: (any Error)?
        var waiters: [CheckedContinuation<Void, Never>] = []
        var offQueue = 0
    }

    private let state = Mutex(State())

    private func note(_ event: String, _ session: URLSession, error: (any Error)? = nil) {
        let onQueue = OperationQueue.current === session.delegateQueue
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.events.append(event)
            if !onQueue { state.offQueue += 1 }
            if let error { state.error = error }
            guard event == "complete" || event == "invalid" else { return [] }
            let waiters = state.waiters
            state.waiters = []
            return waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
        note("metrics", session)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        note("complete", session, error: error)
    }

    func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {
        note("invalid", session)
    }

    /// Waits until `event` ("complete" or "invalid") was recorded.
    func wait(for event: String) async {
        await withCheckedContinuation { continuation in
            let already = state.withLock { state -> Bool in
                if state.events.contains(event) { return true }
                state.waiters.append(continuation)
                return false
            }
            if already { continuation.resume() }
        }
        // Another event may have woken us; wait again until ours is there.
        if !state.withLock({ $0.events.contains(event) }) { await wait(for: event) }
    }

    var events: [String] { state.withLock { $0.events } }
    var error: (any Error)? { state.withLock { $0.error } }
    var offQueue: Int { state.withLock { $0.offQueue } }
}

/// Waits until everything queued on the session's delegate queue so far has run.
private func drain(_ session: URLSession) async {
    await withCheckedContinuation { continuation in
        session.delegateQueue.addOperation { continuation.resume() }
    }
}

/// Every task of `session` not yet completed, as `getAllTasks` reports them.
private func allTasks(_ session: URLSession) async -> [URLSessionTask] {
    await withCheckedContinuation { continuation in
        session.getAllTasks { continuation.resume(returning: $0) }
    }
}

// MARK: Tests

@Suite("Task state, identifiers and cancellation", .timeLimit(.minutes(1)))
struct TaskStateTests {
    @Test("a new task is suspended, with its request and nothing else yet")
    func newTaskIsSuspended() {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let url = closedLoopbackURL()
        var request = URLRequest(url: url)
        request.setValue("1", forHTTPHeaderField: "X-Test")
        let task = session.dataTask(with: request)
        #expect(task.state == .suspended)
        #expect(task.originalRequest == request)
        #expect(task.currentRequest == request)
        #expect(task.response == nil)
        #expect(task.error == nil)
        #expect(task.priority == URLSessionTask.defaultPriority)
        #expect(task.countOfBytesSent == 0)
        #expect(task.countOfBytesReceived == 0)
        #expect(task.countOfBytesExpectedToSend == 0)
        #expect(task.countOfBytesExpectedToReceive == 0)
        #expect(task.countOfBytesClientExpectsToSend == -1)
        #expect(task.countOfBytesClientExpectsToReceive == -1)
        #expect(task.taskDescription == nil)
        #expect(session.dataTask(with: url, completionHandler: { _, _, _ in }).state == .suspended)
        #expect(session.uploadTask(with: request, from: Data("x".utf8)).state == .suspended)
    }

    @Test("task identifiers are unique and increasing within a session, across task kinds")
    func identifiersIncrease() {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let url = closedLoopbackURL()
        let request = URLRequest(url: url)
        let tasks: [URLSessionTask] = [
            session.dataTask(with: url),
            session.dataTask(with: request),
            session.dataTask(with: url, completionHandler: { _, _, _ in }),
            session.uploadTask(with: request, from: Data("x".utf8)),
            session.dataTask(with: request, completionHandler: { _, _, _ in }),
            session.uploadTask(with: request, from: nil, completionHandler: { _, _, _ in }),
            session.dataTask(with: url),
        ]
        let identifiers = tasks.map(\.taskIdentifier)
        #expect(Set(identifiers).count == identifiers.count)
        #expect(zip(identifiers, identifiers.dropFirst()).allSatisfy { $0 < $1 }, "\(identifiers)")
        // Asking again gives the same identifier.
        #expect(tasks.map(\.taskIdentifier) == identifiers)
    }

    @Test("task identifiers stay unique when tasks are made from many threads at once")
    func identifiersUniqueUnderConcurrency() async {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let url = closedLoopbackURL()
        let identifiers = await withTaskGroup(of: [Int].self) { group in
            for _ in 0..<8 {
                group.addTask { (0..<25).map { _ in session.dataTask(with: url).taskIdentifier } }
            }
            var all: [Int] = []
            for await some in group { all += some }
            return all
        }
        #expect(identifiers.count == 200)
        #expect(Set(identifiers).count == 200)
    }

    @Test("cancel() on a task never resumed completes it with URLError(.cancelled)")
    func cancelNeverResumed() async {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let url = closedLoopbackURL()
        let recorder = CompletionRecorder()
        let task = session.dataTask(with: url, completionHandler: recorder.handler(for: session))
        task.cancel()
        #expect(task.state == .canceling || task.state == .completed)
        let outcome = await recorder.first()
        #expect(outcome.code == .cancelled)
        #expect((outcome.error as? URLError)?.failingURL == url)
        #expect(outcome.data == nil)
        #expect(outcome.response == nil)
        #expect(outcome.ranOnDelegateQueue)
        #expect(task.state == .completed)
        #expect((task.error as? URLError)?.code == .cancelled)
        await drain(session)
        #expect(recorder.calls == 1)
    }

    @Test("cancelling twice, or resuming after cancel, completes the task only once")
    func cancelIsFinal() async {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let recorder = CompletionRecorder()
        let task = session.dataTask(with: closedLoopbackURL(), completionHandler: recorder.handler(for: session))
        task.cancel()
        task.cancel()
        _ = await recorder.first()
        task.resume()
        task.cancel()
        task.suspend()
        await drain(session)
        #expect(task.state == .completed)
        #expect(recorder.calls == 1)
        #expect((task.error as? URLError)?.code == .cancelled)
    }

    @Test("a delegate hears of a cancelled task through didCompleteWithError, on the delegate queue")
    func cancelThroughDelegate() async {
        let delegate = EventDelegate()
        let session = URLSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        defer { session.invalidateAndCancel() }
        let task = session.dataTask(with: closedLoopbackURL())
        task.cancel()
        await delegate.wait(for: "complete")
        #expect((delegate.error as? URLError)?.code == .cancelled)
        #expect(delegate.events.last == "complete")
        #expect(delegate.offQueue == 0)
        #expect(task.state == .completed)
    }

    @Test("resume() of a task to a closed port completes it with cannotConnectToHost")
    func resumeToClosedPort() async {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let url = closedLoopbackURL()
        let recorder = CompletionRecorder()
        let task = session.dataTask(with: url, completionHandler: recorder.handler(for: session))
        task.resume()
        #expect(task.state == .running || task.state == .completed)
        let outcome = await recorder.first()
        #expect(outcome.code == .cannotConnectToHost)
        #expect((outcome.error as? URLError)?.failingURL == url)
        #expect(outcome.data == nil)
        #expect(outcome.response == nil)
        #expect(outcome.ranOnDelegateQueue)
        #expect(task.state == .completed)
        #expect((task.error as? URLError)?.code == .cannotConnectToHost)
        #expect(task.response == nil)
        await drain(session)
        #expect(recorder.calls == 1)
    }

    @Test("a task suspended before it ever ran stays suspended, then runs on resume()")
    func suspendBeforeResume() async {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let recorder = CompletionRecorder()
        let task = session.dataTask(with: closedLoopbackURL(), completionHandler: recorder.handler(for: session))
        task.suspend()
        #expect(task.state == .suspended)
        await drain(session)
        #expect(recorder.calls == 0)
        task.resume()
        let outcome = await recorder.first()
        #expect(outcome.code == .cannotConnectToHost)
        #expect(task.state == .completed)
    }

    @Test("with a completion handler, the delegate gets no didCompleteWithError")
    func completionHandlerReplacesDelegateCompletion() async {
        let delegate = EventDelegate()
        let session = URLSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        defer { session.invalidateAndCancel() }
        let recorder = CompletionRecorder()
        session.dataTask(with: closedLoopbackURL(), completionHandler: recorder.handler(for: session)).resume()
        let outcome = await recorder.first()
        #expect(outcome.code == .cannotConnectToHost)
        await drain(session)
        #expect(!delegate.events.contains("complete"))
    }

    @Test("a delegate task to a closed port gets metrics, then didCompleteWithError(cannotConnectToHost)")
    func delegateSeesConnectFailure() async {
        let delegate = EventDelegate()
        let session = URLSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        defer { session.invalidateAndCancel() }
        let task = session.dataTask(with: closedLoopbackURL())
        task.resume()
        await delegate.wait(for: "complete")
        #expect((delegate.error as? URLError)?.code == .cannotConnectToHost)
        #expect(delegate.events == ["metrics", "complete"])
        #expect(delegate.offQueue == 0)
        #expect(task.state == .completed)
    }

    @Test("data(from:) to a closed port throws cannotConnectToHost")
    func asyncDataToClosedPort() async {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let url = closedLoopbackURL()
        do {
            _ = try await session.data(from: url)
            Issue.record("a load from a closed port succeeded")
        } catch let error as URLError {
            #expect(error.code == .cannotConnectToHost)
            #expect(error.failingURL == url)
        } catch {
            Issue.record("expected a URLError, got \(error)")
        }
    }

    @Test("getAllTasks lists the tasks not yet completed, suspended ones included")
    func getAllTasksListsSuspended() async {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let url = closedLoopbackURL()
        #expect(await allTasks(session).isEmpty)

        let recorder = CompletionRecorder()
        let first = session.dataTask(with: url)
        let second = session.uploadTask(with: URLRequest(url: url), from: Data("x".utf8))
        let third = session.dataTask(with: url, completionHandler: recorder.handler(for: session))
        let listed = await allTasks(session)
        #expect(listed.map(\.taskIdentifier) == [first, second, third].map(\.taskIdentifier))
        #expect(listed.allSatisfy { $0.state == .suspended })
        #expect(listed.contains { $0 === first } && listed.contains { $0 === second } && listed.contains { $0 === third })

        third.cancel()
        _ = await recorder.first()
        await drain(session)
        let remaining = await allTasks(session)
        #expect(remaining.map(\.taskIdentifier) == [first, second].map(\.taskIdentifier))
    }

    @Test("getTasksWithCompletionHandler sorts tasks by kind")
    func getTasksByKind() async {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let url = closedLoopbackURL()
        let data = session.dataTask(with: url)
        let upload = session.uploadTask(with: URLRequest(url: url), from: Data("x".utf8))
        let (dataTasks, uploadTasks, downloadTasks) = await withCheckedContinuation { continuation in
            session.getTasksWithCompletionHandler { continuation.resume(returning: ($0, $1, $2)) }
        }
        #expect(dataTasks.map(\.taskIdentifier) == [data.taskIdentifier])
        #expect(uploadTasks.map(\.taskIdentifier) == [upload.taskIdentifier])
        #expect(downloadTasks.isEmpty)
    }

    @Test("finishTasksAndInvalidate() on the shared session has no effect")
    func sharedIgnoresFinishTasksAndInvalidate() async {
        let shared = URLSession.shared
        shared.finishTasksAndInvalidate()
        #expect(URLSession.shared === shared)
        #expect(shared.delegate == nil)
        let recorder = CompletionRecorder()
        let task = shared.dataTask(with: closedLoopbackURL(), completionHandler: recorder.handler(for: shared))
        #expect(task.state == .suspended)
        task.resume()
        let outcome = await recorder.first()
        // An invalidated session would have refused the load as cancelled.
        #expect(outcome.code == .cannotConnectToHost)
    }

    @Test("finishTasksAndInvalidate() on an idle session of one's own invalidates it and releases the delegate")
    func ownSessionInvalidates() async {
        let delegate = EventDelegate()
        let session = URLSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        #expect(session.delegate === delegate)
        session.finishTasksAndInvalidate()
        await delegate.wait(for: "invalid")
        await drain(session)
        #expect(delegate.events == ["invalid"])
        #expect(delegate.offQueue == 0)
        #expect(session.delegate == nil)
    }

    @Test("copying a task returns the same object")
    func copyIsSameObject() {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let task = session.dataTask(with: closedLoopbackURL())
        // Compared outside #expect: the macro's expansion of `===` on `as AnyObject` crashes
        // the Swift 6.3 compiler.
        let copy = task.copy() as AnyObject
        let zoneCopy = task.copy(with: nil) as AnyObject
        let sameCopy = copy === task
        let sameZoneCopy = zoneCopy === task
        #expect(sameCopy)
        #expect(sameZoneCopy)
    }

    @Test("a task has a progress object, the same one every time, with an unknown total")
    func progressExists() {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let task = session.dataTask(with: closedLoopbackURL())
        let progress = task.progress
        #expect(progress === task.progress)
        #expect(progress.totalUnitCount == -1)
        #expect(progress.completedUnitCount == 0)
        #expect(!progress.isFinished)
    }

    @Test("taskDescription and priority can be set")
    func descriptionAndPriority() {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let task = session.dataTask(with: closedLoopbackURL())
        task.taskDescription = "first"
        task.priority = URLSessionTask.highPriority
        #expect(task.taskDescription == "first")
        #expect(task.priority == 0.75)
        task.priority = URLSessionTask.lowPriority
        #expect(task.priority == 0.25)
    }
}

@Suite("Tasks made with init()")
struct DetachedTaskTests {
    /// The mocking pattern of many apps' tests: a data task subclass whose resume runs a closure.
    final class StandInTask: URLSessionDataTask, @unchecked Sendable {
        private let onResume: @Sendable () -> Void
        init(onResume: @escaping @Sendable () -> Void) {
            self.onResume = onResume
        }
        override func resume() { onResume() }
    }

    @Test("a subclass made with init() is a task of its own: resume runs the override")
    func subclass() {
        let resumed = Mutex(false)
        let task = StandInTask { resumed.withLock { $0 = true } }
        task.resume()
        #expect(resumed.withLock { $0 })
        #expect(task.originalRequest == nil && task.state == .suspended)
        #expect(StandInTask { }.taskIdentifier != task.taskIdentifier)
    }

    @Test("a bare URLSessionTask() resumed completes with .unsupportedURL")
    func bare() async throws {
        let task = URLSessionTask()
        task.resume()
        for _ in 0..<500 where task.state != .completed { try await Task.sleep(for: .milliseconds(10)) }
        #expect(task.state == .completed)
        #expect((task.error as? URLError)?.code == .unsupportedURL)
    }
}

@Suite("didCreateTask")
struct DidCreateTaskTests {
    final class CreationRecorder: NSObject, URLSessionDataDelegate, @unchecked Sendable {
        let created = Mutex<[Int]>([])
        func urlSession(_ session: URLSession, didCreateTask task: URLSessionTask) {
            created.withLock { $0.append(task.taskIdentifier) }
            // Apple's promise: the task can still be configured here, before resume.
            task.taskDescription = "configured at creation"
        }
    }

    @Test("the session delegate hears of each task before the method that made it returns")
    func synchronous() {
        let recorder = CreationRecorder()
        let session = URLSession(configuration: .ephemeral, delegate: recorder, delegateQueue: nil)
        defer { session.invalidateAndCancel() }
        let data = session.dataTask(with: URL(string: "data:,a")!)
        #expect(recorder.created.withLock { $0 } == [data.taskIdentifier])
        let download = session.downloadTask(with: URL(string: "data:,b")!)
        let upload = session.uploadTask(with: URLRequest(url: URL(string: "data:,c")!), from: Data())
        #expect(recorder.created.withLock { $0 } == [data.taskIdentifier, download.taskIdentifier, upload.taskIdentifier])
        #expect(upload.taskDescription == "configured at creation")
    }

    @Test("an async call's task delegate hears of its task, once")
    func asyncDelegate() async throws {
        let sessionRecorder = CreationRecorder()
        let session = URLSession(configuration: .ephemeral, delegate: sessionRecorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let taskRecorder = CreationRecorder()
        let (body, _) = try await session.data(for: URLRequest(url: URL(string: "data:,hello")!), delegate: taskRecorder)
        #expect(body == Data("hello".utf8))
        #expect(taskRecorder.created.withLock { $0.count } == 1)
        #expect(sessionRecorder.created.withLock { $0 }.isEmpty, "the task's own delegate implements it: the session's is not asked")
    }
}
