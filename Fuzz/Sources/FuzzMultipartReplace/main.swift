// multipart/x-mixed-replace bodies of arbitrary bytes. Byte 0 picks the boundary (a short one, a
// 70-character one, one of dashes), byte 1 a piece size for slicing (0: whole). The rest is the
// body, parsed whole, in those pieces, and one byte at a time, then finished.
//
// Whatever the input, only `headTooLong` is thrown and nothing traps; the parts (heads and joined
// bodies) do not depend on the slicing; parts begin and end in turn; no part's body holds more
// bytes than the input; and a head's fields come from at most `maximumHeadBytes` of input.
import CourierPolicies

private let boundaries = ["XYZ", String(repeating: "b", count: 70), "--", "frame"]

/// What the parser reported, joined so that it does not depend on the slicing.
private enum Part: Equatable {
    case began([String])
    case body([UInt8])
    case ended
    case failed
}

private func run(_ body: UnsafeRawBufferPointer, boundary: String, piece: Int) -> [Part] {
    var parser = MultipartReplaceParser(boundary: boundary)
    var parts: [Part] = []
    var open = false
    func record(_ event: MultipartReplaceParser.Event) {
        switch event {
        case .partBegan(let fields):
            precondition(!open, "a part began inside another")
            open = true
            parts.append(.began(fields.map { "\($0.name):\($0.value)" }))
        case .body(let bytes):
            precondition(open, "body bytes outside a part")
            precondition(!bytes.isEmpty, "an empty body event")
            if case .body(let earlier)? = parts.last {
                parts[parts.count - 1] = .body(earlier + Array(bytes))
            } else {
                parts.append(.body(Array(bytes)))
            }
        case .partEnded:
            precondition(open, "a part ended that had not begun")
            open = false
            parts.append(.ended)
        }
    }
    var offset = 0
    let size = piece == 0 ? max(body.count, 1) : piece
    while offset < body.count {
        let end = min(offset + size, body.count)
        do throws(MultipartReplaceParser.Failure) {
            try parser.parse(UnsafeRawBufferPointer(rebasing: body[offset..<end]), record)
        } catch {
            precondition(error == .headTooLong)
            parts.append(.failed)
            return parts
        }
        offset = end
    }
    parser.finish(record)
    precondition(!open, "a part left open after finish")
    precondition(parser.isFinished, "not finished after finish")
    return parts
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMultipartReplace(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 2 else { return 0 }
    let boundary = boundaries[Int(data[0]) % boundaries.count]
    let piece = Int(data[1] & 0x3F)
    let body = UnsafeRawBufferPointer(start: data + 2, count: size - 2)
    let whole = run(body, boundary: boundary, piece: 0)
    for part in whole {
        if case .body(let bytes) = part { precondition(bytes.count <= body.count, "a body larger than the input") }
    }
    if piece > 0 { precondition(run(body, boundary: boundary, piece: piece) == whole, "the parts depend on the slicing") }
    precondition(run(body, boundary: boundary, piece: 1) == whole, "byte-at-a-time parsing differs")
    return 0
}
