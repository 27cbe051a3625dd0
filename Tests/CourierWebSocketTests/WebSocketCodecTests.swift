import CourierWebSocket
import Testing
import _CourierTestSupport

/// RFC 6455 framing: what the parser accepts and refuses, the encoder's bytes, fragments joined
/// into messages, UTF-8 checked across fragments, close payloads.
@Suite("WebSocket codec")
struct WebSocketCodecTests {
    /// Every frame in `bytes`, fed `piece` bytes at a time (0: all at once).
    private func frames(_ bytes: [UInt8], role: WebSocketRole = .client, piece: Int = 0, limit: Int = 1 << 20, rsv1: Bool = false) throws -> [WebSocketFrame] {
        var parser = WebSocketFrameParser(role: role, maximumFramePayload: limit, allowsRSV1: rsv1)
        var found: [WebSocketFrame] = []
        var offset = 0
        while offset < bytes.count {
            let end = piece == 0 ? bytes.count : min(bytes.count, offset + piece)
            var chunkOffset = offset
            while chunkOffset < end {
                let step = try bytes[chunkOffset..<end].withUnsafeBytes { chunk in try parser.next(chunk) }
                chunkOffset += step.consumed
                if let frame = step.frame { found.append(frame) } else if step.consumed == 0 { break }
            }
            offset = end
        }
        #expect(parser.isAtFrameBoundary)
        return found
    }

    private func encoded(_ frame: WebSocketFrame, mask: [UInt8]? = nil) -> [UInt8] {
        var bytes: [UInt8] = []
        WebSocketFrameEncoder.encode(frame, maskingKey: mask, into: &bytes)
        return bytes
    }

    @Test("RFC 6455's examples: an unmasked and a masked \"Hello\", a ping, 256 and 65536 bytes")
    func rfcExamples() throws {
        #expect(try frames([0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f]) == [WebSocketFrame(opcode: .text, payload: Array("Hello".utf8))])
        let masked: [UInt8] = [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58]
        #expect(try frames(masked, role: .server) == [WebSocketFrame(opcode: .text, payload: Array("Hello".utf8))])
        #expect(encoded(WebSocketFrame(opcode: .text, payload: Array("Hello".utf8)), mask: [0x37, 0xfa, 0x21, 0x3d]) == masked)
        #expect(try frames([0x89, 0x05] + Array("Hello".utf8)) == [WebSocketFrame(opcode: .ping, payload: Array("Hello".utf8))])
        let medium = encoded(WebSocketFrame(opcode: .binary, payload: [UInt8](repeating: 7, count: 256)))
        #expect(Array(medium.prefix(4)) == [0x82, 0x7E, 0x01, 0x00])
        let large = encoded(WebSocketFrame(opcode: .binary, payload: [UInt8](repeating: 9, count: 65536)))
        #expect(Array(large.prefix(10)) == [0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0])
    }

    @Test("the mask is the payload XOR the key repeated, at every length up to past a few words")
    func maskingByDefinition() {
        var generator = SplitMix64(seed: 99)
        for size in 0...40 {
            let payload = (0..<size).map { _ in UInt8(generator.below(256)) }
            let key = (0..<4).map { _ in UInt8(generator.below(256)) }
            let bytes = encoded(WebSocketFrame(opcode: .binary, payload: payload), mask: key)
            // Two header bytes (a length under 126), then the key, then the masked payload.
            #expect(Array(bytes[2..<6]) == key)
            #expect(Array(bytes[6...]) == payload.enumerated().map { $0.element ^ key[$0.offset % 4] }, "\(size) bytes")
        }
    }

    @Test("any split of the input gives the same frames", arguments: [1, 2, 3, 7, 13, 100])
    func splits(_ piece: Int) throws {
        var generator = SplitMix64(seed: UInt64(piece))
        var bytes: [UInt8] = []
        var expected: [WebSocketFrame] = []
        for size in [0, 1, 125, 126, 127, 65535, 65536, 70000] {
            let payload = (0..<size).map { _ in UInt8(generator.below(256)) }
            let frame = WebSocketFrame(fin: size % 2 == 0, opcode: size % 2 == 0 ? .binary : .continuation, payload: payload)
            expected.append(frame)
            let key = (0..<4).map { _ in UInt8(generator.below(256)) }
            WebSocketFrameEncoder.encode(frame, maskingKey: key, into: &bytes)
        }
        let parsed = try frames(bytes, role: .server, piece: piece)
        #expect(parsed.count == expected.count)
        for (got, want) in zip(parsed, expected) {
            #expect(got.fin == want.fin && got.opcode == want.opcode && sameBytes(got.payload, want.payload))
        }
    }

    @Test("frames a client must refuse fail at once, and the parser stays failed")
    func refusals() throws {
        let cases: [([UInt8], WebSocketError)] = [
            ([0x81, 0x85, 1, 2, 3, 4, 0], .wrongMasking),
            ([0xC1, 0x00], .reservedBitsSet),
            ([0x91, 0x00], .reservedBitsSet),
            ([0x83, 0x00], .reservedOpcode(3)),
            ([0x8B, 0x00], .reservedOpcode(11)),
            ([0x09, 0x00], .invalidControlFrame),
            ([0x89, 0x7E, 0x00, 0x7E], .invalidControlFrame),
            ([0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 1], .invalidLength),
            ([0x82, 0x7E, 0x10, 0x00], .frameTooLarge(limit: 4000)),
        ]
        for (bytes, error) in cases {
            var parser = WebSocketFrameParser(role: .client, maximumFramePayload: 4000)
            #expect(throws: error) { _ = try bytes.withUnsafeBytes { chunk in try parser.next(chunk) } }
            #expect(throws: error) { _ = try ([0x81, 0x00] as [UInt8]).withUnsafeBytes { chunk in try parser.next(chunk) } }
        }
        // A server refuses unmasked frames; RSV1 passes only when negotiated, and never on control frames.
        #expect(throws: WebSocketError.wrongMasking) { _ = try frames([0x81, 0x00], role: .server) }
        #expect(try frames([0xC1, 0x00], rsv1: true).first?.rsv1 == true)
        #expect(throws: WebSocketError.reservedBitsSet) { _ = try frames([0xC9, 0x00], rsv1: true) }
    }

    @Test("fragments join into one message, with control frames between them")
    func fragments() throws {
        var reader = WebSocketMessageReader()
        #expect(try reader.read(WebSocketFrame(fin: false, opcode: .text, payload: Array("Hel".utf8))) == nil)
        #expect(reader.isInsideMessage)
        #expect(try reader.read(WebSocketFrame(opcode: .ping, payload: [1])) == .ping([1]))
        #expect(try reader.read(WebSocketFrame(fin: false, opcode: .continuation, payload: Array("lo, ".utf8))) == nil)
        #expect(try reader.read(WebSocketFrame(opcode: .continuation, payload: Array("world".utf8))) == .text("Hello, world"))
        #expect(!reader.isInsideMessage)
        #expect(try reader.read(WebSocketFrame(opcode: .binary, payload: [0, 255])) == .binary([0, 255]))
        #expect(try reader.read(WebSocketFrame(opcode: .text)) == .text(""))
        // A message in one compressed frame comes back as it came, for the caller to inflate.
        #expect(try reader.read(WebSocketFrame(rsv1: true, opcode: .text, payload: [1, 2])) == .compressed(text: true, payload: [1, 2]))
        #expect(try reader.read(WebSocketFrame(rsv1: true, opcode: .binary, payload: [3])) == .compressed(text: false, payload: [3]))
    }

    @Test("fragments out of order, and messages over the limit, fail")
    func sequenceErrors() throws {
        var reader = WebSocketMessageReader(maximumMessageSize: 10)
        #expect(throws: WebSocketError.unexpectedContinuation) { _ = try reader.read(WebSocketFrame(opcode: .continuation, payload: [1])) }
        var open = WebSocketMessageReader(maximumMessageSize: 10)
        _ = try open.read(WebSocketFrame(fin: false, opcode: .binary, payload: [1]))
        #expect(throws: WebSocketError.expectedContinuation) { _ = try open.read(WebSocketFrame(opcode: .text, payload: [])) }
        var small = WebSocketMessageReader(maximumMessageSize: 10)
        _ = try small.read(WebSocketFrame(fin: false, opcode: .binary, payload: [UInt8](repeating: 0, count: 6)))
        #expect(throws: WebSocketError.messageTooLarge(limit: 10)) {
            _ = try small.read(WebSocketFrame(opcode: .continuation, payload: [UInt8](repeating: 0, count: 5)))
        }
        // A message in one frame meets the same limit.
        var single = WebSocketMessageReader(maximumMessageSize: 10)
        #expect(try single.read(WebSocketFrame(opcode: .binary, payload: [UInt8](repeating: 7, count: 10))) == .binary([UInt8](repeating: 7, count: 10)))
        #expect(throws: WebSocketError.messageTooLarge(limit: 10)) { _ = try single.read(WebSocketFrame(opcode: .text, payload: [UInt8](repeating: 0x41, count: 11))) }
    }

    @Test("invalid UTF-8 fails in the fragment that holds it; a sequence split between fragments is fine")
    func utf8AcrossFragments() throws {
        let euro: [UInt8] = [0xE2, 0x82, 0xAC]
        var reader = WebSocketMessageReader()
        #expect(try reader.read(WebSocketFrame(fin: false, opcode: .text, payload: [0x41, euro[0]])) == nil)
        #expect(try reader.read(WebSocketFrame(opcode: .continuation, payload: [euro[1], euro[2]])) == .text("A€"))

        var failing = WebSocketMessageReader()
        // 0xED 0xA0 starts a surrogate: wrong as soon as its second byte arrives, before the end.
        #expect(throws: WebSocketError.invalidUTF8) { _ = try failing.read(WebSocketFrame(fin: false, opcode: .text, payload: [0x41, 0xED, 0xA0])) }
        var truncated = WebSocketMessageReader()
        #expect(throws: WebSocketError.invalidUTF8) { _ = try truncated.read(WebSocketFrame(opcode: .text, payload: [0x41, 0xE2, 0x82])) }
        var surrogate = WebSocketMessageReader()
        #expect(throws: WebSocketError.invalidUTF8) { _ = try surrogate.read(WebSocketFrame(opcode: .text, payload: [0x41, 0xED, 0xA0, 0x80])) }
        #expect(WebSocketError.invalidUTF8.closeCode == 1007)
    }

    @Test("the UTF-8 check agrees with Swift's decoder on every 1-, 2- and 3-byte sequence")
    func utf8Exhaustive() {
        var checked = 0
        for first in 0...255 {
            for second in [-1] + Array(0...255) {
                var bytes = [UInt8(first)]
                if second >= 0 { bytes.append(UInt8(second)) }
                let thirds = (first >= 0xE0 && second >= 0) ? Array(0x70...0xC0) : [-1]
                for third in thirds {
                    var sequence = bytes
                    if third >= 0 { sequence.append(UInt8(third)) }
                    var validator = UTF8Validator()
                    let ours = validator.feed(sequence) && validator.isComplete
                    let swift = String(validating: sequence, as: UTF8.self) != nil
                    #expect(ours == swift, "\(sequence)")
                    checked += 1
                }
            }
        }
        #expect(checked > 100_000)
    }

    @Test("the UTF-8 check agrees with Swift's on long mostly-ASCII text, fed in any pieces, with a bad byte anywhere")
    func utf8LongRuns() throws {
        var generator = SplitMix64(seed: 8)
        let pieces: [[UInt8]] = [Array("plain ascii text, ".utf8), Array("é".utf8), Array("€".utf8), Array("𝄞".utf8),
                                 [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0x80], [0xFF], [0xE2, 0x82]]
        var invalid = 0
        for round in 0..<400 {
            var bytes: [UInt8] = []
            while bytes.count < 200 {
                // Mostly the text and the valid characters; a bad sequence now and then.
                let pick = Int(generator.below(round % 2 == 0 ? 4 : 10))
                bytes += pieces[pick]
            }
            let swift = String(validating: bytes, as: UTF8.self) != nil
            if !swift { invalid += 1 }
            // Fed whole, then in pieces of random sizes: the same answer.
            var whole = UTF8Validator()
            #expect((whole.feed(bytes) && whole.isComplete) == swift, "\(bytes)")
            var split = UTF8Validator()
            var offset = 0
            var valid = true
            while offset < bytes.count, valid {
                let end = min(bytes.count, offset + 1 + Int(generator.below(20)))
                valid = split.feed(bytes[offset..<end])
                offset = end
            }
            #expect((valid && split.isComplete) == swift, "\(bytes)")
            var reader = WebSocketMessageReader()
            if swift {
                #expect(try reader.read(WebSocketFrame(opcode: .text, payload: bytes)) == .text(String(decoding: bytes, as: UTF8.self)))
            } else {
                #expect(throws: WebSocketError.invalidUTF8) { _ = try reader.read(WebSocketFrame(opcode: .text, payload: bytes)) }
            }
        }
        #expect(invalid > 50 && invalid < 350)
    }

    @Test("close payloads: none, a code, a code and a reason; a lone byte, a reserved code or a bad reason fail")
    func closePayloads() throws {
        var reader = WebSocketMessageReader()
        #expect(try reader.read(WebSocketFrame(opcode: .close)) == .close(code: nil, reason: ""))
        #expect(try reader.read(WebSocketFrame(opcode: .close, payload: WebSocketFrameEncoder.closePayload(code: 1000, reason: "bye"))) == .close(code: 1000, reason: "bye"))
        for code: UInt16 in [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999] {
            #expect(WebSocketMessageReader.isSendable(code), "\(code)")
        }
        for code: UInt16 in [0, 999, 1004, 1005, 1006, 1012, 1013, 1014, 1015, 1016, 1100, 2000, 2999, 5000, 65535] {
            #expect(!WebSocketMessageReader.isSendable(code), "\(code)")
            #expect(throws: WebSocketError.invalidClose(code: code)) { _ = try reader.read(WebSocketFrame(opcode: .close, payload: [UInt8(code >> 8), UInt8(code & 0xFF)])) }
        }
        #expect(throws: WebSocketError.invalidClose(code: nil)) { _ = try reader.read(WebSocketFrame(opcode: .close, payload: [3])) }
        #expect(throws: WebSocketError.invalidUTF8) { _ = try reader.read(WebSocketFrame(opcode: .close, payload: [0x03, 0xE8, 0xFF])) }
        // A long reason is cut at a character boundary to fit a control frame.
        let long = WebSocketFrameEncoder.closePayload(code: 1000, reason: String(repeating: "é", count: 100))
        #expect(long.count <= 125)
        #expect(try reader.read(WebSocketFrame(opcode: .close, payload: long)) == .close(code: 1000, reason: String(repeating: "é", count: 61)))
    }

    @Test("masking keys vary and a masked frame reads back under the server role")
    func maskingKeys() throws {
        let keys = Set((0..<16).map { _ in WebSocketFrameEncoder.makeMaskingKey() })
        #expect(keys.count > 1 && keys.allSatisfy { $0.count == 4 })
        let frame = WebSocketFrame(opcode: .binary, payload: Array(0...200))
        #expect(try frames(encoded(frame, mask: WebSocketFrameEncoder.makeMaskingKey()), role: .server) == [frame])
    }
}

@Suite("WebSocket handshake")
struct WebSocketHandshakeTests {
    /// RFC 6455 section 1.3's nonce, "the sample nonce".
    static let sampleNonce = Array("the sample nonce".utf8)

    private func values(_ fields: [String: String]) -> (String) -> [String] {
        { name in
            guard let value = fields.first(where: { $0.key.lowercased() == name.lowercased() })?.value else { return [] }
            return value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        }
    }

    private func good(_ handshake: WebSocketHandshake, _ extra: [String: String] = [:]) -> [String: String] {
        ["Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Accept": WebSocketHandshake.accept(forKey: handshake.key)].merging(extra) { $1 }
    }

    @Test("RFC 6455's example: the key and its accept value")
    func rfcExample() throws {
        let handshake = WebSocketHandshake(nonce: Self.sampleNonce, protocols: ["chat", "superchat"])
        #expect(handshake.key == "dGhlIHNhbXBsZSBub25jZQ==")
        #expect(WebSocketHandshake.accept(forKey: handshake.key) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        let fields = Dictionary(uniqueKeysWithValues: handshake.requestFields.map { ($0.name, $0.value) })
        #expect(fields["Sec-WebSocket-Version"] == "13" && fields["Upgrade"] == "websocket" && fields["Connection"] == "Upgrade")
        #expect(fields["Sec-WebSocket-Protocol"] == "chat, superchat")
        #expect(fields["Sec-WebSocket-Extensions"] == nil)
        let agreement = try handshake.check(status: 101, values: values(good(handshake, ["Sec-WebSocket-Protocol": "chat"])))
        #expect(agreement.subprotocol == "chat" && agreement.deflate == nil)
    }

    @Test("random keys are 16 bytes, base64, and differ")
    func randomKeys() {
        let keys = Set((0..<8).map { _ in WebSocketHandshake().key })
        #expect(keys.count == 8)
        #expect(keys.allSatisfy { $0.count == 24 && $0.hasSuffix("==") })
    }

    @Test("answers that do not open a WebSocket are refused, each for its reason")
    func refusals() {
        let handshake = WebSocketHandshake(nonce: Self.sampleNonce, protocols: ["chat"])
        let ok = good(handshake)
        #expect(throws: WebSocketHandshakeError.notSwitching(status: 200)) { try handshake.check(status: 200, values: values(ok)) }
        #expect(throws: WebSocketHandshakeError.missingUpgrade) { try handshake.check(status: 101, values: values(ok.merging(["Upgrade": "h2c"]) { $1 })) }
        #expect(throws: WebSocketHandshakeError.missingConnectionUpgrade) { try handshake.check(status: 101, values: values(ok.merging(["Connection": "keep-alive"]) { $1 })) }
        #expect(throws: WebSocketHandshakeError.wrongAccept) { try handshake.check(status: 101, values: values(ok.merging(["Sec-WebSocket-Accept": "AAAA"]) { $1 })) }
        #expect(throws: WebSocketHandshakeError.unofferedProtocol("superchat")) { try handshake.check(status: 101, values: values(ok.merging(["Sec-WebSocket-Protocol": "superchat"]) { $1 })) }
        #expect(throws: WebSocketHandshakeError.unofferedExtension("permessage-deflate")) { try handshake.check(status: 101, values: values(ok.merging(["Sec-WebSocket-Extensions": "permessage-deflate"]) { $1 })) }
    }

    @Test("permessage-deflate's parameters are read when it was offered, and odd ones refuse it")
    func deflate() throws {
        let handshake = WebSocketHandshake(nonce: Self.sampleNonce, offersDeflate: true)
        #expect(handshake.requestFields.contains { $0.name == "Sec-WebSocket-Extensions" && $0.value.hasPrefix("permessage-deflate") })
        let agreed = try handshake.check(status: 101, values: values(good(handshake, [
            "Sec-WebSocket-Extensions": "permessage-deflate; server_no_context_takeover; client_max_window_bits=10",
        ])))
        #expect(agreed.deflate == WebSocketHandshake.DeflateParameters(serverNoContextTakeover: true, clientMaxWindowBits: 10))
        #expect(try handshake.check(status: 101, values: values(good(handshake))).deflate == nil)
        for odd in ["permessage-deflate; client_max_window_bits=7", "permessage-deflate; mystery", "permessage-deflate; server_no_context_takeover; server_no_context_takeover", "x-webkit-deflate-frame"] {
            #expect(throws: WebSocketHandshakeError.unofferedExtension(odd)) { try handshake.check(status: 101, values: values(good(handshake, ["Sec-WebSocket-Extensions": odd]))) }
        }
        #expect(WebSocketHandshake.isValidProtocolName("chat.v2") && !WebSocketHandshake.isValidProtocolName("a b") && !WebSocketHandshake.isValidProtocolName(""))
    }
}

@Suite("permessage-deflate")
struct WebSocketDeflateTests {
    @Test("messages round-trip through two contexts, with and without context takeover", arguments: [false, true])
    func roundTrip(_ noTakeover: Bool) throws {
        let parameters = WebSocketHandshake.DeflateParameters(serverNoContextTakeover: noTakeover, clientNoContextTakeover: noTakeover)
        let sender = try #require(WebSocketDeflate(parameters))
        let receiver = try #require(WebSocketDeflate(parameters))
        let messages: [[UInt8]] = [[], Array("hello hello hello hello".utf8), Array("hello hello hello hello".utf8), deterministicBytes(count: 100_000, seed: 9)]
        var sizes: [Int] = []
        for message in messages {
            let compressed = sender.deflate(message)
            sizes.append(compressed.count)
            #expect(compressed.suffix(4) != [0x00, 0x00, 0xFF, 0xFF])
            #expect(sameBytes(try receiver.inflate(compressed, limit: 1 << 20), message))
        }
        // With the context kept, a repeated message compresses to almost nothing.
        #expect(noTakeover ? sizes[2] == sizes[1] : sizes[2] < sizes[1])
    }

    @Test("RFC 7692's example: \"Hello\" compressed, and a bomb or garbage fails")
    func rfcExampleAndFailures() throws {
        let inflater = try #require(WebSocketDeflate(WebSocketHandshake.DeflateParameters()))
        #expect(try inflater.inflate([0xF2, 0x48, 0xCD, 0xC9, 0xC9, 0x07, 0x00], limit: 100) == Array("Hello".utf8))
        let deflater = try #require(WebSocketDeflate(WebSocketHandshake.DeflateParameters()))
        let bomb = deflater.deflate([UInt8](repeating: 0, count: 1 << 20))
        let fresh = try #require(WebSocketDeflate(WebSocketHandshake.DeflateParameters()))
        #expect(throws: WebSocketError.messageTooLarge(limit: 4096)) { _ = try fresh.inflate(bomb, limit: 4096) }
        let other = try #require(WebSocketDeflate(WebSocketHandshake.DeflateParameters()))
        #expect(throws: WebSocketError.invalidCompressedData) { _ = try other.inflate([0xFF, 0xFF, 0xFF, 0xFF, 0x12], limit: 100) }
    }
}
