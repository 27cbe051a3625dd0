// WebSocket frames of arbitrary bytes, as a client reads them. Byte 0 picks the role (bit 0:
// server, expecting masked frames), whether RSV1 is allowed (bit 1) and a piece size for
// slicing (bits 2–7; 0: whole). The rest is parsed whole, in those pieces and a byte at a
// time, each frame handed to a message reader.
//
// Whatever the input, only `WebSocketError` is thrown and nothing traps; the frames, messages
// and the error do not depend on the slicing; no frame is over the parser's limit, no control
// frame over 125 bytes or fragmented, no message over the reader's limit, and every text
// message is valid UTF-8.
import CourierWebSocket

private let frameLimit = 4096
private let messageLimit = 8192

private enum Outcome: Equatable {
    case frame(WebSocketFrame)
    case message(WebSocketMessage)
    case failed(WebSocketError)
}

private func run(_ input: UnsafeRawBufferPointer, role: WebSocketRole, rsv1: Bool, piece: Int) -> [Outcome] {
    var parser = WebSocketFrameParser(role: role, maximumFramePayload: frameLimit, allowsRSV1: rsv1)
    var reader = WebSocketMessageReader(maximumMessageSize: messageLimit)
    var outcomes: [Outcome] = []
    var offset = 0
    while offset < input.count {
        let end = piece == 0 ? input.count : min(input.count, offset + piece)
        var position = offset
        while position < end {
            do {
                let step = try parser.next(UnsafeRawBufferPointer(rebasing: input[position..<end]))
                precondition(step.consumed >= 0 && position + step.consumed <= end, "the parser used bytes it was not given")
                position += step.consumed
                guard let frame = step.frame else {
                    precondition(position == end, "the parser stopped without a frame before the end of its input")
                    break
                }
                precondition(frame.payload.count <= frameLimit, "a frame over the limit")
                if frame.opcode.isControl { precondition(frame.fin && frame.payload.count <= 125, "a bad control frame passed") }
                outcomes.append(.frame(frame))
                if let message = try reader.read(frame) {
                    switch message {
                    case .binary(let bytes): precondition(bytes.count <= messageLimit, "a message over the limit")
                    case .text(let text):
                        precondition(text.utf8.count <= messageLimit, "a message over the limit")
                        var validator = UTF8Validator()
                        precondition(validator.feed(text.utf8) && validator.isComplete, "a text message that is not UTF-8")
                    case .compressed(_, let payload):
                        precondition(rsv1 && payload.count <= messageLimit, "a compressed message where none was negotiated, or over the limit")
                    default: break
                    }
                    outcomes.append(.message(message))
                }
            } catch {
                outcomes.append(.failed(error))
                return outcomes
            }
        }
        offset = end
    }
    return outcomes
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzWebSocketFrames(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 1 else { return 0 }
    let role: WebSocketRole = data[0] & 1 == 0 ? .client : .server
    let rsv1 = data[0] & 2 != 0
    let piece = Int(data[0] >> 2)
    let input = UnsafeRawBufferPointer(start: data + 1, count: size - 1)
    let whole = run(input, role: role, rsv1: rsv1, piece: 0)
    if piece > 0 { precondition(run(input, role: role, rsv1: rsv1, piece: piece) == whole, "the outcome depends on the slicing") }
    precondition(run(input, role: role, rsv1: rsv1, piece: 1) == whole, "byte-at-a-time parsing differs")
    return 0
}
