import CourierReactor
import Testing

/// The pure timer queue, fed instants from a manual clock: every instant is a fixed base plus
/// whole milliseconds, so nothing here depends on how fast the machine runs.
@Suite struct TimerQueueTests {
    let base = ContinuousClock.now

    func at(_ milliseconds: Int) -> ContinuousClock.Instant {
        base + .milliseconds(milliseconds)
    }

    @Test func emptyQueueHasNothingDue() {
        var queue = TimerQueue<String>()
        #expect(queue.count == 0)
        let r1 = queue.nextDeadline()
        #expect(r1 == nil)
        let r2 = queue.popDue(now: at(1_000_000))
        #expect(r2.isEmpty)
    }

    @Test func popsInDeadlineOrder() {
        var queue = TimerQueue<String>()
        _ = queue.schedule(at: at(30), "c")
        _ = queue.schedule(at: at(10), "a")
        _ = queue.schedule(at: at(40), "d")
        _ = queue.schedule(at: at(20), "b")
        #expect(queue.count == 4)
        let r3 = queue.nextDeadline()
        #expect(r3 == at(10))
        let r4 = queue.popDue(now: at(100))
        #expect(r4 == ["a", "b", "c", "d"])
        #expect(queue.count == 0)
        let r5 = queue.nextDeadline()
        #expect(r5 == nil)
    }

    @Test func equalDeadlinesRunInSchedulingOrder() {
        var queue = TimerQueue<Int>()
        // Interleave two deadlines so heap order alone cannot explain the result.
        for index in 0..<20 {
            _ = queue.schedule(at: index.isMultiple(of: 2) ? at(10) : at(5), index)
        }
        let odd = Array(stride(from: 1, to: 20, by: 2))
        let even = Array(stride(from: 0, to: 20, by: 2))
        let r6 = queue.popDue(now: at(5))
        #expect(r6 == odd)
        let r7 = queue.popDue(now: at(10))
        #expect(r7 == even)
    }

    @Test func equalDeadlinesKeepOrderAcrossPops() {
        var queue = TimerQueue<String>()
        _ = queue.schedule(at: at(10), "first")
        _ = queue.schedule(at: at(10), "second")
        let r8 = queue.popDue(now: at(9))
        #expect(r8.isEmpty)
        _ = queue.schedule(at: at(10), "third")
        let r9 = queue.popDue(now: at(10))
        #expect(r9 == ["first", "second", "third"])
    }

    @Test func popDueReturnsOnlyDueWork() {
        var queue = TimerQueue<String>()
        _ = queue.schedule(at: at(10), "a")
        _ = queue.schedule(at: at(20), "b")
        _ = queue.schedule(at: at(30), "c")

        let r10 = queue.popDue(now: at(5))
        #expect(r10.isEmpty)
        #expect(queue.count == 3)
        // A deadline equal to now is due.
        let r11 = queue.popDue(now: at(10))
        #expect(r11 == ["a"])
        let r12 = queue.popDue(now: at(19))
        #expect(r12.isEmpty)
        #expect(queue.count == 2)
        let r13 = queue.nextDeadline()
        #expect(r13 == at(20))
        let r14 = queue.popDue(now: at(25))
        #expect(r14 == ["b"])
        let r15 = queue.popDue(now: at(29))
        #expect(r15.isEmpty)
        let r16 = queue.popDue(now: at(30))
        #expect(r16 == ["c"])
        #expect(queue.count == 0)
    }

    @Test func popDueDoesNotReturnWorkTwice() {
        var queue = TimerQueue<String>()
        _ = queue.schedule(at: at(10), "a")
        let r17 = queue.popDue(now: at(10))
        #expect(r17 == ["a"])
        let r18 = queue.popDue(now: at(10))
        #expect(r18.isEmpty)
        let r19 = queue.popDue(now: at(1000))
        #expect(r19.isEmpty)
    }

    @Test func pastDeadlinesAreDueAtOnce() {
        var queue = TimerQueue<String>()
        _ = queue.schedule(at: at(-50), "late")
        _ = queue.schedule(at: at(0), "now")
        let r20 = queue.nextDeadline()
        #expect(r20 == at(-50))
        let r21 = queue.popDue(now: at(0))
        #expect(r21 == ["late", "now"])
    }

    @Test func cancelBeforeDueRemovesTheWork() {
        var queue = TimerQueue<String>()
        let a = queue.schedule(at: at(10), "a")
        let b = queue.schedule(at: at(20), "b")
        _ = queue.schedule(at: at(30), "c")

        let r22 = queue.cancel(b)
        #expect(r22)
        #expect(queue.count == 2)
        let r23 = queue.popDue(now: at(100))
        #expect(r23 == ["a", "c"])
        // Cancelling again, or cancelling work that ran, reports false.
        let r24 = queue.cancel(b)
        #expect(!r24)
        let r25 = queue.cancel(a)
        #expect(!r25)
    }

    @Test func cancelReturnsFalseAfterPopping() {
        var queue = TimerQueue<String>()
        let id = queue.schedule(at: at(10), "a")
        let r26 = queue.popDue(now: at(10))
        #expect(r26 == ["a"])
        let r27 = queue.cancel(id)
        #expect(!r27)
        #expect(queue.count == 0)
    }

    @Test func cancelTwiceReturnsFalseTheSecondTime() {
        var queue = TimerQueue<String>()
        let id = queue.schedule(at: at(10), "a")
        let r28 = queue.cancel(id)
        #expect(r28)
        let r29 = queue.cancel(id)
        #expect(!r29)
        #expect(queue.count == 0)
        let r30 = queue.popDue(now: at(100))
        #expect(r30.isEmpty)
    }

    @Test func nextDeadlineSkipsCancelledTimers() {
        var queue = TimerQueue<String>()
        let first = queue.schedule(at: at(10), "a")
        let second = queue.schedule(at: at(20), "b")
        _ = queue.schedule(at: at(30), "c")

        queue.cancel(first)
        let r31 = queue.nextDeadline()
        #expect(r31 == at(20))
        queue.cancel(second)
        let r32 = queue.nextDeadline()
        #expect(r32 == at(30))
        let r33 = queue.popDue(now: at(30))
        #expect(r33 == ["c"])
        let r34 = queue.nextDeadline()
        #expect(r34 == nil)
    }

    @Test func nextDeadlineIsNilWhenEverythingIsCancelled() {
        var queue = TimerQueue<String>()
        let ids = (0..<5).map { queue.schedule(at: at($0 * 10), "t\($0)") }
        for id in ids { queue.cancel(id) }
        #expect(queue.count == 0)
        let r35 = queue.nextDeadline()
        #expect(r35 == nil)
        let r36 = queue.popDue(now: at(1000))
        #expect(r36.isEmpty)
    }

    @Test func cancelledEntryBuriedInTheHeapIsSkippedWhenReached() {
        var queue = TimerQueue<String>()
        _ = queue.schedule(at: at(10), "a")
        let middle = queue.schedule(at: at(20), "b")
        _ = queue.schedule(at: at(30), "c")
        queue.cancel(middle)
        // nextDeadline only drops cancelled entries at the top; the buried one must still be
        // skipped by popDue.
        let r37 = queue.nextDeadline()
        #expect(r37 == at(10))
        let r38 = queue.popDue(now: at(20))
        #expect(r38 == ["a"])
        let r39 = queue.nextDeadline()
        #expect(r39 == at(30))
        let r40 = queue.popDue(now: at(30))
        #expect(r40 == ["c"])
    }

    @Test func timersScheduledAfterPopsStillOrder() {
        var queue = TimerQueue<String>()
        _ = queue.schedule(at: at(10), "a")
        let r41 = queue.popDue(now: at(10))
        #expect(r41 == ["a"])
        _ = queue.schedule(at: at(50), "late")
        _ = queue.schedule(at: at(15), "early")
        let r42 = queue.nextDeadline()
        #expect(r42 == at(15))
        let r43 = queue.popDue(now: at(60))
        #expect(r43 == ["early", "late"])
    }

    @Test func identifiersAreDistinct() {
        var queue = TimerQueue<Int>()
        let ids = (0..<100).map { queue.schedule(at: at(10), $0) }
        #expect(Set(ids).count == 100)
    }

    /// Random schedules, cancels and pops checked against a plain sorted model.
    @Test(arguments: [1, 2, 3, 42, 2024] as [UInt64])
    func matchesASortedModel(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var queue = TimerQueue<Int>()
        struct ModelEntry { var deadline: Int; var sequence: Int; var id: TimerID }
        var model: [ModelEntry] = []
        var popped: [ModelEntry] = []
        var now = 0
        var sequence = 0

        for _ in 0..<2000 {
            switch random.next() % 10 {
            case 0..<5:
                let deadline = now + Int(random.next() % 200)
                let id = queue.schedule(at: at(deadline), sequence)
                model.append(ModelEntry(deadline: deadline, sequence: sequence, id: id))
                sequence += 1
            case 5..<7:
                if !model.isEmpty {
                    let index = Int(random.next() % UInt64(model.count))
                    let entry = model.remove(at: index)
                    let r44 = queue.cancel(entry.id)
                    #expect(r44)
                } else if let entry = popped.last {
                    let r45 = queue.cancel(entry.id)
                    #expect(!r45)
                }
            case 7:
                let expected = model.min { ($0.deadline, $0.sequence) < ($1.deadline, $1.sequence) }
                let r46 = queue.nextDeadline()
                #expect(r46 == expected.map { at($0.deadline) })
            default:
                now += Int(random.next() % 60)
                let due = model.filter { $0.deadline <= now }
                    .sorted { ($0.deadline, $0.sequence) < ($1.deadline, $1.sequence) }
                model.removeAll { $0.deadline <= now }
                popped += due
                let r47 = queue.popDue(now: at(now))
                #expect(r47 == due.map(\.sequence))
            }
            #expect(queue.count == model.count)
        }
        let rest = model.sorted { ($0.deadline, $0.sequence) < ($1.deadline, $1.sequence) }
        let r48 = queue.popDue(now: at(now + 1000))
        #expect(r48 == rest.map(\.sequence))
        #expect(queue.count == 0)
    }
}

/// A small deterministic generator for repeatable random tests.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
