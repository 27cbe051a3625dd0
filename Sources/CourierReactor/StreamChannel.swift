import CCourierLinux
import CourierCore
import Glibc

/// Receives what happens on a ``StreamChannel``; called on the channel's loop only.
public protocol StreamChannelDelegate: AnyObject {
    /// Bytes arrived. They are lent for the duration of the call (they live in the loop's
    /// shared receive buffer, or in the space ``channelReadSpace(_:)`` gave); keep a copy of
    /// anything needed later.
    func channel(_ channel: StreamChannel, didRead bytes: UnsafeRawBufferPointer)
    /// The peer shut down its sending side; nothing more will be read.
    func channelDidReadEOF(_ channel: StreamChannel)
    /// Every byte handed to ``StreamChannel/write(_:)`` has reached the kernel, after a time
    /// when some could not.
    func channelDidDrainWrites(_ channel: StreamChannel)
    /// Reading or writing failed; the channel is already closed.
    func channel(_ channel: StreamChannel, didFail error: SystemError)
    /// Where the next read goes, asked right before it; nil (the default) for the loop's
    /// shared receive buffer. A delegate that keeps what arrives (TLS keeps ciphertext until
    /// it is decrypted) gives space of its own, and the bytes `channel(_:didRead:)` then lends
    /// are in that space: they need no copy.
    func channelReadSpace(_ channel: StreamChannel) -> UnsafeMutableRawBufferPointer?
}

extension StreamChannelDelegate {
    public func channelReadSpace(_ channel: StreamChannel) -> UnsafeMutableRawBufferPointer? { nil }
}

/// A connected stream socket on an event loop: reads delivered as they arrive, writes queued
/// when the kernel cannot take them, reading paused and resumed for back-pressure.
///
/// Writes are attempted at once; what the kernel does not take is copied into a pending buffer
/// and flushed when the socket becomes writable. Writes never raise SIGPIPE. A failure found
/// inside a call from the delegate is reported on the next turn of the loop, never from inside
/// that call.
public final class StreamChannel: IOEventHandler {
    public let loop: EventLoop
    /// The socket; -1 once closed.
    @exclusivity(unchecked) public private(set) var fd: Int32
    @exclusivity(unchecked) public var delegate: StreamChannelDelegate?
    public let localAddress: SocketAddress?
    public let remoteAddress: SocketAddress?

    @exclusivity(unchecked) private var token: RegistrationToken?
    @exclusivity(unchecked) private var pending = ByteBuffer()
    @exclusivity(unchecked) private var readingPaused = false
    @exclusivity(unchecked) private var peerClosed = false
    @exclusivity(unchecked) private var writeInterest = false
    /// A failure is queued for the next turn; further writes are dropped.
    @exclusivity(unchecked) private var failurePending = false
    /// The socket hung up while reading was paused: it is out of epoll until reading resumes.
    @exclusivity(unchecked) private var hungUpWhilePaused = false
    /// The peer shut down its sending side while reading was paused.
    @exclusivity(unchecked) private var peerHalfClosedWhilePaused = false
    /// Largest number of reads per readiness event, so one busy socket cannot starve the rest.
    private static let maxReadsPerEvent = 4

    /// Adopts a connected, non-blocking socket and registers it with `loop` (loop thread only).
    public init(fd: Int32, loop: EventLoop) throws(SystemError) {
        self.loop = loop
        self.fd = fd
        self.localAddress = Posix.localAddress(fd)
        self.remoteAddress = Posix.remoteAddress(fd)
        if case .unix = remoteAddress {} else { Posix.setNoDelay(fd) }
        do {
            token = try loop.register(fd: fd, interest: [.readable, .readHangup], handler: self)
        } catch {
            Posix.close(fd)
            self.fd = -1
            throw error
        }
    }

    /// True until ``close()`` or a failure.
    public var isOpen: Bool { fd >= 0 }

    /// Bytes accepted by ``write(_:)`` that the kernel has not taken yet.
    public var pendingWriteBytes: Int { pending.readableBytes }

    /// Sends bytes, queueing what the kernel cannot take now.
    public func write(_ bytes: UnsafeRawBufferPointer) {
        guard isOpen, !failurePending, bytes.count > 0 else { return }
        if pending.isEmpty {
            let sent = send(bytes)
            guard sent >= 0 else { return }
            if sent == bytes.count { return }
            pending.write(UnsafeRawBufferPointer(rebasing: bytes[sent...]))
        } else {
            pending.write(bytes)
        }
        updateInterest()
    }

    /// Sends several buffers with one system call where possible (head and body together).
    public func write(_ parts: [UnsafeRawBufferPointer]) {
        guard isOpen, !failurePending else { return }
        guard pending.isEmpty, parts.count > 1 else {
            for part in parts { write(part) }
            return
        }
        let total = parts.reduce(0) { $0 + $1.count }
        var vectors = parts.map { iovec(iov_base: UnsafeMutableRawPointer(mutating: $0.baseAddress), iov_len: $0.count) }
        var header = msghdr()
        let sent = vectors.withUnsafeMutableBufferPointer { buffer -> Int in
            header.msg_iov = buffer.baseAddress
            header.msg_iovlen = buffer.count
            return retryingOnInterrupt { sendmsg(fd, &header, courier_MSG_NOSIGNAL) }
        }
        if sent < 0 {
            if errno == EAGAIN || errno == EWOULDBLOCK {
                for part in parts { pending.write(part) }
                updateInterest()
            } else {
                failSoon(.last("sendmsg"))
            }
            return
        }
        if sent == total { return }
        var skip = sent
        for part in parts {
            if skip >= part.count {
                skip -= part.count
                continue
            }
            pending.write(UnsafeRawBufferPointer(rebasing: part[skip...]))
            skip = 0
        }
        updateInterest()
    }

    /// What waits unread on the socket right now, without consuming it.
    public enum PendingInput: Sendable, Equatable {
        case nothing
        case bytes
        case endOfStream
        case failure
    }

    /// Peeks at the socket (MSG_PEEK, non-blocking): used before reusing an idle connection, so
    /// that bytes a server sent unasked, or a close it made, are seen before a new request
    /// goes out on it.
    public func peekPendingInput() -> PendingInput {
        guard isOpen, !peerClosed else { return .endOfStream }
        var byte: UInt8 = 0
        let count = retryingOnInterrupt { recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) }
        if count > 0 { return .bytes }
        if count == 0 { return .endOfStream }
        return errno == EAGAIN || errno == EWOULDBLOCK ? .nothing : .failure
    }

    /// Stops delivering reads until ``resumeReading()``; the kernel's buffer fills and TCP flow
    /// control slows the peer.
    public func pauseReading() {
        guard isOpen, !readingPaused else { return }
        readingPaused = true
        updateInterest()
    }

    /// Delivers reads again, including any end of stream that arrived while paused.
    public func resumeReading() {
        guard isOpen, readingPaused else { return }
        readingPaused = false
        if hungUpWhilePaused || peerHalfClosedWhilePaused {
            hungUpWhilePaused = false
            peerHalfClosedWhilePaused = false
            updateInterest()
            loop.executeSoon { [self] in readAvailable() }
            return
        }
        updateInterest()
    }

    /// Sends FIN: the peer reads end of stream, and this side can still read.
    public func shutdownWrite() {
        guard isOpen else { return }
        _ = Glibc.shutdown(fd, Int32(SHUT_WR))
    }

    /// Closes the socket at once; pending writes are dropped and the delegate is released.
    public func close() {
        guard isOpen else { return }
        if let token { loop.deregister(token) }
        token = nil
        Posix.close(fd)
        fd = -1
        delegate = nil
    }

    public func handleIOEvents(_ events: IOEvents) {
        guard isOpen else { return }
        if events.contains(.error) {
            if events.contains(.readable) || events.contains(.readHangup) || events.contains(.hangup) {
                readBeforeFailing()
                guard isOpen else { return }
            }
            let code = Posix.pendingError(fd)
            fail(SystemError(events.contains(.writable) ? "send" : "recv", code: code == 0 ? ECONNRESET : code))
            return
        }
        if events.contains(.writable) {
            flushPending()
            guard isOpen else { return }
        }
        if readingPaused {
            if events.contains(.hangup) {
                // Both directions are down and level-triggered epoll would report it forever
                // (EPOLLHUP cannot be masked): leave epoll; the rest is read after resuming.
                stopWatching()
                hungUpWhilePaused = true
            } else if events.contains(.readHangup) {
                // The peer stopped sending. Stop watching for that (it would be reported again
                // and again) but keep watching writability; the end is read after resuming.
                peerHalfClosedWhilePaused = true
                updateInterest()
            }
            return
        }
        if events.contains(.readable) || events.contains(.readHangup) || events.contains(.hangup) {
            readAvailable()
        }
        if isOpen && peerClosed && events.contains(.hangup) {
            // Fully closed and fully read: nothing more can come from epoll but the same
            // hang-up, over and over. Writes will fail on their own.
            stopWatching()
        }
    }

    private func stopWatching() {
        if let token { loop.deregister(token) }
        token = nil
    }

    private func readAvailable() {
        var reads = 0
        while isOpen && !readingPaused && !peerClosed && reads < Self.maxReadsPerEvent {
            let space = delegate?.channelReadSpace(self) ?? loop.readBuffer
            let count = retryingOnInterrupt { Glibc.read(fd, space.baseAddress, space.count) }
            if count > 0 {
                reads += 1
                delegate?.channel(self, didRead: UnsafeRawBufferPointer(rebasing: space[0..<count]))
                if count < space.count { break }
            } else if count == 0 {
                peerClosed = true
                updateInterest()
                delegate?.channelDidReadEOF(self)
                return
            } else {
                if errno == EAGAIN || errno == EWOULDBLOCK { break }
                fail(.last("read"))
                return
            }
        }
        if isOpen && token == nil && !readingPaused && !peerClosed {
            // Back from a hang-up while paused: the socket has more to read or its end.
            loop.executeSoon { [self] in readAvailable() }
        }
    }

    /// Writes what it can; returns the count sent, or -1 after a failure (reported soon).
    private func send(_ bytes: UnsafeRawBufferPointer) -> Int {
        let sent = retryingOnInterrupt { Glibc.send(fd, bytes.baseAddress, bytes.count, courier_MSG_NOSIGNAL) }
        if sent >= 0 { return sent }
        if errno == EAGAIN || errno == EWOULDBLOCK { return 0 }
        failSoon(.last("send"))
        return -1
    }

    private func flushPending() {
        guard !pending.isEmpty else {
            updateInterest()
            return
        }
        let sent = pending.withReadableBytes { send($0) }
        guard sent >= 0 else { return }
        pending.moveReaderIndex(forwardBy: sent)
        updateInterest()
        if pending.isEmpty { delegate?.channelDidDrainWrites(self) }
    }

    private func updateInterest() {
        guard isOpen, let token else { return }
        var interest: IOEvents = []
        if !readingPaused && !peerClosed { interest.insert(.readable) }
        if !peerClosed && !peerHalfClosedWhilePaused { interest.insert(.readHangup) }
        let wantsWrite = !pending.isEmpty
        if wantsWrite { interest.insert(.writable) }
        writeInterest = wantsWrite
        loop.setInterest(token, interest)
    }

    private func failSoon(_ error: SystemError) {
        guard !failurePending else { return }
        failurePending = true
        loop.executeSoon { [self] in
            guard isOpen else { return }
            // A send refused by a reset, as a drain wrote the next part of a body, comes here
            // rather than through an error event: the answer before the reset is read first.
            readBeforeFailing()
            guard isOpen else { return }
            fail(error)
        }
    }

    /// A reset does not take back what had arrived before it: an answer sent just before the
    /// peer reset (a 413 to a body it would not read) is read first, and the read that reaches
    /// the reset reports it.
    private func readBeforeFailing() {
        guard !readingPaused && !peerClosed else { return }
        readAvailable()
    }

    private func fail(_ error: SystemError) {
        let delegate = self.delegate
        close()
        delegate?.channel(self, didFail: error)
    }
}
