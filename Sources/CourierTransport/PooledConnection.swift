import CourierCore
import CourierReactor
import Foundation

/// What a pool driver needs of a connection, whatever protocol it speaks. Called on the
/// connection's loop.
protocol PooledConnection: AnyObject {
    var loop: EventLoop { get }
    /// Carries an exchange (HTTP/1: the only one; HTTP/2: one more stream).
    func execute(_ exchange: HTTPExchange)
    /// Cancels an exchange the connection carries.
    func cancel(_ exchange: HTTPExchange)
    /// Pauses or resumes the delivery of an exchange's response.
    func setReadingPaused(_ paused: Bool, for exchange: HTTPExchange)
    /// Closes at once; exchanges still carried fail.
    func close()
    func schedulePoolIdleTimer(_ delay: Duration)
    func cancelPoolIdleTimer()
    /// Takes the connection out of HTTP for `exchange`, whose head has arrived and none of
    /// whose body has been delivered: nil when that cannot be (HTTP/2 multiplexes, or the
    /// exchange is not where that holds).
    func detach(_ exchange: HTTPExchange) -> UpgradedConnection?
    /// See ``HTTPExchange/takeReceiveBuffer(holding:replacement:)``.
    func takeReceiveBuffer(
        holding bytes: UnsafeRawBufferPointer, for exchange: HTTPExchange, replacement: () -> UnsafeMutableRawPointer
    ) -> UnsafeMutableRawPointer?
}

extension HTTP1Connection: PooledConnection {}

extension HTTPExchange {
    /// Claims a retry after the exchange's connection failed before any response byte: a stale
    /// keep-alive connection gets one (`requireIdempotent`: only for a method that may be
    /// repeated, with a body that can be sent again); a stream an HTTP/2 server refused (never
    /// processed, so any method) gets up to `allowed`, since a server that caps the requests of
    /// each connection refuses the retries too until one lands within a cap.
    func claimRetry(requireIdempotent: Bool, allowed: Int = 1) -> Bool {
        if requireIdempotent && !(request.head.method.isIdempotent && request.body.isReplayable) { return false }
        if !requireIdempotent && !request.body.isReplayable { return false }
        return state.withLock { state in
            guard state.retries < allowed else { return false }
            if case .finished = state.phase { return false }
            state.retries += 1
            state.phase = .created
            return true
        }
    }
}

extension HTTPExchange {
    /// Hands the exchange to `connection`: nil when it finished or was cancelled on its way
    /// there (the connection then fails it), else whether it was asked to pause before it
    /// arrived.
    func claim(for connection: any PooledConnection) -> Bool? {
        state.withLock { state -> Bool? in
            if case .finished = state.phase { return nil }
            // Cancelled between the pool and here: nobody else will see it now.
            if state.cancelRequested { return nil }
            state.phase = .executing(ConnectionHandle(connection: connection))
            return state.pausedEarly
        }
    }
}

/// When a connection was dialed: the name lookup (nil for a numeric host) and the connect
/// (through the proxy's tunnel, when there is one); and the proxy it goes through.
struct ConnectTimings: Sendable {
    var resolutionStart: MonotonicInstant?
    var resolutionEnd: MonotonicInstant?
    var start: MonotonicInstant
    var end: MonotonicInstant
    var proxy: ProxyServer?
}

extension ExchangeMetrics {
    /// The metrics of an exchange starting on `stream`: the connection's own timings only for
    /// the first exchange it carries, its TLS details and addresses for every one, all only
    /// when the request collects timings (nobody reads them otherwise). `details` is the
    /// connection's shared ``ConnectionDetails``, made here for the first exchange that records them.
    init(
        for exchange: HTTPExchange, on stream: any TransportStream, reused: Bool,
        connectTimings: ConnectTimings, protocolName: StaticString, details: inout ConnectionDetails?
    ) {
        self.init()
        isReusedConnection = reused
        self.protocolName = protocolName
        guard exchange.request.collectsTimings else { return }
        fetchStart = exchange.createdAt
        if !reused {
            domainLookupStart = connectTimings.resolutionStart
            domainLookupEnd = connectTimings.resolutionEnd
            connectStart = connectTimings.start
            connectEnd = stream.tls?.handshakeEnd ?? connectTimings.end
            secureConnectionStart = stream.tls?.handshakeStart
            secureConnectionEnd = stream.tls?.handshakeEnd
        }
        if details == nil { details = ConnectionDetails(stream: stream, proxy: connectTimings.proxy) }
        connection = details
    }
}

extension ConnectionDetails {
    /// The details of a connection over `stream`, as they stand once the stream is ready.
    convenience init(stream: any TransportStream, proxy: ProxyServer?) {
        self.init(
            tlsProtocolVersion: stream.tls?.version?.rawValue, tlsCipherSuite: stream.tls?.cipherSuite, proxy: proxy,
            localAddress: stream.localAddress, remoteAddress: stream.remoteAddress
        )
    }
}

extension RequestBodyProducer {
    /// Reads the next chunk of a streamed body and hands the outcome to `deliver` on `loop`,
    /// after the current event: at once when the producer has it without blocking, else off
    /// the loop (the producer may block).
    func readChunk(
        maxLength: Int, deliveringOn loop: EventLoop,
        _ deliver: @escaping @Sendable (Result<Data, BodyStreamFailure>) -> Void
    ) {
        if loop.inEventLoop, let ready = readChunkWithoutBlocking(maxLength: maxLength) {
            let outcome = ready.mapError { BodyStreamFailure(message: "\($0)") }
            loop.executeSoon { deliver(outcome) }
            return
        }
        readChunk(maxLength: maxLength) { (result: Result<Data, any Error>) in
            let outcome = result.mapError { BodyStreamFailure(message: "\($0)") }
            loop.execute { deliver(outcome) }
        }
    }
}
