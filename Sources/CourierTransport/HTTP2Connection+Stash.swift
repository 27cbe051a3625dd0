import CourierCore

/// Pausing and resuming a stream's reading: what arrives while it is paused waits in its stash,
/// uncredited, so flow control stops that stream's sender while the others go on.
extension HTTP2Connection {
    /// DATA that came for a paused stream, waiting for the delegate in order.
    struct Stash {
        /// The bytes; the first `delivered` of them have gone to the delegate.
        private(set) var bytes: [UInt8] = []
        private var delivered = 0
        /// True while a resume hands the stash on (``HTTP2Connection/deliverStash(_:_:)``).
        var isBeingDelivered = false

        /// Bytes waiting for the delegate.
        var waiting: Int { bytes.count - delivered }

        /// Adds DATA after what waits.
        ///
        /// Past its first megabyte the stash takes room for the whole stream window (`window`;
        /// it cannot grow past it) at once. Grown by doubling, a window of 8 MiB had up to
        /// 16 MiB of storage, two buffers alive while one was copied to the other: the 1 GiB
        /// TLS download to a file peaked at 51 MB of RSS in three runs of six, against 33.
        mutating func append(_ data: UnsafeRawBufferPointer, window: Int) {
            if bytes.count >= Self.sizeBeforeWholeWindow, bytes.capacity - bytes.count < data.count {
                bytes.reserveCapacity(max(window, bytes.count + data.count))
            }
            bytes += data
        }

        /// Marks the next bytes, at most `limit` of them, delivered; their range in `bytes`.
        mutating func takeSlice(upTo limit: Int) -> Range<Int> {
            let start = delivered
            delivered = min(bytes.count, start + limit)
            return start..<delivered
        }

        /// Forgets what was delivered. When some still waits (the stream was paused again) it
        /// moves to the front, in place, so that the stash, with what comes until the window
        /// closes, stays within the room reserved for the window.
        mutating func dropDelivered() {
            if waiting == 0 {
                bytes.removeAll(keepingCapacity: true)
            } else {
                bytes.removeFirst(delivered)
            }
            delivered = 0
        }

        /// A stash larger than this is given room for the whole window when it must grow.
        static let sizeBeforeWholeWindow = 1 << 20
    }

    /// The most of a stash handed to the delegate in one call.
    static let stashSlice = 256 * 1024

    func setReadingPaused(_ paused: Bool, for exchange: HTTPExchange) {
        guard let streamID = streamID(of: exchange), let current = streams[streamID] else { return }
        guard current.paused != paused else { return }
        current.paused = paused
        current.lastActivity = .now
        // A resume from inside the delivery (the delegate paused and resumed while taking a
        // slice) leaves the rest to the delivery under way.
        if !paused && !current.stash.isBeingDelivered { deliverStash(streamID, current) }
        // The delegate may have paused again while taking the stash.
        if !paused, let after = streams[streamID], !after.paused, after.stash.waiting == 0, after.endedWhilePaused {
            finishStream(streamID, .success(after.trailers))
        }
        flush()
    }

    /// Hands a resumed stream's stash to the delegate in slices, stopping when it pauses again:
    /// the rest stays stashed, and uncredited, for the next resume.
    ///
    /// Design note: given the stash (up to the stream's window, then always 8 MiB) in one
    /// call, a download task's writer, paused for its backlog, took it all at once into chunks
    /// of its own, and a 1 GiB TLS download to a file peaked at 51–61 MB of RSS instead of 33.
    private func deliverStash(_ streamID: Int32, _ current: Stream) {
        current.stash.isBeingDelivered = true
        defer { current.stash.isBeingDelivered = false }
        let exchange = current.exchange
        while !current.paused, current.stash.waiting > 0, streams[streamID] === current {
            // A local reference: bytes stashed meanwhile would append to a copy, not to these.
            let bytes = current.stash.bytes
            let slice = current.stash.takeSlice(upTo: Self.stashSlice)
            bytes.withUnsafeBytes { exchange.delegate.exchange(exchange, didReceiveBodyBytes: UnsafeRawBufferPointer(rebasing: $0[slice])) }
            session.consume(streamID: streamID, count: slice.count)
        }
        current.stash.dropDelivered()
        // Handed over at once, the stash tells nothing of how fast the stream runs.
        current.window.restart()
    }
}
