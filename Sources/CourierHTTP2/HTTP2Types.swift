import CourierCore

/// Settings and limits of a client HTTP/2 session.
public struct HTTP2Configuration: Sendable {
    /// SETTINGS_INITIAL_WINDOW_SIZE: how much each stream may send before we consume, and so
    /// what a paused stream can hold. A stream whose reader keeps up grows its window towards
    /// ``maximumStreamWindowSize`` when the round trip, not the reader, would hold it back
    /// (`StreamWindow` in CourierTransport).
    public var initialStreamWindowSize: Int32 = 1024 * 1024
    /// The largest a stream's window grows: 8 MiB keeps one stream at 80 MB/s over a 100 ms
    /// round trip.
    public var maximumStreamWindowSize: Int32 = 8 * 1024 * 1024
    /// The connection-level receive window (shared by all streams).
    public var connectionWindowSize: Int32 = 32 * 1024 * 1024
    /// SETTINGS_MAX_HEADER_LIST_SIZE, and the most header bytes (name + value + 32 per field,
    /// as RFC 9113 section 6.5.2 counts) accepted on a stream before it is reset: the HPACK-bomb
    /// defence.
    public var maxHeaderListSize: Int = 256 * 1024
    /// Streams we allow the server to open: none (push is disabled).
    public var maxConcurrentPushStreams: Int = 0
    /// The longest a request sent from Swift's cooperative pool beside other open streams waits
    /// for the flush it queued there (see `HTTP2Connection` in CourierTransport): a pool with
    /// free threads runs it within tens of microseconds, so this bounds the wait only on a pool
    /// held by long jobs, where a millisecond more is small beside them.
    public var queuedFlushDelayLimit: Duration = .milliseconds(1)

    public init() {}
}

/// Why a stream ended without its response completing.
public enum HTTP2StreamError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The server reset the stream (RST_STREAM) with this error code.
    case reset(code: UInt32)
    /// The server refused the stream before processing it (REFUSED_STREAM, or above a
    /// GOAWAY's last stream id): safe to retry elsewhere.
    case refused
    /// The response broke HTTP/2 message rules (bad pseudo-headers, content-length not
    /// matching DATA, …); nghttp2 reset the stream.
    case protocolError(code: UInt32)
    /// The response header list exceeded `maxHeaderListSize`.
    case headerListTooLarge
    /// We cancelled the stream.
    case cancelled

    public var description: String {
        switch self {
        case .reset(let code): return "the server reset the stream (\(HTTP2ErrorCode.name(code)))"
        case .refused: return "the server refused the stream"
        case .protocolError(let code): return "HTTP/2 protocol error on the stream (\(HTTP2ErrorCode.name(code)))"
        case .headerListTooLarge: return "the response header list is too large"
        case .cancelled: return "cancelled"
        }
    }
}

extension HTTP2StreamError: RemoteProtocolError {}

/// A connection-level HTTP/2 failure.
public enum HTTP2Error: Error, Sendable, Equatable, CustomStringConvertible {
    /// The peer broke the protocol (a malformed frame, a flow-control violation, …).
    case protocolViolation(String)
    /// nghttp2 could not be set up.
    case setupFailed(String)

    public var description: String {
        switch self {
        case .protocolViolation(let why): return "HTTP/2 protocol violation: \(why)"
        case .setupFailed(let why): return "HTTP/2 setup failed: \(why)"
        }
    }
}

extension HTTP2Error: RemoteProtocolError {}

/// Why a request could not be opened as a stream.
public enum HTTP2SubmitError: LocalProtocolError, Equatable {
    /// The request head is invalid; no connection would take it.
    case invalidRequest(HTTPFieldError)
    /// This connection can open no more streams (its stream identifiers are used up, or
    /// nghttp2 is out of memory); another connection can take the request.
    case streamUnavailable(String)

    public var description: String {
        switch self {
        case .invalidRequest(let error): return error.description
        case .streamUnavailable(let why): return "the HTTP/2 connection cannot open another stream: \(why)"
        }
    }
}

/// HTTP/2 error codes (RFC 9113 section 7).
public enum HTTP2ErrorCode {
    public static let noError: UInt32 = 0x0
    public static let protocolError: UInt32 = 0x1
    public static let refusedStream: UInt32 = 0x7
    public static let cancel: UInt32 = 0x8

    static func name(_ code: UInt32) -> String {
        let names: [UInt32: String] = [
            0x0: "NO_ERROR", 0x1: "PROTOCOL_ERROR", 0x2: "INTERNAL_ERROR", 0x3: "FLOW_CONTROL_ERROR",
            0x4: "SETTINGS_TIMEOUT", 0x5: "STREAM_CLOSED", 0x6: "FRAME_SIZE_ERROR", 0x7: "REFUSED_STREAM",
            0x8: "CANCEL", 0x9: "COMPRESSION_ERROR", 0xa: "CONNECT_ERROR", 0xb: "ENHANCE_YOUR_CALM",
            0xc: "INADEQUATE_SECURITY", 0xd: "HTTP_1_1_REQUIRED",
        ]
        return names[code] ?? "error \(code)"
    }
}

/// How a request body is sent on a stream.
public enum HTTP2RequestBody: Sendable, Equatable {
    /// No body: END_STREAM on the HEADERS frame.
    case none
    /// A body of known length: `content-length` is sent.
    case known(length: Int64)
    /// A body of unknown length: DATA frames until the source says it ended.
    case streamed
}

/// What the body source handed over for a stream.
public enum HTTP2BodyChunk {
    /// `count` bytes were copied into the buffer; `end` when they are the last.
    case bytes(count: Int, end: Bool)
    /// Nothing yet; call ``HTTP2ClientSession/resumeBody(streamID:)`` when there is.
    case notReady
}

/// Receives what happens on an HTTP/2 client session; called synchronously from inside
/// ``HTTP2ClientSession/receive(_:)`` and ``HTTP2ClientSession/drainOutput(into:)``.
public protocol HTTP2SessionDelegate: AnyObject {
    /// The final response head of a stream.
    func http2Stream(_ streamID: Int32, didReceiveHead head: HTTPResponseHead)
    /// An interim 1xx head of a stream (103 Early Hints, say); the final head follows.
    func http2Stream(_ streamID: Int32, didReceiveInformationalHead head: HTTPResponseHead)
    /// Body bytes, lent for the call. Tell the session when they are consumed (flow control).
    func http2Stream(_ streamID: Int32, didReceiveData bytes: UnsafeRawBufferPointer)
    /// Trailer fields, before the stream completes.
    func http2Stream(_ streamID: Int32, didReceiveTrailers trailers: HTTPFields)
    /// The stream ended: `error` nil when the response is complete.
    func http2Stream(_ streamID: Int32, didCloseWith error: HTTP2StreamError?)
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS, when it sends one.
    func http2DidReceiveMaxConcurrentStreams(_ limit: Int)
    /// The server is going away: streams above `lastStreamID` will be closed as refused.
    func http2DidReceiveGoAway(lastStreamID: Int32, errorCode: UInt32)
    /// A PING we sent was answered.
    func http2DidReceivePingAcknowledgement()
    /// The server acknowledged our SETTINGS (the first one: the session sends no other).
    func http2DidReceiveSettingsAcknowledgement()
    /// The session needs body bytes for a stream: copy up to `buffer.count` into it.
    func http2Stream(_ streamID: Int32, readBodyInto buffer: UnsafeMutableRawBufferPointer) -> HTTP2BodyChunk
}

extension HTTP2SessionDelegate {
    /// Interim heads are of no interest by default.
    public func http2Stream(_ streamID: Int32, didReceiveInformationalHead head: HTTPResponseHead) {}
}
