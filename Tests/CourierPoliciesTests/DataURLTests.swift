import CourierPolicies
import Foundation
import Testing
import _CourierTestSupport

@Suite("DataURL")
struct DataURLTests {
    /// One row: a URL and what it must parse to.
    struct Case: Sendable, CustomStringConvertible {
        var url: String
        var mimeType: String
        var charset: String?
        var data: [UInt8]
        var description: String { url }

        /// A row whose data is the UTF-8 of `text`.
        init(_ url: String, _ mimeType: String, _ charset: String?, _ text: String) {
            self.url = url
            self.mimeType = mimeType
            self.charset = charset
            self.data = Array(text.utf8)
        }

        /// A row whose data is `bytes`.
        static func raw(_ url: String, _ mimeType: String, _ charset: String?, _ bytes: [UInt8]) -> Case {
            var row = Case(url, mimeType, charset, "")
            row.data = bytes
            return row
        }
    }

    static let cases: [Case] = [
        // Plain text, RFC 2397's defaults.
        .init("data:,A%20brief%20note", "text/plain", "US-ASCII", "A brief note"),
        .init("data:,Hello%2C%20World!", "text/plain", "US-ASCII", "Hello, World!"),
        .init("data:,", "text/plain", "US-ASCII", ""),
        .init("data:,a,b", "text/plain", "US-ASCII", "a,b"),
        // Base64, padded and not.
        .init("data:text/plain;base64,SGVsbG8sIFdvcmxkIQ==", "text/plain", nil, "Hello, World!"),
        .init("data:;base64,SGVsbG8sIFdvcmxkIQ", "text/plain", "US-ASCII", "Hello, World!"),
        .init("data:;base64,SGVsbG8", "text/plain", "US-ASCII", "Hello"),
        .init("data:;base64,SGVsbG8=", "text/plain", "US-ASCII", "Hello"),
        .init("data:;base64,YQ", "text/plain", "US-ASCII", "a"),
        .init("data:;base64,YQ==", "text/plain", "US-ASCII", "a"),
        .init("data:;base64,YWI", "text/plain", "US-ASCII", "ab"),
        .init("data:;base64,", "text/plain", "US-ASCII", ""),
        // Unused low bits of the last character are ignored (forgiving-base64).
        .init("data:;base64,YR", "text/plain", "US-ASCII", "a"),
        .init("data:;base64,YR==", "text/plain", "US-ASCII", "a"),
        .init("data:;base64,YWJ", "text/plain", "US-ASCII", "ab"),
        // Whitespace inside base64, literal and percent-encoded.
        .init("data:;base64,SGVs bG8s%20IFdv%0AcmxkIQ==", "text/plain", "US-ASCII", "Hello, World!"),
        .init("data:;base64, S\tG\r\nk\u{0C}= ", "text/plain", "US-ASCII", "Hi"),
        .init("data:;base64,SGk%3D", "text/plain", "US-ASCII", "Hi"),
        // Media types and charsets.
        .init("data:text/html;charset=utf-8,<h1>", "text/html", "utf-8", "<h1>"),
        .init("data:text/plain;charset=\"utf-8\",x", "text/plain", "utf-8", "x"),
        .init("data:text/plain;charset=\"ut\\f-8\",x", "text/plain", "utf-8", "x"),
        .init("data:Text/HTML,x", "text/html", nil, "x"),
        .init("data:text/plain,x", "text/plain", nil, "x"),
        .init("data:image/svg+xml;charset=US-ASCII,x", "image/svg+xml", "US-ASCII", "x"),
        .init("data:;charset=utf-8,x", "text/plain", "utf-8", "x"),
        .init("data:;foo=bar,x", "text/plain", "US-ASCII", "x"),
        .init("data: text/plain ; charset = utf-8 ,x", "text/plain", "utf-8", "x"),
        .init("data:text/plain;foo;bar=baz;charset=iso-8859-1,x", "text/plain", "iso-8859-1", "x"),
        .init("data:text/plain;charset=a;charset=b,x", "text/plain", "a", "x"),
        .init("data:text/plain;charset=;charset=b,x", "text/plain", "b", "x"),
        .init("data:text/plain;charset=,x", "text/plain", nil, "x"),
        .init("data:text/plain;charset=\"\",x", "text/plain", nil, "x"),
        .init("data:text/plain;charset=a b,x", "text/plain", nil, "x"),
        // Upper case scheme and marker.
        .init("DATA:,x", "text/plain", "US-ASCII", "x"),
        .init("Data:;Base64,SGk=", "text/plain", "US-ASCII", "Hi"),
        .init("DATA:TEXT/PLAIN;CHARSET=UTF-8;BASE64,SGk=", "text/plain", "UTF-8", "Hi"),
        .init("data:text/plain;charset=utf-8;base64,SGk=", "text/plain", "utf-8", "Hi"),
        .init("data:text/plain; base64 ,SGk=", "text/plain", nil, "Hi"),
        // `base64` that is not the final marker: the data is not base64.
        .init("data:text/plain;base64;charset=utf-8,SGk=", "text/plain", "utf-8", "SGk="),
        .init("data:base64,SGk=", "text/plain", "US-ASCII", "SGk="),
        .init("data:;base64x,SGk=", "text/plain", "US-ASCII", "SGk="),
        .init("data:;base64=1,SGk=", "text/plain", "US-ASCII", "SGk="),
        // Invalid media types fall back to text/plain;charset=US-ASCII, parameters dropped.
        .init("data:text,x", "text/plain", "US-ASCII", "x"),
        .init("data:text/,x", "text/plain", "US-ASCII", "x"),
        .init("data:/plain,x", "text/plain", "US-ASCII", "x"),
        .init("data:text/pl@in;charset=utf-8,x", "text/plain", "US-ASCII", "x"),
        .init("data:text/plain/x;charset=utf-8,x", "text/plain", "US-ASCII", "x"),
        .init("data:te xt/plain,x", "text/plain", "US-ASCII", "x"),
        .init("data:tëxt/plain,x", "text/plain", "US-ASCII", "x"),
        .init("data:text%2Fplain,x", "text/plain", "US-ASCII", "x"),
        // The fragment is not data.
        .init("data:,abc#frag", "text/plain", "US-ASCII", "abc"),
        .init("data:;base64,SGk=#x", "text/plain", "US-ASCII", "Hi"),
        .init("data:,#", "text/plain", "US-ASCII", ""),
        .init("data:,a%23b#c", "text/plain", "US-ASCII", "a#b"),
        // Bytes beyond ASCII, escaped or literal.
        .raw("data:,%E2%82%AC", "text/plain", "US-ASCII", [0xE2, 0x82, 0xAC]),
        .raw("data:,€", "text/plain", "US-ASCII", [0xE2, 0x82, 0xAC]),
        .raw("data:application/octet-stream,%00%ff%7F", "application/octet-stream", nil, [0x00, 0xFF, 0x7F]),
        // Invalid escapes stay as they are.
        .init("data:,100%", "text/plain", "US-ASCII", "100%"),
        .init("data:,%zz%2", "text/plain", "US-ASCII", "%zz%2"),
        .init("data:,%%41", "text/plain", "US-ASCII", "%A"),
        .init("data:,%4", "text/plain", "US-ASCII", "%4"),
        // A plus is not a space.
        .init("data:,a+b", "text/plain", "US-ASCII", "a+b"),
    ]

    @Test("parsing", arguments: cases)
    func parses(_ row: Case) throws {
        let parsed = try DataURL.parse(row.url)
        #expect(parsed.mimeType == row.mimeType)
        #expect(parsed.textEncodingName == row.charset)
        #expect(parsed.data == row.data)
        #expect(parsed == DataURL(mimeType: row.mimeType, textEncodingName: row.charset, data: row.data))
    }

    @Test("malformed URLs are refused", arguments: [
        "",
        "dat",
        "data",
        "data:",
        "data:text/plain",
        "data:text/plain;base64",
        "data:text/html#x,abc",
        "http://example.test/,x",
        " data:,x",
        "data;,x",
        "data:;base64,@@@",
        "data:;base64,SGk!",
        "data:;base64,A",
        "data:;base64,SGVsb",
        "data:;base64,SGk=SGk=",
        "data:;base64,S===",
        "data:;base64,SGk===",
        "data:;base64,YQ=",
        "data:;base64,=",
        "data:;base64,====",
        "data:;base64,SG-_",
        "data:;base64,SGk%",
        "data:;base64,%E2%82%AC",
        "data:;base64,€€€€",
    ])
    func refused(_ url: String) {
        #expect(throws: DataURLError.self) { try DataURL.parse(url) }
    }

    @Test("the error's description is its message")
    func errorDescription() {
        do throws(DataURLError) {
            _ = try DataURL.parse("data:text/plain")
            Issue.record("a URL without a comma must be refused")
        } catch {
            #expect(!error.message.isEmpty)
            #expect(error.description == error.message)
        }
    }

    @Test("a URL longer than the limit is refused before it is read")
    func sizeLimit() {
        #expect(DataURL.maxDataURLBytes == 64 * 1024 * 1024)
        let huge = "data:," + String(repeating: "A", count: DataURL.maxDataURLBytes)
        #expect(huge.utf8.count > DataURL.maxDataURLBytes)
        #expect(throws: DataURLError.self) { try DataURL.parse(huge) }
    }

    /// Plain, and wrapped in lines of 64 or 76 characters (CR LF or LF), as Foundation writes it.
    static let encodingOptions: [Data.Base64EncodingOptions] = [
        [], [.lineLength64Characters], [.lineLength76Characters], [.lineLength64Characters, .endLineWithLineFeed],
    ]

    @Test("all 256 byte values round-trip through base64")
    func binaryRoundTrip() throws {
        for options in Self.encodingOptions {
            try roundTrip(options: options)
        }
    }

    private func roundTrip(options: Data.Base64EncodingOptions) throws {
        let bytes = (0...255).map { UInt8($0) }
        let encoded = Data(bytes).base64EncodedString(options: options)
        let parsed = try DataURL.parse("data:application/octet-stream;base64," + encoded)
        #expect(parsed.mimeType == "application/octet-stream")
        #expect(parsed.textEncodingName == nil)
        #expect(parsed.data == bytes)

        // The same without padding, and with the base64 percent-encoded as a URL would carry it.
        let unpadded = String(encoded.unicodeScalars.filter { $0 != "=" })
        #expect(try DataURL.parse("data:;base64," + unpadded).data == bytes)
        #expect(try DataURL.parse("data:;base64," + Self.percentEscaped(encoded)).data == bytes)
    }

    /// `text` with `+`, `/`, `=`, CR and LF percent-encoded.
    static func percentEscaped(_ text: String) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "+", "/", "=", "\r", "\n":
                let hex = String(scalar.value, radix: 16, uppercase: true)
                result += "%" + (hex.count == 1 ? "0" + hex : hex)
            default:
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    @Test("random byte strings of every length round-trip through base64", arguments: 0..<8 as Range<UInt64>)
    func randomRoundTrip(_ seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        for _ in 0..<50 {
            let bytes = (0..<random.below(40)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let encoded = Data(bytes).base64EncodedString()
            #expect(try DataURL.parse("data:;base64," + encoded).data == bytes)
            #expect(try DataURL.parse("data:;base64," + String(encoded.unicodeScalars.filter { $0 != "=" })).data == bytes)
        }
    }

    /// Pieces that steer random input into every branch of the parser.
    static let pieces = [
        "data:", "DATA:", "data", ":", ",", ";", ";base64", "base64", "BASE64", "text/plain", "/", "text", "charset=",
        "charset=\"", "\"", "\\", "=", "==", "%", "%2", "%zz", "%2C", "%E2%82%AC", "%3D", "#", " ", "\t", "\n", "\r\n",
        "A", "SGk", "YR", "+", "€", "é", "\u{0}", "\u{7F}", "\u{FFFD}", "😀",
    ]

    @Test("random input never traps, and what parses is well formed", arguments: 1...200 as ClosedRange<UInt64>)
    func randomInput(_ seed: UInt64) {
        var random = SplitMix64(seed: seed)
        for _ in 0..<50 {
            var url = random.chance(70) ? random.pick(["data:", "data:;base64,", "DATA:text/plain;base64,", "data:,"]) : ""
            for _ in 0..<random.below(24) {
                if random.chance(70) {
                    url += random.pick(Self.pieces)
                } else if let scalar = Unicode.Scalar(UInt32(random.below(0x11_0000))) {
                    url.unicodeScalars.append(scalar)
                } else {
                    url += "\u{FFFD}"
                }
            }
            let outcome: DataURL?
            do throws(DataURLError) {
                outcome = try DataURL.parse(url)
            } catch {
                #expect(!error.message.isEmpty)
                outcome = nil
            }
            guard let first = outcome else { continue }
            #expect(first.mimeType == first.mimeType.lowercased(), "\(url.debugDescription)")
            #expect(first.mimeType.contains("/"), "\(url.debugDescription)")
            #expect(first.data.count <= url.utf8.count, "\(url.debugDescription)")
            #expect((try? DataURL.parse(url)) == first, "parsing is deterministic: \(url.debugDescription)")
        }
    }
}
