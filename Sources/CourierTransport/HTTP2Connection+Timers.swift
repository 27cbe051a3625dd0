import CourierCore
import CourierReactor

/// The connection's timers: the one timeout check for every stream, the pool's idle timer and
/// the PING while idle.
extension HTTP2Connection {
    /// Makes sure the timeouts are checked by the first time a new stream may be due.
    ///
    /// Design note: one timer serves every stream, armed for the earliest time any of them
    /// may time out; a stream that starts later than that, or ends, costs no timer work. A
    /// timer of each stream's own cost a closure and a timer queue entry to arm, and a cancel
    /// to end, for every request.
    func armTimeout(_ timeout: Duration, deadline: MonotonicInstant?) {
        var first = MonotonicInstant.now + timeout
        if let deadline { first = min(first, deadline) }
        armTimeoutCheck(at: first)
    }

    func armTimeoutCheck(at time: MonotonicInstant) {
        if timeoutTimer != nil, let fires = timeoutTimerFires, fires <= time { return }
        if let timeoutTimer { loop.cancelTimer(timeoutTimer) }
        // A strong capture: the close cancels the timer (see Events).
        timeoutTimer = loop.scheduleTimer(at: time) { [self] in checkTimeouts() }
        timeoutTimerFires = time
    }

    /// Times out the streams silent for their request's timeout (a paused stream is never
    /// silent: only its deadline ends it) or past their deadline, and arms the timer for the
    /// earliest time one of the others may be due.
    func checkTimeouts() {
        timeoutTimer = nil
        timeoutTimerFires = nil
        let now = MonotonicInstant.now
        var expired: [Int32] = []
        var next: MonotonicInstant?
        for (streamID, current) in streams {
            let timeout = current.exchange.request.idleTimeout
            let deadline = current.exchange.request.deadline
            if let deadline, now >= deadline {
                expired.append(streamID)
                continue
            }
            let silent = now - current.lastActivity
            guard current.paused || silent < timeout else {
                expired.append(streamID)
                continue
            }
            var due = now + (current.paused ? timeout : timeout - silent)
            if let deadline { due = min(due, deadline) }
            next = min(next ?? due, due)
        }
        for streamID in expired.sorted() where streams[streamID] != nil {
            expire(streamID)
        }
        if let next, !isClosed { armTimeoutCheck(at: next) }
    }

    func expire(_ streamID: Int32) {
        finishStream(streamID, .failure(.timedOut))
        session.cancelStream(streamID)
        flush()
    }

    func schedulePoolIdleTimer(_ delay: Duration) {
        poolIdleTimer.start(after: delay)
        pingTimer.start(after: Self.idlePingInterval)
    }

    func cancelPoolIdleTimer() {
        poolIdleTimer.stop()
        pingTimer.stop()
        pingSentAt = nil
    }

    /// Idle for a ping interval: PING now and then; no answer by the next PING means the peer
    /// is gone.
    func pingWhileIdle() {
        guard !isClosed, streams.isEmpty else { return }
        if pingSentAt != nil {
            close()
            return
        }
        pingSentAt = .now
        session.ping()
        flush()
        pingTimer.start(after: Self.idlePingInterval)
    }
}
