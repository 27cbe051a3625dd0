@testable import CourierPolicies
import CourierCore
import Foundation
import Testing

// The private cache's decisions against RFC 9111 (and RFC 9110 §5.6.7 for dates, RFC 5861 for the
// stale extensions). Expected values come from the RFC's rules and formulas applied by hand; the
// instants are seconds since 1970 computed independently with Python's `calendar.timegm` and
// `email.utils.formatdate` (`timegm((1994, 11, 6, 8, 49, 37)) == 784111777`). None come from
// running the code. Every instant is fixed: there is no clock in these tests.

/// Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example date: the origin of every timeline here.
private let origin: TimeInterval = 784_111_777

/// The instant `offset` seconds after ``origin``.
private func at(_ offset: TimeInterval) -> Date { Date(timeIntervalSince1970: origin + offset) }

/// IMF-fixdates around ``origin`` (from `email.utils.formatdate(784111777 + offset, usegmt=True)`).
private enum Stamp {
    static let t0 = "Sun, 06 Nov 1994 08:49:37 GMT"
    static let plus100 = "Sun, 06 Nov 1994 08:51:17 GMT"
    static let plus600 = "Sun, 06 Nov 1994 08:59:37 GMT"
    static let plus3600 = "Sun, 06 Nov 1994 09:49:37 GMT"
    static let minus30 = "Sun, 06 Nov 1994 08:49:07 GMT"
    static let minus3600 = "Sun, 06 Nov 1994 07:49:37 GMT"
    static let minus100000 = "Sat, 05 Nov 1994 05:02:57 GMT"
    static let minus30Days = "Fri, 07 Oct 1994 08:49:37 GMT"
}

/// A stored response: sent at `sent`, received at `received` (offsets from ``origin``).
private func stored(
    status: Int = 200, _ response: HTTPFields, request: HTTPFields = [:], sent: TimeInterval = 0, received: TimeInterval = 0
) -> StoredResponseFacts {
    StoredResponseFacts(status: status, responseFields: response, requestFields: request, requestTime: at(sent), responseTime: at(received))
}

// MARK: - HTTPDate

@Suite("HTTPDate")
struct HTTPDateTests {
    /// RFC 9110 §5.6.7: the three forms, with the rfc850-date century, a leap day and a leap
    /// second (`second` allows 60), and the OWS a field value may carry around it.
    static let valid: [(String, TimeInterval)] = [
        ("Sun, 06 Nov 1994 08:49:37 GMT", 784_111_777),
        ("Sunday, 06-Nov-94 08:49:37 GMT", 784_111_777),
        ("Sun Nov  6 08:49:37 1994", 784_111_777),
        ("Sun Nov 06 08:49:37 1994", 784_111_777),
        ("Wed Nov 16 08:49:37 1994", 784_975_777),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0),
        ("Wed, 31 Dec 1969 23:59:59 GMT", -1),
        ("Thursday, 01-Jan-70 00:00:00 GMT", 0),
        ("Friday, 31-Dec-99 23:59:59 GMT", 946_684_799),
        ("Tuesday, 01-Jan-69 00:00:00 GMT", 3_124_224_000),
        ("Thu, 29 Feb 2024 12:00:00 GMT", 1_709_208_000),
        ("Tue, 29 Feb 2000 00:00:00 GMT", 951_782_400),
        ("Sun, 06 Nov 1994 23:59:60 GMT", 784_166_400),
        ("  Sun, 06 Nov 1994 08:49:37 GMT\t", 784_111_777),
    ]

    @Test("the three forms of RFC 9110 §5.6.7", arguments: valid)
    func parses(_ text: String, _ seconds: TimeInterval) {
        #expect(HTTPDate.parse(text) == Date(timeIntervalSince1970: seconds))
    }

    @Test("not an HTTP-date", arguments: [
        "", "0", "-1", "soon", "2024-02-29T12:00:00Z",
        "Sun, 06 Nov 1994 08:49:37 PST",        // only GMT
        "Sun, 06 Nov 1994 08:49:37 gmt",        // %s"GMT": case-sensitive
        "sun, 06 Nov 1994 08:49:37 GMT",        // %s day-name
        "Sun, 06 nov 1994 08:49:37 GMT",        // %s month
        "Sun, 6 Nov 1994 08:49:37 GMT",         // day = 2DIGIT
        "Sun, 06 Nov 94 08:49:37 GMT",          // year = 4DIGIT in IMF-fixdate
        "Sun, 06 Nov 1994 8:49:37 GMT",         // hour = 2DIGIT
        "Sun 06 Nov 1994 08:49:37 GMT",         // the comma
        "Sun, 06 Nov 1994 08:49:37 GMT x",      // nothing may follow
        "Sun, 06 Nov 1994 08:49:37",
        "Sun, 31 Nov 1994 08:49:37 GMT",        // no 31 November
        "Wed, 29 Feb 2023 08:49:37 GMT",        // 2023 is not a leap year
        "Thu, 29 Feb 1900 00:00:00 GMT",        // nor is 1900
        "Sun, 00 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:00 GMT",
        "Sun, 06 Nov 1994 08:49:61 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT",     // date2 has a two-digit year
        "Sun, 06-Nov-94 08:49:37 GMT",          // rfc850-date has the long day name
        "Sun Nov 6 08:49:37 1994",              // date3: "Nov" SP SP DIGIT or "Nov" SP 2DIGIT
        "Sun Nov  6 08:49:37 94",
        "Sun Nov  6 08:49:37 1994 GMT",
    ])
    func refuses(_ text: String) {
        #expect(HTTPDate.parse(text) == nil)
    }

    /// IMF-fixdate output: weekday, zero padding, fractions dropped, dates before 1970, the
    /// century leap rules, and the limit of four-digit years.
    static let formatted: [(TimeInterval, String)] = [
        (784_111_777, "Sun, 06 Nov 1994 08:49:37 GMT"),
        (784_111_777.9, "Sun, 06 Nov 1994 08:49:37 GMT"),
        (0, "Thu, 01 Jan 1970 00:00:00 GMT"),
        (-1, "Wed, 31 Dec 1969 23:59:59 GMT"),
        (1_709_208_000, "Thu, 29 Feb 2024 12:00:00 GMT"),
        (951_782_400, "Tue, 29 Feb 2000 00:00:00 GMT"),
        (-2_203_891_200, "Thu, 01 Mar 1900 00:00:00 GMT"),
        (4_107_542_400, "Mon, 01 Mar 2100 00:00:00 GMT"),
        (2_147_483_648, "Tue, 19 Jan 2038 03:14:08 GMT"),
        (253_402_300_799, "Fri, 31 Dec 9999 23:59:59 GMT"),
        (1e15, "Fri, 31 Dec 9999 23:59:59 GMT"),
    ]

    @Test("format writes an IMF-fixdate", arguments: formatted)
    func formats(_ seconds: TimeInterval, _ text: String) {
        #expect(HTTPDate.format(Date(timeIntervalSince1970: seconds)) == text)
    }

    @Test("parse(format(date)) is the date, for whole seconds", arguments: [
        0, -1, 784_111_777, 951_782_400, 1_709_208_000, -2_203_891_200, 4_107_542_400, 2_147_483_648, 253_402_300_799,
    ] as [TimeInterval])
    func roundTrip(_ seconds: TimeInterval) {
        let date = Date(timeIntervalSince1970: seconds)
        #expect(HTTPDate.parse(HTTPDate.format(date)) == date)
    }
}

// MARK: - Cache-Control

@Suite("CacheControl")
struct CacheControlTests {
    /// Field lines of Cache-Control and the directives they hold (RFC 9111 §5.2).
    struct DirectiveCase: Sendable, CustomStringConvertible {
        var lines: [String]
        var expected: CacheControl
        var description: String { lines.map { "[\($0)]" }.joined(separator: " ") }

        init(_ lines: [String], _ edit: (inout CacheControl) -> Void = { _ in }) {
            self.lines = lines
            var expected = CacheControl()
            edit(&expected)
            self.expected = expected
        }
    }

    static let cases: [DirectiveCase] = [
        .init([]),
        .init([" , ,, "]),
        .init(["max-age=60"]) { $0.maxAge = 60 },
        .init(["MAX-AGE=60, No-Store"]) { $0.maxAge = 60; $0.noStore = true },
        .init(["max-age=\"60\""]) { $0.maxAge = 60 },
        .init(["max-age = 60 , no-store "]) { $0.maxAge = 60; $0.noStore = true },
        // A comma inside a quoted-string does not end the directive.
        .init(["no-cache=\"Set-Cookie, X-Trace\", max-age=5"]) { $0.noCache = true; $0.maxAge = 5 },
        .init(["no-cache=\"a\\\"b, c\", no-store"]) { $0.noCache = true; $0.noStore = true },
        // An unterminated quoted-string ends at the next comma.
        .init(["no-cache=\"X-Trace, no-store"]) { $0.noCache = true; $0.noStore = true },
        .init(["private=\"X-User\", public"]) { $0.isPrivate = true; $0.isPublic = true },
        // Duplicates: the first wins, within a line and across lines.
        .init(["max-age=10, max-age=0"]) { $0.maxAge = 10 },
        .init(["max-age=10", "max-age=20, must-revalidate"]) { $0.maxAge = 10; $0.mustRevalidate = true },
        // Invalid delta-seconds: a response's max-age is 0 (§4.2.1, treat as stale).
        .init(["max-age=abc"]) { $0.maxAge = 0 },
        .init(["max-age=-1"]) { $0.maxAge = 0 },
        .init(["max-age=1.5"]) { $0.maxAge = 0 },
        .init(["max-age"]) { $0.maxAge = 0 },
        .init(["max-age=soon, max-age=60"]) { $0.maxAge = 0 },
        // §1.2.2: too large is 2^31.
        .init(["max-age=99999999999999999999999"]) { $0.maxAge = 2_147_483_648 },
        .init(["max-age=2147483647"]) { $0.maxAge = 2_147_483_647 },
        .init(["s-maxage=100"]) { $0.sharedMaxAge = 100 },
        .init(["max-stale"]) { $0.maxStale = CacheControl.MaxStale.any },
        .init(["max-stale=30"]) { $0.maxStale = CacheControl.MaxStale.seconds(30) },
        .init(["max-stale=\"30\""]) { $0.maxStale = CacheControl.MaxStale.seconds(30) },
        .init(["max-stale=later"]),
        .init(["min-fresh=10, only-if-cached"]) { $0.minFresh = 10; $0.onlyIfCached = true },
        .init(["min-fresh=x"]),
        .init(["stale-while-revalidate=30, stale-if-error=600, immutable"]) {
            $0.staleWhileRevalidate = 30; $0.staleIfError = 600; $0.immutable = true
        },
        .init(["stale-while-revalidate", "stale-if-error=-5"]),
        // Unknown and shared-only directives are ignored (§5.2.3).
        .init(["no-transform, proxy-revalidate, community=\"UCI\""]),
    ]

    @Test("directives of a response", arguments: cases)
    func parses(_ row: DirectiveCase) {
        let fields = HTTPFields(row.lines.map { ("Cache-Control", $0) })
        #expect(CacheControl(fields) == row.expected)
    }

    @Test("field names are case-insensitive and other fields are not read")
    func fieldName() {
        let fields = HTTPFields([("cache-control", "max-age=5"), ("Pragma", "no-cache"), ("X-Cache-Control", "no-store")])
        var expected = CacheControl()
        expected.maxAge = 5
        #expect(CacheControl(fields) == expected)
    }

    @Test("a request's invalid max-age is ignored, not 0")
    func requestMaxAge() {
        #expect(CacheControl(["Cache-Control": "max-age=abc"], role: .request).maxAge == nil)
        #expect(CacheControl(["Cache-Control": "max-age=abc"], role: .response).maxAge == 0)
        #expect(CacheControl(["Cache-Control": "max-age=5"], role: .request).maxAge == 5)
        #expect(CacheControl(["Cache-Control": "max-age=0"], role: .request).maxAge == 0)
        #expect(CacheControl.maximumDeltaSeconds == 2_147_483_648)
    }
}

// MARK: - Storing (§3)

@Suite("HTTPCachePolicy: storing")
struct HTTPCacheStoringTests {
    struct StoreCase: Sendable, CustomStringConvertible {
        var name: String
        var method: String
        var request: HTTPFields
        var status: Int
        var response: HTTPFields
        var storable: Bool
        var description: String { name }

        init(_ name: String, method: String = "GET", request: HTTPFields = [:], _ status: Int, _ response: HTTPFields, _ storable: Bool) {
            self.name = name
            self.method = method
            self.request = request
            self.status = status
            self.response = response
            self.storable = storable
        }
    }

    static let cases: [StoreCase] = [
        .init("200 without directives: heuristically cacheable", 200, [:], true),
        .init("HEAD is not stored here", method: "HEAD", 200, ["Cache-Control": "max-age=60"], false),
        .init("POST is not stored", method: "POST", 200, ["Cache-Control": "max-age=60"], false),
        .init("methods are case-sensitive", method: "get", 200, ["Cache-Control": "max-age=60"], false),
        .init("response no-store", 200, ["Cache-Control": "no-store"], false),
        .init("request no-store", request: ["Cache-Control": "no-store"], 200, ["Cache-Control": "max-age=60"], false),
        .init("no-store beats public and max-age", 200, ["Cache-Control": "public, max-age=60, no-store"], false),
        .init("206 is not understood", 206, ["Cache-Control": "max-age=60"], false),
        .init("304 is not stored", 304, ["Cache-Control": "max-age=60"], false),
        .init("1xx is not final", 103, ["Cache-Control": "max-age=60"], false),
        .init("302 with nothing", 302, [:], false),
        .init("302 with max-age", 302, ["Cache-Control": "max-age=60"], true),
        .init("302 with an invalid max-age (stored stale)", 302, ["Cache-Control": "max-age=x"], true),
        .init("302 with Expires", 302, ["Expires": Stamp.plus3600], true),
        .init("302 with an invalid Expires (stored stale)", 302, ["Expires": "0"], true),
        .init("302 public", 302, ["Cache-Control": "public"], true),
        .init("302 private: this cache is private", 302, ["Cache-Control": "private"], true),
        .init("302 s-maxage counts for shared caches only", 302, ["Cache-Control": "s-maxage=60"], false),
        .init("302 a validator is not on §3's list", 302, ["ETag": "\"v1\"", "Last-Modified": Stamp.t0], false),
        .init("302 stale-while-revalidate alone", 302, ["Cache-Control": "stale-while-revalidate=60"], false),
        .init("302 no-cache alone", 302, ["Cache-Control": "no-cache"], false),
        .init("500 with max-age", 500, ["Cache-Control": "max-age=60"], true),
        .init("an unknown status with max-age", 299, ["Cache-Control": "max-age=60"], true),
        .init("a status that is not one", 600, ["Cache-Control": "max-age=60"], false),
        .init("must-understand with an unknown status", 299, ["Cache-Control": "max-age=60, must-understand"], false),
        .init("must-understand with a known status", 200, ["Cache-Control": "max-age=60, must-understand"], true),
        .init("must-understand does not lift no-store here", 200, ["Cache-Control": "no-store, must-understand, max-age=60"], false),
        .init("Vary: * can never match", 200, ["Cache-Control": "max-age=60", "Vary": "*"], false),
        .init("Vary with * in a list", 200, ["Vary": "Accept, *"], false),
        .init("Vary naming fields", 200, ["Vary": "Accept, Accept-Encoding"], true),
        .init("Authorization: a private cache may store", request: ["Authorization": "Basic dTpw"], 200, ["Cache-Control": "max-age=60"], true),
        .init("private 200", 200, ["Cache-Control": "private, max-age=60"], true),
        .init("no-cache 200 (stored, validated on use)", 200, ["Cache-Control": "no-cache"], true),
    ]

    @Test("§3 storing rules", arguments: cases)
    func storing(_ row: StoreCase) {
        #expect(HTTPCachePolicy.isStorable(method: row.method, requestFields: row.request, status: row.status, responseFields: row.response) == row.storable)
    }

    @Test("heuristically cacheable statuses are stored without freshness information",
          arguments: [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501])
    func heuristicStatuses(_ status: Int) {
        #expect(HTTPCachePolicy.isStorable(method: "GET", requestFields: [:], status: status, responseFields: [:]))
    }

    @Test("other statuses need explicit freshness, public or private",
          arguments: [201, 202, 205, 302, 303, 307, 400, 401, 403, 409, 429, 500, 502, 503, 504])
    func otherStatuses(_ status: Int) {
        #expect(!HTTPCachePolicy.isStorable(method: "GET", requestFields: [:], status: status, responseFields: [:]))
        #expect(HTTPCachePolicy.isStorable(method: "GET", requestFields: [:], status: status, responseFields: ["Cache-Control": "max-age=1"]))
    }
}

// MARK: - Freshness (§4.2.1, §4.2.2) and age (§4.2.3)

@Suite("HTTPCachePolicy: freshness and age")
struct HTTPCacheFreshnessTests {
    struct LifetimeCase: Sendable, CustomStringConvertible {
        var name: String
        var status: Int
        var response: HTTPFields
        var received: TimeInterval
        var lifetime: TimeInterval
        var description: String { name }

        init(_ name: String, status: Int = 200, _ response: HTTPFields, received: TimeInterval = 0, _ lifetime: TimeInterval) {
            self.name = name
            self.status = status
            self.response = response
            self.received = received
            self.lifetime = lifetime
        }
    }

    static let lifetimes: [LifetimeCase] = [
        .init("max-age beats Expires", ["Date": Stamp.t0, "Cache-Control": "max-age=60", "Expires": Stamp.plus3600], 60),
        .init("Expires − Date", ["Date": Stamp.t0, "Expires": Stamp.plus3600], 3600),
        .init("Expires − Date, whatever our clock said", ["Date": Stamp.t0, "Expires": Stamp.plus3600], received: 600, 3600),
        .init("no Date: Expires − response_time", ["Expires": Stamp.plus3600], received: 600, 3000),
        .init("invalid Date: Expires − response_time", ["Date": "yesterday", "Expires": Stamp.plus3600], received: 600, 3000),
        .init("Expires: 0 is already expired", ["Date": Stamp.t0, "Expires": "0"], 0),
        .init("Expires before Date", ["Date": Stamp.t0, "Expires": Stamp.minus3600], 0),
        .init("Expires in an obsolete form", ["Date": Stamp.t0, "Expires": "Sunday, 06-Nov-94 09:49:37 GMT"], 3600),
        .init("two Expires: the first", HTTPFields([("Date", Stamp.t0), ("Expires", Stamp.plus3600), ("Expires", Stamp.plus600)]), 3600),
        .init("an invalid max-age still beats Expires", ["Date": Stamp.t0, "Cache-Control": "max-age=soon", "Expires": Stamp.plus3600], 0),
        .init("two max-age: the first", ["Cache-Control": "max-age=60, max-age=600"], 60),
        .init("max-age=0", ["Cache-Control": "max-age=0", "Last-Modified": Stamp.minus100000], 0),
        .init("s-maxage is ignored", ["Date": Stamp.t0, "Cache-Control": "s-maxage=600"], 0),
        .init("s-maxage is ignored, max-age counts", ["Cache-Control": "s-maxage=600, max-age=60"], 60),
        // §4.2.2: 10% of (Date − Last-Modified), at most a day.
        .init("heuristic for 200", ["Date": Stamp.t0, "Last-Modified": Stamp.minus100000], 10_000),
        .init("heuristic capped at 24 h", ["Date": Stamp.t0, "Last-Modified": Stamp.minus30Days], 86_400),
        .init("heuristic for 404", status: 404, ["Date": Stamp.t0, "Last-Modified": Stamp.minus100000], 10_000),
        .init("heuristic for 301", status: 301, ["Date": Stamp.t0, "Last-Modified": Stamp.minus100000], 10_000),
        .init("no heuristic for 302", status: 302, ["Date": Stamp.t0, "Last-Modified": Stamp.minus100000], 0),
        .init("no heuristic for 307", status: 307, ["Date": Stamp.t0, "Last-Modified": Stamp.minus100000], 0),
        .init("no heuristic for 500", status: 500, ["Date": Stamp.t0, "Last-Modified": Stamp.minus100000], 0),
        .init("heuristic for a public 302 (§4.2.2)", status: 302, ["Date": Stamp.t0, "Cache-Control": "public", "Last-Modified": Stamp.minus100000], 10_000),
        .init("heuristic without Date: from response_time", ["Last-Modified": Stamp.minus100000], 10_000),
        .init("no heuristic with an explicit (invalid) Expires", ["Date": Stamp.t0, "Expires": "never", "Last-Modified": Stamp.minus100000], 0),
        .init("no heuristic without Last-Modified", ["Date": Stamp.t0], 0),
        .init("Last-Modified after Date", ["Date": Stamp.t0, "Last-Modified": Stamp.plus3600], 0),
        .init("nothing at all", [:], 0),
    ]

    @Test("§4.2.1 freshness lifetime", arguments: lifetimes)
    func lifetime(_ row: LifetimeCase) {
        #expect(HTTPCachePolicy.freshnessLifetime(stored(status: row.status, row.response, received: row.received)) == row.lifetime)
    }

    @Test("the heuristic's constants")
    func heuristicConstants() {
        #expect(HTTPCachePolicy.heuristicFraction == 0.1)
        #expect(HTTPCachePolicy.maximumHeuristicLifetime == 86_400)
        #expect(HTTPCachePolicy.heuristicallyCacheableStatuses == [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501])
    }

    struct AgeCase: Sendable, CustomStringConvertible {
        var name: String
        var response: HTTPFields
        var sent: TimeInterval
        var received: TimeInterval
        var now: TimeInterval
        var age: TimeInterval
        var description: String { name }

        init(_ name: String, _ response: HTTPFields, sent: TimeInterval, received: TimeInterval, now: TimeInterval, _ age: TimeInterval) {
            self.name = name
            self.response = response
            self.sent = sent
            self.received = received
            self.now = now
            self.age = age
        }
    }

    /// Worked by hand with §4.2.3: apparent_age = max(0, received − Date); corrected_age_value =
    /// Age + (received − sent); corrected_initial_age = max of the two; plus now − received.
    static let ages: [AgeCase] = [
        // apparent 0, delay 0, resident 100.
        .init("resident time only", ["Date": Stamp.t0], sent: 0, received: 0, now: 100, 100),
        // apparent 3, corrected 50 + 2 = 52, resident 10.
        .init("Age plus the response delay", ["Date": Stamp.t0, "Age": "50"], sent: 1, received: 3, now: 13, 62),
        // apparent 30 (Date 30 s before receipt), corrected 5, resident 10.
        .init("apparent age beats a small Age", ["Date": Stamp.minus30, "Age": "5"], sent: 0, received: 0, now: 10, 40),
        // Date 100 s ahead of our clock: apparent max(0, −100) = 0.
        .init("clock skew: Date in our future", ["Date": Stamp.plus100], sent: 0, received: 0, now: 10, 10),
        .init("clock skew with Age and delay", ["Date": Stamp.plus100, "Age": "7"], sent: 0, received: 2, now: 12, 19),
        // date_value = response_time: apparent 0, corrected 0 + 2.
        .init("no Date", [:], sent: 0, received: 2, now: 12, 12),
        .init("invalid Date", ["Date": "nope", "Age": "10"], sent: 0, received: 2, now: 2, 12),
        .init("invalid Age is 0", ["Date": Stamp.t0, "Age": "soon"], sent: 0, received: 0, now: 5, 5),
        .init("negative Age is invalid", ["Date": Stamp.t0, "Age": "-5"], sent: 0, received: 0, now: 5, 5),
        .init("Age saturates at 2^31", ["Date": Stamp.t0, "Age": "99999999999"], sent: 0, received: 0, now: 0, 2_147_483_648),
    ]

    @Test("§4.2.3 current_age", arguments: ages)
    func currentAge(_ row: AgeCase) {
        let facts = stored(row.response, sent: row.sent, received: row.received)
        #expect(HTTPCachePolicy.currentAge(facts, now: at(row.now)) == row.age)
    }
}

// MARK: - Vary (§4.1)

@Suite("HTTPCachePolicy: Vary")
struct HTTPCacheVaryTests {
    struct VaryCase: Sendable, CustomStringConvertible {
        var name: String
        var vary: [String]
        var original: HTTPFields
        var presented: HTTPFields
        var matches: Bool
        var description: String { name }

        init(_ name: String, _ vary: [String], _ original: HTTPFields, _ presented: HTTPFields, _ matches: Bool) {
            self.name = name
            self.vary = vary
            self.original = original
            self.presented = presented
            self.matches = matches
        }
    }

    static let cases: [VaryCase] = [
        .init("no Vary", [], ["Accept": "a"], ["Accept": "b"], true),
        .init("one field, same value", ["Accept-Encoding"], ["Accept-Encoding": "gzip"], ["Accept-Encoding": "gzip"], true),
        .init("one field, other value", ["Accept-Encoding"], ["Accept-Encoding": "gzip"], ["Accept-Encoding": "br"], false),
        .init("absent from the new request", ["Accept-Encoding"], ["Accept-Encoding": "gzip"], [:], false),
        .init("absent from the original", ["Accept-Encoding"], [:], ["Accept-Encoding": "gzip"], false),
        .init("absent from both", ["Accept-Encoding"], [:], [:], true),
        .init("names in any case", ["accept-encoding"], ["ACCEPT-ENCODING": "gzip"], ["Accept-Encoding": "gzip"], true),
        .init("several, all match", ["Accept, Accept-Language"], ["Accept": "a", "Accept-Language": "fr"], ["Accept-Language": "fr", "Accept": "a"], true),
        .init("several, one differs", ["Accept, Accept-Language"], ["Accept": "a", "Accept-Language": "fr"], ["Accept": "a", "Accept-Language": "de"], false),
        .init("several Vary lines", ["Accept", "Accept-Language"], ["Accept": "a", "Accept-Language": "fr"], ["Accept": "a", "Accept-Language": "de"], false),
        .init("repeated lines combine with \", \"", ["Accept"], HTTPFields([("Accept", "a"), ("Accept", "b")]), ["Accept": "a, b"], true),
        .init("whitespace around a value", ["Accept"], ["Accept": " a "], ["Accept": "a"], true),
        .init("an empty value is not absence", ["Accept"], ["Accept": ""], [:], false),
        .init("*", ["*"], ["Accept": "a"], ["Accept": "a"], false),
        .init("* in a list", ["Accept, *"], [:], [:], false),
        .init("fields Vary does not name are not compared", ["Accept"], ["Accept": "a", "Cookie": "x"], ["Accept": "a", "Cookie": "y"], true),
    ]

    @Test("§4.1 Vary matching", arguments: cases)
    func vary(_ row: VaryCase) {
        var response = HTTPFields()
        for line in row.vary { response.append(name: "Vary", value: line) }
        #expect(HTTPCachePolicy.varyMatches(stored(response, request: row.original), requestFields: row.presented) == row.matches)
    }
}

// MARK: - Reuse (§4, §4.2.4)

@Suite("HTTPCachePolicy: decide")
struct HTTPCacheDecideTests {
    struct DecideCase: Sendable, CustomStringConvertible {
        var name: String
        var response: HTTPFields
        var request: HTTPFields
        var now: TimeInterval
        var decision: HTTPCachePolicy.Decision
        var description: String { name }

        init(_ name: String, _ response: HTTPFields, _ request: HTTPFields = [:], now: TimeInterval, _ decision: HTTPCachePolicy.Decision) {
            self.name = name
            self.response = response
            self.request = request
            self.now = now
            self.decision = decision
        }
    }

    /// Every stored response is dated, sent and received at the origin, so its age is `now`.
    /// `max-age=100` makes it fresh for ages below 100 (§4.2: fresh when lifetime > age).
    static let plain = HTTPCachePolicy.Decision.validate([:])
    static let byETag = HTTPCachePolicy.Decision.validate(["If-None-Match": "\"v1\""])

    static let cases: [DecideCase] = [
        .init("fresh", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], now: 50, .fresh),
        .init("age equal to the lifetime is stale", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], now: 100, plain),
        .init("stale, no validator: an ordinary request", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], now: 150, plain),
        .init("stale with an ETag", ["Date": Stamp.t0, "Cache-Control": "max-age=100", "ETag": "\"v1\""], now: 150, byETag),
        .init("stale with both validators", ["Date": Stamp.t0, "Cache-Control": "max-age=100", "ETag": "\"v1\"", "Last-Modified": Stamp.minus3600], now: 150,
              .validate(["If-None-Match": "\"v1\"", "If-Modified-Since": Stamp.minus3600])),
        .init("no freshness information", ["Date": Stamp.t0], now: 0, plain),
        // §5.2.1.1 max-age: the age must be at most its value.
        .init("request max-age below the age", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "max-age=30"], now: 50, plain),
        .init("request max-age equal to the age", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "max-age=50"], now: 50, .fresh),
        .init("request max-age=0", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "max-age=0"], now: 1, plain),
        .init("an invalid request max-age is ignored", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "max-age=soon"], now: 50, .fresh),
        // §5.2.1.3 min-fresh: fresh for at least that much longer.
        .init("min-fresh not met", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "min-fresh=60"], now: 50, plain),
        .init("min-fresh met exactly", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "min-fresh=50"], now: 50, .fresh),
        .init("min-fresh is never met by a stale response", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "min-fresh=0, max-stale"], now: 150, plain),
        // §5.2.1.2 max-stale.
        .init("max-stale without a value", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "max-stale"], now: 100_000, .fresh),
        .init("max-stale covering the staleness", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "max-stale=60"], now: 150, .fresh),
        .init("max-stale equal to the staleness", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "max-stale=50"], now: 150, .fresh),
        .init("max-stale too short", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "max-stale=30"], now: 150, plain),
        .init("max-stale with a request max-age below the age", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "max-stale, max-age=120"], now: 150, plain),
        // §5.2.2.2 must-revalidate: never stale, but fresh is fresh.
        .init("must-revalidate beats max-stale", ["Date": Stamp.t0, "Cache-Control": "max-age=100, must-revalidate"], ["Cache-Control": "max-stale"], now: 150, plain),
        .init("must-revalidate while fresh", ["Date": Stamp.t0, "Cache-Control": "max-age=100, must-revalidate"], now: 50, .fresh),
        // no-cache on either side; Pragma only without Cache-Control (§5.4), and only in requests.
        .init("request no-cache", ["Date": Stamp.t0, "Cache-Control": "max-age=100", "ETag": "\"v1\""], ["Cache-Control": "no-cache"], now: 50, byETag),
        .init("request Pragma: no-cache", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Pragma": "no-cache"], now: 50, plain),
        .init("request Pragma in a list, any case", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Pragma": "x-foo, No-Cache"], now: 50, plain),
        .init("Pragma ignored beside Cache-Control", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Pragma": "no-cache", "Cache-Control": "max-stale"], now: 50, .fresh),
        .init("response no-cache", ["Date": Stamp.t0, "Cache-Control": "max-age=100, no-cache"], now: 0, plain),
        .init("response qualified no-cache", ["Date": Stamp.t0, "Cache-Control": "max-age=100, no-cache=\"Set-Cookie\""], now: 0, plain),
        .init("response Pragma means nothing", ["Date": Stamp.t0, "Cache-Control": "max-age=100", "Pragma": "no-cache"], now: 50, .fresh),
        // RFC 5861 §3 stale-while-revalidate.
        .init("within stale-while-revalidate", ["Date": Stamp.t0, "Cache-Control": "max-age=100, stale-while-revalidate=60"], now: 150, .staleWhileRevalidate),
        .init("at the end of stale-while-revalidate", ["Date": Stamp.t0, "Cache-Control": "max-age=100, stale-while-revalidate=60"], now: 160, .staleWhileRevalidate),
        .init("past stale-while-revalidate", ["Date": Stamp.t0, "Cache-Control": "max-age=100, stale-while-revalidate=60"], now: 161, plain),
        .init("stale-while-revalidate while fresh is fresh", ["Date": Stamp.t0, "Cache-Control": "max-age=100, stale-while-revalidate=60"], now: 50, .fresh),
        .init("stale-while-revalidate and must-revalidate", ["Date": Stamp.t0, "Cache-Control": "max-age=100, stale-while-revalidate=60, must-revalidate"], now: 150, plain),
        .init("stale-while-revalidate, request max-age below the age", ["Date": Stamp.t0, "Cache-Control": "max-age=100, stale-while-revalidate=60"], ["Cache-Control": "max-age=120"], now: 150, plain),
        .init("stale-while-revalidate, request no-cache", ["Date": Stamp.t0, "Cache-Control": "max-age=100, stale-while-revalidate=60"], ["Cache-Control": "no-cache"], now: 150, plain),
        .init("stale-while-revalidate, request min-fresh", ["Date": Stamp.t0, "Cache-Control": "max-age=100, stale-while-revalidate=60"], ["Cache-Control": "min-fresh=0"], now: 150, plain),
        // Directives that do not change the decision.
        .init("only-if-cached, stale: the caller answers 504", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "only-if-cached"], now: 150, plain),
        .init("only-if-cached, fresh", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "only-if-cached"], now: 50, .fresh),
        .init("request no-store does not prevent reuse", ["Date": Stamp.t0, "Cache-Control": "max-age=100"], ["Cache-Control": "no-store"], now: 50, .fresh),
        .init("immutable does not override request max-age=0", ["Date": Stamp.t0, "Cache-Control": "max-age=100, immutable"], ["Cache-Control": "max-age=0"], now: 50, plain),
        // Freshness from Expires and from the heuristic.
        .init("fresh by Expires", ["Date": Stamp.t0, "Expires": Stamp.plus3600], now: 3599, .fresh),
        .init("stale by Expires", ["Date": Stamp.t0, "Expires": Stamp.plus3600], now: 3600, plain),
        .init("fresh by the heuristic", ["Date": Stamp.t0, "Last-Modified": Stamp.minus100000], now: 9_999,
              .fresh),
        .init("stale by the heuristic", ["Date": Stamp.t0, "Last-Modified": Stamp.minus100000], now: 10_000,
              .validate(["If-Modified-Since": Stamp.minus100000])),
    ]

    @Test("§4 and §4.2.4 reuse", arguments: cases)
    func decide(_ row: DecideCase) {
        #expect(HTTPCachePolicy.decide(stored(row.response), requestFields: row.request, now: at(row.now)) == row.decision)
    }

    @Test("the age counts Age and the response delay")
    func decideWithAge() {
        // Age 40 + delay 5 = 45 at receipt (5 s after the origin), 50 at now = 10.
        let facts = stored(["Date": Stamp.t0, "Age": "40", "Cache-Control": "max-age=50"], sent: 0, received: 5)
        #expect(HTTPCachePolicy.decide(facts, requestFields: [:], now: at(9)) == .fresh)
        #expect(HTTPCachePolicy.decide(facts, requestFields: [:], now: at(10)) == .validate([:]))
    }
}

// MARK: - Validation (§4.3) and stale-if-error (RFC 5861 §4)

@Suite("HTTPCachePolicy: validation")
struct HTTPCacheValidationTests {
    @Test("§4.3.1 conditional fields", arguments: [
        (["ETag": "\"v1\"", "Last-Modified": Stamp.t0] as HTTPFields, [HTTPFields.Field(name: "If-None-Match", value: "\"v1\""), .init(name: "If-Modified-Since", value: Stamp.t0)]),
        (["ETag": "W/\"v2\""], [.init(name: "If-None-Match", value: "W/\"v2\"")]),
        (["Last-Modified": Stamp.t0], [.init(name: "If-Modified-Since", value: Stamp.t0)]),
        (["Last-Modified": "Sunday, 06-Nov-94 08:49:37 GMT"], [.init(name: "If-Modified-Since", value: "Sunday, 06-Nov-94 08:49:37 GMT")]),
        (["Last-Modified": "yesterday"], []),
        (["ETag": ""], []),
        ([:], []),
    ] as [(HTTPFields, [HTTPFields.Field])])
    func conditional(_ response: HTTPFields, _ expected: [HTTPFields.Field]) {
        #expect(HTTPCachePolicy.conditionalFields(for: stored(response)).fields == expected)
    }

    struct StaleErrorCase: Sendable, CustomStringConvertible {
        var name: String
        var responseDirectives: String
        var request: HTTPFields
        var now: TimeInterval
        var allowed: Bool
        var description: String { name }

        init(_ name: String, _ responseDirectives: String, _ request: HTTPFields = [:], now: TimeInterval, _ allowed: Bool) {
            self.name = name
            self.responseDirectives = responseDirectives
            self.request = request
            self.now = now
            self.allowed = allowed
        }
    }

    /// Lifetime 100 and age `now`: staleness is now − 100.
    static let staleErrorCases: [StaleErrorCase] = [
        .init("response window covers it", "max-age=100, stale-if-error=60", now: 150, true),
        .init("response window, at its end", "max-age=100, stale-if-error=60", now: 160, true),
        .init("response window exceeded", "max-age=100, stale-if-error=60", now: 161, false),
        .init("no window", "max-age=100", now: 150, false),
        .init("request window covers it", "max-age=100", ["Cache-Control": "stale-if-error=60"], now: 150, true),
        .init("request window too short", "max-age=100", ["Cache-Control": "stale-if-error=10"], now: 150, false),
        .init("either window: the response's", "max-age=100, stale-if-error=60", ["Cache-Control": "stale-if-error=10"], now: 150, true),
        .init("either window: the request's", "max-age=100, stale-if-error=10", ["Cache-Control": "stale-if-error=60"], now: 150, true),
        .init("an invalid window is none", "max-age=100", ["Cache-Control": "stale-if-error=soon"], now: 150, false),
        .init("must-revalidate forbids it", "max-age=100, stale-if-error=60, must-revalidate", ["Cache-Control": "stale-if-error=60"], now: 150, false),
        .init("response no-cache forbids it", "max-age=100, stale-if-error=60, no-cache", now: 150, false),
        .init("request no-cache refuses the response's window", "max-age=100, stale-if-error=60", ["Cache-Control": "no-cache"], now: 150, false),
        .init("request Pragma: no-cache too", "max-age=100, stale-if-error=60", ["Pragma": "no-cache"], now: 150, false),
        .init("request no-cache with its own window", "max-age=100", ["Cache-Control": "no-cache, stale-if-error=60"], now: 150, true),
        .init("fresh, with a window", "max-age=100, stale-if-error=1", now: 50, true),
    ]

    @Test("RFC 5861 stale-if-error", arguments: staleErrorCases)
    func staleIfError(_ row: StaleErrorCase) {
        let facts = stored(["Date": Stamp.t0, "Cache-Control": row.responseDirectives])
        #expect(HTTPCachePolicy.mayServeStaleOnError(facts, requestFields: row.request, now: at(row.now)) == row.allowed)
    }
}

// MARK: - 304 merge (§4.3.4)

@Suite("HTTPCachePolicy: merge")
struct HTTPCacheMergeTests {
    @Test("fields in the 304 replace the stored ones; the rest stay in order")
    func replaces() {
        let storedFields = HTTPFields([
            ("Date", Stamp.t0), ("Cache-Control", "max-age=60"), ("ETag", "\"v1\""), ("Content-Type", "text/plain"),
            ("Content-Length", "10"), ("X-Old", "1"),
        ])
        let notModified = HTTPFields([
            ("Date", Stamp.plus3600), ("Cache-Control", "max-age=120"), ("ETag", "\"v1\""), ("Content-Length", "0"), ("X-New", "2"),
        ])
        let expected = HTTPFields([
            ("Date", Stamp.plus3600), ("Cache-Control", "max-age=120"), ("ETag", "\"v1\""), ("Content-Type", "text/plain"),
            ("Content-Length", "10"), ("X-Old", "1"), ("X-New", "2"),
        ])
        #expect(HTTPCachePolicy.merge(stored: storedFields, notModified: notModified).fields == expected.fields)
    }

    @Test("every stored line of a name is replaced by all the 304's lines, at the first one's place")
    func repeated() {
        let storedFields = HTTPFields([("Link", "<a>"), ("X", "1"), ("Link", "<b>")])
        let notModified = HTTPFields([("link", "<c>"), ("Link", "<d>")])
        let expected = HTTPFields([("link", "<c>"), ("Link", "<d>"), ("X", "1")])
        #expect(HTTPCachePolicy.merge(stored: storedFields, notModified: notModified).fields == expected.fields)
    }

    @Test("framing, coding, hop-by-hop and proxy fields are not updated")
    func exceptions() {
        let storedFields = HTTPFields([("Content-Encoding", "gzip"), ("Content-Length", "10"), ("X", "1")])
        let notModified = HTTPFields([
            ("Content-Encoding", "br"), ("Content-Range", "bytes 0-1/2"), ("Content-Length", "0"), ("Transfer-Encoding", "chunked"),
            ("Connection", "keep-alive, X-Hop"), ("X-Hop", "1"), ("Keep-Alive", "timeout=5"), ("Proxy-Connection", "close"),
            ("TE", "trailers"), ("Upgrade", "h2c"), ("Proxy-Authenticate", "Basic realm=\"p\""),
            ("Proxy-Authentication-Info", "nextnonce=\"n\""), ("Proxy-Authorization", "Basic dTpw"), ("X", "2"),
        ])
        let expected = HTTPFields([("Content-Encoding", "gzip"), ("Content-Length", "10"), ("X", "2")])
        #expect(HTTPCachePolicy.merge(stored: storedFields, notModified: notModified).fields == expected.fields)
    }

    @Test("Date and Age belong to the message: without them in the 304 the stored ones go")
    func dateAndAge() {
        let storedFields = HTTPFields([("Date", Stamp.t0), ("Age", "30"), ("Cache-Control", "max-age=60")])
        let bare = HTTPCachePolicy.merge(stored: storedFields, notModified: ["ETag": "\"v1\""])
        #expect(bare.fields == HTTPFields([("Cache-Control", "max-age=60"), ("ETag", "\"v1\"")]).fields)
        let dated = HTTPCachePolicy.merge(stored: storedFields, notModified: HTTPFields([("Age", "2"), ("Date", Stamp.plus600)]))
        #expect(dated.fields == HTTPFields([("Date", Stamp.plus600), ("Age", "2"), ("Cache-Control", "max-age=60")]).fields)
    }

    @Test("an empty 304 leaves the stored fields but Date and Age")
    func empty() {
        let storedFields = HTTPFields([("Date", Stamp.t0), ("ETag", "\"v1\""), ("Vary", "Accept")])
        #expect(HTTPCachePolicy.merge(stored: storedFields, notModified: [:]).fields == HTTPFields([("ETag", "\"v1\""), ("Vary", "Accept")]).fields)
    }
}

// MARK: - Invalidation (§4.4)

@Suite("HTTPCachePolicy: invalidation")
struct HTTPCacheInvalidationTests {
    static let target = URL(string: "https://example.com/items")!

    struct InvalidationCase: Sendable, CustomStringConvertible {
        var name: String
        var method: String
        var status: Int
        var response: HTTPFields
        var invalidated: [String]
        var description: String { name }

        init(_ name: String, _ method: String, _ status: Int, _ response: HTTPFields, _ invalidated: [String]) {
            self.name = name
            self.method = method
            self.status = status
            self.response = response
            self.invalidated = invalidated
        }
    }

    static let items = "https://example.com/items"

    static let cases: [InvalidationCase] = [
        .init("POST, same-origin Location", "POST", 201, ["Location": "/items/7"], [items, "https://example.com/items/7"]),
        .init("POST, same-origin Content-Location", "POST", 200, ["Content-Location": "https://example.com/items/7"], [items, "https://example.com/items/7"]),
        .init("PUT, both", "PUT", 200, ["Location": "/a", "Content-Location": "b"], [items, "https://example.com/a", "https://example.com/b"]),
        .init("both the same URI", "PUT", 200, ["Location": "/a", "Content-Location": "/a"], [items, "https://example.com/a"]),
        .init("Location is the request URI", "POST", 200, ["Location": "/items"], [items]),
        .init("another host", "POST", 201, ["Location": "https://other.example/items/7"], [items]),
        .init("another scheme", "POST", 201, ["Location": "http://example.com/items/7"], [items]),
        .init("another port", "POST", 201, ["Content-Location": "https://example.com:8443/items/7"], [items]),
        .init("the default port written out", "POST", 201, ["Location": "https://example.com:443/items/7"], [items, "https://example.com:443/items/7"]),
        .init("a fragment is not part of the URI", "POST", 201, ["Location": "/items/7#top"], [items, "https://example.com/items/7"]),
        .init("DELETE", "DELETE", 204, [:], [items]),
        .init("PATCH", "PATCH", 200, [:], [items]),
        .init("a method of unknown safety", "PURGE", 200, [:], [items]),
        .init("methods are case-sensitive: get is unknown", "get", 200, [:], [items]),
        .init("3xx is not an error", "POST", 303, ["Location": "/items/7"], [items, "https://example.com/items/7"]),
        .init("4xx is an error", "POST", 404, ["Location": "/items/7"], []),
        .init("5xx is an error", "PUT", 500, [:], []),
        .init("1xx is not a final answer", "POST", 100, [:], []),
        .init("GET is safe", "GET", 200, ["Location": "/items/7"], []),
        .init("HEAD is safe", "HEAD", 200, [:], []),
        .init("OPTIONS is safe", "OPTIONS", 200, [:], []),
        .init("TRACE is safe", "TRACE", 200, [:], []),
    ]

    @Test("§4.4 invalidation", arguments: cases)
    func invalidation(_ row: InvalidationCase) {
        let urls = HTTPCachePolicy.invalidatedURLs(method: row.method, status: row.status, requestURL: Self.target, responseFields: row.response)
        #expect(urls.map(\.absoluteString) == row.invalidated)
    }

    @Test("the request URI's fragment is dropped too")
    func requestFragment() {
        let url = URL(string: "https://example.com/items#list")!
        let urls = HTTPCachePolicy.invalidatedURLs(method: "POST", status: 200, requestURL: url, responseFields: ["Location": "/items/8"])
        #expect(urls.map(\.absoluteString) == ["https://example.com/items", "https://example.com/items/8"])
    }
}
