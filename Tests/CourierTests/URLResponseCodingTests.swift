@testable import Courier
import Foundation
import Testing

private let reportURL = URL(string: "https://example.com/files/report.pdf?version=2")!
private let pageURL = URL(string: "https://example.com/pages/")!

/// Archives `object` with secure coding and reads it back as a `T`.
private func roundTrip<T: NSObject & NSCoding>(_ object: T, as type: T.Type) throws -> T? {
    let data = try NSKeyedArchiver.archivedData(withRootObject: object, requiringSecureCoding: true)
    return try NSKeyedUnarchiver.unarchivedObject(ofClass: type, from: data)
}

/// `allHeaderFields` as strings, so that two responses' fields can be compared.
private func stringFields(_ response: HTTPURLResponse) -> [String: String] {
    var result: [String: String] = [:]
    for (key, value) in response.allHeaderFields {
        if let name = key as? String, let text = value as? String { result[name] = text }
    }
    return result
}

/// The fields as received, in order, one "name: value" string each.
private func fieldLines(_ response: HTTPURLResponse) -> [String] {
    response.fields.fields.map { "\($0.name): \($0.value)" }
}

/// Checks that `decoded` shows every public property of `original`.
private func expectSameResponse(_ decoded: URLResponse, _ original: URLResponse, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(ObjectIdentifier(type(of: decoded)) == ObjectIdentifier(type(of: original)), sourceLocation: sourceLocation)
    #expect(decoded.url == original.url, sourceLocation: sourceLocation)
    #expect(decoded.mimeType == original.mimeType, sourceLocation: sourceLocation)
    #expect(decoded.expectedContentLength == original.expectedContentLength, sourceLocation: sourceLocation)
    #expect(decoded.textEncodingName == original.textEncodingName, sourceLocation: sourceLocation)
    #expect(decoded.suggestedFilename == original.suggestedFilename, sourceLocation: sourceLocation)
    #expect(decoded.isEqual(original), sourceLocation: sourceLocation)
    #expect(decoded.hash == original.hash, sourceLocation: sourceLocation)
}

/// Checks that `decoded` shows every public property of `original`, HTTP ones included.
private func expectSameHTTPResponse(_ decoded: HTTPURLResponse, _ original: HTTPURLResponse, sourceLocation: SourceLocation = #_sourceLocation) {
    expectSameResponse(decoded, original, sourceLocation: sourceLocation)
    #expect(decoded.statusCode == original.statusCode, sourceLocation: sourceLocation)
    #expect(decoded.httpVersion == original.httpVersion, sourceLocation: sourceLocation)
    #expect(stringFields(decoded) == stringFields(original), sourceLocation: sourceLocation)
    #expect(fieldLines(decoded) == fieldLines(original), sourceLocation: sourceLocation)
}

/// An object that archives under `URLResponse`'s keys with only the parts given (FoundationNetworking's
/// keys, never Courier's), so a test can decode an archive Courier would not write by mapping this
/// class's archived name to `URLResponse` or `HTTPURLResponse`.
final class ArchivedResponseParts: NSObject, NSSecureCoding {
    static var supportsSecureCoding: Bool { true }

    let url: URL?
    let statusCode: Int?
    let headerFields: [String: String]?

    init(url: URL?, statusCode: Int? = nil, headerFields: [String: String]? = nil) {
        self.url = url
        self.statusCode = statusCode
        self.headerFields = headerFields
        super.init()
    }

    init?(coder: NSCoder) { nil }

    func encode(with coder: NSCoder) {
        if let url { coder.encode(url as NSURL, forKey: "NS.url") }
        coder.encode(NSString(string: "text/plain"), forKey: "NS.mimeType")
        coder.encode(Int64(12), forKey: "NS.expectedContentLength")
        if let statusCode { coder.encode(statusCode, forKey: "NS.statusCode") }
        if let headerFields { coder.encode(NSDictionary(dictionary: headerFields), forKey: "NS.allHeaderFields") }
    }

    /// Archives `parts` and decodes the archive as a `T`.
    static func decode<T: NSObject & NSCoding>(_ parts: ArchivedResponseParts, as type: T.Type) throws -> T? {
        let data = try NSKeyedArchiver.archivedData(withRootObject: parts, requiringSecureCoding: true)
        let unarchiver = try NSKeyedUnarchiver(forReadingFrom: data)
        // An object that refuses to decode is then nil, as with unarchivedObject(ofClass:from:),
        // instead of the default policy's trap.
        unarchiver.decodingFailurePolicy = .setErrorAndReturn
        unarchiver.setClass(type, forClassName: NSStringFromClass(ArchivedResponseParts.self))
        let decoded = unarchiver.decodeObject(of: type, forKey: NSKeyedArchiveRootObjectKey)
        unarchiver.finishDecoding()
        return decoded
    }
}

@Suite("URLResponse and HTTPURLResponse archiving")
struct URLResponseCodingTests {
    @Test("both classes support secure coding")
    func secureCoding() {
        #expect(URLResponse.supportsSecureCoding)
        #expect(HTTPURLResponse.supportsSecureCoding)
    }

    @Test("a response with a MIME type and an encoding survives a secure archive")
    func plainResponseRoundTrip() throws {
        let original = URLResponse(url: reportURL, mimeType: "text/html", expectedContentLength: 1234, textEncodingName: "utf-8")
        let decoded = try #require(try roundTrip(original, as: URLResponse.self))
        expectSameResponse(decoded, original)
        #expect(decoded.url == reportURL)
        #expect(decoded.mimeType == "text/html")
        #expect(decoded.expectedContentLength == 1234)
        #expect(decoded.textEncodingName == "utf-8")
        #expect(decoded.suggestedFilename == "report.pdf")
    }

    @Test("a response without a MIME type, an encoding or a length keeps them absent")
    func bareResponseRoundTrip() throws {
        let original = URLResponse(url: pageURL, mimeType: nil, expectedContentLength: -1, textEncodingName: nil)
        let decoded = try #require(try roundTrip(original, as: URLResponse.self))
        expectSameResponse(decoded, original)
        #expect(decoded.mimeType == nil)
        #expect(decoded.textEncodingName == nil)
        #expect(decoded.expectedContentLength == -1)
    }

    @Test("an HTTP response keeps its status, version and fields, names in their case")
    func httpResponseRoundTrip() throws {
        let fields = [
            "Content-Type": "text/html; charset=UTF-8",
            "Content-Length": "42",
            "Content-Disposition": "attachment; filename=\"summary.txt\"",
            "ETag": "\"v1\"",
            "x-request-id": "abc",
        ]
        let original = try #require(HTTPURLResponse(url: reportURL, statusCode: 404, httpVersion: "HTTP/1.1", headerFields: fields))
        let decoded = try #require(try roundTrip(original, as: HTTPURLResponse.self))
        expectSameHTTPResponse(decoded, original)
        #expect(decoded.statusCode == 404)
        #expect(decoded.httpVersion == "HTTP/1.1")
        #expect(decoded.mimeType == "text/html")
        #expect(decoded.textEncodingName == "utf-8")
        #expect(decoded.expectedContentLength == 42)
        #expect(decoded.suggestedFilename == "summary.txt")
        #expect(stringFields(decoded) == fields)
        #expect(decoded.value(forHTTPHeaderField: "X-REQUEST-ID") == "abc")
        #expect(decoded.value(forHTTPHeaderField: "etag") == "\"v1\"")
    }

    @Test("repeated fields keep their order and case through an archive")
    func repeatedFieldsRoundTrip() throws {
        let original = HTTPURLResponse(
            url: pageURL, statusCode: 200, version: "HTTP/2",
            fields: .init([
                ("content-type", "application/json"),
                ("set-cookie", "a=1"),
                ("X-Trace", "t1"),
                ("Set-Cookie", "b=2; Path=/"),
                ("SET-COOKIE", "c=3"),
            ])
        )
        let decoded = try #require(try roundTrip(original, as: HTTPURLResponse.self))
        expectSameHTTPResponse(decoded, original)
        #expect(decoded.httpVersion == "HTTP/2")
        #expect(decoded.mimeType == "application/json")
        #expect(fieldLines(decoded) == [
            "content-type: application/json", "set-cookie: a=1", "X-Trace: t1", "Set-Cookie: b=2; Path=/", "SET-COOKIE: c=3",
        ])
        #expect(decoded.value(forHTTPHeaderField: "Set-Cookie") == "a=1, b=2; Path=/, c=3")
        #expect(stringFields(decoded) == [
            "content-type": "application/json", "set-cookie": "a=1, b=2; Path=/, c=3", "X-Trace": "t1",
        ])
    }

    @Test("an HTTP response without fields or a given version survives an archive")
    func emptyHTTPResponseRoundTrip() throws {
        let original = try #require(HTTPURLResponse(url: pageURL, statusCode: 204, httpVersion: nil, headerFields: nil))
        let decoded = try #require(try roundTrip(original, as: HTTPURLResponse.self))
        expectSameHTTPResponse(decoded, original)
        #expect(decoded.httpVersion == "HTTP/1.1")
        #expect(decoded.allHeaderFields.isEmpty)
        #expect(decoded.expectedContentLength == -1)
    }

    @Test("an archive without a URL does not decode")
    func archiveWithoutURLFails() throws {
        #expect(try ArchivedResponseParts.decode(ArchivedResponseParts(url: nil), as: URLResponse.self) == nil)
        let http = ArchivedResponseParts(url: nil, statusCode: 200, headerFields: ["Content-Type": "text/plain"])
        #expect(try ArchivedResponseParts.decode(http, as: HTTPURLResponse.self) == nil)
    }

    @Test("an archive with FoundationNetworking's keys alone decodes")
    func foundationNetworkingKeys() throws {
        // Also shows that the class mapping of the test above works: only the URL was missing there.
        let plain = try #require(try ArchivedResponseParts.decode(ArchivedResponseParts(url: reportURL), as: URLResponse.self))
        #expect(plain.url == reportURL)
        #expect(plain.mimeType == "text/plain")
        #expect(plain.expectedContentLength == 12)
        #expect(plain.textEncodingName == nil)

        let parts = ArchivedResponseParts(url: reportURL, statusCode: 201, headerFields: ["Content-Type": "text/plain", "X-Id": "7"])
        let http = try #require(try ArchivedResponseParts.decode(parts, as: HTTPURLResponse.self))
        #expect(http.statusCode == 201)
        #expect(http.httpVersion == "HTTP/1.1")
        #expect(stringFields(http) == ["Content-Type": "text/plain", "X-Id": "7"])
        #expect(http.value(forHTTPHeaderField: "x-id") == "7")
        #expect(fieldLines(http) == ["Content-Type: text/plain", "X-Id: 7"])
    }

    @Test("an HTTP archive without a status code does not decode")
    func archiveWithoutStatusFails() throws {
        let parts = ArchivedResponseParts(url: reportURL, headerFields: ["Content-Type": "text/plain"])
        #expect(try ArchivedResponseParts.decode(parts, as: HTTPURLResponse.self) == nil)
    }
}
