import Courier
import Foundation
import Testing

private let fileURL = URL(string: "https://example.com/files/report.pdf")!

private func response(
    url: URL = fileURL, status: Int = 200, _ fields: [String: String]? = nil, sourceLocation: SourceLocation = #_sourceLocation
) throws -> HTTPURLResponse {
    try #require(HTTPURLResponse(url: url, statusCode: status, httpVersion: "HTTP/1.1", headerFields: fields), sourceLocation: sourceLocation)
}

@Suite("HTTPURLResponse")
struct HTTPURLResponseTests {
    // MARK: Basics

    @Test("the initializer keeps the URL, status code and fields")
    func basics() throws {
        let made = try response(status: 404, ["X-Request-Id": "abc"])
        #expect(made.url == fileURL)
        #expect(made.statusCode == 404)
        #expect(made.allHeaderFields["X-Request-Id"] as? String == "abc")
    }

    @Test("httpVersion and headerFields may be nil")
    func nilArguments() throws {
        let made = try #require(HTTPURLResponse(url: fileURL, statusCode: 204, httpVersion: nil, headerFields: nil))
        #expect(made.statusCode == 204)
        #expect(made.allHeaderFields.isEmpty)
        #expect(made.mimeType == nil)
        #expect(made.textEncodingName == nil)
        #expect(made.expectedContentLength == -1)
    }

    @Test("allHeaderFields holds every field under the name it was given")
    func allHeaderFields() throws {
        let fields = ["Content-Type": "text/html", "x-lower": "1", "ETag": "\"v1\""]
        let made = try response(fields)
        let all = made.allHeaderFields
        #expect(all.count == 3)
        for (name, value) in fields {
            #expect(all[name] as? String == value, "field \(name)")
        }
    }

    // MARK: Content-Type

    @Test("Content-Type gives a lower-cased mimeType and the charset", arguments: [
        ("text/html; charset=utf-8", "text/html", "utf-8"),
        ("Text/HTML; charset=utf-8", "text/html", "utf-8"),
        ("APPLICATION/JSON;charset=utf-8", "application/json", "utf-8"),
        ("text/plain;  charset=\"iso-8859-1\"", "text/plain", "iso-8859-1"),
        ("text/plain; format=flowed; charset=us-ascii", "text/plain", "us-ascii"),
        ("text/plain; Charset=utf-8", "text/plain", "utf-8"),
        ("image/png", "image/png", nil),
        ("IMAGE/PNG", "image/png", nil),
        (" text/html ", "text/html", nil),
        ("text/html\t", "text/html", nil),
        ("text/\u{C4}", "text/\u{E4}", nil),
        ("multipart/form-data; boundary=xyz", "multipart/form-data", nil),
    ] as [(String, String, String?)])
    func contentType(_ value: String, _ mimeType: String, _ encoding: String?) throws {
        let made = try response(["Content-Type": value])
        #expect(made.mimeType == mimeType)
        #expect(made.textEncodingName == encoding)
    }

    @Test("the Content-Type field is found whatever the case of its name")
    func contentTypeNameCase() throws {
        let made = try response(["content-type": "text/css; charset=utf-8"])
        #expect(made.mimeType == "text/css")
        #expect(made.textEncodingName == "utf-8")
    }

    @Test("without Content-Type there is no mimeType and no encoding")
    func noContentType() throws {
        let made = try response(["X-Other": "1"])
        #expect(made.mimeType == nil)
        #expect(made.textEncodingName == nil)
    }

    // MARK: Content-Length

    @Test("expectedContentLength comes from Content-Length", arguments: [
        ("0", Int64(0)), ("12", 12), ("1048576", 1_048_576), ("5000000000", 5_000_000_000),
    ])
    func contentLength(_ value: String, _ expected: Int64) throws {
        #expect(try response(["Content-Length": value]).expectedContentLength == expected)
        #expect(try response(["content-length": value]).expectedContentLength == expected)
    }

    @Test("expectedContentLength is -1 without a usable Content-Length", arguments: [
        nil, "abc", "-5", "", "1.5",
    ] as [String?])
    func unknownContentLength(_ value: String?) throws {
        let fields = value.map { ["Content-Length": $0] } ?? ["X-Other": "1"]
        #expect(try response(fields).expectedContentLength == -1)
    }

    // MARK: Field lookup

    @Test("value(forHTTPHeaderField:) ignores case", arguments: ["ETag", "etag", "ETAG", "eTaG"])
    func valueLookupIgnoresCase(_ name: String) throws {
        let made = try response(["ETag": "\"abc\"", "Cache-Control": "no-store"])
        #expect(made.value(forHTTPHeaderField: name) == "\"abc\"")
    }

    @Test("value(forHTTPHeaderField:) of an absent field is nil")
    func valueLookupAbsent() throws {
        let made = try response(["ETag": "\"abc\""])
        #expect(made.value(forHTTPHeaderField: "Last-Modified") == nil)
        #expect(made.value(forHTTPHeaderField: "ETa") == nil)
    }

    // MARK: suggestedFilename

    @Test("suggestedFilename comes from Content-Disposition's filename", arguments: [
        ("attachment; filename=\"summary.pdf\"", "summary.pdf"),
        ("attachment; filename=plain.txt", "plain.txt"),
        ("inline; filename=\"with space.txt\"", "with space.txt"),
        ("attachment;filename=\"tight.bin\"", "tight.bin"),
        ("attachment; size=10; filename=\"later.csv\"", "later.csv"),
        ("attachment; FILENAME=\"upper.txt\"", "upper.txt"),
    ])
    func filenameFromDisposition(_ disposition: String, _ expected: String) throws {
        let made = try response(["Content-Disposition": disposition])
        #expect(made.suggestedFilename == expected)
    }

    @Test("a filename's directories are stripped, so it cannot name another place", arguments: [
        ("attachment; filename=\"../../etc/passwd\"", "passwd"),
        ("attachment; filename=../../etc/passwd", "passwd"),
        ("attachment; filename=\"/etc/shadow\"", "shadow"),
        ("attachment; filename=\"dir/sub/name.txt\"", "name.txt"),
        ("attachment; filename=\"./hidden/../x.bin\"", "x.bin"),
    ])
    func pathTraversalStripped(_ disposition: String, _ expected: String) throws {
        let made = try response(["Content-Disposition": disposition])
        #expect(made.suggestedFilename == expected)
    }

    @Test("a filename that is only a directory reference falls back to the URL", arguments: [
        "attachment; filename=\"..\"", "attachment; filename=\".\"", "attachment; filename=\"\"",
        "attachment", "inline",
    ])
    func unusableFilenameFallsBack(_ disposition: String) throws {
        let made = try response(["Content-Disposition": disposition])
        #expect(made.suggestedFilename == "report.pdf")
    }

    @Test("a filename of just \"/\" is no file name and falls back to the URL")
    func slashFilenameFallsBack() throws {
        let made = try response(["Content-Disposition": "attachment; filename=\"/\""])
        #expect(made.suggestedFilename == "report.pdf")
    }

    @Test("a quoted filename may hold a semicolon (RFC 6266 quoted-string)")
    func quotedFilenameWithSemicolon() throws {
        let made = try response(["Content-Disposition": "attachment; filename=\"a;b.txt\""])
        #expect(made.suggestedFilename == "a;b.txt")
    }

    @Test("without Content-Disposition, suggestedFilename is the URL's last path component")
    func filenameFromURL() throws {
        #expect(try response().suggestedFilename == "report.pdf")
        #expect(try response(url: URL(string: "http://example.com/a/b.txt?version=2#top")!).suggestedFilename == "b.txt")
        #expect(try response(url: URL(string: "http://example.com/a/archive.tar.gz")!).suggestedFilename == "archive.tar.gz")
    }

    @Test("a URL without a path gives \"Unknown\"", arguments: ["http://example.com", "http://example.com/"])
    func filenameUnknown(_ url: String) throws {
        #expect(try response(url: URL(string: url)!).suggestedFilename == "Unknown")
    }

    @Test("a filename taken from the URL holds no path separator, even when the URL encodes one")
    func filenameFromURLHasNoSeparator() throws {
        let made = try response(url: URL(string: "http://example.com/download/..%2F..%2Fetc%2Fpasswd")!)
        let name = try #require(made.suggestedFilename)
        #expect(!name.contains("/"))
        #expect(name != ".." && name != "." && !name.isEmpty)
    }

    @Test("a plain URLResponse suggests the URL's last component, or \"Unknown\"")
    func plainResponseFilename() {
        let plain = URLResponse(url: fileURL, mimeType: "application/pdf", expectedContentLength: 10, textEncodingName: nil)
        #expect(plain.suggestedFilename == "report.pdf")
        #expect(plain.mimeType == "application/pdf")
        #expect(plain.expectedContentLength == 10)
        let bare = URLResponse(url: URL(string: "http://example.com/")!, mimeType: nil, expectedContentLength: -1, textEncodingName: nil)
        #expect(bare.suggestedFilename == "Unknown")
    }

    // MARK: Status phrases

    @Test("localizedString(forStatusCode:) gives the standard phrase", arguments: [
        (200, "OK"), (201, "Created"), (204, "No Content"), (206, "Partial Content"), (301, "Moved Permanently"),
        (302, "Found"), (304, "Not Modified"), (307, "Temporary Redirect"), (400, "Bad Request"), (401, "Unauthorized"),
        (403, "Forbidden"), (404, "Not Found"), (500, "Internal Server Error"), (502, "Bad Gateway"),
        (503, "Service Unavailable"),
    ])
    func statusPhrases(_ code: Int, _ phrase: String) {
        #expect(HTTPURLResponse.localizedString(forStatusCode: code) == phrase)
    }

    @Test("localizedString(forStatusCode:) has some text for any code", arguments: [0, 42, 199, 299, 399, 499, 599, 999, -1])
    func statusPhrasesUnknown(_ code: Int) {
        #expect(!HTTPURLResponse.localizedString(forStatusCode: code).isEmpty)
    }
}
