import CCourierNghttp2
import CourierCore
@testable import CourierHTTP2
import Testing

/// Records what the client session reports, and serves request bodies.
final class ClientRecorder: HTTP2SessionDelegate {
    var heads: [Int32: HTTPResponseHead] = [:]
    var data: [Int32: [UInt8]] = [:]
    var trailers: [Int32: HTTPFields] = [:]
    var closed: [Int32: HTTP2StreamError?] = [:]
    var maxStreams: [Int] = []
    var goAway: (Int32, UInt32)?
    var pingAcks = 0
    var settingsAcks = 0
    /// Streams whose DATA is left unconsumed (a paused reader).
    var paused: Set<Int32> = []
    var unconsumed: [Int32: Int] = [:]
    weak var session: HTTP2ClientSession?
    /// Request bodies to send, by stream; nil entries mean "not ready yet".
    var bodies: [Int32: [UInt8]] = [:]
    var bodyOffsets: [Int32: Int] = [:]
    var bodyComplete: Set<Int32> = []

    func http2Stream(_ streamID: Int32, didReceiveHead head: HTTPResponseHead) { heads[streamID] = head }
    func http2Stream(_ streamID: Int32, didReceiveData bytes: UnsafeRawBufferPointer) {
        data[streamID, default: []] += bytes
        if paused.contains(streamID) {
            unconsumed[streamID, default: 0] += bytes.count
        } else {
            session?.consume(streamID: streamID, count: bytes.count)
        }
    }
    func http2Stream(_ streamID: Int32, didReceiveTrailers trailers: HTTPFields) { self.trailers[streamID] = trailers }
    func http2Stream(_ streamID: Int32, didCloseWith error: HTTP2StreamError?) { closed[streamID] = error }
    func http2DidReceiveMaxConcurrentStreams(_ limit: Int) { maxStreams.append(limit) }
    func http2DidReceiveGoAway(lastStreamID: Int32, errorCode: UInt32) { goAway = (lastStreamID, errorCode) }
    func http2DidReceivePingAcknowledgement() { pingAcks += 1 }
    func http2DidReceiveSettingsAcknowledgement() { settingsAcks += 1 }
    func http2Stream(_ streamID: Int32, readBodyInto buffer: UnsafeMutableRawBufferPointer) -> HTTP2BodyChunk {
        guard let body = bodies[streamID] else { return .notReady }
        let offset = bodyOffsets[streamID, default: 0]
        let count = min(buffer.count, body.count - offset)
        body.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: count) }
        bodyOffsets[streamID] = offset + count
        let end = offset + count == body.count && bodyComplete.contains(streamID)
        if offset + count == body.count && !bodyComplete.contains(streamID) {
            return count == 0 ? .notReady : .bytes(count: count, end: false)
        }
        return .bytes(count: count, end: end)
    }

    func resume(_ streamID: Int32) {
        paused.remove(streamID)
        session?.consume(streamID: streamID, count: unconsumed.removeValue(forKey: streamID) ?? 0)
    }
}

/// A client session joined to a test server in memory.
struct Link {
    let client: HTTP2ClientSession
    let recorder: ClientRecorder
    let server: TestServerSession

    init(configuration: HTTP2Configuration = HTTP2Configuration(), server: TestServerSession = TestServerSession()) throws {
        recorder = ClientRecorder()
        client = try HTTP2ClientSession(configuration: configuration, delegate: recorder)
        recorder.session = client
        self.server = server
    }

    /// Moves bytes both ways until neither side has anything to say.
    func pump() throws {
        for _ in 0..<10_000 {
            var out = ByteBuffer()
            client.drainOutput(into: &out)
            let toServer = out.readableBytesArray()
            if !toServer.isEmpty { #expect(server.receive(toServer) == toServer.count) }
            let toClient = server.output()
            if !toClient.isEmpty { try toClient.withUnsafeBytes { try client.receive($0) } }
            if toServer.isEmpty && toClient.isEmpty { return }
        }
        Issue.record("the link never went quiet")
    }

    func get(_ path: String, fields: HTTPFields = HTTPFields()) throws -> Int32 {
        try client.submitRequest(HTTPRequestHead(method: .get, target: path, authority: "example.test", scheme: "https", fields: fields), body: .none)
    }

    /// GETs /0 to /count-1, all sent before the server answers any; their streams in order.
    func getMany(_ count: Int) throws -> [Int32] {
        let streams = try (0..<count).map { try get("/\($0)") }
        try pump()
        return streams
    }

    /// A link whose client takes header lists of at most 4 KiB, and whose server sends larger.
    static func smallHeaderLists() throws -> Link {
        var configuration = HTTP2Configuration()
        configuration.maxHeaderListSize = 4096
        return try Link(configuration: configuration, server: TestServerSession(maxSendHeaderBlock: 1 << 20))
    }

    /// A hundred fields of a hundred bytes: past ``smallHeaderLists()``'s limit.
    static let oversizedFields = (0..<100).map { ("x-filler-\($0)", String(repeating: "v", count: 100)) }
}

@Suite("HTTP/2 client session against an nghttp2 server in memory")
struct HTTP2SessionTests {
    @Test("a GET: pseudo-headers, lower-case names, HTTP/1-only fields dropped; response and completion")
    func simpleGet() throws {
        let link = try Link()
        var fields = HTTPFields()
        fields.append(name: "X-Custom", value: "1")
        fields.append(name: "Connection", value: "keep-alive")
        fields.append(name: "Host", value: "evil.test")
        fields.append(name: "Transfer-Encoding", value: "chunked")
        fields.append(name: "TE", value: "gzip")
        let stream = try link.get("/path?q=1", fields: fields)
        try link.pump()
        let request = try #require(link.server.requests[stream])
        #expect(request.headers.contains { $0 == (":method", "GET") })
        #expect(request.headers.contains { $0 == (":path", "/path?q=1") })
        #expect(request.headers.contains { $0 == (":authority", "example.test") })
        #expect(request.headers.contains { $0 == (":scheme", "https") })
        #expect(request.headers.contains { $0 == ("x-custom", "1") })
        #expect(!request.headers.contains { ["connection", "host", "transfer-encoding", "te"].contains($0.0) })
        link.server.respond(stream, headers: [("content-type", "text/plain"), ("x-multi-word-name", "v")], body: Array("hello".utf8))
        try link.pump()
        let head = try #require(link.recorder.heads[stream])
        #expect(head.status == 200)
        #expect(head.version == .http2)
        #expect(head.fields.first("Content-Type") == "text/plain")
        #expect(head.fields.name(at: 1) == "X-Multi-Word-Name")
        #expect(link.recorder.data[stream] == Array("hello".utf8))
        #expect(link.recorder.closed[stream] == .some(nil))
    }

    @Test("every HTTP/1-only field is dropped whatever its case; TE: trailers is kept; names go lower-case, values as they are")
    func connectionFieldsDroppedInAnyCase() throws {
        let link = try Link()
        let dropped = ["KEEP-ALIVE", "Proxy-Connection", "upgrade", "Content-Length", "connection", "HOST", "transfer-encoding"]
        let fields = HTTPFields(dropped.map { ($0, "x") } + [
            ("TE", "Trailers"), ("Accept-Language", "en-GB, fr;q=0.5"), ("x-already-lower", "Mixed Case Value"),
            ("Keep-Alives", "kept: one byte longer than keep-alive"),
        ])
        let stream = try link.get("/", fields: fields)
        try link.pump()
        let request = try #require(link.server.requests[stream])
        let regular = request.headers.filter { !$0.0.hasPrefix(":") }
        #expect(regular.map(\.0) == ["te", "accept-language", "x-already-lower", "keep-alives"])
        #expect(regular.map(\.1) == ["Trailers", "en-GB, fr;q=0.5", "Mixed Case Value", "kept: one byte longer than keep-alive"])
    }

    @Test("requests submitted before any is sent each keep their own fields: the session reuses one block buffer, past a large one too")
    func requestsKeepTheirFieldsWhenTheBlockBufferIsReused() throws {
        let link = try Link()
        let large = String(repeating: "v", count: 20_000)
        let requests: [(path: String, fields: [(String, String)])] = [
            ("/first", [("X-One", "1"), ("Accept", "text/plain")]),
            ("/large", [("X-Large", large), ("X-After-Large", "after")]),
            ("/third", [("X-Three", "3")]),
            ("/fourth", (0..<40).map { ("X-Field-\($0)", String(repeating: "w", count: $0 * 10)) }),
            ("/fifth", []),
        ]
        // All submitted before the link moves a byte: nghttp2 must have copied each block.
        let streams = try requests.map { try link.get($0.path, fields: HTTPFields($0.fields)) }
        try link.pump()
        for (stream, request) in zip(streams, requests) {
            let received = try #require(link.server.requests[stream])
            #expect(received.headers.filter { $0.0.hasPrefix(":") }.map { "\($0.0)=\($0.1)" }
                == [":method=GET", ":scheme=https", ":authority=example.test", ":path=\(request.path)"])
            let regular = received.headers.filter { !$0.0.hasPrefix(":") }
            #expect(regular.map(\.0) == request.fields.map { $0.0.lowercased() })
            #expect(regular.map(\.1) == request.fields.map(\.1))
        }
    }

    @Test("100 concurrent streams with interleaved DATA all complete intact")
    func manyStreams() throws {
        let link = try Link()
        let streams = try link.getMany(100)
        for (index, stream) in streams.enumerated() {
            link.server.respond(stream, body: [UInt8](repeating: UInt8(index), count: 1000 + index * 537))
        }
        try link.pump()
        for (index, stream) in streams.enumerated() {
            #expect(link.recorder.data[stream] == [UInt8](repeating: UInt8(index), count: 1000 + index * 537))
            #expect(link.recorder.closed[stream] == .some(nil))
        }
    }

    @Test("concurrent streams' header blocks, heads and trailers, each reach their own stream with their own fields")
    func headerBlocksPerStream() throws {
        let link = try Link()
        let streams = try link.getMany(40)
        // Responses in an order unlike the requests', some with an interim head first, some
        // with trailers, so that blocks of different streams follow one another.
        for (index, stream) in streams.enumerated().reversed() {
            if index % 5 == 0 { link.server.sendInterim(stream, status: 103) }
            // Every thirteenth head is large: the session's block buffer grows past what it
            // keeps, and the blocks after it start afresh.
            let fields = (0..<(index % 7 + 1)).map { ("x-field-\($0)", "stream \(stream) field \($0)") }
                + (index % 13 == 0 ? [("x-large", String(repeating: "\(index % 10)", count: 20_000))] : [])
            link.server.respond(
                stream, status: 200 + index % 4, headers: fields, body: [UInt8](repeating: UInt8(index), count: 100),
                trailers: index % 3 == 0 ? [("x-trailer", "end of \(stream)")] : []
            )
        }
        try link.pump()
        for (index, stream) in streams.enumerated() {
            let head = link.recorder.heads[stream]
            #expect(head?.status == 200 + index % 4)
            #expect(head?.fields.count == index % 7 + 1 + (index % 13 == 0 ? 1 : 0))
            #expect(head?.fields.first("X-Large") == (index % 13 == 0 ? String(repeating: "\(index % 10)", count: 20_000) : nil))
            for field in 0..<(index % 7 + 1) {
                #expect(head?.fields.first("X-Field-\(field)") == "stream \(stream) field \(field)")
            }
            #expect(link.recorder.trailers[stream]?.first("X-Trailer") == (index % 3 == 0 ? "end of \(stream)" : nil))
            #expect(link.recorder.closed[stream] == .some(nil))
        }
    }

    @Test("a stream left unconsumed stalls at its window while another completes; consuming resumes it")
    func flowControl() throws {
        var configuration = HTTP2Configuration()
        configuration.initialStreamWindowSize = 65_535
        let link = try Link(configuration: configuration)
        let slow = try link.get("/slow")
        let fast = try link.get("/fast")
        link.recorder.paused.insert(slow)
        try link.pump()
        link.server.respond(slow, body: [UInt8](repeating: 1, count: 1_000_000))
        link.server.respond(fast, body: [UInt8](repeating: 2, count: 300_000))
        try link.pump()
        #expect(link.recorder.closed[fast] == .some(nil))
        #expect(link.recorder.data[fast]?.count == 300_000)
        let stalled = link.recorder.data[slow]?.count ?? 0
        #expect(stalled <= 65_535, "a paused stream receives no more than its window")
        #expect(link.recorder.closed[slow] == nil)
        link.recorder.resume(slow)
        try link.pump()
        #expect(link.recorder.data[slow]?.count == 1_000_000)
        #expect(link.recorder.closed[slow] == .some(nil))
    }

    @Test("a larger stream window lets a paused stream's sender go past its first window, and no further")
    func growStreamWindow() throws {
        var configuration = HTTP2Configuration()
        configuration.initialStreamWindowSize = 65_535
        let link = try Link(configuration: configuration)
        let stream = try link.get("/grow")
        link.recorder.paused.insert(stream)
        try link.pump()
        #expect(link.recorder.settingsAcks == 1, "the server acknowledged the client's SETTINGS")
        link.server.respond(stream, body: [UInt8](repeating: 3, count: 1_000_000))
        try link.pump()
        #expect(link.recorder.data[stream]?.count == 65_535)
        // Nothing consumed: only the larger window lets more through.
        link.client.setStreamWindow(stream, to: 200_000)
        try link.pump()
        #expect(link.recorder.data[stream]?.count == 200_000)
        link.recorder.resume(stream)
        try link.pump()
        #expect(link.recorder.data[stream]?.count == 1_000_000)
        #expect(link.recorder.closed[stream] == .some(nil))
    }

    @Test("trailers are delivered before completion")
    func trailers() throws {
        let link = try Link()
        let stream = try link.get("/t")
        try link.pump()
        link.server.respond(stream, body: Array("body".utf8), trailers: [("x-checksum", "abc")])
        try link.pump()
        #expect(link.recorder.trailers[stream]?.first("X-Checksum") == "abc")
        #expect(link.recorder.closed[stream] == .some(nil))
    }

    @Test("interim 1xx heads are skipped")
    func interim() throws {
        let link = try Link()
        let stream = try link.get("/early")
        try link.pump()
        link.server.sendInterim(stream, status: 103)
        link.server.respond(stream, status: 204)
        try link.pump()
        #expect(link.recorder.heads[stream]?.status == 204)
        #expect(link.recorder.closed[stream] == .some(nil))
    }

    @Test("RST_STREAM from the server is a reset with its code")
    func reset() throws {
        let link = try Link()
        let stream = try link.get("/reset")
        try link.pump()
        link.server.reset(stream, code: 0x2)
        try link.pump()
        #expect(link.recorder.closed[stream] == .some(.reset(code: 0x2)))
    }

    @Test("GOAWAY: streams above the last id are refused (safe to retry), the rest finish")
    func goAway() throws {
        let link = try Link()
        let first = try link.get("/1")
        let second = try link.get("/2")
        let third = try link.get("/3")
        try link.pump()
        link.server.goAway(lastStreamID: first)
        link.server.respond(first, body: Array("one".utf8))
        try link.pump()
        #expect(link.recorder.goAway?.0 == first)
        #expect(link.recorder.closed[first] == .some(nil))
        #expect(link.recorder.closed[second] == .some(.refused))
        #expect(link.recorder.closed[third] == .some(.refused))
    }

    @Test("an oversized header list resets the stream (HPACK-bomb defence)")
    func headerListTooLarge() throws {
        let link = try Link.smallHeaderLists()
        let stream = try link.get("/big")
        try link.pump()
        link.server.respond(stream, headers: Link.oversizedFields)
        try link.pump()
        #expect(link.recorder.closed[stream] == .some(.headerListTooLarge))
    }

    @Test("a header block cut short by the list's limit leaves nothing behind for the next stream's block")
    func headerListTooLargeBesideAnotherStream() throws {
        let link = try Link.smallHeaderLists()
        let big = try link.get("/big")
        let small = try link.get("/small")
        try link.pump()
        // Both answers reach the client in one read: the first block is abandoned halfway, the
        // second begins before the first stream has closed.
        link.server.respond(big, headers: Link.oversizedFields)
        link.server.respond(small, headers: [("x-small", "yes")])
        try link.pump()
        #expect(link.recorder.closed[big] == .some(.headerListTooLarge))
        let fields = link.recorder.heads[small]?.fields
        #expect(fields?.first("X-Small") == "yes")
        // The head holds its own bytes only ("X-Small" and "yes"), none of the abandoned block's.
        #expect(fields?.storageByteCount == "X-Smallyes".utf8.count)
        #expect(link.recorder.closed[small] == .some(nil))
    }

    @Test("a content-length that the DATA does not match is a protocol error")
    func contentLengthMismatch() throws {
        let link = try Link()
        let stream = try link.get("/lie")
        try link.pump()
        link.server.respond(stream, headers: [("content-length", "10")], body: Array("short".utf8))
        try link.pump()
        guard case .some(.some(.protocolError)) = link.recorder.closed[stream] else {
            Issue.record("expected a protocol error, got \(String(describing: link.recorder.closed[stream]))")
            return
        }
    }

    @Test("the server's SETTINGS_MAX_CONCURRENT_STREAMS is reported")
    func maxConcurrentStreams() throws {
        let server = TestServerSession(settings: [(Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), 7)])
        let link = try Link(server: server)
        _ = try link.get("/")
        try link.pump()
        #expect(link.recorder.maxStreams == [7])
        #expect(link.client.remoteMaxConcurrentStreams == 7)
    }

    @Test("when stream identifiers run out, the session says so and refuses another stream")
    func streamIdentifiersRunOut() throws {
        let link = try Link()
        link.client.setNextStreamID(Int32.max)
        #expect(link.client.canOpenStream)
        let head = HTTPRequestHead(method: .get, target: "/last", authority: "example.test", scheme: "https")
        let last = try link.client.submitRequest(head, body: .none)
        #expect(last == Int32.max)
        #expect(!link.client.canOpenStream)
        do {
            _ = try link.client.submitRequest(head, body: .none)
            Issue.record("a stream beyond 2^31 - 1 was opened")
        } catch .streamUnavailable {
        } catch {
            Issue.record("expected streamUnavailable, got \(error)")
        }
        try link.pump()
        #expect(link.server.requests[last] != nil, "the last stream still goes out")
    }

    @Test("request bodies: known length with content-length, streamed with pauses")
    func requestBodies() throws {
        let link = try Link()
        let payload = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let known = try link.client.submitRequest(
            HTTPRequestHead(method: .post, target: "/known", authority: "example.test", scheme: "https"), body: .known(length: Int64(payload.count))
        )
        link.recorder.bodies[known] = payload
        link.recorder.bodyComplete.insert(known)
        let streamed = try link.client.submitRequest(
            HTTPRequestHead(method: .put, target: "/streamed", authority: "example.test", scheme: "https"), body: .streamed
        )
        link.recorder.bodies[streamed] = Array(payload.prefix(1000))
        try link.pump()
        #expect(link.server.requests[known]?.complete == true)
        #expect(link.server.requests[known]?.body == payload)
        #expect(link.server.requests[known]?.headers.contains { $0 == ("content-length", "200000") } == true)
        #expect(link.server.requests[streamed]?.complete == false, "the source said not ready: the stream waits")
        link.recorder.bodies[streamed] = payload
        link.recorder.bodyComplete.insert(streamed)
        link.client.resumeBody(streamID: streamed)
        try link.pump()
        #expect(link.server.requests[streamed]?.complete == true)
        #expect(link.server.requests[streamed]?.body == payload)
        #expect(link.server.requests[streamed]?.headers.contains { $0.0 == "content-length" } == false)
    }

    @Test("cancelling a stream resets it with CANCEL")
    func cancel() throws {
        let link = try Link()
        let stream = try link.get("/cancel")
        try link.pump()
        link.client.cancelStream(stream)
        try link.pump()
        #expect(link.recorder.closed[stream] == .some(.cancelled))
        #expect(link.server.closedStreams[stream] == HTTP2ErrorCode.cancel)
    }

    @Test("PING is answered")
    func ping() throws {
        let link = try Link()
        link.client.ping()
        try link.pump()
        #expect(link.recorder.pingAcks == 1)
    }

    @Test("malformed frames from the peer are a connection error", arguments: [
        // A DATA frame on stream 0.
        [0, 0, 4, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4] as [UInt8],
        // A SETTINGS frame whose length is not a multiple of 6.
        [0, 0, 5, 4, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5],
        // A HEADERS frame with a garbage header block for a stream never opened.
        [0, 0, 3, 1, 5, 0, 0, 0, 9, 0xff, 0xff, 0xff],
    ])
    func malformed(_ frame: [UInt8]) throws {
        let link = try Link()
        _ = try link.get("/")
        try link.pump()
        #expect(link.client.connectionFailure == nil)
        try frame.withUnsafeBytes { try link.client.receive($0) }
        var out = ByteBuffer()
        link.client.drainOutput(into: &out)
        #expect(link.client.connectionFailure != nil, "the session ends with GOAWAY")
    }

    @Test("garbage instead of a server preface is a connection error")
    func garbagePreface() throws {
        let client = try HTTP2ClientSession()
        var out = ByteBuffer()
        client.drainOutput(into: &out)
        let garbage = Array("HTTP/1.1 400 Bad Request\r\n\r\n".utf8)
        try garbage.withUnsafeBytes { try client.receive($0) }
        client.drainOutput(into: &out)
        #expect(client.connectionFailure != nil)
    }
}

@Suite("HTTP/2 field names as users see them")
struct HTTP2CanonicalNameTests {
    @Test("lower-case wire names get a capital after every hyphen", arguments: [
        ("content-type", "Content-Type"), ("etag", "Etag"), ("x-a-b", "X-A-B"), ("a--b", "A--B"),
        ("-x", "-X"), ("", ""), ("x-1y", "X-1y"), ("already-Mixed", "Already-Mixed"),
    ])
    func canonical(_ wire: String, _ shown: String) {
        var bytes = [UInt8](repeating: 0, count: wire.utf8.count)
        Array(wire.utf8).withUnsafeBytes { name in
            bytes.withUnsafeMutableBytes { HTTP2ClientSession.copyCanonicalName(name, to: $0.baseAddress!) }
        }
        #expect(String(decoding: bytes, as: UTF8.self) == shown)
    }

    @Test("writing a name leaves the bytes around it as they are")
    func writesBetweenOtherBytes() {
        var bytes = Array("etag-x: v...............-z".utf8)
        bytes.withUnsafeMutableBytes { out in
            Array("content-type".utf8).withUnsafeBytes { HTTP2ClientSession.copyCanonicalName($0, to: out.baseAddress! + 9) }
            Array("x-b".utf8).withUnsafeBytes { HTTP2ClientSession.copyCanonicalName($0, to: out.baseAddress! + 21) }
        }
        #expect(String(decoding: bytes, as: UTF8.self) == "etag-x: vContent-TypeX-B-z")
    }
}
