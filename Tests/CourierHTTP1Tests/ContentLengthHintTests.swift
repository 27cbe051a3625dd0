import CourierCore
@testable import CourierHTTP1
import Testing

/// The Content-Length the parser leaves on a response head (``HTTPResponseHead/validatedContentLength``),
/// read from the same fields it frames the body by; and the field lines a connection keeps for
/// the shared fields it sends again and again.
@Suite("Content-Length on parsed heads, and reused field lines")
struct ContentLengthHintTests {
    /// The final head parsed from `text`, fed whole or a byte at a time, answering `method`.
    private func head(_ text: String, method: HTTPMethod = .get, byteByByte: Bool) throws -> HTTPResponseHead? {
        var parser = HTTP1ResponseParser(options: HTTP1ParserOptions())
        parser.expectResponse(to: method)
        let bytes = Array(text.utf8)
        var offset = 0
        var fed = byteByByte ? 1 : bytes.count
        while offset < bytes.count {
            let step = try bytes.withUnsafeBytes { try parser.next(UnsafeRawBufferPointer(rebasing: $0[offset..<fed])) }
            offset += step.consumed
            if case .head(let head)? = step.event { return head }
            if step.consumed == 0 {
                guard fed < bytes.count else { return nil }
                fed += 1
            }
        }
        return nil
    }

    static let cases: [(response: String, method: HTTPMethod, expected: Int?)] = [
        ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", .get, 5),
        ("HTTP/1.1 200 OK\r\ncontent-length:  12 \r\nServer: t\r\n\r\n", .get, 12),
        ("HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\nContent-Length: 3\r\n\r\nabc", .get, 3),
        ("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", .get, 0),
        ("HTTP/1.1 200 OK\r\nContent-Length: 123456789012345678\r\n\r\n", .get, 123_456_789_012_345_678),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", .get, -1),
        ("HTTP/1.1 200 OK\r\nServer: t\r\n\r\n", .get, -1),
        ("HTTP/1.0 200 OK\r\n\r\n", .get, -1),
        ("HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n", .head, 42),
        ("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", .get, 10),
        ("HTTP/1.1 204 No Content\r\n\r\n", .get, -1),
        ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", .get, nil),
        ("HTTP/1.1 200 Connection established\r\nContent-Length: 9\r\n\r\n", .connect, nil),
    ]

    @Test("the parser leaves the Content-Length it framed by on the head: its value, -1 for none, nil when it read none",
          arguments: cases.indices, [false, true])
    func parsedHeads(_ index: Int, byteByByte: Bool) throws {
        let (response, method, expected) = Self.cases[index]
        let parsed = try #require(try head(response, method: method, byteByByte: byteByByte))
        #expect(parsed.validatedContentLength == expected, "\(response.debugDescription)")
    }

    @Test("refused framing throws, as before: no head carries a length the fields do not agree on")
    func conflictingLengths() {
        #expect(throws: HTTP1ResponseError.self) {
            _ = try head("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", byteByByte: false)
        }
        #expect(throws: HTTP1ResponseError.self) {
            _ = try head("HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789\r\n\r\n", byteByByte: false)
        }
    }

    // MARK: Reused field lines

    private func request(_ fields: HTTPFields, _ target: String) -> HTTPRequestHead {
        HTTPRequestHead(method: .get, target: target, authority: "example.com", fields: fields)
    }

    private func encoded(_ head: HTTPRequestHead, reusing lines: inout HTTP1RequestEncoder.EncodedFieldLines?) -> String {
        var buffer = ByteBuffer()
        HTTP1RequestEncoder.encodeValidatedHead(head, framing: .contentLength(2), into: &buffer, reusing: &lines)
        return String(decoding: buffer.readableBytesArray(), as: UTF8.self)
    }

    private func encoded(_ head: HTTPRequestHead) -> String {
        var buffer = ByteBuffer()
        HTTP1RequestEncoder.encodeValidatedHead(head, framing: .contentLength(2), into: &buffer)
        return String(decoding: buffer.readableBytesArray(), as: UTF8.self)
    }

    @Test("a shared set of fields is written once and its lines copied into the next requests that carry it")
    func sharedLinesAreReused() throws {
        let shared = try HTTPFields([("User-Agent", "t/1"), ("Host", "dropped.example"), ("Accept", "*/*")]).validated()
        var lines: HTTP1RequestEncoder.EncodedFieldLines?
        #expect(encoded(request(shared, "/a"), reusing: &lines) == encoded(request(shared, "/a")))
        #expect(encoded(request(shared, "/a")) == "GET /a HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t/1\r\nAccept: */*\r\nContent-Length: 2\r\n\r\n")
        let kept = try #require(lines)
        #expect(kept.fields.isIdentical(to: shared))
        #expect(String(decoding: kept.lines, as: UTF8.self) == "User-Agent: t/1\r\nAccept: */*\r\n")

        // The kept lines are what the next request with those fields gets, as they are.
        lines = HTTP1RequestEncoder.EncodedFieldLines(fields: shared, lines: Array("X-Kept: lines\r\n".utf8))
        #expect(encoded(request(shared, "/b"), reusing: &lines) == "GET /b HTTP/1.1\r\nHost: example.com\r\nX-Kept: lines\r\nContent-Length: 2\r\n\r\n")
    }

    @Test("fields that are not the kept ones are written field by field, and only a shared set replaces the kept lines")
    func otherFieldsAreWritten() throws {
        let shared = try HTTPFields([("User-Agent", "t/1"), ("Accept", "*/*")]).validated()
        var lines: HTTP1RequestEncoder.EncodedFieldLines?
        _ = encoded(request(shared, "/"), reusing: &lines)

        var withCookie = shared
        withCookie.append(name: "Cookie", value: "a=1")
        #expect(encoded(request(withCookie, "/c"), reusing: &lines) == encoded(request(withCookie, "/c")))
        #expect(try #require(lines).fields.isIdentical(to: shared), "fields of one request are not kept")

        let equalButApart = try HTTPFields([("User-Agent", "t/1"), ("Accept", "*/*")]).validated()
        let other = try HTTPFields([("Accept", "text/html"), ("Connection", "close")]).validated()
        for fields in [equalButApart, other, shared, HTTPFields()] {
            #expect(encoded(request(fields, "/d"), reusing: &lines) == encoded(request(fields, "/d")))
        }
        #expect(try #require(lines).fields.isIdentical(to: shared))
        _ = encoded(request(other, "/e"), reusing: &lines)
        #expect(try #require(lines).fields.isIdentical(to: other))
        #expect(String(decoding: try #require(lines).lines, as: UTF8.self) == "Accept: text/html\r\n", "Connection is the connection's own")
    }
}
