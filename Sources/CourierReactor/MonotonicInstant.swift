import Glibc

/// A point in time on the clock `ContinuousClock` reads (`CLOCK_BOOTTIME` on Linux, which keeps
/// counting while the machine sleeps), held as whole nanoseconds in one word.
///
/// The stack's deadlines, timers and metrics use this rather than `ContinuousClock.Instant`: the
/// standard library's instant is a resilient type, so every copy or destruction of a value that
/// holds one (an optional deadline, a state machine's action, a metrics record) goes through
/// runtime value witnesses and a metadata lookup; this one is a plain integer to the compiler.
/// Moving the stack to this type took a W1 h1 request from 53,913 to 48,336 instructions
/// (callgrind, courier-bench).
///
/// Arithmetic saturates: a deadline a `Duration` of centuries away is the far end of the range
/// (about 292 years either side of boot), never a trap. Public metrics leave the stack as `Date`s.
@frozen
public struct MonotonicInstant: Comparable, Hashable, Sendable, CustomStringConvertible {
    /// Nanoseconds since the kernel clock's zero (boot).
    public var nanoseconds: Int64

    @inlinable @inline(__always)
    public init(nanoseconds: Int64) {
        self.nanoseconds = nanoseconds
    }

    /// The current instant: one `clock_gettime`, answered by the vDSO without a system call.
    @inlinable
    public static var now: MonotonicInstant {
        var spec = timespec()
        clock_gettime(CLOCK_BOOTTIME, &spec)
        return MonotonicInstant(nanoseconds: Int64(spec.tv_sec) &* 1_000_000_000 &+ Int64(spec.tv_nsec))
    }

    @inlinable @inline(__always)
    public func advanced(by duration: Duration) -> MonotonicInstant {
        MonotonicInstant(nanoseconds: Self.saturated(nanoseconds.addingReportingOverflow(Self.nanoseconds(in: duration))))
    }

    /// The time from `self` to `other`, negative when `other` comes first.
    @inlinable @inline(__always)
    public func duration(to other: MonotonicInstant) -> Duration {
        .nanoseconds(Self.saturated(other.nanoseconds.subtractingReportingOverflow(nanoseconds)))
    }

    /// The result of an addition or subtraction, or the end of the range it overflowed past (a
    /// wrapped result has the opposite sign of the true one).
    @inlinable @inline(__always)
    static func saturated(_ result: (partialValue: Int64, overflow: Bool)) -> Int64 {
        guard result.overflow else { return result.partialValue }
        return result.partialValue < 0 ? .max : .min
    }

    /// `duration` in whole nanoseconds (the sub-nanosecond part dropped, towards zero), clamped to
    /// the range. A `Duration` is a 128-bit count of attoseconds, and its own `components` divide
    /// it twice in 128-bit arithmetic (a library call each); any duration that fits in the range has
    /// a high word below 10^9, so one 128-by-64-bit division does.
    @inlinable @inline(__always)
    static func nanoseconds(in duration: Duration) -> Int64 {
        let attosecondsPerNanosecond: UInt64 = 1_000_000_000
        if duration._high >= 0 {
            guard UInt64(duration._high) < attosecondsPerNanosecond else { return .max }
            let quotient = attosecondsPerNanosecond.dividingFullWidth(
                (high: UInt64(duration._high), low: duration._low)).quotient
            return quotient > UInt64(Int64.max) ? .max : Int64(quotient)
        }
        // The magnitude of a negative duration: its two's complement.
        let low = ~duration._low &+ 1
        let high = ~UInt64(bitPattern: duration._high) &+ (duration._low == 0 ? 1 : 0)
        guard high < attosecondsPerNanosecond else { return .min }
        let quotient = attosecondsPerNanosecond.dividingFullWidth((high: high, low: low)).quotient
        return quotient >= UInt64(1) << 63 ? .min : -Int64(quotient)
    }

    @inlinable @inline(__always)
    public static func < (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    @inlinable @inline(__always)
    public static func + (lhs: MonotonicInstant, rhs: Duration) -> MonotonicInstant {
        lhs.advanced(by: rhs)
    }

    @inlinable @inline(__always)
    public static func - (lhs: MonotonicInstant, rhs: Duration) -> MonotonicInstant {
        MonotonicInstant(nanoseconds: saturated(lhs.nanoseconds.subtractingReportingOverflow(nanoseconds(in: rhs))))
    }

    @inlinable @inline(__always)
    public static func - (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Duration {
        rhs.duration(to: lhs)
    }

    @inlinable @inline(__always)
    public static func += (lhs: inout MonotonicInstant, rhs: Duration) {
        lhs = lhs.advanced(by: rhs)
    }

    public var description: String {
        "MonotonicInstant(\(nanoseconds) ns)"
    }
}
