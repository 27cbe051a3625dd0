import CourierCore
import Foundation

/// The Cache-Control directives of a request or a response (RFC 9111 §5.2), from all its field values.
///
/// ```
/// Cache-Control   = #cache-directive
/// cache-directive = token [ "=" ( token / quoted-string ) ]
/// ```
///
/// Directive names are matched without regard to case, and an argument may be a token or a
/// quoted-string (`max-age="60"` is `max-age=60`; a comma inside quotes does not end the
/// directive). When a directive appears more than once, in one field line or across several,
/// the first one counts (§4.2.1 allows "the first occurrence"). Unknown directives are ignored
/// (§5.2.3), as are `no-transform` and the shared-cache-only `proxy-revalidate`.
///
/// Whitespace around a name, around "=" and around a token argument is skipped rather than
/// refused: ignoring `no-store ` or `max-age = 0` for a stray space would keep what the server
/// asked not to keep, so tolerating it is the safe reading. A quoted-string left open ends at the
/// next comma, so a broken `no-cache="a` does not swallow a `no-store` after it.
///
/// Every delta-seconds is read as at most ``maximumDeltaSeconds``.
public struct CacheControl: Sendable, Equatable {
    /// `max-age` (§5.2.1.1, §5.2.2.1), in seconds. An invalid value (not digits) is 0 for a
    /// response (stale: §4.2.1 encourages treating invalid freshness information so) and nil for
    /// a request (the directive is ignored). ``init(_:)`` reads a response's.
    public var maxAge: Int?
    /// `s-maxage` (§5.2.2.10): parsed, ignored by a private cache. Read as `max-age` is.
    public var sharedMaxAge: Int?
    /// `no-cache` (§5.2.1.4, §5.2.2.4). Also true for the qualified response form
    /// `no-cache="field"`, which a private cache may treat as unqualified.
    public var noCache: Bool = false
    /// `no-store` (§5.2.1.5, §5.2.2.5).
    public var noStore: Bool = false
    /// `must-revalidate` (§5.2.2.2).
    public var mustRevalidate: Bool = false
    /// `private` (§5.2.2.7), qualified or not.
    public var isPrivate: Bool = false
    /// `public` (§5.2.2.9).
    public var isPublic: Bool = false
    /// `max-stale` (§5.2.1.2), request only. A value that is not delta-seconds ignores it.
    public var maxStale: MaxStale?
    /// `min-fresh` (§5.2.1.3), request only.
    public var minFresh: Int?
    /// `only-if-cached` (§5.2.1.7), request only.
    public var onlyIfCached: Bool = false
    /// `stale-while-revalidate` (RFC 5861 §3), in seconds.
    public var staleWhileRevalidate: Int?
    /// `stale-if-error` (RFC 5861 §4), request or response, in seconds.
    public var staleIfError: Int?
    /// `immutable` (RFC 8246).
    public var immutable: Bool = false
    /// `must-understand` (§5.2.2.3): store only when the status code's caching rules are known.
    var mustUnderstand: Bool = false

    /// The argument of `max-stale`.
    public enum MaxStale: Sendable, Equatable {
        /// No argument: a stale response of any staleness is acceptable.
        case any
        /// A stale response is acceptable when stale by at most this many seconds.
        case seconds(Int)
    }

    /// Whose directives are read: they differ only in what an invalid `max-age` means.
    enum Role: Sendable {
        case request, response

        /// What an invalid `max-age` or `s-maxage` becomes (see ``CacheControl/maxAge``).
        var invalidAge: Int? { self == .response ? 0 : nil }
    }

    /// The value a larger delta-seconds is read as: 2^31, as §1.2.2 requires of a cache that
    /// does not represent more (Int could, but lifetimes past 68 years mean "forever" anyway).
    static let maximumDeltaSeconds = 2_147_483_648

    /// No directives.
    public init() {}

    /// The directives in every `Cache-Control` field of `fields`, read as a response's (an
    /// invalid `max-age` is 0). Read as a request's, an invalid `max-age` would be ignored; the
    /// policy does that itself, and a caller that reads a request's directives here gets the
    /// stricter reading (0 asks for validation).
    public init(_ fields: HTTPFields) {
        self.init(fields, role: .response)
    }

    /// The directives in every `Cache-Control` field of `fields`, read for `role`.
    init(_ fields: HTTPFields, role: Role) {
        self.init()
        var seen: Set<String> = []
        for value in fields.values("Cache-Control") {
            for directive in Self.directives(in: value) {
                // First wins: a repeated directive is ignored.
                guard seen.insert(directive.name).inserted else { continue }
                apply(directive.name, directive.argument, role: role)
            }
        }
    }

    private mutating func apply(_ name: String, _ argument: String?, role: Role) {
        switch name {
        case "max-age": maxAge = Self.deltaSeconds(argument) ?? role.invalidAge
        case "s-maxage": sharedMaxAge = Self.deltaSeconds(argument) ?? role.invalidAge
        // Arguments are not defined for the flags; one present still means the directive.
        case "no-cache": noCache = true
        case "no-store": noStore = true
        case "must-revalidate": mustRevalidate = true
        case "private": isPrivate = true
        case "public": isPublic = true
        case "max-stale": maxStale = argument == nil ? MaxStale.any : Self.deltaSeconds(argument).map { MaxStale.seconds($0) }
        case "min-fresh": minFresh = Self.deltaSeconds(argument)
        case "only-if-cached": onlyIfCached = true
        case "stale-while-revalidate": staleWhileRevalidate = Self.deltaSeconds(argument)
        case "stale-if-error": staleIfError = Self.deltaSeconds(argument)
        case "immutable": immutable = true
        case "must-understand": mustUnderstand = true
        default: break
        }
    }

    /// `delta-seconds = 1*DIGIT` (§1.2.2), saturating at ``maximumDeltaSeconds``; nil for
    /// anything else (a sign, a fraction, nothing).
    static func deltaSeconds(_ text: String?) -> Int? {
        guard let text, !text.isEmpty else { return nil }
        var value = 0
        for byte in text.utf8 {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            // At most 2^31 before the step, so the step cannot overflow.
            value = min(value * 10 + Int(byte - UInt8(ascii: "0")), maximumDeltaSeconds)
        }
        return value
    }

    /// The directives of one field value in order: lower-cased names, and arguments with their
    /// quotes and escapes removed (nil when there is no "=").
    static func directives(in value: String) -> [(name: String, argument: String?)] {
        let bytes = Array(value.utf8)
        var result: [(name: String, argument: String?)] = []
        var index = 0
        while index < bytes.count {
            // The name runs to "=" or to the comma that ends the directive.
            let nameStart = index
            while index < bytes.count, bytes[index] != equals, bytes[index] != comma { index += 1 }
            let name = String(decoding: trimmed(bytes[nameStart..<index]), as: UTF8.self).lowercased()
            var argument: String?
            if index < bytes.count, bytes[index] == equals {
                index += 1
                let valueStart = index
                while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x09 { index += 1 }
                if index < bytes.count, bytes[index] == quote, let quoted = quotedString(bytes, from: index) {
                    argument = quoted.text
                    index = quoted.end
                    // Anything between the closing quote and the comma is not part of it.
                    while index < bytes.count, bytes[index] != comma { index += 1 }
                } else {
                    while index < bytes.count, bytes[index] != comma { index += 1 }
                    argument = String(decoding: trimmed(bytes[valueStart..<index]), as: UTF8.self)
                }
            }
            if !name.isEmpty { result.append((name, argument)) }
            index += 1  // past the comma
        }
        return result
    }

    /// The text of the quoted-string opening at `start` (RFC 9110 §5.6.4: a backslash quotes
    /// the next byte) and the index after its closing quote; nil when it is never closed.
    private static func quotedString(_ bytes: [UInt8], from start: Int) -> (text: String, end: Int)? {
        var text: [UInt8] = []
        var index = start + 1
        while index < bytes.count {
            if bytes[index] == quote { return (String(decoding: text, as: UTF8.self), index + 1) }
            if bytes[index] == backslash, index + 1 < bytes.count { index += 1 }
            text.append(bytes[index])
            index += 1
        }
        return nil
    }

    private static func trimmed(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var start = bytes.startIndex
        var end = bytes.endIndex
        while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
        while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
        return bytes[start..<end]
    }

    private static let equals = UInt8(ascii: "=")
    private static let comma = UInt8(ascii: ",")
    private static let quote = UInt8(ascii: "\"")
    private static let backslash = UInt8(ascii: "\\")
}

/// What the cache knows of a stored response.
public struct StoredResponseFacts: Sendable {
    /// The stored response's status code.
    public var status: Int
    /// The stored response's header fields.
    public var responseFields: HTTPFields
    /// The fields of the request that got it (for Vary).
    public var requestFields: HTTPFields
    /// When the request was sent and the response received (§4.2.3's request_time, response_time).
    public var requestTime: Date
    public var responseTime: Date

    public init(status: Int, responseFields: HTTPFields, requestFields: HTTPFields, requestTime: Date, responseTime: Date) {
        self.status = status
        self.responseFields = responseFields
        self.requestFields = requestFields
        self.requestTime = requestTime
        self.responseTime = responseTime
    }
}

/// The decisions of a private HTTP cache (RFC 9111, with RFC 5861's stale extensions): what may
/// be stored, how fresh a stored response is, whether it may answer a request, how to validate
/// it, how a 304 updates it, and what an unsafe request invalidates.
///
/// Pure functions of the facts they are given: the present is always the `now` argument, and
/// nothing here looks up, stores or sends anything. A private cache ignores what RFC 9111 asks
/// of shared caches only (`s-maxage`, `proxy-revalidate`, §3.5's Authorization rule).
///
/// Methods are compared case-sensitively (RFC 9110 §9.1): "get" is not GET, so it is never
/// stored and it invalidates as a method of unknown safety.
public enum HTTPCachePolicy {
    /// Heuristic freshness (§4.2.2): this fraction of (Date − Last-Modified), the "typical
    /// setting" of 10% the RFC names, capped at ``maximumHeuristicLifetime``.
    public static let heuristicFraction: Double = 0.1
    /// The cap on a heuristic freshness lifetime: one day. A resource unchanged for a year is
    /// not kept five weeks on a guess. A day is where RFC 7234 §5.5.4 drew the line too: a
    /// heuristically fresh response older than 24 hours had to carry Warning 113.
    public static let maximumHeuristicLifetime: TimeInterval = 24 * 3600
    /// Statuses heuristically cacheable (RFC 9110 §15.1): 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501.
    public static let heuristicallyCacheableStatuses: Set<Int> = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501]

    /// The final statuses RFC 9110 defines, whose caching rules this cache follows: what
    /// `must-understand` (§5.2.2.3) requires. 206 and 304 are left out because they are never
    /// stored here.
    static let understoodStatuses: Set<Int> = Set([200, 201, 202, 203, 204, 205, 300, 301, 302, 303, 305, 307, 308, 421, 422, 426])
        .union(400...417).union(500...505)

    /// The safe methods of RFC 9110 §9.2.1.
    static let safeMethods: Set<String> = ["GET", "HEAD", "OPTIONS", "TRACE"]

    /// §3: may a private cache store this response?
    ///
    /// 1. The method is understood: GET only (a HEAD response has no content to store here).
    /// 2. The status is final (2xx to 5xx), and understood: 206 (partial content is not
    ///    assembled here) and 304 are not, and with `must-understand` only
    ///    ``understoodStatuses`` are. `must-understand` never lifts `no-store` (§5.2.2.3 says
    ///    a cache SHOULD; not storing is always safe, so this one does not).
    /// 3. Neither the request nor the response has `no-store` (§5.2.1.5, §5.2.2.5).
    /// 4. A private cache may store a `private` response and one to a request with
    ///    Authorization (§3.5 restricts shared caches only).
    /// 5. The response has at least one of: `public`, `private`, an Expires field, `max-age`
    ///    (even an invalid one: it is stored stale), or a heuristically cacheable status.
    ///    `s-maxage` counts for shared caches only.
    ///
    /// A response with `Vary: *` is not stored either: §4.1 says it never matches a request, so
    /// it could never be used.
    public static func isStorable(method: String, requestFields: HTTPFields, status: Int, responseFields: HTTPFields) -> Bool {
        guard method == "GET" else { return false }                                   // 1
        guard (200...599).contains(status), status != 206, status != 304 else { return false }  // 2
        let request = CacheControl(requestFields, role: .request)
        let response = CacheControl(responseFields, role: .response)
        if response.mustUnderstand, !understoodStatuses.contains(status) { return false }
        guard !request.noStore, !response.noStore else { return false }              // 3
        guard !listMembers(responseFields, "Vary").contains("*") else { return false }
        return response.isPublic || response.isPrivate || responseFields.contains("Expires")  // 5
            || response.maxAge != nil || heuristicallyCacheableStatuses.contains(status)
    }

    /// §4.2.1: the freshness lifetime, in seconds, never negative.
    ///
    /// 1. `s-maxage` is ignored (a private cache).
    /// 2. `max-age`, when present (an invalid one is 0).
    /// 3. Else Expires − Date (Date missing or invalid → response_time, RFC 9110 §6.6.1). An
    ///    invalid Expires (such as "0") is a time in the past (§5.3), and an Expires at or
    ///    before Date is 0 as well: already stale. Of several Expires fields the first counts.
    /// 4. Else a heuristic (§4.2.2), only without explicit expiration, for a heuristically
    ///    cacheable status or a `public` response (both named by §4.2.2), and only with a
    ///    Last-Modified: ``heuristicFraction`` × (Date − Last-Modified), at most
    ///    ``maximumHeuristicLifetime``.
    /// 5. Else 0.
    public static func freshnessLifetime(_ stored: StoredResponseFacts) -> TimeInterval {
        let response = CacheControl(stored.responseFields, role: .response)
        if let maxAge = response.maxAge { return TimeInterval(maxAge) }               // 2
        if let expires = stored.responseFields.first("Expires") {                     // 3
            guard let expiry = HTTPDate.parse(expires) else { return 0 }
            return max(0, expiry.timeIntervalSince(dateValue(stored)))
        }
        guard heuristicallyCacheableStatuses.contains(stored.status) || response.isPublic,  // 4
              let lastModified = stored.responseFields.first("Last-Modified").flatMap(HTTPDate.parse) else { return 0 }
        let unchangedFor = dateValue(stored).timeIntervalSince(lastModified)
        return min(maximumHeuristicLifetime, max(0, unchangedFor * heuristicFraction))
    }

    /// §4.2.3 current_age, in seconds, exactly:
    ///
    /// 1. apparent_age = max(0, response_time − date_value)
    /// 2. response_delay = response_time − request_time
    /// 3. corrected_age_value = age_value + response_delay
    /// 4. corrected_initial_age = max(apparent_age, corrected_age_value)
    /// 5. resident_time = now − response_time
    /// 6. current_age = corrected_initial_age + resident_time
    ///
    /// age_value is the first Age field as delta-seconds, 0 when missing or invalid; date_value
    /// is Date, response_time when missing or invalid.
    public static func currentAge(_ stored: StoredResponseFacts, now: Date) -> TimeInterval {
        let ageValue = TimeInterval(CacheControl.deltaSeconds(stored.responseFields.first("Age").map(trimmed)) ?? 0)
        let apparentAge = max(0, stored.responseTime.timeIntervalSince(dateValue(stored)))  // 1
        let responseDelay = stored.responseTime.timeIntervalSince(stored.requestTime)       // 2
        let correctedAgeValue = ageValue + responseDelay                                    // 3
        let correctedInitialAge = max(apparentAge, correctedAgeValue)                       // 4
        let residentTime = now.timeIntervalSince(stored.responseTime)                       // 5
        return correctedInitialAge + residentTime                                           // 6
    }

    /// §4.1: every field named by the stored response's Vary (all its lines, names in any case)
    /// has the same value in the new request as in the one that got the response. Values are
    /// compared after trimming, each field's lines combined with ", "; a field absent from both
    /// matches, absent from one does not. `Vary: *` (alone or in a list) never matches.
    public static func varyMatches(_ stored: StoredResponseFacts, requestFields: HTTPFields) -> Bool {
        let names = listMembers(stored.responseFields, "Vary")
        guard !names.contains("*") else { return false }
        return names.allSatisfy { normalized(stored.requestFields, $0) == normalized(requestFields, $0) }
    }

    /// What a stored response may do for a request.
    public enum Decision: Sendable, Equatable {
        /// Fresh enough for this request: answer from the cache, no network.
        case fresh
        /// Stale but within `stale-while-revalidate` (response) and allowed by the request:
        /// answer from the cache now; a revalidation may follow.
        case staleWhileRevalidate
        /// Must be validated first: send the request with these conditional fields
        /// (If-None-Match from ETag, If-Modified-Since from Last-Modified; empty when the stored
        /// response has no validator — then it is an ordinary request).
        case validate(HTTPFields)
    }

    /// §4 and §4.2.4: whether a stored response (that matched by URL and Vary) may answer
    /// `requestFields` at `now`. With L the freshness lifetime and A the current age:
    ///
    /// 1. Request `no-cache` (§5.2.1.4), or `Pragma: no-cache` in a request without
    ///    Cache-Control (§5.4), or response `no-cache` (§5.2.2.4) → validate.
    /// 2. Request `max-age` (§5.2.1.1): A > max-age → validate.
    /// 3. Request `min-fresh` (§5.2.1.3): L − A < min-fresh → validate. A stale response never
    ///    meets it, even with `max-stale` (the stricter directive wins).
    /// 4. L > A (§4.2) → fresh.
    /// 5. Stale. Response `must-revalidate` (§5.2.2.2) → validate: it is never served stale.
    /// 6. Request `max-stale` (§5.2.1.2): any, or A − L ≤ its value → fresh (served as it is).
    /// 7. Response `stale-while-revalidate` (RFC 5861 §3): A − L ≤ its value → stale while
    ///    revalidate. The request allows it when steps 1–3 passed.
    /// 8. Else validate.
    ///
    /// `only-if-cached` changes nothing here: when this says validate, the caller answers 504
    /// (§5.2.1.7). `immutable` changes nothing either: a request that asks for validation
    /// (`max-age=0`, `no-cache`) is the caller's explicit wish, not a browser's reload.
    public static func decide(_ stored: StoredResponseFacts, requestFields: HTTPFields, now: Date) -> Decision {
        let request = CacheControl(requestFields, role: .request)
        let response = CacheControl(stored.responseFields, role: .response)
        // Made only when the answer is to validate (a fresh answer, the common one on a hit,
        // needs no conditional fields: they cost 9,500 instructions of a disk hit).
        func validate() -> Decision { .validate(conditionalFields(for: stored)) }
        guard !requestAsksNoCache(requestFields, request), !response.noCache else { return validate() }  // 1
        let lifetime = freshnessLifetime(stored)
        let age = currentAge(stored, now: now)
        if let maxAge = request.maxAge, age > TimeInterval(maxAge) { return validate() } // 2
        if let minFresh = request.minFresh, lifetime - age < TimeInterval(minFresh) { return validate() }  // 3
        if lifetime > age { return .fresh }                                               // 4
        let staleness = age - lifetime
        guard !response.mustRevalidate else { return validate() }                         // 5
        switch request.maxStale {                                                         // 6
        case .any?: return .fresh
        case .seconds(let seconds)? where staleness <= TimeInterval(seconds): return .fresh
        default: break
        }
        if let window = response.staleWhileRevalidate, staleness <= TimeInterval(window) {  // 7
            return .staleWhileRevalidate
        }
        return validate()                                                                 // 8
    }

    /// §4.3.1 conditional fields for a stored response: If-None-Match with its ETag (the value
    /// as received, weak or strong: If-None-Match compares weakly), then If-Modified-Since with
    /// its Last-Modified as received, when that is a valid HTTP-date (a server ignores any other,
    /// RFC 9110 §13.1.3). Both when it has both; empty when it has neither.
    public static func conditionalFields(for stored: StoredResponseFacts) -> HTTPFields {
        var fields = HTTPFields()
        if let etag = stored.responseFields.first("ETag").map(trimmed), !etag.isEmpty {
            fields.append(name: "If-None-Match", value: etag)
        }
        if let lastModified = stored.responseFields.first("Last-Modified").map(trimmed), HTTPDate.parse(lastModified) != nil {
            fields.append(name: "If-Modified-Since", value: lastModified)
        }
        return fields
    }

    /// RFC 5861 stale-if-error: may the stale stored response answer when the origin failed
    /// (a 500, 502, 503, 504 or no answer)? Either the response's or the request's
    /// stale-if-error window covers the staleness.
    ///
    /// 1. Response `no-cache` or `must-revalidate` → no: RFC 9111 §4.2.4 forbids serving it
    ///    stale, and §5.2.2.2 says so even when disconnected.
    /// 2. The staleness is max(0, A − L).
    /// 3. The request's `stale-if-error` covers it → yes.
    /// 4. The response's covers it, and the request did not ask for validation (`no-cache` or
    ///    its Pragma) → yes. Such a client prefers an error to an unvalidated response, unless
    ///    it said otherwise in step 3.
    /// 5. Else no.
    ///
    /// The caller decides what counts as a failure (RFC 5861 names 500, 502, 503 and 504).
    public static func mayServeStaleOnError(_ stored: StoredResponseFacts, requestFields: HTTPFields, now: Date) -> Bool {
        let request = CacheControl(requestFields, role: .request)
        let response = CacheControl(stored.responseFields, role: .response)
        guard !response.noCache, !response.mustRevalidate else { return false }          // 1
        let staleness = max(0, currentAge(stored, now: now) - freshnessLifetime(stored))   // 2
        if let window = request.staleIfError, staleness <= TimeInterval(window) { return true }  // 3
        if let window = response.staleIfError, staleness <= TimeInterval(window) {          // 4
            return !requestAsksNoCache(requestFields, request)
        }
        return false                                                                         // 5
    }

    /// Lower-cased names of the fields a 304 does not update in the stored response
    /// (§4.3.4 by way of §3.2):
    ///
    /// - Content-Length (§3.2 names it): it describes the stored content, which a 304 does not carry.
    /// - Content-Encoding and Content-Range (§3.2's examples): the stored body is kept decoded
    ///   and whole, so a new coding or range would misdescribe it.
    /// - The fields a recipient removes before storing (§3.1): Connection and the fields it
    ///   names, Proxy-Connection, Keep-Alive, TE, Transfer-Encoding, Upgrade (RFC 9110 §7.6.1),
    ///   and the proxy's Proxy-Authenticate, Proxy-Authentication-Info, Proxy-Authorization.
    static let notUpdatedFieldNames: Set<String> = [
        "content-length", "content-encoding", "content-range",
        "connection", "proxy-connection", "keep-alive", "te", "transfer-encoding", "upgrade",
        "proxy-authenticate", "proxy-authentication-info", "proxy-authorization",
    ]

    /// §4.3.4: the stored response's fields updated with a 304's.
    ///
    /// 1. Every field of the 304, except ``notUpdatedFieldNames`` and the names its Connection
    ///    lists, replaces all stored fields of that name (any case). The 304's lines take the
    ///    place of the first stored one; other stored fields keep their order.
    /// 2. Fields new to the stored response follow, in the 304's order.
    /// 3. Date and Age describe the message that carried them. When the 304 has none, the
    ///    stored ones are dropped: the freshened response's age then starts from the 304's
    ///    exchange (the caller records its request and response times; a missing Date is
    ///    response_time, as RFC 9110 §6.6.1 has a recipient add one), instead of adding the
    ///    old response's age to the new times.
    public static func merge(stored: HTTPFields, notModified: HTTPFields) -> HTTPFields {
        var excluded = notUpdatedFieldNames
        excluded.formUnion(listMembers(notModified, "Connection"))
        var updates: [String: [HTTPFields.Field]] = [:]
        var updateOrder: [String] = []
        for field in notModified.fields {
            let key = field.name.lowercased()
            guard !excluded.contains(key) else { continue }
            if updates[key] == nil { updateOrder.append(key) }
            updates[key, default: []].append(field)
        }
        let dropped: Set<String> = Set(["date", "age"].filter { updates[$0] == nil })  // 3
        var result = HTTPFields()
        var replaced: Set<String> = []
        for field in stored.fields {                                                   // 1
            let key = field.name.lowercased()
            if let replacement = updates[key] {
                guard replaced.insert(key).inserted else { continue }
                for line in replacement { result.append(name: line.name, value: line.value) }
            } else if !dropped.contains(key) {
                result.append(name: field.name, value: field.value)
            }
        }
        for key in updateOrder where !replaced.contains(key) {                         // 2
            for line in updates[key] ?? [] { result.append(name: line.name, value: line.value) }
        }
        return result
    }

    /// §4.4: after a response to an unsafe method (not GET, HEAD, OPTIONS, TRACE) with a
    /// non-error status (2xx or 3xx), the URIs to invalidate: the request URI, then the Location
    /// and Content-Location URIs resolved against it when they have the same origin (scheme,
    /// host, port), without duplicates. A method of unknown safety counts as unsafe (§4.4).
    /// Another origin is never invalidated (it would let one site flush another's entries).
    /// Fragments are removed: a target URI has none (RFC 9110 §7.1), and neither has a cache key.
    public static func invalidatedURLs(method: String, status: Int, requestURL: URL, responseFields: HTTPFields) -> [URL] {
        guard !safeMethods.contains(method), (200...399).contains(status) else { return [] }
        let target = withoutFragment(requestURL)
        var result = [target]
        for name in ["Location", "Content-Location"] {
            guard let value = responseFields.first(name).map(trimmed), !value.isEmpty,
                  let resolved = RedirectPolicy.resolve(location: value, against: target) else { continue }
            let candidate = withoutFragment(resolved)
            guard RedirectPolicy.sameOrigin(target, candidate),
                  !result.contains(where: { $0.absoluteString == candidate.absoluteString }) else { continue }
            result.append(candidate)
        }
        return result
    }

    // MARK: Helpers

    /// Date, or response_time when it is missing or invalid (RFC 9110 §6.6.1).
    private static func dateValue(_ stored: StoredResponseFacts) -> Date {
        stored.responseFields.first("Date").flatMap(HTTPDate.parse) ?? stored.responseTime
    }

    /// Request `no-cache`, or `Pragma: no-cache` when the request has no Cache-Control (§5.4).
    private static func requestAsksNoCache(_ fields: HTTPFields, _ directives: CacheControl) -> Bool {
        directives.noCache || (!fields.contains("Cache-Control") && listMembers(fields, "Pragma").contains("no-cache"))
    }

    /// The members of a comma-separated list field, across all its lines, trimmed and
    /// lower-cased, empty members left out (RFC 9110 §5.6.1).
    private static func listMembers(_ fields: HTTPFields, _ name: String) -> [String] {
        fields.values(name).flatMap { $0.split(separator: ",") }.map { trimmed(String($0)).lowercased() }.filter { !$0.isEmpty }
    }

    /// A request field's value for Vary: its lines trimmed and joined with ", "; nil when absent.
    private static func normalized(_ fields: HTTPFields, _ name: String) -> String? {
        let values = fields.values(name)
        return values.isEmpty ? nil : values.map(trimmed).joined(separator: ", ")
    }

    /// `text` without leading and trailing SP and HTAB.
    private static func trimmed(_ text: String) -> String {
        var scalars = Substring(text)
        while let first = scalars.first, first == " " || first == "\t" { scalars.removeFirst() }
        while let last = scalars.last, last == " " || last == "\t" { scalars.removeLast() }
        return String(scalars)
    }

    /// `url` without its fragment.
    private static func withoutFragment(_ url: URL) -> URL {
        guard url.fragment != nil, var components = URLComponents(url: url, resolvingAgainstBaseURL: true) else { return url }
        components.fragment = nil
        return components.url ?? url
    }
}
