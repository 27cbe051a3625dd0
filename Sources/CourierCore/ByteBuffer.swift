/// A growable run of bytes with a read position and a write position, owning its memory.
///
/// Bytes are appended at `writerIndex` and consumed from `readerIndex`; the readable bytes lie
/// between the two. The buffer is move-only: it owns one heap allocation and frees it once,
/// so a receive or send buffer is never copied by accident on the hot path.
public struct ByteBuffer: ~Copyable {
    private var base: UnsafeMutableRawPointer?
    /// Bytes allocated.
    public private(set) var capacity: Int
    /// Offset of the first readable byte.
    public private(set) var readerIndex: Int = 0
    /// Offset one past the last readable byte; new bytes are written here.
    public private(set) var writerIndex: Int = 0

    /// Creates an empty buffer with room for `capacity` bytes.
    public init(capacity: Int = 0) {
        precondition(capacity >= 0, "capacity must not be negative")
        self.capacity = capacity
        self.base = capacity > 0 ? UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16) : nil
    }

    deinit {
        base?.deallocate()
    }

    /// The number of bytes between the read and the write positions.
    public var readableBytes: Int { writerIndex - readerIndex }

    /// True when there is nothing to read.
    public var isEmpty: Bool { writerIndex == readerIndex }

    /// Lends the readable bytes.
    public func withReadableBytes<R, E: Error>(
        _ body: (UnsafeRawBufferPointer) throws(E) -> R
    ) throws(E) -> R {
        guard let base else { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        return try body(UnsafeRawBufferPointer(start: base + readerIndex, count: readableBytes))
    }

    /// Makes room for at least `minimumCount` bytes after the write position, lends that space,
    /// and advances the write position by the count `body` returns (the bytes it filled).
    @discardableResult
    public mutating func withWritableBytes<E: Error>(
        minimumCount: Int,
        _ body: (UnsafeMutableRawBufferPointer) throws(E) -> Int
    ) throws(E) -> Int {
        reserveWritable(Swift.max(minimumCount, 1))
        let space = UnsafeMutableRawBufferPointer(start: base! + writerIndex, count: capacity - writerIndex)
        let written = try body(space)
        precondition(written >= 0 && written <= space.count, "wrote outside the lent space")
        writerIndex += written
        return written
    }

    /// Consumes `count` readable bytes.
    public mutating func moveReaderIndex(forwardBy count: Int) {
        precondition(count >= 0 && count <= readableBytes, "cannot consume more than is readable")
        readerIndex += count
        if readerIndex == writerIndex {
            readerIndex = 0
            writerIndex = 0
        }
    }

    /// Forgets every byte; keeps the allocation.
    public mutating func clear() {
        readerIndex = 0
        writerIndex = 0
    }

    /// Appends raw bytes.
    public mutating func write(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        reserveWritable(bytes.count)
        (base! + writerIndex).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        writerIndex += bytes.count
    }

    /// Appends the bytes of a collection.
    public mutating func write<C: Collection>(contentsOf bytes: C) where C.Element == UInt8 {
        let done: Void? = bytes.withContiguousStorageIfAvailable { write(UnsafeRawBufferPointer($0)) }
        if done == nil {
            reserveWritable(bytes.count)
            var offset = writerIndex
            for byte in bytes {
                base!.storeBytes(of: byte, toByteOffset: offset, as: UInt8.self)
                offset += 1
            }
            writerIndex = offset
        }
    }

    /// Appends a string's UTF-8 bytes.
    public mutating func write(_ string: String) {
        var string = string
        string.withUTF8 { write(UnsafeRawBufferPointer($0)) }
    }

    /// Appends one byte.
    public mutating func write(byte: UInt8) {
        reserveWritable(1)
        base!.storeBytes(of: byte, toByteOffset: writerIndex, as: UInt8.self)
        writerIndex += 1
    }

    /// Appends a non-negative integer in decimal ASCII.
    public mutating func write(decimal value: Int64) {
        precondition(value >= 0, "only non-negative values are written in decimal")
        writeDigits(UInt64(value), radix: 10)
    }

    /// Appends a non-negative integer in lower-case hexadecimal ASCII (chunk sizes).
    public mutating func write(hexadecimal value: Int) {
        precondition(value >= 0, "only non-negative values are written in hexadecimal")
        writeDigits(UInt64(value), radix: 16)
    }

    /// Copies the readable bytes out into an array.
    public func readableBytesArray() -> [UInt8] {
        withReadableBytes { Array($0) }
    }

    private mutating func writeDigits(_ value: UInt64, radix: UInt64) {
        // 20 decimal digits hold UInt64.max; hexadecimal needs 16.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var value = value
            var count = 0
            repeat {
                let digit = UInt8(truncatingIfNeeded: value % radix)
                digits[19 - count] = digit < 10 ? 0x30 + digit : 0x61 + digit - 10
                value /= radix
                count += 1
            } while value > 0
            write(UnsafeRawBufferPointer(rebasing: UnsafeMutableRawBufferPointer(digits)[(20 - count)...]))
        }
    }

    /// Ensures `count` bytes fit after the write position, first by moving the readable bytes
    /// to the front, then by growing (doubling) the allocation.
    private mutating func reserveWritable(_ count: Int) {
        if capacity - writerIndex >= count { return }
        let readable = readableBytes
        if readerIndex > 0 && capacity - readable >= count {
            base!.copyMemory(from: base! + readerIndex, byteCount: readable)
            readerIndex = 0
            writerIndex = readable
            return
        }
        var newCapacity = Swift.max(capacity, 64)
        while newCapacity - readable < count { newCapacity *= 2 }
        let newBase = UnsafeMutableRawPointer.allocate(byteCount: newCapacity, alignment: 16)
        if let base {
            newBase.copyMemory(from: base + readerIndex, byteCount: readable)
            base.deallocate()
        }
        base = newBase
        capacity = newCapacity
        readerIndex = 0
        writerIndex = readable
    }
}
