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
        buffer.write(head.method.rawValue)
        buffer.write(byte: .space)
        buffer.write(head.target)
        buffer.write(" HTTP/1.1\r\nHost: ")
        buffer.write(head.authority)
        buffer.write(crlf)
        if upgrade { buffer.write("Connection: Upgrade\r\n") }
        head.fields.forEachField { name, value in
            if isReserved(name) { return }
            buffer.write(name)
            buffer.write(colonSpace)
            buffer.write(value)
            buffer.write(crlf)
        }
        switch framing {
        case .none:
            break
        case .contentLength(let length):
            buffer.write("Content-Length: ")
            buffer.write(decimal: length)
            buffer.write(crlf)
        case .chunked:
            buffer.write("Transfer-Encoding: chunked\r\n")
        }
        buffer.write(crlf)
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

    private static func isReserved(_ name: UnsafeRawBufferPointer) -> Bool {
        asciiCaseInsensitiveEquals(name, "host") || asciiCaseInsensitiveEquals(name, "content-length")
            || asciiCaseInsensitiveEquals(name, "transfer-encoding") || asciiCaseInsensitiveEquals(name, "connection")
    }

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
