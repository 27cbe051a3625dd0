import CourierPool
import Testing
import _CourierTestSupport

@Suite("IdentifierMap")
struct IdentifierMapTests {
    @Test("random inserts, updates and removals agree with a Dictionary, and iteration is in key order")
    func agreesWithDictionary() {
        var generator = SplitMix64(seed: 0x5EED)
        var map = IdentifierMap<PoolRequestID, Int>()
        var model: [PoolRequestID: Int] = [:]
        var nextID = 0
        for step in 0..<20_000 {
            let roll = Int.random(in: 0..<10, using: &generator)
            // Mostly new (largest) keys, as a pool makes them; sometimes any key in the range.
            let key: PoolRequestID
            if roll < 4 {
                key = PoolRequestID(nextID)
                nextID += 1
            } else {
                key = PoolRequestID(Int.random(in: 0...max(nextID, 1), using: &generator))
            }
            switch roll {
            case 0..<6:
                map[key] = step
                model[key] = step
            case 6, 7:
                #expect(map.removeValue(forKey: key) == model.removeValue(forKey: key))
            default:
                map[key] = nil
                model[key] = nil
            }
            #expect(map[key] == model[key])
            if step % 500 == 0 {
                #expect(map.map(\.key) == model.keys.sorted())
                #expect(Array(map.values) == model.sorted { $0.key < $1.key }.map(\.value))
                #expect(map.count == model.count)
            }
        }
        map.removeAll()
        #expect(map.isEmpty)
        #expect(map[PoolRequestID(0)] == nil)
    }

    @Test("keys with no gap, then gaps: every key is found where it is, absent keys are not")
    func denseKeysThenGaps() {
        var map = IdentifierMap<PoolConnectionID, Int>()
        for id in 100..<132 { map[PoolConnectionID(id)] = id * 2 }
        for id in 100..<132 { #expect(map[PoolConnectionID(id)] == id * 2) }
        #expect(map[PoolConnectionID(99)] == nil)
        #expect(map[PoolConnectionID(132)] == nil)
        // Gaps at the front, in the middle (two apart and a run) and just before the last key.
        for id in [100, 101, 110, 112, 120, 121, 122, 130] { map[PoolConnectionID(id)] = nil }
        let kept = Set(100..<132).subtracting([100, 101, 110, 112, 120, 121, 122, 130])
        for id in 95..<140 { #expect(map[PoolConnectionID(id)] == (kept.contains(id) ? id * 2 : nil)) }
        // A key put back into a gap goes to its place in the order.
        map[PoolConnectionID(121)] = -1
        #expect(map[PoolConnectionID(121)] == -1)
        #expect(map.map(\.key.rawValue) == (kept.union([121])).sorted())
    }

    @Test("a key before, between and after the others")
    func keysInAnyOrder() {
        var map = IdentifierMap<PoolConnectionID, String>()
        map[PoolConnectionID(5)] = "five"
        map[PoolConnectionID(1)] = "one"
        map[PoolConnectionID(9)] = "nine"
        map[PoolConnectionID(3)] = "three"
        #expect(map.map(\.key.rawValue) == [1, 3, 5, 9])
        #expect(map[PoolConnectionID(3)] == "three")
        #expect(map[PoolConnectionID(4)] == nil)
        map[PoolConnectionID(3)] = "THREE"
        #expect(map.count == 4)
        #expect(map.removeValue(forKey: PoolConnectionID(1)) == "one")
        #expect(map.removeValue(forKey: PoolConnectionID(1)) == nil)
        #expect(Array(map.values) == ["THREE", "five", "nine"])
    }
}
