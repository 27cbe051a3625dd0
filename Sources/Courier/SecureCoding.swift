import Foundation

// NSSecureCoding for the value classes FoundationNetworking archives: a protection space, a
// cached response and a cookie round-trip through NSKeyedArchiver, keyed archives only.

extension URLProtectionSpace: NSSecureCoding {
    private enum ArchiveKey {
        static let host = "courier.host"
        static let port = "courier.port"
        static let scheme = "courier.protocol"
        static let realm = "courier.realm"
        static let method = "courier.authenticationMethod"
        static let proxyType = "courier.proxyType"
    }

    public static var supportsSecureCoding: Bool { true }

    /// Encodes the fields `isEqual` compares; a server trust or distinguished names, which
    /// only a live challenge carries, are left out.
    public func encode(with coder: NSCoder) {
        guard coder.allowsKeyedCoding else { return }
        coder.encode(NSString(string: host), forKey: ArchiveKey.host)
        coder.encode(Int64(port), forKey: ArchiveKey.port)
        if let scheme = self.protocol { coder.encode(NSString(string: scheme), forKey: ArchiveKey.scheme) }
        if let realm { coder.encode(NSString(string: realm), forKey: ArchiveKey.realm) }
        coder.encode(NSString(string: authenticationMethod), forKey: ArchiveKey.method)
        if let proxyType { coder.encode(NSString(string: proxyType), forKey: ArchiveKey.proxyType) }
    }
}

extension URLProtectionSpace {
    /// What an archive holds; nil when it has no host or method.
    static func decodedFields(from coder: NSCoder) -> (host: String, port: Int, scheme: String?, realm: String?, method: String, proxyType: String?)? {
        guard coder.allowsKeyedCoding,
              let host = coder.decodeObject(of: NSString.self, forKey: "courier.host")?.description,
              let method = coder.decodeObject(of: NSString.self, forKey: "courier.authenticationMethod")?.description else { return nil }
        return (
            host, Int(coder.decodeInt64(forKey: "courier.port")),
            optionalString(coder, "courier.protocol"), optionalString(coder, "courier.realm"), method,
            optionalString(coder, "courier.proxyType")
        )
    }
}

/// The string under `key`, or nil when the archive has none (asked first: reading an absent
/// key records a decoding error in the unarchiver).
private func optionalString(_ coder: NSCoder, _ key: String) -> String? {
    guard coder.containsValue(forKey: key) else { return nil }
    return coder.decodeObject(of: NSString.self, forKey: key)?.description
}

extension CachedURLResponse: NSSecureCoding {
    public static var supportsSecureCoding: Bool { true }

    /// Encodes the response, the body and the storage policy; user info only when it is a
    /// property list with string keys (as the disk cache keeps it).
    public func encode(with coder: NSCoder) {
        guard coder.allowsKeyedCoding else { return }
        coder.encode(response, forKey: "courier.response")
        coder.encode(NSData(data: data), forKey: "courier.data")
        coder.encode(Int64(storagePolicy.rawValue), forKey: "courier.storagePolicy")
        if let userInfo, let list = PropertyListArchive.archivable(userInfo) {
            coder.encode(list, forKey: "courier.userInfo")
        }
    }

    /// What an archive holds; nil when it has no response or body.
    static func decodedFields(from coder: NSCoder) -> (response: URLResponse, data: Data, userInfo: [AnyHashable: Any]?, policy: URLCache.StoragePolicy)? {
        guard coder.allowsKeyedCoding,
              let response = coder.decodeObject(of: [HTTPURLResponse.self, URLResponse.self], forKey: "courier.response") as? URLResponse,
              let data = coder.decodeObject(of: NSData.self, forKey: "courier.data") else { return nil }
        let policy = URLCache.StoragePolicy(rawValue: UInt(max(coder.decodeInt64(forKey: "courier.storagePolicy"), 0))) ?? .allowed
        // An absent key is asked about first: reading it would record a decoding error.
        let userInfo = coder.containsValue(forKey: "courier.userInfo")
            ? (coder.decodeObject(of: PropertyListArchive.classes, forKey: "courier.userInfo") as? NSDictionary)
                .flatMap { PropertyListArchive.unarchived($0) as? [AnyHashable: Any] }
            : nil
        return (response, Data(referencing: data), userInfo, policy)
    }
}

extension HTTPCookie: NSSecureCoding {
    public static var supportsSecureCoding: Bool { true }

    /// Encodes the cookie's ``properties``; decoding rebuilds it from them, with its creation
    /// time (and so its place in a `Cookie` field).
    public func encode(with coder: NSCoder) {
        guard coder.allowsKeyedCoding, let properties else { return }
        var byName: [String: Any] = [:]
        for (key, value) in properties { byName[key.rawValue] = value }
        if let list = PropertyListArchive.archivable(byName) { coder.encode(list, forKey: "courier.properties") }
    }

    /// The properties an archive holds; nil when it holds none.
    static func decodedProperties(from coder: NSCoder) -> [HTTPCookiePropertyKey: Any]? {
        guard coder.allowsKeyedCoding, coder.containsValue(forKey: "courier.properties"),
              let list = coder.decodeObject(of: PropertyListArchive.classes, forKey: "courier.properties") as? NSDictionary,
              let byName = PropertyListArchive.unarchived(list) as? [AnyHashable: Any] else { return nil }
        var properties: [HTTPCookiePropertyKey: Any] = [:]
        for (key, value) in byName {
            guard let name = key as? String else { continue }
            properties[HTTPCookiePropertyKey(rawValue: name)] = value
        }
        return properties
    }
}

/// Property-list values as Foundation objects an archive can hold under secure coding, and
/// back: strings, numbers (Bool and integers included), dates, data, URLs, arrays and
/// dictionaries with string keys.
enum PropertyListArchive {
    static let classes: [AnyClass] = [NSDictionary.self, NSArray.self, NSString.self, NSNumber.self, NSDate.self, NSData.self, NSURL.self]

    /// The object for `value`; nil when something in it is not a property list.
    static func archivable(_ value: Any) -> NSObject? {
        switch value {
        case let string as String: return NSString(string: string)
        case let bool as Bool: return NSNumber(value: bool)
        case let int as Int: return NSNumber(value: int)
        case let int as Int64: return NSNumber(value: int)
        case let double as Double: return NSNumber(value: double)
        case let number as NSNumber: return number
        case let date as Date: return NSDate(timeIntervalSinceReferenceDate: date.timeIntervalSinceReferenceDate)
        case let data as Data: return NSData(data: data)
        case let url as URL: return NSURL(string: url.absoluteString)
        case let array as [Any]:
            var items: [AnyObject] = []
            for item in array {
                guard let archived = archivable(item) else { return nil }
                items.append(archived)
            }
            return NSArray(array: items)
        case let dictionary as [AnyHashable: Any]:
            let result = NSMutableDictionary()
            for (key, item) in dictionary {
                guard let name = key as? String, let archived = archivable(item) else { return nil }
                result.setObject(archived, forKey: NSString(string: name))
            }
            return result
        default:
            return nil
        }
    }

    /// The Swift value for an object `archivable` made.
    static func unarchived(_ object: Any) -> Any {
        switch object {
        case let string as NSString: return string.description
        case let date as NSDate: return Date(timeIntervalSinceReferenceDate: date.timeIntervalSinceReferenceDate)
        case let data as NSData: return Data(referencing: data)
        case let url as NSURL: return (url.absoluteURL as URL?) ?? url
        case let array as NSArray: return array.map { unarchived($0) }
        case let dictionary as NSDictionary:
            var result: [AnyHashable: Any] = [:]
            for (key, item) in dictionary {
                guard let name = key as? NSString else { continue }
                result[name.description] = unarchived(item)
            }
            return result
        default:
            return object
        }
    }
}
