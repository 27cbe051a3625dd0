import CourierCore
import CourierHTTP1
import Testing

/// The three names that decide framing (Content-Length, Transfer-Encoding, Connection) are
/// compared eight bytes at a time after lower-casing by bit: they must be recognized in every
/// mix of upper and lower case, and names one byte away must not be.
@Suite("Framing field names")
struct FramingFieldNameTests {
    /// The body the parser delivers and whether the connection stays open, for a response of
    /// `fields` and the bytes after the head.
    private func parse(_ fields: String, then rest: String) -> (body: String, reuse: HTTP1ConnectionReuse)? {
        var parser = HTTP1ResponseParser()
        parser.expectResponse(to: .get)
        let input = Array("HTTP/1.1 200 OK\r\n\(fields)\r\n\r\n\(rest)".utf8)
        var offset = 0
        var body: [UInt8] = []
        while true {
            guard let step = try? input.withUnsafeBytes({ try parser.next(UnsafeRawBufferPointer(rebasing: $0[offset...])) }) else {
                return nil
            }
            if case .body(let range)? = step.event { body += input[(offset + range.lowerBound)..<(offset + range.upperBound)] }
            offset += step.consumed
            switch step.event {
            case .end?: return (String(decoding: body, as: UTF8.self), parser.connectionReuse)
            case nil: return (String(decoding: body, as: UTF8.self), parser.connectionReuse)
            default: continue
            }
        }
    }

    /// `name` with the case of each letter chosen by the bits of `pattern`.
    private func cased(_ name: String, _ pattern: UInt32) -> String {
        String(name.enumerated().map { index, character in
            pattern >> (index % 32) & 1 == 1 ? Character(character.uppercased()) : Character(character.lowercased())
        })
    }

    @Test("every mix of case is recognized")
    func everyCase() throws {
        var generator = SystemRandomNumberGenerator()
        let patterns: [UInt32] = [0, ~0] + (0..<62).map { _ in UInt32.random(in: .min ... .max, using: &generator) }
        for pattern in patterns {
            let length = try #require(parse("\(cased("content-length", pattern)): 3", then: "abcdef"))
            #expect(length.body == "abc", "\(cased("content-length", pattern))")
            let chunked = try #require(parse("\(cased("transfer-encoding", pattern)): chunked", then: "2\r\nab\r\n0\r\n\r\n"))
            #expect(chunked.body == "ab", "\(cased("transfer-encoding", pattern))")
            let close = try #require(parse("Content-Length: 0\r\n\(cased("connection", pattern)): close", then: ""))
            #expect(close.reuse == .close, "\(cased("connection", pattern))")
        }
    }

    @Test("names one byte away are other fields")
    func nearMisses() throws {
        // Each differs from a framing name in one byte, at the start, in the middle or at the
        // end; all are tokens. Without a length the body runs to the close.
        for name in ["dontent-length", "content_length", "content-lengtg", "Xransfer-encoding", "transfer-encodinf",
                     "transfer~encoding", "donnection", "connectioo", "connect1on"] {
            let parsed = try #require(parse("\(name): 3", then: "abcdef"), "\(name)")
            #expect(parsed.body == "abcdef", "\(name)")
            #expect(parsed.reuse == .close, "\(name)")
        }
        let kept = try #require(parse("Content-Length: 0\r\nconnectiom: close", then: ""))
        #expect(kept.reuse == .keepAlive)
    }
}
