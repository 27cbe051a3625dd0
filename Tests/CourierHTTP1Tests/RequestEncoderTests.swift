import CourierCore
import CourierHTTP1
import Testing

/// The bytes `encodeHead` writes into an empty buffer.
private func encodedBytes(_ head: HTTPRequestHead, framing: HTTP1BodyFraming) throws(HTTPFieldError) -> [UInt8] {
    var buffer = ByteBuffer()
    try HTTP1RequestEncoder.encodeHead(head, framing: framing, into: &buffer)
    return buffer.readableBytesArray()
}

/// The same, as text (every golden string here is ASCII or UTF-8).
private func encoded(_ head: HTTPRequestHead, framing: HTTP1BodyFraming = .none) throws(HTTPFieldError) -> String {
    String(decoding: try encodedBytes(head, framing: framing), as: UTF8.self)
}

/// Bytes already in the buffer before a failing encode; they must be all that is left after it.
private let previousBytes = Array("HTTP/1.1 bytes of an earlier request\r\n".utf8)

/// Encodes into a buffer that already holds `previousBytes`; returns the error and what the
/// buffer holds afterwards.
private func failure(_ head: HTTPRequestHead, framing: HTTP1BodyFraming = .none) -> (error: HTTPFieldError?, buffer: [UInt8]) {
    var buffer = ByteBuffer()
    buffer.write(contentsOf: previousBytes)
    do {
        try HTTP1RequestEncoder.encodeHead(head, framing: framing, into: &buffer)
        return (nil, buffer.readableBytesArray())
    } catch {
        return (error, buffer.readableBytesArray())
    }
}

private func head(
    _ method: HTTPMethod = .get, _ target: String = "/", authority: String = "example.com", _ fields: [(String, String)] = []
) -> HTTPRequestHead {
    HTTPRequestHead(method: method, target: target, authority: authority, fields: HTTPFields(fields))
}

@Suite("HTTP/1.1 request encoder")
struct RequestEncoderTests {
    // MARK: Golden heads

    @Test("GET without a body has no framing field")
    func getWithoutBody() throws {
        #expect(try encoded(head()) == "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
    }

    @Test("GET with caller fields writes them after Host, in order")
    func getWithFields() throws {
        let request = head(.get, "/search?q=a%20b", authority: "example.com:8080", [
            ("User-Agent", "test/1.0"), ("Accept", "*/*"), ("Accept-Language", "en"),
        ])
        #expect(try encoded(request) == """
            GET /search?q=a%20b HTTP/1.1\r
            Host: example.com:8080\r
            User-Agent: test/1.0\r
            Accept: */*\r
            Accept-Language: en\r
            \r

            """)
    }

    @Test("POST with an empty body is framed with Content-Length: 0")
    func postEmptyBody() throws {
        #expect(try encoded(head(.post, "/form"), framing: .contentLength(0))
            == "POST /form HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\n\r\n")
    }

    @Test("a body of known length is framed with Content-Length after the caller's fields")
    func postWithLength() throws {
        let request = head(.post, "/upload", [("Content-Type", "text/plain"), ("X-Request-Id", "42")])
        #expect(try encoded(request, framing: .contentLength(11)) == """
            POST /upload HTTP/1.1\r
            Host: example.com\r
            Content-Type: text/plain\r
            X-Request-Id: 42\r
            Content-Length: 11\r
            \r

            """)
    }

    @Test("Content-Length is written in decimal, however large", arguments: [
        (Int64(1), "1"), (10, "10"), (65_536, "65536"), (5_000_000_000, "5000000000"), (Int64.max, "9223372036854775807"),
    ])
    func contentLengthDecimal(_ length: Int64, _ text: String) throws {
        #expect(try encoded(head(.put, "/blob"), framing: .contentLength(length))
            == "PUT /blob HTTP/1.1\r\nHost: example.com\r\nContent-Length: \(text)\r\n\r\n")
    }

    @Test("a body of unknown length is framed with Transfer-Encoding: chunked and no Content-Length")
    func chunkedFraming() throws {
        let request = head(.put, "/stream", [("Content-Type", "application/octet-stream")])
        #expect(try encoded(request, framing: .chunked) == """
            PUT /stream HTTP/1.1\r
            Host: example.com\r
            Content-Type: application/octet-stream\r
            Transfer-Encoding: chunked\r
            \r

            """)
    }

    @Test("Host comes first, from the authority, even when the caller set one")
    func hostFromAuthorityFirst() throws {
        let request = head(.get, "/", authority: "real.example:81", [("X-First", "1"), ("Host", "evil.example"), ("X-Last", "2")])
        #expect(try encoded(request) == "GET / HTTP/1.1\r\nHost: real.example:81\r\nX-First: 1\r\nX-Last: 2\r\n\r\n")
    }

    @Test("caller fields keep their order, duplicates and the case of their names")
    func callerFieldsAsGiven() throws {
        let request = head(.get, "/", [("x-b", "2"), ("X-A", "1"), ("X-B", "3"), ("SET-ME", "v")])
        #expect(try encoded(request) == "GET / HTTP/1.1\r\nHost: example.com\r\nx-b: 2\r\nX-A: 1\r\nX-B: 3\r\nSET-ME: v\r\n\r\n")
    }

    @Test("values are written byte for byte: empty, HTAB inside, obs-text")
    func valuesVerbatim() throws {
        let request = head(.get, "/", [("X-Empty", ""), ("X-Tab", "a\tb"), ("X-Text", "caf\u{E9}")])
        let bytes = try encodedBytes(request, framing: .none)
        let expected = Array("GET / HTTP/1.1\r\nHost: example.com\r\nX-Empty: \r\nX-Tab: a\tb\r\nX-Text: caf".utf8)
            + [0xC3, 0xA9] + Array("\r\n\r\n".utf8)
        #expect(bytes == expected)
    }

    @Test("reserved caller fields are dropped, in any case", arguments: [
        "Host", "host", "HOST", "hOsT",
        "Content-Length", "content-length", "CONTENT-LENGTH", "Content-length",
        "Transfer-Encoding", "transfer-encoding", "TRANSFER-ENCODING", "Transfer-encoding",
        "Connection", "connection", "CONNECTION", "cOnNeCtIoN",
    ])
    func reservedFieldsDropped(_ name: String) throws {
        let request = head(.get, "/", [("A", "1"), (name, "42"), ("B", "2")])
        #expect(try encoded(request) == "GET / HTTP/1.1\r\nHost: example.com\r\nA: 1\r\nB: 2\r\n\r\n")
    }

    @Test("fields that only resemble reserved names are kept", arguments: [
        "Hostname", "X-Host", "Content-Type", "Content-Length-Extra", "Connection-Id", "Transfer-Encodings",
    ])
    func lookalikesKept(_ name: String) throws {
        #expect(try encoded(head(.get, "/", [(name, "v")])) == "GET / HTTP/1.1\r\nHost: example.com\r\n\(name): v\r\n\r\n")
    }

    @Test("the reserved names are exactly Host, Content-Length, Transfer-Encoding and Connection")
    func reservedNames() {
        #expect(HTTP1RequestEncoder.reservedFieldNames == ["host", "content-length", "transfer-encoding", "connection"])
    }

    @Test("a caller's Content-Length or Transfer-Encoding never changes the framing", arguments: [
        (HTTP1BodyFraming.none, ""),
        (.contentLength(3), "Content-Length: 3\r\n"),
        (.chunked, "Transfer-Encoding: chunked\r\n"),
    ])
    func callerFramingIgnored(_ framing: HTTP1BodyFraming, _ framingLine: String) throws {
        let request = head(.post, "/p", [
            ("Content-Length", "999"), ("X", "x"), ("Transfer-Encoding", "chunked"), ("content-length", "0"),
            ("Connection", "close"),
        ])
        #expect(try encoded(request, framing: framing) == "POST /p HTTP/1.1\r\nHost: example.com\r\nX: x\r\n\(framingLine)\r\n")
    }

    @Test("custom token methods and the other request-target forms", arguments: [
        (HTTPMethod("PURGE"), "/cache/key", "example.com", "PURGE /cache/key HTTP/1.1\r\nHost: example.com\r\n\r\n"),
        (HTTPMethod("M-SEARCH"), "*", "239.255.255.250:1900", "M-SEARCH * HTTP/1.1\r\nHost: 239.255.255.250:1900\r\n\r\n"),
        (.options, "*", "example.com", "OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n"),
        (.connect, "example.com:443", "example.com:443", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
        (.get, "http://example.com/x?y", "example.com", "GET http://example.com/x?y HTTP/1.1\r\nHost: example.com\r\n\r\n"),
        (.get, "/", "[::1]:8080", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n"),
    ])
    func methodsAndTargets(_ method: HTTPMethod, _ target: String, _ authority: String, _ expected: String) throws {
        #expect(try encoded(head(method, target, authority: authority)) == expected)
    }

    @Test("encoding appends after what the buffer already holds")
    func appendsToBuffer() throws {
        var buffer = ByteBuffer()
        buffer.write("leftover")
        try HTTP1RequestEncoder.encodeHead(head(.get, "/a"), framing: .none, into: &buffer)
        try HTTP1RequestEncoder.encodeHead(head(.get, "/b"), framing: .none, into: &buffer)
        let text = String(decoding: buffer.readableBytesArray(), as: UTF8.self)
        #expect(text == "leftoverGET /a HTTP/1.1\r\nHost: example.com\r\n\r\nGET /b HTTP/1.1\r\nHost: example.com\r\n\r\n")
    }

    @Test("an upgrade writes Connection: Upgrade in place of the caller's Connection field")
    func upgrade() throws {
        var fields = HTTPFields()
        fields.append(name: "Connection", value: "keep-alive")
        fields.append(name: "Upgrade", value: "websocket")
        var buffer = ByteBuffer()
        try HTTP1RequestEncoder.encodeHead(HTTPRequestHead(method: .get, target: "/chat", authority: "example.com", fields: fields), framing: .none, upgrade: true, into: &buffer)
        let text = String(decoding: buffer.readableBytesArray(), as: UTF8.self)
        #expect(text == "GET /chat HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
    }

    // MARK: Chunks

    @Test("a chunk header is the size in hexadecimal and CRLF", arguments: [
        (1, "1\r\n"), (9, "9\r\n"), (10, "a\r\n"), (15, "f\r\n"), (16, "10\r\n"), (255, "ff\r\n"), (256, "100\r\n"),
        (4096, "1000\r\n"), (65_535, "ffff\r\n"), (1 << 20, "100000\r\n"), (Int.max, "7fffffffffffffff\r\n"),
    ])
    func chunkHeader(_ length: Int, _ expected: String) {
        var buffer = ByteBuffer()
        HTTP1RequestEncoder.encodeChunkHeader(length: length, into: &buffer)
        #expect(String(decoding: buffer.readableBytesArray(), as: UTF8.self) == expected)
    }

    @Test("a chunk footer is CRLF")
    func chunkFooter() {
        var buffer = ByteBuffer()
        HTTP1RequestEncoder.encodeChunkFooter(into: &buffer)
        #expect(buffer.readableBytesArray() == [0x0D, 0x0A])
    }

    @Test("the last chunk is a zero size and an empty trailer section")
    func lastChunk() {
        var buffer = ByteBuffer()
        HTTP1RequestEncoder.encodeLastChunk(into: &buffer)
        #expect(String(decoding: buffer.readableBytesArray(), as: UTF8.self) == "0\r\n\r\n")
    }

    @Test("a whole chunked request")
    func wholeChunkedRequest() throws {
        var buffer = ByteBuffer()
        try HTTP1RequestEncoder.encodeHead(head(.post, "/s"), framing: .chunked, into: &buffer)
        for chunk in ["hello", ", chunked ", "world of sixteen"] {
            HTTP1RequestEncoder.encodeChunkHeader(length: chunk.utf8.count, into: &buffer)
            buffer.write(chunk)
            HTTP1RequestEncoder.encodeChunkFooter(into: &buffer)
        }
        HTTP1RequestEncoder.encodeLastChunk(into: &buffer)
        #expect(String(decoding: buffer.readableBytesArray(), as: UTF8.self) == """
            POST /s HTTP/1.1\r
            Host: example.com\r
            Transfer-Encoding: chunked\r
            \r
            5\r
            hello\r
            a\r
            , chunked \r
            10\r
            world of sixteen\r
            0\r
            \r

            """)
    }

    // MARK: Validation

    @Test("a valid head passes validate()")
    func validHeadValidates() throws {
        try HTTP1RequestEncoder.validate(head(.post, "/x?y=1", [("X-A", "a\tb c"), ("Empty", ""), ("!#$%&'*+-.^_`|~", "v")]))
    }

    @Test("CR, LF, NUL and other controls in a value are refused, naming the field", arguments: [
        "a\rb", "a\nb", "ok\r\nX-Injected: 1", "nul\u{0}byte", "\u{1}", "bell\u{7}", "esc\u{1B}[0m", "vt\u{B}", "ff\u{C}",
        "us\u{1F}", "del\u{7F}", "trailing\r\n", "\r\n\r\nGET /smuggled HTTP/1.1",
    ])
    func controlInValue(_ value: String) {
        let result = failure(head(.get, "/", [("Accept", "*/*"), ("X-Test", value)]))
        #expect(result.error == .invalidValue(name: "X-Test"))
        #expect(result.buffer == previousBytes)
    }

    @Test("fields checked once are not checked again until one is added, and then are")
    func validatedFieldsCheckedAgainAfterAppend() throws {
        let checked = try HTTPFields([("Accept", "*/*"), ("X-A", "1")]).validated()
        try HTTP1RequestEncoder.validate(HTTPRequestHead(method: .get, target: "/", authority: "h", fields: checked))
        var grown = checked
        grown.append(name: "X-Test", value: "a\r\nX-Injected: 1")
        #expect(throws: HTTPFieldError.invalidValue(name: "X-Test")) {
            try HTTP1RequestEncoder.validate(HTTPRequestHead(method: .get, target: "/", authority: "h", fields: grown))
        }
        var shrunk = grown
        shrunk.removeAll(named: "X-Test")
        try shrunk.validate()
        #expect(throws: HTTPFieldError.invalidName("X A")) { try HTTPFields([("X A", "v")]).validated() }
        // The mark is not part of the value: equal fields compare equal either way.
        #expect(checked == HTTPFields([("Accept", "*/*"), ("X-A", "1")]))
    }

    @Test("a non-token field name is refused", arguments: [
        "", " ", "X A", "X-A ", " X-A", "X:A", "X-A:", ":authority", "X\u{E9}", "Caf\u{E9}", "X\tA", "X\r\nY", "X\u{0}",
        "(X)", "X\"", "X/Y", "X;Y", "X,Y", "X=Y", "X@Y", "X[Y]", "X{Y}", "X?Y", "X\\Y", "<X>", "\u{7F}",
    ])
    func nonTokenName(_ name: String) {
        let result = failure(head(.get, "/", [("Accept", "*/*"), (name, "value")]))
        #expect(result.error == .invalidName(name))
        #expect(result.buffer == previousBytes)
    }

    @Test("a non-token method is refused", arguments: [
        "", "GE T", "GET ", " GET", "GET\r\n", "G:T", "G\u{C9}T", "GET\t", "(GET)", "\u{0}", "GET/1.1",
    ])
    func badMethod(_ method: String) {
        let result = failure(head(HTTPMethod(method), "/"), framing: .contentLength(0))
        #expect(result.error == .invalidMethod(method))
        #expect(result.buffer == previousBytes)
    }

    @Test("a request target with whitespace or controls is refused", arguments: [
        "", " ", "/a b", "/a\tb", " /", "/a\r\nX-Injected: 1", "/a\rb", "/a\nb", "/\u{0}", "/\u{7F}", "/\u{1}",
        "/ HTTP/1.1\r\nHost: evil\r\n\r\nGET /",
    ])
    func badTarget(_ target: String) {
        let result = failure(head(.get, target))
        #expect(result.error == .invalidTarget(target))
        #expect(result.buffer == previousBytes)
    }

    @Test("an authority with whitespace or controls is refused", arguments: [
        "", "exa mple.com", "example.com ", "example.com\r\nX-Injected: 1", "example.com\u{0}", "host\t", "\u{7F}",
    ])
    func badAuthority(_ authority: String) {
        let result = failure(head(.get, "/", authority: authority), framing: .chunked)
        #expect(result.error == .invalidTarget(authority))
        #expect(result.buffer == previousBytes)
    }

    @Test("a reserved field is still validated, though it would be dropped")
    func reservedFieldValidated() {
        let injected = failure(head(.get, "/", [("Host", "evil\r\nX-Injected: 1")]))
        #expect(injected.error == .invalidValue(name: "Host"))
        #expect(injected.buffer == previousBytes)
        let lengthInjected = failure(head(.post, "/", [("Content-Length", "0\r\n\r\nGET /smuggled HTTP/1.1")]), framing: .contentLength(0))
        #expect(lengthInjected.error == .invalidValue(name: "Content-Length"))
        #expect(lengthInjected.buffer == previousBytes)
    }

    @Test("the first problem is reported: method, then target, then authority, then fields in order")
    func firstProblemWins() {
        #expect(failure(HTTPRequestHead(method: HTTPMethod("B D"), target: "/a b", authority: "a b", fields: [" ": "\r"])).error
            == .invalidMethod("B D"))
        #expect(failure(HTTPRequestHead(method: .get, target: "/a b", authority: "a b", fields: [" ": "\r"])).error
            == .invalidTarget("/a b"))
        #expect(failure(HTTPRequestHead(method: .get, target: "/", authority: "a b", fields: [" ": "\r"])).error
            == .invalidTarget("a b"))
        #expect(failure(head(.get, "/", [("Bad Name", "v"), ("X", "a\rb")])).error == .invalidName("Bad Name"))
        #expect(failure(head(.get, "/", [("X", "a\rb"), ("Bad Name", "v")])).error == .invalidValue(name: "X"))
        #expect(failure(head(.get, "/", [("Bad Name", "a\rb")])).error == .invalidName("Bad Name"))
    }

    @Test("validate() throws the same errors as encodeHead")
    func validateAlone() {
        #expect(throws: HTTPFieldError.invalidValue(name: "X")) {
            try HTTP1RequestEncoder.validate(head(.get, "/", [("X", "a\nb")]))
        }
        #expect(throws: HTTPFieldError.invalidName("")) {
            try HTTP1RequestEncoder.validate(head(.get, "/", [("", "v")]))
        }
        #expect(throws: HTTPFieldError.invalidTarget("")) {
            try HTTP1RequestEncoder.validate(head(.get, ""))
        }
    }

    @Test("an error's description names the field but never repeats a refused value")
    func errorDescriptionHidesValue() {
        let error = HTTPFieldError.invalidValue(name: "Authorization")
        #expect(error.description.contains("Authorization"))
        let result = failure(head(.get, "/", [("Authorization", "Bearer s3cr3t\r\n")]))
        #expect(result.error == .invalidValue(name: "Authorization"))
        let description = result.error.map { String(describing: $0) } ?? ""
        #expect(!description.isEmpty)
        #expect(!description.contains("s3cr3t"))
    }
}
