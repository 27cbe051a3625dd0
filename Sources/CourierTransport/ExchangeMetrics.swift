import CourierCore
import CourierReactor

/// What the transport observed while carrying one request over one connection; the raw
/// material of `URLSessionTaskTransactionMetrics`.
public struct ExchangeMetrics: Sendable {
    /// When the exchange was handed to the transport.
    public var fetchStart: ContinuousClock.Instant?
    public var domainLookupStart: ContinuousClock.Instant?
    public var domainLookupEnd: ContinuousClock.Instant?
    public var connectStart: ContinuousClock.Instant?
    public var connectEnd: ContinuousClock.Instant?
    public var secureConnectionStart: ContinuousClock.Instant?
    public var secureConnectionEnd: ContinuousClock.Instant?
    public var requestStart: ContinuousClock.Instant?
    public var requestEnd: ContinuousClock.Instant?
    public var responseStart: ContinuousClock.Instant?
    public var responseEnd: ContinuousClock.Instant?
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
