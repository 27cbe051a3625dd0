import CourierCore
import CourierReactor

/// What the transport observed while carrying one request over one connection; the raw
/// material of `URLSessionTaskTransactionMetrics`.
///
/// The struct is copied a few times an exchange (into the connection's record of it, into the
/// completion, to the task), so it is kept small and nearly free of references: its instants
/// are ``PackedInstant``s (sixteen bytes each, where an optional instant takes 24), and what belongs to the connection rather than to
/// the exchange (TLS, proxy, addresses) is one shared ``ConnectionDetails``, made once per
/// connection.
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
    /// The connection's details; nil when they were not recorded (the request collected no
    /// timings) or no connection was made.
    public var connection: ConnectionDetails?
    /// Bytes of request head and body written.
    public var requestHeaderBytesSent: Int64 = 0
    public var requestBodyBytesSent: Int64 = 0
    /// Bytes of response head and body read, as on the wire (before content decoding).
    public var responseHeaderBytesReceived: Int64 = 0
    public var responseBodyBytesReceived: Int64 = 0

    public init() {}

    /// The TLS version's wire number (0x0304 for TLS 1.3), for https.
    public var tlsProtocolVersion: UInt16? { connection?.tlsProtocolVersion }
    /// The IANA number of the TLS cipher suite, for https.
    public var tlsCipherSuite: UInt16? { connection?.tlsCipherSuite }
    public var localAddress: SocketAddress? { connection?.localAddress }
    public var remoteAddress: SocketAddress? { connection?.remoteAddress }

    /// The proxy the connection goes through (the remote address is then the proxy's); nil
    /// when direct. Set for a dial that failed at its proxy, with no connection made.
    public var proxy: ProxyServer? {
        get { connection?.proxy }
        set {
            connection = ConnectionDetails(
                tlsProtocolVersion: tlsProtocolVersion, tlsCipherSuite: tlsCipherSuite, proxy: newValue,
                localAddress: localAddress, remoteAddress: remoteAddress
            )
        }
    }
}

/// What every exchange on one connection shares in its metrics: the TLS parameters, the proxy
/// and the two addresses.
public final class ConnectionDetails: Sendable {
    public let tlsProtocolVersion: UInt16?
    public let tlsCipherSuite: UInt16?
    public let proxy: ProxyServer?
    public let localAddress: SocketAddress?
    public let remoteAddress: SocketAddress?

    public init(
        tlsProtocolVersion: UInt16?, tlsCipherSuite: UInt16?, proxy: ProxyServer?,
        localAddress: SocketAddress?, remoteAddress: SocketAddress?
    ) {
        self.tlsProtocolVersion = tlsProtocolVersion
        self.tlsCipherSuite = tlsCipherSuite
        self.proxy = proxy
        self.localAddress = localAddress
        self.remoteAddress = remoteAddress
    }
}

/// A `ContinuousClock.Instant?` stored as its offset from a fixed instant of the process, in
/// sixteen bytes.
///
/// `ContinuousClock.Instant` is a resilient type of the standard library: its layout is not
/// known where it is used, so a struct holding one is copied and destroyed through the
/// runtime's value witnesses, field by field. A `Duration` is frozen (two integers) and copies
/// as plain bytes; nil is the least `Duration` (its high word `Int64.min`), which no
/// difference of two instants comes near, and which keeps the optional's extra byte and
/// padding out. Converting costs a
/// call per read or write, and a timestamp is read and written far less often than the
/// struct holding it is copied. The conversion is exact: an instant is a `Duration` inside.
@propertyWrapper
public struct PackedInstant: Sendable {
    /// The instant the offsets count from, read once per process.
    private static let origin = ContinuousClock.now
    /// Nil: -2^127 attoseconds, some 5 × 10^21 years. Built from its words, so that making it
    /// is two stores (the standard library's own initializer for them).
    @inline(__always) private static var absent: Duration { Duration(_high: .min, low: 0) }

    private var offset: Duration

    public init() {
        offset = Self.absent
    }

    public init(wrappedValue: ContinuousClock.Instant?) {
        offset = wrappedValue.map { Self.origin.duration(to: $0) } ?? Self.absent
    }

    public var wrappedValue: ContinuousClock.Instant? {
        get { offset._high == .min ? nil : Self.origin.advanced(by: offset) }
        set { offset = newValue.map { Self.origin.duration(to: $0) } ?? Self.absent }
    }
}
