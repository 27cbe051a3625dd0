import CourierPolicies
import Foundation
import Testing

@Suite("RedirectPolicy")
struct RedirectPolicyTests {
    let base = URL(string: "http://example.test/a/b/c?x=1")!
    let policy = RedirectPolicy()

    /// One row: a status and method, and what the next request must be.
    struct MethodCase: Sendable, CustomStringConvertible {
        var status: Int
        var method: String
        var nextMethod: String
        var body: RedirectPolicy.BodyChange
        var description: String { "\(status) \(method) → \(nextMethod)" }
    }

    static let methodCases: [MethodCase] = [
        .init(status: 301, method: "GET", nextMethod: "GET", body: .keep),
        .init(status: 301, method: "POST", nextMethod: "GET", body: .dropAndUseGET),
        .init(status: 301, method: "PUT", nextMethod: "PUT", body: .keep),
        .init(status: 302, method: "POST", nextMethod: "GET", body: .dropAndUseGET),
        .init(status: 302, method: "post", nextMethod: "GET", body: .dropAndUseGET),
        .init(status: 302, method: "DELETE", nextMethod: "DELETE", body: .keep),
        .init(status: 303, method: "POST", nextMethod: "GET", body: .dropAndUseGET),
        .init(status: 303, method: "PUT", nextMethod: "GET", body: .dropAndUseGET),
        .init(status: 303, method: "DELETE", nextMethod: "GET", body: .dropAndUseGET),
        .init(status: 303, method: "HEAD", nextMethod: "HEAD", body: .keep),
        .init(status: 303, method: "GET", nextMethod: "GET", body: .keep),
        .init(status: 307, method: "POST", nextMethod: "POST", body: .keep),
        .init(status: 307, method: "PATCH", nextMethod: "PATCH", body: .keep),
        .init(status: 308, method: "POST", nextMethod: "POST", body: .keep),
        .init(status: 308, method: "PUT", nextMethod: "PUT", body: .keep),
    ]

    @Test("method and body per status", arguments: methodCases)
    func methodRules(_ row: MethodCase) throws {
        let decision = policy.decide(status: row.status, location: "/next", requestURL: base, method: row.method, redirectsSoFar: 0)
        guard case .follow(let redirect) = decision else {
            Issue.record("expected a redirect to follow, got \(decision)")
            return
        }
        #expect(redirect.method == row.nextMethod)
        #expect(redirect.bodyChange == row.body)
        #expect(redirect.url.absoluteString == "http://example.test/next")
        if row.body == .dropAndUseGET {
            #expect(redirect.removedFieldNames.isSuperset(of: ["content-type", "content-length", "content-encoding"]))
        } else {
            #expect(redirect.removedFieldNames.isEmpty, "same origin and body kept: nothing removed")
        }
    }

    @Test("statuses that are not followed", arguments: [200, 204, 300, 304, 305, 306, 309, 399, 404, 500])
    func notRedirects(_ status: Int) {
        #expect(policy.decide(status: status, location: "/x", requestURL: base, method: "GET", redirectsSoFar: 0) == .deliver)
    }

    @Test("a redirect status without a usable Location is delivered as it is")
    func missingLocation() {
        #expect(policy.decide(status: 302, location: nil, requestURL: base, method: "GET", redirectsSoFar: 0) == .deliver)
        #expect(policy.decide(status: 302, location: "  ", requestURL: base, method: "GET", redirectsSoFar: 0) == .deliver)
    }

    /// RFC 3986 section 5.4's examples (with the base's fragment rule of RFC 9110 section 10.2.2).
    @Test("Location resolution", arguments: [
        ("g", "http://a/b/c/g"),
        ("./g", "http://a/b/c/g"),
        ("g/", "http://a/b/c/g/"),
        ("/g", "http://a/g"),
        ("//g", "http://g"),
        ("?y", "http://a/b/c/d;p?y"),
        ("g?y", "http://a/b/c/g?y"),
        ("#s", "http://a/b/c/d;p?q#s"),
        ("g#s", "http://a/b/c/g#s"),
        ("..", "http://a/b/"),
        ("../g", "http://a/b/g"),
        ("../..", "http://a/"),
        ("../../g", "http://a/g"),
        ("https://other.test:8443/p", "https://other.test:8443/p"),
    ])
    func resolution(_ location: String, _ expected: String) throws {
        let base = URL(string: "http://a/b/c/d;p?q")!
        let resolved = try #require(RedirectPolicy.resolve(location: location, against: base))
        #expect(resolved.absoluteString == expected)
    }

    @Test("the request's fragment is kept when the Location has none, replaced when it has one")
    func fragments() throws {
        let base = URL(string: "http://a/page#section")!
        #expect(try #require(RedirectPolicy.resolve(location: "/other", against: base)).absoluteString == "http://a/other#section")
        #expect(try #require(RedirectPolicy.resolve(location: "/other#top", against: base)).absoluteString == "http://a/other#top")
        #expect(try #require(RedirectPolicy.resolve(location: "http://b/x?q=1", against: base)).absoluteString == "http://b/x?q=1#section")
    }

    @Test("characters a URL cannot hold are escaped, existing escapes kept")
    func escaping() throws {
        let resolved = try #require(RedirectPolicy.resolve(location: "/a b/ü?q=%20x", against: base))
        #expect(resolved.absoluteString == "http://example.test/a%20b/%C3%BC?q=%20x")
    }

    @Test("16 redirects are followed, the 17th fails")
    func limit() {
        if case .follow = policy.decide(status: 302, location: "/n", requestURL: base, method: "GET", redirectsSoFar: 15) {} else {
            Issue.record("the 16th redirect must be followed")
        }
        #expect(policy.decide(status: 302, location: "/n", requestURL: base, method: "GET", redirectsSoFar: 16) == .fail(.tooManyRedirects(limit: 16)))
    }

    /// Apple offers these to the delegate (an OAuth client refuses `myapp://callback` and reads
    /// the Location); followed, the load fails as unsupported when it is sent.
    @Test("other schemes are offered, as another origin", arguments: ["ftp://a/x", "file:///etc/passwd", "myapp://callback?code=1", "mailto:a@b"])
    func otherSchemes(_ location: String) {
        guard case .follow(let redirect) = policy.decide(status: 302, location: location, requestURL: base, method: "GET", redirectsSoFar: 0) else {
            Issue.record("\(location) must be offered to the delegate")
            return
        }
        #expect(redirect.url.absoluteString == location)
        #expect(redirect.isCrossOrigin)
        #expect(redirect.removedFieldNames.contains("authorization"))
    }

    /// Origins: scheme, host and port (the default port made explicit).
    @Test("credentials are stripped on another origin, kept on the same", arguments: [
        ("http://example.test/x", false),
        ("http://EXAMPLE.test:80/x", false),
        ("//example.test/y", false),
        ("http://example.test:8080/x", true),
        ("https://example.test/x", true),
        ("http://other.test/x", true),
        ("http://sub.example.test/x", true),
    ])
    func crossOrigin(_ location: String, _ cross: Bool) throws {
        let decision = RedirectPolicy(extraCrossOriginFieldNames: ["X-Api-Key"])
            .decide(status: 307, location: location, requestURL: base, method: "GET", redirectsSoFar: 0)
        guard case .follow(let redirect) = decision else {
            Issue.record("expected to follow, got \(decision)")
            return
        }
        #expect(redirect.isCrossOrigin == cross)
        if cross {
            #expect(redirect.removedFieldNames == ["authorization", "proxy-authorization", "cookie", "x-api-key"])
        } else {
            #expect(redirect.removedFieldNames.isEmpty)
        }
    }

    @Test("https to http is another origin")
    func downgrade() throws {
        let decision = policy.decide(status: 301, location: "http://example.test/", requestURL: URL(string: "https://example.test/")!, method: "GET", redirectsSoFar: 0)
        guard case .follow(let redirect) = decision else {
            Issue.record("expected to follow")
            return
        }
        #expect(redirect.isCrossOrigin)
        #expect(redirect.removedFieldNames.contains("authorization"))
    }
}
