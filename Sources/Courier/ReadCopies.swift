import CourierReactor
import CourierTransport
import CourierSync
import Foundation

/// The `Data` a delegate gets for a large read, in buffers that are used again once it lets the
/// `Data` go.
///
/// A new `Data` for each 64 KiB read of a big download, freed on the delegate queue's thread
/// right after `didReceive data`, let malloc hand the memory back to the kernel and fault it in
/// again for a later read: about 19,400 page faults in a 1 GiB download. With a few spare
/// buffers kept here, 2,300 to 7,900.
///
/// Only reads of at least ``smallest`` bytes use a buffer, so a `Data` the delegate keeps holds
/// at most four times its bytes; smaller ones are copied into a `Data` of their own size.
///
/// The buffers are the size of the event loop's receive buffer, so a read of an HTTP/1 body
/// need not be copied at all: the loop's buffer that holds it becomes the `Data`'s, and a
/// spare takes its place in the loop (``data(taking:from:)``). Copying every byte of a 1 GiB
/// download was a seventh of the client's CPU time.
final class ReadCopies: Sendable {
    /// The one the delegate data sinks share: buffers of the event loop's receive buffer size,
    /// at most 2 spares (512 KiB). With 4, a 1 GiB download peaked 0.5–0.7 MB higher and was
    /// no faster. Small reads are joined in buffers of 32 KiB (``fillings``), at most 8 spares
    /// (256 KiB): a quarter of 32 KiB is an 8 KiB DATA frame, the size nginx sends, so such a
    /// frame starts a filling, and a delivery to a delegate that keeps up (a TLS record or two)
    /// fills about one. A DATA frame split across TLS records arrives in pieces under 8 KiB,
    /// which take the path of a short body (a `Data` of their own, moved into a filling when
    /// another follows).
    static let shared = ReadCopies(
        bufferSize: EventLoop.readBufferSize, maxSpares: 2, fillings: ReadCopies(bufferSize: 32 * 1024, maxSpares: 8)
    )

    let bufferSize: Int
    let smallest: Int
    let maxSpares: Int
    /// Where the buffers that join small reads come from (``filling()``), when not this pool.
    private let separateFillings: ReadCopies?

    /// The pool of the buffers that join small reads: smaller than a large read's, so that a
    /// run of a few HTTP/2 DATA frames is over a quarter of one and is handed to the delegate
    /// where it was joined, not copied again (see ``Filling/seal()``).
    var fillings: ReadCopies { separateFillings ?? self }

    /// A spare buffer, owned by the list that holds it.
    private struct Spare: @unchecked Sendable {
        let buffer: UnsafeMutableRawPointer
    }

    private let spares = Mutex<[Spare]>([])

    /// A pool of `bufferSize` buffers that keeps `maxSpares` of them; small reads are joined in
    /// buffers of `fillings`, or of this pool when nil.
    init(bufferSize: Int, maxSpares: Int, fillings: ReadCopies? = nil) {
        self.bufferSize = bufferSize
        self.smallest = bufferSize / 4
        self.maxSpares = maxSpares
        self.separateFillings = fillings
    }

    deinit {
        spares.withLock { spares in
            for spare in spares { spare.buffer.deallocate() }
        }
    }

    /// A `Data` holding a copy of `bytes`.
    func data(copying bytes: UnsafeRawBufferPointer) -> Data {
        guard bytes.count >= smallest, bytes.count <= bufferSize, let source = bytes.baseAddress else { return Data(bytes) }
        let buffer = spare()
        buffer.copyMemory(from: source, byteCount: bytes.count)
        // Data calls the deallocator when its storage goes, or when a mutation moves the bytes
        // to storage of its own.
        return Data(bytesNoCopy: buffer, count: bytes.count, deallocator: .custom { [self] pointer, _ in recycle(pointer) })
    }

    /// A `Data` over `bytes` where they are, when they are the body bytes `exchange` just
    /// delivered from its loop's receive buffer and it gives the buffer up
    /// (``HTTPExchange/takeReceiveBuffer(holding:replacement:)``); else a copy, as
    /// ``data(copying:)`` makes. Called from inside that delivery.
    func data(taking bytes: UnsafeRawBufferPointer, from exchange: HTTPExchange?) -> Data {
        guard bufferSize == EventLoop.readBufferSize, bytes.count >= smallest, bytes.count <= bufferSize,
              let start = bytes.baseAddress, let exchange,
              let buffer = exchange.takeReceiveBuffer(holding: bytes, replacement: { spare() })
        else { return data(copying: bytes) }
        return Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: start), count: bytes.count, deallocator: .custom { [self] _, _ in
            recycle(buffer)
        })
    }

    /// A spare buffer, or a new one.
    private func spare() -> UnsafeMutableRawPointer {
        spares.withLock { $0.popLast()?.buffer } ?? .allocate(byteCount: bufferSize, alignment: 16)
    }

    /// The spare buffers now.
    var spareCount: Int { spares.withLock { $0.count } }

    /// A buffer of ``fillings`` to copy small reads into one after the other (``Filling``).
    func filling() -> Filling {
        Filling(pool: fillings, buffer: fillings.spare())
    }

    /// Small reads (an HTTP/2 stream's DATA frames, the end of a body) copied one after the
    /// other into one of the pool's buffers, to reach the delegate as one `Data` instead of a
    /// `Data` each: a 1 GiB HTTP/2 download came in 131,000 DATA frames of 8 KiB.
    ///
    /// Used under its owner's lock. A filling dropped unsealed gives its buffer back.
    final class Filling: @unchecked Sendable {
        private let pool: ReadCopies
        private let buffer: UnsafeMutableRawPointer
        private(set) var count = 0
        private var sealed = false

        fileprivate init(pool: ReadCopies, buffer: UnsafeMutableRawPointer) {
            self.pool = pool
            self.buffer = buffer
        }

        deinit {
            if !sealed { pool.recycle(buffer) }
        }

        /// Copies `bytes` in after what is there; false, with nothing copied, when they do not fit.
        func append(_ bytes: UnsafeRawBufferPointer) -> Bool {
            guard bytes.count <= pool.bufferSize - count else { return false }
            if let source = bytes.baseAddress { (buffer + count).copyMemory(from: source, byteCount: bytes.count) }
            count += bytes.count
            return true
        }

        /// The bytes so far as one `Data`; the filling is over. Under a quarter of the buffer
        /// they are copied into a `Data` of their own size and the buffer goes back at once, so
        /// a `Data` the delegate keeps never holds more than four times its bytes.
        func seal() -> Data {
            precondition(!sealed, "a filling is sealed once")
            sealed = true
            guard count >= pool.smallest else {
                defer { pool.recycle(buffer) }
                return Data(bytes: buffer, count: count)
            }
            return Data(bytesNoCopy: buffer, count: count, deallocator: .custom { [pool, buffer] _, _ in pool.recycle(buffer) })
        }
    }

    private func recycle(_ buffer: UnsafeMutableRawPointer) {
        let kept = spares.withLock { spares -> Bool in
            guard spares.count < maxSpares else { return false }
            spares.append(Spare(buffer: buffer))
            return true
        }
        if !kept { buffer.deallocate() }
    }
}

/// Reads waiting for a delegate, in order: each large one its own `Data`, small ones joined.
///
/// A small read that is a quarter of a filling buffer or more starts a ``ReadCopies/Filling``,
/// and the small reads after it join that filling, which reaches the delegate as it is: a
/// 1 GiB HTTP/2 download's 8 KiB DATA frames are copied once each, and arrive as one `Data`
/// per delivery (per filling buffer when a delivery holds more), not one each. A smaller
/// first read is copied into a `Data` of its own size, so that a short body read alone takes
/// no buffer; a second small read moves it into a filling with itself. A small read too large
/// for a filling buffer is a `Data` of its own.
struct WaitingReads {
    private var reads: [Data] = []
    /// Small reads since the last large one, copied into one buffer; sealed into ``reads``
    /// before the next large read and when the reads are taken.
    private var filling: ReadCopies.Filling?
    /// The last of ``reads`` is a small read's own `Data`, which the next small read moves
    /// into a filling.
    private var lastIsSmall = false

    var isEmpty: Bool { reads.isEmpty && filling == nil }

    /// Adds a read as it is: a large one, or bytes held back that join whole.
    mutating func add(_ read: Data) {
        sealFilling()
        reads.append(read)
        lastIsSmall = false
    }

    /// Adds a read under `copies.smallest` bytes, copied.
    mutating func add(small bytes: UnsafeRawBufferPointer, copies: ReadCopies) {
        if let filling {
            if filling.append(bytes) { return }
            sealFilling()
        }
        let fillings = copies.fillings
        let joinsLast = lastIsSmall && reads[reads.count - 1].count + bytes.count <= fillings.bufferSize
        guard bytes.count <= fillings.bufferSize, joinsLast || bytes.count >= fillings.smallest else {
            reads.append(Data(bytes))
            lastIsSmall = bytes.count < fillings.smallest
            return
        }
        let filling = copies.filling()
        if joinsLast { _ = reads.removeLast().withUnsafeBytes { filling.append($0) } }
        _ = filling.append(bytes)
        self.filling = filling
        lastIsSmall = false
    }

    /// The reads, in order; none are left.
    mutating func take() -> [Data] {
        sealFilling()
        lastIsSmall = false
        defer { reads = [] }
        return reads
    }

    private mutating func sealFilling() {
        guard let filling else { return }
        self.filling = nil
        reads.append(filling.seal())
    }
}
