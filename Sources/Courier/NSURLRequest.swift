import CourierSync
import Foundation

// Design note. An `NSURLRequest` is a `URLRequest` value in a box: every property reads the
// boxed value, and `NSMutableURLRequest`'s setters change it in place under the box's mutex.
// The value type keeps every rule (method normalisation, header case, body exclusivity, the
// timeout-was-set flag), so a request is the same whichever way it travels. `URLRequest` bridges
// to the class through `_ObjectiveCBridgeable` — the standard library's bridging protocol, which
// swift-corelibs-foundation also uses on Linux — so `request as NSURLRequest` and
// `reference as URLRequest` work as they do with FoundationNetworking.

extension NSURLRequest {
    /// How a request uses the URL cache; `useProtocolCachePolicy` by default.
    ///
    /// The raw values are Apple's (`NSURLRequestCachePolicy`), which are not in declaration
    /// order: `reloadIgnoringLocalAndRemoteCacheData` is 4 and `reloadRevalidatingCacheData` 5.
    public enum CachePolicy: UInt, Sendable {
        /// The rules of the protocol: RFC 9111 freshness and revalidation for HTTP.
        case useProtocolCachePolicy = 0
        /// Load from the origin, ignoring any cached response.
        case reloadIgnoringLocalCacheData = 1
        /// Load from the origin, ignoring local and intermediate caches.
        case reloadIgnoringLocalAndRemoteCacheData = 4
        /// A cached response whatever its age; load only when there is none.
        case returnCacheDataElseLoad = 2
        /// A cached response whatever its age; fail when there is none, never load.
        case returnCacheDataDontLoad = 3
        /// Revalidate a cached response with the origin before using it.
        case reloadRevalidatingCacheData = 5

        /// The old name of `reloadIgnoringLocalCacheData`; the same value.
        public static var reloadIgnoringCacheData: CachePolicy { .reloadIgnoringLocalCacheData }
    }

    /// The kind of traffic a request carries. Accepted and carried; it changes nothing on
    /// Linux. The first six raw values are FoundationNetworking's, the rest Apple's.
    public enum NetworkServiceType: UInt, Sendable {
        /// Ordinary traffic.
        case `default` = 0
        /// Voice-over-IP control traffic.
        case voip = 1
        /// Video traffic.
        case video = 2
        /// Background traffic.
        case background = 3
        /// Voice traffic.
        case voice = 4
        /// Call signalling, by FoundationNetworking's name and raw value.
        case networkServiceTypeCallSignaling = 5
        /// Traffic a user is waiting for.
        case responsiveData = 6
        /// Streaming audio or video.
        case avStreaming = 8
        /// Interactive audio or video.
        case responsiveAV = 9
        /// Call signalling, by Apple's name and raw value.
        case callSignaling = 11
    }
}

/// A URL load request as an object: Apple's `NSURLRequest`, the immutable reference form of
/// ``URLRequest``.
///
/// It holds a `URLRequest` value and answers every property from it, so it follows the same
/// rules: header names keep their first case and are looked up without regard to case, common
/// methods are upper-cased, and a body is either bytes or a stream. ``NSMutableURLRequest`` is
/// the changeable form. Archiving (`NSSecureCoding`) keeps every property but the body stream.
open class NSURLRequest: NSObject, NSSecureCoding, NSCopying, NSMutableCopying, @unchecked Sendable {
    /// The request this object stands for. `NSMutableURLRequest` changes it in place; guarded by
    /// the mutex.
    fileprivate let storage: Mutex<URLRequest>

    /// A GET request for `url` with the default cache policy and a 60-second timeout.
    public convenience init(url: URL) {
        self.init(url: url, cachePolicy: .useProtocolCachePolicy, timeoutInterval: URLRequest.defaultTimeoutInterval)
    }

    /// A GET request for `url` with the given cache policy and timeout (in seconds).
    public init(url: URL, cachePolicy: NSURLRequest.CachePolicy, timeoutInterval: TimeInterval) {
        storage = Mutex(URLRequest(url: url, cachePolicy: cachePolicy, timeoutInterval: timeoutInterval))
        super.init()
    }

    /// A request object standing for `request`.
    init(request: URLRequest) {
        storage = Mutex(request)
        super.init()
    }

    /// Decodes a request from a keyed archive; nil when the archive has no URL (or not an
    /// `NSURL` under its key), or when `coder` is not keyed.
    public required init?(coder: NSCoder) {
        guard let request = NSURLRequest.decodedRequest(from: coder) else { return nil }
        storage = Mutex(request)
        super.init()
    }

    /// The request as a value, as it is now.
    var request: URLRequest { storage.withLock { $0 } }

    /// Changes the wrapped request (for `URLProtocol`'s properties, which only a mutable
    /// request takes).
    func updateRequest(_ change: (inout URLRequest) -> Void) {
        storage.withLock { change(&$0) }
    }

    // MARK: Properties

    /// The URL to load.
    open var url: URL? { request.url }

    /// How the request uses the URL cache.
    open var cachePolicy: CachePolicy { request.cachePolicy }

    /// Seconds of silence before the request times out.
    open var timeoutInterval: TimeInterval { request.timeoutInterval }

    /// The URL of the document the request belongs to, for the cookie policy that accepts only
    /// cookies from the main document's domain.
    open var mainDocumentURL: URL? { request.mainDocumentURL }

    /// The kind of traffic the request carries; carried, with no effect on Linux.
    open var networkServiceType: NetworkServiceType { request.networkServiceType }

    /// Whether the request may use a cellular interface; carried, with no effect on Linux.
    open var allowsCellularAccess: Bool { request.allowsCellularAccess }

    /// The HTTP method; "GET" unless set.
    open var httpMethod: String? { request.httpMethod }

    /// Every header field; nil when there are none.
    open var allHTTPHeaderFields: [String: String]? { request.allHTTPHeaderFields }

    /// The value of a header field, found without regard to case.
    open func value(forHTTPHeaderField field: String) -> String? {
        request.value(forHTTPHeaderField: field)
    }

    /// The body as bytes; nil when there is none or the body is a stream.
    open var httpBody: Data? { request.httpBody }

    /// The body as a stream; nil when there is none or the body is bytes. Copies of the request
    /// share the stream; an archive leaves it out.
    open var httpBodyStream: InputStream? { request.httpBodyStream }

    /// Whether cookies are sent with the request and stored from its response.
    open var httpShouldHandleCookies: Bool { request.httpShouldHandleCookies }

    /// Whether the request may be sent before the previous response on its connection arrives.
    open var httpShouldUsePipelining: Bool { request.httpShouldUsePipelining }

    // MARK: Copying

    /// An immutable copy: the request itself when it is a plain `NSURLRequest`.
    open override func copy() -> Any {
        copy(with: nil)
    }

    /// An immutable copy: the request itself when it is a plain `NSURLRequest` (it cannot
    /// change), otherwise a new `NSURLRequest` holding the request as it is now.
    open func copy(with zone: NSZone? = nil) -> Any {
        if type(of: self) === NSURLRequest.self { return self }
        return NSURLRequest(request: request)
    }

    /// A new `NSMutableURLRequest` holding the request as it is now.
    open override func mutableCopy() -> Any {
        mutableCopy(with: nil)
    }

    /// A new `NSMutableURLRequest` holding the request as it is now; changing either leaves the
    /// other as it was.
    open func mutableCopy(with zone: NSZone? = nil) -> Any {
        NSMutableURLRequest(request: request)
    }

    // MARK: Equality

    /// Equal when `object` is a request object whose request equals this one's, by
    /// `URLRequest`'s `==`.
    open override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? NSURLRequest else { return false }
        if other === self { return true }
        return other.request == request
    }

    /// The hash of the request value, so that equal request objects hash alike.
    open override var hash: Int {
        request.hashValue
    }

    /// `NSObject`'s description of the object followed by the URL, as FoundationNetworking
    /// writes it: `<NSURLRequest: 0x…> { URL: https://example.com/ }`, with "(null)" for a
    /// request without a URL.
    open override var description: String {
        super.description + " { URL: \(url?.description ?? "(null)") }"
    }

    // MARK: Archiving

    /// True: decoding checks the class of every object it reads.
    open class var supportsSecureCoding: Bool { true }

    /// Encodes every property but the body stream into a keyed archive (an unkeyed coder gets
    /// nothing). See `NSURLRequest+Coding.swift` for the keys.
    open func encode(with coder: NSCoder) {
        NSURLRequest.write(request, to: coder)
    }
}

/// The changeable form of ``NSURLRequest``: Apple's `NSMutableURLRequest`.
///
/// Its setters change the request in place; a session, a copy or a bridged `URLRequest` takes
/// the request as it is at that moment and does not see later changes.
open class NSMutableURLRequest: NSURLRequest, @unchecked Sendable {
    /// A GET request for `url` with the default cache policy and a 60-second timeout.
    public convenience init(url: URL) {
        self.init(url: url, cachePolicy: .useProtocolCachePolicy, timeoutInterval: URLRequest.defaultTimeoutInterval)
    }

    /// A GET request for `url` with the given cache policy and timeout (in seconds).
    public override init(url: URL, cachePolicy: NSURLRequest.CachePolicy, timeoutInterval: TimeInterval) {
        super.init(url: url, cachePolicy: cachePolicy, timeoutInterval: timeoutInterval)
    }

    /// A mutable request object starting from `request`.
    override init(request: URLRequest) {
        super.init(request: request)
    }

    /// Decodes a request from a keyed archive; see ``NSURLRequest/init(coder:)``.
    public required init?(coder: NSCoder) {
        super.init(coder: coder)
    }

    /// An immutable copy: a new `NSURLRequest` holding the request as it is now, which later
    /// changes to this object do not reach.
    open override func copy(with zone: NSZone? = nil) -> Any {
        NSURLRequest(request: request)
    }

    /// The URL to load.
    open override var url: URL? {
        get { super.url }
        set { storage.withLock { $0.url = newValue } }
    }

    /// How the request uses the URL cache.
    open override var cachePolicy: CachePolicy {
        get { super.cachePolicy }
        set { storage.withLock { $0.cachePolicy = newValue } }
    }

    /// Seconds of silence before the request times out. Assigning it makes it win over the
    /// session's `timeoutIntervalForRequest`, as with `URLRequest`.
    open override var timeoutInterval: TimeInterval {
        get { super.timeoutInterval }
        set { storage.withLock { $0.timeoutInterval = newValue } }
    }

    /// The URL of the document the request belongs to.
    open override var mainDocumentURL: URL? {
        get { super.mainDocumentURL }
        set { storage.withLock { $0.mainDocumentURL = newValue } }
    }

    /// The kind of traffic the request carries; carried, with no effect on Linux.
    open override var networkServiceType: NetworkServiceType {
        get { super.networkServiceType }
        set { storage.withLock { $0.networkServiceType = newValue } }
    }

    /// Whether the request may use a cellular interface; carried, with no effect on Linux.
    open override var allowsCellularAccess: Bool {
        get { super.allowsCellularAccess }
        set { storage.withLock { $0.allowsCellularAccess = newValue } }
    }

    /// The HTTP method. Common methods are upper-cased; nil restores "GET".
    open override var httpMethod: String? {
        get { super.httpMethod }
        set { storage.withLock { $0.httpMethod = newValue } }
    }

    /// Every header field; assigning replaces them all, and nil removes them all.
    open override var allHTTPHeaderFields: [String: String]? {
        get { super.allHTTPHeaderFields }
        set { storage.withLock { $0.allHTTPHeaderFields = newValue } }
    }

    /// Sets a header field, replacing the value of a field of the same name in any case; nil
    /// removes the field.
    open func setValue(_ value: String?, forHTTPHeaderField field: String) {
        storage.withLock { $0.setValue(value, forHTTPHeaderField: field) }
    }

    /// Appends a value to a header field, comma-separated, or sets the field when it is absent.
    open func addValue(_ value: String, forHTTPHeaderField field: String) {
        storage.withLock { $0.addValue(value, forHTTPHeaderField: field) }
    }

    /// The body as bytes; setting it clears the body stream.
    open override var httpBody: Data? {
        get { super.httpBody }
        set { storage.withLock { $0.httpBody = newValue } }
    }

    /// The body as a stream, read as the request is sent; setting it clears the body bytes.
    open override var httpBodyStream: InputStream? {
        get { super.httpBodyStream }
        set { storage.withLock { $0.httpBodyStream = newValue } }
    }

    /// Whether cookies are sent with the request and stored from its response.
    open override var httpShouldHandleCookies: Bool {
        get { super.httpShouldHandleCookies }
        set { storage.withLock { $0.httpShouldHandleCookies = newValue } }
    }

    /// Whether the request may be sent before the previous response on its connection arrives.
    open override var httpShouldUsePipelining: Bool {
        get { super.httpShouldUsePipelining }
        set { storage.withLock { $0.httpShouldUsePipelining = newValue } }
    }
}

// MARK: - Bridging

extension URLRequest: ReferenceConvertible, _ObjectiveCBridgeable {
    /// The class a request bridges to.
    public typealias _ObjectiveCType = NSURLRequest

    /// A new immutable request object holding this request (`request as NSURLRequest`).
    public func _bridgeToObjectiveC() -> NSURLRequest {
        NSURLRequest(request: self)
    }

    /// The request a request object holds, as it is now (`reference as URLRequest`).
    public static func _forceBridgeFromObjectiveC(_ source: NSURLRequest, result: inout URLRequest?) {
        result = source.request
    }

    /// The request a request object holds; always succeeds.
    @discardableResult
    public static func _conditionallyBridgeFromObjectiveC(_ source: NSURLRequest, result: inout URLRequest?) -> Bool {
        result = source.request
        return true
    }

    /// The request a request object holds; a nil object is a programming error.
    public static func _unconditionallyBridgeFromObjectiveC(_ source: NSURLRequest?) -> URLRequest {
        guard let source else { preconditionFailure("A nil NSURLRequest cannot bridge to URLRequest.") }
        return source.request
    }
}

extension NSURLRequest: _StructTypeBridgeable {
    /// The value type a request object bridges to.
    public typealias _StructType = URLRequest

    /// The request this object holds, as it is now: FoundationNetworking's spelling of
    /// `reference as URLRequest` on Linux.
    public func _bridgeToSwift() -> URLRequest {
        request
    }
}
