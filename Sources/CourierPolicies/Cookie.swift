import Foundation

/// A cookie's `SameSite` attribute (RFC 6265bis §4.1.2.7). A cookie without one (or with a
/// value Courier does not know) has none: `nil` wherever this type appears.
public enum CookieSameSite: String, Sendable, Equatable, CaseIterable {
    case strict = "Strict"
    case lax = "Lax"
    case none = "None"
}

/// One `Set-Cookie` field as read by ``SetCookieParser`` (RFC 6265bis §5.6): the name and value
/// and the attributes it carried, before the storage rules (§5.7) decide whether and how it is
/// kept. Attribute values are as the parser normalised them: `domain` without a leading dot and
/// lowercased, `path` only when it starts with "/", `expires` as a date, `maxAge` in seconds.
public struct SetCookie: Sendable, Equatable {
    public var name: String
    public var value: String
    /// `Expires`, parsed by the cookie date algorithm (§5.1.1); nil when absent or unreadable.
    public var expires: Date?
    /// `Max-Age` in seconds (zero or negative: expire now); nil when absent or malformed.
    public var maxAge: Int64?
    /// `Domain` without a leading dot, lowercased; nil when absent or empty.
    public var domain: String?
    /// `Path` when it starts with "/"; nil otherwise (the default path is used).
    public var path: String?
    public var secure: Bool
    public var httpOnly: Bool
    /// `SameSite=Strict|Lax|None` (case-insensitive); nil when absent or unknown.
    public var sameSite: CookieSameSite?
    /// `Comment`, `CommentURL`, `Version`, `Port` and `Discard` (RFC 2965's attributes, kept
    /// for Apple's `HTTPCookie` properties; they change nothing in storage or matching).
    public var comment: String?
    public var commentURL: String?
    public var version: Int?
    public var portList: [Int]?
    public var discard: Bool

    public init(
        name: String, value: String, expires: Date? = nil, maxAge: Int64? = nil, domain: String? = nil, path: String? = nil,
        secure: Bool = false, httpOnly: Bool = false, sameSite: CookieSameSite? = nil, comment: String? = nil,
        commentURL: String? = nil, version: Int? = nil, portList: [Int]? = nil, discard: Bool = false
    ) {
        self.name = name
        self.value = value
        self.expires = expires
        self.maxAge = maxAge
        self.domain = domain
        self.path = path
        self.secure = secure
        self.httpOnly = httpOnly
        self.sameSite = sameSite
        self.comment = comment
        self.commentURL = commentURL
        self.version = version
        self.portList = portList
        self.discard = discard
    }
}

/// A cookie in a jar (RFC 6265bis §5.7's stored fields).
public struct StoredCookie: Sendable, Equatable, Hashable {
    public var name: String
    public var value: String
    /// The host (host-only) or the domain (domain cookie), lowercased, no leading dot.
    public var domain: String
    /// True when the cookie goes back only to the exact host that set it.
    public var hostOnly: Bool
    public var path: String
    /// When it expires; nil for a session cookie (never written to disk).
    public var expiry: Date?
    public var secure: Bool
    public var httpOnly: Bool
    public var sameSite: CookieSameSite?
    public var creation: Date
    public var lastAccess: Date
    public var comment: String?
    public var commentURL: String?
    public var version: Int
    public var portList: [Int]?

    public init(
        name: String, value: String, domain: String, hostOnly: Bool, path: String, expiry: Date?, secure: Bool, httpOnly: Bool,
        sameSite: CookieSameSite?, creation: Date, lastAccess: Date, comment: String? = nil, commentURL: String? = nil,
        version: Int = 0, portList: [Int]? = nil
    ) {
        self.name = name
        self.value = value
        self.domain = domain
        self.hostOnly = hostOnly
        self.path = path
        self.expiry = expiry
        self.secure = secure
        self.httpOnly = httpOnly
        self.sameSite = sameSite
        self.creation = creation
        self.lastAccess = lastAccess
        self.comment = comment
        self.commentURL = commentURL
        self.version = version
        self.portList = portList
    }

    /// A session cookie lives as long as its storage and is never persisted.
    public var isSessionOnly: Bool { expiry == nil }

    /// What identifies a cookie in a jar: a second cookie with the same key replaces it
    /// (RFC 6265bis §5.7: name, domain, host-only flag and path — a host-only cookie and a
    /// domain cookie for the same domain are two cookies, as Apple's ".example.com" and
    /// "example.com" are).
    public var key: Key { Key(name: name, domain: domain, path: path, hostOnly: hostOnly) }

    public struct Key: Sendable, Hashable {
        public var name: String
        public var domain: String
        public var path: String
        public var hostOnly: Bool

        public init(name: String, domain: String, path: String, hostOnly: Bool = true) {
            self.name = name
            self.domain = domain
            self.path = path
            self.hostOnly = hostOnly
        }
    }
}
