import CourierReactor
import CourierTLS

/// Receives what happens on a ``TransportStream``; called on the stream's loop.
protocol TransportStreamDelegate: AnyObject {
    /// Plaintext arrived, lent for the call.
    func streamDidRead(_ bytes: UnsafeRawBufferPointer)
    /// The peer finished sending. `cleanly` is false when TLS ended without close_notify, so
    /// a body delimited by the close may have been cut short.
    func streamDidReadEOF(cleanly: Bool)
    /// Everything written has been handed to the kernel.
    func streamDidDrainWrites()
    /// The stream failed; it is closed.
    func streamDidFail(_ error: TransportError)
}

/// A stream delegate that passes every event on to `target`, which it refers to without a weak
/// reference: a connection's stand-in as its stream's delegate, since a stream holds its
/// delegate weakly and a weak reference gives its object a side table (see
/// ``HTTP1Connection/StreamEvents``).
protocol StreamEventsForwarder: TransportStreamDelegate {
    associatedtype Target: TransportStreamDelegate
    /// The connection, until it closes or hands its stream off: an event after that finds
    /// nil and is dropped.
    var target: Target? { get }
}

extension StreamEventsForwarder {
    func streamDidRead(_ bytes: UnsafeRawBufferPointer) { target?.streamDidRead(bytes) }
    func streamDidReadEOF(cleanly: Bool) { target?.streamDidReadEOF(cleanly: cleanly) }
    func streamDidDrainWrites() { target?.streamDidDrainWrites() }
    func streamDidFail(_ error: TransportError) { target?.streamDidFail(error) }
}

/// What the TLS handshake settled, for metrics.
struct TLSDetails: Sendable {
    var version: TLSVersion?
    var cipherSuite: UInt16?
    var cipherName: String?
    var applicationProtocol: String?
    var isSessionResumed: Bool
    var handshakeStart: MonotonicInstant
    var handshakeEnd: MonotonicInstant
}

/// A connected byte stream on one event loop: plain TCP or TLS over it.
protocol TransportStream: AnyObject {
    var loop: EventLoop { get }
    var delegate: TransportStreamDelegate? { get set }
    var pendingWriteBytes: Int { get }
    var localAddress: SocketAddress? { get }
    var remoteAddress: SocketAddress? { get }
    /// Set for TLS streams.
    var tls: TLSDetails? { get }
    func write(_ parts: [UnsafeRawBufferPointer])
    /// Writes one buffer: ``write(_:)-([UnsafeRawBufferPointer])`` without an array to allocate.
    func write(_ bytes: UnsafeRawBufferPointer)
    /// True when the connection cannot carry a new request cleanly: unread bytes wait on it, or
    /// the peer closed it.
    var isUnfitForReuse: Bool { get }
    func pauseReading()
    func resumeReading()
    /// Closes at once (after queueing close_notify on TLS); the delegate is released.
    func close()
    /// Ends this side's bytes: TLS queues close_notify, and nothing more is written. The FIN
    /// follows with ``shutdownWrite()`` once the queued bytes have drained. Reading goes on.
    func finishWriting()
    /// Sends FIN now; queued bytes not yet handed to the kernel are lost, so call it drained.
    func shutdownWrite()
}

/// A plain TCP stream: a stream channel with the delegate calls renamed.
final class PlainStream: TransportStream, StreamChannelDelegate {
    let channel: StreamChannel
    weak var delegate: TransportStreamDelegate?

    init(channel: StreamChannel) {
        self.channel = channel
        channel.delegate = self
    }

    var loop: EventLoop { channel.loop }
    var pendingWriteBytes: Int { channel.pendingWriteBytes }
    var localAddress: SocketAddress? { channel.localAddress }
    var remoteAddress: SocketAddress? { channel.remoteAddress }
    var tls: TLSDetails? { nil }

    func write(_ parts: [UnsafeRawBufferPointer]) { channel.write(parts) }
    func write(_ bytes: UnsafeRawBufferPointer) { channel.write(bytes) }
    var isUnfitForReuse: Bool { channel.peekPendingInput() != .nothing }
    func pauseReading() { channel.pauseReading() }
    func resumeReading() { channel.resumeReading() }

    func close() {
        delegate = nil
        channel.close()
    }

    func finishWriting() {}
    func shutdownWrite() { channel.shutdownWrite() }

    func channel(_ channel: StreamChannel, didRead bytes: UnsafeRawBufferPointer) {
        delegate?.streamDidRead(bytes)
    }

    func channelDidReadEOF(_ channel: StreamChannel) {
        delegate?.streamDidReadEOF(cleanly: true)
    }

    func channelDidDrainWrites(_ channel: StreamChannel) {
        delegate?.streamDidDrainWrites()
    }

    func channel(_ channel: StreamChannel, didFail error: SystemError) {
        let delegate = self.delegate
        self.delegate = nil
        delegate?.streamDidFail(.connectionLost(error))
    }
}
