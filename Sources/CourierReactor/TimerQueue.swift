import HeapModule

/// Identifies a scheduled timer so it can be cancelled.
public struct TimerID: Hashable, Sendable {
    let rawValue: UInt64
}

/// Deadlines and the work due at each, ordered by time; a pure value fed the current instant.
///
/// Cancelling removes the work at once and leaves its heap entry to be skipped when it comes
/// up, so both scheduling and cancelling are O(log n) at worst. Timers due at the same instant
/// run in the order they were scheduled.
public struct TimerQueue<Work> {
    private struct Entry: Comparable {
        var deadline: MonotonicInstant
        var id: UInt64

        static func < (lhs: Entry, rhs: Entry) -> Bool {
            lhs.deadline == rhs.deadline ? lhs.id < rhs.id : lhs.deadline < rhs.deadline
        }
    }

    private var heap = Heap<Entry>()
    private var work: [UInt64: Work] = [:]
    private var nextID: UInt64 = 1
    /// The heap's first entry is known to have its work (or the heap is empty): the loop asks
    /// for the next deadline every turn, and a timer that stays armed (an idle connection's)
    /// would otherwise be looked up each time.
    private var firstIsLive = true

    public init() {}

    /// Number of live (not cancelled, not yet due) timers.
    public var count: Int { work.count }

    /// Schedules `item` at `deadline`.
    public mutating func schedule(at deadline: MonotonicInstant, _ item: Work) -> TimerID {
        let id = nextID
        nextID += 1
        heap.insert(Entry(deadline: deadline, id: id))
        work[id] = item
        if heap.min?.id == id { firstIsLive = true }
        return TimerID(rawValue: id)
    }

    /// Cancels a timer; returns false when it already ran or was cancelled.
    @discardableResult
    public mutating func cancel(_ id: TimerID) -> Bool {
        guard work.removeValue(forKey: id.rawValue) != nil else { return false }
        if heap.min?.id == id.rawValue { firstIsLive = false }
        return true
    }

    /// The earliest live deadline, or nil when nothing is scheduled.
    public mutating func nextDeadline() -> MonotonicInstant? {
        dropCancelled()
        return heap.min?.deadline
    }

    /// Removes and returns the earliest work due at or before `now`, or nil. Taking one at a
    /// time lets a timer that runs cancel another due in the same turn.
    public mutating func popNextDue(now: MonotonicInstant) -> Work? {
        while let first = heap.min, first.deadline <= now {
            heap.removeMin()
            firstIsLive = false
            if let item = work.removeValue(forKey: first.id) { return item }
        }
        return nil
    }

    /// Removes and returns all the work due at or before `now`, earliest first.
    public mutating func popDue(now: MonotonicInstant) -> [Work] {
        var due: [Work] = []
        while let item = popNextDue(now: now) { due.append(item) }
        return due
    }

    private mutating func dropCancelled() {
        guard !firstIsLive else { return }
        while let first = heap.min, work[first.id] == nil { heap.removeMin() }
        firstIsLive = true
    }
}
