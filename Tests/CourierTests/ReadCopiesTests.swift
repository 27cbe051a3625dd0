@testable import Courier
import Foundation
import Testing

@Suite("ReadCopies: large reads copied into buffers used again")
struct ReadCopiesTests {
    /// `count` bytes of a pattern that differs with `seed`.
    func bytes(_ count: Int, seed: UInt8) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7) &+ seed }
    }

    @Test("every size from empty to the buffer size reads back exactly", arguments: [0, 1, 4095, 4096, 16_383, 16_384, 65_535, 65_536])
    func copiesExactly(_ count: Int) {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        let source = bytes(count, seed: 3)
        let data = source.withUnsafeBytes { pool.data(copying: $0) }
        #expect(Array(data) == source)
    }

    @Test("a released buffer is taken again by the next large read, and holds the new bytes only")
    func reusesReleasedBuffer() {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        var first: Data? = bytes(40_000, seed: 1).withUnsafeBytes { pool.data(copying: $0) }
        let address = first!.withUnsafeBytes { $0.baseAddress }
        #expect(pool.spareCount == 0)
        first = nil
        #expect(pool.spareCount == 1)
        let second = bytes(20_000, seed: 9).withUnsafeBytes { pool.data(copying: $0) }
        #expect(second.withUnsafeBytes { $0.baseAddress } == address)
        #expect(Array(second) == bytes(20_000, seed: 9))
        #expect(pool.spareCount == 0)
    }

    @Test("a read under a quarter of the buffer gets a Data of its own: no spare is taken or given back")
    func smallReadsUseNoBuffer() {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        var large: Data? = bytes(65_536, seed: 0).withUnsafeBytes { pool.data(copying: $0) }
        large = nil
        #expect(large == nil && pool.spareCount == 1)
        var small: Data? = bytes(16_383, seed: 5).withUnsafeBytes { pool.data(copying: $0) }
        #expect(pool.spareCount == 1)
        small = nil
        #expect(small == nil && pool.spareCount == 1)
    }

    @Test("no more than maxSpares are kept; the rest are freed")
    func keepsAtMostMaxSpares() {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        var held: [Data] = (0..<5).map { seed in bytes(30_000, seed: UInt8(seed)).withUnsafeBytes { pool.data(copying: $0) } }
        #expect(pool.spareCount == 0)
        held.removeAll()
        #expect(pool.spareCount == 2)
    }

    @Test("a Data changed after delivery moves to storage of its own; the buffer goes back unharmed")
    func mutationLeavesThePoolIntact() {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        var data = bytes(50_000, seed: 4).withUnsafeBytes { pool.data(copying: $0) }
        data.append(contentsOf: bytes(70_000, seed: 8))
        #expect(Array(data) == bytes(50_000, seed: 4) + bytes(70_000, seed: 8))
        #expect(pool.spareCount == 1, "growing past the buffer gave it back")
        let next = bytes(60_000, seed: 6).withUnsafeBytes { pool.data(copying: $0) }
        #expect(Array(next) == bytes(60_000, seed: 6))
        #expect(Array(data.prefix(50_000)) == bytes(50_000, seed: 4), "the changed Data kept its bytes")
    }
}
