import Foundation

/// A URL load request, independent of protocol or scheme: Apple's `URLRequest`.
///
/// Header field names keep the case they were first set with; lookups ignore case.
/// `addValue` joins values with a comma. A body is either `httpBody` or `httpBodyStream`;
/// setting one clears the other.
public struct URLRequest: Equatable, Hashable, @unchecked Sendable {
    /// The cache policy of a request; `useProtocolCachePolicy` by default. It is
    /// `NSURLRequest.CachePolicy`, as in FoundationNetworking.
    public typealias CachePolicy = NSURLRequest.CachePolicy

    /// The network service type of a request; `.default` unless set. It is
    /// `NSURLRequest.NetworkServiceType`, as in FoundationNetworking.
    public typealias NetworkServiceType = NSURLRequest.NetworkServiceType

    /// The class a request bridges to with `as`: `request as NSURLRequest`, and back with
    /// `reference as URLRequest`.
    public typealias ReferenceType = NSURLRequest

    /// The default `timeoutInterval`, in seconds.
    static let defaultTimeoutInterval: TimeInterval = 60

    // Design note: every property lives in one reference-counted box, copied when a shared
    // box is about to change. A request is copied many times on its way through a task (the
    // task's state, the builder, the cache and cookie steps); with a dozen references among
    // its properties, each copy retained them all.
    private struct Properties {
        var url: URL?
        var cachePolicy: CachePolicy
        var mainDocumentURL: URL?
        var networkServiceType: NetworkServiceType = .default
        var allowsCellularAccess = true
        var allowsExpensiveNetworkAccess = true
        var allowsConstrainedNetworkAccess = true
        var assumesHTTP3Capable = false
        var requiresDNSSECValidation = false
        var httpShouldHandleCookies = true
        var httpShouldUsePipelining = true
        var timeoutInterval: TimeInterval
        var isTimeoutIntervalSet = false
        var method = "GET"
        var headerFields: [(name: String, value: String)] = []
        var body: Body = .none
        var protocolProperties: [String: Any] = [:]
    }

    private final class Storage: @unchecked Sendable {
        // A box is changed only while one request holds it (uniqueStorage()), so two
        // threads never write it at once and the runtime's exclusivity checks are not needed.
        @exclusivity(unchecked) var properties: Properties

        init(_ properties: Properties) {
            self.properties = properties
        }
    }

    private var storage: Storage

    /// The box, copied first when another request shares it.
    private mutating func uniqueStorage() -> Storage {
        if !isKnownUniquelyReferenced(&storage) { storage = Storage(storage.properties) }
        return storage
    }

    public var url: URL? {
        get { storage.properties.url }
        set { uniqueStorage().properties.url = newValue }
    }
    public var cachePolicy: CachePolicy {
        get { storage.properties.cachePolicy }
        set { uniqueStorage().properties.cachePolicy = newValue }
    }
    /// Seconds of silence before the request times out. Assigning it makes it win over the
    /// session's `timeoutIntervalForRequest`; the initializer's value does not.
    public var timeoutInterval: TimeInterval {
        get { storage.properties.timeoutInterval }
        set {
            let storage = uniqueStorage()
            storage.properties.timeoutInterval = newValue
            storage.properties.isTimeoutIntervalSet = true
        }
    }
    public var mainDocumentURL: URL? {
        get { storage.properties.mainDocumentURL }
        set { uniqueStorage().properties.mainDocumentURL = newValue }
    }
    public var networkServiceType: NetworkServiceType {
        get { storage.properties.networkServiceType }
        set { uniqueStorage().properties.networkServiceType = newValue }
    }
    public var allowsCellularAccess: Bool {
        get { storage.properties.allowsCellularAccess }
        set { uniqueStorage().properties.allowsCellularAccess = newValue }
    }
    public var allowsExpensiveNetworkAccess: Bool {
        get { storage.properties.allowsExpensiveNetworkAccess }
        set { uniqueStorage().properties.allowsExpensiveNetworkAccess = newValue }
    }
    public var allowsConstrainedNetworkAccess: Bool {
        get { storage.properties.allowsConstrainedNetworkAccess }
        set { uniqueStorage().properties.allowsConstrainedNetworkAccess = newValue }
    }
    /// Accepted; Courier speaks HTTP/1.1 and HTTP/2.
    public var assumesHTTP3Capable: Bool {
        get { storage.properties.assumesHTTP3Capable }
        set { uniqueStorage().properties.assumesHTTP3Capable = newValue }
    }
    public var requiresDNSSECValidation: Bool {
        get { storage.properties.requiresDNSSECValidation }
        set { uniqueStorage().properties.requiresDNSSECValidation = newValue }
    }
    public var httpShouldHandleCookies: Bool {
        get { storage.properties.httpShouldHandleCookies }
        set { uniqueStorage().properties.httpShouldHandleCookies = newValue }
    }
    public var httpShouldUsePipelining: Bool {
        get { storage.properties.httpShouldUsePipelining }
        set { uniqueStorage().properties.httpShouldUsePipelining = newValue }
    }

    /// True once `timeoutInterval` was assigned.
    var isTimeoutIntervalSet: Bool { storage.properties.isTimeoutIntervalSet }
    private var method: String {
        get { storage.properties.method }
        set { uniqueStorage().properties.method = newValue }
    }
    /// Header fields in the order they were first set.
    private var headerFields: [(name: String, value: String)] {
        get { storage.properties.headerFields }
        _modify { yield &uniqueStorage().properties.headerFields }
    }
    private var body: Body {
        get { storage.properties.body }
        set { uniqueStorage().properties.body = newValue }
    }
    /// What `URLProtocol.setProperty(_:forKey:in:)` stored; not part of equality.
    var protocolProperties: [String: Any] {
        get { storage.properties.protocolProperties }
        _modify { yield &uniqueStorage().properties.protocolProperties }
    }

    private enum Body {
        case none
        case data(Data)
        case stream(InputStream)
    }

    public init(url: URL, cachePolicy: CachePolicy = .useProtocolCachePolicy, timeoutInterval: TimeInterval = 60.0) {
        storage = Storage(Properties(url: url, cachePolicy: cachePolicy, timeoutInterval: timeoutInterval))
    }

    /// The HTTP method; "GET" unless set. Common methods are upper-cased; nil restores "GET".
    public var httpMethod: String? {
        get { method }
        set {
            guard let newValue else {
                method = "GET"
                return
            }
            let upper = newValue.uppercased()
            method = ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"].contains(upper) ? upper : newValue
        }
    }

    /// Every header field; nil when there are none.
    public var allHTTPHeaderFields: [String: String]? {
        get {
            guard !headerFields.isEmpty else { return nil }
            var result: [String: String] = [:]
            for field in headerFields { result[field.name] = field.value }
            return result
        }
        set {
            headerFields = []
            for (name, value) in (newValue ?? [:]).sorted(by: { $0.key < $1.key }) {
                setValue(value, forHTTPHeaderField: name)
            }
        }
    }

    /// The value of a header field, found without regard to case.
    public func value(forHTTPHeaderField field: String) -> String? {
        headerFields.first { $0.name.caseInsensitiveCompare(field) == .orderedSame }?.value
    }

    /// Sets (or, with nil, removes) a header field.
    public mutating func setValue(_ value: String?, forHTTPHeaderField field: String) {
        let index = headerFields.firstIndex { $0.name.caseInsensitiveCompare(field) == .orderedSame }
        switch (index, value) {
        case (let index?, let value?): headerFields[index].value = value
        case (let index?, nil): headerFields.remove(at: index)
        case (nil, let value?): headerFields.append((field, value))
        case (nil, nil): break
        }
    }

    /// Appends a value to a header field, comma-separated.
    public mutating func addValue(_ value: String, forHTTPHeaderField field: String) {
        if let index = headerFields.firstIndex(where: { $0.name.caseInsensitiveCompare(field) == .orderedSame }) {
            headerFields[index].value += "," + value
        } else {
            headerFields.append((field, value))
        }
    }

    /// The body as bytes.
    public var httpBody: Data? {
        get {
            if case .data(let data) = body { return data }
            return nil
        }
        set { body = newValue.map { .data($0) } ?? .none }
    }

    /// The body as a stream, read as the request is sent (chunked on HTTP/1.1).
    public var httpBodyStream: InputStream? {
        get {
            if case .stream(let stream) = body { return stream }
            return nil
        }
        set { body = newValue.map { .stream($0) } ?? .none }
    }

    /// Header fields in order, with their names as set.
    var orderedHeaderFields: [(name: String, value: String)] { headerFields }

    public static func == (lhs: URLRequest, rhs: URLRequest) -> Bool {
        guard lhs.url == rhs.url, lhs.cachePolicy == rhs.cachePolicy, lhs.timeoutInterval == rhs.timeoutInterval,
              lhs.mainDocumentURL == rhs.mainDocumentURL, lhs.networkServiceType == rhs.networkServiceType,
              lhs.allowsCellularAccess == rhs.allowsCellularAccess, lhs.httpMethod == rhs.httpMethod,
              lhs.httpShouldHandleCookies == rhs.httpShouldHandleCookies,
              lhs.httpShouldUsePipelining == rhs.httpShouldUsePipelining,
              lhs.allHTTPHeaderFields == rhs.allHTTPHeaderFields else { return false }
        switch (lhs.body, rhs.body) {
        case (.none, .none): return true
        case (.data(let l), .data(let r)): return l == r
        case (.stream(let l), .stream(let r)): return l === r
        default: return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(url)
        hasher.combine(method)
        hasher.combine(cachePolicy)
        hasher.combine(httpBody)
    }
}

extension URLRequest: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String { url?.description ?? "url: nil" }
    public var debugDescription: String { description }

    /// The request's properties as a mirror's children, in FoundationNetworking's order and
    /// with its labels; the cache policy appears as its raw value.
    public var customMirror: Mirror {
        let children: [Mirror.Child] = [
            (label: "url", value: url as Any),
            (label: "cachePolicy", value: cachePolicy.rawValue),
            (label: "timeoutInterval", value: timeoutInterval),
            (label: "mainDocumentURL", value: mainDocumentURL as Any),
            (label: "networkServiceType", value: networkServiceType),
            (label: "allowsCellularAccess", value: allowsCellularAccess),
            (label: "httpMethod", value: httpMethod as Any),
            (label: "allHTTPHeaderFields", value: allHTTPHeaderFields as Any),
            (label: "httpBody", value: httpBody as Any),
            (label: "httpBodyStream", value: httpBodyStream as Any),
            (label: "httpShouldHandleCookies", value: httpShouldHandleCookies),
            (label: "httpShouldUsePipelining", value: httpShouldUsePipelining),
        ]
        return Mirror(self, children: children, displayStyle: .struct)
    }
}
