import CourierReactor
@testable import CourierTransport
import Testing

/// The growth of an HTTP/2 stream's receive window, on a clock the tests move by hand.
@Suite("HTTP/2 stream window tuning")
struct StreamWindowTests {
    /// A clock that reads `time` nanoseconds.
    final class Clock {
        var time: Int64 = 1_000_000_000
        func advance(microseconds: Int64) { time += microseconds * 1000 }
        var now: MonotonicInstant { MonotonicInstant(nanoseconds: time) }
    }

    static let kib = 1024
    static let mib = 1024 * 1024

    /// Credits `chunks` of `chunk` bytes, `gap` apart; the sizes the window grew to.
    static func credit(
        _ window: inout StreamWindow, chunks: Int, of chunk: Int, gap microseconds: Int64, roundTrip: Int64?, clock: Clock
    ) -> [Int] {
        verdicts(&window, chunks: chunks, of: chunk, gap: microseconds, roundTrip: roundTrip, clock: clock).compactMap {
            if case .grew(let size) = $0 { size } else { nil }
        }
    }

    /// Credits as ``credit(_:chunks:of:gap:roundTrip:clock:)`` does; every verdict but `.keep`.
    static func verdicts(
        _ window: inout StreamWindow, chunks: Int, of chunk: Int, gap microseconds: Int64, roundTrip: Int64?, clock: Clock
    ) -> [StreamWindow.Verdict] {
        var verdicts: [StreamWindow.Verdict] = []
        for _ in 0..<chunks {
            clock.advance(microseconds: microseconds)
            let verdict = window.credit(chunk, roundTrip: roundTrip, now: { clock.now })
            if verdict != .keep { verdicts.append(verdict) }
        }
        return verdicts
    }

    @Test("a reader that takes half the window within a round trip doubles it, up to the maximum")
    func growsWhileTheRoundTripHoldsItBack() {
        let clock = Clock()
        var window = StreamWindow(size: Self.mib, maximum: 8 * Self.mib)
        // A 20 ms round trip; 64 KiB every 500 µs is 128 MB/s, beyond a window (up to 8 MiB)
        // every two round trips.
        let grown = Self.credit(&window, chunks: 400, of: 64 * Self.kib, gap: 500, roundTrip: 20_000_000, clock: clock)
        #expect(grown == [2 * Self.mib, 4 * Self.mib, 8 * Self.mib])
        #expect(window.size == 8 * Self.mib)
    }

    /// A reader that does not need a larger window: `chunks` credits of `chunk` bytes, `gap`
    /// microseconds apart, against `roundTrip` nanoseconds (nil: not measured yet).
    struct SteadyCase: Sendable, CustomTestStringConvertible {
        let testDescription: String
        let chunks: Int
        let chunk: Int
        let gap: Int64
        let roundTrip: Int64?
    }

    static let steadyCases = [
        // 64 KiB every 2.5 ms: half the window (8 chunks) takes 20 ms, a whole round trip.
        SteadyCase(testDescription: "a reader slower than the round trip needs", chunks: 200, chunk: 64 * kib, gap: 2500, roundTrip: 20_000_000),
        // Loopback through TLS: a 300 µs round trip, 256 KiB every 250 µs (1 GB/s); the window
        // already carries more than the reader takes.
        SteadyCase(testDescription: "a fast reader on a short round trip", chunks: 4000, chunk: 256 * kib, gap: 250, roundTrip: 300_000),
        SteadyCase(testDescription: "no round trip measured yet", chunks: 400, chunk: 64 * kib, gap: 1, roundTrip: nil),
    ]

    @Test("the window stays when the round trip does not hold the reader back, or is not known", arguments: steadyCases)
    func windowStays(_ steady: SteadyCase) {
        let clock = Clock()
        var window = StreamWindow(size: Self.mib, maximum: 8 * Self.mib)
        let grown = Self.credit(&window, chunks: steady.chunks, of: steady.chunk, gap: steady.gap, roundTrip: steady.roundTrip, clock: clock)
        #expect(grown.isEmpty)
        #expect(window.size == Self.mib)
    }

    @Test("with no confirmed round trip every period of half a window asks for one; given it, the window grows when the round trip holds the reader back")
    func asksForARoundTrip() {
        let clock = Clock()
        var window = StreamWindow(size: Self.mib, maximum: 8 * Self.mib)
        // 64 KiB every 100 µs: half a window in 800 µs. The first credit starts a period, and
        // every eighth after it ends one and starts the next: 25 credits end three.
        var verdicts = Self.verdicts(&window, chunks: 25, of: 64 * Self.kib, gap: 100, roundTrip: nil, clock: clock)
        #expect(verdicts == [.needsRoundTrip, .needsRoundTrip, .needsRoundTrip])
        #expect(window.size == Self.mib)
        // A 300 µs round trip: the same reader is not held back by it.
        verdicts = Self.verdicts(&window, chunks: 40, of: 64 * Self.kib, gap: 100, roundTrip: 300_000, clock: clock)
        #expect(verdicts.isEmpty)
        // A 20 ms round trip: it is, and the window doubles at the next period's end.
        verdicts = Self.verdicts(&window, chunks: 8, of: 64 * Self.kib, gap: 100, roundTrip: 20_000_000, clock: clock)
        #expect(verdicts == [.grew(to: 2 * Self.mib)])
    }

    @Test("bytes credited at a period's start do not count: a burst after a restart must be followed by more")
    func restartLeavesABurstOut() {
        let clock = Clock()
        var window = StreamWindow(size: Self.mib, maximum: 8 * Self.mib)
        // A resumed stream's stash credited at once, then the window restarted.
        window.restart()
        var grown = Self.credit(&window, chunks: 1, of: Self.mib, gap: 0, roundTrip: 20_000_000, clock: clock)
        #expect(grown.isEmpty, "a single credit, however large, only starts a period")
        // Then a slow trickle: half the window in well over a round trip.
        grown = Self.credit(&window, chunks: 8, of: 64 * Self.kib, gap: 10_000, roundTrip: 20_000_000, clock: clock)
        #expect(grown.isEmpty)
        #expect(window.size == Self.mib)
    }

    @Test("a window already at its maximum reads no clock and never grows")
    func atMaximum() {
        var window = StreamWindow(size: 8 * Self.mib, maximum: 8 * Self.mib)
        var reads = 0
        for _ in 0..<100 {
            let verdict = window.credit(Self.mib, roundTrip: 1_000_000_000) {
                reads += 1
                return MonotonicInstant(nanoseconds: 0)
            }
            #expect(verdict == .keep)
        }
        #expect(reads == 0)
    }
}
