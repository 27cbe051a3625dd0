/// What a peer said, message by message.
public enum WebSocketMessage: Equatable, Sendable {
    case text(String)
    case binary([UInt8])
    case ping([UInt8])
    case pong([UInt8])
    /// The peer closes: its code (nil when it gave none) and reason.
    case close(code: UInt16?, reason: String)
    /// A message sent compressed (permessage-deflate), its payload as it came: the caller
    /// inflates it, and checks text once inflated.
    case compressed(text: Bool, payload: [UInt8])
}

/// Joins frames into messages (RFC 6455 section 5.4): fragments of one message in order, control
/// frames allowed between them, text checked as UTF-8 fragment by fragment (so bad text fails
/// as soon as it arrives), close payloads checked (section 7.4). Sans-IO.
public struct WebSocketMessageReader: Sendable {
    /// The longest message, all fragments together.
    public let maximumMessageSize: Int

    private var kind: WebSocketOpcode?
    private var compressed = false
    private var bytes: [UInt8] = []
    private var validator = UTF8Validator()

    public init(maximumMessageSize: Int = 1 << 20) {
        self.maximumMessageSize = max(maximumMessageSize, 0)
    }

    /// True while a fragmented message is under way.
    public var isInsideMessage: Bool { kind != nil }

    /// Takes one frame; returns the message it completes, if any. A compressed message (RSV1 on
    /// its first frame) comes back as ``WebSocketMessage/compressed(text:payload:)``.
    public mutating func read(_ frame: WebSocketFrame) throws(WebSocketError) -> WebSocketMessage? {
        switch frame.opcode {
        case .ping: return .ping(frame.payload)
        case .pong: return .pong(frame.payload)
        case .close: return try Self.close(frame.payload)
        case .continuation:
            guard let kind else { throw .unexpectedContinuation }
            guard !frame.rsv1 else { throw .reservedBitsSet }
            try append(frame.payload, text: kind == .text && !compressed)
        case .text, .binary:
            guard kind == nil else { throw .expectedContinuation }
            if frame.fin { return try Self.whole(frame, limit: maximumMessageSize) }
            kind = frame.opcode
            compressed = frame.rsv1
            validator = UTF8Validator()
            bytes.removeAll(keepingCapacity: true)
            try append(frame.payload, text: frame.opcode == .text && !compressed)
        }
        guard frame.fin, let finished = kind else { return nil }
        kind = nil
        let payload = bytes
        bytes = []
        if compressed { return .compressed(text: finished == .text, payload: payload) }
        guard finished == .text else { return .binary(payload) }
        guard validator.isComplete else { throw .invalidUTF8 }
        return .text(String(decoding: payload, as: UTF8.self))
    }

    /// A message in one frame: its payload is the message, not copied into the reader's
    /// buffer first (a 1 MiB message was copied three times on its way to the caller).
    private static func whole(_ frame: WebSocketFrame, limit: Int) throws(WebSocketError) -> WebSocketMessage {
        guard frame.payload.count <= limit else { throw .messageTooLarge(limit: limit) }
        let text = frame.opcode == .text
        if frame.rsv1 { return .compressed(text: text, payload: frame.payload) }
        guard text else { return .binary(frame.payload) }
        // The whole text is here: the string's own check is the only one (checking it here
        // as well took more instructions than making the string).
        return .text(try utf8String(frame.payload))
    }

    /// `bytes` as a string, when they are UTF-8 as RFC 3629 has it (Swift's check, the same
    /// as ``UTF8Validator``'s); else `invalidUTF8`.
    public static func utf8String(_ bytes: [UInt8]) throws(WebSocketError) -> String {
        guard let string = String(validating: bytes, as: UTF8.self) else { throw .invalidUTF8 }
        return string
    }

    private mutating func append(_ payload: [UInt8], text: Bool) throws(WebSocketError) {
        guard bytes.count + payload.count <= maximumMessageSize else { throw .messageTooLarge(limit: maximumMessageSize) }
        if text, !validator.feed(payload) { throw .invalidUTF8 }
        bytes += payload
    }

    /// A close frame's code and reason. Codes an endpoint may send: 1000–1003, 1007–1011 and
    /// 3000–4999 (1004–1006 and 1015 are reserved for reports, never sent; the rest are
    /// unassigned).
    static func close(_ payload: [UInt8]) throws(WebSocketError) -> WebSocketMessage {
        if payload.isEmpty { return .close(code: nil, reason: "") }
        guard payload.count >= 2 else { throw .invalidClose(code: nil) }
        let code = UInt16(payload[0]) << 8 | UInt16(payload[1])
        guard Self.isSendable(code) else { throw .invalidClose(code: code) }
        return .close(code: code, reason: try utf8String(Array(payload[2...])))
    }

    /// Whether an endpoint may put `code` in a close frame.
    public static func isSendable(_ code: UInt16) -> Bool {
        switch code {
        case 1000...1003, 1007...1011, 3000...4999: return true
        default: return false
        }
    }
}

/// Checks UTF-8 (RFC 3629) a piece at a time: a sequence may be split between pieces, and an
/// invalid byte is caught in the piece that holds it. No overlong forms, no surrogates, nothing
/// above U+10FFFF.
public struct UTF8Validator: Sendable {
    /// Continuation bytes still expected.
    private var needed = 0
    /// The range the next continuation byte must fall in (narrower after E0, ED, F0, F4).
    private var lower: UInt8 = 0x80
    private var upper: UInt8 = 0xBF

    public init() {}

    /// True when every sequence fed so far is complete.
    public var isComplete: Bool { needed == 0 }

    /// Checks `bytes` after what came before; false at the first invalid byte (then the
    /// validator should not be used further).
    public mutating func feed(_ bytes: some Sequence<UInt8>) -> Bool {
        if let valid = bytes.withContiguousStorageIfAvailable({ feed(contiguous: UnsafeRawBufferPointer($0)) }) { return valid }
        for byte in bytes where !feed(byte) { return false }
        return true
    }

    /// Runs of ASCII are passed over eight bytes at a time (a fragmented text message is
    /// checked here, and text is mostly ASCII); the rest a byte at a time.
    private mutating func feed(contiguous bytes: UnsafeRawBufferPointer) -> Bool {
        var index = 0
        while index < bytes.count {
            if needed == 0 {
                while index + 8 <= bytes.count, bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self) & 0x8080_8080_8080_8080 == 0 {
                    index += 8
                }
                guard index < bytes.count else { break }
            }
            guard feed(bytes[index]) else { return false }
            index += 1
        }
        return true
    }

    private mutating func feed(_ byte: UInt8) -> Bool {
        if needed > 0 {
            guard byte >= lower, byte <= upper else { return false }
            needed -= 1
            lower = 0x80
            upper = 0xBF
            return true
        }
        switch byte {
        case 0x00...0x7F: break
        case 0xC2...0xDF: needed = 1
        case 0xE0: needed = 2; lower = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: needed = 2
        case 0xED: needed = 2; upper = 0x9F
        case 0xF0: needed = 3; lower = 0x90
        case 0xF1...0xF3: needed = 3
        case 0xF4: needed = 3; upper = 0x8F
        default: return false
        }
        return true
    }
}
