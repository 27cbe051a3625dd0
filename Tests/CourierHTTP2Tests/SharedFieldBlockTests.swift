import CourierCore
@testable import CourierHTTP2
import Testing

/// A session's shared fields (``HTTPFields/isSharedValidated``, a URLSession's defaults) are
/// lower-cased and sifted once per connection and copied into each request's header block
/// after; and a response head carries the Content-Length nghttp2 let through.
@Suite("HTTP/2 shared field blocks and Content-Length on heads")
struct SharedFieldBlockTests {
    /// The regular (non-pseudo) fields the server received on `stream`, as "name=value".
    private func regular(_ link: Link, _ stream: Int32) throws -> [String] {
        try #require(link.server.requests[stream]).headers.filter { !$0.0.hasPrefix(":") }.map { "\($0.0)=\($0.1)" }
    }

    @Test("requests carrying the same shared fields each send them, lower-cased and without HTTP/1-only fields")
    func sharedFieldsReachTheServer() throws {
        let link = try Link()
        let shared = try HTTPFields([
            ("User-Agent", "t/1"), ("Connection", "keep-alive"), ("Accept", "*/*"), ("Accept-Language", "en-GB"), ("TE", "trailers"),
        ]).validated()
        let expected = ["user-agent=t/1", "accept=*/*", "accept-language=en-GB", "te=trailers"]
        var withCookie = shared
        withCookie.append(name: "Cookie", value: "a=1")
        let other = try HTTPFields([("ACCEPT", "text/html"), ("X-Other", "O")]).validated()

        // Several before the link moves a byte (nghttp2 copies each block), then more after.
        let first = try (0..<3).map { try link.get("/\($0)", fields: shared) }
        let cookie = try link.get("/cookie", fields: withCookie)
        let between = try link.get("/other", fields: other)
        let again = try link.get("/again", fields: shared)
        try link.pump()
        let later = try link.get("/later", fields: shared)
        let apart = try link.get("/apart", fields: try HTTPFields([("User-Agent", "t/2")]).validated())
        try link.pump()

        for stream in first + [again, later] { #expect(try regular(link, stream) == expected, "stream \(stream)") }
        #expect(try regular(link, cookie) == expected + ["cookie=a=1"])
        #expect(try regular(link, between) == ["accept=text/html", "x-other=O"])
        #expect(try regular(link, apart) == ["user-agent=t/2"])
        let paths = try (first + [cookie, between, again, later, apart]).map { stream in
            try #require(link.server.requests[stream]).headers.first { $0.0 == ":path" }?.1
        }
        #expect(paths == ["/0", "/1", "/2", "/cookie", "/other", "/again", "/later", "/apart"])
    }

    @Test("the kept block is what a request with those very fields sends, and only such a request")
    func keptBlockIsCopied() throws {
        let link = try Link()
        let shared = try HTTPFields([("User-Agent", "t/1"), ("Accept", "*/*")]).validated()
        let first = try link.get("/first", fields: shared)
        let kept = try #require(link.client.sharedFieldBlock)
        #expect(kept.fields.isIdentical(to: shared))
        #expect(String(decoding: kept.bytes, as: UTF8.self) == "user-agentt/1accept*/*")
        #expect(kept.lengths.map { [$0.name, $0.value] } == [[10, 3], [6, 3]])

        // A marked block for the same fields: what the next such request sends.
        let marked = HTTP2ClientSession.SharedFieldBlock(
            fields: shared, bytes: Array("x-markedyesx-twoz".utf8),
            lengths: [.init(name: 8, value: 3), .init(name: 5, value: 1)]
        )
        link.client.sharedFieldBlock = marked
        let copied = try link.get("/copied", fields: shared)
        let equalButApart = try link.get("/apart", fields: try HTTPFields([("User-Agent", "t/1"), ("Accept", "*/*")]).validated())
        try link.pump()
        #expect(try regular(link, first) == ["user-agent=t/1", "accept=*/*"])
        #expect(try regular(link, copied) == ["x-marked=yes", "x-two=z"])
        #expect(try regular(link, equalButApart) == ["user-agent=t/1", "accept=*/*"], "equal fields made apart are written")
        #expect(try #require(link.client.sharedFieldBlock).fields.isIdentical(to: shared) == false, "the last shared set is kept")
    }

    @Test("a shared set too large for the block buffer kept so far still goes whole")
    func largeSharedSet() throws {
        let link = try Link()
        let small = try HTTPFields([("Accept", "*/*")]).validated()
        let large = try HTTPFields((0..<30).map { ("X-Field-\($0)", String(repeating: "v", count: 100 + $0)) }).validated()
        let streams = try [small, large, large, small, large].enumerated().map { try link.get("/\($0.offset)", fields: $0.element) }
        try link.pump()
        let largeExpected = (0..<30).map { "x-field-\($0)=" + String(repeating: "v", count: 100 + $0) }
        for (stream, fields) in zip(streams, [small, large, large, small, large]) {
            #expect(try regular(link, stream) == (fields == small ? ["accept=*/*"] : largeExpected))
        }
    }

    @Test("a head carries the Content-Length it came with, and -1 without one (a final head after an interim one too)")
    func contentLengthOnHeads() throws {
        let link = try Link()
        let withLength = try link.get("/len")
        let without = try link.get("/none")
        let interim = try link.get("/interim")
        try link.pump()
        link.server.respond(withLength, headers: [("content-type", "text/plain"), ("content-length", "5")], body: Array("hello".utf8))
        link.server.respond(without, headers: [("content-type", "text/plain")], body: Array("abc".utf8))
        link.server.sendInterim(interim, status: 103)
        link.server.respond(interim, status: 204)
        try link.pump()
        #expect(link.recorder.heads[withLength]?.validatedContentLength == 5)
        #expect(link.recorder.heads[withLength]?.fields.first("Content-Length") == "5")
        #expect(link.recorder.heads[without]?.validatedContentLength == -1)
        #expect(link.recorder.heads[interim]?.status == 204)
        #expect(link.recorder.heads[interim]?.validatedContentLength == -1)
        for stream in [withLength, without, interim] { #expect(link.recorder.closed[stream] == .some(nil)) }
    }

    @Test("a Content-Length of more than 18 digits is left to whoever reads the field; a 204's agrees with its fields")
    func contentLengthEdges() throws {
        let link = try Link()
        let long = try link.get("/long")
        let noContent = try link.get("/no-content")
        try link.pump()
        link.server.respond(long, headers: [("content-length", "1234567890123456789")], body: Array("short".utf8))
        link.server.respond(noContent, status: 204, headers: [("content-length", "0")])
        try link.pump()
        let longHead = try #require(link.recorder.heads[long])
        #expect(longHead.validatedContentLength == nil)
        #expect(longHead.fields.first("Content-Length") == "1234567890123456789")
        let noContentHead = try #require(link.recorder.heads[noContent])
        let written = noContentHead.fields.first("Content-Length").flatMap { Int($0) } ?? -1
        #expect(noContentHead.validatedContentLength == written)
    }
}
