import CourierReactor
import Testing

/// `MonotonicInstant`: its arithmetic against `Duration`'s own, saturation at the ends of the
/// range, and the conversion to and from `ContinuousClock.Instant`.
struct MonotonicInstantTests {
    /// Durations across the range a deadline meets, both signs, with sub-nanosecond parts.
    static let durations: [Duration] = [
        .zero, .nanoseconds(1), .nanoseconds(-1), .nanoseconds(999_999_999), .milliseconds(250),
        .seconds(60), .seconds(-60), .seconds(7 * 24 * 3600), .seconds(1.5), .seconds(-2.25),
        .seconds(9_000_000_000), .seconds(-9_000_000_000), Duration(secondsComponent: 3, attosecondsComponent: 999_999_999_999_999_999),
        Duration(secondsComponent: -3, attosecondsComponent: -7),
    ]

    @Test func arithmeticMatchesDurationComponents() {
        let base = MonotonicInstant(nanoseconds: 5_000_000_000)
        for duration in Self.durations {
            let (seconds, attoseconds) = duration.components
            let expected = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
            #expect((base + duration).nanoseconds == 5_000_000_000 + expected, "\(duration)")
            #expect((base - duration).nanoseconds == 5_000_000_000 - expected, "\(duration)")
            #expect((base + duration) - base == .nanoseconds(expected), "\(duration)")
            #expect(base.duration(to: base + duration) == .nanoseconds(expected), "\(duration)")
        }
    }

    @Test func arithmeticSaturates() {
        let base = MonotonicInstant(nanoseconds: 1_000)
        #expect((base + .seconds(Int64.max)).nanoseconds == .max)
        #expect((base + .seconds(9_223_372_037)).nanoseconds == .max)
        // A duration past the range counts as its end, 2^63 - 1 ns (or -2^63).
        #expect((base - .seconds(Int64.max)).nanoseconds == 1_000 - .max)
        #expect((base + .seconds(Int64.min)).nanoseconds == 1_000 + .min)
        #expect((MonotonicInstant(nanoseconds: -1_000) - .seconds(Int64.max)).nanoseconds == .min)
        #expect((MonotonicInstant(nanoseconds: .max - 10) + .nanoseconds(20)).nanoseconds == .max)
        #expect((MonotonicInstant(nanoseconds: .min + 10) - .nanoseconds(20)).nanoseconds == .min)
        #expect(MonotonicInstant(nanoseconds: .min).duration(to: MonotonicInstant(nanoseconds: .max)) == .nanoseconds(Int64.max))
        #expect(MonotonicInstant(nanoseconds: .max).duration(to: MonotonicInstant(nanoseconds: .min)) == .nanoseconds(Int64.min))
    }

    @Test func orderFollowsNanoseconds() {
        let a = MonotonicInstant(nanoseconds: -5), b = MonotonicInstant(nanoseconds: 7)
        #expect(a < b && !(b < a) && a != b)
        #expect(max(a, b) == b)
        #expect(Set([a, b, MonotonicInstant(nanoseconds: 7)]).count == 2)
    }

    /// `now` reads the clock `ContinuousClock` reads: over the same stretch, read inside a pair of
    /// `ContinuousClock` readings, it measures no more time than they do, and at least the sleep.
    @Test func nowAdvancesWithContinuousClock() async throws {
        let outerStart = ContinuousClock.now
        let start = MonotonicInstant.now
        try await Task.sleep(for: .milliseconds(20))
        let end = MonotonicInstant.now
        let outerEnd = ContinuousClock.now
        #expect(end - start >= .milliseconds(20))
        #expect(end - start <= outerEnd - outerStart)
    }
}
