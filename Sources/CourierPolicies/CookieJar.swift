import CCourierPSL
import Foundation

/// Which domains are public suffixes (no cookie may be set for all of "co.uk") and which
/// registrable domain a host belongs to (what makes a "site" for SameSite).
public protocol PublicSuffixes: Sendable {
    /// True when `domain` (lowercase, no leading dot) is a public suffix.
    func isPublicSuffix(_ domain: String) -> Bool
    /// The registrable domain of `host` (eTLD+1); nil for a public suffix itself.
    func registrableDomain(_ host: String) -> String?
}

/// The public suffix list as libpsl reads it: the system's list (Debian's `publicsuffix`
/// package) when it is newer than the one built into libpsl, else the built-in one. Unknown
/// top-level domains count as public suffixes (the list's implicit `*` rule), so a cookie
/// cannot be set for "test" or "internal".
public final class SystemPublicSuffixes: PublicSuffixes, @unchecked Sendable {
    /// Loaded once; libpsl's lookups are read-only and safe from any thread.
    public static let shared = SystemPublicSuffixes()

    private let context: OpaquePointer?

    private init() {
        context = psl_latest(nil) ?? psl_builtin()
    }

    public func isPublicSuffix(_ domain: String) -> Bool {
        // Without a list every domain is treated as a suffix: refusing Domain cookies is the
        // safe failure.
        guard let context else { return true }
        return psl_is_public_suffix2(context, domain, Int32(PSL_TYPE_ANY)) != 0
    }

    /// An IP address is its own registrable domain (libpsl would read its last labels as a
    /// domain name).
    public func registrableDomain(_ host: String) -> String? {
        if CookieJar.isIPAddress(host) { return host }
        guard let context else { return nil }
        // libpsl answers with a pointer into the string it was given: read it while that string
        // is still alive (a String passed directly is a temporary copy, freed on return).
        return host.withCString { name in
            psl_registrable_domain(context, name).map { String(cString: $0) }
        }
    }
}

/// Why a cookie was not stored (RFC 6265bis §5.7), for logs and tests.
public enum CookieRejection: Error, Sendable, Equatable, CustomStringConvertible {
    /// The request URL has no host.
    case noHost
    /// `Secure` from an origin that is neither https nor loopback.
    case secureFromInsecureOrigin
    /// The `Domain` does not cover the host that set it.
    case domainMismatch(String)
    /// The `Domain` is a public suffix (and not the host itself).
    case publicSuffix(String)
    /// `HttpOnly` set through an API that is not HTTP.
    case httpOnlyFromNonHTTP
    /// A cookie from an insecure origin would shadow a `Secure` one.
    case wouldShadowSecureCookie
    /// An `HttpOnly` cookie cannot be replaced through an API that is not HTTP.
    case wouldReplaceHttpOnlyCookie
    /// `__Secure-`/`__Host-` requirements not met.
    case prefixRequirements(String)
    /// `SameSite=None` without `Secure`.
    case sameSiteNoneWithoutSecure
    /// A SameSite Strict or Lax cookie from a cross-site request.
    case crossSite
    /// A `Domain` that is not ASCII (RFC 6265bis §5.7 step 8: it must be an A-label).
    case nonASCIIDomain(String)

    public var description: String {
        switch self {
        case .noHost: return "the URL has no host"
        case .secureFromInsecureOrigin: return "Secure from an insecure origin"
        case .domainMismatch(let domain): return "the Domain \(domain) does not cover the host"
        case .publicSuffix(let domain): return "the Domain \(domain) is a public suffix"
        case .httpOnlyFromNonHTTP: return "HttpOnly set outside HTTP"
        case .wouldShadowSecureCookie: return "an insecure cookie would shadow a Secure one"
        case .wouldReplaceHttpOnlyCookie: return "an HttpOnly cookie cannot be replaced outside HTTP"
        case .prefixRequirements(let name): return "\(name) does not meet its prefix's requirements"
        case .sameSiteNoneWithoutSecure: return "SameSite=None without Secure"
        case .crossSite: return "a SameSite cookie from a cross-site request"
        case .nonASCIIDomain(let domain): return "the Domain \(domain) is not ASCII"
        }
    }
}

/// The request a cookie comes from or goes to.
public struct CookieContext: Sendable {
    public let url: URL
    /// False for an API that is not HTTP (`HTTPCookieStorage.setCookie` by a program):
    /// HttpOnly cookies are neither set nor read through it.
    public var isHTTP: Bool
    /// The site the request is made for (`URLRequest.mainDocumentURL`); nil: the request's own
    /// (same-site).
    public var siteForCookies: URL?
    /// The host, lowercased, without IPv6 brackets (read from the URL once: a lookup asks
    /// for it several times).
    public let host: String?
    /// https, or a loopback host (which cannot be intercepted): the origins `Secure` cookies
    /// are set from and sent to.
    public let isSecure: Bool

    public init(url: URL, isHTTP: Bool = true, siteForCookies: URL? = nil) {
        self.url = url
        self.isHTTP = isHTTP
        self.siteForCookies = siteForCookies
        var host = url.host(percentEncoded: false)
        if let bracketed = host, bracketed.hasPrefix("[") && bracketed.hasSuffix("]") { host = String(bracketed.dropFirst().dropLast()) }
        self.host = host.flatMap { $0.isEmpty ? nil : $0.lowercased() }
        self.isSecure = url.scheme?.lowercased() == "https" || (self.host.map(CookieJar.isLoopback) ?? false)
    }

    /// The path used for matching: the URL's path as sent, "/" when empty.
    public var path: String {
        let path = url.path(percentEncoded: true)
        return path.isEmpty ? "/" : path
    }
}

/// A cookie jar by RFC 6265bis: the storage model (§5.7) and the retrieval algorithm (§5.8.3),
/// as a value with no clock and no I/O (`now` and the public suffix list are passed in).
///
/// Limits: at most ``Limits/perDomain`` cookies per domain and ``Limits/total`` in all; past
/// them expired cookies go first, then those without `Secure`, the least recently used first.
/// An expiry is capped at 400 days from when it was set (§5.6.1).
///
/// A cookie without `SameSite` (the RFC's "Default") is treated like `None`, as Apple's URL
/// Loading System treats it: stored from and sent with cross-site requests. The RFC lets a user
/// agent enforce Lax instead, as browsers do; a URLSession is no browser, and most of its
/// requests have no `mainDocumentURL` to be cross-site to.
public struct CookieJar: Sendable {
    public struct Limits: Sendable, Equatable {
        /// Cookies kept per `domain` field; 180 (Chromium's figure; the RFC asks for at least 50).
        public var perDomain: Int
        /// Cookies kept in all; 3,000 (the RFC's minimum).
        public var total: Int

        public init(perDomain: Int = 180, total: Int = 3000) {
            self.perDomain = perDomain
            self.total = total
        }
    }

    /// What one operation changed: cookies stored (new or replaced) and cookies removed.
    public struct Change: Sendable, Equatable {
        public var stored: [StoredCookie] = []
        public var removed: [StoredCookie] = []

        public init(stored: [StoredCookie] = [], removed: [StoredCookie] = []) {
            self.stored = stored
            self.removed = removed
        }

        public var isEmpty: Bool { stored.isEmpty && removed.isEmpty }
    }

    /// The longest time a cookie may live from when it was set (§5.6.1, §5.6.2).
    public static let maximumLifetime: TimeInterval = 400 * 24 * 3600

    public let limits: Limits
    /// The cookies by their `domain` field: a request looks only at its host and the domains
    /// above it, not at the whole jar.
    private var buckets: [String: [StoredCookie.Key: StoredCookie]] = [:]
    public private(set) var count = 0

    public init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// Every cookie, in no order.
    public var cookies: [StoredCookie] { buckets.values.flatMap(\.values) }
    public var isEmpty: Bool { count == 0 }

    public func cookie(_ key: StoredCookie.Key) -> StoredCookie? { buckets[key.domain]?[key] }

    private mutating func put(_ cookie: StoredCookie) {
        if buckets[cookie.domain, default: [:]].updateValue(cookie, forKey: cookie.key) == nil { count += 1 }
    }

    @discardableResult
    private mutating func take(_ key: StoredCookie.Key) -> StoredCookie? {
        guard let removed = buckets[key.domain]?.removeValue(forKey: key) else { return nil }
        count -= 1
        if buckets[key.domain]?.isEmpty == true { buckets[key.domain] = nil }
        return removed
    }

    // MARK: Storing

    /// The cookie a `Set-Cookie` makes for a request (§5.7 steps that depend on the request and
    /// the cookie alone: expiry, domain, path, Secure, HttpOnly, SameSite, prefixes).
    public static func makeCookie(
        _ setCookie: SetCookie, context: CookieContext, now: Date, suffixes: any PublicSuffixes
    ) throws(CookieRejection) -> StoredCookie {
        guard let host = context.host else { throw .noHost }

        var expiry: Date?
        if let maxAge = setCookie.maxAge {
            expiry = maxAge <= 0 ? Date(timeIntervalSince1970: 0) : now.addingTimeInterval(min(TimeInterval(maxAge), maximumLifetime))
        } else if let expires = setCookie.expires {
            expiry = min(expires, now.addingTimeInterval(maximumLifetime))
        }

        var domain = setCookie.domain ?? ""
        guard domain.utf8.allSatisfy({ $0 < 0x80 }) else { throw .nonASCIIDomain(domain) }
        if !domain.isEmpty, suffixes.isPublicSuffix(domain) {
            // A Domain naming a public suffix is allowed only as the host itself (host-only).
            guard domain == host else { throw .publicSuffix(domain) }
            domain = ""
        }
        let hostOnly: Bool
        if !domain.isEmpty {
            guard domainMatches(host, domain) else { throw .domainMismatch(domain) }
            hostOnly = false
        } else {
            hostOnly = true
            domain = host
        }

        let path = setCookie.path ?? defaultPath(context.url)

        if setCookie.secure && !context.isSecure { throw .secureFromInsecureOrigin }
        if setCookie.httpOnly && !context.isHTTP { throw .httpOnlyFromNonHTTP }
        if setCookie.sameSite == CookieSameSite.none && !setCookie.secure { throw .sameSiteNoneWithoutSecure }
        if let sameSite = setCookie.sameSite, sameSite != .none,
           isCrossSite(context, suffixes: suffixes) {
            throw .crossSite
        }
        // `__Host-` asks for a Path attribute of "/", not merely a default path that is "/".
        try checkPrefixes(name: setCookie.name, value: setCookie.value, secure: setCookie.secure, hostOnly: hostOnly, path: setCookie.path)

        return StoredCookie(
            name: setCookie.name, value: setCookie.value, domain: domain, hostOnly: hostOnly, path: path, expiry: expiry,
            secure: setCookie.secure, httpOnly: setCookie.httpOnly, sameSite: setCookie.sameSite, creation: now, lastAccess: now,
            comment: setCookie.comment, commentURL: setCookie.commentURL, version: setCookie.version ?? 0, portList: setCookie.portList
        )
    }

    /// `__Secure-` needs Secure; `__Host-` needs Secure, no Domain and Path "/". Compared
    /// without case (RFC 6265bis §4.1.3), and a nameless cookie may not look like one.
    static func checkPrefixes(name: String, value: String, secure: Bool, hostOnly: Bool, path: String?) throws(CookieRejection) {
        func hasPrefix(_ text: String, _ prefix: String) -> Bool {
            text.utf8.count >= prefix.utf8.count && text.prefix(prefix.count).lowercased() == prefix.lowercased()
        }
        if name.isEmpty, hasPrefix(value, "__Secure-") || hasPrefix(value, "__Host-") {
            throw .prefixRequirements(value)
        }
        if hasPrefix(name, "__Secure-") && !secure { throw .prefixRequirements(name) }
        if hasPrefix(name, "__Host-") && !(secure && hostOnly && path == "/") { throw .prefixRequirements(name) }
    }

    /// Stores the cookie a response's `Set-Cookie` makes (§5.7), replacing one with the same
    /// name, domain and path; a cookie already expired removes it.
    @discardableResult
    public mutating func store(
        _ setCookie: SetCookie, context: CookieContext, now: Date, suffixes: any PublicSuffixes
    ) throws(CookieRejection) -> Change {
        let cookie = try Self.makeCookie(setCookie, context: context, now: now, suffixes: suffixes)
        if !cookie.secure && !context.isSecure {
            // An insecure origin may not shadow a Secure cookie of the same name (§5.7 step 16).
            // An expired cookie is as good as gone (§5.7: it may be evicted at any time).
            let shadows = cookies.contains { existing in
                existing.name == cookie.name && existing.secure && !Self.isExpired(existing, now: now)
                    && (Self.domainMatches(existing.domain, cookie.domain) || Self.domainMatches(cookie.domain, existing.domain))
                    && Self.pathMatches(cookie.path, existing.path)
            }
            if shadows { throw .wouldShadowSecureCookie }
        }
        if let existing = self.cookie(cookie.key), existing.httpOnly && !context.isHTTP && !Self.isExpired(existing, now: now) {
            throw .wouldReplaceHttpOnlyCookie
        }
        return insert(cookie, now: now)
    }

    /// Puts a cookie in the jar as it is (the storage's own API, not a response): it replaces
    /// the one with the same name, domain and path, keeping that one's creation time; an
    /// expired cookie only removes. Then the limits are applied.
    @discardableResult
    public mutating func insert(_ cookie: StoredCookie, now: Date) -> Change {
        var change = Change()
        var cookie = cookie
        if let existing = take(cookie.key) {
            // A replacement keeps the creation time (and so its place in the order); an
            // expired cookie was gone already and leaves nothing behind.
            if !Self.isExpired(existing, now: now) { cookie.creation = existing.creation }
            change.removed.append(existing)
        }
        if let expiry = cookie.expiry, expiry <= now {
            return change
        }
        put(cookie)
        change.stored.append(cookie)
        // A replacement is a store, not a removal.
        change.removed.removeAll { $0.key == cookie.key }
        change.removed += enforceLimits(domain: cookie.domain, now: now, keep: cookie.key)
        return change
    }

    /// Removes a cookie.
    @discardableResult
    public mutating func remove(_ key: StoredCookie.Key) -> StoredCookie? {
        take(key)
    }

    /// Removes the cookies that expired by `now`.
    public mutating func removeExpired(now: Date) -> [StoredCookie] {
        let expired = cookies.filter { $0.expiry.map { $0 <= now } ?? false }
        for cookie in expired { take(cookie.key) }
        return expired
    }

    /// Removes the cookies created at or after `date`.
    public mutating func removeAll(createdSince date: Date) -> [StoredCookie] {
        let removed = cookies.filter { $0.creation >= date }
        for cookie in removed { take(cookie.key) }
        return removed
    }

    /// Removes every cookie.
    public mutating func removeAll() -> [StoredCookie] {
        defer {
            buckets = [:]
            count = 0
        }
        return cookies
    }

    /// Past the per-domain or total limit: expired cookies first, then the least recently
    /// used. The cookie just stored (`keep`) stays.
    private mutating func enforceLimits(domain: String, now: Date, keep: StoredCookie.Key) -> [StoredCookie] {
        var evicted: [StoredCookie] = []
        let sameDomain = buckets[domain].map { Array($0.values) } ?? []
        if sameDomain.count > limits.perDomain {
            evicted += evict(from: sameDomain, count: sameDomain.count - limits.perDomain, now: now, keep: keep)
        }
        if count > limits.total {
            evicted += evict(from: cookies, count: count - limits.total, now: now, keep: keep)
        }
        return evicted
    }

    /// §5.7's order of removal: expired cookies, then those without `Secure`, then the rest;
    /// the least recently used first within each.
    private mutating func evict(from candidates: [StoredCookie], count: Int, now: Date, keep: StoredCookie.Key) -> [StoredCookie] {
        let order = candidates.filter { $0.key != keep }.sorted { lhs, rhs in
            let lhsExpired = Self.isExpired(lhs, now: now)
            let rhsExpired = Self.isExpired(rhs, now: now)
            if lhsExpired != rhsExpired { return lhsExpired }
            if lhs.secure != rhs.secure { return !lhs.secure }
            return lhs.lastAccess < rhs.lastAccess
        }
        let victims = Array(order.prefix(count))
        for victim in victims { take(victim.key) }
        return victims
    }

    // MARK: Retrieving

    /// How stale a last-access time may be before a lookup writes it again: it only orders
    /// evictions, and writing it on every request would cost more than the lookup.
    public static let lastAccessResolution: TimeInterval = 60

    /// The cookies to send with a request (§5.8.3), in the order they go in the `Cookie`
    /// field: longer paths first, then earlier creation. Their last-access time becomes `now`
    /// (to within ``lastAccessResolution``).
    public mutating func cookies(for context: CookieContext, now: Date, suffixes: any PublicSuffixes) -> [StoredCookie] {
        let matching = matchingCookies(for: context, now: now, suffixes: suffixes)
        for cookie in matching where now.timeIntervalSince(cookie.lastAccess) >= Self.lastAccessResolution {
            buckets[cookie.domain]?[cookie.key]?.lastAccess = now
        }
        return matching
    }

    /// The cookies for a request, without touching their last-access time.
    public func matchingCookies(for context: CookieContext, now: Date, suffixes: any PublicSuffixes) -> [StoredCookie] {
        guard count > 0, let host = context.host else { return [] }
        let path = context.path
        let secure = context.isSecure
        var crossSite: Bool?
        var matching: [StoredCookie] = []
        // The domains a cookie for this host can have: the host, and for a name (not an IP
        // address) every domain above it.
        var domains = [host]
        if !Self.isIPAddress(host) {
            var rest = Substring(host)
            while let dot = rest.firstIndex(of: ".") {
                rest = rest[rest.index(after: dot)...]
                if !rest.isEmpty { domains.append(String(rest)) }
            }
        }
        for domain in domains {
            guard let bucket = buckets[domain] else { continue }
            for cookie in bucket.values {
                // The buckets looked at are the host's own and the domains above a name, so a
                // domain cookie in them domain-matches the host; a host-only one must be its.
                if cookie.hostOnly && cookie.domain != host { continue }
                if !Self.pathMatches(path, cookie.path) { continue }
                if cookie.secure && !secure { continue }
                if cookie.httpOnly && !context.isHTTP { continue }
                if let expiry = cookie.expiry, expiry <= now { continue }
                if let sameSite = cookie.sameSite, sameSite != .none {
                    if crossSite == nil { crossSite = Self.isCrossSite(context, suffixes: suffixes) }
                    if crossSite == true { continue }
                }
                matching.append(cookie)
            }
        }
        return Self.sorted(matching)
    }

    /// §5.8.3's order: longer paths first, then earlier creation (then name, for a stable
    /// order among cookies created in the same instant).
    public static func sorted(_ cookies: [StoredCookie]) -> [StoredCookie] {
        cookies.sorted { lhs, rhs in
            if lhs.path.utf8.count != rhs.path.utf8.count { return lhs.path.utf8.count > rhs.path.utf8.count }
            if lhs.creation != rhs.creation { return lhs.creation < rhs.creation }
            return lhs.name < rhs.name
        }
    }

    /// The `Cookie` field value for cookies in order: `name=value; …` (a nameless cookie is
    /// its value alone); nil for none.
    public static func cookieHeader(_ cookies: [StoredCookie]) -> String? {
        guard !cookies.isEmpty else { return nil }
        return cookies.map { $0.name.isEmpty ? $0.value : "\($0.name)=\($0.value)" }.joined(separator: "; ")
    }

    static func isExpired(_ cookie: StoredCookie, now: Date) -> Bool {
        cookie.expiry.map { $0 <= now } ?? false
    }

    // MARK: Rules of RFC 6265bis §5.1

    /// Domain matching (§5.1.3): the same string, or `host` ends with "." + `domain` and is
    /// not an IP address.
    public static func domainMatches(_ host: String, _ domain: String) -> Bool {
        if host == domain { return true }
        guard host.utf8.count > domain.utf8.count, host.hasSuffix(domain), !isIPAddress(host) else { return false }
        let dot = host.utf8.index(host.utf8.endIndex, offsetBy: -(domain.utf8.count + 1))
        return host.utf8[dot] == UInt8(ascii: ".")
    }

    /// Path matching (§5.1.4).
    public static func pathMatches(_ requestPath: String, _ cookiePath: String) -> Bool {
        if requestPath == cookiePath { return true }
        guard requestPath.hasPrefix(cookiePath) else { return false }
        if cookiePath.hasSuffix("/") { return true }
        let next = requestPath.utf8[requestPath.utf8.index(requestPath.utf8.startIndex, offsetBy: cookiePath.utf8.count)]
        return next == UInt8(ascii: "/")
    }

    /// The default path (§5.1.4): the request path up to its last "/", or "/".
    public static func defaultPath(_ url: URL) -> String {
        let path = url.path(percentEncoded: true)
        guard path.hasPrefix("/"), let last = path.lastIndex(of: "/"), last != path.startIndex else { return "/" }
        return String(path[..<last])
    }

    /// An IPv6 literal (any ':') or a dotted IPv4 address; one pass over the bytes (this runs
    /// for every request that looks for cookies).
    static func isIPAddress(_ host: String) -> Bool {
        var dots = 0
        var digits = 0
        var value = 0
        for byte in host.utf8 {
            if byte == UInt8(ascii: ":") { return true }
            if byte == UInt8(ascii: ".") {
                guard digits > 0 else { return false }
                dots += 1
                digits = 0
                value = 0
                continue
            }
            guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else { return false }
            digits += 1
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
            guard digits <= 3, value <= 255 else { return false }
        }
        return dots == 3 && digits > 0
    }

    /// localhost (and its subdomains), 127.0.0.0/8 and ::1.
    static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host.hasSuffix(".localhost") || host == "::1" { return true }
        return isIPAddress(host) && host.hasPrefix("127.")
    }

    /// The site of a URL (scheme and registrable domain; the host itself for an IP address or
    /// a host with no registrable domain).
    static func site(of url: URL, suffixes: any PublicSuffixes) -> String? {
        guard var host = url.host(percentEncoded: false)?.lowercased(), !host.isEmpty else { return nil }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let scheme = url.scheme?.lowercased() ?? ""
        let registrable = isIPAddress(host) ? host : (suffixes.registrableDomain(host) ?? host)
        return "\(scheme)://\(registrable)"
    }

    /// True when the request is made for another site than its own (`siteForCookies`).
    static func isCrossSite(_ context: CookieContext, suffixes: any PublicSuffixes) -> Bool {
        guard let siteForCookies = context.siteForCookies else { return false }
        return site(of: siteForCookies, suffixes: suffixes) != site(of: context.url, suffixes: suffixes)
    }
}
