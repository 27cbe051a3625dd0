import CCourierLinux
@testable import CourierReactor
import CourierSync
import Dispatch
import Foundation
import Glibc
import Testing

/// Reads and drops what arrives on its socket.
private final class SocketDrain: IOEventHandler, @unchecked Sendable {
    let fd: Int32
    init(fd: Int32) { self.fd = fd }
    func handleIOEvents(_ events: IOEvents) {
        var byte: UInt8 = 0
        while Glibc.read(fd, &byte, 1) > 0 {}
    }
}

/// When the loop's thread waits for events as a batch thread: the rule, and real loops that other
/// threads borrow while they wait.
@Suite struct WaitSchedulingTests {
    /// `<sched.h>`'s SCHED_OTHER and SCHED_BATCH.
    private static let sched_other: Int32 = 0
    private static let sched_batch: Int32 = 3

    private let origin = MonotonicInstant(nanoseconds: 5_000_000_000)
    private func at(_ milliseconds: Int) -> MonotonicInstant { origin.advanced(by: .milliseconds(milliseconds)) }

    // MARK: The rule

    @Test func waitsTurnBatchOnlyOnceEnoughBusyTurnsFallInOneWindowAndForTheHoldOnly() {
        var scheduling = WaitScheduling(window: .milliseconds(100), busyTurns: 3, hold: .seconds(1))
        #expect(!scheduling.batchesWaits(at: at(0)))
        scheduling.noteBusyTurn(at: at(0))
        scheduling.noteBusyTurn(at: at(50))
        #expect(!scheduling.batchesWaits(at: at(50)), "two busy turns are not yet three")
        scheduling.noteBusyTurn(at: at(100))
        #expect(scheduling.batchesWaits(at: at(100)))
        #expect(scheduling.batchesWaits(at: at(1099)))
        #expect(!scheduling.batchesWaits(at: at(1100)), "the hold ended a second after the third")
    }

    @Test func busyTurnsSpreadOverManyWindowsNeverAddUp() {
        var scheduling = WaitScheduling(window: .milliseconds(100), busyTurns: 3, hold: .seconds(1))
        // Two in each window of 100 ms, for a second.
        for milliseconds in stride(from: 0, through: 1000, by: 60) {
            scheduling.noteBusyTurn(at: at(milliseconds))
            #expect(!scheduling.batchesWaits(at: at(milliseconds)), "at \(milliseconds) ms")
        }
    }

    @Test func anotherRunOfBusyTurnsDuringTheHoldExtendsIt() {
        var scheduling = WaitScheduling(window: .milliseconds(100), busyTurns: 2, hold: .milliseconds(500))
        scheduling.noteBusyTurn(at: at(0))
        scheduling.noteBusyTurn(at: at(10))
        scheduling.noteBusyTurn(at: at(400))
        #expect(scheduling.batchesWaits(at: at(509)))
        #expect(!scheduling.batchesWaits(at: at(510)), "one busy turn alone does not extend the hold")
        scheduling.noteBusyTurn(at: at(450))
        #expect(scheduling.batchesWaits(at: at(949)))
        #expect(!scheduling.batchesWaits(at: at(950)))
    }

    @Test func theLoopsOwnRuleTakesEightBusyTurnsWithinATenthOfASecond() {
        var scheduling = WaitScheduling()
        for turn in 0..<7 { scheduling.noteBusyTurn(at: at(turn * 10)) }
        #expect(!scheduling.batchesWaits(at: at(70)))
        scheduling.noteBusyTurn(at: at(70))
        #expect(scheduling.batchesWaits(at: at(70)))
        #expect(scheduling.batchesWaits(at: at(1069)))
        #expect(!scheduling.batchesWaits(at: at(1070)))
    }

    // MARK: A real loop

    /// Borrows `loop` while it waits, makes `peer`'s other end readable, and holds the turn
    /// until the loop's thread, woken, has found it held; true once that happened.
    private func contend(_ loop: EventLoop, peer: Int32) async -> Bool {
        let before = loop.contendedTurnCount
        for _ in 0..<400 {
            let borrowed = loop.borrow {
                _ = Glibc.write(peer, "x", 1)
                let deadline = MonotonicInstant.now.advanced(by: .seconds(20))
                while loop.contendedTurnCount == before, MonotonicInstant.now < deadline { usleep(200) }
            }
            if borrowed { return loop.contendedTurnCount > before }
            // The loop was busy: let it finish its turn and wait again.
            try? await Task.sleep(for: .milliseconds(5))
        }
        return false
    }

    /// A loop whose waits turn batch after three busy turns, for as long as a test runs.
    private func testLoop(_ name: String) throws -> EventLoop {
        try EventLoop(name: name, waitScheduling: WaitScheduling(window: .seconds(600), busyTurns: 3, hold: .seconds(600)))
    }

    /// Borrows `loop` `times` times while it waits, then wakes it with a job and returns once
    /// that job has run; false when the loop could not be borrowed that often.
    private func borrowWhileWaiting(_ loop: EventLoop, times: Int) async throws -> Bool {
        var borrowed = 0
        for _ in 0..<400 where borrowed < times {
            if loop.borrow({}) {
                borrowed += 1
            } else {
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        try await onLoop(loop) {}
        return borrowed == times
    }

    /// The loop's thread, once it ran a job: its ID, after checking the test runs under the
    /// default policy (a loop on another one never makes batch waits).
    private func loopThread(_ loop: EventLoop) async throws -> Int32 {
        let thread = try await onLoop(loop) { courier_current_thread_id() }
        try #require(courier_thread_policy(thread) == Self.sched_other, "the test process runs under another scheduling policy")
        return thread
    }

    @Test func aLoopBorrowedSeveralTimesWhileItWaitsWaitsAsABatchThread() async throws {
        let loop = try testLoop("test-batch-borrows")
        defer { loop.shutdown() }
        let thread = try await loopThread(loop)
        for round in 1...3 {
            #expect(try await borrowWhileWaiting(loop, times: 2), "round \(round)")
        }
        #expect(await eventually { courier_thread_policy(thread) == Self.sched_batch })
    }

    @Test func aLoopBorrowedOnceAWaitAsByOneCallerAtATimeKeepsOrdinaryWaits() async throws {
        let loop = try testLoop("test-single-borrows")
        defer { loop.shutdown() }
        let thread = try await loopThread(loop)
        for round in 1...10 {
            #expect(try await borrowWhileWaiting(loop, times: 1), "round \(round)")
        }
        // The last job's turn is over and the loop waits again, as an ordinary thread.
        try await Task.sleep(for: .milliseconds(50))
        #expect(courier_thread_policy(thread) == Self.sched_other)
        #expect(loop.contendedTurnCount == 0)
    }

    @Test func aLoopThatBorrowersKeepRunningIntoWaitsAsABatchThreadAndRunsAsAnOrdinaryOne() async throws {
        let loop = try testLoop("test-batch-waits")
        defer { loop.shutdown() }
        let thread = try await loopThread(loop)
        let (socket, peer) = try RawSocket.unixPair()
        defer {
            Glibc.close(socket)
            Glibc.close(peer)
        }
        let drain = SocketDrain(fd: socket)
        _ = try await onLoop(loop) { try loop.register(fd: socket, interest: .readable, handler: drain) }

        // Work queued from other threads, even a great deal of it, leaves the waits alone.
        for _ in 0..<200 { loop.execute {} }
        try await onLoop(loop) {}
        try await Task.sleep(for: .milliseconds(20))
        #expect(courier_thread_policy(thread) == Self.sched_other)

        for round in 1...3 {
            #expect(await contend(loop, peer: peer), "round \(round): the loop never found its turn held")
        }
        #expect(loop.contendedTurnCount >= 3)
        // Now the loop waits as a batch thread...
        #expect(await eventually { courier_thread_policy(thread) == Self.sched_batch })

        // ...and runs on the default policy, as does a thread it starts.
        let (own, child) = try await onLoop(loop) { () -> (Int32, Int32) in
            let own = courier_thread_policy(0)
            let child = Mutex<Int32>(-1)
            let done = DispatchSemaphore(value: 0)
            let started = Thread {
                child.withLock { $0 = courier_thread_policy(0) }
                done.signal()
            }
            started.start()
            done.wait()
            return (own, child.withLock { $0 })
        }
        #expect(own == Self.sched_other, "the loop ran a job as a batch thread")
        #expect(child == Self.sched_other, "a thread the loop started inherited the batch policy")
        // Idle again, it waits as a batch thread again.
        #expect(await eventually { courier_thread_policy(thread) == Self.sched_batch })
    }
}
