import CCourierZlib

/// permessage-deflate (RFC 7692) for one connection, through zlib: a message's payload is raw
/// DEFLATE data ending in an empty sync-flush block whose last four bytes (00 00 FF FF) are left
/// off. Each direction keeps its compression context across messages unless the handshake said
/// otherwise. Confined to the connection's loop.
public final class WebSocketDeflate {
    private let inflater: UnsafeMutablePointer<z_stream>
    private let deflater: UnsafeMutablePointer<z_stream>
    /// The server starts each message afresh (server_no_context_takeover): so does the inflater.
    private let resetsInflater: Bool
    private let resetsDeflater: Bool
    private var buffer = [UInt8](repeating: 0, count: 16 * 1024)

    public init?(_ parameters: WebSocketHandshake.DeflateParameters) {
        inflater = .allocate(capacity: 1)
        inflater.initialize(to: z_stream())
        deflater = .allocate(capacity: 1)
        deflater.initialize(to: z_stream())
        resetsInflater = parameters.serverNoContextTakeover
        resetsDeflater = parameters.clientNoContextTakeover
        // A 15-bit window reads what any smaller window wrote; zlib's raw deflate writes with
        // 9 to 15 bits (this client never offers client_max_window_bits, so 15 is what it is).
        let inflateStatus = courier_inflate_init2(inflater, -15)
        let deflateStatus = courier_deflate_init2(deflater, Z_DEFAULT_COMPRESSION, -Int32(max(parameters.clientMaxWindowBits, 9)))
        guard inflateStatus == Z_OK, deflateStatus == Z_OK else {
            if inflateStatus == Z_OK { inflateEnd(inflater) }
            if deflateStatus == Z_OK { deflateEnd(deflater) }
            inflater.deallocate()
            deflater.deallocate()
            return nil
        }
    }

    deinit {
        inflateEnd(inflater)
        deflateEnd(deflater)
        inflater.deallocate()
        deflater.deallocate()
    }

    /// The payload of one compressed message, inflated; at most `limit` bytes, or it throws
    /// `.messageTooLarge` (a small message may inflate to a huge one).
    public func inflate(_ payload: [UInt8], limit: Int) throws(WebSocketError) -> [UInt8] {
        var input = payload
        input += [0x00, 0x00, 0xFF, 0xFF]
        var output: [UInt8] = []
        let failure: WebSocketError? = input.withUnsafeMutableBufferPointer { bytes -> WebSocketError? in
            inflater.pointee.next_in = bytes.baseAddress
            inflater.pointee.avail_in = uInt(bytes.count)
            while true {
                let produced = buffer.withUnsafeMutableBufferPointer { out -> Int32 in
                    inflater.pointee.next_out = out.baseAddress
                    inflater.pointee.avail_out = uInt(out.count)
                    return CCourierZlib.inflate(inflater, Z_SYNC_FLUSH)
                }
                let count = buffer.count - Int(inflater.pointee.avail_out)
                if output.count + count > limit { return .messageTooLarge(limit: limit) }
                output += buffer[..<count]
                switch produced {
                case Z_OK:
                    // All input taken and nothing more to flush: the message is whole.
                    if inflater.pointee.avail_in == 0 && inflater.pointee.avail_out > 0 { return nil }
                case Z_BUF_ERROR:
                    // No progress possible: done when the input is used up; input left that
                    // zlib will not take (with room to write) is not a deflate stream.
                    if inflater.pointee.avail_in == 0 { return nil }
                    if inflater.pointee.avail_out > 0 { return .invalidCompressedData }
                case Z_STREAM_END:
                    // A final block ends the context: the next message starts a new stream.
                    inflateReset(inflater)
                    return inflater.pointee.avail_in == 0 ? nil : .invalidCompressedData
                default:
                    return .invalidCompressedData
                }
            }
        }
        if let failure {
            inflateReset(inflater)
            throw failure
        }
        if resetsInflater { inflateReset(inflater) }
        return output
    }

    /// One message's payload, deflated, without the trailing 00 00 FF FF.
    public func deflate(_ payload: [UInt8]) -> [UInt8] {
        var input = payload
        var output: [UInt8] = []
        input.withUnsafeMutableBufferPointer { bytes in
            deflater.pointee.next_in = bytes.baseAddress
            deflater.pointee.avail_in = uInt(bytes.count)
            repeat {
                buffer.withUnsafeMutableBufferPointer { out in
                    deflater.pointee.next_out = out.baseAddress
                    deflater.pointee.avail_out = uInt(out.count)
                    _ = CCourierZlib.deflate(deflater, Z_SYNC_FLUSH)
                }
                output += buffer[..<(buffer.count - Int(deflater.pointee.avail_out))]
            } while deflater.pointee.avail_out == 0
        }
        if output.count >= 4, Array(output.suffix(4)) == [0x00, 0x00, 0xFF, 0xFF] { output.removeLast(4) }
        if resetsDeflater { deflateReset(deflater) }
        return output
    }
}
