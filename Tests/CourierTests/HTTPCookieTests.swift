@testable import Courier
import Foundation
import Testing

/// A cookie that the properties must make.
private func cookie(_ properties: [HTTPCookiePropertyKey: Any], sourceLocation: SourceLocation = #_sourceLocation) throws -> HTTPCookie {
    try #require(HTTPCookie(properties: properties), sourceLocation: sourceLocation)
}

/// The smallest complete dictionary (name, value, domain, path), with `extra` merged over it
/// and `removing` taken out.
private func properties(
    _ extra: [HTTPCookiePropertyKey: Any] = [:], removing: [HTTPCookiePropertyKey] = []
) -> [HTTPCookiePropertyKey: Any] {
    var properties: [HTTPCookiePropertyKey: Any] = [.name: "id", .value: "a3fWa", .domain: "example.com", .path: "/"]
    properties.merge(extra) { _, new in new }
    for key in removing { properties[key] = nil }
    return properties
}

/// The cookies one `Set-Cookie` value sets for a URL.
private func received(_ setCookie: String, from url: String) -> [HTTPCookie] {
    HTTPCookie.cookies(withResponseHeaderFields: ["Set-Cookie": setCookie], for: URL(string: url)!)
}

/// Checks that two cookies agree on every attribute, the hidden ones included.
private func expectSameAttributes(_ actual: HTTPCookie, _ expected: HTTPCookie, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(actual.name == expected.name, sourceLocation: sourceLocation)
    #expect(actual.value == expected.value, sourceLocation: sourceLocation)
    #expect(actual.domain == expected.domain, sourceLocation: sourceLocation)
    #expect(actual.path == expected.path, sourceLocation: sourceLocation)
    #expect(actual.version == expected.version, sourceLocation: sourceLocation)
    #expect(actual.expiresDate == expected.expiresDate, sourceLocation: sourceLocation)
    #expect(actual.isSessionOnly == expected.isSessionOnly, sourceLocation: sourceLocation)
    #expect(actual.isSecure == expected.isSecure, sourceLocation: sourceLocation)
    #expect(actual.isHTTPOnly == expected.isHTTPOnly, sourceLocation: sourceLocation)
    #expect(actual.comment == expected.comment, sourceLocation: sourceLocation)
    #expect(actual.commentURL == expected.commentURL, sourceLocation: sourceLocation)
    #expect(actual.portList?.map(\.intValue) == expected.portList?.map(\.intValue), sourceLocation: sourceLocation)
    #expect(actual.sameSitePolicy == expected.sameSitePolicy, sourceLocation: sourceLocation)
    #expect(actual.creation == expected.creation, sourceLocation: sourceLocation)
    #expect(actual.originURL == expected.originURL, sourceLocation: sourceLocation)
    #expect(actual.storedCookie.hostOnly == expected.storedCookie.hostOnly, sourceLocation: sourceLocation)
}

/// 2021-06-09 10:18:14 UTC, the date in the `Expires` examples below.
private let june2021 = Date(timeIntervalSince1970: 1_623_233_894)

@Suite("HTTPCookie")
struct HTTPCookieTests {
    // MARK: Keys

    @Test("property keys and same-site policies have Apple's raw values")
    func rawValues() {
        let expected: [(HTTPCookiePropertyKey, String)] = [
            (.name, "Name"), (.value, "Value"), (.originURL, "OriginURL"), (.version, "Version"), (.domain, "Domain"),
            (.path, "Path"), (.secure, "Secure"), (.expires, "Expires"), (.comment, "Comment"),
            (.commentURL, "CommentURL"), (.discard, "Discard"), (.maximumAge, "Max-Age"), (.port, "Port"),
            (.sameSitePolicy, "SameSite"), (.httpOnly, "HttpOnly"),
        ]
        for (key, rawValue) in expected {
            #expect(key.rawValue == rawValue)
        }
        #expect(HTTPCookiePropertyKey("Name") == .name)
        #expect(HTTPCookiePropertyKey(rawValue: "Max-Age") == .maximumAge)
        #expect(HTTPCookiePropertyKey("HttpOnly") == .httpOnly)
        #expect(HTTPCookieStringPolicy.sameSiteLax.rawValue == "lax")
        #expect(HTTPCookieStringPolicy.sameSiteStrict.rawValue == "strict")
        #expect(HTTPCookieStringPolicy(rawValue: "lax") == .sameSiteLax)
    }

    // MARK: Properties

    @Test("every property key round-trips through properties")
    func everyKeyRoundTrips() throws {
        let origin = URL(string: "https://www.example.com/docs/page")!
        let commentURL = URL(string: "https://example.com/about-cookies")!
        let original = try cookie([
            .name: "id", .value: "a3fWa", .originURL: origin, .version: "1", .domain: ".Example.com", .path: "/docs",
            .secure: "TRUE", .expires: june2021, .comment: "the session", .commentURL: commentURL, .discard: "FALSE",
            .maximumAge: "3600", .port: "80,8080", .sameSitePolicy: "Strict", .httpOnly: "TRUE",
        ])
        let all = try #require(original.properties)
        #expect(all[.name] as? String == "id")
        #expect(all[.value] as? String == "a3fWa")
        #expect(all[.originURL] as? URL == origin)
        #expect(all[.version] as? Int == 1)
        #expect(all[.domain] as? String == ".example.com")
        #expect(all[.path] as? String == "/docs")
        #expect(all[.secure] as? Bool == true)
        // Max-Age wins over Expires: the expiry is an hour after creation.
        #expect(all[.expires] as? Date == original.creation.addingTimeInterval(3600))
        #expect(all[.comment] as? String == "the session")
        #expect(all[.commentURL] as? URL == commentURL)
        #expect(all[.discard] as? Bool == false)
        #expect(all[.maximumAge] as? String == "3600")
        #expect((all[.port] as? [NSNumber])?.map(\.intValue) == [80, 8080])
        #expect(all[.sameSitePolicy] as? String == "strict")
        #expect(all[.httpOnly] as? Bool == true)

        let rebuilt = try cookie(all)
        expectSameAttributes(rebuilt, original)
        #expect(rebuilt == original)
    }

    @Test("a minimal cookie round-trips too, with Apple's defaults filled in")
    func minimalRoundTrips() throws {
        let original = try cookie(properties())
        let all = try #require(original.properties)
        #expect(all[.name] as? String == "id")
        #expect(all[.domain] as? String == "example.com")
        #expect(all[.path] as? String == "/")
        #expect(all[.secure] as? Bool == false)
        #expect(all[.discard] as? Bool == true)
        #expect(all[.version] as? Int == 0)
        #expect(!all.keys.contains(.expires))
        #expect(!all.keys.contains(.maximumAge))
        #expect(!all.keys.contains(.httpOnly))
        #expect(!all.keys.contains(.sameSitePolicy))
        #expect(!all.keys.contains(.port))
        expectSameAttributes(try cookie(all), original)
    }

    @Test("the accessors show what the properties said")
    func accessors() throws {
        let made = try cookie(properties([.path: "/account", .comment: "hello", .commentURL: "https://example.com/c"]))
        #expect(made.name == "id")
        #expect(made.value == "a3fWa")
        #expect(made.domain == "example.com")
        #expect(made.path == "/account")
        #expect(made.version == 0)
        #expect(made.expiresDate == nil)
        #expect(made.isSessionOnly)
        #expect(!made.isSecure)
        #expect(!made.isHTTPOnly)
        #expect(made.comment == "hello")
        #expect(made.commentURL == URL(string: "https://example.com/c"))
        #expect(made.portList == nil)
        #expect(made.sameSitePolicy == nil)
        #expect(made.description.contains("name:\"id\""))
    }

    // MARK: Required keys and the domain

    @Test("name and value are required; path defaults to /")
    func requiredKeys() throws {
        #expect(HTTPCookie(properties: properties(removing: [.name])) == nil)
        #expect(HTTPCookie(properties: properties(removing: [.value])) == nil)
        #expect(HTTPCookie(properties: properties(removing: [.domain])) == nil)
        #expect(try cookie(properties(removing: [.path])).path == "/")
        #expect(try cookie(properties([.path: ""])).path == "/")
    }

    @Test("the origin URL supplies a host-only domain when there is no Domain")
    func originURLSuppliesDomain() throws {
        let fromURL = try cookie(properties([.originURL: URL(string: "https://WWW.Example.com/a/b")!], removing: [.domain]))
        #expect(fromURL.domain == "www.example.com")
        #expect(fromURL.storedCookie.hostOnly)
        #expect(fromURL.path == "/")

        let fromString = try cookie(properties([.originURL: "https://shop.example.com/"], removing: [.domain]))
        #expect(fromString.domain == "shop.example.com")

        // A Domain wins over the origin URL.
        let both = try cookie(properties([.originURL: URL(string: "https://www.example.com/")!, .domain: ".example.com"]))
        #expect(both.domain == ".example.com")

        // Neither a usable Domain nor an origin URL: no cookie.
        #expect(HTTPCookie(properties: properties([.domain: "."])) == nil)
        #expect(HTTPCookie(properties: properties([.domain: ""])) == nil)
    }

    @Test("a leading dot makes a domain cookie, no dot a host-only cookie")
    func domainCookieAndHostOnly() throws {
        let domainCookie = try cookie(properties([.domain: ".Example.COM"]))
        #expect(domainCookie.domain == ".example.com")
        #expect(!domainCookie.storedCookie.hostOnly)
        #expect(domainCookie.storedCookie.domain == "example.com")

        let hostOnly = try cookie(properties([.domain: "Example.com"]))
        #expect(hostOnly.domain == "example.com")
        #expect(hostOnly.storedCookie.hostOnly)
        #expect(hostOnly.storedCookie.domain == "example.com")
    }

    // MARK: Typed and string forms

    @Test("Secure takes a Bool or Apple's strings")
    func secureForms() throws {
        let cases: [(Any, Bool)] = [
            ("TRUE", true), ("true", true), ("1", true), (true, true),
            ("FALSE", false), ("false", false), ("0", false), ("", false), (false, false),
        ]
        for (value, expected) in cases {
            #expect(try cookie(properties([.secure: value])).isSecure == expected, "Secure = \(value)")
        }
        #expect(try !cookie(properties()).isSecure)
    }

    @Test("Discard TRUE makes a session-only cookie even with an expiry date")
    func discardForms() throws {
        let discarded = try cookie(properties([.discard: "TRUE", .maximumAge: "3600"]))
        #expect(discarded.isSessionOnly)
        #expect(discarded.expiresDate != nil)
        #expect(discarded.storedCookie.expiry == nil)

        #expect(try cookie(properties([.discard: true, .expires: june2021])).isSessionOnly)
        #expect(try !cookie(properties([.discard: "FALSE", .expires: june2021])).isSessionOnly)
        #expect(try !cookie(properties([.discard: false, .expires: june2021])).isSessionOnly)
    }

    @Test("isSessionOnly: no expiry date, or version 1 without Max-Age, as Apple documents")
    func sessionOnlyDefaults() throws {
        #expect(try cookie(properties()).isSessionOnly)
        #expect(try !cookie(properties([.expires: june2021])).isSessionOnly)
        #expect(try !cookie(properties([.maximumAge: "60"])).isSessionOnly)
        #expect(try cookie(properties([.version: "1", .expires: june2021])).isSessionOnly)
        #expect(try !cookie(properties([.version: "1", .maximumAge: "60"])).isSessionOnly)
    }

    @Test("Version takes \"0\", \"1\" or an integer")
    func versionForms() throws {
        #expect(try cookie(properties([.version: "1"])).version == 1)
        #expect(try cookie(properties([.version: 1])).version == 1)
        #expect(try cookie(properties([.version: "0"])).version == 0)
        #expect(try cookie(properties([.version: 0])).version == 0)
        #expect(try cookie(properties()).version == 0)
    }

    @Test("Port takes \"80,8080\" or an array of integers or NSNumbers")
    func portForms() throws {
        #expect(try cookie(properties([.version: "1", .port: "80,8080"])).portList?.map(\.intValue) == [80, 8080])
        #expect(try cookie(properties([.version: 1, .port: [80, 443]])).portList?.map(\.intValue) == [80, 443])
        #expect(try cookie(properties([.version: 1, .port: [NSNumber(value: 8443)]])).portList?.map(\.intValue) == [8443])
        #expect(try cookie(properties()).portList == nil)
    }

    @Test("SameSite takes lax or strict in any case, or an HTTPCookieStringPolicy")
    func sameSiteForms() throws {
        #expect(try cookie(properties([.sameSitePolicy: "lax"])).sameSitePolicy == .sameSiteLax)
        #expect(try cookie(properties([.sameSitePolicy: "Lax"])).sameSitePolicy == .sameSiteLax)
        #expect(try cookie(properties([.sameSitePolicy: "STRICT"])).sameSitePolicy == .sameSiteStrict)
        #expect(try cookie(properties([.sameSitePolicy: HTTPCookieStringPolicy.sameSiteStrict])).sameSitePolicy == .sameSiteStrict)
        #expect(try cookie(properties([.sameSitePolicy: HTTPCookieStringPolicy.sameSiteLax])).sameSitePolicy == .sameSiteLax)
        // None, or a value Apple does not know: cross-site requests carry the cookie.
        #expect(try cookie(properties([.sameSitePolicy: "none"])).sameSitePolicy == nil)
        #expect(try cookie(properties([.sameSitePolicy: "sometimes"])).sameSitePolicy == nil)
        #expect(try cookie(properties()).sameSitePolicy == nil)
    }

    @Test("HttpOnly takes Apple's strings or a Bool")
    func httpOnlyForms() throws {
        #expect(try cookie(properties([.httpOnly: "TRUE"])).isHTTPOnly)
        #expect(try cookie(properties([HTTPCookiePropertyKey("HttpOnly"): true])).isHTTPOnly)
        #expect(try !cookie(properties([.httpOnly: "FALSE"])).isHTTPOnly)
        #expect(try !cookie(properties()).isHTTPOnly)
    }

    // MARK: Expiry

    @Test("Max-Age wins over Expires and counts from the creation time")
    func maxAgeOverExpires() throws {
        let fromString = try cookie(properties([.expires: june2021, .maximumAge: "3600"]))
        #expect(fromString.expiresDate == fromString.creation.addingTimeInterval(3600))

        let fromNumber = try cookie(properties([.expires: june2021, .maximumAge: 60]))
        #expect(fromNumber.expiresDate == fromNumber.creation.addingTimeInterval(60))

        // An unreadable Max-Age is ignored: Expires applies.
        #expect(try cookie(properties([.expires: june2021, .maximumAge: "soon"])).expiresDate == june2021)
    }

    @Test("Expires takes a Date or a cookie date string")
    func expiresForms() throws {
        #expect(try cookie(properties([.expires: june2021])).expiresDate == june2021)
        #expect(try cookie(properties([.expires: "Wed, 09 Jun 2021 10:18:14 GMT"])).expiresDate == june2021)
        #expect(try cookie(properties([.expires: "Wed, 21 Oct 2015 07:28:00 GMT"])).expiresDate == Date(timeIntervalSince1970: 1_445_412_480))
        #expect(try cookie(properties([.expires: "not a date"])).expiresDate == nil)
    }

    // MARK: Rejected properties

    @Test("names and values that cannot go in a Cookie field make no cookie")
    func rejectedNamesAndValues() throws {
        let rejected: [(Any, Any)] = [
            ("a;b", "1"), ("a=b", "1"), ("id", "a;b"), ("id", "line\nbreak"), ("id", "cr\rhere"),
            ("nul\u{0}", "1"), ("del\u{7F}", "1"), ("id", "\u{1}"), ("", ""), (42, "1"), ("id", 42),
        ]
        for (name, value) in rejected {
            #expect(HTTPCookie(properties: properties([.name: name, .value: value])) == nil, "\(name) = \(value)")
        }
        // A nameless cookie, an empty value, a tab and an equals sign in the value are fine.
        #expect(try cookie(properties([.name: "", .value: "abc"])).name == "")
        #expect(try cookie(properties([.name: "id", .value: ""])).value == "")
        #expect(try cookie(properties([.value: "a\tb"])).value == "a\tb")
        #expect(try cookie(properties([.value: "a=b"])).value == "a=b")
    }

    // MARK: Request header fields

    @Test("requestHeaderFields joins the cookies in the order given")
    func requestHeaderFields() throws {
        let first = try cookie(properties([.name: "a", .value: "1"]))
        let second = try cookie(properties([.name: "b", .value: "2"]))
        #expect(HTTPCookie.requestHeaderFields(with: [first, second]) == ["Cookie": "a=1; b=2"])
        #expect(HTTPCookie.requestHeaderFields(with: [second, first]) == ["Cookie": "b=2; a=1"])
        #expect(HTTPCookie.requestHeaderFields(with: [first]) == ["Cookie": "a=1"])
        #expect(HTTPCookie.requestHeaderFields(with: []) == [:])
    }

    @Test("a nameless cookie is its value alone in the Cookie field (RFC 6265bis §5.8.3)")
    func requestHeaderFieldsNameless() throws {
        let nameless = try cookie(properties([.name: "", .value: "abc"]))
        let named = try cookie(properties([.name: "x", .value: "y"]))
        #expect(HTTPCookie.requestHeaderFields(with: [nameless]) == ["Cookie": "abc"])
        #expect(HTTPCookie.requestHeaderFields(with: [nameless, named]) == ["Cookie": "abc; x=y"])
    }

    // MARK: Response header fields

    @Test("one Set-Cookie makes one cookie with the URL's host and default path")
    func oneResponseCookie() throws {
        let cookies = received("id=a3fWa; HttpOnly; SameSite=Lax", from: "https://example.com/docs/page")
        try #require(cookies.count == 1)
        let made = cookies[0]
        #expect(made.name == "id")
        #expect(made.value == "a3fWa")
        #expect(made.domain == "example.com")
        #expect(made.storedCookie.hostOnly)
        #expect(made.path == "/docs")
        #expect(made.isHTTPOnly)
        #expect(!made.isSecure)
        #expect(made.sameSitePolicy == .sameSiteLax)
        #expect(made.isSessionOnly)
        #expect(made.expiresDate == nil)
        #expect(made.version == 0)
        #expect(made.originURL == URL(string: "https://example.com/docs/page"))
    }

    @Test("two cookies joined by a comma make two cookies")
    func twoJoinedCookies() {
        let cookies = received("a=1, b=2; Path=/", from: "https://example.com/docs/page")
        #expect(cookies.map(\.name) == ["a", "b"])
        #expect(cookies.map(\.value) == ["1", "2"])
        #expect(cookies.map(\.path) == ["/docs", "/"])
    }

    @Test("the comma in an Expires date does not split the cookie")
    func expiresWithComma() throws {
        let alone = received("id=1; Expires=Wed, 09 Jun 2021 10:18:14 GMT", from: "https://example.com/")
        try #require(alone.count == 1)
        #expect(alone[0].expiresDate == june2021)
        #expect(!alone[0].isSessionOnly)

        let followed = received("id=1; Expires=Wed, 09 Jun 2021 10:18:14 GMT, theme=dark", from: "https://example.com/")
        #expect(followed.map(\.name) == ["id", "theme"])
        #expect(followed.first?.expiresDate == june2021)
        #expect(followed.last?.expiresDate == nil)
    }

    @Test("the Set-Cookie key is found in any case; other fields are ignored")
    func setCookieKeyCase() {
        let url = URL(string: "https://example.com/")!
        let lower = HTTPCookie.cookies(withResponseHeaderFields: ["set-cookie": "a=1", "Content-Type": "text/html"], for: url)
        #expect(lower.map(\.name) == ["a"])
        #expect(HTTPCookie.cookies(withResponseHeaderFields: ["Content-Type": "text/html"], for: url).isEmpty)
        #expect(HTTPCookie.cookies(withResponseHeaderFields: [:], for: url).isEmpty)
    }

    @Test("a Domain covering the host makes a domain cookie; one that does not is dropped")
    func responseDomains() throws {
        let covered = received("a=1; Domain=example.com", from: "https://www.example.com/")
        try #require(covered.count == 1)
        #expect(covered[0].domain == ".example.com")
        #expect(!covered[0].storedCookie.hostOnly)

        #expect(received("a=1; Domain=other.com", from: "https://example.com/").isEmpty)
        #expect(received("a=1; Domain=www.example.com", from: "https://example.com/").isEmpty)
    }

    @Test("a Domain that is a public suffix is dropped")
    func publicSuffixDomain() {
        #expect(received("a=1; Domain=com", from: "https://example.com/").isEmpty)
        #expect(received("bad=1; Domain=com, good=2", from: "https://example.com/").map(\.name) == ["good"])
    }

    @Test("Secure is kept from https and loopback, dropped from plain http")
    func secureOrigins() throws {
        #expect(received("s=1; Secure", from: "http://example.com/").isEmpty)

        let https = received("s=1; Secure", from: "https://example.com/")
        #expect(https.map(\.isSecure) == [true])

        let loopback = received("s=1; Secure", from: "http://127.0.0.1:8080/")
        try #require(loopback.count == 1)
        #expect(loopback[0].isSecure)
        #expect(loopback[0].domain == "127.0.0.1")
    }

    @Test("a merged Set-Cookie value splits only before name=")
    func splitCookieList() {
        #expect(HTTPCookie.splitCookieList("a=1, b=2") == ["a=1", "b=2"])
        #expect(HTTPCookie.splitCookieList("a=1,b=2") == ["a=1", "b=2"])
        #expect(HTTPCookie.splitCookieList("a=1, b = 2") == ["a=1", "b = 2"])
        #expect(HTTPCookie.splitCookieList("id=1; Expires=Wed, 09 Jun 2021 10:18:14 GMT") == ["id=1; Expires=Wed, 09 Jun 2021 10:18:14 GMT"])
        #expect(HTTPCookie.splitCookieList("a=1, b") == ["a=1, b"])
        #expect(HTTPCookie.splitCookieList(" , a=1") == ["a=1"])
        #expect(HTTPCookie.splitCookieList("") == [])
    }

    // MARK: Equality

    @Test("cookies are equal when name, domain and path are, whatever the value")
    func equality() throws {
        let first = try cookie(properties([.value: "1"]))
        let second = try cookie(properties([.value: "2", .secure: "TRUE"]))
        #expect(first == second)
        #expect(first.isEqual(second))
        #expect(first.hash == second.hash)

        #expect(try first != cookie(properties([.path: "/other"])))
        #expect(try first != cookie(properties([.name: "other"])))
        // A domain cookie and a host-only cookie for the same name are two cookies.
        #expect(try first != cookie(properties([.domain: ".example.com"])))
        #expect(!first.isEqual("id"))
        #expect(!first.isEqual(nil))
    }

    // MARK: The jar's cookie

    @Test("HttpOnly, SameSite and the creation time survive the trip to the jar and back")
    func storedCookieBridging() throws {
        let original = try cookie(properties([
            .domain: ".example.com", .httpOnly: "TRUE", .sameSitePolicy: "strict", .expires: june2021, .secure: true,
        ]))
        let stored = original.storedCookie
        #expect(stored.httpOnly)
        #expect(stored.secure)
        #expect(stored.domain == "example.com")
        #expect(!stored.hostOnly)
        #expect(stored.expiry == june2021)
        #expect(stored.creation == original.creation)

        let back = HTTPCookie(stored)
        #expect(back.isHTTPOnly)
        #expect(back.isSecure)
        #expect(back.domain == ".example.com")
        #expect(back.sameSitePolicy == .sameSiteStrict)
        #expect(back.expiresDate == june2021)
        #expect(!back.isSessionOnly)
        #expect(back.creation == original.creation)
        #expect(back == original)
    }
}
