import CCourierLinux
import CourierSync
import DequeModule
import Foundation
import Glibc

/// What the reactor reports about a registered file descriptor.
public struct IOEvents: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let readable = IOEvents(rawValue: courier_EPOLLIN)
    public static let writable = IOEvents(rawValue: courier_EPOLLOUT)
    /// The peer shut down its sending side (EPOLLRDHUP).
    public static let readHangup = IOEvents(rawValue: courier_EPOLLRDHUP)
    /// Both directions are closed (EPOLLHUP); reported whatever the interest.
    public static let hangup = IOEvents(rawValue: courier_EPOLLHUP)
    /// An error is pending on the socket (EPOLLERR); reported whatever the interest.
    public static let error = IOEvents(rawValue: courier_EPOLLERR)
}

/// An object that owns a registered file descriptor and handles its readiness events.
/// Called on its event loop only.
public protocol IOEventHandler: AnyObject {
    func handleIOEvents(_ events: IOEvents)
}

/// An object with work to do once at the end of a loop's turn (``EventLoop/atEndOfTurn(_:)``).
/// Called on its event loop only.
public protocol TurnEndHandler: AnyObject {
    func loopTurnDidEnd()
}

/// A registration of a file descriptor with an event loop.
public struct RegistrationToken: Hashable, Sendable {
    let rawValue: UInt64
}

/// One thread running an epoll selector, a timer queue and a queue of submitted work.
///
/// Everything registered with a loop — sockets, timers, connections — is confined to the loop's
/// thread and needs no locks. Other threads reach it only through ``execute(_:)``, which queues
/// the work under a mutex and wakes the loop through an eventfd.
public final class EventLoop: @unchecked Sendable, CustomStringConvertible {
    /// Work submitted from any thread.
    public typealias Job = @Sendable () -> Void
    /// Work that stays on the loop.
    public typealias LocalJob = () -> Void

    /// A job in one of the loop's queues.
    ///
    /// Design note: the queues (generic containers) hold jobs in a struct, not as bare
    /// closures. A container holds a bare closure in its most general form, so a closure put
    /// in was wrapped in a reabstraction thunk (an allocation), and taken out and put in the
    /// next queue, wrapped twice more: three allocations for every job handed to the loop
    /// from another thread. A struct's closure is stored as it is.
    struct QueuedJob {
        let run: LocalJob
    }

    /// A job from another thread, as ``Incoming`` holds it.
    struct SentJob: Sendable {
        let run: Job
    }

    private struct Incoming {
        var jobs: [SentJob] = []
        /// True when a wake-up is already written and not yet consumed.
        var wakePending = false
        var stopping = false
        /// True while the loop sleeps in epoll_wait, or is about to: a job queued then must
        /// wake it. While it is awake it looks at the queue before it sleeps again, so a job
        /// queued then needs no wake-up.
        var parked = false
        /// How many of `jobs` run a Swift task (``enqueue(_:)``): while any waits, no thread
        /// borrows the loop, since a borrower runs the queued jobs before its own.
        var taskJobs = 0
    }

    private struct Registration {
        var fd: Int32
        var handler: IOEventHandler
    }

    private struct RegistrationSlot {
        var generation: UInt32
        var registration: Registration?
    }

    /// Position in its group, for names and logs.
    public let index: Int
    private let epollFD: Int32
    private let wakeFD: Int32
    /// Jobs from other threads; the only state shared across threads. Protected by its mutex.
    private let incoming = Mutex(Incoming())
    private let threadID = Atomic<UInt>(0)
    private let finished = Mutex(false)
    /// Held by the loop's thread for each turn, and released only while it waits for events;
    /// a thread that borrows the loop (``runBorrowing(_:)``) holds it instead. The value is
    /// true once the loop has stopped. A `HandoffMutex`: given up by a borrower while the loop
    /// waits for it, it goes to the loop, not to the next borrower.
    private let turn = HandoffMutex(false)
    /// The thread that has borrowed the loop, or 0.
    private let borrower = Atomic<UInt>(0)
    /// Turns the loop's thread found held by a borrower as it came for them; read by tests.
    private let contendedTurns = Atomic<Int>(0)

    // Loop-confined state.
    @exclusivity(unchecked) private var localJobs = Deque<QueuedJob>()
    @exclusivity(unchecked) private var timers = TimerQueue<QueuedJob>()
    /// The other of `Incoming.jobs`' two arrays: taking the jobs swaps it in, empty and with
    /// its capacity, so appending from other threads allocates only to grow.
    @exclusivity(unchecked) private var takenJobs: [SentJob] = []
    /// How many jobs in `localJobs` run a Swift task; the loop is not borrowed while any does.
    @exclusivity(unchecked) private var localTaskJobs = 0
    /// Registrations by slot: a token is its slot's index (low 32 bits) and the slot's
    /// generation (high 32 bits, never 0, so no token is the wake-up's). A freed slot's
    /// generation moves on, so an event collected for a registration since removed finds no
    /// handler. An array, not a dictionary: every event looks its registration up.
    @exclusivity(unchecked) private var slots: [RegistrationSlot] = []
    @exclusivity(unchecked) private var freeSlots: [Int] = []
    /// When the loop's thread waits for events as a batch thread.
    @exclusivity(unchecked) private var waitScheduling: WaitScheduling
    /// Times other threads borrowed the loop since its thread's last turn.
    @exclusivity(unchecked) private var borrowsSinceTurn = 0
    /// Told once each at the end of the current turn (``atEndOfTurn(_:)``).
    @exclusivity(unchecked) private var turnEndHandlers: [any TurnEndHandler] = []
    /// The timer deadline the current wait for events ends at (nil: it waits until woken).
    @exclusivity(unchecked) private var plannedTimer: MonotonicInstant?
    /// The time the loop last woke up; loop thread only. Cheaper than reading the clock for
    /// bookkeeping that tolerates the length of one turn (idle timers, activity stamps).
    @exclusivity(unchecked) public private(set) var now = MonotonicInstant.now
    /// A receive buffer shared by every socket on this loop; lent to readers for one callback.
    /// Read it afresh for every read: ``giveAwayReadBuffer(for:)`` may replace it.
    @exclusivity(unchecked) public private(set) var readBuffer: UnsafeMutableRawBufferPointer

    /// Token reserved for the wake-up eventfd.
    private static let wakeToken: UInt64 = 0
    /// Events taken from the kernel per epoll_wait.
    private static let eventBatch = 64
    /// Size of the shared receive buffer: large enough for a TLS record or a big read.
    ///
    /// A 1 GiB download read 64 KiB at a time took 17,000 reads, each a delivery to the
    /// delegate; at 256 KiB it takes 4,400, and the client's CPU time fell by about a quarter.
    /// The pages beyond what a read fills are never touched, so small responses cost no memory.
    public static let readBufferSize = 256 * 1024

    /// Hands the receive buffer to the caller, who now owns it (it is freed with
    /// `deallocate()`), and takes `replacement`, ``readBufferSize`` bytes from
    /// `UnsafeMutableRawPointer.allocate`, in its place. Loop thread only, from inside a read
    /// callback whose bytes are in the buffer: the reader then must not look at the bytes it
    /// lent once the callback returns. A reader of a large body keeps a read this way without
    /// copying it.
    public func giveAwayReadBuffer(for replacement: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer {
        precondition(inEventLoop, "the receive buffer changes hands on its loop only")
        let given = readBuffer.baseAddress!
        readBuffer = UnsafeMutableRawBufferPointer(start: replacement, count: Self.readBufferSize)
        return given
    }

    /// Creates a loop and starts its thread.
    public convenience init(index: Int = 0, name: String = "courier-loop") throws(SystemError) {
        try self.init(index: index, name: name, waitScheduling: WaitScheduling())
    }

    /// Creates a loop whose waits become batch waits as `waitScheduling` says (tests give it
    /// other thresholds than the loop's own).
    init(index: Int = 0, name: String = "courier-loop", waitScheduling: WaitScheduling) throws(SystemError) {
        self.index = index
        self.waitScheduling = waitScheduling
        let epollFD = epoll_create1(courier_EPOLL_CLOEXEC)
        guard epollFD >= 0 else { throw .last("epoll_create1") }
        let wakeFD = eventfd(0, courier_EFD_CLOEXEC | courier_EFD_NONBLOCK)
        guard wakeFD >= 0 else {
            Glibc.close(epollFD)
            throw .last("eventfd")
        }
        guard courier_epoll_ctl(epollFD, courier_EPOLL_CTL_ADD, wakeFD, courier_EPOLLIN, Self.wakeToken) == 0 else {
            Glibc.close(epollFD)
            Glibc.close(wakeFD)
            throw .last("epoll_ctl")
        }
        self.epollFD = epollFD
        self.wakeFD = wakeFD
        self.readBuffer = .allocate(byteCount: Self.readBufferSize, alignment: 16)
        let threadName = "\(name)-\(index)"
        let thread = Thread { [self] in
            // Foundation's name stays in Foundation on Linux: the system's (ps, perf) is set here.
            courier_set_thread_name(threadName)
            run()
        }
        thread.name = threadName
        thread.stackSize = 1 << 20
        thread.start()
    }

    public var description: String { "EventLoop(\(index))" }

    /// How many turns the loop's thread found held by a borrowing thread as it came for them.
    var contendedTurnCount: Int { contendedTurns.load(ordering: .relaxed) }

    /// True when called on this loop's thread, or on a thread that has borrowed it.
    public var inEventLoop: Bool {
        let current = UInt(pthread_self())
        return threadID.load(ordering: .relaxed) == current || borrower.load(ordering: .relaxed) == current
    }

    /// True when the calling thread has borrowed the loop (``runBorrowing(_:)``); false on the
    /// loop's own thread.
    public var isBorrowedByCurrentThread: Bool {
        borrower.load(ordering: .relaxed) == UInt(pthread_self())
    }

    /// Runs `job` on the loop, soon; callable from any thread.
    public func execute(_ job: @escaping Job) {
        if inEventLoop {
            localJobs.append(QueuedJob(run: job))
            return
        }
        send(job, runsTask: false)
    }

    /// Runs a Swift task's job on the loop's thread, soon (``enqueue(_:)``); callable from any
    /// thread. Counted until it runs: while one waits, no other thread borrows the loop
    /// (``borrow(_:)``), so the task never runs in the middle of a borrowing caller's code.
    func executeTask(_ job: UnownedJob) {
        let run: Job = { [self] in
            localTaskJobs -= 1
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
        if inEventLoop {
            localTaskJobs += 1
            localJobs.append(QueuedJob(run: run))
            return
        }
        send(run, runsTask: true)
    }

    /// Queues a job from another thread, and wakes the loop when it sleeps.
    private func send(_ job: @escaping Job, runsTask: Bool) {
        let needsWake = incoming.withLock { state -> Bool in
            // After shutdown the loop runs nothing more; the job is dropped.
            guard !state.stopping else { return false }
            state.jobs.append(SentJob(run: job))
            if runsTask { state.taskJobs += 1 }
            if state.wakePending || !state.parked { return false }
            state.wakePending = true
            return true
        }
        if needsWake { wake() }
    }

    /// Runs `job` now, on the calling thread, in the loop's place when the loop is waiting for
    /// events; otherwise (the loop is busy, or stopped) as ``execute(_:)`` does.
    ///
    /// Design note: a request submitted from a thread of the global pool would otherwise wake
    /// the loop's thread (an eventfd write, a context switch and an epoll_wait return) only to
    /// write to a socket. The loop's thread holds the `turn` lock except while it waits in
    /// epoll_wait, so a thread that takes the lock is alone with the loop's state, as the loop
    /// would be: it runs the loop's queued work first, keeping the order of work submitted
    /// before, then `job`. The loop's thread is woken afterwards only when that work left jobs
    /// queued or a timer earlier than the one its wait ends at.
    ///
    /// - Warning: the caller must hold no lock that work on the loop may take: `job`, and the
    ///   work queued before it, run inside this call.
    public func runBorrowing(_ job: @escaping Job) {
        if inEventLoop {
            job()
            return
        }
        if !borrow(job) { execute(job) }
    }

    /// ``runBorrowing(_:)`` for a job that takes `value`. When the loop is already this
    /// thread's, or borrowed, `job` is called with `value` and nothing is allocated (a closure
    /// that captures nothing has no context); only a job queued for the loop is boxed with it.
    ///
    /// - Warning: `value` is handed to the loop's thread as it is: use it for what lives on the
    ///   loop (a connection), not for state shared with other threads.
    ///
    /// Inlinable, so that callers get it specialized for their `Value`: unspecialized, each call
    /// looked up the generic metadata of ``LoopBound`` and copied `value` through value witnesses.
    @inlinable
    public func runBorrowing<Value>(_ value: Value, _ job: @escaping @Sendable (Value) -> Void) {
        if inEventLoop {
            job(value)
            return
        }
        if !borrow({ job(value) }) {
            let handed = LoopBound(value, loop: self)
            execute { job(handed.value) }
        }
    }

    /// Runs `job` with `value` at once, allocating nothing, when this thread is the loop's
    /// (unlike ``execute(_:)``, which runs it after the current event); else boxes them and
    /// queues the job as ``execute(_:)`` does. Same warning as ``runBorrowing(_:_:)``; inlinable
    /// for the same reason.
    @inlinable
    public func runOrQueue<Value>(_ value: Value, _ job: @escaping @Sendable (Value) -> Void) {
        if inEventLoop {
            job(value)
            return
        }
        let handed = LoopBound(value, loop: self)
        execute { job(handed.value) }
    }

    /// Takes the loop's place when it is waiting for events, and runs the queued work, then
    /// `run`, then the turn's end. False, having run nothing, when the loop is busy or stopped.
    @usableFromInline
    func borrow(_ run: () -> Void) -> Bool {
        let current = UInt(pthread_self())
        let outcome = turn.withLockIfAvailable { stopped -> (ran: Bool, wake: Bool) in
            // A queued Swift task runs on the loop's thread, not in its caller's place here:
            // with one waiting, `run` waits behind it, queued.
            guard !stopped, localTaskJobs == 0 else { return (false, false) }
            let taken = incoming.withLock { state -> Bool in
                guard !state.stopping, state.taskJobs == 0 else { return false }
                swap(&state.jobs, &takenJobs)
                return true
            }
            guard taken else { return (false, false) }
            borrower.store(current, ordering: .relaxed)
            borrowsSinceTurn += 1
            now = .now
            runLocalJobs()
            runTakenJobs()
            run()
            endTurn()
            borrower.store(0, ordering: .relaxed)
            let timerEarlier = timers.nextDeadline().map { next in plannedTimer.map { next < $0 } ?? true } ?? false
            return (true, !localJobs.isEmpty || timerEarlier)
        }
        guard let outcome, outcome.ran else { return false }
        if outcome.wake { wake() }
        return true
    }

    /// Runs `job` on the loop after the current event has been handled; loop thread only.
    /// Used to avoid calling back into an object from inside one of its own calls.
    public func executeSoon(_ job: @escaping LocalJob) {
        assertInEventLoop()
        localJobs.append(QueuedJob(run: job))
    }

    /// Tells `handler` once the current turn's events, timers and queued jobs are done, before
    /// the loop waits for events again (or a borrowing thread gives the loop back); loop thread
    /// only. For work that gains from being done once for many callers in a turn: a connection
    /// sends in one write the requests that several tasks resumed in the same turn queued.
    public func atEndOfTurn(_ handler: any TurnEndHandler) {
        assertInEventLoop()
        turnEndHandlers.append(handler)
    }

    /// Runs `job` at `deadline`; loop thread only.
    @discardableResult
    public func scheduleTimer(at deadline: MonotonicInstant, _ job: @escaping LocalJob) -> TimerID {
        assertInEventLoop()
        return timers.schedule(at: deadline, QueuedJob(run: job))
    }

    /// Runs `job` after `delay`; loop thread only.
    @discardableResult
    public func scheduleTimer(after delay: Duration, _ job: @escaping LocalJob) -> TimerID {
        scheduleTimer(at: .now + delay, job)
    }

    /// Cancels a timer that has not run; loop thread only.
    public func cancelTimer(_ id: TimerID) {
        assertInEventLoop()
        timers.cancel(id)
    }

    /// Registers `fd` for `interest` (readable/writable; peer hang-up is always watched).
    public func register(fd: Int32, interest: IOEvents, handler: IOEventHandler) throws(SystemError) -> RegistrationToken {
        assertInEventLoop()
        let index = freeSlots.last ?? slots.count
        let generation = index < slots.count ? slots[index].generation : 1
        let token = UInt64(generation) << 32 | UInt64(index)
        guard courier_epoll_ctl(epollFD, courier_EPOLL_CTL_ADD, fd, interest.rawValue, token) == 0 else {
            throw .last("epoll_ctl(ADD)")
        }
        let registration = Registration(fd: fd, handler: handler)
        if index < slots.count {
            freeSlots.removeLast()
            slots[index].registration = registration
        } else {
            slots.append(RegistrationSlot(generation: generation, registration: registration))
        }
        return RegistrationToken(rawValue: token)
    }

    /// The live registration `token` names, or nil.
    private func registration(_ token: UInt64) -> Registration? {
        let index = Int(truncatingIfNeeded: token & 0xFFFF_FFFF)
        guard index < slots.count, slots[index].generation == UInt32(truncatingIfNeeded: token >> 32) else { return nil }
        return slots[index].registration
    }

    /// Changes what a registration waits for.
    public func setInterest(_ token: RegistrationToken, _ interest: IOEvents) {
        assertInEventLoop()
        guard let registration = registration(token.rawValue) else { return }
        _ = courier_epoll_ctl(epollFD, courier_EPOLL_CTL_MOD, registration.fd, interest.rawValue, token.rawValue)
    }

    /// Removes a registration; events already collected for it are dropped.
    public func deregister(_ token: RegistrationToken) {
        assertInEventLoop()
        guard let registration = registration(token.rawValue) else { return }
        let index = Int(truncatingIfNeeded: token.rawValue & 0xFFFF_FFFF)
        slots[index].registration = nil
        // 0 is skipped: a token with generation 0 could be the wake-up's.
        slots[index].generation = slots[index].generation == .max ? 1 : slots[index].generation + 1
        freeSlots.append(index)
        _ = courier_epoll_ctl(epollFD, courier_EPOLL_CTL_DEL, registration.fd, 0, 0)
    }

    /// Stops the loop after the jobs already queued, and waits for its thread to end (unless
    /// called on the loop itself). Jobs submitted afterwards are dropped. Registered file
    /// descriptors stay open: their owners close them.
    public func shutdown() {
        let needsWake = incoming.withLock { state -> Bool in
            if state.stopping { return false }
            state.stopping = true
            return true
        }
        if needsWake { wake() }
        guard !inEventLoop else { return }
        while !finished.withLock({ $0 }) { usleep(1000) }
    }

    /// Traps in debug builds when called off the loop's thread.
    @inline(__always)
    public func assertInEventLoop(file: StaticString = #fileID, line: UInt = #line) {
        assert(inEventLoop, "called off its event loop", file: file, line: line)
    }

    private func wake() {
        var one: UInt64 = 1
        _ = Glibc.write(wakeFD, &one, 8)
    }

    private func run() {
        threadID.store(UInt(pthread_self()), ordering: .relaxed)
        let events = UnsafeMutableRawPointer.allocate(
            byteCount: courier_epoll_event_size() * Self.eventBatch, alignment: 16
        ).bindMemory(to: epoll_event.self, capacity: Self.eventBatch)
        defer { events.deallocate() }

        var count: Int32 = 0
        var timeout: Int32 = 0
        // Batch waits only for a thread on the default policy, without the reset-on-fork flag
        // (which a change of policy would clear): what the application gave the thread that
        // made the loop (inherited) is left as it is.
        var batchWaitsAllowed = courier_thread_policy(0) == SCHED_OTHER
        while true {
            // Other threads busy on the loop make this a busy turn (WaitScheduling): a borrower
            // holding the turn as the loop comes for it (the loop's wake-up has preempted it,
            // or it borrowed the loop since the wait returned), or several borrows during the
            // wait (counted by `borrow`).
            let contended = borrower.load(ordering: .relaxed) != 0
            if contended { contendedTurns.add(1, ordering: .relaxed) }
            // One turn, under the lock: the events of the last wait, due timers, queued work.
            let (stopping, batchWait) = turn.withLock { stopped -> (Bool, Bool) in
                now = .now
                if contended || borrowsSinceTurn > 1 { waitScheduling.noteBusyTurn(at: now) }
                borrowsSinceTurn = 0
                if count > 0 {
                    for index in 0..<Int(count) {
                        let token = courier_epoll_event_data(events + index)
                        let bits = courier_epoll_event_events(events + index)
                        if token == Self.wakeToken {
                            var value: UInt64 = 0
                            _ = Glibc.read(wakeFD, &value, 8)
                            continue
                        }
                        // A borrowing thread may have removed it since the wait returned.
                        guard let registration = registration(token) else { continue }
                        registration.handler.handleIOEvents(IOEvents(rawValue: bits))
                    }
                }
                while let job = timers.popNextDue(now: now) { job.run() }
                if takeIncomingJobs() {
                    stopped = true
                    return (true, false)
                }
                runLocalJobs()
                endTurn()
                timeout = prepareWait()
                return (false, timeout != 0 && waitScheduling.batchesWaits(at: now))
            }
            if stopping { break }
            // A sandbox may refuse the change of policy (moving between the two ordinary
            // policies needs no privilege otherwise); the waits then stay ordinary from then on.
            let batched = batchWait && batchWaitsAllowed && courier_set_batch_policy(1) == 0
            if batchWait && !batched { batchWaitsAllowed = false }
            count = epoll_wait(epollFD, events, Int32(Self.eventBatch), timeout)
            // Back on the default policy before anything else runs.
            if batched && courier_set_batch_policy(0) != 0 { batchWaitsAllowed = false }
        }
        // Stopped: no thread borrows the loop any more.
        runLocalJobs()
        endTurn()
        slots.removeAll()
        freeSlots.removeAll()
        Glibc.close(epollFD)
        Glibc.close(wakeFD)
        readBuffer.deallocate()
        finished.withLock { $0 = true }
    }

    /// The milliseconds the next epoll_wait may sleep. When it may sleep, the loop is marked
    /// parked first (with no job queued), so that a job queued from then on wakes it.
    private func prepareWait() -> Int32 {
        plannedTimer = timers.nextDeadline()
        let timeout = waitTimeout()
        if timeout == 0 { return 0 }
        let parked = incoming.withLock { state -> Bool in
            guard state.jobs.isEmpty, !state.stopping else { return false }
            state.parked = true
            return true
        }
        return parked ? timeout : 0
    }

    /// Moves jobs from other threads onto the local queue; returns true when the loop must stop.
    private func takeIncomingJobs() -> Bool {
        let stopping = incoming.withLock { state -> Bool in
            swap(&state.jobs, &takenJobs)
            localTaskJobs += state.taskJobs
            state.taskJobs = 0
            state.wakePending = false
            state.parked = false
            return state.stopping
        }
        for job in takenJobs { localJobs.append(QueuedJob(run: job.run)) }
        takenJobs.removeAll(keepingCapacity: true)
        return stopping
    }

    /// Tells the handlers registered for the end of this turn, including any registered
    /// meanwhile.
    private func endTurn() {
        guard !turnEndHandlers.isEmpty else { return }
        var index = 0
        while index < turnEndHandlers.count {
            let handler = turnEndHandlers[index]
            index += 1
            handler.loopTurnDidEnd()
        }
        turnEndHandlers.removeAll(keepingCapacity: true)
    }

    /// Runs the jobs ``borrow(_:)`` took from other threads, in order, and empties the array
    /// for the next swap, keeping its storage.
    private func runTakenJobs() {
        for job in takenJobs { job.run() }
        takenJobs.removeAll(keepingCapacity: true)
    }

    /// Runs the jobs queued so far; jobs they queue run on the next turn, so a job that keeps
    /// re-queueing itself cannot starve I/O.
    private func runLocalJobs() {
        var remaining = localJobs.count
        while remaining > 0, let job = localJobs.popFirst() {
            job.run()
            remaining -= 1
        }
    }

    /// Milliseconds epoll_wait may sleep: 0 with work queued, -1 with nothing scheduled.
    private func waitTimeout() -> Int32 {
        if !localJobs.isEmpty { return 0 }
        guard let deadline = timers.nextDeadline() else { return -1 }
        // In whole nanoseconds, as instants are; a `Duration` would divide in 128 bits at every wait.
        let remaining = MonotonicInstant.saturated(deadline.nanoseconds.subtractingReportingOverflow(MonotonicInstant.now.nanoseconds))
        if remaining <= 0 { return 0 }
        // Round up so a timer never fires before its deadline.
        return Int32(clamping: remaining / 1_000_000 + (remaining % 1_000_000 == 0 ? 0 : 1))
    }
}
