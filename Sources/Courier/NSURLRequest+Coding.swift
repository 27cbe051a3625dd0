import Foundation

// Archiving an `NSURLRequest`. The keys and encodings are FoundationNetworking's (objects under
// "NS." keys, the body as inline bytes), so that an archive written by one decodes with the
// other once the class name is mapped (`NSKeyedUnarchiver.setClass(_:forClassName:)`). Courier
// adds a few keys of its own, under "Courier.", for what FoundationNetworking does not keep.
// The body stream is never archived: a stream cannot be written into an archive, and Apple's
// and FoundationNetworking's requests leave it out too.
//
// Every optional key is checked with `containsValue(forKey:)` before it is read: a secure
// `NSKeyedUnarchiver` reports a missing key as a decoding error, which fails the whole archive.

extension NSURLRequest {
    /// Archive keys.
    enum ArchiveKey {
        static let url = "NS.url"
        static let headerFields = "NS._allHTTPHeaderFields"
        static let mainDocumentURL = "NS.mainDocumentURL"
        static let httpMethod = "NS.httpMethod"
        static let cachePolicy = "NS._cachePolicy"
        static let timeoutInterval = "NS._timeoutInterval"
        static let httpBody = "NS.httpBody"
        static let networkServiceType = "NS._networkServiceType"
        static let allowsCellularAccess = "NS._allowsCellularAccess"
        static let httpShouldHandleCookies = "NS._httpShouldHandleCookies"
        static let httpShouldUsePipelining = "NS._httpShouldUsePipelining"
        /// Whether `timeoutInterval` was assigned (so that it wins over the session's).
        static let isTimeoutIntervalSet = "Courier.isTimeoutIntervalSet"
        static let allowsExpensiveNetworkAccess = "Courier.allowsExpensiveNetworkAccess"
        static let allowsConstrainedNetworkAccess = "Courier.allowsConstrainedNetworkAccess"
        static let assumesHTTP3Capable = "Courier.assumesHTTP3Capable"
        static let requiresDNSSECValidation = "Courier.requiresDNSSECValidation"
    }

    /// Writes `request` into a keyed archive; an unkeyed coder gets nothing.
    static func write(_ request: URLRequest, to coder: NSCoder) {
        guard coder.allowsKeyedCoding else { return }
        if let url = request.url { coder.encode(url as NSURL, forKey: ArchiveKey.url) }
        if let fields = request.allHTTPHeaderFields {
            coder.encode(NSDictionary(dictionary: fields), forKey: ArchiveKey.headerFields)
        }
        if let mainDocumentURL = request.mainDocumentURL {
            coder.encode(mainDocumentURL as NSURL, forKey: ArchiveKey.mainDocumentURL)
        }
        if let method = request.httpMethod { coder.encode(NSString(string: method), forKey: ArchiveKey.httpMethod) }
        coder.encode(NSNumber(value: request.cachePolicy.rawValue), forKey: ArchiveKey.cachePolicy)
        coder.encode(NSNumber(value: request.timeoutInterval), forKey: ArchiveKey.timeoutInterval)
        if let body = request.httpBody {
            body.withUnsafeBytes { bytes in
                coder.encodeBytes(bytes.bindMemory(to: UInt8.self).baseAddress, length: bytes.count, forKey: ArchiveKey.httpBody)
            }
        }
        coder.encode(NSNumber(value: request.networkServiceType.rawValue), forKey: ArchiveKey.networkServiceType)
        let flags: [(String, Bool)] = [
            (ArchiveKey.allowsCellularAccess, request.allowsCellularAccess),
            (ArchiveKey.httpShouldHandleCookies, request.httpShouldHandleCookies),
            (ArchiveKey.httpShouldUsePipelining, request.httpShouldUsePipelining),
            (ArchiveKey.isTimeoutIntervalSet, request.isTimeoutIntervalSet),
            (ArchiveKey.allowsExpensiveNetworkAccess, request.allowsExpensiveNetworkAccess),
            (ArchiveKey.allowsConstrainedNetworkAccess, request.allowsConstrainedNetworkAccess),
            (ArchiveKey.assumesHTTP3Capable, request.assumesHTTP3Capable),
            (ArchiveKey.requiresDNSSECValidation, request.requiresDNSSECValidation),
        ]
        for (key, flag) in flags { coder.encode(NSNumber(value: flag), forKey: key) }
    }

    /// Reads a request from a keyed archive. Nil when `coder` is not keyed or the archive has no
    /// `NSURL` under the URL key; a property whose key is absent or of the wrong type keeps its
    /// default, and a raw value no case has falls back to the default case.
    static func decodedRequest(from coder: NSCoder) -> URLRequest? {
        guard coder.allowsKeyedCoding, coder.containsValue(forKey: ArchiveKey.url),
              let archivedURL = coder.decodeObject(of: NSURL.self, forKey: ArchiveKey.url) else { return nil }
        let policy = decodedNumber(ArchiveKey.cachePolicy, in: coder).flatMap { CachePolicy(rawValue: $0.uintValue) }
        let timeout = decodedNumber(ArchiveKey.timeoutInterval, in: coder)?.doubleValue
        var request = URLRequest(
            url: archivedURL as URL,
            cachePolicy: policy ?? .useProtocolCachePolicy,
            timeoutInterval: timeout ?? URLRequest.defaultTimeoutInterval
        )
        // The initializer's timeout does not count as assigned; an assigned one is assigned again.
        if let timeout, decodedBool(ArchiveKey.isTimeoutIntervalSet, in: coder) == true {
            request.timeoutInterval = timeout
        }
        if coder.containsValue(forKey: ArchiveKey.mainDocumentURL),
           let mainDocumentURL = coder.decodeObject(of: NSURL.self, forKey: ArchiveKey.mainDocumentURL) {
            request.mainDocumentURL = mainDocumentURL as URL
        }
        if coder.containsValue(forKey: ArchiveKey.httpMethod),
           let method = coder.decodeObject(of: NSString.self, forKey: ArchiveKey.httpMethod) {
            request.httpMethod = method as String
        }
        if coder.containsValue(forKey: ArchiveKey.headerFields),
           let dictionary = coder.decodeObject(of: [NSDictionary.self, NSString.self], forKey: ArchiveKey.headerFields) as? NSDictionary {
            var fields: [String: String] = [:]
            for (key, object) in dictionary {
                guard let name = key as? String, let value = object as? String else { continue }
                fields[name] = value
            }
            request.allHTTPHeaderFields = fields.isEmpty ? nil : fields
        }
        if coder.containsValue(forKey: ArchiveKey.httpBody) {
            request.httpBody = coder.withDecodedUnsafeBytes(forKey: ArchiveKey.httpBody) { bytes in
                bytes.map { Data($0) }
            }
        }
        if let serviceType = decodedNumber(ArchiveKey.networkServiceType, in: coder) {
            request.networkServiceType = NetworkServiceType(rawValue: serviceType.uintValue) ?? .default
        }
        if let flag = decodedBool(ArchiveKey.allowsCellularAccess, in: coder) { request.allowsCellularAccess = flag }
        if let flag = decodedBool(ArchiveKey.httpShouldHandleCookies, in: coder) { request.httpShouldHandleCookies = flag }
        if let flag = decodedBool(ArchiveKey.httpShouldUsePipelining, in: coder) { request.httpShouldUsePipelining = flag }
        if let flag = decodedBool(ArchiveKey.allowsExpensiveNetworkAccess, in: coder) { request.allowsExpensiveNetworkAccess = flag }
        if let flag = decodedBool(ArchiveKey.allowsConstrainedNetworkAccess, in: coder) { request.allowsConstrainedNetworkAccess = flag }
        if let flag = decodedBool(ArchiveKey.assumesHTTP3Capable, in: coder) { request.assumesHTTP3Capable = flag }
        if let flag = decodedBool(ArchiveKey.requiresDNSSECValidation, in: coder) { request.requiresDNSSECValidation = flag }
        return request
    }

    /// The `NSNumber` under `key`; nil when the key is absent or holds something else.
    private static func decodedNumber(_ key: String, in coder: NSCoder) -> NSNumber? {
        guard coder.containsValue(forKey: key) else { return nil }
        return coder.decodeObject(of: NSNumber.self, forKey: key)
    }

    /// The Boolean under `key`; nil when the key is absent or holds something else.
    private static func decodedBool(_ key: String, in coder: NSCoder) -> Bool? {
        decodedNumber(key, in: coder)?.boolValue
    }
}
