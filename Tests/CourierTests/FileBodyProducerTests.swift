@testable import Courier
import CourierTransport
import Foundation
import Testing

@Suite("FileBodyProducer: a file body read on the loop when cached, off it otherwise")
struct FileBodyProducerTests {
    /// A file of `count` patterned bytes in the temporary directory, and those bytes.
    func makeFile(_ count: Int) throws -> (URL, [UInt8]) {
        let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 5) }
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("courier-body-\(UUID().uuidString)")
        try Data(bytes).write(to: url)
        return (url, bytes)
    }

    @Test("reads without blocking and blocking reads take turns from the same position, then the end is empty")
    func readsInTurns() throws {
        let (url, expected) = try makeFile(300_000)
        defer { try? FileManager.default.removeItem(at: url) }
        let producer = FileBodyProducer(handle: try FileHandle(forReadingFrom: url))
        defer { producer.finish() }
        var read: [UInt8] = []
        var withoutBlocking = 0
        for turn in 0..<20 {
            if turn % 2 == 0, let ready = producer.readChunkWithoutBlocking(maxLength: 65_536) {
                // The file was just written: its pages are in the page cache.
                let chunk = try ready.get()
                withoutBlocking += 1
                if chunk.isEmpty { break }
                read += chunk
            } else {
                let chunk = try producer.readChunk(maxLength: 40_000)
                if chunk.isEmpty { break }
                read += chunk
            }
        }
        #expect(withoutBlocking > 0, "a cached file is read without blocking")
        #expect(read.count == expected.count)
        // The first differing offset, not the arrays: a failed `==` on this many bytes would
        // have the test library compute their difference.
        #expect(zip(read, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset == nil)
        #expect(try producer.readChunk(maxLength: 10).isEmpty)
        #expect(try producer.readChunkWithoutBlocking(maxLength: 10)?.get().isEmpty == true)
    }

    @Test("after finish, both kinds of read fail")
    func finishCloses() throws {
        let (url, _) = try makeFile(1_000)
        defer { try? FileManager.default.removeItem(at: url) }
        let producer = FileBodyProducer(handle: try FileHandle(forReadingFrom: url))
        producer.finish()
        #expect(throws: BodyReadError.self) { try producer.readChunk(maxLength: 100) }
        let afterFinish = producer.readChunkWithoutBlocking(maxLength: 100)
        #expect(afterFinish != nil)
        #expect(throws: BodyReadError.self) { try afterFinish?.get() }
    }
}
