/// When an event loop's thread waits for events as a batch thread (`SCHED_BATCH`): for a second
/// after several of its turns within a short window found other threads busy on the loop.
///
/// Design note: threads of the global pool borrow an idle loop to send their requests on the
/// spot (``EventLoop/runBorrowing(_:)``). With many requests in flight and the client on one
/// core, responses keep waking the loop's thread while such threads run, and the kernel lets a
/// woken thread preempt the running one: the loop takes the core in the middle of their work,
/// and when it has preempted a borrower, it finds its turn held by the thread it preempted and
/// spins in vain (the holder cannot run on the same core) before it sleeps. A batch thread that
/// wakes does not preempt: it runs when the thread on its core blocks or has had its time
/// slice, and then handles everything that arrived meanwhile in one turn. W2 (32 requests in
/// flight, client on one core) went 11% faster on HTTP/1.1 and 17% over TLS HTTP/2 this way
/// (performance.md).
///
/// The loop's thread is a batch thread only while it waits, and only while other threads keep
/// it busy; it is back on the default policy as soon as it wakes, so what it runs, and the
/// threads it starts, are as before (Dispatch's workers are created by whichever thread queues
/// work when none is idle, and inherit that thread's policy). One request at a time (W1), or a
/// download, never makes the waits batch waits.
///
/// A busy turn is one whose lock a borrower held as the loop's thread came for it, or before
/// which other threads borrowed the loop more than once since the turn before (one borrow a wait
/// is a single caller sending its next request).
///
/// Loop-confined.
struct WaitScheduling {
    /// How long a run of busy turns may take to count.
    let window: Duration
    /// Busy turns within ``window`` that make the waits batch waits.
    let busyTurns: Int
    /// How long the waits stay batch waits after the last run that counted.
    let hold: Duration

    private var windowStart: MonotonicInstant?
    private var count = 0
    private var batchUntil: MonotonicInstant?

    /// The loop's own thresholds: 8 busy turns within 100 ms, held for a second. On W2 the loop
    /// has thousands of busy turns a second; on W1 and W3, none.
    init(window: Duration = .milliseconds(100), busyTurns: Int = 8, hold: Duration = .seconds(1)) {
        self.window = window
        self.busyTurns = busyTurns
        self.hold = hold
    }

    /// Records a busy turn.
    mutating func noteBusyTurn(at now: MonotonicInstant) {
        if let start = windowStart, start.advanced(by: window) >= now {
            count += 1
        } else {
            windowStart = now
            count = 1
        }
        if count >= busyTurns {
            batchUntil = now.advanced(by: hold)
        }
    }

    /// True when the loop's next wait for events is to be a batch wait.
    func batchesWaits(at now: MonotonicInstant) -> Bool {
        guard let batchUntil else { return false }
        return now < batchUntil
    }
}
