@testable import Courier
import CourierCore
import CourierTransport
import Foundation
import Testing

/// The one-pass reading of plain http(s) URLs against Foundation's: where it answers, it must
/// give the same origin and request target, and it must answer for the URLs most requests use.
@Suite("RequestBuilder's plain URL reading")
struct RequestBuilderTests {
    /// URLs the one-pass reading takes.
    static let plain = [
        "http://127.0.0.1:18080/100.bin", "http://example.com", "http://example.com/", "https://example.com:8443/a/b?c=d&e",
        "http://example.com?q", "http://example.com#frag", "http://example.com/p?q#f", "http://example.com:80/", "https://h:443/x",
        "https://h:00443/x", "http://a-b.c-d.example/%41%20b?x=%2F", "http://example.com./p", "http://1234/p", "http://h/p;params?q",
        "http://h/a/../b/./c", "http://h/#", "http://h:1/", "http://h:65535/", "http://xn--bcher-kva.example/",
        "http://h/p?a=b?c", "http://h/~user/!$&'()*+,;=:@/", "http://h//double//slashes",
    ]

    /// URLs left to Foundation (the one-pass reading says nil).
    static let others = [
        "HTTP://example.com/", "http://Example.com/", "http://user:pass@example.com/", "http://[::1]:8080/", "http://%65xample.com/",
        "http://h:/", "http://h:0/", "http://h:65536/", "http://h:99999999/", "ftp://h/", "http://h/p?", "http://h_underscore/",
        "file:///tmp/x", "data:,x", "http:/h/p", "http:h", "https://h/p?q?", "https://h/?",
    ]

    @Test("where the one-pass reading answers, its origin and target are Foundation's", arguments: plain + others)
    func sameAsFoundation(_ text: String) throws {
        let url = try #require(URL(string: text))
        guard let (origin, target) = RequestBuilder.plainParts(of: url) else { return }
        let slowOrigin = try RequestBuilder.origin(of: url)
        #expect(origin == slowOrigin)
        #expect(origin.authority == slowOrigin.authority)
        #expect(target == RequestBuilder.target(of: url))
    }

    @Test("the plain URLs are read in one pass", arguments: plain)
    func readsPlain(_ text: String) throws {
        let url = try #require(URL(string: text))
        #expect(RequestBuilder.plainParts(of: url) != nil)
    }

    @Test("with the session's last origin kept, every plain URL reads as without it, in any order")
    func originMemo() throws {
        let memo = OriginMemo()
        // In the list's order, then reversed, then each twice in a row: hosts, ports and schemes
        // change from one URL to the next, and stay the same.
        let order = Self.plain + Self.plain.reversed() + Self.plain.flatMap { [$0, $0] }
        for text in order {
            let url = try #require(URL(string: text))
            let (origin, target) = try #require(RequestBuilder.plainParts(of: url, origins: memo))
            let (fresh, freshTarget) = try #require(RequestBuilder.plainParts(of: url))
            #expect(origin == fresh, "\(text)")
            #expect(origin.authority == fresh.authority, "\(text)")
            #expect(target == freshTarget, "\(text)")
        }
        // The same host and port under the other scheme, and a port that is the default.
        for text in ["http://h:443/", "https://h:443/", "http://h:443/", "http://h/", "http://h:80/", "https://h/"] {
            let url = try #require(URL(string: text))
            let origin = try #require(RequestBuilder.plainParts(of: url, origins: memo)).origin
            #expect(origin == (try RequestBuilder.origin(of: url)), "\(text)")
            #expect(origin.authority == (try RequestBuilder.origin(of: url)).authority, "\(text)")
        }
    }

    @Test("the others are left to Foundation", arguments: others)
    func leavesOthers(_ text: String) throws {
        guard let url = URL(string: text) else { return }
        #expect(RequestBuilder.plainParts(of: url) == nil)
    }

    @Test("a relative URL is left to Foundation")
    func relative() throws {
        let url = try #require(URL(string: "p?q", relativeTo: URL(string: "http://example.com/a/")))
        #expect(RequestBuilder.plainParts(of: url) == nil)
    }

    @Test("authority: the port only when it is not the scheme's default, brackets around IPv6")
    func authority() {
        #expect(Origin(scheme: .http, host: "h", port: 80).authority == "h")
        #expect(Origin(scheme: .http, host: "h", port: 8080).authority == "h:8080")
        #expect(Origin(scheme: .https, host: "h", port: 80).authority == "h:80")
        #expect(Origin(scheme: .https, host: "::1", port: 8443).authority == "[::1]:8443")
        #expect(Origin(scheme: .https, host: "::1").authority == "[::1]")
        #expect(Origin(scheme: .http, host: "Example.COM", port: 0).authority == "example.com:0")
    }

    @Test("authority: every port is written as its decimal digits", arguments: [1, 9, 10, 99, 100, 443, 999, 1000, 9999, 10000, 18080, 65535] as [UInt16])
    func authorityPorts(_ port: UInt16) {
        #expect(Origin(scheme: .http, host: "127.0.0.1", port: port).authority == "127.0.0.1:\(port)")
        #expect(Origin(scheme: .https, host: "fe80::1", port: port).authority == (port == 443 ? "[fe80::1]" : "[fe80::1]:\(port)"))
    }
}

/// The request fields: the shared defaults where nothing is set, the same fields the general
/// path would build, and the general path wherever something is set.
@Suite("RequestBuilder's fields")
struct RequestBuilderFieldTests {
    static let url = URL(string: "http://127.0.0.1:18080/x")!

    static func fields(_ request: URLRequest, _ configuration: URLSessionConfiguration = .ephemeral, body: TaskDriver.BodySource = .request) throws -> [HTTPFields.Field] {
        try RequestBuilder.make(request, configuration: configuration, body: body).head.fields.fields
    }

    static let defaults: [HTTPFields.Field] = [
        .init(name: "User-Agent", value: RequestBuilder.userAgent), .init(name: "Accept", value: "*/*"),
        .init(name: "Accept-Language", value: RequestBuilder.acceptLanguage), .init(name: "Accept-Encoding", value: RequestBuilder.acceptEncoding),
    ]

    @Test("a request that sets nothing gets the four defaults, in order")
    func nothingSet() throws {
        #expect(try Self.fields(URLRequest(url: Self.url)) == Self.defaults)
        // An empty dictionary of additional headers sets nothing either.
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpAdditionalHeaders = [:]
        #expect(try Self.fields(URLRequest(url: Self.url), configuration) == Self.defaults)
    }

    @Test("the shared defaults are what the general path builds")
    func sameAsGeneralPath() throws {
        // A header that is not a string is ignored, but takes the request down the general path.
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpAdditionalHeaders = ["X-Number": 7]
        #expect(try Self.fields(URLRequest(url: Self.url), configuration) == Self.defaults)
    }

    @Test("caller and configuration fields come first and replace the defaults they name")
    func setFields() throws {
        var request = URLRequest(url: Self.url)
        request.setValue("text/plain", forHTTPHeaderField: "accept")
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpAdditionalHeaders = ["X-From-Configuration": "1", "Accept": "ignored"]
        let names = try Self.fields(request, configuration).map(\.name)
        #expect(names == ["accept", "X-From-Configuration", "User-Agent", "Accept-Language", "Accept-Encoding"])
    }

    @Test("a POST body with no type is a form; an omitted default is left out")
    func formAndOmitted() throws {
        var request = URLRequest(url: Self.url)
        request.httpMethod = "POST"
        request.httpBody = Data("a=1".utf8)
        #expect(try Self.fields(request) == Self.defaults + [.init(name: "Content-Type", value: "application/x-www-form-urlencoded")])
        let configuration = URLSessionConfiguration.ephemeral
        configuration.courierOmittedDefaultFields = ["accept-language"]
        #expect(try Self.fields(URLRequest(url: Self.url), configuration) == Self.defaults.filter { $0.name != "Accept-Language" })
    }

    @Test("changing one request's fields leaves the shared defaults alone")
    func sharedDefaultsUnchanged() throws {
        var head = try RequestBuilder.make(URLRequest(url: Self.url), configuration: .ephemeral, body: .request).head
        head.fields.append(name: "Cookie", value: "a=b")
        #expect(RequestBuilder.defaultFields?.fields == Self.defaults)
        #expect(try Self.fields(URLRequest(url: Self.url)) == Self.defaults)
    }
}
