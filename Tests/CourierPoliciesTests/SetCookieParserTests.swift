@testable import CourierPolicies
import Foundation
import Testing

/// `SetCookieParser` against the parsing algorithm of RFC 6265bis §5.6, and `CookieDateParser`
/// against the cookie-date algorithm of §5.1.1:
///
/// ```
/// delimiter    = %x09 / %x20-2F / %x3B-40 / %x5B-60 / %x7B-7E
/// day-of-month = 1*2DIGIT [ non-digit *OCTET ]
/// month        = ( "jan" / "feb" / … / "dec" ) *OCTET
/// year         = 2*4DIGIT [ non-digit *OCTET ]
/// time         = hms-time [ non-digit *OCTET ]      hms-time = 1*2DIGIT ":" 1*2DIGIT ":" 1*2DIGIT
/// ```
///
/// The expected values come from the RFC's steps applied by hand. The instants are seconds
/// since 1970 computed independently with Python's `calendar.timegm` (for example,
/// `timegm((1994, 11, 6, 8, 49, 37, 0, 0, 0)) == 784111777`). None of them come from running
/// the parser.
@Suite("SetCookieParser")
struct SetCookieParserTests {
    /// One field value and the cookie the algorithm reads from it.
    struct CookieCase: Sendable, CustomStringConvertible {
        var name: String
        var field: String
        var expected: SetCookie

        init(_ name: String, _ field: String, _ expected: SetCookie) {
            self.name = name
            self.field = field
            self.expected = expected
        }

        var description: String { name }
    }

    /// One field value the algorithm ignores whole.
    struct RefusedCase: Sendable, CustomStringConvertible {
        var name: String
        var field: String

        init(_ name: String, _ field: String) {
            self.name = name
            self.field = field
        }

        var description: String { name }
    }

    /// One cookie-date and its instant in seconds since 1970, or nil when §5.1.1 fails.
    struct DateCase: Sendable, CustomStringConvertible {
        var name: String
        var text: String
        var expected: Double?

        init(_ name: String, _ text: String, _ expected: Double?) {
            self.name = name
            self.text = text
            self.expected = expected
        }

        var description: String { name }
    }

    // MARK: Cookie dates (§5.1.1)

    /// 784111777 is 1994-11-06T08:49:37Z, the date in RFC 9110's three formats.
    static let acceptedDates: [DateCase] = [
        DateCase("IMF-fixdate", "Sun, 06 Nov 1994 08:49:37 GMT", 784111777),
        DateCase("RFC 850, two-digit year", "Sunday, 06-Nov-94 08:49:37 GMT", 784111777),
        DateCase("asctime, space-padded day", "Sun Nov  6 08:49:37 1994", 784111777),
        DateCase("no weekday and no zone", "06 Nov 1994 08:49:37", 784111777),
        DateCase("year first, one-digit hour", "1994 Nov 06 8:49:37", 784111777),
        DateCase("time first", "08:49:37 06 Nov 1994", 784111777),
        DateCase("semicolons as delimiters", ";06;Nov;1994;08:49:37;", 784111777),
        DateCase("every delimiter byte", "\t!06\"Nov#1994$08:49:37%&'()*+,-./;<=>?@[\\]^_`{|}~", 784111777),
        DateCase("month in capitals", "Sun, 06 NOV 1994 08:49:37 GMT", 784111777),
        DateCase("month spelled out", "Sunday, 06 November 1994 08:49:37 GMT", 784111777),
        DateCase("a day with a suffix", "Nov 6th 1994 08:49:37", 784111777),
        DateCase("a time followed by a letter", "06 Nov 1994 08:49:37Z", 784111777),
        DateCase("fractional seconds", "Sun, 06 Nov 1994 08:49:37.123 GMT", 784111777),
        DateCase("one-digit time fields", "06 Nov 1994 8:9:7", 784109347),
        DateCase("the weekday is not checked", "Mon, 06 Nov 1994 08:49:37 GMT", 784111777),
        DateCase("a non-ASCII token is skipped", "Sun, 06 Nov 1994 08:49:37 GMT — ünknown", 784111777),
        DateCase("later tokens of a kind already found are skipped", "06 Nov 1994 08:49:37 07 Dec 1995 09:00:00", 784111777),
        DateCase("the epoch", "Thu, 01 Jan 1970 00:00:00 GMT", 0),
        DateCase("two-digit year 70 is 1970", "Thu, 01-Jan-70 00:00:01 GMT", 1),
        DateCase("two-digit year 69 is 2069", "Tue, 01-Jan-69 00:00:00 GMT", 3124224000),
        DateCase("two-digit year 99 is 1999", "Fri, 31-Dec-99 23:59:59 GMT", 946684799),
        DateCase("two-digit year 00 is 2000", "Sat, 01-Jan-00 00:00:00 GMT", 946684800),
        DateCase("four digits worth 70 are 1970 too", "01 Jan 0070 00:00:00", 0),
        DateCase("1601, the earliest year", "Mon, 01 Jan 1601 00:00:00 GMT", -11644473600),
        DateCase("9999, the latest year", "Fri, 31 Dec 9999 23:59:59 GMT", 253402300799),
        DateCase("29 February of a leap year", "Thu, 29 Feb 2024 00:00:00 GMT", 1709164800),
        DateCase("29 February of a year divisible by 400", "Tue, 29 Feb 2000 12:00:00 GMT", 951825600),
        DateCase("past 2038", "Tue, 19 Jan 2038 03:14:08 GMT", 2147483648),
        DateCase("RFC 6265bis's example", "Wed, 09 Jun 2021 10:18:14 GMT", 1623233894),
    ]

    static let refusedDates: [DateCase] = [
        DateCase("empty", "", nil),
        DateCase("delimiters only", " ,;-/ ", nil),
        DateCase("year 1600", "Sat, 01 Jan 1600 00:00:00 GMT", nil),
        DateCase("a three-digit year", "06 Nov 994 08:49:37", nil),
        DateCase("a five-digit year", "06 Nov 19940 08:49:37", nil),
        DateCase("29 February of a common year", "Wed, 29 Feb 2023 00:00:00 GMT", nil),
        DateCase("29 February of a century not divisible by 400", "Thu, 29 Feb 1900 00:00:00 GMT", nil),
        DateCase("30 February", "Fri, 30 Feb 2024 00:00:00 GMT", nil),
        DateCase("31 April", "Wed, 31 Apr 2024 00:00:00 GMT", nil),
        DateCase("hour 24", "Sun, 06 Nov 1994 24:00:00 GMT", nil),
        DateCase("minute 60", "Sun, 06 Nov 1994 23:60:00 GMT", nil),
        DateCase("a leap second", "Sat, 31 Dec 2016 23:59:60 GMT", nil),
        DateCase("day 0", "00 Nov 1994 08:49:37", nil),
        DateCase("day 32", "32 Nov 1994 08:49:37", nil),
        DateCase("no time", "Sun, 06 Nov 1994", nil),
        DateCase("hours and minutes only", "Sun, 06 Nov 1994 08:49 GMT", nil),
        DateCase("no year", "Sun, 06 Nov 08:49:37 GMT", nil),
        DateCase("no month", "06 1994 08:49:37", nil),
        DateCase("an unknown month", "06 Foo 1994 08:49:37", nil),
        DateCase("a two-letter month", "06 No 1994 08:49:37", nil),
        DateCase("a three-digit time field", "06 Nov 1994 008:49:37", nil),
        DateCase("a two-digit year first takes the day", "94 Nov 06 08:49:37", nil),
        DateCase("Apache's log format", "06/Nov/1994:08:49:37 +0000", nil),
        DateCase("ISO 8601", "1994-11-06T08:49:37Z", nil),
        DateCase("a control byte joins two tokens", "06 Nov 1994\u{1}08:49:37", nil),
    ]

    @Test("cookie dates that §5.1.1 reads", arguments: acceptedDates)
    func readsDate(_ row: DateCase) {
        #expect(CookieDateParser.parse(row.text) == row.expected.map { Date(timeIntervalSince1970: $0) })
    }

    @Test("cookie dates that §5.1.1 refuses", arguments: refusedDates)
    func refusesDate(_ row: DateCase) {
        #expect(CookieDateParser.parse(row.text) == nil)
    }

    /// An Expires attribute reads its value as a cookie-date. Dates with a ";" (it would end the
    /// attribute) or a control byte (it would refuse the field) are left out.
    @Test("Expires reads its value as a cookie date", arguments: acceptedDates + refusedDates)
    func expiresUsesTheDateAlgorithm(_ row: DateCase) {
        guard !row.text.utf8.contains(where: { $0 == UInt8(ascii: ";") || ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }) else { return }
        let cookie = SetCookieParser.parse("a=b; Expires=" + row.text)
        #expect(cookie?.name == "a")
        #expect(cookie?.expires == row.expected.map { Date(timeIntervalSince1970: $0) })
    }

    // MARK: Name and value (§5.6 steps 1–6)

    static let nameValueCases: [CookieCase] = [
        CookieCase("RFC 6265bis's first example", "SID=31d4d96e407aad42", SetCookie(name: "SID", value: "31d4d96e407aad42")),
        CookieCase(
            "RFC 6265bis: Path and Domain", "SID=31d4d96e407aad42; Path=/; Domain=example.com",
            SetCookie(name: "SID", value: "31d4d96e407aad42", domain: "example.com", path: "/")
        ),
        CookieCase(
            "RFC 6265bis: Secure and HttpOnly", "SID=31d4d96e407aad42; Path=/; Secure; HttpOnly",
            SetCookie(name: "SID", value: "31d4d96e407aad42", path: "/", secure: true, httpOnly: true)
        ),
        CookieCase(
            "RFC 6265bis: Expires", "lang=en-US; Expires=Wed, 09 Jun 2021 10:18:14 GMT",
            SetCookie(name: "lang", value: "en-US", expires: Date(timeIntervalSince1970: 1623233894))
        ),
        CookieCase(
            "RFC 6265bis: an empty value and a past date", "lang=; Expires=Sun, 06 Nov 1994 08:49:37 GMT",
            SetCookie(name: "lang", value: "", expires: Date(timeIntervalSince1970: 784111777))
        ),
        CookieCase("a nameless cookie (no '=')", "31d4d96e407aad42", SetCookie(name: "", value: "31d4d96e407aad42")),
        CookieCase("a nameless cookie with attributes", "abc ; Path=/", SetCookie(name: "", value: "abc", path: "/")),
        CookieCase("an empty name before '='", "=value", SetCookie(name: "", value: "value")),
        CookieCase("an empty value", "name=", SetCookie(name: "name", value: "")),
        CookieCase("spaces around the name and the value are trimmed", "  name  =  value  ", SetCookie(name: "name", value: "value")),
        CookieCase("tabs around the name and the value are trimmed", "\tname\t=\tvalue\t; Path=/", SetCookie(name: "name", value: "value", path: "/")),
        CookieCase("whitespace inside is kept", "a b = c\td", SetCookie(name: "a b", value: "c\td")),
        CookieCase("'=' in the value", "name=a=b==", SetCookie(name: "name", value: "a=b==")),
        CookieCase("a quoted value keeps its quotes", "name=\"quoted value\"", SetCookie(name: "name", value: "\"quoted value\"")),
        CookieCase("a comma in the value", "name=a,b", SetCookie(name: "name", value: "a,b")),
        CookieCase("UTF-8 in the name and the value", "名前=café ☕", SetCookie(name: "名前", value: "café ☕")),
        CookieCase("a C1 control (U+0085) is not a CTL", "name=a\u{85}b", SetCookie(name: "name", value: "a\u{85}b")),
        CookieCase("percent-encoding is not decoded", "name=a%3Bb%00", SetCookie(name: "name", value: "a%3Bb%00")),
        CookieCase("4096 bytes of name and value", "n=" + String(repeating: "v", count: 4095), SetCookie(name: "n", value: String(repeating: "v", count: 4095))),
        CookieCase(
            "4096 bytes once whitespace is trimmed", "  n = " + String(repeating: "v", count: 4095) + "  ",
            SetCookie(name: "n", value: String(repeating: "v", count: 4095))
        ),
        CookieCase("4096 bytes of two-byte characters", "=" + String(repeating: "é", count: 2048), SetCookie(name: "", value: String(repeating: "é", count: 2048))),
        CookieCase(
            "attributes do not count toward 4096", "n=" + String(repeating: "v", count: 4095) + "; Path=/",
            SetCookie(name: "n", value: String(repeating: "v", count: 4095), path: "/")
        ),
    ]

    static let refusedCases: [RefusedCase] = [
        RefusedCase("an empty field", ""),
        RefusedCase("whitespace only", " \t "),
        RefusedCase("'=' alone", "="),
        RefusedCase("'=' between spaces", "   =   "),
        RefusedCase("attributes only", "; Path=/; Secure"),
        RefusedCase("an empty name and value before attributes", " = ; Domain=example.com"),
        RefusedCase("4097 bytes of name and value", "n=" + String(repeating: "v", count: 4096)),
        RefusedCase("4097 bytes counted in UTF-8", "n=" + String(repeating: "é", count: 2048)),
        RefusedCase("NUL in the value", "name=a\0b"),
        RefusedCase("%x01 in the name", "na\u{1}me=value"),
        RefusedCase("CR", "name=value\r"),
        RefusedCase("LF", "name=value\nSet-Cookie: other=x"),
        RefusedCase("%x1F", "name=va\u{1F}lue"),
        RefusedCase("DEL", "name=va\u{7F}lue"),
        RefusedCase("a CTL in an attribute refuses the whole field", "name=value; Path=/\u{7}"),
        RefusedCase("a NUL after Secure refuses the whole field", "name=value; Secure\0; HttpOnly"),
        RefusedCase("a Domain that keeps a dot after stripping one", "a=b; Domain=..example.com"),
    ]

    @Test("name and value", arguments: nameValueCases)
    func readsNameAndValue(_ row: CookieCase) {
        #expect(SetCookieParser.parse(row.field) == row.expected)
    }

    @Test("fields ignored whole", arguments: refusedCases)
    func refusesField(_ row: RefusedCase) {
        #expect(SetCookieParser.parse(row.field) == nil)
    }

    // MARK: Expires and Max-Age (§5.6.1, §5.6.2)

    static let expiresCases: [CookieCase] = [
        CookieCase("Expires in RFC 850 form", "a=b; Expires=Sunday, 06-Nov-94 08:49:37 GMT", SetCookie(name: "a", value: "b", expires: Date(timeIntervalSince1970: 784111777))),
        CookieCase("Expires in asctime form", "a=b; Expires=Sun Nov  6 08:49:37 1994", SetCookie(name: "a", value: "b", expires: Date(timeIntervalSince1970: 784111777))),
        CookieCase("expires in lowercase", "a=b; expires=Sun, 06 Nov 1994 08:49:37 GMT", SetCookie(name: "a", value: "b", expires: Date(timeIntervalSince1970: 784111777))),
        CookieCase(
            "EXPIRES in capitals, spaces around '='", "a=b; EXPIRES = Sun, 06 Nov 1994 08:49:37 GMT ",
            SetCookie(name: "a", value: "b", expires: Date(timeIntervalSince1970: 784111777))
        ),
        CookieCase("an unreadable Expires is ignored", "a=b; Expires=tomorrow", SetCookie(name: "a", value: "b")),
        CookieCase("an empty Expires is ignored", "a=b; Expires=", SetCookie(name: "a", value: "b")),
        CookieCase(
            "the last Expires wins", "a=b; Expires=Sun, 06 Nov 1994 08:49:37 GMT; Expires=Thu, 01 Jan 1970 00:00:00 GMT",
            SetCookie(name: "a", value: "b", expires: Date(timeIntervalSince1970: 0))
        ),
        CookieCase(
            "an unreadable Expires leaves the earlier one", "a=b; Expires=Sun, 06 Nov 1994 08:49:37 GMT; Expires=soon",
            SetCookie(name: "a", value: "b", expires: Date(timeIntervalSince1970: 784111777))
        ),
        CookieCase(
            "a far Expires is kept as written (the jar caps it)", "a=b; Expires=Fri, 31 Dec 9999 23:59:59 GMT",
            SetCookie(name: "a", value: "b", expires: Date(timeIntervalSince1970: 253402300799))
        ),
    ]

    /// 34560000 seconds is 400 days (400 × 86400), §5.6.2's cookie-age-limit.
    static let maxAgeCases: [CookieCase] = [
        CookieCase("Max-Age=0", "a=b; Max-Age=0", SetCookie(name: "a", value: "b", maxAge: 0)),
        CookieCase("Max-Age=-1", "a=b; Max-Age=-1", SetCookie(name: "a", value: "b", maxAge: -1)),
        CookieCase("Max-Age=60", "a=b; Max-Age=60", SetCookie(name: "a", value: "b", maxAge: 60)),
        CookieCase("Max-Age with leading zeros", "a=b; Max-Age=0060", SetCookie(name: "a", value: "b", maxAge: 60)),
        CookieCase("max-age in lowercase, spaces around the value", "a=b; max-age= 60 ", SetCookie(name: "a", value: "b", maxAge: 60)),
        CookieCase("Max-Age=+5 is ignored", "a=b; Max-Age=+5", SetCookie(name: "a", value: "b")),
        CookieCase("Max-Age=5x is ignored", "a=b; Max-Age=5x", SetCookie(name: "a", value: "b")),
        CookieCase("Max-Age=1e3 is ignored", "a=b; Max-Age=1e3", SetCookie(name: "a", value: "b")),
        CookieCase("Max-Age=- is ignored", "a=b; Max-Age=-", SetCookie(name: "a", value: "b")),
        CookieCase("Max-Age=- 1 is ignored", "a=b; Max-Age=- 1", SetCookie(name: "a", value: "b")),
        CookieCase("an empty Max-Age is ignored", "a=b; Max-Age=", SetCookie(name: "a", value: "b")),
        CookieCase("Max-Age alone is ignored", "a=b; Max-Age", SetCookie(name: "a", value: "b")),
        CookieCase("Max-Age of 400 days", "a=b; Max-Age=34560000", SetCookie(name: "a", value: "b", maxAge: 34560000)),
        CookieCase("Max-Age over 400 days is lowered to 400 days", "a=b; Max-Age=34560001", SetCookie(name: "a", value: "b", maxAge: 34560000)),
        CookieCase("a Max-Age past 64 bits is 400 days", "a=b; Max-Age=99999999999999999999", SetCookie(name: "a", value: "b", maxAge: 34560000)),
        CookieCase("a large negative Max-Age is kept", "a=b; Max-Age=-34560001", SetCookie(name: "a", value: "b", maxAge: -34560001)),
        CookieCase("a negative Max-Age past 64 bits saturates", "a=b; Max-Age=-99999999999999999999", SetCookie(name: "a", value: "b", maxAge: Int64.min)),
        CookieCase("the last Max-Age wins", "a=b; Max-Age=60; Max-Age=-1", SetCookie(name: "a", value: "b", maxAge: -1)),
        CookieCase("a malformed Max-Age leaves the earlier one", "a=b; Max-Age=60; Max-Age=soon", SetCookie(name: "a", value: "b", maxAge: 60)),
        CookieCase(
            "Max-Age and Expires are both kept", "a=b; Max-Age=60; Expires=Sun, 06 Nov 1994 08:49:37 GMT",
            SetCookie(name: "a", value: "b", expires: Date(timeIntervalSince1970: 784111777), maxAge: 60)
        ),
    ]

    @Test("Expires", arguments: expiresCases)
    func readsExpires(_ row: CookieCase) {
        #expect(SetCookieParser.parse(row.field) == row.expected)
    }

    @Test("Max-Age", arguments: maxAgeCases)
    func readsMaxAge(_ row: CookieCase) {
        #expect(SetCookieParser.parse(row.field) == row.expected)
    }

    // MARK: Domain and Path (§5.6.3, §5.6.4)

    static let domainCases: [CookieCase] = [
        CookieCase("Domain", "a=b; Domain=example.com", SetCookie(name: "a", value: "b", domain: "example.com")),
        CookieCase("Domain's leading dot is stripped", "a=b; Domain=.example.com", SetCookie(name: "a", value: "b", domain: "example.com")),
        CookieCase("Domain is lowercased", "a=b; domain=EXAMPLE.Com", SetCookie(name: "a", value: "b", domain: "example.com")),
        CookieCase("Domain is trimmed", "a=b; Domain= example.com ", SetCookie(name: "a", value: "b", domain: "example.com")),
        CookieCase("Domain keeps non-ASCII letters as written", "a=b; Domain=ÉXAMPLE.com", SetCookie(name: "a", value: "b", domain: "Éxample.com")),
        CookieCase("an empty Domain is ignored", "a=b; Domain=", SetCookie(name: "a", value: "b")),
        CookieCase("an empty Domain leaves the earlier one", "a=b; Domain=example.com; Domain=", SetCookie(name: "a", value: "b", domain: "example.com")),
        CookieCase("the last Domain wins", "a=b; Domain=a.example; Domain=b.example", SetCookie(name: "a", value: "b", domain: "b.example")),
        CookieCase("Domain=. is host-only", "a=b; Domain=.", SetCookie(name: "a", value: "b")),
        CookieCase("Domain=. replaces an earlier Domain", "a=b; Domain=a.example; Domain=.", SetCookie(name: "a", value: "b")),
        CookieCase("a later Domain replaces one with two dots", "a=b; Domain=..a.example; Domain=a.example", SetCookie(name: "a", value: "b", domain: "a.example")),
    ]

    /// A nil path is the default path, which the jar computes from the request URI.
    static let pathCases: [CookieCase] = [
        CookieCase("Path=/", "a=b; Path=/", SetCookie(name: "a", value: "b", path: "/")),
        CookieCase("a longer Path", "a=b; Path=/a/b/", SetCookie(name: "a", value: "b", path: "/a/b/")),
        CookieCase("PATH in capitals, '=' and spaces kept inside", "a=b; PATH= /a b=c ", SetCookie(name: "a", value: "b", path: "/a b=c")),
        CookieCase("an empty Path is the default path", "a=b; Path=", SetCookie(name: "a", value: "b")),
        CookieCase("a Path without a leading '/' is the default path", "a=b; Path=a/b", SetCookie(name: "a", value: "b")),
        CookieCase("a later invalid Path replaces a valid one", "a=b; Path=/a; Path=b", SetCookie(name: "a", value: "b")),
        CookieCase("a later empty Path replaces a valid one", "a=b; Path=/a; Path=", SetCookie(name: "a", value: "b")),
        CookieCase(
            "RFC 2965's example: a quoted Path is the default path", "Customer=\"WILE_E_COYOTE\"; Version=\"1\"; Path=\"/acme\"",
            SetCookie(name: "Customer", value: "\"WILE_E_COYOTE\"", version: 1)
        ),
    ]

    @Test("Domain", arguments: domainCases)
    func readsDomain(_ row: CookieCase) {
        #expect(SetCookieParser.parse(row.field) == row.expected)
    }

    @Test("Path", arguments: pathCases)
    func readsPath(_ row: CookieCase) {
        #expect(SetCookieParser.parse(row.field) == row.expected)
    }

    // MARK: Secure, HttpOnly and SameSite (§5.6.5–§5.6.7)

    static let flagCases: [CookieCase] = [
        CookieCase("secure in lowercase", "a=b; secure", SetCookie(name: "a", value: "b", secure: true)),
        CookieCase("SECURE in capitals, with spaces", "a=b;  SECURE  ", SetCookie(name: "a", value: "b", secure: true)),
        CookieCase("Secure's value means nothing", "a=b; Secure=false", SetCookie(name: "a", value: "b", secure: true)),
        CookieCase("httponly in lowercase", "a=b; httponly", SetCookie(name: "a", value: "b", httpOnly: true)),
        CookieCase("HttpOnly's value means nothing", "a=b; HttpOnly=0", SetCookie(name: "a", value: "b", httpOnly: true)),
        CookieCase("a name that only starts like Secure is unknown", "a=b; Secured; HttpOnlyX", SetCookie(name: "a", value: "b")),
    ]

    static let sameSiteCases: [CookieCase] = [
        CookieCase("SameSite=Strict", "a=b; SameSite=Strict", SetCookie(name: "a", value: "b", sameSite: .strict)),
        CookieCase("SameSite=Lax", "a=b; SameSite=Lax", SetCookie(name: "a", value: "b", sameSite: .lax)),
        CookieCase("SameSite=None", "a=b; SameSite=None; Secure", SetCookie(name: "a", value: "b", secure: true, sameSite: CookieSameSite.none)),
        CookieCase("samesite=strict in lowercase", "a=b; samesite=strict", SetCookie(name: "a", value: "b", sameSite: .strict)),
        CookieCase("SAMESITE=LAX in capitals, with spaces", "a=b; SAMESITE = LAX ", SetCookie(name: "a", value: "b", sameSite: .lax)),
        CookieCase("SameSite=nOnE", "a=b; SameSite=nOnE", SetCookie(name: "a", value: "b", sameSite: CookieSameSite.none)),
        CookieCase("an unknown SameSite is none of them", "a=b; SameSite=Bogus", SetCookie(name: "a", value: "b")),
        CookieCase("SameSite alone is none of them", "a=b; SameSite", SetCookie(name: "a", value: "b")),
        CookieCase("a SameSite list is none of them", "a=b; SameSite=Lax, None", SetCookie(name: "a", value: "b")),
        CookieCase("the last SameSite wins", "a=b; SameSite=Lax; SameSite=Strict", SetCookie(name: "a", value: "b", sameSite: .strict)),
        CookieCase("an unknown SameSite replaces an earlier one", "a=b; SameSite=Strict; SameSite=Bogus", SetCookie(name: "a", value: "b")),
    ]

    @Test("Secure and HttpOnly", arguments: flagCases)
    func readsFlags(_ row: CookieCase) {
        #expect(SetCookieParser.parse(row.field) == row.expected)
    }

    @Test("SameSite", arguments: sameSiteCases)
    func readsSameSite(_ row: CookieCase) {
        #expect(SetCookieParser.parse(row.field) == row.expected)
    }

    // MARK: RFC 2965's attributes, unknown attributes, the 1024-byte limit

    static let rfc2965Cases: [CookieCase] = [
        CookieCase("Comment", "a=b; Comment=hello world", SetCookie(name: "a", value: "b", comment: "hello world")),
        CookieCase("a quoted Comment loses its quotes only", "a=b; Comment=\"a \\\"quoted\\\" comment\"", SetCookie(name: "a", value: "b", comment: "a \\\"quoted\\\" comment")),
        CookieCase("an empty Comment is ignored", "a=b; Comment=x; Comment=", SetCookie(name: "a", value: "b", comment: "x")),
        CookieCase("CommentURL", "a=b; CommentURL=\"http://example.com/privacy\"", SetCookie(name: "a", value: "b", commentURL: "http://example.com/privacy")),
        CookieCase("Version", "a=b; Version=1", SetCookie(name: "a", value: "b", version: 1)),
        CookieCase("a quoted Version", "a=b; version=\"1\"", SetCookie(name: "a", value: "b", version: 1)),
        CookieCase("a Version that is not a number is ignored", "a=b; Version=1; Version=one", SetCookie(name: "a", value: "b", version: 1)),
        CookieCase("a negative Version is ignored", "a=b; Version=-1", SetCookie(name: "a", value: "b")),
        CookieCase("Port alone is the empty list", "a=b; Port", SetCookie(name: "a", value: "b", portList: [])),
        CookieCase("an empty Port is the empty list", "a=b; Port=", SetCookie(name: "a", value: "b", portList: [])),
        CookieCase("an empty quoted Port is the empty list", "a=b; Port=\"\"", SetCookie(name: "a", value: "b", portList: [])),
        CookieCase("one bare port", "a=b; Port=80", SetCookie(name: "a", value: "b", portList: [80])),
        CookieCase("a quoted port list", "a=b; Port=\"80,8080\"", SetCookie(name: "a", value: "b", portList: [80, 8080])),
        CookieCase("spaces around a port list's commas", "a=b; port=\" 80 , 8080 \"", SetCookie(name: "a", value: "b", portList: [80, 8080])),
        CookieCase("port 65535", "a=b; Port=65535", SetCookie(name: "a", value: "b", portList: [65535])),
        CookieCase("port 65536 is ignored", "a=b; Port=65536", SetCookie(name: "a", value: "b")),
        CookieCase("a port that is not a number is ignored", "a=b; Port=80x", SetCookie(name: "a", value: "b")),
        CookieCase("an empty element in a port list is ignored", "a=b; Port=\"80,,81\"", SetCookie(name: "a", value: "b")),
        CookieCase("a trailing comma in a port list is ignored", "a=b; Port=\"80,\"", SetCookie(name: "a", value: "b")),
        CookieCase("an unterminated quoted port list is ignored", "a=b; Port=\"80", SetCookie(name: "a", value: "b")),
        CookieCase("the last Port wins", "a=b; Port=80; Port", SetCookie(name: "a", value: "b", portList: [])),
        CookieCase("Discard", "a=b; Discard", SetCookie(name: "a", value: "b", discard: true)),
        CookieCase("discard in lowercase", "a=b; discard", SetCookie(name: "a", value: "b", discard: true)),
    ]

    static let unknownAttributeCases: [CookieCase] = [
        CookieCase("unknown attributes are ignored", "a=b; Priority=High; Partitioned; Foo=bar", SetCookie(name: "a", value: "b")),
        CookieCase("empty attributes are skipped", "a=b;;; ;Secure;", SetCookie(name: "a", value: "b", secure: true)),
        CookieCase("an attribute with an empty name is ignored", "a=b; =Secure", SetCookie(name: "a", value: "b")),
        CookieCase("an attribute name with a space inside is unknown", "a=b; Http Only; Max Age=5", SetCookie(name: "a", value: "b")),
        CookieCase("names match in ASCII case only: a long s is not an s", "a=b; ſecure; SameSite=ſtrict", SetCookie(name: "a", value: "b")),
    ]

    static let attributeLimitCases: [CookieCase] = [
        CookieCase("a Path of 1024 bytes", "a=b; Path=/" + String(repeating: "p", count: 1023), SetCookie(name: "a", value: "b", path: "/" + String(repeating: "p", count: 1023))),
        CookieCase("a Path of 1025 bytes is ignored", "a=b; Path=/" + String(repeating: "p", count: 1024), SetCookie(name: "a", value: "b")),
        CookieCase("a Path of 1025 bytes leaves the earlier one", "a=b; Path=/x; Path=/" + String(repeating: "p", count: 1024), SetCookie(name: "a", value: "b", path: "/x")),
        CookieCase(
            "a Comment of 1024 bytes once trimmed", "a=b; Comment=  " + String(repeating: "c", count: 1024) + "  ",
            SetCookie(name: "a", value: "b", comment: String(repeating: "c", count: 1024))
        ),
        CookieCase("an Expires over 1024 bytes is ignored", "a=b; Expires=Sun, 06 Nov 1994 08:49:37 GMT " + String(repeating: "x", count: 1000), SetCookie(name: "a", value: "b")),
        CookieCase("Secure with a value over 1024 bytes is ignored", "a=b; Secure=" + String(repeating: "x", count: 1025), SetCookie(name: "a", value: "b")),
    ]

    /// Fields as servers send them (Google, GitHub, a cookie prefix, an RFC 2965 server).
    static let serverCases: [CookieCase] = [
        CookieCase(
            "Google-like", "NID=511=abc-DEF_123; expires=Fri, 22-Nov-2024 10:00:00 GMT; path=/; domain=.google.com; HttpOnly",
            SetCookie(name: "NID", value: "511=abc-DEF_123", expires: Date(timeIntervalSince1970: 1732269600), domain: "google.com", path: "/", httpOnly: true)
        ),
        CookieCase(
            "GitHub-like", "_gh_sess=abc%2Fdef%3D%3D; path=/; secure; HttpOnly; SameSite=Lax",
            SetCookie(name: "_gh_sess", value: "abc%2Fdef%3D%3D", path: "/", secure: true, httpOnly: true, sameSite: .lax)
        ),
        CookieCase(
            "a __Host- cookie is parsed like any other", "__Host-id=1; Secure; Path=/; SameSite=Strict",
            SetCookie(name: "__Host-id", value: "1", path: "/", secure: true, sameSite: .strict)
        ),
        CookieCase(
            "RFC 2965-style", "sid=\"x\"; Version=\"1\"; Port=\"80,443\"; Discard; Comment=\"session\"; CommentURL=\"http://example.com/c\"; Max-Age=3600",
            SetCookie(name: "sid", value: "\"x\"", maxAge: 3600, comment: "session", commentURL: "http://example.com/c", version: 1, portList: [80, 443], discard: true)
        ),
    ]

    @Test("Comment, CommentURL, Version, Port, Discard", arguments: rfc2965Cases)
    func readsRFC2965Attributes(_ row: CookieCase) {
        #expect(SetCookieParser.parse(row.field) == row.expected)
    }

    @Test("unknown and empty attributes", arguments: unknownAttributeCases)
    func ignoresUnknownAttributes(_ row: CookieCase) {
        #expect(SetCookieParser.parse(row.field) == row.expected)
    }

    @Test("attribute values over 1024 bytes", arguments: attributeLimitCases)
    func appliesAttributeLimit(_ row: CookieCase) {
        #expect(SetCookieParser.parse(row.field) == row.expected)
    }

    @Test("fields servers send", arguments: serverCases)
    func readsServerFields(_ row: CookieCase) {
        #expect(SetCookieParser.parse(row.field) == row.expected)
    }

    // MARK: Properties of every case

    static let allCookieCases: [CookieCase] = nameValueCases + expiresCases + maxAgeCases + domainCases + pathCases + flagCases
        + sameSiteCases + rfc2965Cases + unknownAttributeCases + attributeLimitCases + serverCases

    /// An unknown attribute after the others changes nothing, whatever the field ends with. A
    /// field without a ";" gains one, and its name-value-pair still ends where it ended.
    @Test("an unknown attribute appended changes nothing", arguments: allCookieCases)
    func appendedUnknownAttribute(_ row: CookieCase) {
        #expect(SetCookieParser.parse(row.field + "; Unknown=1") == row.expected)
        #expect(SetCookieParser.parse(row.field + ";") == row.expected)
    }

    @Test("the limits are RFC 6265bis's")
    func limits() {
        #expect(SetCookieParser.maximumNameValueBytes == 4096)
        #expect(SetCookieParser.maximumAttributeValueBytes == 1024)
        #expect(SetCookieParser.maximumAgeSeconds == 400 * 86_400)
    }
}
