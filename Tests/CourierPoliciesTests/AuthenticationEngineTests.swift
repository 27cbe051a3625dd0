@testable import CourierPolicies
import Foundation
import Testing

@Suite("AuthenticationEngine")
struct AuthenticationEngineTests {
    // MARK: Ranking

    static func digestField(_ realm: String, algorithm: String? = nil) -> String {
        #"Digest realm="\#(realm)", nonce="n", qop="auth""# + (algorithm.map { ", algorithm=\($0)" } ?? "")
    }

    @Test("offers are ranked SHA-512-256, SHA-512, SHA-256, MD5, then Basic")
    func ranking() {
        let (offers, malformed) = AuthenticationEngine.offers(inFields: [
            #"Basic realm="basic""#,
            Self.digestField("md5"),
            #"Bearer realm="bearer", error="invalid_token""#,
            Self.digestField("sha256", algorithm: "SHA-256"),
            "Negotiate",
            "Negotiate YIIBhwYGKwYBBQUCoIIBezCCAXeg",
            Self.digestField("sha512", algorithm: "SHA-512"),
            Self.digestField("sha512-256", algorithm: "SHA-512-256"),
        ])
        #expect(malformed.isEmpty)
        #expect(offers.map(\.realm) == ["sha512-256", "sha512", "sha256", "md5", "basic"])
        #expect(offers.map(\.isDigest) == [true, true, true, true, false])
        #expect(offers.last == .basic(realm: "basic"))
    }

    @Test("offers of equal strength keep the server's order")
    func ties() {
        let fields = [
            #"Basic realm="b1""#,
            Self.digestField("m1", algorithm: "MD5-sess"),
            #"Basic realm="b2""#,
            Self.digestField("m2", algorithm: "MD5"),
            Self.digestField("m3"),
            Self.digestField("s1", algorithm: "SHA-256"),
            Self.digestField("s2", algorithm: "SHA-256-sess"),
        ]
        #expect(AuthenticationEngine.offers(inFields: fields).offers.map(\.realm) == ["s1", "s2", "m1", "m2", "m3", "b1", "b2"])
        // The same offers, the server's order reversed: the ties reverse too.
        #expect(AuthenticationEngine.offers(inFields: fields.reversed()).offers.map(\.realm) == ["s2", "s1", "m3", "m2", "m1", "b2", "b1"])
    }

    @Test("several challenges in one field are ranked like several fields")
    func oneField() {
        let field = #"Basic realm="b", Digest realm="m", nonce="n", qop="auth", Digest realm="s", nonce="n", qop="auth", algorithm=SHA-256"#
        #expect(AuthenticationEngine.offers(inFields: [field]).offers.map(\.realm) == ["s", "m", "b"])
    }

    @Test("schemes Courier does not speak and Digest challenges it cannot answer are dropped")
    func dropped() {
        let (offers, malformed) = AuthenticationEngine.offers(inFields: [
            #"Bearer realm="api""#,
            "Negotiate abc==",
            "NTLM",
            #"Digest realm="no-nonce", qop="auth""#,
            #"Digest realm="sha1", nonce="n", qop="auth", algorithm=SHA-1"#,
            #"Digest realm="conf", nonce="n", qop="auth-conf""#,
            #"Digest realm="sess", nonce="n", algorithm=MD5-sess"#,
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==",
            #"Basic realm="broken"#,
        ])
        #expect(offers.isEmpty)
        #expect(malformed.count == 1)
    }

    @Test("schemes are matched case-insensitively")
    func schemeCase() throws {
        let offers = AuthenticationEngine.offers(inFields: [#"BASIC realm="b""#, #"dIgEsT realm="d", nonce="n""#]).offers
        #expect(offers.count == 2)
        guard case .digest(let challenge) = try #require(offers.first) else {
            Issue.record("expected Digest first, got \(offers)")
            return
        }
        #expect(challenge.realm == "d")
        #expect(offers.last == .basic(realm: "b"))
    }

    @Test("a Basic challenge without a realm is still an offer")
    func basicWithoutRealm() {
        #expect(AuthenticationEngine.offers(inFields: ["Basic"]).offers == [.basic(realm: nil)])
    }

    // MARK: AuthenticationScope.covering

    static func digestOffer(_ extra: String = "") throws -> AuthenticationOffer {
        let parsed = try AuthenticationChallengeParser.parse(#"Digest realm="r", nonce="n", qop="auth""# + extra)
        let first = try #require(parsed.first)
        let challenge = try #require(DigestChallenge(first))
        return .digest(challenge)
    }

    /// RFC 7617 §2.2: a Basic credential covers the request's directory and everything below.
    @Test("Basic covers the directory of the request", arguments: [
        ("http://example.test/a/b/c", "/a/b/"),
        ("http://example.test/a/b/", "/a/b/"),
        ("http://example.test/a/b/c?x=1#f", "/a/b/"),
        ("http://example.test/file", "/"),
        ("http://example.test/", "/"),
        ("http://example.test", "/"),
        ("http://example.test?q", "/"),
    ])
    func basicScope(_ url: String, _ prefix: String) throws {
        let scope = try #require(AuthenticationScope.covering(URL(string: url)!, port: 80, offer: .basic(realm: "r"), isProxy: false))
        #expect(scope == AuthenticationScope(scheme: "http", host: "example.test", port: 80, isProxy: false, pathPrefixes: [prefix]))
    }

    @Test("Digest without domain covers the whole origin")
    func digestWholeOrigin() throws {
        let scope = try #require(AuthenticationScope.covering(URL(string: "https://Example.TEST:8443/a/b")!, port: 8443, offer: Self.digestOffer(), isProxy: false))
        #expect(scope == AuthenticationScope(scheme: "https", host: "example.test", port: 8443, isProxy: false, pathPrefixes: []))
    }

    /// RFC 7616 §3.3: domain lists URIs, absolute or relative to the request; only those on the
    /// request's origin make the scope.
    @Test("Digest with a domain covers the domain's paths on the same origin")
    func digestDomain() throws {
        let url = URL(string: "http://example.test/a/b")!
        let offer = try Self.digestOffer(#", domain="/private sub/ http://example.test/abs https://example.test/tls http://example.test:8080/port http://other.test/x""#)
        let scope = try #require(AuthenticationScope.covering(url, port: 80, offer: offer, isProxy: false))
        #expect(scope.pathPrefixes == ["/private", "/a/sub/", "/abs"])
        #expect(scope.scheme == "http")
        #expect(scope.host == "example.test")
        #expect(scope.port == 80)
    }

    @Test("Digest with a domain only on other origins covers nothing")
    func digestForeignDomain() throws {
        let url = URL(string: "http://example.test/a/b")!
        let offer = try Self.digestOffer(#", domain="http://other.test/ https://example.test/""#)
        #expect(AuthenticationScope.covering(url, port: 80, offer: offer, isProxy: false) == nil)
    }

    @Test("a proxy credential covers the whole proxy, whatever the offer")
    func proxyScope() throws {
        let url = URL(string: "http://proxy.test:3128/a/b")!
        let digest = try Self.digestOffer(#", domain="/only""#)
        for offer in [AuthenticationOffer.basic(realm: "p"), digest] {
            let scope = try #require(AuthenticationScope.covering(url, port: 3128, offer: offer, isProxy: true))
            #expect(scope == AuthenticationScope(scheme: "http", host: "proxy.test", port: 3128, isProxy: true, pathPrefixes: []))
        }
    }

    // MARK: PreemptiveAuthentication

    static func scope(_ host: String = "example.test", scheme: String = "http", port: Int = 80, isProxy: Bool = false, prefixes: [String] = []) -> AuthenticationScope {
        AuthenticationScope(scheme: scheme, host: host, port: port, isProxy: isProxy, pathPrefixes: prefixes)
    }

    // Basic values computed with Python's base64.
    static let rootValue = "Basic cm9vdDpyb290cHc="  // root:rootpw
    static let deepValue = "Basic ZGVlcDpkZWVwcHc="  // deep:deeppw
    static let u1Value = "Basic dTE6cDE="  // u1:p1
    static let u2Value = "Basic dTI6cDI="  // u2:p2

    @Test("the longest matching prefix wins")
    func longestPrefix() {
        var store = PreemptiveAuthentication()
        store.remember(Self.scope(prefixes: ["/"]), realm: "root", offer: .basic(realm: "root"), user: "root", password: "rootpw", nonceCount: 0)
        store.remember(Self.scope(prefixes: ["/a/b/"]), realm: "deep", offer: .basic(realm: "deep"), user: "deep", password: "deeppw", nonceCount: 0)
        #expect(store.value("/a/b/c") == Self.deepValue)
        #expect(store.value("/a/b/") == Self.deepValue)
        #expect(store.value("/a/b") == Self.rootValue)
        #expect(store.value("/a/x") == Self.rootValue)
        #expect(store.value("/") == Self.rootValue)

        // Remembered in the other order, the same answers.
        var reversed = PreemptiveAuthentication()
        reversed.remember(Self.scope(prefixes: ["/a/b/"]), realm: "deep", offer: .basic(realm: "deep"), user: "deep", password: "deeppw", nonceCount: 0)
        reversed.remember(Self.scope(prefixes: ["/"]), realm: "root", offer: .basic(realm: "root"), user: "root", password: "rootpw", nonceCount: 0)
        #expect(reversed.value("/a/b/c") == Self.deepValue)
        #expect(reversed.value("/a/x") == Self.rootValue)
    }

    @Test("a path outside every prefix gets nothing")
    func outsidePrefix() {
        var store = PreemptiveAuthentication()
        store.remember(Self.scope(prefixes: ["/a/b/"]), realm: "deep", offer: .basic(realm: "deep"), user: "deep", password: "deeppw", nonceCount: 0)
        #expect(store.value("/a/") == nil)
        #expect(store.value("/other") == nil)
    }

    @Test("another origin, port, scheme or proxy-ness does not match")
    func otherOrigin() {
        var store = PreemptiveAuthentication()
        store.remember(Self.scope(), realm: "r", offer: .basic(realm: "r"), user: "u1", password: "p1", nonceCount: 0)
        #expect(store.value("/x") == Self.u1Value)
        #expect(store.value("/x", host: "EXAMPLE.test", scheme: "HTTP") == Self.u1Value, "host and scheme compare case-insensitively")
        #expect(store.value("/x", host: "other.test") == nil)
        #expect(store.value("/x", host: "sub.example.test") == nil)
        #expect(store.value("/x", port: 8080) == nil)
        #expect(store.value("/x", scheme: "https") == nil)
        #expect(store.value("/x", isProxy: true) == nil)

        var proxy = PreemptiveAuthentication()
        proxy.remember(Self.scope("proxy.test", port: 3128, isProxy: true), realm: "p", offer: .basic(realm: "p"), user: "u1", password: "p1", nonceCount: 0)
        #expect(proxy.value("/x", host: "proxy.test", port: 3128, isProxy: true) == Self.u1Value)
        #expect(proxy.value("/x", host: "proxy.test", port: 3128, isProxy: false) == nil)
    }

    /// RFC 7616 §3.9.1's challenge, remembered with no use counted yet: each preemptive
    /// request counts the nonce once more. Responses: the RFC's for nc=1, Python's hashlib for
    /// nc=2 and 3 (with the RFC's other inputs).
    @Test("a Digest entry counts its nonce: nc 1, 2, 3")
    func digestNonceCount() throws {
        let parsed = try AuthenticationChallengeParser.parse(#"Digest realm="http-auth@example.org", qop="auth, auth-int", algorithm=MD5, nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS""#)
        let first = try #require(parsed.first)
        let challenge = try #require(DigestChallenge(first))
        var store = PreemptiveAuthentication()
        store.remember(Self.scope("example.org"), realm: challenge.realm, offer: .digest(challenge), user: "Mufasa", password: "Circle of Life", nonceCount: 0)
        let expected = [
            ("00000001", "8ca523f5e9506fed4657c9700eebdbec"),
            ("00000002", "4b5d595ecf2db9df612ea5b45cd97101"),
            ("00000003", "ae9021af17d1b5989d5577585d60a598"),
        ]
        for (nc, response) in expected {
            let found = store.authorization(
                scheme: "http", host: "example.org", port: 80, isProxy: false, path: "/dir/index.html",
                method: "GET", uri: "/dir/index.html", body: nil, clientNonce: "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ"
            )
            let answer = try #require(found)
            let parameters = try #require(AuthenticationChallengeParser.parse(answer.value).first).parameters
            #expect(parameters.first { $0.name == "nc" }?.value == nc)
            #expect(parameters.first { $0.name == "response" }?.value == response)
        }
        #expect(store.entries.count == 1)
        #expect(store.entries.first?.method == .digest(challenge, nonceCount: 3))
    }

    @Test("a Digest entry remembered after its first use starts at nc 2")
    func digestNonceCountAfterFirstUse() throws {
        let offer = try Self.digestOffer()
        var store = PreemptiveAuthentication()
        store.remember(Self.scope(), realm: "r", offer: offer, user: "u", password: "p", nonceCount: 1)
        let found = store.value("/x")
        let value = try #require(found)
        #expect(value.contains("nc=00000002"))
    }

    @Test("an auth-int entry cannot answer a streamed body, and does not count it")
    func digestIntegrityWithoutBody() throws {
        let parsed = try AuthenticationChallengeParser.parse(#"Digest realm="r", nonce="n", qop="auth-int""#)
        let first = try #require(parsed.first)
        let challenge = try #require(DigestChallenge(first))
        var store = PreemptiveAuthentication()
        store.remember(Self.scope(), realm: "r", offer: .digest(challenge), user: "u", password: "p", nonceCount: 0)
        #expect(store.authorization(scheme: "http", host: "example.test", port: 80, isProxy: false, path: "/", method: "POST", uri: "/", body: nil, clientNonce: "c")?.value == nil)
        let found = store.authorization(
            scheme: "http", host: "example.test", port: 80, isProxy: false, path: "/", method: "POST", uri: "/", body: Array("hello".utf8), clientNonce: "c"
        )
        let answer = try #require(found)
        #expect(answer.value.contains("nc=00000001"))
        #expect(answer.value.contains("qop=auth-int"))
    }

    @Test("forget removes a realm's credential on an origin, and only that")
    func forget() {
        var store = PreemptiveAuthentication()
        store.remember(Self.scope(prefixes: ["/a/"]), realm: "one", offer: .basic(realm: "one"), user: "u1", password: "p1", nonceCount: 0)
        store.remember(Self.scope(prefixes: ["/b/"]), realm: "two", offer: .basic(realm: "two"), user: "u2", password: "p2", nonceCount: 0)
        store.remember(Self.scope("other.test", prefixes: ["/a/"]), realm: "one", offer: .basic(realm: "one"), user: "u1", password: "p1", nonceCount: 0)

        store.forget(scheme: "http", host: "example.test", port: 8080, isProxy: false, realm: "one")
        store.forget(scheme: "http", host: "example.test", port: 80, isProxy: true, realm: "one")
        store.forget(scheme: "https", host: "example.test", port: 80, isProxy: false, realm: "one")
        store.forget(scheme: "http", host: "example.test", port: 80, isProxy: false, realm: "three")
        #expect(store.entries.count == 3)

        store.forget(scheme: "HTTP", host: "Example.Test", port: 80, isProxy: false, realm: "one")
        #expect(store.entries.count == 2)
        #expect(store.value("/a/x") == nil)
        #expect(store.value("/b/x") == Self.u2Value)
        #expect(store.value("/a/x", host: "other.test") == Self.u1Value)

        store.forget(scheme: "http", host: "example.test", port: 80, isProxy: false, realm: "two")
        store.forget(scheme: "http", host: "other.test", port: 80, isProxy: false, realm: "one")
        #expect(store.isEmpty)
    }

    @Test("remember replaces the credential of a realm on an origin")
    func rememberReplaces() {
        var store = PreemptiveAuthentication()
        store.remember(Self.scope(prefixes: ["/a/"]), realm: "r", offer: .basic(realm: "r"), user: "u1", password: "p1", nonceCount: 0)
        store.remember(Self.scope(prefixes: ["/b/"]), realm: "r", offer: .basic(realm: "r"), user: "u2", password: "p2", nonceCount: 0)
        #expect(store.entries.count == 1)
        #expect(store.value("/b/x") == Self.u2Value)
        // Another credential: the old one's directory is not carried over.
        #expect(store.value("/a/x") == nil)

        // Another realm on the same origin is kept beside it.
        store.remember(Self.scope(prefixes: ["/c/"]), realm: "other", offer: .basic(realm: "other"), user: "u1", password: "p1", nonceCount: 0)
        #expect(store.entries.count == 2)
        #expect(store.value("/c/x") == Self.u1Value)
        #expect(store.value("/b/x") == Self.u2Value)
    }

    @Test("the same credential working in another directory of the realm covers both")
    func rememberMerges() {
        var store = PreemptiveAuthentication()
        store.remember(Self.scope(prefixes: ["/a/"]), realm: "r", offer: .basic(realm: "r"), user: "u1", password: "p1", nonceCount: 0)
        store.remember(Self.scope(prefixes: ["/b/"]), realm: "r", offer: .basic(realm: "r"), user: "u1", password: "p1", nonceCount: 0)
        store.remember(Self.scope(prefixes: ["/a/"]), realm: "r", offer: .basic(realm: "r"), user: "u1", password: "p1", nonceCount: 0)
        #expect(store.entries.count == 1)
        #expect(Set(store.entries.first?.scope.pathPrefixes ?? []) == ["/a/", "/b/"])
        #expect(store.entries.first?.scope.pathPrefixes.count == 2)
        #expect(store.value("/a/x") == Self.u1Value)
        #expect(store.value("/b/x") == Self.u1Value)
        #expect(store.value("/c/x") == nil)
    }

    @Test("past maximumEntries the oldest entry is forgotten")
    func entryCap() {
        let limit = PreemptiveAuthentication.maximumEntries
        var store = PreemptiveAuthentication()
        for index in 0...limit {
            store.remember(Self.scope("h\(index).test"), realm: "r", offer: .basic(realm: "r"), user: "u1", password: "p1", nonceCount: 0)
        }
        #expect(store.entries.count == limit)
        #expect(store.entries.first?.scope.host == "h1.test")
        #expect(store.entries.last?.scope.host == "h\(limit).test")
        #expect(store.value("/", host: "h0.test") == nil)
        #expect(store.value("/", host: "h1.test") == Self.u1Value)
        #expect(store.value("/", host: "h\(limit).test") == Self.u1Value)

        // Remembering an origin again replaces its entry, and makes it the newest.
        store.remember(Self.scope("h1.test"), realm: "r", offer: .basic(realm: "r"), user: "u2", password: "p2", nonceCount: 0)
        #expect(store.entries.count == limit)
        store.remember(Self.scope("new.test"), realm: "r", offer: .basic(realm: "r"), user: "u1", password: "p1", nonceCount: 0)
        #expect(store.entries.count == limit)
        #expect(store.value("/", host: "h1.test") == Self.u2Value)
        #expect(store.value("/", host: "h2.test") == nil)
    }
}

extension PreemptiveAuthentication {
    /// The value sent for a GET of `path` on http://example.test (or as told).
    fileprivate mutating func value(
        _ path: String, host: String = "example.test", scheme: String = "http", port: Int = 80, isProxy: Bool = false
    ) -> String? {
        authorization(
            scheme: scheme, host: host, port: port, isProxy: isProxy, path: path,
            method: "GET", uri: path, body: nil, clientNonce: "cnonce"
        )?.value
    }
}
