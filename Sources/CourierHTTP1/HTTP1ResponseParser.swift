import CourierCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What the response parser found in the bytes it was given.
public enum HTTP1ResponseEvent: Sendable, Equatable {
    /// The final response head, or a 101 after which the parser reads nothing more (the
    /// connection now speaks another protocol).
    case head(HTTPResponseHead)
    /// An interim 1xx response other than 101 (100 Continue, 103 Early Hints): the final
    /// head is still to come.
    case informational(HTTPResponseHead)
    /// Body bytes, as positions in the input handed to the call that returned this event.
    case body(Range<Int>)
    /// The message is complete; `trailers` holds the fields of a chunked body's trailer section.
    case end(trailers: HTTPFields?)
}

/// The result of one call to ``HTTP1ResponseParser/next(_:)``.
public struct HTTP1ParseStep: Sendable, Equatable {
    /// How many input bytes the parser used; the rest belong to whatever comes next.
    public var consumed: Int
    /// The event found, or nil when the parser needs more input (or, while idle or upgraded,
    /// takes none).
    public var event: HTTP1ResponseEvent?
}

/// Whether a connection can carry another request once the current response ends.
public enum HTTP1ConnectionReuse: Sendable, Equatable {
    /// Persistent: the next request may follow.
    case keepAlive
    /// The server asked to close, or the body was delimited by the close.
    case close
    /// The connection switched protocols (101) or became a tunnel (2xx to CONNECT).
    case upgraded
}

/// A sans-IO parser of HTTP/1.x responses (RFC 9112), fed arbitrary slices of bytes.
///
/// Design note: the parser is pull-driven. The caller hands it the bytes it has and gets back
/// how many were used and at most one event; it calls again with the rest (even with no bytes
/// left, since a completed head can be followed at once by the end of an empty body) until the
/// step carries no event. Head and trailer bytes are copied once, into the storage the
/// `HTTPFields` of the head keep; body bytes are never copied: a `.body` event names a range of
/// the caller's input. The parser reads nothing while idle: a response is expected only after
/// ``expectResponse(to:)``, so bytes a server sends after the end of a response stay unread for
/// the connection to judge.
///
/// States and their legal successors:
/// - `idle`: no response expected → `head` (``expectResponse(to:)``)
/// - `head`: reading a status line and fields → `head` (1xx skipped), a body state,
///   `complete` (no body), `upgraded`, `failed`
/// - `fixedBody`, `untilClose`: Content-Length or close-delimited body → `complete`
/// - `chunkSize` → `chunkData` or `trailers`; `chunkData` → `chunkDataEnd` → `chunkSize`
/// - `trailers` → `complete`
/// - `complete`: the end event is due → `idle`
/// - `upgraded`: terminal, nothing more is read
/// - `failed`: terminal, every call rethrows the error
public struct HTTP1ResponseParser: Sendable {
    enum State: Sendable {
        case idle
        case head
        case fixedBody(remaining: Int)
        case untilClose
        case chunkSize(ChunkSizeLine)
        case chunkData(remaining: Int)
        case chunkDataEnd(sawCR: Bool)
        case trailers
        case complete(trailers: HTTPFields?)
        case upgraded
        case failed(HTTP1ResponseError)
    }

    /// The methods whose responses are framed differently.
    enum AnsweredRequest: Sendable {
        case head
        case connect
        case other
    }

    /// Progress through one chunk-size line: `chunk-size [ chunk-ext ] CRLF`.
    struct ChunkSizeLine: Sendable {
        /// Where the line is: the size, then RFC 9112's `chunk-ext`
        /// (`*( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] )`), then the LF.
        enum Phase: Sendable {
            case digits
            /// Whitespace after the size: an extension must follow.
            case afterSize
            /// After ";": `started` once the name has a character.
            case extensionName(started: Bool)
            case afterName
            /// After "=".
            case valueStart
            case tokenValue
            case quotedValue(escaped: Bool)
            case afterValue
            case lineFeed
        }
        var value = 0
        var digits = 0
        var extensionBytes = 0
        var phase = Phase.digits
    }

    /// The limits and leniencies in force.
    public let options: HTTP1ParserOptions
    var state: State = .idle
    /// The request being answered: HEAD and CONNECT change the framing. Noted once per request
    /// rather than compared as strings per response.
    var answering: AnsweredRequest = .other
    /// Whether the connection may carry another request, known once a head is parsed.
    public internal(set) var connectionReuse: HTTP1ConnectionReuse = .keepAlive
    /// Head or trailer bytes gathered so far.
    var section: [UInt8] = []
    /// Offset in `section` where the current line starts.
    var lineStart = 0
    /// Lines completed in the current section.
    var sectionLines = 0
    /// An empty line before the status line was skipped for the current head.
    var skippedEmptyLine = false
    /// Interim responses skipped for the current request.
    var informationalCount = 0
    /// Size of the last final head, in bytes as received (status line, fields, line ends).
    public internal(set) var lastHeadByteCount = 0

    /// A parser that expects nothing until ``expectResponse(to:)``.
    public init(options: HTTP1ParserOptions = HTTP1ParserOptions()) {
        self.options = options
    }

    /// True between responses: nothing is expected and nothing will be read.
    public var isIdle: Bool {
        if case .idle = state { return true }
        return false
    }

    /// True when the current message's body runs until the connection closes, so the end of
    /// input completes it (``finish()``) rather than truncating it.
    public var isReadingUntilClose: Bool {
        if case .untilClose = state { return true }
        return false
    }

    /// Prepares for the response to a request sent with `method`.
    public mutating func expectResponse(to method: HTTPMethod) {
        precondition(isIdle, "a response is already being parsed")
        // By length first: comparing unequal Strings takes the slow path of String's `==`.
        switch method.rawValue.utf8.count {
        case 4 where method == .head: answering = .head
        case 7 where method == .connect: answering = .connect
        default: answering = .other
        }
        state = .head
        resetSection()
        informationalCount = 0
        connectionReuse = .keepAlive
    }

    /// Parses as much of `input` as it can and returns the first event found.
    ///
    /// Call again with `input[consumed...]` until the returned step has no event.
    public mutating func next(_ input: UnsafeRawBufferPointer) throws(HTTP1ResponseError) -> HTTP1ParseStep {
        do {
            return try step(input)
        } catch {
            state = .failed(error)
            throw error
        }
    }

    /// Tells the parser the connection has closed, returning the end of a close-delimited
    /// message, nil when no response was under way, and throwing when one was cut short.
    public mutating func finish() throws(HTTP1ResponseError) -> HTTP1ResponseEvent? {
        switch state {
        case .idle, .upgraded:
            return nil
        case .untilClose:
            state = .idle
            return .end(trailers: nil)
        case .complete(let trailers):
            state = .idle
            return .end(trailers: trailers)
        case .failed(let error):
            throw error
        case .head:
            state = .failed(.truncatedHead)
            throw .truncatedHead
        case .fixedBody, .chunkSize, .chunkData, .chunkDataEnd, .trailers:
            state = .failed(.truncatedBody)
            throw .truncatedBody
        }
    }

    /// Inlined into ``next(_:)``, its only caller, so that the step is built where `next`
    /// returns it: returned through a frame of its own, the 65-byte step was copied again, and
    /// the copy's reads waited on the stores just made (two thirds of `next`'s time).
    @inline(__always)
    private mutating func step(_ input: UnsafeRawBufferPointer) throws(HTTP1ResponseError) -> HTTP1ParseStep {
        var offset = 0
        while true {
            switch state {
            case .idle, .upgraded:
                return HTTP1ParseStep(consumed: offset, event: nil)
            case .failed(let error):
                throw error
            case .complete(let trailers):
                state = .idle
                return HTTP1ParseStep(consumed: offset, event: .end(trailers: trailers))
            case .head:
                guard offset < input.count else { return HTTP1ParseStep(consumed: offset, event: nil) }
                // A head that came whole in one read (nearly all do) is parsed in one pass.
                if section.isEmpty, let whole = try parseWholeHead(input, from: offset) {
                    let head = whole.head
                    return HTTP1ParseStep(consumed: offset + whole.used, event: head.isInterim ? .informational(head) : .head(head))
                }
                let (used, done) = try scanSection(input, from: offset)
                offset += used
                guard done else { return HTTP1ParseStep(consumed: offset, event: nil) }
                let head = try finishHead()
                return HTTP1ParseStep(consumed: offset, event: head.isInterim ? .informational(head) : .head(head))
            case .trailers:
                guard offset < input.count else { return HTTP1ParseStep(consumed: offset, event: nil) }
                let (used, done) = try scanSection(input, from: offset)
                offset += used
                guard done else { return HTTP1ParseStep(consumed: offset, event: nil) }
                if options.allowsObsoleteLineFolding { unfoldLines(firstFieldLine: 0) }
                let trailers: ParsedFields
                do {
                    trailers = try parseFields(firstLine: 0)
                } catch {
                    throw blameBareCarriageReturn(error)
                }
                resetSection()
                state = .complete(trailers: trailers.fields.isEmpty ? nil : trailers.fields)
            case .fixedBody(let remaining):
                let available = input.count - offset
                guard available > 0 else { return HTTP1ParseStep(consumed: offset, event: nil) }
                let count = Swift.min(available, remaining)
                state = count == remaining ? .complete(trailers: nil) : .fixedBody(remaining: remaining - count)
                return HTTP1ParseStep(consumed: offset + count, event: .body(offset..<(offset + count)))
            case .untilClose:
                let available = input.count - offset
                guard available > 0 else { return HTTP1ParseStep(consumed: offset, event: nil) }
                return HTTP1ParseStep(consumed: input.count, event: .body(offset..<input.count))
            case .chunkData(let remaining):
                let available = input.count - offset
                guard available > 0 else { return HTTP1ParseStep(consumed: offset, event: nil) }
                let count = Swift.min(available, remaining)
                state = count == remaining ? .chunkDataEnd(sawCR: false) : .chunkData(remaining: remaining - count)
                return HTTP1ParseStep(consumed: offset + count, event: .body(offset..<(offset + count)))
            case .chunkDataEnd(let sawCR):
                guard offset < input.count else { return HTTP1ParseStep(consumed: offset, event: nil) }
                let byte = input[offset]
                offset += 1
                if !sawCR && byte == UInt8.cr {
                    state = .chunkDataEnd(sawCR: true)
                } else if byte == UInt8.lf && (sawCR || options.allowsBareLineFeed) {
                    state = .chunkSize(ChunkSizeLine())
                } else {
                    throw .missingChunkTerminator
                }
            case .chunkSize(var line):
                guard offset < input.count else { return HTTP1ParseStep(consumed: offset, event: nil) }
                let (used, done) = try scanChunkSize(input, from: offset, line: &line)
                offset += used
                if !done {
                    state = .chunkSize(line)
                } else if line.value == 0 {
                    resetSection()
                    state = .trailers
                } else {
                    state = .chunkData(remaining: line.value)
                }
            }
        }
    }

    mutating func resetSection() {
        section = []
        lineStart = 0
        sectionLines = 0
        skippedEmptyLine = false
    }
}

extension UInt8 {
    static let cr = UInt8(ascii: "\r")
    static let lf = UInt8(ascii: "\n")
    static let space = UInt8(ascii: " ")
    static let tab = UInt8(ascii: "\t")
    static let colon = UInt8(ascii: ":")
    static let semicolon = UInt8(ascii: ";")
    static let comma = UInt8(ascii: ",")
    static let equals = UInt8(ascii: "=")
    static let quote = UInt8(ascii: "\"")
    static let backslash = UInt8(ascii: "\\")

    var isOptionalWhitespace: Bool { self == .space || self == .tab }

    var isDigit: Bool { self >= UInt8(ascii: "0") && self <= UInt8(ascii: "9") }

    /// The value of a hexadecimal digit, or nil.
    var hexValue: Int? {
        switch self {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return Int(self - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return Int(self - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return Int(self - UInt8(ascii: "A") + 10)
        default: return nil
        }
    }
}
