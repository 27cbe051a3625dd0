/// The frame types of RFC 6455 section 5.2. Opcodes 3–7 and 11–15 are reserved: a frame that
/// uses one fails the connection.
public enum WebSocketOpcode: UInt8, Sendable {
    case continuation = 0x0
    case text = 0x1
    case binary = 0x2
    case close = 0x8
    case ping = 0x9
    case pong = 0xA

    /// Close, ping and pong: at most 125 bytes, never fragmented, allowed between the
    /// fragments of a message.
    public var isControl: Bool { rawValue & 0x8 != 0 }
}

/// One frame, its payload unmasked.
public struct WebSocketFrame: Equatable, Sendable {
    public var fin: Bool
    /// RSV1: set on the first frame of a compressed message when permessage-deflate is in use.
    public var rsv1: Bool
    public var opcode: WebSocketOpcode
    public var payload: [UInt8]

    public init(fin: Bool = true, rsv1: Bool = false, opcode: WebSocketOpcode, payload: [UInt8] = []) {
        self.fin = fin
        self.rsv1 = rsv1
        self.opcode = opcode
        self.payload = payload
    }
}

/// Which end of the connection this is: a client sends masked frames and must receive
/// unmasked ones; a server the other way round (RFC 6455 section 5.1).
public enum WebSocketRole: Sendable {
    case client, server
}

/// Why a connection fails, with the close code to send the peer (RFC 6455 section 7.4.1).
public enum WebSocketError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A frame was masked when it must not be, or not masked when it must be.
    case wrongMasking
    /// RSV bits set that no negotiated extension defines.
    case reservedBitsSet
    case reservedOpcode(UInt8)
    /// A close, ping or pong without FIN, or with more than 125 bytes.
    case invalidControlFrame
    /// A 64-bit length with its most significant bit set.
    case invalidLength
    /// A frame longer than the parser's limit.
    case frameTooLarge(limit: Int)
    /// A message longer than the reader's limit.
    case messageTooLarge(limit: Int)
    /// A continuation frame with no message under way.
    case unexpectedContinuation
    /// A new text or binary frame while a fragmented message is under way.
    case expectedContinuation
    /// A text message, or a close reason, that is not UTF-8.
    case invalidUTF8
    /// A close payload of one byte, or with a code no endpoint may send.
    case invalidClose(code: UInt16?)
    /// A compressed message that does not inflate (permessage-deflate).
    case invalidCompressedData

    /// The code to close the connection with: 1002 protocol error, 1007 invalid data, 1009
    /// message too big.
    public var closeCode: UInt16 {
        switch self {
        case .invalidUTF8, .invalidCompressedData: return 1007
        case .frameTooLarge, .messageTooLarge: return 1009
        default: return 1002
        }
    }

    public var description: String {
        switch self {
        case .wrongMasking: return "a frame's masking is wrong for its direction"
        case .reservedBitsSet: return "a frame sets reserved bits"
        case .reservedOpcode(let opcode): return "a frame uses the reserved opcode \(opcode)"
        case .invalidControlFrame: return "a control frame is fragmented or longer than 125 bytes"
        case .invalidLength: return "a frame length is out of range"
        case .frameTooLarge(let limit): return "a frame is longer than \(limit) bytes"
        case .messageTooLarge(let limit): return "a message is longer than \(limit) bytes"
        case .unexpectedContinuation: return "a continuation frame came with no message under way"
        case .expectedContinuation: return "a new message began before the last one ended"
        case .invalidUTF8: return "a text message is not UTF-8"
        case .invalidClose(let code): return code.map { "the close code \($0) is not allowed" } ?? "a close frame is malformed"
        case .invalidCompressedData: return "a compressed message does not inflate"
        }
    }
}

/// Writes frames (RFC 6455 section 5.2).
public enum WebSocketFrameEncoder {
    /// Appends `frame` to `output`, masked with `maskingKey` when given (a client's frames
    /// must be).
    public static func encode(_ frame: WebSocketFrame, maskingKey: [UInt8]?, into output: inout [UInt8]) {
        var first = frame.opcode.rawValue
        if frame.fin { first |= 0x80 }
        if frame.rsv1 { first |= 0x40 }
        output.append(first)
        let maskBit: UInt8 = maskingKey == nil ? 0 : 0x80
        let count = frame.payload.count
        if count < 126 {
            output.append(maskBit | UInt8(count))
        } else if count <= 0xFFFF {
            output.append(maskBit | 126)
            output.append(UInt8(count >> 8))
            output.append(UInt8(count & 0xFF))
        } else {
            output.append(maskBit | 127)
            for shift in stride(from: 56, through: 0, by: -8) { output.append(UInt8((UInt64(count) >> UInt64(shift)) & 0xFF)) }
        }
        guard let key = maskingKey, key.count == 4 else {
            output.append(contentsOf: frame.payload)
            return
        }
        output.append(contentsOf: key)
        let start = output.count
        output.append(contentsOf: frame.payload)
        output.withUnsafeMutableBytes { bytes in
            mask(UnsafeMutableRawBufferPointer(rebasing: bytes[start...]), with: key)
        }
    }

    /// XORs `bytes` with the four-byte `key` repeated, eight bytes at a time (a byte at a
    /// time, masking took a third of a client's time sending 1 MiB messages). `keyOffset`: the
    /// position in the payload of `bytes`' first byte, for a payload masked in pieces (the
    /// parser's, as its bytes arrive). Masking twice unmasks.
    static func mask(_ bytes: UnsafeMutableRawBufferPointer, with key: [UInt8], keyOffset: Int = 0) {
        let key = (0..<4).map { key[(keyOffset + $0) & 3] }
        // The key twice over, read as a word the way the bytes' words are read: whatever the
        // byte order, byte i of a word meets key[i % 4].
        let word = (key + key).withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
        var index = 0
        while index + 8 <= bytes.count {
            bytes.storeBytes(of: bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self) ^ word, toByteOffset: index, as: UInt64.self)
            index += 8
        }
        while index < bytes.count {
            bytes[index] ^= key[index & 3]
            index += 1
        }
    }

    /// A fresh masking key from the system's random source.
    public static func makeMaskingKey() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        let value = generator.next() as UInt32
        return [UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)]
    }

    /// The payload of a close frame: the code, big-endian, then the reason in UTF-8 (cut to fit
    /// the 125 bytes a control frame may carry, at a character boundary).
    public static func closePayload(code: UInt16, reason: String) -> [UInt8] {
        var payload = [UInt8(code >> 8), UInt8(code & 0xFF)]
        var room = 123
        for scalar in reason.unicodeScalars {
            let bytes = Array(String(scalar).utf8)
            guard bytes.count <= room else { break }
            payload += bytes
            room -= bytes.count
        }
        return payload
    }
}
