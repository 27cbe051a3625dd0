import CourierPolicies
import Foundation

/// A key of a cookie's property dictionary: Apple's `HTTPCookiePropertyKey`.
///
/// The raw values are Apple's ("Name", "Max-Age", "SameSite", …), so a dictionary saved on
/// one platform reads the same on the other.
public struct HTTPCookiePropertyKey: RawRepresentable, Equatable, Hashable, Sendable {
    /// The key as it appears in a property dictionary ("Name", "Max-Age", …).
    public private(set) var rawValue: String

    /// A key with the given raw value; the same as ``init(rawValue:)``.
    public init(_ rawValue: String) {
        self.rawValue = rawValue
    }

    /// A key with the given raw value, for keys that have no constant here.
    public init(rawValue: String) {
        self.rawValue = rawValue
    }
}

extension HTTPCookiePropertyKey {
    /// The cookie's name (a `String`). Required.
    public static let name = HTTPCookiePropertyKey(rawValue: "Name")
    /// The cookie's value (a `String`). Required.
    public static let value = HTTPCookiePropertyKey(rawValue: "Value")
    /// The URL that set the cookie (a `URL` or a `String`); gives the domain when
    /// ``domain`` is absent.
    public static let originURL = HTTPCookiePropertyKey(rawValue: "OriginURL")
    /// The cookie's version: "0" (Netscape) or "1" (RFC 2965), as a string or an integer.
    public static let version = HTTPCookiePropertyKey(rawValue: "Version")
    /// The cookie's domain (a `String`): with a leading "." a domain cookie, else a host-only
    /// cookie.
    public static let domain = HTTPCookiePropertyKey(rawValue: "Domain")
    /// The cookie's path (a `String`); "/" when absent.
    public static let path = HTTPCookiePropertyKey(rawValue: "Path")
    /// Whether the cookie goes only over secure channels ("TRUE"/"FALSE" or a `Bool`).
    public static let secure = HTTPCookiePropertyKey(rawValue: "Secure")
    /// When the cookie expires (a `Date`, or a `String` in a cookie date format).
    public static let expires = HTTPCookiePropertyKey(rawValue: "Expires")
    /// A comment for the user (a `String`).
    public static let comment = HTTPCookiePropertyKey(rawValue: "Comment")
    /// A URL with a comment for the user (a `URL` or a `String`).
    public static let commentURL = HTTPCookiePropertyKey(rawValue: "CommentURL")
    /// Whether the cookie is discarded at the end of the session ("TRUE"/"FALSE" or a `Bool`).
    public static let discard = HTTPCookiePropertyKey(rawValue: "Discard")
    /// How many seconds the cookie lives from its creation (a `String` or a number).
    public static let maximumAge = HTTPCookiePropertyKey(rawValue: "Max-Age")
    /// The ports the cookie goes to: "80,8080", or an array of integers or `NSNumber`s.
    public static let port = HTTPCookiePropertyKey(rawValue: "Port")
    /// The cookie's same-site policy: "lax" or "strict" (any case), or an
    /// ``HTTPCookieStringPolicy``.
    public static let sameSitePolicy = HTTPCookiePropertyKey(rawValue: "SameSite")

    /// Whether the cookie is kept from non-HTTP APIs ("TRUE"/"FALSE" or a `Bool`). Apple has no
    /// public constant but reads and writes this key; a program spells it
    /// `HTTPCookiePropertyKey("HttpOnly")`.
    static let httpOnly = HTTPCookiePropertyKey(rawValue: "HttpOnly")
    /// When the cookie was created (seconds since the reference date, as Apple writes it).
    static let created = HTTPCookiePropertyKey(rawValue: "Created")
}

/// A cookie's same-site policy: Apple's `HTTPCookieStringPolicy`. A cookie without one
/// (`SameSite=None`, or no attribute) has a `nil` policy and goes with cross-site requests.
public struct HTTPCookieStringPolicy: RawRepresentable, Equatable, Hashable, Sendable {
    /// The policy as a property dictionary holds it: "lax" or "strict".
    public private(set) var rawValue: String

    /// A policy from its raw value.
    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// Some cross-site requests (top-level navigations with a safe method) carry the cookie.
    public static let sameSiteLax = HTTPCookieStringPolicy(rawValue: "lax")
    /// No cross-site request carries the cookie.
    public static let sameSiteStrict = HTTPCookieStringPolicy(rawValue: "strict")
}

/// An HTTP cookie: Apple's `HTTPCookie`, an immutable value made from a property dictionary
/// or from a response's `Set-Cookie` fields.
///
/// Its domain is shown as Apple shows it: a domain cookie's starts with "." (".example.com",
/// sent to the domain and its subdomains), a host-only cookie's is the bare host (sent to that
/// host alone). Two cookies are equal when their name, domain and path are: a cookie with the
/// same three replaces the other in a cookie storage.
///
/// Underneath it is the jar's ``StoredCookie`` (RFC 6265bis §5.7), so a cookie passes to and
/// from `HTTPCookieStorage` without losing its HttpOnly flag, SameSite or creation time.
open class HTTPCookie: NSObject, @unchecked Sendable {
    /// The cookie as the jar keeps it, except that `expiry` is the expiry date even when the
    /// cookie is session-only (``storedCookie`` drops it then).
    let record: StoredCookie
    /// Discarded at the end of the session, whatever its expiry date.
    let sessionOnly: Bool
    /// The URL that set the cookie, when known.
    let originURL: URL?
    /// The `Max-Age` the cookie was made with, in seconds, kept for ``properties``.
    let maximumAge: Int64?

    // MARK: Making cookies

    /// Makes a cookie from a property dictionary; nil when the properties do not make a
    /// cookie.
    ///
    /// The rules, Apple's where Apple documents one:
    /// - ``HTTPCookiePropertyKey/name`` and ``HTTPCookiePropertyKey/value`` are required
    ///   (strings). Either may be empty, not both (RFC 6265bis §5.6 step 6). Neither may hold a
    ///   control character other than HTAB, nor ";" (which would end the cookie in a `Cookie`
    ///   field); the name may not hold "=" (which would move the split between name and value).
    /// - ``HTTPCookiePropertyKey/domain`` or ``HTTPCookiePropertyKey/originURL`` is required.
    ///   A domain with a leading "." makes a domain cookie, one without a host-only cookie;
    ///   without a domain (or with an empty one, or "." alone), the origin URL's host makes a
    ///   host-only cookie. Domains are lowercased.
    /// - ``HTTPCookiePropertyKey/path`` defaults to "/" when absent or empty.
    /// - ``HTTPCookiePropertyKey/secure``, ``HTTPCookiePropertyKey/discard`` and "HttpOnly" take a
    ///   `Bool`, a number, or a string: "", "FALSE", "NO" and "0" (any case) are false, any other
    ///   string is true.
    /// - ``HTTPCookiePropertyKey/version`` takes "0", "1" or an integer; anything unreadable or
    ///   negative is 0.
    /// - ``HTTPCookiePropertyKey/maximumAge`` (a string or a number of seconds) sets the expiry
    ///   date to the creation time plus that many seconds and wins over
    ///   ``HTTPCookiePropertyKey/expires``, which takes a `Date` or a string in a cookie date
    ///   format (RFC 6265bis §5.1.1). A value that cannot be read is ignored.
    /// - The cookie is session-only when ``HTTPCookiePropertyKey/discard`` says so; without it,
    ///   when the version is 1 or more and there is no Max-Age (Apple's documented default); and
    ///   always when there is no expiry date.
    /// - ``HTTPCookiePropertyKey/port`` takes "80,8080" or an array of integers or `NSNumber`s;
    ///   entries that are not ports (0–65535) are dropped, and an empty list is no list.
    /// - ``HTTPCookiePropertyKey/sameSitePolicy`` takes "lax" or "strict" in any case, or an
    ///   ``HTTPCookieStringPolicy``; "none" and unknown values give no policy.
    /// - ``HTTPCookiePropertyKey/comment`` takes a string, ``HTTPCookiePropertyKey/commentURL`` a
    ///   `URL` or a string.
    /// - The creation time is now, or the "Created" value of a dictionary that came from
    ///   ``properties`` (so a cookie rebuilt from its properties keeps its age and its order in
    ///   a `Cookie` field).
    ///
    /// Other keys are ignored.
    public init?(properties: [HTTPCookiePropertyKey: Any]) {
        guard let made = HTTPCookie.make(properties) else { return nil }
        self.record = made.record
        self.sessionOnly = made.sessionOnly
        self.originURL = made.originURL
        self.maximumAge = made.maximumAge
        super.init()
    }

    /// Decodes an archived cookie (NSSecureCoding); nil for an archive that holds none.
    public required convenience init?(coder: NSCoder) {
        guard let properties = HTTPCookie.decodedProperties(from: coder) else { return nil }
        self.init(properties: properties)
    }

    /// A cookie from the jar (session-only when it has no expiry).
    convenience init(_ stored: StoredCookie) {
        self.init(stored, originURL: nil, discard: false)
    }

    /// A cookie from the jar that `originURL` set. `discard` (RFC 2965's attribute) makes it
    /// session-only whatever its expiry.
    init(_ stored: StoredCookie, originURL: URL?, discard: Bool) {
        self.record = stored
        self.sessionOnly = stored.expiry == nil || discard
        self.originURL = originURL
        self.maximumAge = nil
        super.init()
    }

    /// The cookie as the jar keeps it; a session-only cookie has no expiry there (it is never
    /// written to disk).
    var storedCookie: StoredCookie {
        var cookie = record
        if sessionOnly { cookie.expiry = nil }
        return cookie
    }

    /// When the cookie was created.
    var creation: Date { record.creation }

    /// The `Cookie` field for cookies, in the order given: `["Cookie": "a=b; c=d"]` (a nameless
    /// cookie is its value alone), or an empty dictionary for no cookies.
    open class func requestHeaderFields(with cookies: [HTTPCookie]) -> [String: String] {
        guard let field = CookieJar.cookieHeader(cookies.map(\.storedCookie)) else { return [:] }
        return ["Cookie": field]
    }

    /// The cookies a response's `Set-Cookie` fields set for a URL, in the order they come.
    ///
    /// The "Set-Cookie" entry (its name in any case) may hold several cookies joined by commas,
    /// as a dictionary merges repeated fields; a comma separates two cookies only when a
    /// `name=` follows it, so the comma in `Expires=Wed, 09 Jun 2021 10:18:14 GMT` does not.
    /// Each cookie is read by RFC 6265bis §5.6 and checked by the storage rules of §5.7 that
    /// depend on the URL alone: a cookie for a domain that does not cover the URL's host, for a
    /// public suffix, `Secure` from an origin that is neither https nor loopback, or with a
    /// `__Secure-`/`__Host-` name that breaks its prefix's rules is left out. Other fields are
    /// ignored.
    open class func cookies(withResponseHeaderFields headerFields: [String: String], for URL: URL) -> [HTTPCookie] {
        let context = CookieContext(url: URL)
        let now = Date()
        // Sorted so that a dictionary holding the field under two spellings gives one order.
        let fields = headerFields.filter { $0.key.lowercased() == "set-cookie" }.sorted { $0.key < $1.key }
        var cookies: [HTTPCookie] = []
        for field in fields {
            for text in splitCookieList(field.value) {
                guard let setCookie = SetCookieParser.parse(text) else { continue }
                guard
                    let stored = try? CookieJar.makeCookie(
                        setCookie, context: context, now: now, suffixes: SystemPublicSuffixes.shared
                    )
                else { continue }
                cookies.append(HTTPCookie(stored, originURL: URL, discard: setCookie.discard))
            }
        }
        return cookies
    }

    // MARK: Properties

    /// The cookie as a property dictionary, which ``init(properties:)`` turns back into an
    /// equal cookie with the same attributes.
    ///
    /// Name, value, domain (with its leading "." for a domain cookie) and path are strings;
    /// Secure and Discard are `Bool`s, Version an `Int` (as swift-corelibs-foundation writes
    /// them); Expires a `Date`; Max-Age the string of seconds it was made with; OriginURL and
    /// CommentURL `URL`s; Port an array of `NSNumber`s; SameSite "lax", "strict" or "none".
    /// HttpOnly (`true`) appears only for an HttpOnly cookie, and "Created" holds the creation
    /// time in seconds since the reference date.
    open var properties: [HTTPCookiePropertyKey: Any]? {
        var properties: [HTTPCookiePropertyKey: Any] = [
            .name: record.name,
            .value: record.value,
            .domain: domain,
            .path: record.path,
            .secure: record.secure,
            .discard: sessionOnly,
            .version: record.version,
            .created: record.creation.timeIntervalSinceReferenceDate,
        ]
        if record.httpOnly { properties[.httpOnly] = true }
        if let expiry = record.expiry { properties[.expires] = expiry }
        if let maximumAge { properties[.maximumAge] = String(maximumAge) }
        if let originURL { properties[.originURL] = originURL }
        if let comment = record.comment { properties[.comment] = comment }
        if let commentURL {
            properties[.commentURL] = commentURL
        } else if let text = record.commentURL {
            // Not a URL; kept as it was given so that it survives a round trip.
            properties[.commentURL] = text
        }
        if let portList { properties[.port] = portList }
        if let sameSite = record.sameSite { properties[.sameSitePolicy] = sameSite.rawValue.lowercased() }
        return properties
    }

    /// 0 for a Netscape cookie (what every `Set-Cookie` makes), 1 for an RFC 2965 cookie.
    open var version: Int { record.version }

    /// The cookie's name; empty for a nameless cookie.
    open var name: String { record.name }

    /// The cookie's value.
    open var value: String { record.value }

    /// When the cookie expires; nil when it has no expiry date (then it is session-only).
    open var expiresDate: Date? { record.expiry }

    /// True when the cookie is discarded at the end of the session, whatever its expiry date.
    open var isSessionOnly: Bool { sessionOnly }

    /// The cookie's domain: ".example.com" for a domain cookie (sent to the domain and its
    /// subdomains), the bare host for a host-only cookie. An IP address never has the dot
    /// (a domain cookie on an address matches only that address).
    open var domain: String {
        record.hostOnly || HTTPCookie.isIPAddress(record.domain) ? record.domain : "." + record.domain
    }

    /// The path the cookie is sent for, with the paths under it; "/" for all.
    open var path: String { record.path }

    /// True when the cookie goes only over https (or to a loopback host).
    open var isSecure: Bool { record.secure }

    /// True when the cookie is sent only in HTTP requests, never shown to a non-HTTP API.
    open var isHTTPOnly: Bool { record.httpOnly }

    /// A comment for the user, when the cookie had one.
    open var comment: String? { record.comment }

    /// A URL with a comment for the user, when the cookie had one.
    open var commentURL: URL? { record.commentURL.flatMap { URL(string: $0) } }

    /// The ports the cookie may be sent to; nil for any port.
    open var portList: [NSNumber]? { record.portList.map { $0.map { NSNumber(value: $0) } } }

    /// ``HTTPCookieStringPolicy/sameSiteLax`` or ``HTTPCookieStringPolicy/sameSiteStrict``; nil
    /// when cross-site requests carry the cookie (`SameSite=None` or no attribute).
    open var sameSitePolicy: HTTPCookieStringPolicy? {
        switch record.sameSite {
        case .lax?: return .sameSiteLax
        case .strict?: return .sameSiteStrict
        default: return nil
        }
    }

    /// The cookie's attributes on one line, for debugging (the value included, as Apple's).
    open override var description: String {
        let expires = record.expiry.map { "'\($0)'" } ?? "nil"
        let sameSite = record.sameSite.map { "\"\($0.rawValue.lowercased())\"" } ?? "nil"
        let ports = record.portList.map { $0.map { String($0) }.joined(separator: ",") } ?? "nil"
        return "<\(type(of: self)) version:\(version) name:\"\(name)\" value:\"\(value)\" expiresDate:\(expires)"
            + " created:'\(record.creation)' sessionOnly:\(sessionOnly) domain:\"\(domain)\" sameSite:\(sameSite)"
            + " path:\"\(path)\" isSecure:\(isSecure) isHTTPOnly:\(isHTTPOnly) comment:\(comment ?? "nil") ports:{ \(ports) }>"
    }

    // MARK: Equality

    /// Equal when the name, the domain (as ``domain`` shows it) and the path are: the cookie
    /// that would replace this one in a storage.
    open override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? HTTPCookie else { return false }
        if other === self { return true }
        return name == other.name && domain == other.domain && path == other.path
    }

    /// A hash of the name, domain and path, which equal cookies share.
    open override var hash: Int {
        var hasher = Hasher()
        hasher.combine(name)
        hasher.combine(domain)
        hasher.combine(path)
        return hasher.finalize()
    }
}

// MARK: - Reading a property dictionary

extension HTTPCookie {
    /// What ``init(properties:)`` makes of a dictionary.
    private struct Made {
        var record: StoredCookie
        var sessionOnly: Bool
        var originURL: URL?
        var maximumAge: Int64?
    }

    /// Applies the rules listed on ``init(properties:)``; nil when they make no cookie.
    private static func make(_ properties: [HTTPCookiePropertyKey: Any]) -> Made? {
        // 1. Name and value: required, and safe to put in a Cookie field.
        guard let name = string(properties[.name]), let value = string(properties[.value]),
            isAcceptable(name: name, value: value)
        else { return nil }

        // 2. Domain: a leading dot makes a domain cookie; else the origin URL's host.
        let originURL = url(properties[.originURL])
        var domain = string(properties[.domain])?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
        var hostOnly = true
        if domain.hasPrefix(".") {
            domain.removeFirst()
            hostOnly = false
        }
        if domain.isEmpty {
            guard let originURL, let host = CookieContext(url: originURL).host else { return nil }
            domain = host
            hostOnly = true
        }

        // 3. Path: "/" by default.
        var path = string(properties[.path]) ?? ""
        if path.isEmpty { path = "/" }

        // 4. Version, creation, expiry (Max-Age over Expires) and session-only.
        let version = integer(properties[.version]).map { Int(clamping: max(0, $0)) } ?? 0
        let creation = date(properties[.created]) ?? Date()
        let maximumAge = integer(properties[.maximumAge])
        let expiry: Date?
        if let maximumAge {
            expiry = creation.addingTimeInterval(TimeInterval(maximumAge))
        } else {
            expiry = date(properties[.expires])
        }
        let discard = flag(properties[.discard]) ?? (version >= 1 && maximumAge == nil)
        let sessionOnly = discard || expiry == nil

        // 5. The flags and the rest.
        let commentURL: String?
        if let link = properties[.commentURL] as? URL {
            commentURL = link.absoluteString
        } else {
            commentURL = string(properties[.commentURL])
        }
        let record = StoredCookie(
            name: name, value: value, domain: domain, hostOnly: hostOnly, path: path, expiry: expiry,
            secure: flag(properties[.secure]) ?? false, httpOnly: flag(properties[.httpOnly]) ?? false,
            sameSite: sameSite(properties[.sameSitePolicy]), creation: creation, lastAccess: creation,
            comment: string(properties[.comment]), commentURL: commentURL, version: version,
            portList: ports(properties[.port])
        )
        return Made(record: record, sessionOnly: sessionOnly, originURL: originURL, maximumAge: maximumAge)
    }

    /// RFC 6265bis §5.6: not both empty, no control character but HTAB (%x00-08 / %x0A-1F /
    /// %x7F); and no ";" (it would end the cookie in a `Cookie` field) nor "=" in the name (it
    /// would move the split between name and value).
    static func isAcceptable(name: String, value: String) -> Bool {
        if name.isEmpty && value.isEmpty { return false }
        func isControl(_ byte: UInt8) -> Bool { (byte < 0x20 && byte != 0x09) || byte == 0x7F }
        if name.utf8.contains(where: { isControl($0) || $0 == UInt8(ascii: ";") || $0 == UInt8(ascii: "=") }) { return false }
        if value.utf8.contains(where: { isControl($0) || $0 == UInt8(ascii: ";") }) { return false }
        return true
    }

    /// A string property: `String`, `Substring` or `NSString`.
    private static func string(_ value: Any?) -> String? {
        guard let value else { return nil }
        switch value {
        case let text as String: return text
        case let text as Substring: return String(text)
        case let text as NSString: return text.description  // NSString's description is its text.
        case let policy as HTTPCookieStringPolicy: return policy.rawValue
        default: return nil
        }
    }

    /// A flag property: a `Bool`, a number (non-zero is true), or a string ("", "FALSE", "NO"
    /// and "0" in any case are false, any other string true).
    private static func flag(_ value: Any?) -> Bool? {
        guard let value else { return nil }
        switch value {
        case let flag as Bool: return flag
        case let number as NSNumber: return number.boolValue
        case let number as Int: return number != 0
        default:
            guard let text = string(value) else { return nil }
            switch text.trimmingCharacters(in: .whitespaces).uppercased() {
            case "", "FALSE", "NO", "0": return false
            default: return true
            }
        }
    }

    /// An integer property: a number or a string of digits with an optional sign.
    private static func integer(_ value: Any?) -> Int64? {
        guard let value else { return nil }
        switch value {
        case let number as Int: return Int64(number)
        case let number as Int64: return number
        case let number as Int32: return Int64(number)
        case let number as UInt: return Int64(exactly: number)
        case let number as Double:
            // Int64's range ends near 9.2e18; a Double past it would trap the conversion.
            guard number.isFinite, abs(number) < 9.0e18 else { return nil }
            return Int64(number.rounded(.towardZero))
        case let number as NSNumber: return number.int64Value
        default:
            guard let text = string(value) else { return nil }
            return Int64(text.trimmingCharacters(in: .whitespaces))
        }
    }

    /// A date property: a `Date`, seconds since the reference date (how Apple writes
    /// "Created"), or a string in a cookie date format (RFC 6265bis §5.1.1).
    private static func date(_ value: Any?) -> Date? {
        guard let value else { return nil }
        switch value {
        case let date as Date: return date
        case let date as NSDate: return Date(timeIntervalSinceReferenceDate: date.timeIntervalSinceReferenceDate)
        case let seconds as Double: return Date(timeIntervalSinceReferenceDate: seconds)
        case let number as NSNumber: return Date(timeIntervalSinceReferenceDate: number.doubleValue)
        default: return string(value).flatMap { CookieDateParser.parse($0) }
        }
    }

    /// A URL property: a `URL` or a string that parses as one.
    private static func url(_ value: Any?) -> URL? {
        guard let value else { return nil }
        if let url = value as? URL { return url }
        return string(value).flatMap { URL(string: $0) }
    }

    /// A port list: "80,8080", one integer, or an array of integers or `NSNumber`s. Entries that
    /// are not ports are dropped; nil when none is left.
    private static func ports(_ value: Any?) -> [Int]? {
        guard let value else { return nil }
        var list: [Int]
        switch value {
        case let numbers as [Int]: list = numbers
        case let numbers as [NSNumber]: list = numbers.map(\.intValue)
        case let items as [Any]: list = items.compactMap { integer($0).map { Int(truncatingIfNeeded: $0) } }
        case let number as Int: list = [number]
        case let number as NSNumber: list = [number.intValue]
        default:
            guard let text = string(value) else { return nil }
            list = text.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        }
        list = list.filter { (0...65535).contains($0) }
        return list.isEmpty ? nil : list
    }

    /// "lax", "strict" or "none" in any case, or an ``HTTPCookieStringPolicy``; nil otherwise.
    private static func sameSite(_ value: Any?) -> CookieSameSite? {
        guard let text = string(value) else { return nil }
        switch text.trimmingCharacters(in: .whitespaces).lowercased() {
        case "lax": return .lax
        case "strict": return .strict
        case "none": return CookieSameSite.none
        default: return nil
        }
    }

    /// An IPv4 address in dotted form, or an IPv6 address (anything with a colon).
    private static func isIPAddress(_ host: String) -> Bool {
        if host.contains(":") { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { part in
            !part.isEmpty && part.utf8.count <= 3 && part.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
                && Int(part)! <= 255
        }
    }
}

// MARK: - Splitting a merged Set-Cookie field

extension HTTPCookie {
    /// The cookies of one `Set-Cookie` value that may hold several joined by commas (what a
    /// `[String: String]` makes of repeated fields). A comma ends a cookie only when optional
    /// whitespace, a token and "=" follow it (optional whitespace may come before the "="), so
    /// the comma of an `Expires` date stays inside its cookie. Blank pieces are dropped.
    static func splitCookieList(_ field: String) -> [String] {
        let bytes = Array(field.utf8)
        var pieces: [String] = []
        var start = 0
        for index in bytes.indices where bytes[index] == UInt8(ascii: ",") && startsCookie(bytes, after: index) {
            pieces.append(String(decoding: bytes[start..<index], as: UTF8.self))
            start = index + 1
        }
        pieces.append(String(decoding: bytes[start...], as: UTF8.self))
        return pieces
            .map { $0.trimmingCharacters(in: CharacterSet(charactersIn: " \t")) }
            .filter { !$0.isEmpty }
    }

    /// True when the comma at `comma` is followed by OWS token OWS "=".
    private static func startsCookie(_ bytes: [UInt8], after comma: Int) -> Bool {
        func isWhitespace(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        var index = comma + 1
        while index < bytes.count, isWhitespace(bytes[index]) { index += 1 }
        let tokenStart = index
        while index < bytes.count, isTokenByte(bytes[index]) { index += 1 }
        guard index > tokenStart else { return false }
        while index < bytes.count, isWhitespace(bytes[index]) { index += 1 }
        return index < bytes.count && bytes[index] == UInt8(ascii: "=")
    }

    /// `tchar` of RFC 9110 §5.6.2.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }
}
