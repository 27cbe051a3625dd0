import Courier
import Foundation
import Testing

/// NSSecureCoding round trips through NSKeyedArchiver for the value classes apps archive.
@Suite("Secure coding")
struct SecureCodingTests {
    private func roundTrip<T: NSObject & NSSecureCoding>(_ object: T) throws -> T? {
        let data = try NSKeyedArchiver.archivedData(withRootObject: object, requiringSecureCoding: true)
        return try NSKeyedUnarchiver.unarchivedObject(ofClass: T.self, from: data)
    }

    @Test("a server and a proxy protection space come back equal")
    func protectionSpace() throws {
        let server = URLProtectionSpace(host: "127.0.0.1", port: 8443, protocol: NSURLProtectionSpaceHTTPS, realm: "private", authenticationMethod: NSURLAuthenticationMethodHTTPDigest)
        let decoded = try #require(try roundTrip(server))
        #expect(decoded.isEqual(server))
        #expect(decoded.realm == "private" && decoded.port == 8443 && !decoded.isProxy())
        let proxy = URLProtectionSpace(proxyHost: "127.0.0.1", port: 3128, type: NSURLProtectionSpaceHTTPProxy, realm: nil, authenticationMethod: nil)
        let decodedProxy = try #require(try roundTrip(proxy))
        #expect(decodedProxy.isEqual(proxy) && decodedProxy.isProxy())
        #expect(decodedProxy.authenticationMethod == NSURLAuthenticationMethodDefault)
    }

    @Test("a cached response keeps its HTTP response, body, storage policy and property-list user info")
    func cachedResponse() throws {
        let url = URL(string: "http://127.0.0.1/cached")!
        let response = try #require(HTTPURLResponse(url: url, statusCode: 203, httpVersion: "HTTP/1.1", headerFields: ["ETag": "\"v1\"", "Content-Type": "text/plain"]))
        let cached = CachedURLResponse(response: response, data: Data("body".utf8), userInfo: ["note": "kept", "count": 3], storagePolicy: .allowedInMemoryOnly)
        let decoded = try #require(try roundTrip(cached))
        let http = try #require(decoded.response as? HTTPURLResponse)
        #expect(http.statusCode == 203 && http.url == url)
        #expect(http.value(forHTTPHeaderField: "ETag") == "\"v1\"")
        #expect(decoded.data == Data("body".utf8))
        #expect(decoded.storagePolicy == .allowedInMemoryOnly)
        #expect(decoded.userInfo?["note"] as? String == "kept")
        #expect((decoded.userInfo?["count"] as? NSNumber)?.intValue == 3)
    }

    @Test("a cookie comes back with its attributes and creation time")
    func cookie() throws {
        let expiry = Date(timeIntervalSinceReferenceDate: 900_000_000)
        let cookie = try #require(HTTPCookie(properties: [
            .name: "session", .value: "abc", .domain: ".courier.test", .path: "/app",
            .secure: "TRUE", .expires: expiry, .sameSitePolicy: "strict", HTTPCookiePropertyKey("HttpOnly"): true,
        ]))
        let decoded = try #require(try roundTrip(cookie))
        #expect(decoded.name == "session" && decoded.value == "abc")
        #expect(decoded.domain == ".courier.test" && decoded.path == "/app")
        #expect(decoded.isSecure && decoded.isHTTPOnly && !decoded.isSessionOnly)
        #expect(decoded.expiresDate == expiry)
        #expect(decoded.sameSitePolicy == .sameSiteStrict)
        let created = HTTPCookiePropertyKey("Created")
        #expect(decoded.properties?[created] as? Double == cookie.properties?[created] as? Double)
    }
}
