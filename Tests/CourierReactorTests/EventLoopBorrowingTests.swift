import CourierReactor
import CourierSync
import Dispatch
import Glibc
import Testing

/// Where a job ran: the thread, and whether that thread counted as the loop's.
private struct Placement: Sendable {
    var thread: UInt
    var inLoop: Bool
}

/// Records when the loop tells it the turn ended.
private final class TurnEndRecorder: TurnEndHandler, @unchecked Sendable {
    let events: Recorder<String>
    let label: String
    init(_ events: Recorder<String>, _ label: String) {
        self.events = events
        self.label = label
    }
    func loopTurnDidEnd() { events.record(label) }
}

/// Borrowing an idle loop (`runBorrowing`), the wake-ups that queued work still gets, and the
/// end of a turn (`atEndOfTurn`).
@Suite struct EventLoopBorrowingTests {
    /// Calls `runBorrowing` from this thread until one job runs here, in the loop's place; an
    /// idle loop lets the first or one of the next few do so. Returns that job's placement.
    private func borrowOnce(_ loop: EventLoop, _ body: @escaping @Sendable () -> Void = {}) async -> Placement? {
        for _ in 0..<200 {
            let placement = Mutex<Placement?>(nil)
            let caller = UInt(pthread_self())
            loop.runBorrowing {
                let here = UInt(pthread_self())
                placement.withLock { $0 = Placement(thread: here, inLoop: loop.inEventLoop) }
                if here == caller { body() }
            }
            if let ran = placement.withLock({ $0 }), ran.thread == caller { return ran }
            // Queued instead (the loop was busy): let it finish and go idle.
            try? await Task.sleep(for: .milliseconds(5))
        }
        return nil
    }

    /// Keeps `loop` busy in a job until the returned semaphore is signalled; returns once the
    /// job has started. Blocking the loop is what the tests using it are about.
    private func occupy(_ loop: EventLoop) async -> DispatchSemaphore {
        let release = DispatchSemaphore(value: 0)
        let started = Flag()
        loop.execute {
            started.set()
            release.wait()
        }
        #expect(await eventually { started.isSet })
        return release
    }

    @Test func anIdleLoopIsBorrowedByTheCallingThread() async throws {
        let loop = try EventLoop(name: "test-borrow")
        defer { loop.shutdown() }
        try await onLoop(loop) {}
        let placement = await borrowOnce(loop)
        #expect(placement != nil, "an idle loop was never borrowed")
        #expect(placement?.inLoop == true, "the borrowing thread did not count as the loop's inside the job")
        #expect(!loop.inEventLoop, "the thread still counts as the loop's after the job")
    }

    @Test func workQueuedBeforeRunsFirst() async throws {
        let loop = try EventLoop(name: "test-borrow-order")
        defer { loop.shutdown() }
        let order = Recorder<Int>()
        for round in 0..<200 {
            loop.execute { order.record(2 * round) }
            loop.runBorrowing { order.record(2 * round + 1) }
            if round % 20 == 0 { try await Task.sleep(for: .milliseconds(2)) }
        }
        let ran = await order.wait(for: 400)
        #expect(ran == Array(0..<400))
    }

    @Test func aTimerScheduledWhileBorrowedWakesTheLoop() async throws {
        let loop = try EventLoop(name: "test-borrow-timer")
        defer { loop.shutdown() }
        try await onLoop(loop) {}
        let fired = Recorder<UInt>()
        // The loop sleeps with no timer at all: only a wake-up makes it see the new one.
        let placement = await borrowOnce(loop) {
            loop.scheduleTimer(after: .milliseconds(20)) { fired.record(UInt(pthread_self())) }
        }
        #expect(placement != nil)
        let threads = await fired.wait(for: 1, timeout: .seconds(5))
        #expect(threads.count == 1, "a timer scheduled by a borrowing thread never fired")
        #expect(threads.first != placement?.thread, "the timer ran on the borrowing thread")
    }

    @Test func aJobQueuedWhileBorrowedRunsOnTheLoopsThread() async throws {
        let loop = try EventLoop(name: "test-borrow-queue")
        defer { loop.shutdown() }
        try await onLoop(loop) {}
        let ran = Recorder<Placement>()
        let placement = await borrowOnce(loop) {
            loop.execute { ran.record(Placement(thread: UInt(pthread_self()), inLoop: loop.inEventLoop)) }
        }
        #expect(placement != nil)
        let later = await ran.wait(for: 1, timeout: .seconds(5))
        #expect(later.count == 1, "a job queued by a borrowing thread never ran")
        #expect(later.first?.thread != placement?.thread)
        #expect(later.first?.inLoop == true)
    }

    @Test func aBusyLoopIsNotBorrowed() async throws {
        let loop = try EventLoop(name: "test-borrow-busy")
        defer { loop.shutdown() }
        let release = await occupy(loop)
        let caller = UInt(pthread_self())
        let ran = Recorder<UInt>()
        loop.runBorrowing { ran.record(UInt(pthread_self())) }
        #expect(ran.count == 0, "the job ran while the loop was busy")
        release.signal()
        let threads = await ran.wait(for: 1, timeout: .seconds(5))
        #expect(threads.count == 1)
        #expect(threads.first != caller, "a busy loop's job ran on the caller's thread")
    }

    @Test func aJobQueuedWhileTheLoopIsAwakeStillRuns() async throws {
        // The loop is busy, so the job is queued without a wake-up: the loop must look at its
        // queue before it sleeps again.
        let loop = try EventLoop(name: "test-awake-queue")
        defer { loop.shutdown() }
        for _ in 0..<50 {
            let release = await occupy(loop)
            let ran = Flag()
            loop.execute { ran.set() }
            release.signal()
            #expect(await eventually(timeout: .seconds(5)) { ran.isSet }, "a job queued while the loop was awake never ran")
        }
    }

    @Test func aStoppedLoopIsNotBorrowed() async throws {
        let loop = try EventLoop(name: "test-borrow-stopped")
        loop.shutdown()
        let ran = Flag()
        loop.runBorrowing { ran.set() }
        try await Task.sleep(for: .milliseconds(50))
        #expect(!ran.isSet, "a job ran on a loop that had stopped")
    }

    @Test func turnEndHandlersRunAfterTheTurnsJobs() async throws {
        let loop = try EventLoop(name: "test-turn-end")
        defer { loop.shutdown() }
        let events = Recorder<String>()
        let handler = TurnEndRecorder(events, "end")
        // Three jobs queued together run in one turn; the handler they all ask for is told
        // after the last of them, once for each time it was asked.
        loop.execute {
            loop.execute { events.record("a"); loop.atEndOfTurn(handler) }
            loop.execute { events.record("b"); loop.atEndOfTurn(handler) }
            loop.execute { events.record("c") }
        }
        let seen = await events.wait(for: 5)
        #expect(seen == ["a", "b", "c", "end", "end"])
    }

    @Test func aHandlerAskedForAtTheEndOfATurnIsToldInThatTurn() async throws {
        let loop = try EventLoop(name: "test-turn-end-nested")
        defer { loop.shutdown() }
        let events = Recorder<String>()
        let second = TurnEndRecorder(events, "second")
        let first = TurnEndRecorder(events, "first")
        final class Chaining: TurnEndHandler, @unchecked Sendable {
            let loop: EventLoop
            let next: TurnEndHandler
            let events: Recorder<String>
            init(_ loop: EventLoop, _ next: TurnEndHandler, _ events: Recorder<String>) {
                self.loop = loop
                self.next = next
                self.events = events
            }
            func loopTurnDidEnd() {
                events.record("chaining")
                loop.atEndOfTurn(next)
            }
        }
        let chaining = Chaining(loop, second, events)
        loop.execute {
            loop.atEndOfTurn(first)
            loop.atEndOfTurn(chaining)
            // Queued for the next turn: it must come after every handler of this one.
            loop.execute { events.record("next turn") }
        }
        let seen = await events.wait(for: 4)
        #expect(seen == ["first", "chaining", "second", "next turn"])
    }

    @Test func aBorrowingThreadTellsTheHandlersBeforeItReturns() async throws {
        let loop = try EventLoop(name: "test-turn-end-borrow")
        defer { loop.shutdown() }
        try await onLoop(loop) {}
        let events = Recorder<String>()
        let handler = TurnEndRecorder(events, "end")
        let placement = await borrowOnce(loop) {
            events.record("job")
            loop.atEndOfTurn(handler)
        }
        #expect(placement != nil)
        // Told inside runBorrowing, on this thread: no waiting needed.
        #expect(events.all == ["job", "end"])
    }

    @Test func aJobWithAValueGetsItWhetherBorrowedQueuedOrRunAtOnce() async throws {
        let loop = try EventLoop(name: "test-borrow-value")
        defer { loop.shutdown() }
        try await onLoop(loop) {}
        let caller = UInt(pthread_self())
        let seen = Recorder<String>()

        // Borrowed: on this thread, in the loop's place, with the value.
        var borrowed = false
        for _ in 0..<200 where !borrowed {
            let here = Recorder<UInt>()
            loop.runBorrowing(("borrowed", here)) { value in
                value.1.record(UInt(pthread_self()))
                if loop.inEventLoop { seen.record(value.0) }
            }
            borrowed = here.all.first == caller
            if !borrowed { try await Task.sleep(for: .milliseconds(5)) }
        }
        #expect(borrowed, "an idle loop was never borrowed")

        // Queued behind a busy loop: it runs later, on the loop, still with its value.
        let release = await occupy(loop)
        loop.runBorrowing("queued") { value in if loop.inEventLoop { seen.record(value) } }
        #expect(!seen.all.contains("queued"), "a busy loop's job ran before the loop was free")
        // runOrQueue from another thread queues likewise.
        loop.runOrQueue("queued too") { value in if loop.inEventLoop { seen.record(value) } }
        release.signal()
        #expect(await eventually { seen.all.contains("queued") && seen.all.contains("queued too") })

        // On the loop's thread, runOrQueue runs the job before it returns (execute would not).
        let order = try await onLoop(loop) { () -> [String] in
            let inline = Recorder<String>()
            loop.runOrQueue("at once") { value in inline.record(value) }
            inline.record("after the call")
            return inline.all
        }
        #expect(order == ["at once", "after the call"])
        #expect(seen.all.first == "borrowed")
    }

    /// A Swift task that prefers the loop runs on the loop's own thread, never on a thread
    /// that borrowed the loop: that thread is in the middle of its own caller's code (which
    /// may hold a lock the task's code takes), and the executor promises the loop's thread.
    @Test func swiftTasksOnTheLoopNeverRunOnABorrowingThread() async throws {
        let loop = try EventLoop(name: "test-borrow-tasks")
        defer { loop.shutdown() }
        // Two threads borrow the loop whenever it waits for events, as the submissions of
        // tasks on the global pool do.
        let stop = Flag()
        let stopped = DispatchGroup()
        for index in 0..<2 {
            stopped.enter()
            DispatchQueue(label: "borrower-\(index)").async {
                while !stop.isSet {
                    loop.runBorrowing {}
                    usleep(10)
                }
                stopped.leave()
            }
        }
        var misplaced = 0
        for _ in 0..<400 {
            // The task's first job, and the one after it yields (queued from the loop).
            let borrowed = await Task(executorPreference: loop) { () -> [Bool] in
                let first = loop.isBorrowedByCurrentThread || !loop.inEventLoop
                await Task.yield()
                return [first, loop.isBorrowedByCurrentThread || !loop.inEventLoop]
            }.value
            misplaced += borrowed.filter { $0 }.count
        }
        stop.set()
        stopped.wait()
        #expect(misplaced == 0, "\(misplaced) of 800 jobs of tasks on the loop ran elsewhere than on the loop's thread")
    }
}
