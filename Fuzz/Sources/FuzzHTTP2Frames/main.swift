// HTTP/2 frames into a client session: three requests are open (one with a streamed body),
// the server's preface (an empty SETTINGS frame) has arrived, and the input follows as more
// server bytes, fed in two pieces with the output drained after each. Only HTTP2Error may
// escape; nothing may trap.
import CourierCore
import CourierHTTP2

/// Takes whatever the session reports and serves a small streamed body.
final class Sink: HTTP2SessionDelegate {
    var bodyLeft = 3
    func http2Stream(_ streamID: Int32, didReceiveHead head: HTTPResponseHead) {}
    func http2Stream(_ streamID: Int32, didReceiveData bytes: UnsafeRawBufferPointer) {}
    func http2Stream(_ streamID: Int32, didReceiveTrailers trailers: HTTPFields) {}
    func http2Stream(_ streamID: Int32, didCloseWith error: HTTP2StreamError?) {}
    func http2DidReceiveMaxConcurrentStreams(_ limit: Int) {}
    func http2DidReceiveGoAway(lastStreamID: Int32, errorCode: UInt32) {}
    func http2DidReceivePingAcknowledgement() {}
    func http2DidReceiveSettingsAcknowledgement() {}
    func http2Stream(_ streamID: Int32, readBodyInto buffer: UnsafeMutableRawBufferPointer) -> HTTP2BodyChunk {
        guard bodyLeft > 0, buffer.count > 0 else { return .bytes(count: 0, end: true) }
        bodyLeft -= 1
        buffer[0] = 0x61
        return .bytes(count: 1, end: bodyLeft == 0)
    }
}

let serverPreface: [UInt8] = [0, 0, 0, 4, 0, 0, 0, 0, 0]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHTTP2Frames(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let sink = Sink()
    guard let session = try? HTTP2ClientSession(delegate: sink) else { return 0 }
    var out = ByteBuffer()
    for index in 0..<3 {
        let head = HTTPRequestHead(method: index == 2 ? .post : .get, target: "/\(index)", authority: "fuzz.invalid", scheme: "https")
        _ = try? session.submitRequest(head, body: index == 2 ? .streamed : .none)
    }
    session.drainOutput(into: &out)
    out.clear()
    serverPreface.withUnsafeBytes { _ = try? session.receive($0) }
    let input = UnsafeRawBufferPointer(start: data, count: size)
    let cut = size / 2
    for piece in [input[..<cut], input[cut...]] {
        do {
            try session.receive(UnsafeRawBufferPointer(rebasing: piece))
        } catch {
            return 0
        }
        session.drainOutput(into: &out)
        out.clear()
        session.consume(streamID: 1, count: piece.count)
        if session.connectionFailure != nil { return 0 }
    }
    session.ping()
    session.drainOutput(into: &out)
    return 0
}
