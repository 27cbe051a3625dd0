import CourierCore
import CourierReactor

/// What the transport observed while carrying one request over one connection; the raw
/// material of `URLSessionTaskTransactionMetrics`.
///
/// The struct is copied a few times an exchange (into the connection's record of it, into the
/// completion, to the task), so it is kept small and nearly free of references: its instants
/// are ``PackedInstant``s (eight bytes each, where an optional instant takes sixteen), and what
/// belongs to the connection rather than to the exchange (TLS, proxy, addresses) is one shared
/// ``ConnectionDetails``, made once per connection.
public struct ExchangeMetrics: Sendable {
    /// When the exchange was handed to the transport.
    @PackedInstant public var fetchStart: MonotonicInstant?
    @PackedInstant public var domainLookupStart: MonotonicInstant?
    @PackedInstant public var domainLookupEnd: MonotonicInstant?
    @PackedInstant public var connectStart: MonotonicInstant?
    @PackedInstant public var connectEnd: MonotonicInstant?
    @PackedInstant public var secureConnectionStart: MonotonicInstant?
    @PackedInstant public var secureConnectionEnd: MonotonicInstant?
    @PackedInstant public var requestStart: MonotonicInstant?
    @PackedInstant public var requestEnd: MonotonicInstant?
    @PackedInstant public var responseStart: MonotonicInstant?
    @PackedInstant public var responseEnd: MonotonicInstant?
    /// "http/1.1" or "h2".
    public var networkProtocolName: String? { protocolName.map { String(describing: $0) } }
    /// The same, as the connection gives it: a constant, so that a copy of the metrics
    /// (several per exchange) retains one reference at most, the connection's details.
    public var protocolName: StaticString?
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

/// An optional ``MonotonicInstant`` in one word: nil is `Int64.min` nanoseconds, some 292 years
/// before boot, which no reading of the clock comes near. A plain optional would take two words
/// (the flag and its padding), and the metrics record carries eleven of these and is copied a
/// few times an exchange.
@propertyWrapper
public struct PackedInstant: Sendable {
    @usableFromInline var nanoseconds: Int64

    @inlinable
    public init() {
        nanoseconds = .min
    }

    @inlinable
    public init(wrappedValue: MonotonicInstant?) {
        nanoseconds = wrappedValue?.nanoseconds ?? .min
    }

    @inlinable
    public var wrappedValue: MonotonicInstant? {
        get { nanoseconds == .min ? nil : MonotonicInstant(nanoseconds: nanoseconds) }
        set { nanoseconds = newValue?.nanoseconds ?? .min }
    }
}
