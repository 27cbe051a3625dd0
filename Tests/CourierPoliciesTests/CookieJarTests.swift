@testable import CourierPolicies
import Foundation
import Testing

/// `CookieJar` against RFC 6265bis (draft-ietf-httpbis-rfc6265bis-22): the storage model (§5.7),
/// the retrieval algorithm (§5.8.3) and the rules they use (§5.1.3 domain matching, §5.1.4 paths,
/// §5.6.1–§5.6.2 expiry, §5.2 same-site), with the system's public suffix list through libpsl.
///
/// The expected values come from the RFC's steps applied by hand, not from running the jar. The
/// public-suffix facts they rely on (checked against libpsl and Debian's list): "com", "org",
/// "co.uk", "github.io" (a private suffix), and by the list's implicit "*" rule "test" and
/// "localhost", are public suffixes; "example.com", "example.co.uk", "user.github.io" and
/// "192.168.1.2" are not.
///
/// The fields go through `SetCookieParser` (tested on its own in `SetCookieParserTests`), so that
/// every case reads as the header a server sends. Every clock is fixed: `t0` is
/// 2027-01-15T08:00:00Z and the other instants are seconds after it.
@Suite("CookieJar")
struct CookieJarTests {
    // MARK: Fixtures

    static let suffixes = SystemPublicSuffixes.shared
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    static let day: TimeInterval = 86_400

    static func at(_ seconds: TimeInterval) -> Date { t0.addingTimeInterval(seconds) }

    /// A request a cookie comes from or goes to. A string literal is an HTTP request with no site
    /// for cookies (same-site).
    struct Request: Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
        var url: String
        var isHTTP: Bool
        var site: String?

        init(_ url: String, isHTTP: Bool = true, site: String? = nil) {
            self.url = url
            self.isHTTP = isHTTP
            self.site = site
        }

        init(stringLiteral url: String) {
            self.init(url)
        }

        var context: CookieContext {
            CookieContext(url: URL(string: url)!, isHTTP: isHTTP, siteForCookies: site.map { URL(string: $0)! })
        }

        var description: String {
            var text = url
            if !isHTTP { text += " (non-HTTP)" }
            if let site { text += " for the site of \(site)" }
            return text
        }
    }

    /// What storing one field does.
    enum Outcome: Sendable, Equatable, CustomStringConvertible {
        case stored(domain: String, hostOnly: Bool, path: String)
        case refused(CookieRejection)
        /// Accepted, but already expired: nothing is stored.
        case nothingStored

        static func hostOnly(_ domain: String, path: String = "/") -> Outcome {
            .stored(domain: domain, hostOnly: true, path: path)
        }

        static func domain(_ domain: String, path: String = "/") -> Outcome {
            .stored(domain: domain, hostOnly: false, path: path)
        }

        init(_ result: Result<CookieJar.Change, CookieRejection>) {
            switch result {
            case .success(let change):
                if let cookie = change.stored.first {
                    self = .stored(domain: cookie.domain, hostOnly: cookie.hostOnly, path: cookie.path)
                } else {
                    self = .nothingStored
                }
            case .failure(let rejection):
                self = .refused(rejection)
            }
        }

        var description: String {
            switch self {
            case .stored(let domain, let hostOnly, let path):
                return "stored for \(domain)\(hostOnly ? " (host-only)" : "") at \(path)"
            case .refused(let rejection):
                return "refused: \(rejection)"
            case .nothingStored:
                return "nothing stored"
            }
        }
    }

    /// One field from one request, and what the storage model makes of it.
    struct StoreCase: Sendable, CustomStringConvertible {
        var name: String
        var request: Request
        var field: String
        var expected: Outcome

        init(_ name: String, _ request: Request, _ field: String, _ expected: Outcome) {
            self.name = name
            self.request = request
            self.field = field
            self.expected = expected
        }

        var description: String { name }
    }

    /// One cookie already stored, a second field, and what the storage model makes of the second.
    struct SecondCookieCase: Sendable, CustomStringConvertible {
        var name: String
        var first: Request
        var firstField: String
        var second: Request
        var secondField: String
        var expected: Outcome

        init(_ name: String, _ first: Request, _ firstField: String, then second: Request, _ secondField: String, _ expected: Outcome) {
            self.name = name
            self.first = first
            self.firstField = firstField
            self.second = second
            self.secondField = secondField
            self.expected = expected
        }

        var description: String { name }
    }

    /// One cookie, the requests it goes with and the requests it does not.
    struct MatchCase: Sendable, CustomStringConvertible {
        var name: String
        var request: Request
        var field: String
        var sentTo: [Request]
        var notSentTo: [Request]

        init(_ name: String, from request: Request, _ field: String, sentTo: [Request], notSentTo: [Request] = []) {
            self.name = name
            self.request = request
            self.field = field
            self.sentTo = sentTo
            self.notSentTo = notSentTo
        }

        var description: String { name }
    }

    static func parse(_ field: String) throws -> SetCookie {
        try #require(SetCookieParser.parse(field), "the test's field does not parse: \(field)")
    }

    static func store(_ jar: inout CookieJar, _ setCookie: SetCookie, from request: Request, at time: Date) -> Result<CookieJar.Change, CookieRejection> {
        do throws(CookieRejection) {
            return .success(try jar.store(setCookie, context: request.context, now: time, suffixes: suffixes))
        } catch {
            return .failure(error)
        }
    }

    static func store(_ jar: inout CookieJar, _ field: String, from request: Request, at time: Date = t0) throws -> Result<CookieJar.Change, CookieRejection> {
        let setCookie = try parse(field)
        return store(&jar, setCookie, from: request, at: time)
    }

    /// Stores a field that the test needs stored; a refusal fails the test.
    @discardableResult
    static func mustStore(_ jar: inout CookieJar, _ field: String, from request: Request, at time: Date = t0) throws -> CookieJar.Change {
        switch try store(&jar, field, from: request, at: time) {
        case .success(let change):
            return change
        case .failure(let rejection):
            Issue.record("\(field) from \(request) was refused: \(rejection)")
            throw rejection
        }
    }

    /// The names of the cookies for a request, in order, without touching them.
    static func names(_ jar: CookieJar, for request: Request, at time: Date = t0.addingTimeInterval(1)) -> [String] {
        jar.matchingCookies(for: request.context, now: time, suffixes: suffixes).map(\.name)
    }

    /// The `Cookie` field for a request, without touching the cookies.
    static func header(_ jar: CookieJar, for request: Request, at time: Date = t0.addingTimeInterval(1)) -> String? {
        CookieJar.cookieHeader(jar.matchingCookies(for: request.context, now: time, suffixes: suffixes))
    }

    static func check(_ row: StoreCase) throws {
        var jar = CookieJar()
        let outcome = Outcome(try store(&jar, row.field, from: row.request))
        #expect(outcome == row.expected, "\(row.field) from \(row.request)")
        if case .refused = outcome {
            #expect(jar.isEmpty)
        }
    }

    static func check(_ row: SecondCookieCase) throws {
        var jar = CookieJar()
        try mustStore(&jar, row.firstField, from: row.first)
        let outcome = Outcome(try store(&jar, row.secondField, from: row.second, at: at(10)))
        #expect(outcome == row.expected, "\(row.secondField) from \(row.second)")
        if case .refused = outcome {
            // A refused cookie changes nothing: the first one is still there, as it was.
            #expect(jar.count == 1)
            #expect(jar.cookies.first?.creation == t0)
            #expect(jar.cookies.first?.lastAccess == t0)
        }
    }

    static func check(_ row: MatchCase) throws {
        var jar = CookieJar()
        let change = try mustStore(&jar, row.field, from: row.request)
        let cookie = try #require(change.stored.first)
        for request in row.sentTo {
            #expect(names(jar, for: request) == [cookie.name], "to \(request)")
        }
        for request in row.notSentTo {
            #expect(names(jar, for: request) == [], "to \(request)")
        }
    }

    // MARK: Domain (§5.1.3, §5.7 steps 7–10, §5.8.3)

    static let domainCases: [StoreCase] = [
        StoreCase("no Domain: host-only", "http://www.example.com/", "a=b", .hostOnly("www.example.com")),
        StoreCase("Domain of the parent domain", "http://www.example.com/", "a=b; Domain=example.com", .domain("example.com")),
        StoreCase("Domain with a leading dot", "http://www.example.com/", "a=b; Domain=.example.com", .domain("example.com")),
        StoreCase("Domain two labels up", "http://a.b.example.com/", "a=b; Domain=example.com", .domain("example.com")),
        StoreCase("Domain equal to the host is a domain cookie", "http://www.example.com/", "a=b; Domain=www.example.com", .domain("www.example.com")),
        StoreCase("the host is lowercased", "http://WWW.Example.COM/", "a=b", .hostOnly("www.example.com")),
        StoreCase("the host and the Domain in capitals", "http://WWW.EXAMPLE.COM/", "a=b; Domain=Example.Com", .domain("example.com")),
        StoreCase("Domain of another site", "http://www.example.com/", "a=b; Domain=example.org", .refused(.domainMismatch("example.org"))),
        StoreCase("Domain of a subdomain of the host", "http://example.com/", "a=b; Domain=www.example.com", .refused(.domainMismatch("www.example.com"))),
        StoreCase("Domain a suffix of the host, but not at a dot", "http://notexample.com/", "a=b; Domain=example.com", .refused(.domainMismatch("example.com"))),
        StoreCase("Domain=com", "http://www.example.com/", "a=b; Domain=com", .refused(.publicSuffix("com"))),
        StoreCase("Domain=co.uk", "http://www.example.co.uk/", "a=b; Domain=co.uk", .refused(.publicSuffix("co.uk"))),
        StoreCase("Domain=github.io, a private suffix", "http://user.github.io/", "a=b; Domain=github.io", .refused(.publicSuffix("github.io"))),
        StoreCase("Domain=test, a suffix by the * rule", "http://example.test/", "a=b; Domain=test", .refused(.publicSuffix("test"))),
        StoreCase("Domain=example.co.uk", "http://www.example.co.uk/", "a=b; Domain=example.co.uk", .domain("example.co.uk")),
        StoreCase("Domain=user.github.io", "http://www.user.github.io/", "a=b; Domain=user.github.io", .domain("user.github.io")),
        StoreCase("Domain=example.test", "http://www.example.test/", "a=b; Domain=example.test", .domain("example.test")),
        StoreCase("Domain=co.uk from co.uk itself is host-only", "http://co.uk/", "a=b; Domain=co.uk", .hostOnly("co.uk")),
        StoreCase("Domain=CO.UK from CO.UK itself is host-only", "http://CO.UK/", "a=b; Domain=CO.UK", .hostOnly("co.uk")),
        StoreCase("Domain=github.io from github.io itself is host-only", "https://github.io/", "a=b; Domain=github.io", .hostOnly("github.io")),
        StoreCase("Domain=localhost from localhost is host-only", "http://localhost:8080/", "a=b; Domain=localhost", .hostOnly("localhost")),
        StoreCase("an IPv4 host", "http://192.168.1.2/", "a=b", .hostOnly("192.168.1.2")),
        StoreCase("Domain equal to an IPv4 host", "http://192.168.1.2/", "a=b; Domain=192.168.1.2", .domain("192.168.1.2")),
        StoreCase("Domain of an IPv4 host's last labels", "http://192.168.1.2/", "a=b; Domain=168.1.2", .refused(.domainMismatch("168.1.2"))),
        StoreCase("an IPv6 host is stored without its brackets", "http://[2001:db8::1]:8080/", "a=b", .hostOnly("2001:db8::1")),
        StoreCase("a URL without a host", "file:///tmp/cookie", "a=b", .refused(.noHost)),
    ]

    @Test("the Domain attribute decides the domain and the host-only flag", arguments: domainCases)
    func domainAttribute(_ row: StoreCase) throws {
        try Self.check(row)
    }

    static let domainMatchCases: [MatchCase] = [
        MatchCase(
            "a domain cookie goes to its domain and every subdomain", from: "http://www.example.com/", "a=b; Domain=example.com",
            sentTo: ["http://example.com/", "http://www.example.com/", "http://a.example.com/", "http://a.b.example.com/x", "http://A.EXAMPLE.COM/", "https://example.com:8443/"],
            notSentTo: ["http://notexample.com/", "http://example.org/", "http://com/", "http://example.com.evil.org/"]
        ),
        MatchCase(
            "a host-only cookie goes to its host alone", from: "http://www.example.com/", "a=b",
            sentTo: ["http://www.example.com/", "http://WWW.EXAMPLE.COM/", "http://www.example.com:8080/", "https://www.example.com/"],
            notSentTo: ["http://example.com/", "http://a.www.example.com/", "http://www.example.org/"]
        ),
        MatchCase(
            "a host-only cookie of a parent domain does not go to its subdomains", from: "http://example.com/", "a=b",
            sentTo: ["http://example.com/"], notSentTo: ["http://www.example.com/"]
        ),
        MatchCase(
            "Domain equal to the host covers the host's subdomains", from: "http://www.example.com/", "a=b; Domain=www.example.com",
            sentTo: ["http://www.example.com/", "http://a.www.example.com/"], notSentTo: ["http://example.com/"]
        ),
        MatchCase(
            "a cookie set in capitals matches in lowercase", from: "http://WWW.EXAMPLE.COM/", "a=b; Domain=EXAMPLE.COM",
            sentTo: ["http://a.example.com/"]
        ),
        MatchCase(
            "a public-suffix host's cookie stays on that host", from: "http://co.uk/", "a=b; Domain=co.uk",
            sentTo: ["http://co.uk/"], notSentTo: ["http://example.co.uk/"]
        ),
        MatchCase(
            "github.io's cookie stays on github.io", from: "https://github.io/", "a=b; Domain=github.io",
            sentTo: ["https://github.io/"], notSentTo: ["https://user.github.io/"]
        ),
        MatchCase(
            "a domain under a private suffix", from: "http://www.user.github.io/", "a=b; Domain=user.github.io",
            sentTo: ["http://user.github.io/", "http://x.user.github.io/"], notSentTo: ["http://other.github.io/", "http://github.io/"]
        ),
        MatchCase(
            "an IPv4 host's cookie goes to that address alone", from: "http://192.168.1.2/", "a=b",
            sentTo: ["http://192.168.1.2:8080/x"], notSentTo: ["http://192.168.1.20/", "http://192.168.1.3/"]
        ),
        MatchCase(
            "an IPv4 Domain matches that address alone", from: "http://192.168.1.2/", "a=b; Domain=192.168.1.2",
            sentTo: ["http://192.168.1.2/"], notSentTo: ["http://192.168.1.20/", "http://92.168.1.2/"]
        ),
        MatchCase(
            "an IPv6 host in brackets", from: "http://[::1]:8080/", "a=b",
            sentTo: ["http://[::1]/", "http://[::1]:9090/x"], notSentTo: ["http://127.0.0.1/", "http://localhost/"]
        ),
        MatchCase(
            "an IPv6 host written in capitals", from: "http://[2001:DB8::1]/", "a=b",
            sentTo: ["http://[2001:db8::1]:8443/"], notSentTo: ["http://[2001:db8::2]/"]
        ),
        MatchCase(
            "localhost's cookie does not go to its subdomains", from: "http://localhost:8080/", "a=b; Domain=localhost",
            sentTo: ["http://localhost/"], notSentTo: ["http://a.localhost/"]
        ),
    ]

    @Test("which hosts a cookie goes to", arguments: domainMatchCases)
    func domainMatching(_ row: MatchCase) throws {
        try Self.check(row)
    }

    @Test("domain-match (§5.1.3)")
    func domainMatchesFunction() {
        #expect(CookieJar.domainMatches("example.com", "example.com"))
        #expect(CookieJar.domainMatches("www.example.com", "example.com"))
        #expect(CookieJar.domainMatches("a.b.example.com", "example.com"))
        #expect(!CookieJar.domainMatches("example.com", "www.example.com"))
        #expect(!CookieJar.domainMatches("notexample.com", "example.com"))
        #expect(!CookieJar.domainMatches("example.com", ".example.com"))
        #expect(CookieJar.domainMatches("192.168.1.2", "192.168.1.2"))
        #expect(!CookieJar.domainMatches("192.168.1.2", "168.1.2"))
        #expect(!CookieJar.domainMatches("192.168.1.2", "1.2"))
        #expect(CookieJar.domainMatches("::1", "::1"))
    }

    // MARK: Paths (§5.1.4)

    static let defaultPathCases: [StoreCase] = [
        StoreCase("no path", "http://example.com", "a=b", .hostOnly("example.com", path: "/")),
        StoreCase("/", "http://example.com/", "a=b", .hostOnly("example.com", path: "/")),
        StoreCase("/a", "http://example.com/a", "a=b", .hostOnly("example.com", path: "/")),
        StoreCase("/a/b", "http://example.com/a/b", "a=b", .hostOnly("example.com", path: "/a")),
        StoreCase("/a/b/", "http://example.com/a/b/", "a=b", .hostOnly("example.com", path: "/a/b")),
        StoreCase("/a/b/c", "http://example.com/a/b/c", "a=b", .hostOnly("example.com", path: "/a/b")),
        StoreCase("the query and the fragment are not the path", "http://example.com/a/b?c=/d/e#/f/g", "a=b", .hostOnly("example.com", path: "/a")),
        StoreCase("a query and no path", "http://example.com?c=/d/e", "a=b", .hostOnly("example.com", path: "/")),
        StoreCase("an empty segment", "http://example.com/a//b", "a=b", .hostOnly("example.com", path: "/a/")),
        StoreCase("percent-encoding is kept", "http://example.com/a%2Fb/c", "a=b", .hostOnly("example.com", path: "/a%2Fb")),
        StoreCase("a Path attribute replaces the default path", "http://example.com/a/b", "a=b; Path=/x/y", .hostOnly("example.com", path: "/x/y")),
        StoreCase("Path=/ from a deep URL", "http://example.com/a/b/c", "a=b; Path=/", .hostOnly("example.com", path: "/")),
        StoreCase("a Path need not cover the request's path", "http://example.com/a/b", "a=b; Path=/other", .hostOnly("example.com", path: "/other")),
        StoreCase("a Path not starting with / is the default path", "http://example.com/a/b", "a=b; Path=x/y", .hostOnly("example.com", path: "/a")),
    ]

    @Test("the default path (§5.1.4) and the Path attribute (§5.7 step 11)", arguments: defaultPathCases)
    func defaultPath(_ row: StoreCase) throws {
        try Self.check(row)
    }

    struct PathMatchCase: Sendable, CustomStringConvertible {
        var requestPath: String
        var cookiePath: String
        var matches: Bool

        init(_ requestPath: String, _ cookiePath: String, _ matches: Bool) {
            self.requestPath = requestPath
            self.cookiePath = cookiePath
            self.matches = matches
        }

        var description: String { "\(requestPath) against \(cookiePath)" }
    }

    static let pathMatchCases: [PathMatchCase] = [
        PathMatchCase("/", "/", true),
        PathMatchCase("/a", "/", true),
        PathMatchCase("/a/b/c", "/", true),
        PathMatchCase("/a", "/a", true),
        PathMatchCase("/a/", "/a", true),
        PathMatchCase("/a/b", "/a", true),
        PathMatchCase("/ab", "/a", false),
        PathMatchCase("/", "/a", false),
        PathMatchCase("/a/b", "/a/", true),
        PathMatchCase("/a/", "/a/", true),
        PathMatchCase("/a", "/a/", false),
        PathMatchCase("/A", "/a", false),
        PathMatchCase("/a/b/c", "/a/b", true),
        PathMatchCase("/a/bc", "/a/b", false),
        PathMatchCase("/a/b", "/a/b/c", false),
        PathMatchCase("/a%20b/c", "/a%20b", true),
    ]

    @Test("path-match (§5.1.4)", arguments: pathMatchCases)
    func pathMatch(_ row: PathMatchCase) throws {
        #expect(CookieJar.pathMatches(row.requestPath, row.cookiePath) == row.matches)
        var jar = CookieJar()
        try Self.mustStore(&jar, "a=b; Path=\(row.cookiePath)", from: "http://example.com/")
        #expect(Self.names(jar, for: Request("http://example.com\(row.requestPath)")) == (row.matches ? ["a"] : []))
    }

    @Test("the request's path leaves out the query and the fragment, and is / when empty")
    func requestPath() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "root=1; Path=/", from: "http://example.com/")
        try Self.mustStore(&jar, "a=1; Path=/a", from: "http://example.com/")
        #expect(Self.names(jar, for: "http://example.com") == ["root"])
        #expect(Self.names(jar, for: "http://example.com?a") == ["root"])
        #expect(Self.names(jar, for: "http://example.com/?x=/a") == ["root"])
        #expect(Self.names(jar, for: "http://example.com/a?b=/c") == ["a", "root"])
        #expect(Self.names(jar, for: "http://example.com/a#/b") == ["a", "root"])
        #expect(Self.names(jar, for: "http://example.com/b#/a") == ["root"])
    }

    // MARK: Expiry (§5.6.1, §5.6.2, §5.7 step 6)

    @Test("Max-Age sets the expiry from now")
    func maxAge() throws {
        var jar = CookieJar()
        let change = try Self.mustStore(&jar, "a=b; Max-Age=60", from: "http://example.com/")
        #expect(change.stored.first?.expiry == Self.at(60))
        #expect(change.stored.first?.isSessionOnly == false)
        #expect(Self.names(jar, for: "http://example.com/", at: Self.at(59)) == ["a"])
        #expect(Self.names(jar, for: "http://example.com/", at: Self.at(61)) == [])
    }

    /// 1800086400 is 2027-01-16T08:00:00Z, a day after `t0`.
    @Test("Expires sets the expiry")
    func expires() throws {
        var jar = CookieJar()
        let change = try Self.mustStore(&jar, "a=b; Expires=Sat, 16 Jan 2027 08:00:00 GMT", from: "http://example.com/")
        #expect(change.stored.first?.expiry == Self.at(Self.day))
        #expect(Self.names(jar, for: "http://example.com/", at: Self.at(Self.day - 1)) == ["a"])
        #expect(Self.names(jar, for: "http://example.com/", at: Self.at(Self.day + 1)) == [])
    }

    @Test("Max-Age wins over Expires, in either order", arguments: [
        "a=b; Expires=Sun, 06 Nov 1994 08:49:37 GMT; Max-Age=60",
        "a=b; Max-Age=60; Expires=Sun, 06 Nov 1994 08:49:37 GMT",
        "a=b; Max-Age=60; Expires=Sat, 16 Jan 2027 08:00:00 GMT",
    ])
    func maxAgeOverExpires(_ field: String) throws {
        var jar = CookieJar()
        let change = try Self.mustStore(&jar, field, from: "http://example.com/")
        #expect(change.stored.first?.expiry == Self.at(60))
    }

    @Test("Max-Age=0 wins over an Expires in the future: nothing is stored")
    func maxAgeZeroOverExpires() throws {
        var jar = CookieJar()
        let result = try Self.store(&jar, "a=b; Max-Age=0; Expires=Sat, 16 Jan 2027 08:00:00 GMT", from: "http://example.com/")
        #expect(result == .success(CookieJar.Change()))
        #expect(jar.isEmpty)
    }

    @Test("neither Max-Age nor Expires: a session cookie")
    func sessionCookie() throws {
        var jar = CookieJar()
        let cookieChange = try Self.mustStore(&jar, "a=b", from: "http://example.com/")
        let cookie = try #require(cookieChange.stored.first)
        #expect(cookie.expiry == nil)
        #expect(cookie.isSessionOnly)
        #expect(Self.names(jar, for: "http://example.com/", at: Self.at(500 * Self.day)) == ["a"])
    }

    @Test("Max-Age=0 or negative removes the cookie", arguments: ["a=; Max-Age=0", "a=; Max-Age=-1", "a=x; Max-Age=-99999999999"])
    func maxAgeRemoves(_ field: String) throws {
        var jar = CookieJar()
        let firstChange = try Self.mustStore(&jar, "a=1", from: "http://example.com/")
        let first = try #require(firstChange.stored.first)
        let result = try Self.store(&jar, field, from: "http://example.com/", at: Self.at(10))
        #expect(result == .success(CookieJar.Change(removed: [first])))
        #expect(jar.isEmpty)
        #expect(Self.names(jar, for: "http://example.com/", at: Self.at(11)) == [])
    }

    @Test("an Expires in the past removes the cookie: RFC 6265bis's example")
    func expiresInThePastRemoves() throws {
        var jar = CookieJar()
        let firstChange = try Self.mustStore(&jar, "lang=en-US; Expires=Sat, 16 Jan 2027 08:00:00 GMT", from: "http://example.com/")
        let first = try #require(firstChange.stored.first)
        let result = try Self.store(&jar, "lang=; Expires=Sun, 06 Nov 1994 08:49:37 GMT", from: "http://example.com/", at: Self.at(10))
        #expect(result == .success(CookieJar.Change(removed: [first])))
        #expect(jar.isEmpty)
    }

    @Test("a removal removes only the cookie with the same name, domain and path")
    func removalNeedsTheSameKey() throws {
        var jar = CookieJar()
        let firstChange = try Self.mustStore(&jar, "a=1", from: "http://www.example.com/")
        let first = try #require(firstChange.stored.first)
        for field in ["a=; Max-Age=0; Path=/x", "a=; Max-Age=0; Domain=example.com", "b=; Max-Age=0"] {
            let result = try Self.store(&jar, field, from: "http://www.example.com/", at: Self.at(5))
            #expect(result == .success(CookieJar.Change()), "\(field)")
        }
        #expect(jar.count == 1)
        let removal = try Self.store(&jar, "a=; Max-Age=0", from: "http://www.example.com/", at: Self.at(6))
        #expect(removal == .success(CookieJar.Change(removed: [first])))
        #expect(jar.isEmpty)
    }

    @Test("an expiry is capped at 400 days after now")
    func fourHundredDays() {
        let maximum = Self.at(400 * Self.day)
        let cases: [(SetCookie, Date)] = [
            (SetCookie(name: "expires-500-days", value: "x", expires: Self.at(500 * Self.day)), maximum),
            (SetCookie(name: "expires-year-9999", value: "x", expires: Date(timeIntervalSince1970: 253_402_300_799)), maximum),
            (SetCookie(name: "expires-400-days", value: "x", expires: maximum), maximum),
            (SetCookie(name: "expires-399-days", value: "x", expires: Self.at(399 * Self.day)), Self.at(399 * Self.day)),
            (SetCookie(name: "max-age-500-days", value: "x", maxAge: 500 * 86_400), maximum),
            (SetCookie(name: "max-age-int64-max", value: "x", maxAge: Int64.max), maximum),
            (SetCookie(name: "max-age-400-days", value: "x", maxAge: 400 * 86_400), maximum),
            (SetCookie(name: "max-age-399-days", value: "x", maxAge: 399 * 86_400), Self.at(399 * Self.day)),
            (SetCookie(name: "max-age-500-days-over-expires", value: "x", expires: Self.at(10), maxAge: 500 * 86_400), maximum),
        ]
        var jar = CookieJar()
        for (setCookie, expiry) in cases {
            let result = Self.store(&jar, setCookie, from: "http://example.com/", at: Self.t0)
            guard case .success(let change) = result else {
                Issue.record("\(setCookie.name): \(result)")
                continue
            }
            #expect(change.stored.first?.expiry == expiry, "\(setCookie.name)")
        }
    }

    // MARK: Secure (§5.7 steps 12, 13 and 16, §5.8.3)

    static let secureCases: [StoreCase] = [
        StoreCase("Secure from http", "http://example.com/", "a=b; Secure", .refused(.secureFromInsecureOrigin)),
        StoreCase("Secure from https", "https://example.com/", "a=b; Secure", .hostOnly("example.com")),
        StoreCase("Secure from HTTPS in capitals", "HTTPS://EXAMPLE.COM/", "a=b; Secure", .hostOnly("example.com")),
        StoreCase("Secure from http://127.0.0.1", "http://127.0.0.1:8080/", "a=b; Secure", .hostOnly("127.0.0.1")),
        StoreCase("Secure from http://localhost", "http://localhost/", "a=b; Secure", .hostOnly("localhost")),
        StoreCase("Secure from http://[::1]", "http://[::1]:8080/", "a=b; Secure", .hostOnly("::1")),
        StoreCase("Secure from a name that only looks local", "http://localhost.example.com/", "a=b; Secure", .refused(.secureFromInsecureOrigin)),
        StoreCase("Secure from another private address", "http://192.168.1.2/", "a=b; Secure", .refused(.secureFromInsecureOrigin)),
        StoreCase("a cookie without Secure from http", "http://example.com/", "a=b", .hostOnly("example.com")),
    ]

    @Test("Secure cookies come from secure origins only", arguments: secureCases)
    func secureOrigins(_ row: StoreCase) throws {
        try Self.check(row)
    }

    static let secureMatchCases: [MatchCase] = [
        MatchCase(
            "a Secure cookie goes over https only", from: "https://example.com/", "a=b; Secure",
            sentTo: ["https://example.com/", "https://example.com:8443/x"], notSentTo: ["http://example.com/", "http://example.com:443/"]
        ),
        MatchCase(
            "a Secure domain cookie", from: "https://www.example.com/", "a=b; Secure; Domain=example.com",
            sentTo: ["https://a.example.com/"], notSentTo: ["http://a.example.com/"]
        ),
        MatchCase("a Secure cookie goes to http://localhost", from: "http://localhost:8080/", "a=b; Secure", sentTo: ["http://localhost:9090/"]),
        MatchCase("a Secure cookie goes to http://127.0.0.1", from: "http://127.0.0.1/", "a=b; Secure", sentTo: ["http://127.0.0.1:8080/"]),
        MatchCase("a Secure cookie goes to http://[::1]", from: "https://[::1]/", "a=b; Secure", sentTo: ["http://[::1]/"]),
        MatchCase(
            "a cookie without Secure goes over both", from: "https://example.com/", "a=b",
            sentTo: ["https://example.com/", "http://example.com/"]
        ),
    ]

    @Test("Secure cookies go to secure origins only", arguments: secureMatchCases)
    func secureRetrieval(_ row: MatchCase) throws {
        try Self.check(row)
    }

    /// §5.7 step 16: without Secure and from an insecure origin, a cookie is ignored when a Secure
    /// cookie has its name, a domain that domain-matches its domain or the other way round, and a
    /// path its path path-matches.
    static let shadowCases: [SecondCookieCase] = [
        SecondCookieCase(
            "the Secure cookie's Domain covers the new cookie's host", "https://www.example.com/", "a=1; Secure; Domain=example.com",
            then: "http://www.example.com/", "a=2", .refused(.wouldShadowSecureCookie)
        ),
        SecondCookieCase(
            "the new cookie's Domain covers the Secure cookie's host", "https://www.example.com/", "a=1; Secure",
            then: "http://example.com/", "a=2; Domain=example.com", .refused(.wouldShadowSecureCookie)
        ),
        SecondCookieCase(
            "a host-only Secure cookie of the parent domain", "https://example.com/", "a=1; Secure",
            then: "http://www.example.com/", "a=2", .refused(.wouldShadowSecureCookie)
        ),
        SecondCookieCase(
            "the same name, domain and path", "https://example.com/", "a=1; Secure",
            then: "http://example.com/", "a=2", .refused(.wouldShadowSecureCookie)
        ),
        SecondCookieCase(
            "an insecure origin cannot remove a Secure cookie either", "https://example.com/", "a=1; Secure",
            then: "http://example.com/", "a=; Max-Age=0", .refused(.wouldShadowSecureCookie)
        ),
        SecondCookieCase(
            "a path under the Secure cookie's", "https://example.com/", "a=1; Secure; Path=/",
            then: "http://example.com/", "a=2; Path=/x", .refused(.wouldShadowSecureCookie)
        ),
        SecondCookieCase(
            "a path above the Secure cookie's", "https://example.com/", "a=1; Secure; Path=/x",
            then: "http://example.com/", "a=2; Path=/", .hostOnly("example.com")
        ),
        SecondCookieCase(
            "a sibling path", "https://example.com/", "a=1; Secure; Path=/x",
            then: "http://example.com/", "a=2; Path=/xy", .hostOnly("example.com", path: "/xy")
        ),
        SecondCookieCase(
            "another name", "https://example.com/", "a=1; Secure",
            then: "http://example.com/", "b=2", .hostOnly("example.com")
        ),
        SecondCookieCase(
            "a sibling host", "https://a.example.com/", "a=1; Secure",
            then: "http://b.example.com/", "a=2", .hostOnly("b.example.com")
        ),
        SecondCookieCase(
            "from https a cookie without Secure may replace a Secure one", "https://example.com/", "a=1; Secure",
            then: "https://example.com/", "a=2", .hostOnly("example.com")
        ),
        SecondCookieCase(
            "from a loopback origin too", "http://localhost/", "a=1; Secure",
            then: "http://localhost:8080/", "a=2", .hostOnly("localhost")
        ),
        SecondCookieCase(
            "a Secure cookie over one that is not", "http://example.com/", "a=1",
            then: "https://example.com/", "a=2; Secure", .hostOnly("example.com")
        ),
    ]

    @Test("an insecure origin cannot shadow a Secure cookie", arguments: shadowCases)
    func secureShadowing(_ row: SecondCookieCase) throws {
        try Self.check(row)
    }

    /// §5.7: "The user agent MUST evict all expired cookies from the cookie store if, at any time,
    /// an expired cookie exists in the cookie store." An expired Secure cookie is gone, so it
    /// shadows nothing.
    @Test("an expired Secure cookie no longer blocks an insecure cookie of its name")
    func expiredSecureCookieDoesNotShadow() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "a=1; Secure; Max-Age=10", from: "https://example.com/", at: Self.t0)
        let outcome = Outcome(try Self.store(&jar, "a=2", from: "http://example.com/", at: Self.at(20)))
        #expect(outcome == .hostOnly("example.com"))
        #expect(Self.header(jar, for: "http://example.com/", at: Self.at(21)) == "a=2")
    }

    // MARK: HttpOnly (§5.7 steps 14, 15 and 23, §5.8.3)

    static let httpOnlyCases: [StoreCase] = [
        StoreCase("HttpOnly from a non-HTTP API", Request("http://example.com/", isHTTP: false), "a=b; HttpOnly", .refused(.httpOnlyFromNonHTTP)),
        StoreCase("HttpOnly from HTTP", "http://example.com/", "a=b; HttpOnly", .hostOnly("example.com")),
        StoreCase("a non-HTTP API sets a cookie without HttpOnly", Request("http://example.com/", isHTTP: false), "a=b", .hostOnly("example.com")),
    ]

    @Test("HttpOnly cookies come from HTTP only", arguments: httpOnlyCases)
    func httpOnlyOrigins(_ row: StoreCase) throws {
        try Self.check(row)
    }

    static let httpOnlyMatchCases: [MatchCase] = [
        MatchCase(
            "an HttpOnly cookie is not read through a non-HTTP API", from: "http://example.com/", "a=b; HttpOnly",
            sentTo: ["http://example.com/"], notSentTo: [Request("http://example.com/", isHTTP: false)]
        ),
        MatchCase(
            "a cookie without HttpOnly is", from: "http://example.com/", "a=b",
            sentTo: ["http://example.com/", Request("http://example.com/", isHTTP: false)]
        ),
    ]

    @Test("HttpOnly cookies go to HTTP only", arguments: httpOnlyMatchCases)
    func httpOnlyRetrieval(_ row: MatchCase) throws {
        try Self.check(row)
    }

    static let httpOnlyReplacementCases: [SecondCookieCase] = [
        SecondCookieCase(
            "a non-HTTP API cannot replace an HttpOnly cookie", "http://example.com/", "a=1; HttpOnly",
            then: Request("http://example.com/", isHTTP: false), "a=2", .refused(.wouldReplaceHttpOnlyCookie)
        ),
        SecondCookieCase(
            "nor remove it", "http://example.com/", "a=1; HttpOnly",
            then: Request("http://example.com/", isHTTP: false), "a=; Max-Age=0", .refused(.wouldReplaceHttpOnlyCookie)
        ),
        SecondCookieCase(
            "it can set the same name on another path", "http://example.com/", "a=1; HttpOnly",
            then: Request("http://example.com/", isHTTP: false), "a=2; Path=/x", .hostOnly("example.com", path: "/x")
        ),
        SecondCookieCase(
            "it can replace a cookie without HttpOnly", "http://example.com/", "a=1",
            then: Request("http://example.com/", isHTTP: false), "a=2", .hostOnly("example.com")
        ),
        SecondCookieCase(
            "HTTP can replace an HttpOnly cookie with one without", "http://example.com/", "a=1; HttpOnly",
            then: "http://example.com/", "a=2", .hostOnly("example.com")
        ),
    ]

    @Test("a non-HTTP API cannot replace an HttpOnly cookie", arguments: httpOnlyReplacementCases)
    func httpOnlyReplacement(_ row: SecondCookieCase) throws {
        try Self.check(row)
    }

    /// An expired HttpOnly cookie is evicted (§5.7), so there is no old-cookie for step 23.
    @Test("an expired HttpOnly cookie no longer blocks a non-HTTP API")
    func expiredHttpOnlyCookieDoesNotBlock() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "a=1; HttpOnly; Max-Age=10", from: "http://example.com/", at: Self.t0)
        let outcome = Outcome(try Self.store(&jar, "a=2", from: Request("http://example.com/", isHTTP: false), at: Self.at(20)))
        #expect(outcome == .hostOnly("example.com"))
    }

    // MARK: Prefixes (§5.7 steps 20–22)

    static let prefixCases: [StoreCase] = [
        StoreCase("__Secure- without Secure", "https://example.com/", "__Secure-a=1", .refused(.prefixRequirements("__Secure-a"))),
        StoreCase("__Secure- with Secure", "https://example.com/", "__Secure-a=1; Secure", .hostOnly("example.com")),
        StoreCase(
            "__Secure- may have a Domain and a Path", "https://www.example.com/", "__Secure-a=1; Secure; Domain=example.com; Path=/x",
            .domain("example.com", path: "/x")
        ),
        StoreCase("__SECURE- in capitals", "https://example.com/", "__SECURE-a=1", .refused(.prefixRequirements("__SECURE-a"))),
        StoreCase("__secure- in lowercase", "https://example.com/", "__secure-a=1", .refused(.prefixRequirements("__secure-a"))),
        StoreCase("__Host- with Secure and Path=/", "https://example.com/", "__Host-a=1; Secure; Path=/", .hostOnly("example.com")),
        StoreCase("__Host- without Secure", "https://example.com/", "__Host-a=1; Path=/", .refused(.prefixRequirements("__Host-a"))),
        StoreCase("__Host- with a Domain", "https://example.com/", "__Host-a=1; Secure; Path=/; Domain=example.com", .refused(.prefixRequirements("__Host-a"))),
        StoreCase(
            "__HOST- with a Domain equal to the host", "https://www.example.com/", "__HOST-a=1; Secure; Path=/; Domain=www.example.com",
            .refused(.prefixRequirements("__HOST-a"))
        ),
        StoreCase("__host- in lowercase with a Domain", "https://example.com/", "__host-a=1; Secure; Path=/; Domain=example.com", .refused(.prefixRequirements("__host-a"))),
        StoreCase("__Host- with Path=/x", "https://example.com/", "__Host-a=1; Secure; Path=/x", .refused(.prefixRequirements("__Host-a"))),
        StoreCase("__Host- whose default path is not /", "https://example.com/x/y", "__Host-a=1; Secure", .refused(.prefixRequirements("__Host-a"))),
        // Step 21: "The cookie-attribute-list contains an attribute with an attribute-name of
        // "Path", and the cookie's path is /." A default path of "/" is not enough.
        StoreCase("__Host- needs a Path attribute even where the default path is /", "https://example.com/", "__Host-a=1; Secure", .refused(.prefixRequirements("__Host-a"))),
        StoreCase("__Host- with a Domain that a public-suffix host drops (host-only)", "https://co.uk/", "__Host-a=1; Secure; Path=/; Domain=co.uk", .hostOnly("co.uk")),
        StoreCase("__Host- from a loopback origin", "http://localhost/", "__Host-a=1; Secure; Path=/", .hostOnly("localhost")),
        StoreCase("__Secure without its dash is no prefix", "https://example.com/", "__Secure=1", .hostOnly("example.com")),
        StoreCase("__Hosta is no prefix", "https://example.com/", "__Hosta=1", .hostOnly("example.com")),
        StoreCase("a prefix in the value of a named cookie", "https://example.com/", "a=__Host-x", .hostOnly("example.com")),
        StoreCase("a nameless cookie whose value starts with __Host-", "https://example.com/", "__Host-x; Secure; Path=/", .refused(.prefixRequirements("__Host-x"))),
        StoreCase("a nameless cookie whose value starts with __Secure-", "https://example.com/", "=__Secure-x; Secure", .refused(.prefixRequirements("__Secure-x"))),
        StoreCase("a nameless cookie whose value starts with __secure-", "https://example.com/", "__secure-x", .refused(.prefixRequirements("__secure-x"))),
        StoreCase("a nameless cookie with an ordinary value", "https://example.com/", "x", .hostOnly("example.com")),
    ]

    @Test("__Secure- and __Host- prefixes", arguments: prefixCases)
    func prefixes(_ row: StoreCase) throws {
        try Self.check(row)
    }

    // MARK: SameSite (§5.2, §5.7 steps 17–19, §5.8.3)

    static let sameSiteCases: [StoreCase] = [
        StoreCase("SameSite=None without Secure", "https://www.example.com/", "a=b; SameSite=None", .refused(.sameSiteNoneWithoutSecure)),
        StoreCase("SameSite=None with Secure", "https://www.example.com/", "a=b; SameSite=None; Secure", .hostOnly("www.example.com")),
        StoreCase(
            "SameSite=None with Secure from a cross-site request", Request("https://www.example.com/", site: "https://other.org/"),
            "a=b; SameSite=None; Secure", .hostOnly("www.example.com")
        ),
        StoreCase("Strict from a cross-site request", Request("https://www.example.com/", site: "https://other.org/"), "a=b; SameSite=Strict", .refused(.crossSite)),
        StoreCase("Lax from a cross-site request", Request("https://www.example.com/", site: "https://other.org/"), "a=b; SameSite=Lax", .refused(.crossSite)),
        StoreCase(
            "Strict for another host of the same site", Request("https://www.example.com/", site: "https://sub.example.com/"), "a=b; SameSite=Strict",
            .hostOnly("www.example.com")
        ),
        StoreCase(
            "Lax for the registrable domain itself", Request("https://www.example.com/", site: "https://example.com/page"), "a=b; SameSite=Lax",
            .hostOnly("www.example.com")
        ),
        StoreCase(
            "another port is the same site", Request("https://www.example.com/", site: "https://www.example.com:8443/"), "a=b; SameSite=Strict",
            .hostOnly("www.example.com")
        ),
        StoreCase(
            "the site's host in capitals", Request("https://www.example.com/", site: "https://WWW.EXAMPLE.COM/"), "a=b; SameSite=Strict",
            .hostOnly("www.example.com")
        ),
        StoreCase(
            "http is another site than https (schemeful)", Request("https://www.example.com/", site: "http://www.example.com/"), "a=b; SameSite=Strict",
            .refused(.crossSite)
        ),
        StoreCase(
            "https is another site than http (schemeful)", Request("http://www.example.com/", site: "https://www.example.com/"), "a=b; SameSite=Lax",
            .refused(.crossSite)
        ),
        StoreCase("no site for cookies: same-site", "https://www.example.com/", "a=b; SameSite=Strict", .hostOnly("www.example.com")),
        StoreCase(
            "two hosts under a private suffix are two sites", Request("https://a.github.io/", site: "https://b.github.io/"), "a=b; SameSite=Strict",
            .refused(.crossSite)
        ),
        StoreCase(
            "two registrable domains under co.uk", Request("https://www.example.co.uk/", site: "https://other.co.uk/"), "a=b; SameSite=Lax",
            .refused(.crossSite)
        ),
        StoreCase(
            "an IP address is its own site", Request("http://127.0.0.1:8080/", site: "http://127.0.0.1/"), "a=b; SameSite=Strict",
            .hostOnly("127.0.0.1")
        ),
        StoreCase(
            "another IP address is another site", Request("http://127.0.0.1:8080/", site: "http://127.0.0.2/"), "a=b; SameSite=Strict",
            .refused(.crossSite)
        ),
    ]

    @Test("SameSite on storing", arguments: sameSiteCases)
    func sameSiteStorage(_ row: StoreCase) throws {
        try Self.check(row)
    }

    static let sameSiteMatchCases: [MatchCase] = [
        MatchCase(
            "Strict", from: "https://www.example.com/", "a=b; SameSite=Strict",
            sentTo: [
                "https://www.example.com/", Request("https://www.example.com/", site: "https://sub.example.com/"),
                Request("https://www.example.com/", site: "https://example.com/"),
            ],
            notSentTo: [Request("https://www.example.com/", site: "https://other.org/"), Request("https://www.example.com/", site: "http://www.example.com/")]
        ),
        MatchCase(
            "Lax", from: "https://www.example.com/", "a=b; SameSite=Lax",
            sentTo: ["https://www.example.com/", Request("https://www.example.com/", site: "https://sub.example.com/")],
            notSentTo: [Request("https://www.example.com/", site: "https://other.org/"), Request("https://www.example.com/", site: "http://www.example.com/")]
        ),
        MatchCase(
            "None", from: "https://www.example.com/", "a=b; SameSite=None; Secure",
            sentTo: [
                "https://www.example.com/", Request("https://www.example.com/", site: "https://other.org/"),
                Request("https://www.example.com/", site: "http://www.example.com/"),
            ]
        ),
        MatchCase(
            "a Strict domain cookie goes to another host of the site", from: "https://www.example.com/", "a=b; SameSite=Strict; Domain=example.com",
            sentTo: [Request("https://api.example.com/", site: "https://www.example.com/")],
            notSentTo: [Request("https://api.example.com/", site: "https://example.org/")]
        ),
    ]

    @Test("SameSite on retrieval", arguments: sameSiteMatchCases)
    func sameSiteRetrieval(_ row: MatchCase) throws {
        try Self.check(row)
    }

    // MARK: Replacing (§5.7 step 23) and what each operation reports

    @Test("the same name, domain and path replaces the old cookie and keeps its creation time")
    func replacement() throws {
        var jar = CookieJar()
        let firstChange = try Self.mustStore(&jar, "a=1", from: "http://example.com/", at: Self.t0)
        let first = StoredCookie(
            name: "a", value: "1", domain: "example.com", hostOnly: true, path: "/", expiry: nil, secure: false, httpOnly: false, sameSite: nil,
            creation: Self.t0, lastAccess: Self.t0
        )
        #expect(firstChange == CookieJar.Change(stored: [first]))

        let change = try Self.mustStore(&jar, "a=2; Max-Age=60; HttpOnly", from: "http://example.com/", at: Self.at(10))
        let replaced = StoredCookie(
            name: "a", value: "2", domain: "example.com", hostOnly: true, path: "/", expiry: Self.at(70), secure: false, httpOnly: true, sameSite: nil,
            creation: Self.t0, lastAccess: Self.at(10)
        )
        #expect(change == CookieJar.Change(stored: [replaced]))
        #expect(jar.count == 1)
        #expect(jar.cookie(replaced.key) == replaced)
    }

    @Test("another path is another cookie")
    func anotherPathAdds() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "a=1; Path=/", from: "http://example.com/", at: Self.t0)
        let change = try Self.mustStore(&jar, "a=2; Path=/x", from: "http://example.com/", at: Self.at(1))
        #expect(change.stored.map(\.value) == ["2"])
        #expect(change.removed.isEmpty)
        #expect(jar.count == 2)
        #expect(Self.header(jar, for: "http://example.com/x", at: Self.at(2)) == "a=2; a=1")
        #expect(Self.header(jar, for: "http://example.com/", at: Self.at(2)) == "a=1")
    }

    @Test("a host-only cookie of one host and a domain cookie of its parent are two cookies")
    func anotherDomainAdds() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "a=1", from: "http://www.example.com/", at: Self.t0)
        try Self.mustStore(&jar, "a=2; Domain=example.com", from: "http://www.example.com/", at: Self.at(1))
        #expect(jar.count == 2)
        #expect(Self.header(jar, for: "http://www.example.com/", at: Self.at(2)) == "a=1; a=2")
        #expect(Self.header(jar, for: "http://example.com/", at: Self.at(2)) == "a=2")
    }

    /// §5.7 step 23 looks for "a cookie with the same name, domain, host-only-flag, and path": a
    /// host-only cookie of example.com and a domain cookie for example.com are two cookies, and a
    /// request to example.com gets both (equal paths: the older first).
    @Test("the host-only flag is part of a cookie's identity")
    func hostOnlyFlagIsPartOfTheIdentity() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "a=host", from: "http://example.com/", at: Self.t0)
        let change = try Self.mustStore(&jar, "a=domain; Domain=example.com", from: "http://example.com/", at: Self.at(1))
        #expect(change.removed.isEmpty)
        #expect(jar.count == 2)
        #expect(Self.header(jar, for: "http://example.com/", at: Self.at(2)) == "a=host; a=domain")
        #expect(Self.header(jar, for: "http://www.example.com/", at: Self.at(2)) == "a=domain")
    }

    /// The old cookie was evicted when it expired (§5.7), so step 23 finds no old-cookie and the
    /// new one keeps its own creation time: it goes after a cookie created in between.
    @Test("a cookie replacing an expired one is created now")
    func replacingAnExpiredCookie() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "a=old; Max-Age=10", from: "http://example.com/", at: Self.t0)
        try Self.mustStore(&jar, "b=1", from: "http://example.com/", at: Self.at(5))
        let change = try Self.mustStore(&jar, "a=new", from: "http://example.com/", at: Self.at(20))
        #expect(change.stored.first?.creation == Self.at(20))
        #expect(Self.header(jar, for: "http://example.com/", at: Self.at(21)) == "b=1; a=new")
    }

    @Test("what each operation reports")
    func changes() throws {
        var jar = CookieJar()
        // A new cookie: stored.
        let new = try Self.mustStore(&jar, "a=1", from: "http://example.com/", at: Self.t0)
        #expect(new.stored.map(\.value) == ["1"])
        #expect(new.removed.isEmpty)
        // A refused cookie: an error, and the jar is unchanged.
        let refused = try Self.store(&jar, "a=2; Secure", from: "http://example.com/", at: Self.at(1))
        #expect(refused == .failure(.secureFromInsecureOrigin))
        #expect(jar.cookie(StoredCookie.Key(name: "a", domain: "example.com", path: "/"))?.value == "1")
        // Removing a cookie the jar does not have: nothing.
        let nothing = try Self.store(&jar, "b=; Max-Age=0", from: "http://example.com/", at: Self.at(2))
        #expect(nothing == .success(CookieJar.Change()))
        // An already-expired cookie for a key the jar has: removed.
        let removal = try Self.store(&jar, "a=; Max-Age=0", from: "http://example.com/", at: Self.at(3))
        #expect(removal == .success(CookieJar.Change(removed: new.stored)))
        // remove(_:) returns what it removed, once.
        let again = try Self.mustStore(&jar, "c=1", from: "http://example.com/", at: Self.at(4))
        let key = StoredCookie.Key(name: "c", domain: "example.com", path: "/")
        let removedOnce = jar.remove(key)
        let removedTwice = jar.remove(key)
        #expect(removedOnce == again.stored.first)
        #expect(removedTwice == nil)
        #expect(jar.isEmpty)
    }

    // MARK: Retrieval order and the Cookie field (§5.8.3 steps 2–4)

    @Test("longer paths first, then earlier creation")
    func order() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "a=1; Path=/", from: "http://example.com/", at: Self.t0)
        try Self.mustStore(&jar, "b=2; Path=/x/y", from: "http://example.com/", at: Self.at(1))
        try Self.mustStore(&jar, "c=3; Path=/x", from: "http://example.com/", at: Self.at(2))
        try Self.mustStore(&jar, "d=4; Path=/", from: "http://example.com/", at: Self.at(3))
        try Self.mustStore(&jar, "e=5; Path=/x; Domain=example.com", from: "http://www.example.com/", at: Self.at(4))
        try Self.mustStore(&jar, "A=6; Path=/x", from: "http://example.com/", at: Self.at(5))
        try Self.mustStore(&jar, "f=7; Path=/z", from: "http://example.com/", at: Self.at(6))
        #expect(Self.header(jar, for: "http://example.com/x/y/z", at: Self.at(7)) == "b=2; c=3; e=5; A=6; a=1; d=4")
        #expect(Self.header(jar, for: "http://example.com/x", at: Self.at(7)) == "c=3; e=5; A=6; a=1; d=4")
        #expect(Self.header(jar, for: "http://example.com/", at: Self.at(7)) == "a=1; d=4")
        #expect(Self.header(jar, for: "http://www.example.com/x", at: Self.at(7)) == "e=5")
    }

    @Test("a replaced cookie keeps its place")
    func replacedCookieKeepsItsPlace() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "a=1", from: "http://example.com/", at: Self.t0)
        try Self.mustStore(&jar, "b=1", from: "http://example.com/", at: Self.at(1))
        try Self.mustStore(&jar, "a=2", from: "http://example.com/", at: Self.at(2))
        #expect(Self.header(jar, for: "http://example.com/", at: Self.at(3)) == "a=2; b=1")
    }

    @Test("the Cookie field: name=value pairs, a nameless cookie's value alone")
    func cookieField() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "x=1", from: "http://example.com/", at: Self.t0)
        try Self.mustStore(&jar, "justavalue", from: "http://example.com/", at: Self.at(1))
        try Self.mustStore(&jar, "e=", from: "http://example.com/", at: Self.at(2))
        #expect(Self.header(jar, for: "http://example.com/", at: Self.at(3)) == "x=1; justavalue; e=")
        #expect(Self.header(jar, for: "http://example.org/", at: Self.at(3)) == nil)
        #expect(CookieJar.cookieHeader([]) == nil)
    }

    @Test("cookies(for:) updates the last-access time of what it returns (to within a minute); matchingCookies does not")
    func lastAccess() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "a=1; Path=/x", from: "http://example.com/", at: Self.t0)
        try Self.mustStore(&jar, "b=1; Path=/y", from: "http://example.com/", at: Self.t0)
        let a = StoredCookie.Key(name: "a", domain: "example.com", path: "/x")
        let b = StoredCookie.Key(name: "b", domain: "example.com", path: "/y")

        // Within CookieJar.lastAccessResolution of the last write, nothing is rewritten.
        _ = jar.cookies(for: Request("http://example.com/x").context, now: Self.at(5), suffixes: Self.suffixes)
        #expect(jar.cookie(a)?.lastAccess == Self.t0)

        let sent = jar.cookies(for: Request("http://example.com/x").context, now: Self.at(120), suffixes: Self.suffixes)
        #expect(sent.map(\.name) == ["a"])
        #expect(jar.cookie(a)?.lastAccess == Self.at(120))
        #expect(jar.cookie(a)?.creation == Self.t0)
        #expect(jar.cookie(b)?.lastAccess == Self.t0)

        let matched = jar.matchingCookies(for: Request("http://example.com/y").context, now: Self.at(300), suffixes: Self.suffixes)
        #expect(matched.map(\.name) == ["b"])
        #expect(jar.cookie(b)?.lastAccess == Self.t0)
        #expect(jar.cookie(a)?.lastAccess == Self.at(120))
    }

    // MARK: Limits ("remove excess cookies", §5.7)

    static let small = CookieJar.Limits(perDomain: 3, total: 5)

    @Test("past the per-domain limit the domain's least recently accessed cookie goes")
    func perDomainLimit() throws {
        var jar = CookieJar(limits: Self.small)
        try Self.mustStore(&jar, "other=1", from: "http://other.example.com/", at: Self.t0)
        try Self.mustStore(&jar, "n0=0; Path=/0", from: "http://example.com/", at: Self.t0)
        try Self.mustStore(&jar, "n1=1; Path=/1", from: "http://example.com/", at: Self.at(1))
        try Self.mustStore(&jar, "n2=2; Path=/2", from: "http://example.com/", at: Self.at(2))
        // Replacing a cookie adds none: nothing goes.
        let replacement = try Self.mustStore(&jar, "n2=22; Path=/2", from: "http://example.com/", at: Self.at(3))
        #expect(replacement.removed.isEmpty)
        // n0 is read: n1 becomes the least recently accessed.
        let read = jar.cookies(for: Request("http://example.com/0").context, now: Self.at(100), suffixes: Self.suffixes)
        #expect(read.map(\.name) == ["n0"])
        let n1 = try #require(jar.cookie(StoredCookie.Key(name: "n1", domain: "example.com", path: "/1")))

        let change = try Self.mustStore(&jar, "n3=3; Path=/3", from: "http://example.com/", at: Self.at(101))
        #expect(change.stored.map(\.name) == ["n3"])
        #expect(change.removed == [n1])
        #expect(Set(jar.cookies.map(\.name)) == ["other", "n0", "n2", "n3"])
    }

    @Test("matchingCookies is not an access for the limits")
    func matchingIsNotAnAccess() throws {
        var jar = CookieJar(limits: Self.small)
        try Self.mustStore(&jar, "n0=0; Path=/0", from: "http://example.com/", at: Self.t0)
        try Self.mustStore(&jar, "n1=1; Path=/1", from: "http://example.com/", at: Self.at(1))
        try Self.mustStore(&jar, "n2=2; Path=/2", from: "http://example.com/", at: Self.at(2))
        #expect(jar.matchingCookies(for: Request("http://example.com/0").context, now: Self.at(3), suffixes: Self.suffixes).map(\.name) == ["n0"])
        let change = try Self.mustStore(&jar, "n3=3; Path=/3", from: "http://example.com/", at: Self.at(4))
        #expect(change.removed.map(\.name) == ["n0"])
    }

    @Test("expired cookies go before any other")
    func expiredGoFirst() throws {
        var jar = CookieJar(limits: Self.small)
        try Self.mustStore(&jar, "n0=0", from: "http://example.com/", at: Self.t0)
        try Self.mustStore(&jar, "n1=1; Max-Age=5", from: "http://example.com/", at: Self.at(1))
        try Self.mustStore(&jar, "n2=2", from: "http://example.com/", at: Self.at(2))
        // n0 is the least recently accessed, but n1 expired at 6.
        let change = try Self.mustStore(&jar, "n3=3", from: "http://example.com/", at: Self.at(10))
        #expect(change.removed.map(\.name) == ["n1"])
        #expect(Set(jar.cookies.map(\.name)) == ["n0", "n2", "n3"])
    }

    @Test("past the total limit the least recently accessed cookie of any domain goes")
    func totalLimit() throws {
        var jar = CookieJar(limits: Self.small)
        for (index, host) in ["a", "b", "c", "d", "e"].enumerated() {
            try Self.mustStore(&jar, "n\(index)=\(index)", from: Request("http://\(host).example.com/"), at: Self.at(TimeInterval(index)))
        }
        #expect(jar.count == 5)
        // n0 is read: n1 becomes the least recently accessed.
        let read = jar.cookies(for: Request("http://a.example.com/").context, now: Self.at(100), suffixes: Self.suffixes)
        #expect(read.map(\.name) == ["n0"])
        let change = try Self.mustStore(&jar, "n5=5", from: "http://f.example.com/", at: Self.at(101))
        #expect(change.stored.map(\.name) == ["n5"])
        #expect(change.removed.map(\.name) == ["n1"])
        #expect(jar.count == 5)
        #expect(Set(jar.cookies.map(\.name)) == ["n0", "n2", "n3", "n4", "n5"])
    }

    @Test("the cookie just stored is never the one evicted")
    func justStoredStays() throws {
        var jar = CookieJar(limits: Self.small)
        try Self.mustStore(&jar, "n0=0", from: "http://example.com/", at: Self.at(10))
        try Self.mustStore(&jar, "n1=1", from: "http://example.com/", at: Self.at(11))
        try Self.mustStore(&jar, "n2=2", from: "http://example.com/", at: Self.at(12))
        // The clock stepped back: the new cookie is the least recently accessed, and stays.
        let change = try Self.mustStore(&jar, "n3=3", from: "http://example.com/", at: Self.at(5))
        #expect(change.stored.map(\.name) == ["n3"])
        #expect(change.removed.map(\.name) == ["n0"])

        // A cookie inserted as it is, last accessed long ago, stays too.
        let old = StoredCookie(
            name: "old", value: "v", domain: "example.com", hostOnly: true, path: "/", expiry: nil, secure: false, httpOnly: false, sameSite: nil,
            creation: Self.at(-1000), lastAccess: Self.at(-1000)
        )
        let inserted = jar.insert(old, now: Self.at(20))
        #expect(inserted.stored == [old])
        #expect(inserted.removed.map(\.name) == ["n3"])
        #expect(Set(jar.cookies.map(\.name)) == ["n1", "n2", "old"])
    }

    /// "When the user agent removes excess cookies from the cookie store, the user agent MUST
    /// evict cookies in the following priority order: 1. Expired cookies. 2. Cookies whose
    /// secure-only-flag is false, and which share a domain field with more than a predetermined
    /// number of other cookies. 3. Cookies that share a domain field with more than a
    /// predetermined number of other cookies. 4. All cookies."
    @Test("past the per-domain limit, cookies without Secure go before Secure ones")
    func secureCookiesGoLast() throws {
        var jar = CookieJar(limits: CookieJar.Limits(perDomain: 3, total: 100))
        try Self.mustStore(&jar, "s=1; Secure", from: "https://example.com/", at: Self.t0)
        try Self.mustStore(&jar, "a=1", from: "https://example.com/", at: Self.at(1))
        try Self.mustStore(&jar, "b=1", from: "https://example.com/", at: Self.at(2))
        let change = try Self.mustStore(&jar, "c=1", from: "https://example.com/", at: Self.at(3))
        #expect(change.removed.map(\.name) == ["a"])
        #expect(Set(jar.cookies.map(\.name)) == ["s", "b", "c"])
    }

    // MARK: Removing

    @Test("removeExpired removes the cookies expired by then, and only those")
    func removeExpired() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "a=1; Max-Age=10", from: "http://example.com/", at: Self.t0)
        try Self.mustStore(&jar, "b=1; Max-Age=100", from: "http://example.com/", at: Self.t0)
        try Self.mustStore(&jar, "c=1", from: "http://example.com/", at: Self.t0)
        let early = jar.removeExpired(now: Self.at(5))
        #expect(early.isEmpty)
        let first = jar.removeExpired(now: Self.at(50))
        #expect(first.map(\.name) == ["a"])
        let again = jar.removeExpired(now: Self.at(50))
        #expect(again.isEmpty)
        #expect(jar.count == 2)
        let later = jar.removeExpired(now: Self.at(200))
        #expect(later.map(\.name) == ["b"])
        #expect(jar.cookies.map(\.name) == ["c"])
    }

    @Test("removeAll(createdSince:) removes the cookies created at or after the date")
    func removeCreatedSince() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "a=1", from: "http://example.com/", at: Self.t0)
        try Self.mustStore(&jar, "b=1", from: "http://example.com/", at: Self.at(10))
        try Self.mustStore(&jar, "c=1", from: "http://www.example.com/", at: Self.at(20))
        // Replaced at 30, but created at t0.
        try Self.mustStore(&jar, "a=2", from: "http://example.com/", at: Self.at(30))
        let removed = jar.removeAll(createdSince: Self.at(10))
        #expect(Set(removed.map(\.name)) == ["b", "c"])
        #expect(jar.cookies.map(\.name) == ["a"])
        #expect(jar.count == 1)
    }

    @Test("removeAll removes every cookie")
    func removeAll() throws {
        var jar = CookieJar()
        try Self.mustStore(&jar, "a=1", from: "http://example.com/", at: Self.t0)
        try Self.mustStore(&jar, "b=1; Domain=example.com", from: "http://www.example.com/", at: Self.at(1))
        try Self.mustStore(&jar, "c=1; Secure", from: "https://other.org/", at: Self.at(2))
        let removed = jar.removeAll()
        #expect(Set(removed.map(\.name)) == ["a", "b", "c"])
        #expect(jar.isEmpty)
        #expect(jar.count == 0)
        #expect(jar.cookies.isEmpty)
        #expect(Self.header(jar, for: "http://example.com/", at: Self.at(3)) == nil)
        let none = jar.removeAll()
        #expect(none.isEmpty)
    }
}
