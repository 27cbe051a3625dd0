import CourierCore

/// Message body length (RFC 9112 section 6.3) and chunked framing (section 7.1).
extension HTTP1ResponseParser {
    /// Chooses how the body of a final response is delimited, following RFC 9112 section 6.3.
    /// Framing fields are checked on every response, bodiless ones included, so a server that
    /// frames ambiguously is refused even when the ambiguity would not bite this time.
    /// `framing`'s ranges are in `bytes`, the head's section.
    ///
    /// Returns the head's validated Content-Length, -1 when it has none, nil when its framing
    /// fields were not read (a 101, or a 2xx to CONNECT).
    mutating func chooseFraming(
        _ head: HTTPResponseHead, _ framing: FramingFields, in bytes: UnsafeRawBufferPointer
    ) throws(HTTP1ResponseError) -> Int? {
        // A 101 hands the connection to another protocol, and any 2xx to CONNECT turns it into
        // a tunnel (step 2); RFC 9110 section 9.3.6 says to ignore framing fields in the latter.
        if head.status == 101 || (answering == .connect && (200..<300).contains(head.status)) {
            connectionReuse = .upgraded
            state = .upgraded
            return nil
        }
        let contentLength = try Self.contentLength(framing.contentLengths, in: bytes)
        let coding = try Self.transferCoding(framing.transferEncodings, in: bytes, version: head.version)
        let reuse = Self.persistence(head.version, framing.connectionValues, in: bytes)
        if coding != .none && contentLength != nil { throw .contentLengthWithTransferEncoding }
        connectionReuse = reuse

        // Step 1: HEAD responses and 1xx, 204 and 304 responses end with their header section.
        if answering == .head || head.status == 204 || head.status == 304 {
            state = .complete(trailers: nil)
            return contentLength ?? -1
        }
        // Step 4: a Transfer-Encoding (never with a Content-Length: refused above) whose final
        // coding is chunked is framed by it; any other runs until the server closes.
        switch coding {
        case .chunked:
            state = .chunkSize(ChunkSizeLine())
            return -1
        case .untilClose:
            connectionReuse = .close
            state = .untilClose
            return -1
        case .none:
            break
        }
        // Step 6: a valid Content-Length (step 5, an invalid or conflicting one, is refused above).
        if let contentLength {
            state = contentLength == 0 ? .complete(trailers: nil) : .fixedBody(remaining: contentLength)
            return contentLength
        }
        // Step 8 (step 7 is for requests): otherwise the body runs until the server closes the connection.
        connectionReuse = .close
        state = .untilClose
        return -1
    }

    /// The Content-Length, when present: every field, and every element of a list-valued field,
    /// must be the same non-negative decimal number (RFC 9110 section 8.6).
    private static func contentLength(_ values: FieldRanges, in bytes: UnsafeRawBufferPointer) throws(HTTP1ResponseError) -> Int? {
        var result: Int?
        var failure: HTTP1ResponseError?
        values.forEach { range in
            forEachListElement(bytes, range, keepEmpty: true) { element in
                guard failure == nil else { return }
                guard !element.isEmpty, element.count <= 18 else {
                    failure = .invalidContentLength
                    return
                }
                var value = 0
                for offset in element {
                    let byte = bytes[offset]
                    guard byte.isDigit else {
                        failure = .invalidContentLength
                        return
                    }
                    value = value * 10 + Int(byte - UInt8(ascii: "0"))
                }
                if let result, result != value {
                    failure = .conflictingContentLength
                    return
                }
                result = value
            }
        }
        if let failure { throw failure }
        return result
    }

    /// How a response's Transfer-Encoding frames its body (RFC 9112 section 6.3 rule 4).
    enum TransferFraming: Equatable {
        /// No Transfer-Encoding.
        case none
        /// `chunked` alone.
        case chunked
        /// A final coding other than `chunked`: the body runs until the connection closes, and
        /// its bytes are delivered as they come (Courier removes no other transfer coding).
        case untilClose
    }

    /// Reads Transfer-Encoding. Refused: any in an HTTP/1.0 response, an empty list, `chunked`
    /// more than once, and `chunked` last after other codings (framing Courier could follow,
    /// but a body in a transfer coding it does not remove).
    private static func transferCoding(
        _ values: FieldRanges, in bytes: UnsafeRawBufferPointer, version: HTTPVersion
    ) throws(HTTP1ResponseError) -> TransferFraming {
        guard !values.isEmpty else { return .none }
        if version == .http1_0 { throw .transferEncodingInHTTP10 }
        var codings = 0
        var chunkedCount = 0
        var lastIsChunked = false
        values.forEach { range in
            forEachListElement(bytes, range, keepEmpty: false) { element in
                codings += 1
                lastIsChunked = asciiCaseInsensitiveEquals(UnsafeRawBufferPointer(rebasing: bytes[element]), "chunked")
                if lastIsChunked { chunkedCount += 1 }
            }
        }
        guard codings > 0, chunkedCount <= 1 else { throw .unsupportedTransferCoding }
        if !lastIsChunked { return .untilClose }
        guard codings == 1 else { throw .unsupportedTransferCoding }
        return .chunked
    }

    /// Persistence per RFC 9112 section 9.3: `close` ends it; HTTP/1.0 keeps it only with
    /// `keep-alive`.
    private static func persistence(
        _ version: HTTPVersion, _ values: FieldRanges, in bytes: UnsafeRawBufferPointer
    ) -> HTTP1ConnectionReuse {
        var close = false
        var keepAlive = false
        values.forEach { range in
            forEachListElement(bytes, range, keepEmpty: false) { element in
                let token = UnsafeRawBufferPointer(rebasing: bytes[element])
                switch token.count {
                case 5: if asciiCaseInsensitiveEquals(token, "close") { close = true }
                case 10: if asciiCaseInsensitiveEquals(token, "keep-alive") { keepAlive = true }
                default: break
                }
            }
        }
        if close { return .close }
        if version.minor == 0 && !keepAlive { return .close }
        return .keepAlive
    }

    /// Calls `body` with each trimmed element of a comma-separated list value (RFC 9110
    /// section 5.6.1), without building an array. Inlined, so the closures cost no calls.
    @inline(__always)
    private static func forEachListElement(
        _ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, keepEmpty: Bool, _ body: (Range<Int>) -> Void
    ) {
        var start = range.lowerBound
        while start <= range.upperBound {
            var end = start
            while end < range.upperBound && bytes[end] != .comma { end += 1 }
            var lower = start, upper = end
            while lower < upper && bytes[lower].isOptionalWhitespace { lower += 1 }
            while upper > lower && bytes[upper - 1].isOptionalWhitespace { upper -= 1 }
            if keepEmpty || lower < upper { body(lower..<upper) }
            start = end + 1
        }
    }

    /// Most hexadecimal digits (leading zeros included) on a chunk-size line.
    static let maxChunkSizeDigits = 64

    /// Reads a chunk-size line: `chunk-size [ chunk-ext ] CRLF` (RFC 9112 section 7.1).
    /// Extensions are checked against the grammar (a name is required; a value is a token or a
    /// quoted string) and bounded, but not interpreted.
    mutating func scanChunkSize(
        _ input: UnsafeRawBufferPointer, from start: Int, line: inout ChunkSizeLine
    ) throws(HTTP1ResponseError) -> (used: Int, done: Bool) {
        var index = start
        while index < input.count {
            let byte = input[index]
            index += 1
            if case .digits = line.phase, let digit = byte.hexValue {
                // The value must fit in 63 bits; leading zeros are free, but the line is
                // bounded so a server cannot stream digits forever.
                guard line.digits < Self.maxChunkSizeDigits, line.value <= (Int.max - digit) >> 4 else {
                    throw .chunkSizeOverflow
                }
                line.value = line.value << 4 | digit
                line.digits += 1
                continue
            }
            if case .lineFeed = line.phase {
                guard byte == .lf else { throw .bareCarriageReturn }
                return (index - start, true)
            }
            if case .digits = line.phase {
                guard line.digits > 0 else { throw .invalidChunkSize }
            } else {
                line.extensionBytes += 1
                if line.extensionBytes > options.maxChunkExtensionBytes { throw .chunkExtensionTooLong }
            }
            if byte == .cr || byte == .lf {
                // The line may end after the size, a name, or a value; not inside an extension.
                switch line.phase {
                case .digits, .extensionName(started: true), .afterName, .tokenValue, .afterValue: break
                default: throw .invalidChunkExtension
                }
                if byte == .lf {
                    guard options.allowsBareLineFeed else { throw .bareLineFeed }
                    return (index - start, true)
                }
                line.phase = .lineFeed
                continue
            }
            line.phase = try Self.nextExtensionPhase(after: line.phase, byte)
        }
        return (index - start, false)
    }

    /// One step of the chunk-size line past the digits, for a byte other than CR and LF.
    private static func nextExtensionPhase(after phase: ChunkSizeLine.Phase, _ byte: UInt8) throws(HTTP1ResponseError) -> ChunkSizeLine.Phase {
        let isToken = HTTPFieldValidation.isTokenCharacter(byte)
        switch phase {
        case .digits, .afterSize:
            if byte == .semicolon { return .extensionName(started: false) }
            if byte.isOptionalWhitespace { return .afterSize }
            if case .digits = phase { throw .invalidChunkSize }
        case .extensionName(let started):
            if isToken { return .extensionName(started: true) }
            if !started, byte.isOptionalWhitespace { return phase }
            if started {
                if byte == .equals { return .valueStart }
                if byte == .semicolon { return .extensionName(started: false) }
                if byte.isOptionalWhitespace { return .afterName }
            }
        case .afterName:
            if byte.isOptionalWhitespace { return .afterName }
            if byte == .equals { return .valueStart }
            if byte == .semicolon { return .extensionName(started: false) }
        case .valueStart:
            if byte.isOptionalWhitespace { return .valueStart }
            if byte == .quote { return .quotedValue(escaped: false) }
            if isToken { return .tokenValue }
        case .tokenValue:
            if isToken { return .tokenValue }
            if byte.isOptionalWhitespace { return .afterValue }
            if byte == .semicolon { return .extensionName(started: false) }
        case .quotedValue(let escaped):
            // qdtext and quoted-pair (RFC 9110 section 5.6.4): HTAB, SP, visible ASCII, obs-text.
            let allowed = byte == .tab || byte >= 0x20 && byte != 0x7F
            guard allowed else { throw .invalidChunkExtension }
            if escaped { return .quotedValue(escaped: false) }
            if byte == .backslash { return .quotedValue(escaped: true) }
            if byte == .quote { return .afterValue }
            return .quotedValue(escaped: false)
        case .afterValue:
            if byte.isOptionalWhitespace { return .afterValue }
            if byte == .semicolon { return .extensionName(started: false) }
        case .lineFeed:
            break
        }
        throw .invalidChunkExtension
    }
}
