import CourierReactor
import CourierSync
import Dispatch
import Glibc
import Testing
@testable import CourierTransport

/// The idle timer a pooled connection keeps across exchanges: it expires once the connection
/// has been idle for the whole delay, counted from the last start, and never while stopped.
@Suite("IdleTimerTests")
struct IdleTimerTests {
    /// An idle timer on a loop of its own, with the instants it expired at.
    private final class Fixture: @unchecked Sendable {
        let loop: EventLoop
        let expiries = Mutex([MonotonicInstant]())
        /// When a test last started the timer.
        let started = Mutex(MonotonicInstant.now)
        let expired = DispatchSemaphore(value: 0)
        /// Touched on the loop thread only.
        var timer: IdleTimer!

        init() throws {
            loop = try EventLoop(name: "test-idle-timer")
            loop.execute { [self] in
                timer = IdleTimer(loop: loop) { [self] in
                    expiries.withLock { $0.append(.now) }
                    expired.signal()
                }
            }
        }

        /// Runs `body` on the loop and returns when it has run.
        func onLoop(_ body: @escaping @Sendable (IdleTimer) -> Void) {
            let done = DispatchSemaphore(value: 0)
            loop.execute { [self] in
                body(timer)
                done.signal()
            }
            done.wait()
        }

        /// Waits up to a minute for an expiry.
        func waitForExpiry() -> Bool {
            expired.wait(timeout: .now() + 60) == .success
        }

        /// Lets the loop run for a while: long enough for a due timer to fire.
        func settle(milliseconds: Int) {
            usleep(UInt32(milliseconds) * 1000)
        }
    }

    @Test("expires once, after the whole delay counted from the last start")
    func expiresAfterLastStart() throws {
        let fixture = try Fixture()
        defer { fixture.loop.shutdown() }
        fixture.onLoop { $0.start(after: .milliseconds(200)) }
        fixture.settle(milliseconds: 100)
        // Busy, then idle again: the first due time no longer counts.
        fixture.onLoop { [fixture] timer in
            timer.stop()
            fixture.started.withLock { $0 = .now }
            timer.start(after: .milliseconds(200))
        }
        #expect(fixture.waitForExpiry())
        let expiries = fixture.expiries.withLock { $0 }
        let restarted = fixture.started.withLock { $0 }
        #expect(expiries.count == 1)
        if let first = expiries.first { #expect(first - restarted >= .milliseconds(200)) }
        fixture.settle(milliseconds: 300)
        #expect(fixture.expiries.withLock { $0.count } == 1)
    }

    @Test("a stopped or cancelled timer never expires, whenever its loop timer fires")
    func stoppedNeverExpires() throws {
        let fixture = try Fixture()
        defer { fixture.loop.shutdown() }
        fixture.onLoop { timer in
            timer.start(after: .milliseconds(50))
            timer.stop()
        }
        fixture.settle(milliseconds: 300)
        fixture.onLoop { timer in
            timer.start(after: .milliseconds(50))
            timer.cancel()
        }
        fixture.settle(milliseconds: 300)
        #expect(fixture.expiries.withLock { $0.isEmpty })
    }

    @Test("a start due sooner than the armed timer moves it earlier")
    func earlierStartMovesTheTimer() throws {
        let fixture = try Fixture()
        defer { fixture.loop.shutdown() }
        let started = MonotonicInstant.now
        fixture.onLoop { timer in
            timer.start(after: .seconds(3600))
            timer.stop()
            timer.start(after: .milliseconds(50))
        }
        #expect(fixture.waitForExpiry())
        #expect(MonotonicInstant.now - started < .seconds(3600))
        #expect(fixture.expiries.withLock { $0.count } == 1)
    }
}
