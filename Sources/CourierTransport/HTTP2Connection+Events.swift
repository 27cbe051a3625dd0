import CourierCore
import CourierHTTP2

extension HTTP2Connection {
    /// The stream's and the nghttp2 session's delegate in the connection's place: both hold
    /// their delegate weakly, which would give the connection a side table and send every
    /// retain and release of it down the runtime's slow path (``HTTP1Connection/StreamEvents``
    /// tells the same for HTTP/1). This object takes the weak references and holds the
    /// connection until its close sets `target` to nil; a callback after that is dropped.
    final class Events: StreamEventsForwarder, HTTP2SessionDelegate {
        @exclusivity(unchecked) var target: HTTP2Connection?

        init(_ connection: HTTP2Connection) {
            target = connection
        }

        func http2Stream(_ streamID: Int32, didReceiveHead head: HTTPResponseHead) {
            target?.http2Stream(streamID, didReceiveHead: head)
        }
        func http2Stream(_ streamID: Int32, didReceiveInformationalHead head: HTTPResponseHead) {
            target?.http2Stream(streamID, didReceiveInformationalHead: head)
        }
        func http2Stream(_ streamID: Int32, didReceiveData bytes: UnsafeRawBufferPointer) {
            target?.http2Stream(streamID, didReceiveData: bytes)
        }
        func http2Stream(_ streamID: Int32, didReceiveTrailers trailers: HTTPFields) {
            target?.http2Stream(streamID, didReceiveTrailers: trailers)
        }
        func http2Stream(_ streamID: Int32, didCloseWith error: HTTP2StreamError?) {
            target?.http2Stream(streamID, didCloseWith: error)
        }
        func http2DidReceiveMaxConcurrentStreams(_ limit: Int) { target?.http2DidReceiveMaxConcurrentStreams(limit) }
        func http2DidReceiveGoAway(lastStreamID: Int32, errorCode: UInt32) {
            target?.http2DidReceiveGoAway(lastStreamID: lastStreamID, errorCode: errorCode)
        }
        func http2DidReceivePingAcknowledgement() { target?.http2DidReceivePingAcknowledgement() }
        func http2DidReceiveSettingsAcknowledgement() { target?.http2DidReceiveSettingsAcknowledgement() }
        func http2Stream(_ streamID: Int32, readBodyInto buffer: UnsafeMutableRawBufferPointer) -> HTTP2BodyChunk {
            target?.http2Stream(streamID, readBodyInto: buffer) ?? .notReady
        }
    }
}
