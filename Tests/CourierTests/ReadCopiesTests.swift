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

    @Test("small reads filled into one buffer come out as one Data, in order; the buffer goes back when it is let go")
    func fillingJoinsReads() {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        let filling = pool.filling()
        let pieces = (0..<5).map { seed in bytes(5_000, seed: UInt8(seed)) }
        for piece in pieces { #expect(piece.withUnsafeBytes { filling.append($0) }) }
        var joined: Data? = filling.seal()
        #expect(Array(joined!) == pieces.flatMap { $0 })
        #expect(pool.spareCount == 0, "the Data holds the buffer")
        joined = nil
        #expect(joined == nil && pool.spareCount == 1)
    }

    @Test("a filling refuses what does not fit, copying none of it")
    func fillingRefusesOverflow() {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        let filling = pool.filling()
        #expect(bytes(60_000, seed: 1).withUnsafeBytes { filling.append($0) })
        #expect(!bytes(5_537, seed: 2).withUnsafeBytes { filling.append($0) })
        #expect(bytes(5_536, seed: 3).withUnsafeBytes { filling.append($0) })
        #expect(filling.count == 65_536)
        #expect(Array(filling.seal()) == bytes(60_000, seed: 1) + bytes(5_536, seed: 3))
    }

    @Test("a filling under a quarter of the buffer is sealed into a Data of its own size, and the buffer goes back at once")
    func smallFillingIsCopied() {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        let filling = pool.filling()
        #expect(bytes(16_383, seed: 4).withUnsafeBytes { filling.append($0) })
        let data = filling.seal()
        #expect(pool.spareCount == 1, "the buffer went back though the Data lives")
        #expect(Array(data) == bytes(16_383, seed: 4))
    }

    @Test("a filling dropped without being sealed gives its buffer back")
    func droppedFillingGivesBack() {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        var filling: ReadCopies.Filling? = pool.filling()
        #expect(bytes(100, seed: 5).withUnsafeBytes { filling!.append($0) })
        #expect(pool.spareCount == 0)
        filling = nil
        #expect(filling == nil && pool.spareCount == 1)
    }

    @Test("a read taken without an exchange, or from a pool not sized like the loop's buffer, is copied")
    func takingFallsBackToCopying() {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        let source = bytes(40_000, seed: 6)
        let data = source.withUnsafeBytes { pool.data(taking: $0, from: nil) }
        #expect(Array(data) == source)
        #expect(data.withUnsafeBytes { $0.baseAddress } != source.withUnsafeBytes { $0.baseAddress })
    }

    // MARK: WaitingReads

    /// Adds each of `sizes` (a negative one as a large read of that many bytes, as it is) and
    /// returns the reads taken, with what was added, in order.
    func waiting(_ sizes: [Int], pool: ReadCopies) -> (taken: [Data], added: [[UInt8]]) {
        var reads = WaitingReads()
        var added: [[UInt8]] = []
        for (index, size) in sizes.enumerated() {
            let piece = bytes(abs(size), seed: UInt8(index))
            added.append(piece)
            if size < 0 { reads.add(Data(piece)) } else { piece.withUnsafeBytes { reads.add(small: $0, copies: pool) } }
        }
        return (reads.take(), added)
    }

    @Test("a small read alone is a Data of its own: no buffer is taken from the pool or made for it")
    func loneSmallReadTakesNoBuffer() {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        var (taken, added) = waiting([100], pool: pool)
        #expect(taken.map(Array.init) == added)
        taken = []
        #expect(taken.isEmpty && pool.spareCount == 0, "a filling would have left its buffer as a spare")
    }

    @Test("small reads in a row join into one Data, large ones stay apart, and the order holds")
    func smallReadsJoinBetweenLargeOnes() {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        let (taken, added) = waiting([1_000, 2_000, 3_000, -40_000, 500, -30_000, 700, 800], pool: pool)
        #expect(taken.map(Array.init) == [
            added[0] + added[1] + added[2], added[3], added[4], added[5], added[6] + added[7],
        ])
    }

    @Test("a run of small reads that fills the buffer goes on in a new Data; one over a quarter of the buffer holds it")
    func fullFillingStartsAgain() {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        var (taken, added) = waiting([16_000, 16_000, 16_000, 16_000, 16_000, 16_000], pool: pool)
        #expect(taken.map(Array.init) == [added[0...3].flatMap { $0 }, added[4] + added[5]])
        #expect(pool.spareCount == 0, "both runs are over a quarter of the buffer: their Data hold the buffers")
        taken = []
        #expect(taken.isEmpty && pool.spareCount == 2)
    }

    /// A pool of 256 KiB buffers (reads under 64 KiB are small) that joins small reads in
    /// 16 KiB buffers of a pool of their own.
    func poolWithFillings() -> (pool: ReadCopies, fillings: ReadCopies) {
        let fillings = ReadCopies(bufferSize: 16_384, maxSpares: 2)
        return (ReadCopies(bufferSize: 262_144, maxSpares: 2, fillings: fillings), fillings)
    }

    @Test("with fillings of their own size, a read of a quarter of one starts a filling, which the delegate gets as it is")
    func quarterReadStartsFilling() {
        let (pool, fillings) = poolWithFillings()
        var joined = waiting([8_000, 8_000], pool: pool)
        #expect(joined.taken.map(Array.init) == [joined.added[0] + joined.added[1]])
        #expect(fillings.spareCount == 0 && pool.spareCount == 0, "the Data holds a filling buffer, not a large one")
        joined.taken = []
        #expect(joined.taken.isEmpty && fillings.spareCount == 1, "the joined reads were not copied out of their buffer")

        var alone = waiting([4_096], pool: pool)
        #expect(alone.taken.map(Array.init) == alone.added)
        #expect(fillings.spareCount == 0, "a read of a quarter of a filling buffer is not copied into a Data of its own")
        alone.taken = []
        #expect(alone.taken.isEmpty && fillings.spareCount == 1)
    }

    @Test("reads past a filling buffer go on in the next one; a small read larger than a filling buffer is a Data of its own")
    func fillingsOfTheirOwnSize() {
        let (pool, fillings) = poolWithFillings()
        var split = waiting([8_000, 8_000, 8_000], pool: pool)
        #expect(split.taken.map(Array.init) == [split.added[0] + split.added[1], split.added[2]])
        split.taken = []
        #expect(split.taken.isEmpty && fillings.spareCount == 2, "both Data held a filling buffer")

        let (mixed, addedMixed) = waiting([1_000, 20_000, 1_000, 3_000, 14_000, 500], pool: pool)
        // 20,000 bytes fit no filling; 14,000 do not fit beside the 1,000 and 3,000 before them, and start another.
        #expect(mixed.map(Array.init) == [addedMixed[0], addedMixed[1], addedMixed[2] + addedMixed[3], addedMixed[4] + addedMixed[5]])
    }

    @Test("take() leaves nothing: the next small read is alone again")
    func takeEmpties() {
        let pool = ReadCopies(bufferSize: 65_536, maxSpares: 2)
        var reads = WaitingReads()
        bytes(10, seed: 1).withUnsafeBytes { reads.add(small: $0, copies: pool) }
        bytes(20, seed: 2).withUnsafeBytes { reads.add(small: $0, copies: pool) }
        #expect(!reads.isEmpty)
        #expect(reads.take().map(Array.init) == [bytes(10, seed: 1) + bytes(20, seed: 2)])
        #expect(reads.isEmpty && reads.take().isEmpty)
        bytes(30, seed: 3).withUnsafeBytes { reads.add(small: $0, copies: pool) }
        #expect(reads.take().map(Array.init) == [bytes(30, seed: 3)])
    }
}
