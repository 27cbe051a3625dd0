@testable import Courier
import Foundation
import Testing

@Suite("DownloadFile: what is written reads back whole")
struct DownloadFileTests {
    /// `count` bytes of a pattern that differs with `seed`.
    func bytes(_ count: Int, seed: UInt8) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 13) &+ seed }
    }

    @Test("writes below, at and above the buffer and the write slice land in order, byte for byte")
    func writesReadBack() throws {
        let directory = FileManager.default.temporaryDirectory
        let file = try DownloadFile.create(in: directory)
        defer { file.remove() }
        let slice = DownloadFile.writeSliceSize, buffer = DownloadFile.bufferSize
        // Small writes gathered in the buffer, a write that overflows it, writes of exactly the
        // buffer and of several slices plus a remainder (written past the buffer, in slices).
        let sizes = [1, 100, slice - 1, buffer - 50, slice + 1, buffer, 3 * slice + 17, 5, buffer + slice + 3]
        var expected: [UInt8] = []
        for (index, size) in sizes.enumerated() {
            let part = bytes(size, seed: UInt8(index))
            #expect(part.withUnsafeBytes { file.write($0) })
            expected += part
        }
        #expect(file.close())
        let written = [UInt8](try Data(contentsOf: file.url))
        #expect(written.count == expected.count)
        // The first differing offset, not the arrays: a failed `==` on a megabyte of bytes
        // would have the test library compute their difference.
        let firstDifference = zip(written, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        #expect(firstDifference == nil)
    }
}
