import CourierCore
import CourierSync
import Foundation
import Logging


/// A response and its body as a cache keeps them: Apple's `CachedURLResponse`.
///
/// Immutable to user code. Courier's session also records, in internal fields, what RFC 9111
/// needs to judge the entry later: the request's header fields (for `Vary`), and when the
/// request was sent and the response received (for the age calculation). Set them before the
/// object is stored or shared: a cache hands out the object it was given.
open class CachedURLResponse: NSObject, NSCopying, @unchecked Sendable {
    private let storedResponse: URLResponse
    private let storedData: Data
    private let storedUserInfo: [AnyHashable: Any]?
    private let storedStoragePolicy: URLCache.StoragePolicy

    /// The header fields of the request that got the response, as sent, for `Vary` (RFC 9111
    /// section 4.1). Empty by default.
    var requestFields: HTTPFields
    /// When the request was sent: `request_time` of RFC 9111 section 4.2.3. The moment the
    /// object was made by default.
    var requestTime: Date
    /// When the response was received: `response_time` of RFC 9111 section 4.2.3, and the
    /// date ``URLCache/removeCachedResponses(since:)`` compares. The moment the object was
    /// made by default.
    var responseTime: Date

    /// A response allowed in memory and on disk, without user info.
    public init(response: URLResponse, data: Data) {
        let now = Date()
        storedResponse = response
        storedData = data
        storedUserInfo = nil
        storedStoragePolicy = .allowed
        requestFields = HTTPFields()
        requestTime = now
        responseTime = now
        super.init()
    }

    /// A response with user info and a storage policy. On disk, only user info that is a
    /// property list (string keys; strings, numbers, dates, data, arrays and dictionaries)
    /// is kept; other user info is kept in memory only.
    public init(response: URLResponse, data: Data, userInfo: [AnyHashable: Any]? = nil, storagePolicy: URLCache.StoragePolicy) {
        let now = Date()
        storedResponse = response
        storedData = data
        storedUserInfo = userInfo
        storedStoragePolicy = storagePolicy
        requestFields = HTTPFields()
        requestTime = now
        responseTime = now
        super.init()
    }

    /// Decodes an archived cached response (NSSecureCoding); nil for an archive that holds none.
    public required convenience init?(coder: NSCoder) {
        guard let fields = CachedURLResponse.decodedFields(from: coder) else { return nil }
        self.init(response: fields.response, data: fields.data, userInfo: fields.userInfo, storagePolicy: fields.policy)
    }

    /// A response with every internal field: the session's initializer.
    ///
    /// - Parameters:
    ///   - requestFields: the header fields of the request as sent (for `Vary`).
    ///   - requestTime: when that request was sent.
    ///   - responseTime: when the response head arrived.
    convenience init(
        response: URLResponse, data: Data, userInfo: [AnyHashable: Any]? = nil, storagePolicy: URLCache.StoragePolicy,
        requestFields: HTTPFields, requestTime: Date, responseTime: Date
    ) {
        self.init(response: response, data: data, userInfo: userInfo, storagePolicy: storagePolicy)
        self.requestFields = requestFields
        self.requestTime = requestTime
        self.responseTime = responseTime
    }

    /// The response.
    open var response: URLResponse { storedResponse }
    /// The body.
    open var data: Data { storedData }
    /// Whatever the storer attached; nil for none.
    open var userInfo: [AnyHashable: Any]? { storedUserInfo }
    /// Where a cache may keep it.
    open var storagePolicy: URLCache.StoragePolicy { storedStoragePolicy }

    open override func copy() -> Any {
        copy(with: nil)
    }

    /// A new object with the same values (internal fields included), so that changing the
    /// copy's internal fields leaves this one alone.
    open func copy(with zone: NSZone? = nil) -> Any {
        CachedURLResponse(
            response: storedResponse, data: storedData, userInfo: storedUserInfo, storagePolicy: storedStoragePolicy,
            requestFields: requestFields, requestTime: requestTime, responseTime: responseTime
        )
    }

    /// Equal when response, data and storage policy are (user info holds values that cannot be
    /// compared, as in swift-corelibs-foundation).
    open override func isEqual(_ value: Any?) -> Bool {
        guard let other = value as? CachedURLResponse else { return false }
        if other === self { return true }
        return response.isEqual(other.response) && data == other.data && storagePolicy == other.storagePolicy
    }

    open override var hash: Int {
        var hasher = Hasher()
        hasher.combine(response.hash)
        hasher.combine(data)
        hasher.combine(storagePolicy)
        return hasher.finalize()
    }

    open override var description: String {
        "<CachedURLResponse \(response.url?.absoluteString ?? "nil")> { \(data.count) bytes, \(storagePolicy) }"
    }
}
