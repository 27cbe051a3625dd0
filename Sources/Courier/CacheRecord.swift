import CCourierSQLite
import CourierCore
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif


/// One cached response as the disk cache keeps it: everything of a ``CachedURLResponse`` but
/// its body, which ``CacheDatabase`` keeps beside the row.
struct CacheRecord {
    /// The class of the stored response.
    enum Kind: Int64 {
        /// A plain `URLResponse` (a `URLProtocol`'s, for a scheme that is not HTTP): its MIME
        /// type, length and encoding are stored as they are.
        case url = 0
        /// An `HTTPURLResponse`: status, version and fields are stored; MIME type, length and
        /// encoding follow from the fields when it is rebuilt.
        case http = 1
    }

    /// The cache key: the request's URL without its fragment.
    var key: String
    /// The response's URL; nil when it had none (the key's URL is used then).
    var url: String?
    var kind: Kind
    /// 0 for a plain `URLResponse`.
    var statusCode: Int
    /// "HTTP/1.1", "HTTP/2"…; empty for a plain `URLResponse`.
    var httpVersion: String
    var responseFields: HTTPFields
    var mimeType: String?
    var expectedContentLength: Int64
    var textEncodingName: String?
    /// The fields of the request that got the response (for `Vary`).
    var requestFields: HTTPFields
    var requestTime: Date
    var responseTime: Date
    /// Always `.allowed` on disk (the others are never written); stored for completeness.
    var storagePolicy: URLCache.StoragePolicy
    /// The user info as a binary property list; nil when there was none or it was not a
    /// property list.
    var userInfo: Data?
    var bodySize: Int
    /// What the entry counts for against the capacities: see ``URLCache/cost(of:)``.
    var cost: Int
}

extension CacheRecord {
    /// The record of `cached`, stored under `key`.
    init(_ cached: CachedURLResponse, key: String, cost: Int) {
        let response = cached.response
        self.key = key
        url = response.url?.absoluteString
        if let http = response as? HTTPURLResponse {
            kind = .http
            statusCode = http.statusCode
            httpVersion = http.httpVersion
            responseFields = http.fields
        } else {
            kind = .url
            statusCode = 0
            httpVersion = ""
            responseFields = HTTPFields()
        }
        mimeType = response.mimeType
        expectedContentLength = response.expectedContentLength
        textEncodingName = response.textEncodingName
        requestFields = cached.requestFields
        requestTime = cached.requestTime
        responseTime = cached.responseTime
        storagePolicy = cached.storagePolicy
        userInfo = Self.encodeUserInfo(cached.userInfo)
        bodySize = cached.data.count
        self.cost = cost
    }

    /// The cached response this record describes, with `body`; nil when its URL cannot be
    /// read back.
    func makeCachedResponse(body: Data) -> CachedURLResponse? {
        guard let responseURL = url.flatMap({ URL(string: $0) }) ?? URL(string: key) else { return nil }
        let response: URLResponse
        switch kind {
        case .http:
            response = HTTPURLResponse(url: responseURL, statusCode: statusCode, version: httpVersion, fields: responseFields)
        case .url:
            response = URLResponse(
                url: responseURL, mimeType: mimeType, expectedContentLength: Int(expectedContentLength), textEncodingName: textEncodingName
            )
        }
        return CachedURLResponse(
            response: response, data: body, userInfo: Self.decodeUserInfo(userInfo), storagePolicy: storagePolicy,
            requestFields: requestFields, requestTime: requestTime, responseTime: responseTime
        )
    }

    // MARK: User info as a property list

    /// `userInfo` as a binary property list; nil when it is nil, when a key is not a string,
    /// or when a value is not a property-list value (string, number, date, data, or arrays and
    /// string-keyed dictionaries of those). Such a user info is not written: the entry is
    /// stored without it.
    static func encodeUserInfo(_ userInfo: [AnyHashable: Any]?) -> Data? {
        guard let userInfo else { return nil }
        var dictionary: [String: Any] = [:]
        for (key, value) in userInfo {
            guard let name = key.base as? String else { return nil }
            dictionary[name] = value
        }
        guard PropertyListSerialization.propertyList(dictionary, isValidFor: .binary) else { return nil }
        return try? PropertyListSerialization.data(fromPropertyList: dictionary, format: .binary, options: 0)
    }

    /// The user info written by ``encodeUserInfo(_:)``; nil for nil or for anything that is
    /// not a dictionary.
    static func decodeUserInfo(_ data: Data?) -> [AnyHashable: Any]? {
        guard let data, let list = try? PropertyListSerialization.propertyList(from: data, options: [], format: nil) else { return nil }
        if let dictionary = list as? [AnyHashable: Any] { return dictionary }
        if let dictionary = list as? [String: Any] {
            var converted: [AnyHashable: Any] = [:]
            for (key, value) in dictionary { converted[AnyHashable(key)] = value }
            return converted
        }
        return nil
    }
}
