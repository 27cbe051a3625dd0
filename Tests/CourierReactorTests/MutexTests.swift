import CourierSync
import Dispatch
import Glibc
import Testing

/// CourierSync's `Mutex`, the lock of every Courier module: it excludes (with waiters spinning
/// and with waiters asleep in the kernel, on threads of their own), hands back what its body returns, gives the lock up
/// when the body throws, never waits in `withLockIfAvailable`, and releases what it guards. That
/// ThreadSanitizer sees it is shown by `scripts/sanitize.sh thread`, which runs these tests and
/// fails on any report (with Synchronization's own Mutex unmarked, the event loop's inbox alone
/// gave ten reports in `EventLoopTests`).
@Suite("MutexTests")
struct MutexTests {
    private struct Refusal: Error, Equatable {
        let value: Int
    }

    @Test("increments from eight threads at once all count: the lock excludes")
    func excludes() {
        let counter = Mutex(0)
        onThreads(8) { _ in
            for _ in 0..<20_000 {
                counter.withLock { $0 += 1 }
            }
        }
        #expect(counter.withLock { $0 } == 160_000)
    }

    @Test("the body's result comes back, and a typed error thrown under the lock leaves it free")
    func resultsAndErrors() throws {
        let state = Mutex([Int]())
        let count = state.withLock { value -> Int in
            value.append(1)
            return value.count
        }
        #expect(count == 1)
        #expect(throws: Refusal(value: 7)) {
            try state.withLock { (value: inout [Int]) throws(Refusal) -> Void in
                value.append(2)
                throw Refusal(value: 7)
            }
        }
        // Free again, with the write made before the throw kept.
        #expect(state.withLock { $0 } == [1, 2])
    }

    @Test("a holder that sleeps under the lock is never seen half-way, and its waiters, asleep in the kernel, all get their turn")
    func waitersSleepAndWake() {
        // Each holder writes an odd value, sleeps long past the waiters' spin (so they go to
        // sleep on the word), then makes it even again: a waiter let in early reads it odd.
        let state = Mutex((value: 0, sawOdd: false, turns: 0))
        onThreads(6) { _ in
            for _ in 0..<40 {
                state.withLock { state in
                    if state.value % 2 == 1 { state.sawOdd = true }
                    state.value += 1
                    usleep(200)
                    state.value += 1
                    state.turns += 1
                }
            }
        }
        let final = state.withLock { $0 }
        #expect(final.turns == 240)
        #expect(final.value == 480)
        #expect(!final.sawOdd)
    }

    @Test("threads asleep on a held lock all take it in turn once it is given up: none is left asleep")
    func sleepersAllWake() {
        let state = Mutex(0)
        let done = holdElsewhere { inside in state.withLock { _ in inside() } }
        let finished = DispatchSemaphore(value: 0)
        for _ in 0..<3 {
            Thread.detach {
                state.withLock { $0 += 1 }
                finished.signal()
            }
        }
        // Far past the waiters' spin: by now they sleep in the kernel, the word at 2.
        usleep(20_000)
        #expect(state.withLockIfAvailable { $0 } == nil)
        done()
        // A waiter that took the lock without marking the word would leave the others asleep
        // for ever: each gets ten seconds, not a hang.
        for _ in 0..<3 {
            #expect(finished.wait(timeout: .now() + 10) == .success)
        }
        #expect(state.withLock { $0 } == 3)
    }

    @Test("withLockIfAvailable answers nil at once while another thread holds the lock, and runs its body once it is free")
    func tryLock() {
        let state = Mutex(2)
        let done = holdElsewhere { inside in state.withLock { _ in inside() } }
        // Held by the other thread: no wait, no body.
        var ran = false
        #expect(state.withLockIfAvailable { _ in ran = true } == nil)
        #expect(!ran)
        done()
        #expect(state.withLockIfAvailable { value -> Int in
            value += 1
            return value
        } == 3)
        // And a lock given up by withLockIfAvailable is free for withLock.
        #expect(state.withLock { $0 } == 3)
    }

    @Test("the guarded value is released with the lock")
    func releasesValue() {
        let before = guardedReleases.load(ordering: .relaxed)
        do {
            let lock = Mutex(Guarded())
            #expect(lock.withLock { $0.number } == 7)
            #expect(guardedReleases.load(ordering: .relaxed) == before)
        }
        #expect(guardedReleases.load(ordering: .relaxed) == before + 1)
    }
}

/// `HandoffMutex`, the event loop's `turn`: it excludes, and its try-lock answers nil, without
/// waiting, while another thread holds it.
@Suite("HandoffMutexTests")
struct HandoffMutexTests {
    @Test("increments from six threads, some holding the lock across a sleep, all count")
    func excludes() {
        let state = HandoffMutex((value: 0, sawOdd: false))
        onThreads(6) { index in
            for round in 0..<2_000 {
                state.withLock { state in
                    if state.value % 2 == 1 { state.sawOdd = true }
                    state.value += 1
                    if round % 100 == index { usleep(100) }
                    state.value += 1
                }
            }
        }
        let final = state.withLock { $0 }
        #expect(final.value == 24_000)
        #expect(!final.sawOdd)
    }

    @Test("withLockIfAvailable answers nil while another thread holds the lock, and runs once it is free")
    func tryLock() {
        let state = HandoffMutex(2)
        let done = holdElsewhere { inside in state.withLock { _ in inside() } }
        #expect(state.withLockIfAvailable { _ in 0 } == nil)
        done()
        #expect(state.withLockIfAvailable { value -> Int in
            value += 1
            return value
        } == 3)
    }
}

/// How many `Guarded`s have been released.
private let guardedReleases = Atomic<Int>(0)

private final class Guarded {
    let number = 7
    deinit { guardedReleases.add(1, ordering: .relaxed) }
}

/// Runs `hold` on a thread of its own and returns once `hold` has called the closure it is given
/// (from inside a lock, there); that closure waits until the returned function is called, which
/// then waits for `hold` to end.
private func holdElsewhere(_ hold: @escaping @Sendable (_ inside: () -> Void) -> Void) -> () -> Void {
    let held = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)
    let done = DispatchSemaphore(value: 0)
    Thread.detach {
        hold {
            held.signal()
            release.wait()
        }
        done.signal()
    }
    held.wait()
    return {
        release.signal()
        done.wait()
    }
}

/// Runs `body(index)` on `count` threads of their own (Dispatch's `concurrentPerform` runs no more
/// at once than there are CPUs), released together, and returns when all have ended; records an
/// issue and returns after a minute if some have not (a thread left asleep on a lock fails the
/// test instead of hanging the run).
private func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let start = DispatchSemaphore(value: 0)
    let ended = DispatchSemaphore(value: 0)
    for index in 0..<count {
        Thread.detach {
            start.wait()
            body(index)
            ended.signal()
        }
    }
    for _ in 0..<count { start.signal() }
    for _ in 0..<count {
        guard ended.wait(timeout: .now() + 60) == .success else {
            Issue.record("a thread did not end within a minute")
            return
        }
    }
}

/// Starts a detached POSIX thread (not a Dispatch or Swift-concurrency one, whose pools a
/// blocked body could starve).
private enum Thread {
    static func detach(_ body: @escaping @Sendable () -> Void) {
        final class Box { let body: @Sendable () -> Void; init(_ body: @escaping @Sendable () -> Void) { self.body = body } }
        var thread = pthread_t()
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        let created = pthread_create(&thread, nil, { argument in
            Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue().body()
            return nil
        }, box)
        precondition(created == 0, "pthread_create failed: \(created)")
        pthread_detach(thread)
    }
}
