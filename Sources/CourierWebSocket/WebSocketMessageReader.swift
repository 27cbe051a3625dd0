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
        return try Self.message(payload, text: finished == .text, compressed: compressed, validator: validator)
    }

    /// A message in one frame: its payload is the message, not copied into the reader's
    /// buffer first (a 1 MiB message was copied three times on its way to the caller).
    private static func whole(_ frame: WebSocketFrame, limit: Int) throws(WebSocketError) -> WebSocketMessage {
        guard frame.payload.count <= limit else { throw .messageTooLarge(limit: limit) }
        let text = frame.opcode == .text
        var validator = UTF8Validator()
        if text, !frame.rsv1, !validator.feed(frame.payload) { throw .invalidUTF8 }
        return try message(frame.payload, text: text, compressed: frame.rsv1, validator: validator)
    }

    /// The message a finished payload makes; `validator` has read all of a text one that is not
    /// compressed.
    private static func message(_ payload: [UInt8], text: Bool, compressed: Bool, validator: UTF8Validator) throws(WebSocketError) -> WebSocketMessage {
        if compressed { return .compressed(text: text, payload: payload) }
        guard text else { return .binary(payload) }
        guard validator.isComplete else { throw .invalidUTF8 }
        return .text(String(decoding: payload, as: UTF8.self))
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
        let reason = Array(payload[2...])
        var validator = UTF8Validator()
        guard validator.feed(reason), validator.isComplete else { throw .invalidUTF8 }
        return .close(code: code, reason: String(decoding: reason, as: UTF8.self))
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
        for byte in bytes {
            if needed > 0 {
                guard byte >= lower, byte <= upper else { return false }
                needed -= 1
                lower = 0x80
                upper = 0xBF
                continue
            }
            switch byte {
            case 0x00...0x7F: continue
            case 0xC2...0xDF: needed = 1
            case 0xE0: needed = 2; lower = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: needed = 2
            case 0xED: needed = 2; upper = 0x9F
            case 0xF0: needed = 3; lower = 0x90
            case 0xF1...0xF3: needed = 3
            case 0xF4: needed = 3; upper = 0x8F
            default: return false
            }
        }
        return true
    }
}
