import CourierReactor
import Testing
import _CourierTestSupport

/// A `TimerQueue` driven by a manual clock: every instant is one fixed base plus whole
/// milliseconds, so nothing here depends on how fast the machine runs. A class, so the
/// queue's mutating calls read naturally inside `#expect`.
final class ManualTimerQueue<Work> {
    let base = MonotonicInstant.now
    var queue = TimerQueue<Work>()

    func at(_ milliseconds: Int) -> MonotonicInstant {
        base + .milliseconds(milliseconds)
    }

    @discardableResult
    func schedule(_ milliseconds: Int, _ work: Work) -> TimerID {
        queue.schedule(at: at(milliseconds), work)
    }

    @discardableResult
    func cancel(_ id: TimerID) -> Bool { queue.cancel(id) }

    func pop(_ milliseconds: Int) -> [Work] { queue.popDue(now: at(milliseconds)) }

    /// The next deadline as milliseconds from the base.
    func next() -> Int? {
        guard let deadline = queue.nextDeadline() else { return nil }
        let (seconds, attoseconds) = (deadline - base).components
        return Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000)
    }

    var count: Int { queue.count }
}

@Suite struct TimerQueueTests {
    @Test func emptyQueueHasNothingDue() {
        let timers = ManualTimerQueue<String>()
        #expect(timers.count == 0)
        #expect(timers.next() == nil)
        #expect(timers.pop(1_000_000).isEmpty)
    }

    @Test func popsInDeadlineOrder() {
        let timers = ManualTimerQueue<String>()
        timers.schedule(30, "c")
        timers.schedule(10, "a")
        timers.schedule(40, "d")
        timers.schedule(20, "b")
        #expect(timers.count == 4)
        #expect(timers.next() == 10)
        #expect(timers.pop(100) == ["a", "b", "c", "d"])
        #expect(timers.count == 0)
        #expect(timers.next() == nil)
    }

    @Test func equalDeadlinesRunInSchedulingOrder() {
        let timers = ManualTimerQueue<Int>()
        // Interleave two deadlines so that heap order alone cannot explain the result.
        for index in 0..<20 {
            timers.schedule(index.isMultiple(of: 2) ? 10 : 5, index)
        }
        #expect(timers.pop(5) == Array(stride(from: 1, to: 20, by: 2)))
        #expect(timers.pop(10) == Array(stride(from: 0, to: 20, by: 2)))
    }

    @Test func equalDeadlinesKeepOrderAcrossPops() {
        let timers = ManualTimerQueue<String>()
        timers.schedule(10, "first")
        timers.schedule(10, "second")
        #expect(timers.pop(9).isEmpty)
        timers.schedule(10, "third")
        #expect(timers.pop(10) == ["first", "second", "third"])
    }

    @Test func popDueReturnsOnlyDueWork() {
        let timers = ManualTimerQueue<String>()
        timers.schedule(10, "a")
        timers.schedule(20, "b")
        timers.schedule(30, "c")

        #expect(timers.pop(5).isEmpty)
        #expect(timers.count == 3)
        // A deadline equal to now is due.
        #expect(timers.pop(10) == ["a"])
        #expect(timers.pop(19).isEmpty)
        #expect(timers.count == 2)
        #expect(timers.next() == 20)
        #expect(timers.pop(25) == ["b"])
        #expect(timers.pop(29).isEmpty)
        #expect(timers.pop(30) == ["c"])
        #expect(timers.count == 0)
    }

    @Test func popDueDoesNotReturnWorkTwice() {
        let timers = ManualTimerQueue<String>()
        timers.schedule(10, "a")
        #expect(timers.pop(10) == ["a"])
        #expect(timers.pop(10).isEmpty)
        #expect(timers.pop(1000).isEmpty)
    }

    @Test func pastDeadlinesAreDueAtOnce() {
        let timers = ManualTimerQueue<String>()
        timers.schedule(-50, "late")
        timers.schedule(0, "now")
        #expect(timers.next() == -50)
        #expect(timers.pop(0) == ["late", "now"])
    }

    @Test func cancelBeforeDueRemovesTheWork() {
        let timers = ManualTimerQueue<String>()
        let a = timers.schedule(10, "a")
        let b = timers.schedule(20, "b")
        timers.schedule(30, "c")

        #expect(timers.cancel(b))
        #expect(timers.count == 2)
        #expect(timers.pop(100) == ["a", "c"])
        // Cancelling again, or cancelling work that ran, reports false.
        #expect(!timers.cancel(b))
        #expect(!timers.cancel(a))
    }

    @Test func cancelReturnsFalseAfterPopping() {
        let timers = ManualTimerQueue<String>()
        let id = timers.schedule(10, "a")
        #expect(timers.pop(10) == ["a"])
        #expect(!timers.cancel(id))
        #expect(timers.count == 0)
    }

    @Test func cancelTwiceReturnsFalseTheSecondTime() {
        let timers = ManualTimerQueue<String>()
        let id = timers.schedule(10, "a")
        #expect(timers.cancel(id))
        #expect(!timers.cancel(id))
        #expect(timers.count == 0)
        #expect(timers.pop(100).isEmpty)
    }

    @Test func nextDeadlineSkipsCancelledTimers() {
        let timers = ManualTimerQueue<String>()
        let first = timers.schedule(10, "a")
        let second = timers.schedule(20, "b")
        timers.schedule(30, "c")

        timers.cancel(first)
        #expect(timers.next() == 20)
        timers.cancel(second)
        #expect(timers.next() == 30)
        #expect(timers.pop(30) == ["c"])
        #expect(timers.next() == nil)
    }

    /// The queue remembers that its first entry is live between calls; every change of the
    /// first entry must be seen by the next call.
    @Test func nextDeadlineFollowsTheFirstEntryAcrossRepeatedCalls() {
        let timers = ManualTimerQueue<String>()
        let first = timers.schedule(10, "a")
        timers.schedule(20, "b")
        #expect(timers.next() == 10)
        #expect(timers.next() == 10)
        timers.cancel(first)
        #expect(timers.next() == 20)
        let earlier = timers.schedule(5, "early")
        #expect(timers.next() == 5)
        timers.cancel(earlier)
        #expect(timers.next() == 20)
        let later = timers.schedule(25, "c")
        timers.cancel(later)
        #expect(timers.next() == 20)
        #expect(timers.pop(20) == ["b"])
        #expect(timers.next() == nil)
        timers.schedule(40, "d")
        #expect(timers.next() == 40)
    }

    @Test func nextDeadlineIsNilWhenEverythingIsCancelled() {
        let timers = ManualTimerQueue<String>()
        let ids = (0..<5).map { timers.schedule($0 * 10, "t\($0)") }
        for id in ids { timers.cancel(id) }
        #expect(timers.count == 0)
        #expect(timers.next() == nil)
        #expect(timers.pop(1000).isEmpty)
    }

    @Test func cancelledEntryBuriedInTheHeapIsSkippedWhenReached() {
        let timers = ManualTimerQueue<String>()
        timers.schedule(10, "a")
        let middle = timers.schedule(20, "b")
        timers.schedule(30, "c")
        timers.cancel(middle)
        #expect(timers.next() == 10)
        #expect(timers.pop(20) == ["a"])
        #expect(timers.next() == 30)
        #expect(timers.pop(30) == ["c"])
    }

    @Test func timersScheduledAfterPopsStillOrder() {
        let timers = ManualTimerQueue<String>()
        timers.schedule(10, "a")
        #expect(timers.pop(10) == ["a"])
        timers.schedule(50, "late")
        timers.schedule(15, "early")
        #expect(timers.next() == 15)
        #expect(timers.pop(60) == ["early", "late"])
    }

    @Test func identifiersAreDistinct() {
        let timers = ManualTimerQueue<Int>()
        let ids = (0..<100).map { timers.schedule(10, $0) }
        #expect(Set(ids).count == 100)
    }

    /// Random schedules, cancels and pops checked against a plain sorted model.
    @Test(arguments: [1, 2, 3, 42, 2024] as [UInt64])
    func matchesASortedModel(seed: UInt64) {
        struct Entry {
            var deadline: Int
            var sequence: Int
            var id: TimerID
        }
        func ordered(_ entries: [Entry]) -> [Entry] {
            entries.sorted { ($0.deadline, $0.sequence) < ($1.deadline, $1.sequence) }
        }

        var random = SplitMix64(seed: seed)
        let timers = ManualTimerQueue<Int>()
        var model: [Entry] = []
        var popped: [Entry] = []
        var now = 0
        var sequence = 0

        for _ in 0..<2000 {
            switch random.next() % 10 {
            case 0..<5:
                let deadline = now + Int(random.next() % 200)
                let id = timers.schedule(deadline, sequence)
                model.append(Entry(deadline: deadline, sequence: sequence, id: id))
                sequence += 1
            case 5..<7:
                if !model.isEmpty {
                    let entry = model.remove(at: Int(random.next() % UInt64(model.count)))
                    #expect(timers.cancel(entry.id))
                } else if let entry = popped.last {
                    #expect(!timers.cancel(entry.id))
                }
            case 7:
                #expect(timers.next() == ordered(model).first?.deadline)
            default:
                now += Int(random.next() % 60)
                let due = ordered(model.filter { $0.deadline <= now })
                model.removeAll { $0.deadline <= now }
                popped += due
                #expect(timers.pop(now) == due.map(\.sequence))
            }
            #expect(timers.count == model.count)
        }
        #expect(timers.pop(now + 1000) == ordered(model).map(\.sequence))
        #expect(timers.count == 0)
    }
}
