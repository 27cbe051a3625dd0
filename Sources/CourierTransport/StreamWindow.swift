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
/// socket's own round trip would be only the first hop's. The connection gives none until a
/// PING has confirmed the SETTINGS' sample (taken as the connection starts, when a busy peer or
/// client can make it long); until then, every period that ends asks for one, whatever its
/// speed (``Verdict/needsRoundTrip``).
struct StreamWindow {
    /// What a credit found.
    enum Verdict: Equatable {
        /// The window stays.
        case keep
        /// The window grew to this size: the sender must be told.
        case grew(to: Int)
        /// Half the window came within a period that no confirmed round trip can be compared
        /// with: a round trip should be measured. The window stays.
        case needsRoundTrip
    }

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

    /// Counts `count` bytes credited to the sender now. `roundTrip` is in nanoseconds, nil
    /// while none is confirmed; `now` reads the clock, called only when a period starts or
    /// ends. A period starts at a credit and counts the bytes after it, so a rate is bytes over
    /// the time they took.
    mutating func credit(_ count: Int, roundTrip: Int64?, now: () -> MonotonicInstant) -> Verdict {
        guard size < maximum else { return .keep }
        guard let start = periodStart else {
            periodStart = now()
            return .keep
        }
        credited += count
        guard credited >= size / 2 else { return .keep }
        let end = now()
        credited = 0
        periodStart = end
        guard let roundTrip else { return .needsRoundTrip }
        guard end.nanoseconds &- start.nanoseconds < roundTrip else { return .keep }
        size = min(size * 2, maximum)
        return .grew(to: size)
    }

    /// Starts a new period: the bytes credited next (a paused stream's stash, handed over at
    /// once) say nothing of how fast they came.
    mutating func restart() {
        credited = 0
        periodStart = nil
    }
}
