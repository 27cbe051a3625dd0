import CourierCore
import CourierReactor

/// What the transport observed while carrying one request over one connection; the raw
/// material of `URLSessionTaskTransactionMetrics`.
///
/// Its instants are ``PackedInstant``s: the struct is copied a few times an exchange (into the
/// connection's record of it, into the completion, to the task), and eleven
/// `ContinuousClock.Instant?` made each copy and destruction a chain of value-witness calls.
public struct ExchangeMetrics: Sendable {
    /// When the exchange was handed to the transport.
    @PackedInstant public var fetchStart: ContinuousClock.Instant?
    @PackedInstant public var domainLookupStart: ContinuousClock.Instant?
    @PackedInstant public var domainLookupEnd: ContinuousClock.Instant?
    @PackedInstant public var connectStart: ContinuousClock.Instant?
    @PackedInstant public var connectEnd: ContinuousClock.Instant?
    @PackedInstant public var secureConnectionStart: ContinuousClock.Instant?
    @PackedInstant public var secureConnectionEnd: ContinuousClock.Instant?
    @PackedInstant public var requestStart: ContinuousClock.Instant?
    @PackedInstant public var requestEnd: ContinuousClock.Instant?
    @PackedInstant public var responseStart: ContinuousClock.Instant?
    @PackedInstant public var responseEnd: ContinuousClock.Instant?
    /// "http/1.1" or "h2".
    public var networkProtocolName: String?
    /// True when the connection had carried an earlier request.
    public var isReusedConnection = false
    /// The TLS version's wire number (0x0304 for TLS 1.3), for https.
    public var tlsProtocolVersion: UInt16?
    /// The IANA number of the TLS cipher suite, for https.
    public var tlsCipherSuite: UInt16?
    /// The proxy the connection goes through (the remote address is then the proxy's); nil
    /// when direct.
    public var proxy: ProxyServer?
    public var localAddress: SocketAddress?
    public var remoteAddress: SocketAddress?
    /// Bytes of request head and body written.
    public var requestHeaderBytesSent: Int64 = 0
    public var requestBodyBytesSent: Int64 = 0
    /// Bytes of response head and body read, as on the wire (before content decoding).
    public var responseHeaderBytesReceived: Int64 = 0
    public var responseBodyBytesReceived: Int64 = 0

    public init() {}
}

/// A `ContinuousClock.Instant?` stored as its offset from a fixed instant of the process.
///
/// `ContinuousClock.Instant` is a resilient type of the standard library: its layout is not
/// known where it is used, so a struct holding one is copied and destroyed through the
/// runtime's value witnesses, field by field. A `Duration` is frozen (two integers), and
/// `Duration?` copies as plain bytes. Converting costs a call per read or write, and a
/// timestamp is read and written far less often than the struct holding it is copied. The
/// conversion is exact: an instant is a `Duration` inside.
@propertyWrapper
public struct PackedInstant: Sendable {
    /// The instant the offsets count from, read once per process.
    private static let origin = ContinuousClock.now

    private var offset: Duration?

    public init() {
        offset = nil
    }

    public init(wrappedValue: ContinuousClock.Instant?) {
        offset = wrappedValue.map { Self.origin.duration(to: $0) }
    }

    public var wrappedValue: ContinuousClock.Instant? {
        get { offset.map { Self.origin.advanced(by: $0) } }
        set { offset = newValue.map { Self.origin.duration(to: $0) } }
    }
}
