import CCourierLinux
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

    /// Whether the file system holding `url` reads with `RWF_NOWAIT` (ext4 and xfs do; tmpfs,
    /// where a temporary directory may be, does not on every kernel): asked of the kernel
    /// directly, so the tests expect what the file system gives.
    func readsWithoutBlocking(_ url: URL) -> Bool {
        let descriptor = open(url.path, O_RDONLY)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var byte: UInt8 = 0
        return courier_read_cached(descriptor, &byte, 1) >= 0
    }

    @Test("reads without blocking and blocking reads take turns from the same position, then the end is empty")
    func readsInTurns() throws {
        let (url, expected) = try makeFile(300_000)
        defer { try? FileManager.default.removeItem(at: url) }
        let supported = readsWithoutBlocking(url)
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
        if supported {
            #expect(withoutBlocking > 0, "a cached file is read without blocking")
        } else {
            #expect(withoutBlocking == 0, "a file system that cannot read without blocking is read the blocking way")
        }
        #expect(read.count == expected.count)
        // The first differing offset, not the arrays: a failed `==` on this many bytes would
        // have the test library compute their difference.
        #expect(zip(read, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset == nil)
        #expect(try producer.readChunk(maxLength: 10).isEmpty)
        if supported {
            #expect(try producer.readChunkWithoutBlocking(maxLength: 10)?.get().isEmpty == true)
        } else {
            #expect(producer.readChunkWithoutBlocking(maxLength: 10) == nil)
        }
    }

    @Test("a file that cannot be read without blocking (procfs) is not asked again, and reads whole the blocking way")
    func unsupportedFileSystem() throws {
        let url = URL(fileURLWithPath: "/proc/self/status")
        #expect(!readsWithoutBlocking(url))
        let producer = FileBodyProducer(handle: try FileHandle(forReadingFrom: url))
        defer { producer.finish() }
        #expect(producer.readChunkWithoutBlocking(maxLength: 4096) == nil)
        let stillAsking = producer.readsWithoutBlocking.load(ordering: .relaxed)
        #expect(!stillAsking)
        #expect(producer.readChunkWithoutBlocking(maxLength: 4096) == nil)
        var text: [UInt8] = []
        while true {
            let chunk = try producer.readChunk(maxLength: 64)
            if chunk.isEmpty { break }
            text += chunk
        }
        #expect(String(decoding: text, as: UTF8.self).hasPrefix("Name:"))
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
