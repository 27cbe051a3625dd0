@testable import Courier
import Foundation
import Testing

/// `LocalLoad.loads(_:)` reads the scheme from the URL's own bytes when it can. Over URLs of
/// every kind it must agree with Foundation's `scheme`, lower-cased: `data` and `file` only.
@Suite("LocalLoad's scheme check")
struct LocalLoadSchemeTests {
    static let strings = [
        "data:,hello", "DATA:text/plain;base64,aGk=", "Data:,x", "file:///etc/hosts", "FILE:///tmp/x", "file:",
        "file://localhost/tmp/a%20b", "http://127.0.0.1/", "https://example.invalid/data:", "ftp://h/file",
        "datax:y", "dat:y", "fil:///x", "files:///x", "mailto:a@b.invalid", "urn:data:x", "about:blank",
        "http://127.0.0.1:8080/file:/", "HTTP://127.0.0.1/", "d:ata", "file", "data",
    ]

    static func expected(_ url: URL) -> Bool {
        ["data", "file"].contains(url.scheme?.lowercased())
    }

    @Test("agrees with Foundation's scheme", arguments: strings)
    func agreesWithFoundation(_ string: String) throws {
        let url = try #require(URL(string: string))
        #expect(LocalLoad.loads(url) == Self.expected(url), "\(string)")
    }

    /// A URL with a base: its own string is relative, so the check goes through `scheme`.
    @Test func relativeURLsUseTheirBase() throws {
        let base = try #require(URL(string: "file:///tmp/dir/"))
        let relative = try #require(URL(string: "name.txt", relativeTo: base))
        #expect(LocalLoad.loads(relative))
        let web = try #require(URL(string: "http://127.0.0.1/dir/"))
        #expect(!LocalLoad.loads(try #require(URL(string: "data.txt", relativeTo: web))))
        #expect(LocalLoad.loads(try #require(URL(string: "data:,x", relativeTo: web))))
    }

    @Test func fileURLsMadeFromPathsLoad() {
        #expect(LocalLoad.loads(URL(fileURLWithPath: "/tmp/some file.txt")))
        #expect(LocalLoad.loads(URL(filePath: "/")))
    }
}
