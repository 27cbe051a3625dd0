/// Reads frames from the bytes of a connection, incrementally: hand it whatever arrived, take
/// the frame it returns (if any) and hand it the rest. Sans-IO. A frame breaking RFC 6455
/// section 5 throws, as soon as its first bytes show it, and the parser stays failed.
public struct WebSocketFrameParser: Sendable {
    public let role: WebSocketRole
    /// The longest payload one frame may carry.
    public let maximumFramePayload: Int
    /// RSV1 may be set on data frames (permessage-deflate was negotiated).
    public var allowsRSV1: Bool

    private enum Phase: Sendable {
        case header
        case payload
        case failed(WebSocketError)
    }

    private var phase = Phase.header
    /// The header bytes read so far (at most 14).
    private var header: [UInt8] = []
    /// The header's length, once its first two bytes are known.
    private var headerLength = 2
    private var frame = WebSocketFrame(opcode: .binary)
    private var remaining = 0
    private var maskingKey: [UInt8] = []

    public init(role: WebSocketRole, maximumFramePayload: Int = 16 << 20, allowsRSV1: Bool = false) {
        self.role = role
        self.maximumFramePayload = max(maximumFramePayload, 125)
        self.allowsRSV1 = allowsRSV1
        header.reserveCapacity(14)
    }

    /// Reads from `input`: returns how many bytes were used and the frame they completed, if
    /// one did (then call again with the rest).
    public mutating func next(_ input: UnsafeRawBufferPointer) throws(WebSocketError) -> (consumed: Int, frame: WebSocketFrame?) {
        var offset = 0
        while true {
            switch phase {
            case .failed(let error):
                throw error
            case .header:
                while header.count < headerLength, offset < input.count {
                    header.append(input[offset])
                    offset += 1
                    if header.count == 2 {
                        do { try readFirstTwoBytes() } catch {
                            phase = .failed(error)
                            throw error
                        }
                    }
                }
                guard header.count == headerLength else { return (offset, nil) }
                do { try readLength() } catch {
                    phase = .failed(error)
                    throw error
                }
                phase = .payload
                if remaining == 0 { return (offset, takeFrame()) }
            case .payload:
                let count = min(remaining, input.count - offset)
                if count > 0 {
                    let start = frame.payload.count
                    frame.payload.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[offset..<(offset + count)]))
                    if !maskingKey.isEmpty {
                        let key = maskingKey
                        frame.payload.withUnsafeMutableBytes { bytes in
                            // The key runs from the payload's first byte.
                            WebSocketFrameEncoder.mask(UnsafeMutableRawBufferPointer(rebasing: bytes[start...]), with: key, keyOffset: start)
                        }
                    }
                    offset += count
                    remaining -= count
                }
                guard remaining == 0 else { return (offset, nil) }
                return (offset, takeFrame())
            }
        }
    }

    /// True between frames: no byte of a frame has been read.
    public var isAtFrameBoundary: Bool {
        if case .header = phase { return header.isEmpty }
        return false
    }

    /// FIN, RSV, opcode, MASK and the 7-bit length: checked at once, so a bad frame fails
    /// before its payload arrives.
    private mutating func readFirstTwoBytes() throws(WebSocketError) {
        let first = header[0], second = header[1]
        let reserved = first & 0x70
        guard reserved == 0 || (allowsRSV1 && reserved == 0x40) else { throw .reservedBitsSet }
        guard let opcode = WebSocketOpcode(rawValue: first & 0x0F) else { throw .reservedOpcode(first & 0x0F) }
        let fin = first & 0x80 != 0
        let masked = second & 0x80 != 0
        guard masked == (role == .server) else { throw .wrongMasking }
        let shortLength = Int(second & 0x7F)
        if opcode.isControl {
            guard fin, shortLength <= 125 else { throw .invalidControlFrame }
            // permessage-deflate compresses data frames only (RFC 7692 section 6.1).
            guard reserved == 0 else { throw .reservedBitsSet }
        }
        frame = WebSocketFrame(fin: fin, rsv1: reserved == 0x40, opcode: opcode)
        headerLength = 2 + (shortLength == 126 ? 2 : shortLength == 127 ? 8 : 0) + (masked ? 4 : 0)
    }

    /// The extended length and the masking key, once the whole header is in.
    private mutating func readLength() throws(WebSocketError) {
        let shortLength = Int(header[1] & 0x7F)
        var length: UInt64
        var index = 2
        switch shortLength {
        case 126:
            length = UInt64(header[2]) << 8 | UInt64(header[3])
            index = 4
        case 127:
            length = 0
            for byte in header[2..<10] { length = length << 8 | UInt64(byte) }
            guard length >> 63 == 0 else { throw .invalidLength }
            index = 10
        default:
            length = UInt64(shortLength)
        }
        guard length <= UInt64(maximumFramePayload) else { throw .frameTooLarge(limit: maximumFramePayload) }
        remaining = Int(length)
        maskingKey = header[1] & 0x80 != 0 ? Array(header[index..<(index + 4)]) : []
        frame.payload.reserveCapacity(remaining)
    }

    private mutating func takeFrame() -> WebSocketFrame {
        let done = frame
        frame = WebSocketFrame(opcode: .binary)
        header.removeAll(keepingCapacity: true)
        headerLength = 2
        maskingKey = []
        phase = .header
        return done
    }
}
