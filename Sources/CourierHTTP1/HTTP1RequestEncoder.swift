import CourierCore

/// How a request body is delimited on an HTTP/1.1 connection. The encoder owns framing: a
/// caller-set Content-Length or Transfer-Encoding never reaches the wire.
public enum HTTP1BodyFraming: Sendable, Equatable {
    /// No body and no framing field (GET, HEAD, DELETE … without content).
    case none
    /// A body of known length: `Content-Length`, identity encoding.
    case contentLength(Int64)
    /// A body of unknown length: `Transfer-Encoding: chunked`.
    case chunked
}

/// Writes HTTP/1.1 requests (RFC 9112 sections 3 and 7): the request line, Host, the caller's
/// fields after validation, and the framing field.
public enum HTTP1RequestEncoder {
    /// Caller fields the encoder drops because the connection owns them: Host is written from
    /// the authority, framing from the body, and Connection management is the pool's.
    public static let reservedFieldNames: Set<String> = ["host", "content-length", "transfer-encoding", "connection"]

    /// Checks a request head before anything is written: method and target as the request line
    /// needs them, every field name a token and every value free of CR, LF, NUL and the other
    /// controls (no header injection).
    public static func validate(_ head: HTTPRequestHead) throws(HTTPFieldError) {
        try head.validate()
    }

    /// Validates `head` and appends its encoding, with the framing field for `framing`, to
    /// `buffer`. Nothing is appended when validation fails. `upgrade` writes
    /// `Connection: Upgrade` (the request asks to switch to the protocol its `Upgrade` field
    /// names); a caller's own `Connection` field is always dropped.
    public static func encodeHead(
        _ head: HTTPRequestHead, framing: HTTP1BodyFraming, upgrade: Bool = false, into buffer: inout ByteBuffer
    ) throws(HTTPFieldError) {
        try validate(head)
        encodeValidatedHead(head, framing: framing, upgrade: upgrade, into: &buffer)
    }

    /// Appends the encoding of a head that already passed ``validate(_:)`` (the transport
    /// validates every request once, before it reaches a pool), so it is not checked twice.
    public static func encodeValidatedHead(_ head: HTTPRequestHead, framing: HTTP1BodyFraming, upgrade: Bool = false, into buffer: inout ByteBuffer) {
        var none: EncodedFieldLines?
        encode(head, framing: framing, upgrade: upgrade, into: &buffer, lines: &none, keepsLines: false)
    }

    /// The field lines of one shared set of fields (``HTTPFields/isSharedValidated``), as
    /// encoded: a connection keeps the last such set, and a request that carries those very
    /// fields again (the default fields, unchanged) has them copied instead of written field
    /// by field.
    public struct EncodedFieldLines: Sendable {
        let fields: HTTPFields
        let lines: [UInt8]
    }

    /// ``encodeValidatedHead(_:framing:upgrade:into:)``, copying the field lines from `lines`
    /// when the head carries the fields they were made from, and keeping there the lines of a
    /// shared set it encodes.
    public static func encodeValidatedHead(
        _ head: HTTPRequestHead, framing: HTTP1BodyFraming, upgrade: Bool = false, into buffer: inout ByteBuffer,
        reusing lines: inout EncodedFieldLines?
    ) {
        encode(head, framing: framing, upgrade: upgrade, into: &buffer, lines: &lines, keepsLines: true)
    }

    private static func encode(
        _ head: HTTPRequestHead, framing: HTTP1BodyFraming, upgrade: Bool, into buffer: inout ByteBuffer,
        lines: inout EncodedFieldLines?, keepsLines: Bool
    ) {
        var method = head.method.rawValue, target = head.target, authority = head.authority
        method.withUTF8 { method in
            target.withUTF8 { target in
                authority.withUTF8 { authority in
                    // Room for the whole head is made once, and the parts are copied in with
                    // no further checks: at most this many bytes are written (the storage may
                    // hold bytes of removed fields; the framing line is sized for its largest).
                    let bound = method.count + target.count + authority.count + upgradeLine.utf8CodeUnitCount
                        + head.fields.storageByteCount + 4 * head.fields.count + 64
                    buffer.withWritableBytes(minimumCount: bound) { space in
                        var out = HeadWriter(cursor: space.baseAddress!)
                        out.put(UnsafeRawBufferPointer(method))
                        out.put(" ")
                        out.put(UnsafeRawBufferPointer(target))
                        out.put(" HTTP/1.1\r\nHost: ")
                        out.put(UnsafeRawBufferPointer(authority))
                        out.put(crlf)
                        if upgrade { out.put(upgradeLine) }
                        if let kept = lines, kept.fields.isIdentical(to: head.fields) {
                            kept.lines.withUnsafeBytes { out.put($0) }
                        } else {
                            let start = out.cursor
                            head.fields.forEachField { name, value in
                                if isReserved(name) { return }
                                out.put(name)
                                out.put(colonSpace)
                                out.put(value)
                                out.put(crlf)
                            }
                            if keepsLines && head.fields.isSharedValidated {
                                let written = UnsafeRawBufferPointer(start: start, count: start.distance(to: out.cursor))
                                lines = EncodedFieldLines(fields: head.fields, lines: Array(written))
                            }
                        }
                        switch framing {
                        case .none:
                            break
                        case .contentLength(let length):
                            out.put("Content-Length: ")
                            out.putDecimal(UInt64(length))
                            out.put(crlf)
                        case .chunked:
                            out.put("Transfer-Encoding: chunked\r\n")
                        }
                        out.put(crlf)
                        return space.baseAddress!.distance(to: out.cursor)
                    }
                }
            }
        }
    }

    /// Copies the parts of a head into space already made for all of them.
    private struct HeadWriter {
        var cursor: UnsafeMutableRawPointer

        @inline(__always)
        mutating func put(_ bytes: UnsafeRawBufferPointer) {
            guard let from = bytes.baseAddress, bytes.count > 0 else { return }
            cursor.copyMemory(from: from, byteCount: bytes.count)
            cursor += bytes.count
        }

        @inline(__always)
        mutating func put(_ string: StaticString) {
            put(UnsafeRawBufferPointer(start: string.utf8Start, count: string.utf8CodeUnitCount))
        }

        /// Writes `value` in decimal (at most 20 digits).
        mutating func putDecimal(_ value: UInt64) {
            var digits = 1
            var rest = value / 10
            while rest > 0 {
                digits += 1
                rest /= 10
            }
            var value = value
            for index in stride(from: digits - 1, through: 0, by: -1) {
                cursor.storeBytes(of: UInt8(ascii: "0") + UInt8(value % 10), toByteOffset: index, as: UInt8.self)
                value /= 10
            }
            cursor += digits
        }
    }

    /// Appends the line that opens a chunk of `length` bytes (which must not be zero: a zero
    /// chunk ends the body, see ``encodeLastChunk(into:)``).
    public static func encodeChunkHeader(length: Int, into buffer: inout ByteBuffer) {
        precondition(length > 0, "a zero-length chunk would end the body")
        buffer.write(hexadecimal: length)
        buffer.write(crlf)
    }

    /// Appends the CRLF that closes a chunk's data.
    public static func encodeChunkFooter(into buffer: inout ByteBuffer) {
        buffer.write(crlf)
    }

    /// Appends the last chunk and the empty trailer section.
    public static func encodeLastChunk(into buffer: inout ByteBuffer) {
        buffer.write("0\r\n\r\n")
    }

    /// One of ``reservedFieldNames``, in any case: by length first, since most names are none.
    private static func isReserved(_ name: UnsafeRawBufferPointer) -> Bool {
        switch name.count {
        case 4: asciiCaseInsensitiveEquals(name, "host")
        case 10: asciiCaseInsensitiveEquals(name, "connection")
        case 14: asciiCaseInsensitiveEquals(name, "content-length")
        case 17: asciiCaseInsensitiveEquals(name, "transfer-encoding")
        default: false
        }
    }

    private static let upgradeLine: StaticString = "Connection: Upgrade\r\n"
    private static let crlf: StaticString = "\r\n"
    private static let colonSpace: StaticString = ": "
}

extension ByteBuffer {
    mutating func write(_ string: StaticString) {
        write(UnsafeRawBufferPointer(start: string.utf8Start, count: string.utf8CodeUnitCount))
    }

    mutating func write(_ string: String) {
        var string = string
        string.withUTF8 { write(UnsafeRawBufferPointer($0)) }
    }
}
