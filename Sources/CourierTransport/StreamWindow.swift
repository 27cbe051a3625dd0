import CourierReactor

/// An HTTP/2 stream's receive window, grown while the round trip rather than the reader holds
/// the stream back.
///
/// A stream starts with a small window, so that one whose reader pauses holds little (what it
/// receives meanwhile waits in memory, up to the window). Half of the window credited back
/// within a round trip means the reader takes more than a window every two round trips, and a
/// stream whose window bounds it runs at a window a round trip: the window may be what holds it
/// back, and it doubles, up to its maximum. A reader slower than that (or bytes credited in a
/// burst on resuming, which ``restart()`` leaves out) keeps the window where it is, at least
/// twice what it needs.
///
/// The round trip is the connection's shortest from SETTINGS or PING to its acknowledgement,
/// measured end to end at HTTP/2 (``HTTP2Connection``): through a proxy's tunnel the TCP
/// socket's own round trip would be only the first hop's.
struct StreamWindow {
    /// The window now, in bytes.
    private(set) var size: Int
    let maximum: Int
    /// Bytes credited since `periodStart`, not counting the credit that started the period.
    private var credited = 0
    /// When the current period started; nil before the next credit starts one.
    private var periodStart: MonotonicInstant?

    init(size: Int, maximum: Int) {
        self.size = size
        self.maximum = max(size, maximum)
    }

    /// Counts `count` bytes credited to the sender now; returns the new size when the window
    /// should grow. `roundTrip` is in nanoseconds, nil while unknown; `now` reads the clock,
    /// called only when a period starts or ends. A period starts at a credit and counts the
    /// bytes after it, so a rate is bytes over the time they took.
    mutating func credit(_ count: Int, roundTrip: Int64?, now: () -> MonotonicInstant) -> Int? {
        guard size < maximum else { return nil }
        guard let start = periodStart else {
            periodStart = now()
            return nil
        }
        credited += count
        guard credited >= size / 2 else { return nil }
        let end = now()
        credited = 0
        periodStart = end
        guard let roundTrip, end.nanoseconds &- start.nanoseconds < roundTrip else { return nil }
        size = min(size * 2, maximum)
        return size
    }

    /// Starts a new period: the bytes credited next (a paused stream's stash, handed over at
    /// once) say nothing of how fast they came.
    mutating func restart() {
        credited = 0
        periodStart = nil
    }
}
