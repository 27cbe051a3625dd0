@testable import CourierCore
import Testing

private final class Box {
    let number: Int
    init(_ number: Int) { self.number = number }
}

/// Identifiers (odd, as a client's streams are) whose home slots in `table` are `slots`, in
/// order: found by trying ids until one fits each.
private func streamIDs(withHomes slots: [Int], in table: SlotTable<Int32, Box>) -> [Int32] {
    var found: [Int32] = []
    var candidate: Int32 = 1
    for slot in slots {
        while table.home(candidate) != slot || found.contains(candidate) { candidate += 2 }
        found.append(candidate)
        candidate = 1
    }
    return found
}

@Suite("SlotTable")
struct SlotTableTests {
    @Test("finds, replaces and removes what it holds")
    func basics() {
        var table = SlotTable<Int32, Box>(step: 2)
        #expect(table.isEmpty)
        table[1] = Box(1)
        table[3] = Box(3)
        table[5] = Box(5)
        #expect(table.count == 3)
        #expect(table[3]?.number == 3)
        #expect(table[7] == nil)
        #expect(table[0] == nil)
        #expect(table[-1] == nil)
        table[3] = Box(33)
        #expect(table.count == 3)
        #expect(table[3]?.number == 33)
        #expect(table.removeValue(forKey: 3)?.number == 33)
        #expect(table.removeValue(forKey: 3) == nil)
        table[5] = nil
        table[0] = nil
        #expect(table.count == 1)
        #expect(table.keys == [1])
        #expect(table.values.map(\.number) == [1])
        #expect(table[1]?.number == 1)
    }

    @Test("a removal in a run that wraps past the last slot keeps every later entry reachable")
    func removalAcrossTheWrap() {
        var table = SlotTable<Int32, Box>(step: 2, capacity: 8)
        // Three ids at home in the last slot, then one at home in the first: the run goes
        // 7, 0, 1, 2.
        let ids = streamIDs(withHomes: [7, 7, 7, 0], in: table)
        for id in ids { table[id] = Box(Int(id)) }
        #expect(ids.map { table.probeLength(of: $0) } == [0, 1, 2, 2])
        table.removeValue(forKey: ids[0])
        for id in ids.dropFirst() { #expect(table[id]?.number == Int(id), "stream \(id)") }
        table.removeValue(forKey: ids[1])
        for id in ids.dropFirst(2) { #expect(table[id]?.number == Int(id), "stream \(id)") }
        #expect(table[ids[0]] == nil && table[ids[1]] == nil)
        #expect(table.count == 2)
    }

    @Test("a removal leaves in place an entry after it that is already at home")
    func removalKeepsEntriesAtHome() {
        var table = SlotTable<Int32, Box>(step: 2, capacity: 8)
        // A at home in slot 2, B at home in slot 3 (its own), C at home in 2 and pushed to 4.
        let ids = streamIDs(withHomes: [2, 3, 2], in: table)
        for id in ids { table[id] = Box(Int(id)) }
        #expect(ids.map { table.probeLength(of: $0) } == [0, 0, 2])
        table.removeValue(forKey: ids[0])
        // B stays where its lookups start; C moves back into A's slot.
        #expect(table.probeLength(of: ids[1]) == 0)
        #expect(table.probeLength(of: ids[2]) == 0)
        #expect(table[ids[1]]?.number == Int(ids[1]) && table[ids[2]]?.number == Int(ids[2]))
    }

    @Test("ten thousand random operations agree with a dictionary, through growth and collisions")
    func agreesWithADictionary() {
        var table = SlotTable<Int32, Box>(step: 2, capacity: 8)
        var model: [Int32: Box] = [:]
        // A fixed linear congruential sequence: the same operations every run.
        var seed: UInt64 = 0x2545_F491_4F6C_DD1D
        func next(_ bound: Int) -> Int {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((seed >> 33) % UInt64(bound))
        }
        let far = Int32(1_000_001)
        for step in 0..<10_000 {
            // Identifiers from a small range, odd and even, so that runs form and wrap; now and
            // then a far one, as a long-lived connection's would be.
            let id = next(10) == 0 ? far + Int32(2 * next(50)) : Int32(1 + next(160))
            switch next(3) {
            case 0, 1:
                let box = Box(step)
                table[id] = box
                model[id] = box
            default:
                #expect(table.removeValue(forKey: id) === model.removeValue(forKey: id), "step \(step)")
            }
            #expect(table.count == model.count, "step \(step)")
            if step % 97 == 0 {
                for probe in Int32(1)...Int32(161) { #expect(table[probe] === model[probe], "step \(step), stream \(probe)") }
                for probe in stride(from: far, through: far + 100, by: 2) { #expect(table[probe] === model[probe], "step \(step), stream \(probe)") }
                #expect(Set(table.keys) == Set(model.keys), "step \(step)")
                #expect(Set(table.values.map(\.number)) == Set(model.values.map(\.number)), "step \(step)")
            }
        }
        var seen: [Int32: Box] = [:]
        for (id, box) in table { seen[id] = box }
        #expect(seen.count == model.count)
        #expect(seen.allSatisfy { model[$0.key] === $0.value })
    }

    @Test("identifiers rising by one, as a session's tasks do, live and end in any order")
    func stepOne() {
        var table = SlotTable<Int, Box>()
        var model: [Int: Box] = [:]
        for id in 1...3_000 {
            let box = Box(id)
            table[id] = box
            model[id] = box
            // Every third task ends at once, every seventh a while later.
            if id % 3 == 0 { #expect(table.removeValue(forKey: id) === model.removeValue(forKey: id)) }
            if id % 7 == 0, id > 70 { #expect(table.removeValue(forKey: id - 70) === model.removeValue(forKey: id - 70)) }
        }
        #expect(table.count == model.count)
        #expect(Set(table.values.map(\.number)) == Set(model.values.map(\.number)))
        for id in 1...3_001 { #expect(table[id] === model[id], "task \(id)") }
    }

    @Test("a block of long-lived identifiers does not lengthen the probes of the ones after it")
    func longLivedBlock() {
        // Sixty-four tasks that stay (streams, sockets, long downloads), then ten thousand that
        // come and go four at a time. With the identifier itself as the slot, the later ones
        // whose slot falls in the block walked past all of it, and joined it.
        var table = SlotTable<Int, Box>()
        for id in 1...64 { table[id] = Box(id) }
        var longest = 0
        for id in 65...10_064 {
            table[id] = Box(id)
            longest = max(longest, table.probeLength(of: id) ?? .max)
            if id >= 68 { table.removeValue(forKey: id - 3) }
        }
        #expect(longest <= 8, "the longest probe was \(longest) slots")
        for id in 1...64 { #expect(table[id]?.number == id) }
        #expect(table.count == 64 + 3)
    }

    @Test("iterates what it held when the loop began, whatever the loop removes")
    func iterationIsASnapshot() {
        var table = SlotTable<Int32, Box>(step: 2)
        for id in stride(from: Int32(1), through: 21, by: 2) { table[id] = Box(Int(id)) }
        var visited: [Int32] = []
        for (id, _) in table {
            visited.append(id)
            table.removeValue(forKey: id)
            table.removeValue(forKey: id + 2)
        }
        #expect(visited.count == 11)
        #expect(table.isEmpty)
    }
}
