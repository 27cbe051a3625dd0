import Dispatch

/// Progress messages at most one per `progressInterval` a task. A download reported a `wrote`
/// for each 256 KiB written, 4,096 for a GiB, and the session's process spent about 80 µs of
/// CPU on each (a frame read, JSON decoded, a delegate operation); the transfer itself is the
/// daemon's. Progress that comes sooner is merged (bytes added up, the latest totals) and goes
/// when the interval is over, or before any other message about the task, so the session sees
/// the same sums in the same order.
extension BackgroundDaemon {
    static let progressInterval: DispatchTimeInterval = .milliseconds(50)

    /// A task's progress: when it last went, and what waits.
    struct ProgressGate {
        var lastSent: DispatchTime?
        var pending: DaemonMessage?
        var flushScheduled = false
    }

    /// Sends a `wrote` or `sent` message now, or merges it into the task's waiting one.
    func sendProgress(_ message: DaemonMessage, task id: Int) {
        state.withLock { state in
            guard let client = state.client else { return }
            var gate = state.progress[id] ?? ProgressGate()
            if let pending = gate.pending, let merged = pending.merging(message) {
                gate.pending = merged
            } else {
                // (Never of another kind in practice: a task's progress is all wrote or all sent.)
                if let pending = gate.pending { outbound.async { client.send(pending) } }
                gate.pending = message
            }
            state.progress[id] = gate
            if let last = gate.lastSent, DispatchTime.now() < last + Self.progressInterval {
                guard !gate.flushScheduled else { return }
                state.progress[id]?.flushScheduled = true
                outbound.asyncAfter(deadline: last + Self.progressInterval) { [self] in flushDueProgress(of: id) }
            } else {
                flushProgress(of: id, in: &state)
            }
        }
    }

    /// Queues the task's waiting progress, if any, before a message about the task that is
    /// about to be queued; called under the state lock.
    func flushProgress(of id: Int, in state: inout State) {
        guard let pending = state.progress[id]?.pending, let client = state.client else { return }
        state.progress[id]?.pending = nil
        state.progress[id]?.lastSent = .now()
        outbound.async { client.send(pending) }
    }

    /// The interval is over: the waiting progress goes, queued under the lock like every
    /// other message, so it goes after whatever was queued before it was taken. (Sent from
    /// this block instead, it overtook a merged message queued after this block was: a total
    /// arrived before a smaller one.) A flush that finds the last message sent too recently
    /// (another sent it meanwhile) waits for the rest of the interval.
    private func flushDueProgress(of id: Int) {
        state.withLock { state in
            guard let gate = state.progress[id] else { return }
            if gate.pending != nil, let last = gate.lastSent, DispatchTime.now() < last + Self.progressInterval {
                outbound.asyncAfter(deadline: last + Self.progressInterval) { [self] in flushDueProgress(of: id) }
                return
            }
            state.progress[id]?.flushScheduled = false
            flushProgress(of: id, in: &state)
        }
    }
}

extension DaemonMessage {
    /// The wire task the message is about, if any.
    var taskID: Int? {
        switch self {
        case .wrote(let id, _, _, _), .sent(let id, _, _, _), .resumedAtOffset(let id, _, _), .response(let id, _), .resumeData(let id, _): id
        case .event(let event): event.task
        case .welcome, .refused: nil
        }
    }

    /// Two progress messages of a task as one: the bytes of both, the later totals; nil when
    /// they are not of one kind.
    func merging(_ later: DaemonMessage) -> DaemonMessage? {
        switch (self, later) {
        case (.wrote(let id, let bytes, _, _), .wrote(let other, let more, let total, let expected)) where other == id:
            .wrote(task: id, bytes: bytes + more, total: total, expected: expected)
        case (.sent(let id, let bytes, _, _), .sent(let other, let more, let total, let expected)) where other == id:
            .sent(task: id, bytes: bytes + more, total: total, expected: expected)
        default:
            nil
        }
    }
}
