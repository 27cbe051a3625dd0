import CourierPolicies
import CourierTransport
import Foundation
import Logging

/// Bounds on decoding a compressed response (a Courier extension): see
/// ``URLSessionConfiguration/courierContentDecodingLimits``.
public typealias ContentDecodingLimits = CourierPolicies.ContentDecodingLimits

/// The behaviour and policies of a session: Apple's `URLSessionConfiguration`.
///
/// A session copies its configuration when it is created; changing this object afterwards does
/// not affect sessions made from it. Copying gives an independent configuration.
open class URLSessionConfiguration: NSObject, NSCopying, @unchecked Sendable {
    /// The kind of configuration, which decides where stores live.
    enum Kind {
        /// Stores persisted on disk.
        case `default`
        /// Stores in memory, discarded with the session.
        case ephemeral
        /// Stores on disk, as `default`; download and file-upload tasks run in the background
        /// daemon (``BackgroundLink``) and outlive the process.
        case background
    }

    let kind: Kind

    /// The identifier of a background configuration; nil otherwise.
    @exclusivity(unchecked) open var identifier: String?
    /// Seconds of silence (no byte sent or received) before a request times out; 60 by default.
    @exclusivity(unchecked) open var timeoutIntervalForRequest: TimeInterval = 60
    /// Seconds a whole transfer may take; 7 days by default.
    @exclusivity(unchecked) open var timeoutIntervalForResource: TimeInterval = 7 * 24 * 60 * 60
    /// Most simultaneous HTTP/1.1 connections to one host; 6 by default.
    @exclusivity(unchecked) open var httpMaximumConnectionsPerHost: Int = 6
    /// Header fields added to every request that does not set them itself.
    @exclusivity(unchecked) open var httpAdditionalHeaders: [AnyHashable: Any]?
    /// Lowest TLS version accepted for https; TLS 1.2 by default.
    @exclusivity(unchecked) open var tlsMinimumSupportedProtocolVersion: tls_protocol_version_t = .TLSv12
    /// Highest TLS version offered for https; TLS 1.3 by default.
    @exclusivity(unchecked) open var tlsMaximumSupportedProtocolVersion: tls_protocol_version_t = .TLSv13
    /// Courier extension: speak HTTP/2 on cleartext (`http`) connections without negotiation
    /// (h2c with prior knowledge, RFC 9113 section 3.3). For servers known to accept it, such
    /// as test and benchmark peers; off by default. https negotiates HTTP/2 with ALPN anyway.
    open var http2PriorKnowledge = false
    /// Courier extension: header fields (names, any case) removed from the request when a
    /// redirect leads to another origin (scheme, host or port), in addition to `Authorization`,
    /// `Proxy-Authorization` and `Cookie`, which never cross origins. Empty by default.
    ///
    /// - Warning: name every header that carries a secret (an `X-Api-Key`, a signed token):
    ///   a server can redirect anywhere, and without this the secret travels with the request.
    @exclusivity(unchecked) open var courierHeadersStrippedOnCrossOriginRedirect: Set<String> = []
    /// Courier extension: bounds on decoding a compressed response (gzip, deflate, br), a
    /// defence against decompression bombs: by default a body may decode to at most 1 GiB and,
    /// past its first MiB, to at most 1,000 times its encoded size. A body that passes a
    /// bound fails with `URLError(.dataLengthExceedsMaximum)`; raise the bounds for trusted
    /// servers that send larger or more compressible bodies.
    @exclusivity(unchecked) open var courierContentDecodingLimits = ContentDecodingLimits.default
    /// Courier extension: whether a response body with a content coding (gzip, deflate, br) is
    /// decoded, as `URLSession` always does (true, the default), or delivered as the server
    /// coded it, its `Content-Encoding` kept (false: what curl does without `--compressed`).
    /// The `Accept-Encoding` a request sends is not affected (``courierOmittedDefaultFields``
    /// leaves it out). A session that does not decode neither reads nor writes its cache,
    /// whose bodies are kept decoded.
    @exclusivity(unchecked) open var courierDecodesContent = true
    /// Courier extension: the logger the session traces its decisions and exchanges to, at
    /// `.debug` and `.trace` (nothing at `.info` for a request that succeeds). Nil: a logger
    /// labelled `courier` from the process's logging system. Credentials and cookies are
    /// always redacted.
    @exclusivity(unchecked) open var courierLogger: Logger?
    /// Courier extension: an idempotent request (GET, HEAD, PUT, DELETE, OPTIONS, TRACE) with
    /// a body that can be sent again, answered 503 or 429 with a `Retry-After` of at most this
    /// many seconds, is sent again after that wait, up to ``courierMaximumRetryAttempts`` times;
    /// each attempt is a transaction in the task's metrics. 0, the default, never retries.
    ///
    /// - Warning: a retry repeats the request; keep the bound small so that a server cannot
    ///   hold a task for long, and leave it off for requests whose repetition matters.
    @exclusivity(unchecked) open var courierMaximumRetryAfterDelay: TimeInterval = 0
    /// Courier extension: retries one task may make under ``courierMaximumRetryAfterDelay``; 2 by default.
    @exclusivity(unchecked) open var courierMaximumRetryAttempts = 2
    /// Courier extension: names of the fields Courier adds to a request that does not set them
    /// (`User-Agent`, `Accept`, `Accept-Language`, `Accept-Encoding`, and `Content-Type` on a
    /// POST body) which this session leaves out instead, compared ignoring case. Empty by
    /// default. Leaving out `Accept-Encoding` means the server sends bodies as they are.
    @exclusivity(unchecked) open var courierOmittedDefaultFields: Set<String> = []
    /// Courier extension: offer only HTTP/1.1 in TLS (no `h2` in ALPN) and never use HTTP/2
    /// by prior knowledge. False by default.
    open var courierHTTP1Only = false
    /// Courier extension: seconds allowed for making a connection (name resolution, TCP, a
    /// proxy's tunnel and TLS). Nil by default: `timeoutIntervalForRequest` bounds it.
    @exclusivity(unchecked) open var courierConnectTimeout: TimeInterval?
    /// Courier extension: the receive window, in bytes, each HTTP/2 stream starts with: what a
    /// stream whose reader pauses may hold in memory, and what it may receive in a round trip.
    /// Nil by default: 1 MiB. A window doubles while its stream's reader takes more than the
    /// round trip lets through, up to 8 MiB, or up to this start when it is larger (at most
    /// 2^31 − 1): a larger start spends memory to save a long round trip's first turns.
    @exclusivity(unchecked) open var courierHTTP2StreamWindowSize: Int?
    /// Courier extension: a download task that fails after writing part of the body (a lost
    /// connection, a timeout, a cancel, a full disk) keeps its file and names it in the error,
    /// under ``CourierPartialDownloadFileKey`` (``URLError/courierPartialDownloadFile``),
    /// whether or not the download can be resumed; the caller owns the file from then on. When
    /// the error also carries resume data, that data names the same file: moving the file makes
    /// it useless. False by default: the file is deleted unless resume data keeps it, as on
    /// Apple platforms.
    @exclusivity(unchecked) open var courierKeepsPartialDownloads = false
    /// Where the session finds credentials for challenges and keeps the ones that worked:
    /// ``URLCredentialStorage/shared`` for a default configuration, a new storage in memory for
    /// each ephemeral one. Nil: no storage. A copy of the configuration (and so a session made
    /// from it) shares the same storage object.
    @exclusivity(unchecked) open var urlCredentialStorage: URLCredentialStorage?
    /// The cookie jar of the session's requests: ``HTTPCookieStorage/shared`` for a default
    /// configuration, a new jar in memory for each ephemeral one. Nil: no cookies.
    @exclusivity(unchecked) open var httpCookieStorage: HTTPCookieStorage?
    /// Whether requests carry the storage's cookies (and a request's own
    /// `httpShouldHandleCookies` agrees); true by default. Responses' cookies are stored by
    /// `httpCookieAcceptPolicy` either way.
    @exclusivity(unchecked) open var httpShouldSetCookies = true
    /// Which cookies responses may set: `.onlyFromMainDocumentDomain` by default, as Apple's.
    @exclusivity(unchecked) open var httpCookieAcceptPolicy = HTTPCookie.AcceptPolicy.onlyFromMainDocumentDomain
    /// The cache of the session's responses: ``URLCache/shared`` for a default configuration;
    /// for each ephemeral one, a new cache of its own that never touches the disk (4 MiB in
    /// memory: Apple gives ephemeral sessions a memory-only cache without documenting its
    /// size). Nil: nothing is cached. A copy of the configuration shares the same cache object.
    @exclusivity(unchecked) open var urlCache: URLCache?
    /// How requests use the cache when they leave it to the session
    /// (`.useProtocolCachePolicy`, the rules of RFC 9111, by default).
    @exclusivity(unchecked) open var requestCachePolicy: URLRequest.CachePolicy = .useProtocolCachePolicy
    /// The proxies of the session's connections, with the keys of CFNetwork
    /// (``kCFNetworkProxiesHTTPEnable`` and its siblings): an HTTP proxy for `http` URLs, an
    /// HTTP proxy reached through CONNECT tunnels for `https` URLs, a SOCKS5 proxy for either,
    /// and hosts that bypass them. Nil (the default): the environment decides, as curl reads
    /// it (`http_proxy`, `https_proxy`, `all_proxy`, `no_proxy`). An empty dictionary: no proxy.
    @exclusivity(unchecked) open var connectionProxyDictionary: [AnyHashable: Any]?
    /// Accepted; ignored (HTTP/1.1 pipelining is never used).
    @exclusivity(unchecked) open var httpShouldUsePipelining = false
    /// Accepted; no effect on Linux.
    @exclusivity(unchecked) open var networkServiceType: URLRequest.NetworkServiceType = .default
    /// Accepted; no effect on Linux.
    @exclusivity(unchecked) open var allowsCellularAccess = true
    /// Accepted; no effect on Linux.
    @exclusivity(unchecked) open var allowsExpensiveNetworkAccess = true
    /// Accepted; no effect on Linux.
    @exclusivity(unchecked) open var allowsConstrainedNetworkAccess = true
    /// Accepted; no effect on Linux.
    @exclusivity(unchecked) open var waitsForConnectivity = false
    /// Accepted; no effect on Linux.
    @exclusivity(unchecked) open var isDiscretionary = false
    /// Accepted; no effect on Linux.
    @exclusivity(unchecked) open var sessionSendsLaunchEvents = true
    /// Accepted; no effect on Linux.
    @exclusivity(unchecked) open var sharedContainerIdentifier: String?
    /// Accepted; no effect on Linux.
    @exclusivity(unchecked) open var shouldUseExtendedBackgroundIdleMode = false
    /// `URLProtocol` subclasses that load this session's requests, consulted in order before
    /// the built-in HTTP, `data:` and `file:` loading (the first whose `canInit(with:)` says
    /// yes loads the request). Empty by default, so `protocolClasses?.insert(Mock.self, at: 0)`
    /// works as on Apple platforms.
    @exclusivity(unchecked) open var protocolClasses: [AnyClass]? = []

    init(kind: Kind) {
        self.kind = kind
        switch kind {
        case .default, .background:
            // Cheap: the shared storages open their files on first use, not here.
            urlCredentialStorage = URLCredentialStorage.shared
            httpCookieStorage = HTTPCookieStorage.shared
            urlCache = URLCache.shared
        case .ephemeral:
            urlCredentialStorage = URLCredentialStorage(store: .memory)
            httpCookieStorage = HTTPCookieStorage(store: .memory)
            urlCache = URLCache(memoryOnlyCapacity: URLCache.ephemeralMemoryCapacity)
        }
        super.init()
    }

    @available(*, deprecated, renamed: "URLSessionConfiguration.default", message: "Use .default instead.")
    public override convenience init() {
        self.init(kind: .default)
    }

    /// A new default configuration: stores persisted on disk.
    open class var `default`: URLSessionConfiguration {
        URLSessionConfiguration(kind: .default)
    }

    /// A new ephemeral configuration: stores in memory only, discarded with the session.
    open class var ephemeral: URLSessionConfiguration {
        URLSessionConfiguration(kind: .ephemeral)
    }

    /// A configuration whose download tasks and uploads from files run in a separate process,
    /// `courier-background`, and so go on when the process that made them exits or crashes. A
    /// later session with the same `identifier` reconnects to them: it gets them back as task
    /// objects (`getAllTasks`) and hears the events that happened meanwhile, then
    /// `urlSessionDidFinishEvents(forBackgroundURLSession:)`. As on Apple platforms: only http
    /// and https, no completion handlers, uploads only from files, redirects always followed;
    /// challenges get the default handling (the delegate may be gone). Data tasks run in the
    /// process, as in a default session. Stores are on disk, as `default`'s.
    open class func background(withIdentifier identifier: String) -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration(kind: .background)
        configuration.identifier = identifier
        return configuration
    }

    open override func copy() -> Any {
        copy(with: nil)
    }

    open func copy(with zone: NSZone?) -> Any {
        let copy = URLSessionConfiguration(kind: kind)
        copy.identifier = identifier
        copy.protocolClasses = protocolClasses
        copy.timeoutIntervalForRequest = timeoutIntervalForRequest
        copy.timeoutIntervalForResource = timeoutIntervalForResource
        copy.httpMaximumConnectionsPerHost = httpMaximumConnectionsPerHost
        copy.httpAdditionalHeaders = httpAdditionalHeaders
        copy.http2PriorKnowledge = http2PriorKnowledge
        copy.courierHeadersStrippedOnCrossOriginRedirect = courierHeadersStrippedOnCrossOriginRedirect
        copy.courierContentDecodingLimits = courierContentDecodingLimits
        copy.courierDecodesContent = courierDecodesContent
        copy.courierLogger = courierLogger
        copy.courierMaximumRetryAfterDelay = courierMaximumRetryAfterDelay
        copy.courierMaximumRetryAttempts = courierMaximumRetryAttempts
        copy.courierOmittedDefaultFields = courierOmittedDefaultFields
        copy.courierHTTP1Only = courierHTTP1Only
        copy.courierConnectTimeout = courierConnectTimeout
        copy.courierHTTP2StreamWindowSize = courierHTTP2StreamWindowSize
        copy.courierKeepsPartialDownloads = courierKeepsPartialDownloads
        copy.urlCredentialStorage = urlCredentialStorage
        copy.connectionProxyDictionary = connectionProxyDictionary
        copy.httpCookieStorage = httpCookieStorage
        copy.httpShouldSetCookies = httpShouldSetCookies
        copy.httpCookieAcceptPolicy = httpCookieAcceptPolicy
        copy.urlCache = urlCache
        copy.requestCachePolicy = requestCachePolicy
        copy.tlsMinimumSupportedProtocolVersion = tlsMinimumSupportedProtocolVersion
        copy.tlsMaximumSupportedProtocolVersion = tlsMaximumSupportedProtocolVersion
        copy.httpShouldUsePipelining = httpShouldUsePipelining
        copy.networkServiceType = networkServiceType
        copy.allowsCellularAccess = allowsCellularAccess
        copy.allowsExpensiveNetworkAccess = allowsExpensiveNetworkAccess
        copy.allowsConstrainedNetworkAccess = allowsConstrainedNetworkAccess
        copy.waitsForConnectivity = waitsForConnectivity
        copy.isDiscretionary = isDiscretionary
        copy.sessionSendsLaunchEvents = sessionSendsLaunchEvents
        copy.sharedContainerIdentifier = sharedContainerIdentifier
        copy.shouldUseExtendedBackgroundIdleMode = shouldUseExtendedBackgroundIdleMode
        return copy
    }

    /// The additional headers that are plain strings, as name/value pairs sorted by name.
    var additionalHeaderFields: [(String, String)] {
        guard let headers = httpAdditionalHeaders else { return [] }
        return headers.compactMap { key, value -> (String, String)? in
            guard let name = key.base as? String, let text = value as? String else { return nil }
            return (name, text)
        }.sorted { $0.0 < $1.0 }
    }
}
