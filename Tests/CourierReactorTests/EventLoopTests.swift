import CourierReactor
import CourierSync
import Dispatch
import Glibc
import Testing

/// A timer's identity, kept on the loop by the timers that refer to each other.
private final class TimerSlot {
    var id: TimerID?
}

/// Which thread submitted a job, and its place in that thread's sequence.
private struct Stamp: Sendable {
    var thread: Int
    var index: Int
}

/// Records the events of its registration and drains its socket; the first event runs
/// `onFirstEvent`.
private final class EventProbe: IOEventHandler, @unchecked Sendable {
    let name: String
    let fd: Int32
    let fired: Recorder<String>
    /// Loop thread only.
    var onFirstEvent: (() -> Void)?

    init(_ name: String, fd: Int32, _ fired: Recorder<String>) {
        self.name = name
        self.fd = fd
        self.fired = fired
    }

    func handleIOEvents(_ events: IOEvents) {
        fired.record(name)
        var byte: UInt8 = 0
        while Glibc.read(fd, &byte, 1) > 0 {}
        let action = onFirstEvent
        onFirstEvent = nil
        action?()
    }
}

/// When a timer ran, against when it was due.
private struct Firing: Sendable {
    var label: String
    var deadline: MonotonicInstant
    var firedAt: MonotonicInstant
}

@Suite struct EventLoopTests {
    // MARK: Jobs

    @Test func executeFromAnotherThreadRunsOnTheLoop() async throws {
        let loop = try EventLoop(name: "test-execute")
        defer { loop.shutdown() }
        #expect(!loop.inEventLoop)
        let inside = try await onLoop(loop) { loop.inEventLoop }
        #expect(inside)
        #expect(!loop.inEventLoop)
    }

    @Test func jobsFromOneThreadRunInSubmissionOrder() async throws {
        let loop = try EventLoop(name: "test-order")
        defer { loop.shutdown() }
        let order = Recorder<Int>()
        for index in 0..<1000 {
            loop.execute { order.record(index) }
        }
        let ran = await order.wait(for: 1000)
        #expect(ran == Array(0..<1000))
    }

    @Test func jobsFromManyThreadsAllRunAndKeepEachThreadsOrder() async throws {
        let loop = try EventLoop(name: "test-threads")
        defer { loop.shutdown() }
        let threads = 8
        let perThread = 250
        let ran = Recorder<Stamp>()
        let offLoop = Flag()
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for index in 0..<perThread {
                loop.execute {
                    if !loop.inEventLoop { offLoop.set() }
                    ran.record(Stamp(thread: thread, index: index))
                }
            }
        }
        let all = await ran.wait(for: threads * perThread)
        #expect(all.count == threads * perThread)
        #expect(!offLoop.isSet)
        for thread in 0..<threads {
            let mine = all.filter { $0.thread == thread }.map(\.index)
            #expect(mine == Array(0..<perThread), "thread \(thread)'s jobs ran out of order or went missing")
        }
    }

    @Test func executeFromTheLoopItselfRunsLater() async throws {
        let loop = try EventLoop(name: "test-execute-inside")
        defer { loop.shutdown() }
        let events = Recorder<String>()
        loop.execute {
            events.record("outer begins")
            loop.execute { events.record("inner") }
            events.record("outer ends")
        }
        let seen = await events.wait(for: 3)
        #expect(seen == ["outer begins", "outer ends", "inner"])
    }

    @Test func executeSoonRunsAfterTheCurrentJob() async throws {
        let loop = try EventLoop(name: "test-soon")
        defer { loop.shutdown() }
        let events = Recorder<String>()
        loop.execute {
            events.record("job begins")
            loop.executeSoon { events.record("soon 1") }
            loop.executeSoon { events.record("soon 2") }
            events.record("job ends")
        }
        let seen = await events.wait(for: 4)
        #expect(seen == ["job begins", "job ends", "soon 1", "soon 2"])
    }

    @Test func executeSoonFromATimerRunsAfterIt() async throws {
        let loop = try EventLoop(name: "test-soon-timer")
        defer { loop.shutdown() }
        let events = Recorder<String>()
        loop.execute {
            loop.scheduleTimer(after: .milliseconds(5)) {
                events.record("timer begins")
                loop.executeSoon { events.record("soon") }
                events.record("timer ends")
            }
        }
        let seen = await events.wait(for: 3)
        #expect(seen == ["timer begins", "timer ends", "soon"])
    }

    /// A job that keeps queueing itself must not starve timers or I/O: queued jobs run on the
    /// next turn, after the loop has looked at its timers and sockets.
    @Test func aSelfRequeueingJobStarvesNeitherTimersNorIO() async throws {
        let loop = try EventLoop(name: "test-starve")
        defer { loop.shutdown() }
        let (mine, theirs) = try RawSocket.unixPair()
        let peer = OwnedSocket(theirs)
        defer { peer.close() }
        let stop = Flag()
        let timerFired = Flag()
        let recorder = ChannelRecorder()

        let channel = try await onLoop(loop) {
            let channel = try StreamChannel(fd: mine, loop: loop)
            channel.delegate = recorder
            func spin() {
                guard !stop.isSet else { return }
                loop.executeSoon(spin)
            }
            spin()
            loop.scheduleTimer(after: .milliseconds(20)) { timerFired.set() }
            return LoopBound(channel, loop: loop)
        }
        await RawSocket.send(peer.fd, Array("ping".utf8))
        let fired = await eventually { timerFired.isSet }
        let read = await eventually { recorder.byteCount == 4 }
        stop.set()
        #expect(fired, "a timer never fired while a job re-queued itself")
        #expect(read, "a socket was never read while a job re-queued itself")
        try await onLoop(loop) { channel.value.close() }
    }

    // MARK: Timers

    @Test func timersFireInDeadlineOrderAndNeverEarly() async throws {
        let loop = try EventLoop(name: "test-timers")
        defer { loop.shutdown() }
        let firings = Recorder<Firing>()
        try await onLoop(loop) {
            let base = MonotonicInstant.now
            let plan: [(String, Int)] = [("c", 150), ("a", 50), ("b1", 100), ("b2", 100), ("now", 0), ("d", 200)]
            for (label, milliseconds) in plan {
                let deadline = base + .milliseconds(milliseconds)
                loop.scheduleTimer(at: deadline) {
                    firings.record(Firing(label: label, deadline: deadline, firedAt: .now))
                }
            }
        }
        // A loaded machine may run the loop seconds late: only a minute's lateness is a fault.
        let fired = await firings.wait(for: 6, timeout: .seconds(90))
        #expect(fired.map(\.label) == ["now", "a", "b1", "b2", "c", "d"])
        for firing in fired {
            #expect(firing.firedAt >= firing.deadline, "timer \(firing.label) fired before its deadline")
            #expect(firing.firedAt - firing.deadline < .seconds(60))
        }
    }

    @Test func timerAfterADelayNeverFiresEarly() async throws {
        let loop = try EventLoop(name: "test-delay")
        defer { loop.shutdown() }
        let firedAt = Recorder<MonotonicInstant>()
        let scheduledAt = try await onLoop(loop) {
            let start = MonotonicInstant.now
            loop.scheduleTimer(after: .milliseconds(30)) { firedAt.record(.now) }
            return start
        }
        // A loaded machine may run the loop seconds late: only a minute's lateness is a fault.
        let values = await firedAt.wait(for: 1, timeout: .seconds(90))
        let fired = try #require(values.first)
        #expect(fired - scheduledAt >= .milliseconds(30))
        #expect(fired - scheduledAt < .seconds(60))
    }

    @Test func timersInThePastFireOnTheNextTurn() async throws {
        let loop = try EventLoop(name: "test-past")
        defer { loop.shutdown() }
        let events = Recorder<String>()
        loop.execute {
            loop.scheduleTimer(at: .now - .seconds(1)) { events.record("timer") }
            events.record("job")
        }
        let seen = await events.wait(for: 2)
        #expect(seen == ["job", "timer"])
    }

    @Test func cancelledTimersNeverFire() async throws {
        let loop = try EventLoop(name: "test-cancel")
        defer { loop.shutdown() }
        let events = Recorder<String>()
        try await onLoop(loop) {
            let soon = loop.scheduleTimer(after: .milliseconds(10)) { events.record("cancelled at once") }
            loop.cancelTimer(soon)
            let later = loop.scheduleTimer(after: .seconds(1)) { events.record("cancelled later") }
            loop.scheduleTimer(after: .milliseconds(1300)) { events.record("sentinel") }
            // Cancel the second one from a later job on the loop, long before it is due. (A
            // later step of the test itself could be delayed past the deadline on a busy machine.)
            loop.executeSoon { loop.cancelTimer(later) }
        }
        let sawSentinel = await eventually { events.all.contains("sentinel") }
        #expect(sawSentinel)
        #expect(events.all == ["sentinel"])
    }

    @Test func cancellingATimerThatAlreadyRanIsHarmless() async throws {
        let loop = try EventLoop(name: "test-cancel-late")
        defer { loop.shutdown() }
        let events = Recorder<String>()
        let slot = try await onLoop(loop) { () -> LoopBound<TimerSlot> in
            let slot = TimerSlot()
            slot.id = loop.scheduleTimer(after: .milliseconds(1)) { events.record("ran") }
            return LoopBound(slot, loop: loop)
        }
        await events.wait(for: 1)
        try await onLoop(loop) {
            if let id = slot.value.id { loop.cancelTimer(id) }
            loop.scheduleTimer(after: .milliseconds(1)) { events.record("next") }
        }
        let seen = await events.wait(for: 2)
        #expect(seen == ["ran", "next"])
    }

    /// `cancelTimer` promises that a timer which has not run will not run. Two timers due at the
    /// same instant come out of the queue together; when the first cancels the second, the
    /// second must still not run.
    @Test func aTimerCancelledByAnEarlierTimerDueAtTheSameTimeDoesNotFire() async throws {
        let loop = try EventLoop(name: "test-cancel-batch")
        defer { loop.shutdown() }
        let events = Recorder<String>()
        try await onLoop(loop) {
            let deadline = MonotonicInstant.now + .milliseconds(20)
            let second = TimerSlot()
            loop.scheduleTimer(at: deadline) {
                events.record("first")
                if let id = second.id { loop.cancelTimer(id) }
            }
            second.id = loop.scheduleTimer(at: deadline) { events.record("second") }
            loop.scheduleTimer(at: deadline + .milliseconds(50)) { events.record("sentinel") }
        }
        let sawSentinel = await eventually { events.all.contains("sentinel") }
        #expect(sawSentinel)
        #expect(events.all == ["first", "sentinel"], "a cancelled timer ran")
    }

    @Test func timersScheduledFromJobsAndTimersRunOnTheLoop() async throws {
        let loop = try EventLoop(name: "test-nested-timers")
        defer { loop.shutdown() }
        let events = Recorder<String>()
        let offLoop = Flag()
        loop.execute {
            loop.scheduleTimer(after: .milliseconds(10)) {
                if !loop.inEventLoop { offLoop.set() }
                events.record("outer")
                loop.scheduleTimer(after: .milliseconds(10)) {
                    if !loop.inEventLoop { offLoop.set() }
                    events.record("inner")
                }
            }
        }
        let seen = await events.wait(for: 2)
        #expect(seen == ["outer", "inner"])
        #expect(!offLoop.isSet)
    }

    @Test func manyTimersAllFireInOrder() async throws {
        let loop = try EventLoop(name: "test-many-timers")
        defer { loop.shutdown() }
        let fired = Recorder<Int>()
        try await onLoop(loop) {
            let base = MonotonicInstant.now
            // Deadlines in a scrambled order over 100 ms, several sharing an instant.
            for index in 0..<200 {
                let slot = (index * 37) % 50
                loop.scheduleTimer(at: base + .milliseconds(slot * 2)) { fired.record(slot * 1000 + index) }
            }
        }
        let all = await fired.wait(for: 200)
        #expect(all.count == 200)
        // Sorted by deadline, and equal deadlines in scheduling order.
        #expect(all == all.sorted())
    }

    // MARK: Registrations

    @Test func aRegistrationRemovedDuringATurnGetsNoneOfItsEventsAndNeitherDoesTheNextInItsPlace() async throws {
        let loop = try EventLoop(name: "test-registrations")
        defer { loop.shutdown() }
        let (a, aPeer) = try RawSocket.unixPair()
        let (b, bPeer) = try RawSocket.unixPair()
        let (c, cPeer) = try RawSocket.unixPair()
        defer { for fd in [a, aPeer, b, bPeer, c, cPeer] { Glibc.close(fd) } }
        let fired = Recorder<String>()
        let probes = [("a", a), ("b", b), ("c", c)].map { EventProbe($0.0, fd: $0.1, fired) }
        let staleToken = Recorder<RegistrationToken>()
        try await onLoop(loop) {
            let tokenA = try loop.register(fd: a, interest: .readable, handler: probes[0])
            let tokenB = try loop.register(fd: b, interest: .readable, handler: probes[1])
            // Both become readable before the loop waits again, so one wait returns both
            // events. Whichever is handled first removes itself and the other, and registers
            // `c` (nothing to read) in the slot just freed: the other's event, already
            // collected, must reach neither the other nor `c`.
            for (probe, tokens) in [(probes[0], (tokenA, tokenB)), (probes[1], (tokenB, tokenA))] {
                probe.onFirstEvent = {
                    probes[0].onFirstEvent = nil
                    probes[1].onFirstEvent = nil
                    loop.deregister(tokens.0)
                    loop.deregister(tokens.1)
                    _ = try? loop.register(fd: c, interest: .readable, handler: probes[2])
                    staleToken.record(tokens.1)
                }
            }
            _ = Glibc.write(aPeer, "x", 1)
            _ = Glibc.write(bPeer, "x", 1)
        }
        // Runs after the turn that handled both events.
        try await onLoop(loop) {}
        let first = fired.all
        #expect(first == ["a"] || first == ["b"])

        // The removed registration's token, used again, touches nothing; `c` still hears.
        let stale = try #require(staleToken.all.first)
        try await onLoop(loop) {
            loop.setInterest(stale, [])
            loop.deregister(stale)
        }
        _ = Glibc.write(cPeer, "x", 1)
        let all = await fired.wait(for: 2)
        #expect(all == first + ["c"])
    }

    // MARK: Shutdown and groups

    @Test func shutdownReturnsAfterRunningQueuedJobs() throws {
        let loop = try EventLoop(name: "test-shutdown")
        let ran = Recorder<Int>()
        for index in 0..<100 {
            loop.execute { ran.record(index) }
        }
        loop.shutdown()
        #expect(ran.all == Array(0..<100))
    }

    @Test func shutdownOfAnIdleLoopReturns() async throws {
        let loop = try EventLoop(name: "test-idle-shutdown")
        // Let the loop reach epoll_wait with nothing to do.
        _ = try await onLoop(loop) { true }
        try await Task.sleep(for: .milliseconds(20))
        loop.shutdown()
    }

    @Test func shutdownWithPendingTimersReturns() async throws {
        let loop = try EventLoop(name: "test-timer-shutdown")
        let fired = Flag()
        try await onLoop(loop) {
            // An hour: a loaded machine (a sanitizer run) once let a minute pass before shutdown.
            loop.scheduleTimer(after: .seconds(3600)) { fired.set() }
        }
        loop.shutdown()
        #expect(!fired.isSet)
    }

    @Test func groupHandsOutLoopsRoundRobin() async throws {
        let group = try EventLoopGroup(loopCount: 2, name: "test-group")
        defer { group.shutdown() }
        #expect(group.loops.count == 2)
        let picks = (0..<4).map { _ in group.next() }
        #expect(picks[0] !== picks[1])
        #expect(picks[0] === picks[2])
        #expect(picks[1] === picks[3])

        let second = group.loops[1]
        let current = try await onLoop(second) { group.currentOrNext() === second }
        #expect(current, "currentOrNext on a group loop should return that loop")
    }

    @Test func loopBoundHandsItsValueBackOnTheLoop() async throws {
        let loop = try EventLoop(name: "test-bound")
        defer { loop.shutdown() }
        let bound = try await onLoop(loop) { LoopBound(TimerSlot(), loop: loop) }
        #expect(bound.loop === loop)
        let hasNoID = try await onLoop(loop) { bound.value.id == nil }
        #expect(hasNoID)
    }
}
