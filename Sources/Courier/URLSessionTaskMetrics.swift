import CourierReactor
import CourierTransport
import Foundation

/// Timings and counts of one task: Apple's `URLSessionTaskMetrics`.
open class URLSessionTaskMetrics: NSObject, @unchecked Sendable {
    /// Where a response came from.
    public enum ResourceFetchType: Int, Sendable {
        case unknown = 0
        case networkLoad = 1
        case serverPush = 2
        case localCache = 3
    }

    /// How a name was resolved.
    public enum DomainResolutionProtocol: Int, Sendable {
        case unknown = 0
        case udp = 1
        case tcp = 2
        case tls = 3
        case https = 4
    }

    /// One entry per request/response transaction (more than one after redirects or retries).
    public internal(set) var transactionMetrics: [URLSessionTaskTransactionMetrics]
    /// From the task's start to its completion.
    public internal(set) var taskInterval: DateInterval
    /// Redirects followed.
    public internal(set) var redirectCount: Int

    init(transactionMetrics: [URLSessionTaskTransactionMetrics], taskInterval: DateInterval, redirectCount: Int) {
        self.transactionMetrics = transactionMetrics
        self.taskInterval = taskInterval
        self.redirectCount = redirectCount
    }
}

/// Timings and counts of one request/response transaction: Apple's
/// `URLSessionTaskTransactionMetrics`.
open class URLSessionTaskTransactionMetrics: NSObject, @unchecked Sendable {
    public let request: URLRequest
    public internal(set) var response: URLResponse?
    public internal(set) var fetchStartDate: Date?
    public internal(set) var domainLookupStartDate: Date?
    public internal(set) var domainLookupEndDate: Date?
    public internal(set) var connectStartDate: Date?
    public internal(set) var secureConnectionStartDate: Date?
    public internal(set) var secureConnectionEndDate: Date?
    public internal(set) var connectEndDate: Date?
    public internal(set) var requestStartDate: Date?
    public internal(set) var requestEndDate: Date?
    public internal(set) var responseStartDate: Date?
    public internal(set) var responseEndDate: Date?
    public internal(set) var countOfRequestBodyBytesBeforeEncoding: Int64 = 0
    public internal(set) var countOfRequestBodyBytesSent: Int64 = 0
    public internal(set) var countOfRequestHeaderBytesSent: Int64 = 0
    public internal(set) var countOfResponseBodyBytesAfterDecoding: Int64 = 0
    public internal(set) var countOfResponseBodyBytesReceived: Int64 = 0
    public internal(set) var countOfResponseHeaderBytesReceived: Int64 = 0
    /// "http/1.1" or "h2".
    public internal(set) var networkProtocolName: String?
    public internal(set) var negotiatedTLSProtocolVersion: tls_protocol_version_t?
    public internal(set) var negotiatedTLSCipherSuite: tls_ciphersuite_t?
    public internal(set) var remoteAddress: String?
    public internal(set) var remotePort: Int?
    public internal(set) var localAddress: String?
    public internal(set) var localPort: Int?
    public internal(set) var isCellular = false
    public internal(set) var isExpensive = false
    public internal(set) var isConstrained = false
    public internal(set) var isProxyConnection = false
    public internal(set) var isReusedConnection = false
    public internal(set) var isMultipath = false
    public internal(set) var resourceFetchType: URLSessionTaskMetrics.ResourceFetchType = .networkLoad
    public internal(set) var domainResolutionProtocol: URLSessionTaskMetrics.DomainResolutionProtocol = .unknown

    /// The transaction of a response answered from the cache: no connection, no bytes sent.
    init(cachedRequest request: URLRequest, response: URLResponse?, bodyBytes: Int64) {
        self.request = request
        self.response = response
        super.init()
        let now = Date()
        fetchStartDate = now
        responseStartDate = now
        responseEndDate = now
        countOfResponseBodyBytesAfterDecoding = bodyBytes
        resourceFetchType = .localCache
    }

    init(request: URLRequest, response: URLResponse?, metrics: ExchangeMetrics, bodyBytesAfterDecoding: Int64) {
        self.request = request
        self.response = response
        super.init()
        let date = DateConverter()
        fetchStartDate = date(metrics.fetchStart)
        domainLookupStartDate = date(metrics.domainLookupStart)
        domainLookupEndDate = date(metrics.domainLookupEnd)
        connectStartDate = date(metrics.connectStart)
        connectEndDate = date(metrics.connectEnd)
        secureConnectionStartDate = date(metrics.secureConnectionStart)
        secureConnectionEndDate = date(metrics.secureConnectionEnd)
        requestStartDate = date(metrics.requestStart)
        requestEndDate = date(metrics.requestEnd)
        responseStartDate = date(metrics.responseStart)
        responseEndDate = date(metrics.responseEnd)
        countOfRequestHeaderBytesSent = metrics.requestHeaderBytesSent
        countOfRequestBodyBytesSent = metrics.requestBodyBytesSent
        countOfRequestBodyBytesBeforeEncoding = metrics.requestBodyBytesSent
        countOfResponseHeaderBytesReceived = metrics.responseHeaderBytesReceived
        countOfResponseBodyBytesReceived = metrics.responseBodyBytesReceived
        countOfResponseBodyBytesAfterDecoding = bodyBytesAfterDecoding
        networkProtocolName = metrics.networkProtocolName
        negotiatedTLSProtocolVersion = metrics.tlsProtocolVersion.flatMap(tls_protocol_version_t.init(rawValue:))
        negotiatedTLSCipherSuite = metrics.tlsCipherSuite.flatMap(tls_ciphersuite_t.init(rawValue:))
        isReusedConnection = metrics.isReusedConnection
        isProxyConnection = metrics.proxy != nil
        remoteAddress = metrics.remoteAddress?.hostString
        remotePort = metrics.remoteAddress?.port.map(Int.init)
        localAddress = metrics.localAddress?.hostString
        localPort = metrics.localAddress?.port.map(Int.init)
    }
}

/// Turns monotonic instants into wall-clock dates, anchored once per conversion batch.
struct DateConverter {
    let nowInstant = MonotonicInstant.now
    let nowDate = Date()

    func callAsFunction(_ instant: MonotonicInstant?) -> Date? {
        guard let instant else { return nil }
        let offset = instant - nowInstant
        let seconds = Double(offset.components.seconds) + Double(offset.components.attoseconds) / 1e18
        return nowDate.addingTimeInterval(seconds)
    }
}
