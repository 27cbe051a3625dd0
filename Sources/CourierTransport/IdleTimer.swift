import CourierReactor

/// A timer for "this connection has been idle for so long" that a busy connection does not
/// cancel and make anew on every exchange.
///
/// A keep-alive connection goes idle and busy again once a request: scheduling a loop timer at
/// each idle start and cancelling it at each busy start cost two allocations a request (the
/// timer and its closure) and two heap operations. Here ``start(after:)`` only moves the due
/// time when a timer already armed fires no later, and ``stop()`` only forgets the due time.
/// A timer that fires early re-arms itself for the rest, one that fires while the connection
/// is busy does nothing, and `onExpiry` runs only once the connection has been idle for the
/// whole delay. Loop thread only.
final class IdleTimer {
    private let loop: EventLoop
    /// Dropped by ``cancel()``: an owner that the closure holds strongly is let go then.
    @exclusivity(unchecked) private var onExpiry: (() -> Void)?
    @exclusivity(unchecked) private var timer: TimerID?
    /// When the armed timer fires.
    @exclusivity(unchecked) private var firesAt: MonotonicInstant?
    /// When the current idle period has lasted the whole delay; nil while busy.
    @exclusivity(unchecked) private var due: MonotonicInstant?

    /// `onExpiry` runs on `loop` once the connection has been idle for the whole delay.
    init(loop: EventLoop, onExpiry: @escaping () -> Void) {
        self.loop = loop
        self.onExpiry = onExpiry
    }

    /// The connection is idle from now: `onExpiry` runs after `delay` unless ``stop()`` comes
    /// first.
    func start(after delay: Duration) {
        let due = MonotonicInstant.now + delay
        self.due = due
        if timer != nil, let firesAt, firesAt <= due { return }
        cancelArmed()
        arm(at: due)
    }

    /// The connection is busy: the idle period ends. The armed timer stays, to be reused.
    func stop() {
        due = nil
    }

    /// Stops for good (the connection closes): the armed timer goes too, and so does
    /// `onExpiry`, with whatever it holds.
    func cancel() {
        due = nil
        cancelArmed()
        onExpiry = nil
    }

    private func arm(at instant: MonotonicInstant) {
        firesAt = instant
        // A strong capture: the loop holds the closure only until the timer fires or is
        // cancelled, and a timer that outlives its connection finds `onExpiry`'s weak reference
        // gone. A weak one would give this object a side table, and every retain and release
        // of it (several a request, through the connection's lazy property) the slow path.
        timer = loop.scheduleTimer(at: instant) { self.fired() }
    }

    private func cancelArmed() {
        if let timer { loop.cancelTimer(timer) }
        timer = nil
        firesAt = nil
    }

    private func fired() {
        timer = nil
        firesAt = nil
        guard let due else { return }
        if MonotonicInstant.now >= due {
            self.due = nil
            onExpiry?()
        } else {
            arm(at: due)
        }
    }
}
