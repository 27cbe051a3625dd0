import CourierCore
import CourierSync
import Foundation

/// The metadata of a response, independent of protocol: Apple's `URLResponse`.
///
/// Archiving (`NSSecureCoding`) keeps every property, under FoundationNetworking's keys.
open class URLResponse: NSObject, NSSecureCoding, NSCopying, @unchecked Sendable {
    @exclusivity(unchecked) open private(set) var url: URL?
    /// The MIME type from Content-Type, lower-cased, without parameters.
    open var mimeType: String? { storedMimeType }
    /// The body's length as the server declared it (before content decoding), or -1.
    @exclusivity(unchecked) open fileprivate(set) var expectedContentLength: Int64
    /// The `charset` parameter of Content-Type.
    open var textEncodingName: String? { storedTextEncodingName }
    @exclusivity(unchecked) private var storedMimeType: String?
    @exclusivity(unchecked) private var storedTextEncodingName: String?

    public init(url: URL, mimeType: String?, expectedContentLength length: Int, textEncodingName name: String?) {
        self.url = url
        self.storedMimeType = mimeType
        self.expectedContentLength = Int64(length)
        self.storedTextEncodingName = name
        super.init()
    }

    /// Decodes a response from a keyed archive. Nil when `aDecoder` is not keyed or the archive
    /// has no `NSURL` under the URL key; an absent MIME type or encoding name stays nil, an absent
    /// length is -1.
    public required init?(coder aDecoder: NSCoder) {
        guard aDecoder.allowsKeyedCoding, aDecoder.containsValue(forKey: ArchiveKey.url),
              let archivedURL = aDecoder.decodeObject(of: NSURL.self, forKey: ArchiveKey.url) else { return nil }
        self.url = archivedURL as URL
        self.storedMimeType = URLResponse.decodedString(ArchiveKey.mimeType, in: aDecoder)
        self.expectedContentLength = aDecoder.containsValue(forKey: ArchiveKey.expectedContentLength)
            ? aDecoder.decodeInt64(forKey: ArchiveKey.expectedContentLength) : -1
        self.storedTextEncodingName = URLResponse.decodedString(ArchiveKey.textEncodingName, in: aDecoder)
        super.init()
    }

    /// True: decoding checks the class of every object it reads.
    open class var supportsSecureCoding: Bool { true }

    /// Writes the URL, MIME type, expected length and encoding name into a keyed archive (an
    /// unkeyed coder gets nothing), plus the suggested file name, which FoundationNetworking
    /// reads back; Courier works it out again from the other properties instead.
    open func encode(with coder: NSCoder) {
        guard coder.allowsKeyedCoding else { return }
        if let url { coder.encode(url as NSURL, forKey: ArchiveKey.url) }
        if let mimeType { coder.encode(NSString(string: mimeType), forKey: ArchiveKey.mimeType) }
        coder.encode(expectedContentLength, forKey: ArchiveKey.expectedContentLength)
        if let textEncodingName { coder.encode(NSString(string: textEncodingName), forKey: ArchiveKey.textEncodingName) }
        if let suggestedFilename { coder.encode(NSString(string: suggestedFilename), forKey: ArchiveKey.suggestedFilename) }
    }

    /// A name for saving the body: Content-Disposition's filename, else the URL's last path
    /// component, else "Unknown". Always a plain file name: never a path, ".", or "..".
    open var suggestedFilename: String? {
        URLResponse.safeFilename(url?.lastPathComponent) ?? "Unknown"
    }

    /// `name` reduced to what follows its last slash (a decoded `%2F` included), or nil when
    /// nothing usable is left.
    static func safeFilename(_ name: String?) -> String? {
        guard let name else { return nil }
        let base = name.split(separator: "/", omittingEmptySubsequences: true).last.map(String.init) ?? ""
        let trimmed = base.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty, trimmed != ".", trimmed != "..", !trimmed.contains("\0") else { return nil }
        return trimmed
    }

    open override func copy() -> Any { self }
    open func copy(with zone: NSZone? = nil) -> Any { self }

    open override func isEqual(_ value: Any?) -> Bool {
        guard let other = value as? URLResponse else { return false }
        return other === self || (url == other.url && mimeType == other.mimeType
            && expectedContentLength == other.expectedContentLength && textEncodingName == other.textEncodingName)
    }

    open override var hash: Int { url?.hashValue ?? 0 }
}

/// The response to an HTTP request: Apple's `HTTPURLResponse`.
///
/// Archiving keeps, besides FoundationNetworking's status code and joined header dictionary,
/// the protocol version and every field as received (order, case and repeats), under
/// Courier's own keys.
open class HTTPURLResponse: URLResponse, @unchecked Sendable {
    /// The status code.
    public let statusCode: Int
    /// Courier extension: the protocol version of the response, "HTTP/1.1", "HTTP/1.0" or
    /// "HTTP/2" (Apple's class takes it in its initializer but does not show it).
    public let httpVersion: String
    let fields: HTTPFields

    /// Courier extension: the header fields as the server sent them, in order, names as
    /// written and repeated fields apart (``allHeaderFields`` joins repeats and has no order).
    public var courierOrderedHeaderFields: [(name: String, value: String)] {
        fields.fields.map { ($0.name, $0.value) }
    }

    /// A response built by hand, e.g. by a `URLProtocol` or a test.
    public init?(url: URL, statusCode: Int, httpVersion: String?, headerFields: [String: String]?) {
        guard (0...999).contains(statusCode) else { return nil }
        self.statusCode = statusCode
        self.httpVersion = httpVersion ?? "HTTP/1.1"
        self.fields = HTTPFields((headerFields ?? [:]).sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
        self.contentType = Mutex(.given)
        let parts = Self.parseContentType(fields.first("Content-Type"))
        super.init(
            url: url, mimeType: parts.mimeType,
            expectedContentLength: Self.contentLength(fields), textEncodingName: parts.charset
        )
    }

    /// A response from a parsed head. Its MIME type and text encoding are read from
    /// Content-Type at the first look (most responses are never asked): a type such as
    /// `application/octet-stream` is too long to be a string without an allocation.
    init(url: URL, head: HTTPResponseHead) {
        self.statusCode = head.status
        self.httpVersion = head.version.description
        self.fields = head.fields
        self.contentType = Mutex(.unread)
        super.init(url: url, mimeType: nil, expectedContentLength: head.validatedContentLength ?? Self.contentLength(head.fields), textEncodingName: nil)
    }

    /// Content-Type's parts, for a response from a parsed head: unread until asked.
    private enum ContentType {
        case given
        case unread
        case read(mimeType: String?, charset: String?)
    }

    private let contentType: Mutex<ContentType>

    open override var mimeType: String? {
        readContentType()?.mimeType ?? super.mimeType
    }

    open override var textEncodingName: String? {
        readContentType()?.charset ?? super.textEncodingName
    }

    /// The parts of Content-Type, parsed once; nil when they were given to the initializer.
    private func readContentType() -> (mimeType: String?, charset: String?)? {
        contentType.withLock { state in
            switch state {
            case .given:
                return nil
            case .read(let mimeType, let charset):
                return (mimeType, charset)
            case .unread:
                let parts = Self.parseContentType(fields.first("Content-Type"))
                state = .read(mimeType: parts.mimeType, charset: parts.charset)
                return parts
            }
        }
    }

    /// A response rebuilt from stored parts (the disk cache, a 304 merged into a stored
    /// response): `fields` as they were received, repeated fields and their order kept;
    /// `version` as ``httpVersion`` shows it ("HTTP/1.1", "HTTP/2").
    init(url: URL, statusCode: Int, version: String, fields: HTTPFields) {
        self.statusCode = statusCode
        self.httpVersion = version
        self.fields = fields
        self.contentType = Mutex(.given)
        let parts = Self.parseContentType(fields.first("Content-Type"))
        super.init(
            url: url, mimeType: parts.mimeType,
            expectedContentLength: Self.contentLength(fields), textEncodingName: parts.charset
        )
    }

    /// Decodes an HTTP response from a keyed archive. Nil when `aDecoder` is not keyed, the
    /// archive has no URL, or its status code is missing or outside 0...999. The fields come from
    /// Courier's ordered list when the archive has one, else from the header dictionary (an
    /// archive FoundationNetworking wrote); an absent version reads as "HTTP/1.1".
    public required init?(coder aDecoder: NSCoder) {
        guard aDecoder.allowsKeyedCoding, aDecoder.containsValue(forKey: URLResponse.ArchiveKey.statusCode) else { return nil }
        let status = aDecoder.decodeInteger(forKey: URLResponse.ArchiveKey.statusCode)
        guard (0...999).contains(status) else { return nil }
        self.statusCode = status
        self.httpVersion = URLResponse.decodedString(URLResponse.ArchiveKey.httpVersion, in: aDecoder) ?? "HTTP/1.1"
        self.fields = URLResponse.decodedFieldList(from: aDecoder)
            ?? URLResponse.decodedFieldDictionary(from: aDecoder) ?? HTTPFields()
        self.contentType = Mutex(.given)
        super.init(coder: aDecoder)
    }

    /// Writes what ``URLResponse`` writes, then the status code, the header dictionary as
    /// ``allHeaderFields`` shows it, the protocol version and the ordered list of fields (each
    /// an array of name and value).
    open override func encode(with coder: NSCoder) {
        guard coder.allowsKeyedCoding else { return }
        super.encode(with: coder)
        coder.encode(statusCode, forKey: URLResponse.ArchiveKey.statusCode)
        var dictionary: [String: String] = [:]
        for (key, value) in allHeaderFields {
            if let name = key as? String, let text = value as? String { dictionary[name] = text }
        }
        coder.encode(NSDictionary(dictionary: dictionary), forKey: URLResponse.ArchiveKey.allHeaderFields)
        coder.encode(NSString(string: httpVersion), forKey: URLResponse.ArchiveKey.httpVersion)
        var pairs: [NSArray] = []
        pairs.reserveCapacity(fields.count)
        for index in 0..<fields.count {
            pairs.append(NSArray(array: [NSString(string: fields.name(at: index)), NSString(string: fields.value(at: index))]))
        }
        coder.encode(NSArray(array: pairs), forKey: URLResponse.ArchiveKey.fields)
    }

    /// Every header field; fields repeated in the response are joined with ", ".
    public var allHeaderFields: [AnyHashable: Any] {
        var result: [AnyHashable: Any] = [:]
        var canonicalNames: [String: String] = [:]
        for index in 0..<fields.count {
            let name = fields.name(at: index)
            let key = name.lowercased()
            if let existing = canonicalNames[key] {
                result[existing] = "\(result[existing]!), \(fields.value(at: index))"
            } else {
                canonicalNames[key] = name
                result[name] = fields.value(at: index)
            }
        }
        return result
    }

    /// The value of a header field, found without regard to case; repeated fields joined with ", ".
    public func value(forHTTPHeaderField field: String) -> String? {
        fields.combined(field)
    }

    open override var suggestedFilename: String? {
        if let disposition = fields.first("Content-Disposition"), let name = Self.filename(fromDisposition: disposition) {
            return name
        }
        return super.suggestedFilename
    }

    /// A short English phrase for a status code.
    open class func localizedString(forStatusCode statusCode: Int) -> String {
        Self.reasonPhrases[statusCode] ?? {
            switch statusCode {
            case 100..<200: return "informational"
            case 200..<300: return "success"
            case 300..<400: return "redirected"
            case 400..<500: return "client error"
            case 500..<600: return "server error"
            default: return "Server Error"
            }
        }()
    }

    open override var description: String {
        "<HTTPURLResponse \(url?.absoluteString ?? "nil")> { Status Code: \(statusCode), Headers: \(fields.count) }"
    }

    private static func contentLength(_ fields: HTTPFields) -> Int {
        // Read from the field's bytes, without making a String of them.
        fields.withFirstValue("Content-Length") { value -> Int in
            // The first element of a possibly repeated list; the parser already checked agreement.
            var length = 0
            var digits = 0
            for byte in value {
                if byte == UInt8(ascii: ",") { break }
                if byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") { continue }
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), digits < 18 else { return -1 }
                length = length * 10 + Int(byte - UInt8(ascii: "0"))
                digits += 1
            }
            return digits > 0 ? length : -1
        } ?? -1
    }

    /// Splits `type/subtype; charset=x` (RFC 9110 section 8.3.1) with plain ASCII operations.
    static func parseContentType(_ value: String?) -> (mimeType: String?, charset: String?) {
        guard let value else { return (nil, nil) }
        // The common case, a bare lower-case ASCII type without parameters or padding, is the
        // value itself.
        func isPlain(_ byte: UInt8) -> Bool {
            byte < 0x80 && byte != UInt8(ascii: ";") && byte != UInt8(ascii: " ") && byte != UInt8(ascii: "\t")
                && !(byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
        }
        // Scanned as contiguous bytes: stepping through the UTF-8 view costs several times as much.
        if !value.isEmpty, value.utf8.withContiguousStorageIfAvailable({ $0.allSatisfy(isPlain) }) ?? value.utf8.allSatisfy(isPlain) {
            return (value, nil)
        }
        let parts = value.split(separator: ";", omittingEmptySubsequences: false)
        let type = asciiTrimmed(parts[0])
        guard !type.isEmpty else { return (nil, nil) }
        var charset: String?
        for parameter in parts.dropFirst() {
            guard let equals = parameter.firstIndex(of: "=") else { continue }
            if asciiTrimmed(parameter[..<equals]).lowercased() == "charset" {
                var raw = asciiTrimmed(parameter[parameter.index(after: equals)...])
                if raw.hasPrefix("\"") && raw.hasSuffix("\"") && raw.count >= 2 { raw = raw.dropFirst().dropLast() }
                charset = raw.lowercased()
            }
        }
        return (type.lowercased(), charset)
    }

    /// `text` without leading and trailing spaces and tabs.
    static func asciiTrimmed(_ text: Substring) -> Substring {
        var trimmed = text
        while let first = trimmed.first, first == " " || first == "\t" { trimmed.removeFirst() }
        while let last = trimmed.last, last == " " || last == "\t" { trimmed.removeLast() }
        return trimmed
    }

    /// The `filename` parameter of a Content-Disposition value (RFC 6266 section 4.1, with
    /// quoted-string values that may hold `;`), reduced to a plain file name so it cannot name
    /// another directory.
    static func filename(fromDisposition value: String) -> String? {
        for (name, parameterValue) in dispositionParameters(value) where name == "filename" {
            if let safe = URLResponse.safeFilename(parameterValue) { return safe }
        }
        return nil
    }

    /// The parameters after the disposition type: lower-cased names, unquoted values.
    private static func dispositionParameters(_ value: String) -> [(String, String)] {
        var parameters: [(String, String)] = []
        var characters = Substring(value)
        // Skip the disposition type.
        guard let first = characters.firstIndex(of: ";") else { return [] }
        characters = characters[characters.index(after: first)...]
        while !characters.isEmpty {
            characters = characters.drop { $0 == " " || $0 == "\t" || $0 == ";" }
            guard let equals = characters.firstIndex(of: "=") else { break }
            let name = characters[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            characters = characters[characters.index(after: equals)...].drop { $0 == " " || $0 == "\t" }
            var parameterValue = ""
            if characters.first == "\"" {
                characters = characters.dropFirst()
                var escaped = false
                while let character = characters.first {
                    characters = characters.dropFirst()
                    if escaped {
                        parameterValue.append(character)
                        escaped = false
                    } else if character == "\\" {
                        escaped = true
                    } else if character == "\"" {
                        break
                    } else {
                        parameterValue.append(character)
                    }
                }
                characters = characters.drop { $0 != ";" }
            } else {
                let end = characters.firstIndex(of: ";") ?? characters.endIndex
                parameterValue = characters[..<end].trimmingCharacters(in: .whitespaces)
                characters = characters[end...]
            }
            parameters.append((name, parameterValue))
        }
        return parameters
    }

    private static let reasonPhrases: [Int: String] = [
        100: "Continue", 101: "Switching Protocols", 103: "Early Hints",
        200: "OK", 201: "Created", 202: "Accepted", 203: "Non-Authoritative Information", 204: "No Content",
        205: "Reset Content", 206: "Partial Content",
        300: "Multiple Choices", 301: "Moved Permanently", 302: "Found", 303: "See Other", 304: "Not Modified",
        305: "Use Proxy", 307: "Temporary Redirect", 308: "Permanent Redirect",
        400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 403: "Forbidden", 404: "Not Found",
        405: "Method Not Allowed", 406: "Not Acceptable", 407: "Proxy Authentication Required",
        408: "Request Timeout", 409: "Conflict", 410: "Gone", 411: "Length Required", 412: "Precondition Failed",
        413: "Content Too Large", 414: "URI Too Long", 415: "Unsupported Media Type", 416: "Range Not Satisfiable",
        417: "Expectation Failed", 421: "Misdirected Request", 422: "Unprocessable Content", 426: "Upgrade Required",
        428: "Precondition Required", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
        500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable",
        504: "Gateway Timeout", 505: "HTTP Version Not Supported", 511: "Network Authentication Required",
    ]
}

// MARK: - Archiving

// Objects go under FoundationNetworking's "NS." keys, so an archive written by one decodes with
// the other once the class name is mapped; what FoundationNetworking does not keep goes under
// "Courier." keys. As in `NSURLRequest+Coding.swift`, every optional key is checked with
// `containsValue(forKey:)` before it is read: a secure `NSKeyedUnarchiver` reports a missing key
// as a decoding error, which fails the whole archive.
extension URLResponse {
    /// Archive keys, for ``URLResponse`` and ``HTTPURLResponse``.
    enum ArchiveKey {
        static let url = "NS.url"
        static let mimeType = "NS.mimeType"
        static let expectedContentLength = "NS.expectedContentLength"
        static let textEncodingName = "NS.textEncodingName"
        /// Written for FoundationNetworking; Courier does not read it.
        static let suggestedFilename = "NS.suggestedFilename"
        static let statusCode = "NS.statusCode"
        /// The fields as a dictionary, repeated names joined with ", ".
        static let allHeaderFields = "NS.allHeaderFields"
        /// The protocol version, "HTTP/1.1" or "HTTP/2".
        static let httpVersion = "Courier.httpVersion"
        /// Every field in order, each a two-element array of name and value.
        static let fields = "Courier.fields"
    }

    /// The string under `key`; nil when the key is absent or holds something else.
    static func decodedString(_ key: String, in coder: NSCoder) -> String? {
        guard coder.containsValue(forKey: key), let string = coder.decodeObject(of: NSString.self, forKey: key) else { return nil }
        return string as String
    }

    /// The ordered fields under ``ArchiveKey/fields``; nil when the key is absent or anything in
    /// it is not a pair of strings.
    static func decodedFieldList(from coder: NSCoder) -> HTTPFields? {
        guard coder.containsValue(forKey: ArchiveKey.fields),
              let list = coder.decodeObject(of: [NSArray.self, NSString.self], forKey: ArchiveKey.fields) as? NSArray
        else { return nil }
        var fields = HTTPFields()
        for entry in list {
            guard let items = archivedArray(entry), items.count == 2,
                  let name = archivedString(items[0]), let value = archivedString(items[1]) else { return nil }
            fields.append(name: name, value: value)
        }
        return fields
    }

    /// The fields under ``ArchiveKey/allHeaderFields``, ordered by name as the public
    /// initializer orders them; nil when the key is absent or holds no dictionary.
    static func decodedFieldDictionary(from coder: NSCoder) -> HTTPFields? {
        guard coder.containsValue(forKey: ArchiveKey.allHeaderFields),
              let dictionary = coder.decodeObject(of: [NSDictionary.self, NSString.self], forKey: ArchiveKey.allHeaderFields) as? NSDictionary
        else { return nil }
        var pairs: [(String, String)] = []
        for (key, object) in dictionary {
            guard let name = archivedString(key), let value = archivedString(object) else { continue }
            pairs.append((name, value))
        }
        return HTTPFields(pairs.sorted { $0.0 < $1.0 })
    }

    /// A decoded string, whether the collection holding it hands it over as `String` or `NSString`.
    private static func archivedString(_ object: Any) -> String? {
        if let string = object as? String { return string }
        if let string = object as? NSString { return string as String }
        return nil
    }

    /// The elements of a decoded array, whether it comes as `NSArray` or bridged to `[Any]`.
    private static func archivedArray(_ object: Any) -> [Any]? {
        if let array = object as? NSArray { return array.map { $0 } }
        return object as? [Any]
    }
}
