@testable import Courier
import CourierCore
import Foundation
import Testing

/// A response as the transport makes it, from a parsed head: its MIME type and text encoding
/// are read from Content-Type at the first look.
private func response(_ fields: [(String, String)]) -> HTTPURLResponse {
    let head = HTTPResponseHead(version: HTTPVersion(major: 1, minor: 1), status: 200, fields: HTTPFields(fields))
    return HTTPURLResponse(url: URL(string: "http://127.0.0.1/file")!, head: head)
}

@Suite("HTTPURLResponse from a parsed head")
struct HTTPURLResponseHeadTests {
    @Test("mimeType and textEncodingName as the public initializer gives them", arguments: [
        ("text/html; charset=utf-8", "text/html", "utf-8"),
        ("Text/HTML; Charset=\"UTF-8\"", "text/html", "utf-8"),
        ("application/octet-stream", "application/octet-stream", nil),
        (" text/html ", "text/html", nil),
        ("multipart/form-data; boundary=xyz", "multipart/form-data", nil),
    ] as [(String, String, String?)])
    func contentType(_ value: String, _ mimeType: String, _ encoding: String?) throws {
        let parsed = response([("Content-Length", "12"), ("content-type", value)])
        // The encoding first on one, the type first on the other: either order parses once.
        #expect(parsed.textEncodingName == encoding)
        #expect(parsed.mimeType == mimeType)
        let other = response([("Content-Type", value)])
        #expect(other.mimeType == mimeType)
        #expect(other.textEncodingName == encoding)
        let built = try #require(HTTPURLResponse(url: parsed.url!, statusCode: 200, httpVersion: nil, headerFields: ["Content-Type": value]))
        #expect(parsed.mimeType == built.mimeType && parsed.textEncodingName == built.textEncodingName)
        #expect(parsed.expectedContentLength == 12)
    }

    @Test("expectedContentLength: the parser's validated length when the head has one, else read from the fields")
    func expectedContentLength() {
        let url = URL(string: "http://127.0.0.1/file")!
        var head = HTTPResponseHead(version: .http1_1, status: 200, fields: HTTPFields([("Content-Length", "12")]))
        #expect(HTTPURLResponse(url: url, head: head).expectedContentLength == 12)
        // The length a parser left is taken as it is: the fields are not read again (here they
        // say otherwise, which no parser would leave).
        head.validatedContentLength = 99
        #expect(HTTPURLResponse(url: url, head: head).expectedContentLength == 99)
        head.validatedContentLength = -1
        #expect(HTTPURLResponse(url: url, head: head).expectedContentLength == -1)
        head.fields = HTTPFields([("Transfer-Encoding", "chunked")])
        #expect(HTTPURLResponse(url: url, head: head).expectedContentLength == -1)
        // A length the parser read is the one taken (a head's fields and its length agree:
        // the parser set it from them, and changing the fields drops it).
        var parsed = HTTPResponseHead(version: .http1_1, status: 200, fields: HTTPFields([("Content-Length", "7, 7")]))
        parsed.validatedContentLength = 7
        #expect(HTTPURLResponse(url: url, head: parsed).expectedContentLength == 7)
        parsed.fields.append(name: "X-Later", value: "1")
        #expect(parsed.validatedContentLength == nil)
        #expect(HTTPURLResponse(url: url, head: parsed).expectedContentLength == 7)
    }

    @Test("without Content-Type there is no mimeType and no encoding")
    func noContentType() {
        let parsed = response([("X-Other", "1")])
        #expect(parsed.mimeType == nil)
        #expect(parsed.textEncodingName == nil)
        #expect(parsed.expectedContentLength == -1)
    }

    @Test("threads reading mimeType at once all see the same value")
    func concurrentReaders() async {
        let parsed = response([("Content-Type", "application/vnd.example+json; charset=utf-8")])
        let seen = await withTaskGroup(of: String?.self) { group in
            for _ in 0..<16 { group.addTask { parsed.mimeType } }
            var all: [String?] = []
            for await value in group { all.append(value) }
            return all
        }
        #expect(seen == Array(repeating: "application/vnd.example+json", count: 16))
        #expect(parsed.textEncodingName == "utf-8")
    }

    @Test("an archived parsed response keeps its MIME type and encoding")
    func archiving() throws {
        let parsed = response([("Content-Type", "text/plain; charset=iso-8859-1")])
        let data = try NSKeyedArchiver.archivedData(withRootObject: parsed, requiringSecureCoding: true)
        let decoded = try #require(try NSKeyedUnarchiver.unarchivedObject(ofClass: HTTPURLResponse.self, from: data))
        #expect(decoded.mimeType == "text/plain")
        #expect(decoded.textEncodingName == "iso-8859-1")
    }
}
