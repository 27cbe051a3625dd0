import CourierCore
import Testing
import _CourierTestSupport

/// The readable bytes of a buffer, decoded as UTF-8 (every test here writes ASCII).
private func text(_ buffer: borrowing ByteBuffer) -> String {
    String(decoding: buffer.readableBytesArray(), as: UTF8.self)
}

/// A small deterministic generator, so the interleaving test is repeatable.
@Suite("ByteBuffer")
struct ByteBufferTests {
    // MARK: Empty buffers

    @Test("a new buffer is empty and owns nothing")
    func newBufferIsEmpty() {
        let buffer = ByteBuffer()
        let (isEmpty, readable, reader, writer, capacity) =
            (buffer.isEmpty, buffer.readableBytes, buffer.readerIndex, buffer.writerIndex, buffer.capacity)
        #expect(isEmpty)
        #expect(readable == 0)
        #expect(reader == 0)
        #expect(writer == 0)
        #expect(capacity == 0)
        #expect(buffer.readableBytesArray() == [])
        let lent = buffer.withReadableBytes { $0.count }
        #expect(lent == 0)
    }

    @Test("init(capacity:) allocates the room asked for")
    func initialCapacity() {
        let buffer = ByteBuffer(capacity: 32)
        let (capacity, isEmpty) = (buffer.capacity, buffer.isEmpty)
        #expect(capacity == 32)
        #expect(isEmpty)
    }

    @Test("writing nothing leaves the buffer as it was")
    func emptyWrites() {
        var buffer = ByteBuffer()
        buffer.write("")
        buffer.write(contentsOf: [UInt8]())
        buffer.write(UnsafeRawBufferPointer(start: nil, count: 0))
        let (isEmpty, writer) = (buffer.isEmpty, buffer.writerIndex)
        #expect(isEmpty)
        #expect(writer == 0)
    }

    // MARK: Writing and reading

    @Test("every write method appends in order")
    func writesAppendInOrder() {
        var buffer = ByteBuffer()
        buffer.write("GET")
        buffer.write(byte: UInt8(ascii: " "))
        buffer.write(contentsOf: Array("/index".utf8))
        let raw: [UInt8] = Array(".html".utf8)
        raw.withUnsafeBytes { buffer.write($0) }
        buffer.write(contentsOf: repeatElement(UInt8(ascii: "!"), count: 3))
        #expect(text(buffer) == "GET /index.html!!!")
        let (readable, writer, reader) = (buffer.readableBytes, buffer.writerIndex, buffer.readerIndex)
        #expect(readable == 18)
        #expect(writer == 18)
        #expect(reader == 0)
    }

    @Test("withReadableBytes lends exactly the readable bytes")
    func withReadableBytesLendsReadable() {
        var buffer = ByteBuffer()
        buffer.write("skip-keep")
        buffer.moveReaderIndex(forwardBy: 5)
        let lent = buffer.withReadableBytes { Array($0) }
        #expect(lent == Array("keep".utf8))
    }

    @Test("withReadableBytes passes the body's result and error through")
    func withReadableBytesThrows() {
        struct Refused: Error, Equatable {}
        var buffer = ByteBuffer()
        buffer.write("abc")
        let count = buffer.withReadableBytes { $0.count * 2 }
        #expect(count == 6)
        do {
            try buffer.withReadableBytes { (_: UnsafeRawBufferPointer) throws(Refused) -> Void in throw Refused() }
            Issue.record("the body's error was swallowed")
        } catch {
            #expect(error == Refused())
        }
        #expect(text(buffer) == "abc")
    }

    @Test("moveReaderIndex consumes from the front")
    func moveReaderIndexConsumes() {
        var buffer = ByteBuffer()
        buffer.write("hello world")
        buffer.moveReaderIndex(forwardBy: 6)
        let (reader, writer, readable) = (buffer.readerIndex, buffer.writerIndex, buffer.readableBytes)
        #expect(reader == 6)
        #expect(writer == 11)
        #expect(readable == 5)
        #expect(text(buffer) == "world")
        buffer.moveReaderIndex(forwardBy: 0)
        #expect(text(buffer) == "world")
    }

    @Test("consuming every readable byte rewinds both indices and keeps the allocation")
    func consumingEverythingRewinds() {
        var buffer = ByteBuffer(capacity: 16)
        buffer.write("0123456789")
        buffer.moveReaderIndex(forwardBy: 4)
        buffer.moveReaderIndex(forwardBy: 6)
        let (isEmpty, reader, writer, capacity) = (buffer.isEmpty, buffer.readerIndex, buffer.writerIndex, buffer.capacity)
        #expect(isEmpty)
        #expect(reader == 0)
        #expect(writer == 0)
        #expect(capacity == 16)
        buffer.write("next")
        #expect(text(buffer) == "next")
    }

    @Test("clear forgets the bytes and keeps the allocation")
    func clearKeepsCapacity() {
        var buffer = ByteBuffer(capacity: 8)
        buffer.write("abcdef")
        buffer.moveReaderIndex(forwardBy: 2)
        buffer.clear()
        let (isEmpty, reader, writer, capacity) = (buffer.isEmpty, buffer.readerIndex, buffer.writerIndex, buffer.capacity)
        #expect(isEmpty)
        #expect(reader == 0)
        #expect(writer == 0)
        #expect(capacity == 8)
        buffer.write("xy")
        #expect(text(buffer) == "xy")
    }

    // MARK: Growth and compaction

    @Test("growing keeps the readable bytes")
    func growthPreservesContent() {
        var buffer = ByteBuffer(capacity: 4)
        buffer.write("abc")
        buffer.write("defghijklmnopqrstuvwxyz")
        #expect(text(buffer) == "abcdefghijklmnopqrstuvwxyz")
        let (capacity, writer) = (buffer.capacity, buffer.writerIndex)
        #expect(capacity >= 26)
        #expect(writer == 26)
    }

    @Test("a buffer created without capacity grows on first write")
    func growthFromZero() {
        var buffer = ByteBuffer()
        buffer.write(byte: 0x41)
        let capacity = buffer.capacity
        #expect(capacity >= 1)
        #expect(buffer.readableBytesArray() == [0x41])
    }

    @Test("growing after reads keeps only the unread bytes, moved to the front")
    func growthAfterReads() {
        var buffer = ByteBuffer(capacity: 8)
        buffer.write("abcdefgh")
        buffer.moveReaderIndex(forwardBy: 2)
        buffer.write("12345")
        #expect(text(buffer) == "cdefgh12345")
        let (reader, writer, capacity) = (buffer.readerIndex, buffer.writerIndex, buffer.capacity)
        #expect(reader == 0)
        #expect(writer == 11)
        #expect(capacity >= 11)
    }

    @Test("a write that fits once read bytes are dropped compacts instead of growing")
    func compactionWhenReaderAdvanced() {
        var buffer = ByteBuffer(capacity: 16)
        buffer.write("0123456789AB")
        buffer.moveReaderIndex(forwardBy: 8)
        // 4 bytes of room at the end, 12 once the 8 read bytes are dropped.
        buffer.write("cdefgh")
        #expect(text(buffer) == "89ABcdefgh")
        let (reader, writer, capacity) = (buffer.readerIndex, buffer.writerIndex, buffer.capacity)
        #expect(capacity == 16)
        #expect(reader == 0)
        #expect(writer == 10)
    }

    @Test("a write that fits at the end moves nothing")
    func noCompactionWhenRoomAtEnd() {
        var buffer = ByteBuffer(capacity: 16)
        buffer.write("abcd")
        buffer.moveReaderIndex(forwardBy: 2)
        buffer.write("efgh")
        #expect(text(buffer) == "cdefgh")
        let (reader, writer, capacity) = (buffer.readerIndex, buffer.writerIndex, buffer.capacity)
        #expect(reader == 2)
        #expect(writer == 8)
        #expect(capacity == 16)
    }

    @Test("a collection without contiguous storage is copied byte by byte, growing as needed")
    func nonContiguousCollectionGrows() {
        var buffer = ByteBuffer(capacity: 2)
        buffer.write("<")
        buffer.write(contentsOf: (0..<300).lazy.map { UInt8(truncatingIfNeeded: $0) })
        let bytes = buffer.readableBytesArray()
        #expect(bytes.count == 301)
        #expect(bytes.first == UInt8(ascii: "<"))
        #expect(Array(bytes.dropFirst()) == (0..<300).map { UInt8(truncatingIfNeeded: $0) })
    }

    @Test("interleaved writes and reads behave as a FIFO queue of bytes")
    func interleavedWritesAndReads() {
        var random = SplitMix64(seed: 0xC0FFEE)
        var buffer = ByteBuffer(capacity: 7)
        var model: [UInt8] = []
        var modelStart = 0
        var next: UInt8 = 0
        for step in 0..<2_000 {
            if random.below(3) < 2 {
                let count = random.below(150)
                var chunk: [UInt8] = []
                for _ in 0..<count {
                    chunk.append(next)
                    next &+= 1
                }
                if step % 2 == 0 {
                    buffer.write(contentsOf: chunk)
                } else {
                    buffer.write(contentsOf: chunk.lazy.map { $0 })
                }
                model.append(contentsOf: chunk)
            } else {
                let available = model.count - modelStart
                let count = random.below(available + 1)
                buffer.moveReaderIndex(forwardBy: count)
                modelStart += count
            }
            let readable = buffer.readableBytes
            if readable != model.count - modelStart {
                Issue.record("step \(step): \(readable) readable bytes, expected \(model.count - modelStart)")
                return
            }
        }
        #expect(buffer.readableBytesArray() == Array(model[modelStart...]))
    }

    // MARK: Numbers

    @Test("write(decimal:) writes base-10 ASCII without padding", arguments: [
        (Int64(0), "0"), (7, "7"), (10, "10"), (99, "99"), (100, "100"), (1_234_567_890, "1234567890"),
        (4_294_967_296, "4294967296"), (Int64.max, "9223372036854775807"),
    ])
    func decimal(_ value: Int64, _ expected: String) {
        var buffer = ByteBuffer()
        buffer.write(decimal: value)
        #expect(text(buffer) == expected)
    }

    @Test("write(hexadecimal:) writes lower-case base-16 ASCII without padding", arguments: [
        (0, "0"), (9, "9"), (10, "a"), (15, "f"), (16, "10"), (255, "ff"), (256, "100"), (4096, "1000"),
        (0xDEAD_BEEF, "deadbeef"), (Int.max, "7fffffffffffffff"),
    ])
    func hexadecimal(_ value: Int, _ expected: String) {
        var buffer = ByteBuffer()
        buffer.write(hexadecimal: value)
        #expect(text(buffer) == expected)
    }

    @Test("numbers are appended after what is already there, also across growth")
    func numbersAppend() {
        var buffer = ByteBuffer(capacity: 4)
        buffer.write("Content-Length: ")
        buffer.write(decimal: Int64.max)
        buffer.write("; ")
        buffer.write(hexadecimal: 0xABC)
        buffer.write(decimal: 0)
        #expect(text(buffer) == "Content-Length: 9223372036854775807; abc0")
    }

    // MARK: withWritableBytes

    @Test("withWritableBytes lends at least minimumCount bytes and advances by the returned count")
    func withWritableBytesAdvances() {
        var buffer = ByteBuffer()
        buffer.write("ab")
        var lentCount = 0
        let written = buffer.withWritableBytes(minimumCount: 8) { space in
            lentCount = space.count
            space[0] = UInt8(ascii: "c")
            space[1] = UInt8(ascii: "d")
            space[2] = UInt8(ascii: "e")
            // Scribbled past the returned count: must not become readable.
            space[3] = UInt8(ascii: "X")
            return 3
        }
        #expect(written == 3)
        #expect(lentCount >= 8)
        #expect(text(buffer) == "abcde")
        let writer = buffer.writerIndex
        #expect(writer == 5)
        buffer.write("f")
        #expect(text(buffer) == "abcdef")
    }

    @Test("withWritableBytes returning zero writes nothing")
    func withWritableBytesZero() {
        var buffer = ByteBuffer(capacity: 4)
        buffer.write("xy")
        let written = buffer.withWritableBytes(minimumCount: 100) { _ in 0 }
        #expect(written == 0)
        #expect(text(buffer) == "xy")
        let (writer, capacity) = (buffer.writerIndex, buffer.capacity)
        #expect(writer == 2)
        #expect(capacity >= 102)
    }

    @Test("withWritableBytes compacts or grows first, so the lent space follows the readable bytes")
    func withWritableBytesAfterReads() {
        var buffer = ByteBuffer(capacity: 8)
        buffer.write("abcdefgh")
        buffer.moveReaderIndex(forwardBy: 6)
        buffer.withWritableBytes(minimumCount: 4) { space in
            for (offset, byte) in "1234".utf8.enumerated() { space[offset] = byte }
            return 4
        }
        #expect(text(buffer) == "gh1234")
    }

    @Test("withWritableBytes leaves the write position alone when the body throws")
    func withWritableBytesThrowing() {
        struct Stop: Error, Equatable {}
        var buffer = ByteBuffer()
        buffer.write("keep")
        do {
            try buffer.withWritableBytes(minimumCount: 4) { (space: UnsafeMutableRawBufferPointer) throws(Stop) -> Int in
                space[0] = 0x21
                throw Stop()
            }
            Issue.record("the body's error was swallowed")
        } catch {
            #expect(error == Stop())
        }
        #expect(text(buffer) == "keep")
        let writer = buffer.writerIndex
        #expect(writer == 4)
    }

    @Test("a large amount written through withWritableBytes reads back intact")
    func withWritableBytesLarge() {
        var buffer = ByteBuffer()
        var expected: [UInt8] = []
        for round in 0..<20 {
            let count = 1_000 + round * 37
            buffer.withWritableBytes(minimumCount: count) { space in
                for index in 0..<count { space[index] = UInt8(truncatingIfNeeded: index &+ round) }
                return count
            }
            expected.append(contentsOf: (0..<count).map { UInt8(truncatingIfNeeded: $0 &+ round) })
        }
        #expect(buffer.readableBytesArray() == expected)
    }
}
