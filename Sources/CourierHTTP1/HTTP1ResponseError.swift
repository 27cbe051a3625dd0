import CourierCore

/// The ways a server's HTTP/1.x response can break RFC 9112. Any of these retires the connection.
public enum HTTP1ResponseError: String, RemoteProtocolError, Equatable, Hashable, CaseIterable {
    /// The status line is not `HTTP/x.y SP 3DIGIT [SP reason]`.
    case invalidStatusLine
    /// A major version other than 1 (HTTP/2 is never spoken on an HTTP/1 connection).
    case unsupportedHTTPVersion
    /// The status code is not three digits from 100 to 599.
    case invalidStatusCode
    /// A field line without a colon.
    case invalidFieldLine
    /// A field name that is not a token.
    case invalidFieldName
    /// Whitespace between a field name and its colon (RFC 9112 section 5.1: must be rejected).
    case whitespaceBeforeColon
    /// A field value with a control character (NUL among them).
    case invalidFieldValue
    /// A CR that is not followed by LF.
    case bareCarriageReturn
    /// A line ended by LF alone (allowed only by `allowsBareLineFeed`).
    case bareLineFeed
    /// A field line continued with leading whitespace (obs-fold, RFC 9112 section 5.2).
    case obsoleteLineFolding
    /// The header (or trailer) section grew past `maxHeaderSectionBytes`.
    case headerSectionTooLarge
    /// The header (or trailer) section held more than `maxHeaderFieldCount` fields.
    case tooManyHeaderFields
    /// More interim (1xx) responses than `maxInformationalResponses`.
    case tooManyInformationalResponses
    /// Both Transfer-Encoding and Content-Length: the classic request-smuggling ambiguity.
    case contentLengthWithTransferEncoding
    /// Content-Length values that disagree.
    case conflictingContentLength
    /// A Content-Length that is not a non-negative decimal number that fits in 63 bits.
    case invalidContentLength
    /// A transfer coding other than a single `chunked`. RFC 9112 section 6.3 would read such a
    /// body until close, but Courier decodes no other transfer coding, so it refuses the
    /// response rather than hand over bytes it cannot decode.
    case unsupportedTransferCoding
    /// Transfer-Encoding on an HTTP/1.0 response (RFC 9112 section 6.1: faulty framing).
    case transferEncodingInHTTP10
    /// A chunk-size line that is not hexadecimal digits.
    case invalidChunkSize
    /// A chunk size that does not fit in 63 bits.
    case chunkSizeOverflow
    /// A chunk extension with a control character or not introduced by `;`.
    case invalidChunkExtension
    /// Chunk extensions longer than `maxChunkExtensionBytes`.
    case chunkExtensionTooLong
    /// Chunk data not followed by CRLF.
    case missingChunkTerminator
    /// The connection closed inside a response head.
    case truncatedHead
    /// The connection closed before the body's declared end.
    case truncatedBody

    /// True when the failure is the connection ending early rather than a malformed message;
    /// Apple reports those as `networkConnectionLost`.
    public var isTruncation: Bool { self == .truncatedHead || self == .truncatedBody }

    public var description: String {
        switch self {
        case .invalidStatusLine: return "invalid HTTP/1 status line"
        case .unsupportedHTTPVersion: return "unsupported HTTP version in status line"
        case .invalidStatusCode: return "invalid HTTP status code"
        case .invalidFieldLine: return "header field line without a colon"
        case .invalidFieldName: return "invalid header field name"
        case .whitespaceBeforeColon: return "whitespace between header field name and colon"
        case .invalidFieldValue: return "control character in header field value"
        case .bareCarriageReturn: return "CR not followed by LF"
        case .bareLineFeed: return "line ended by LF without CR"
        case .obsoleteLineFolding: return "obsolete line folding in header section"
        case .headerSectionTooLarge: return "header section too large"
        case .tooManyHeaderFields: return "too many header fields"
        case .tooManyInformationalResponses: return "too many interim (1xx) responses"
        case .contentLengthWithTransferEncoding: return "response has both Content-Length and Transfer-Encoding"
        case .conflictingContentLength: return "conflicting Content-Length values"
        case .invalidContentLength: return "invalid Content-Length"
        case .unsupportedTransferCoding: return "unsupported Transfer-Encoding"
        case .transferEncodingInHTTP10: return "Transfer-Encoding in an HTTP/1.0 response"
        case .invalidChunkSize: return "invalid chunk size"
        case .chunkSizeOverflow: return "chunk size too large"
        case .invalidChunkExtension: return "invalid chunk extension"
        case .chunkExtensionTooLong: return "chunk extension too long"
        case .missingChunkTerminator: return "chunk data not followed by CRLF"
        case .truncatedHead: return "connection closed inside the response head"
        case .truncatedBody: return "connection closed before the end of the response body"
        }
    }
}

/// Limits and leniencies of the response parser. Every leniency but one (an empty line before
/// the status line, which browsers skip too) is off by default.
public struct HTTP1ParserOptions: Sendable, Equatable {
    /// Largest header section (status line and fields, with line ends), and likewise the
    /// largest trailer section, in bytes.
    public var maxHeaderSectionBytes: Int = HTTP1ParserOptions.defaultMaxHeaderSectionBytes
    /// Most field lines in a header or trailer section.
    public var maxHeaderFieldCount: Int = HTTP1ParserOptions.defaultMaxHeaderFieldCount
    /// Longest run of chunk extensions on one chunk-size line, in bytes. Extensions carry no
    /// meaning for Courier; the bound stops a server from streaming an endless size line.
    public var maxChunkExtensionBytes: Int = HTTP1ParserOptions.defaultMaxChunkExtensionBytes
    /// Most interim (1xx) responses before the final one; bounds a server that never finishes.
    public var maxInformationalResponses: Int = HTTP1ParserOptions.defaultMaxInformationalResponses
    /// Accept LF alone as a line end in the head, trailers and chunk framing.
    ///
    /// - Warning: lines ended differently by two parsers on one path are a request-smuggling
    ///   and response-splitting vector (RFC 9112 section 2.2); enable only for a known server.
    public var allowsBareLineFeed: Bool = false
    /// Accept obsolete line folding (a field line starting with whitespace continues the
    /// previous value), replacing each fold with spaces as RFC 9112 section 5.2 describes.
    ///
    /// - Warning: folded lines are read differently by different parsers, which is how a
    ///   folded Transfer-Encoding or Content-Length slips past one of them. RFC 9112 asks a user
    ///   agent to unfold; Courier refuses folded responses unless this is set, because no
    ///   current server needs folding and refusing closes the ambiguity.
    public var allowsObsoleteLineFolding: Bool = false
    /// Skip one empty line (CRLF) where a status line should start, as browsers and llhttp
    /// do: some servers send a stray CRLF after a body. On by default; a second empty line is
    /// still an invalid status line. RFC 9112 section 2.2 asks the same of servers reading
    /// requests.
    public var skipsOneEmptyLineBeforeStatusLine: Bool = true

    public static let defaultMaxHeaderSectionBytes = 256 * 1024
    public static let defaultMaxHeaderFieldCount = 1000
    public static let defaultMaxChunkExtensionBytes = 4 * 1024
    public static let defaultMaxInformationalResponses = 32

    public init() {}
}
