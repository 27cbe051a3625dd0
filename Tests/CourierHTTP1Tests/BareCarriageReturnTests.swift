import CourierCore
import CourierHTTP1
import Testing

/// A CR that is not the first half of a CRLF is refused as `bareCarriageReturn` wherever it is
/// in a head or a trailer section. The parser does not search for one up front: it relies on
/// every rule of a status line and a field line refusing a CR, and names the bare CR when the
/// parse fails. These tests put one at every position, and feed each input in two pieces split
/// at every point, so a line that straddles two reads is covered too.
@Suite("Bare CR")
struct BareCarriageReturnTests {
    static let head = Array("HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length: 0\r\nX-A: b c\r\n\r\n".utf8)
    static let chunkedHead = Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n".utf8)
    static let trailers = Array("X-Sum: 12\r\nX-B: c\r\n\r\n".utf8)

    /// The first error the parser reports for `input` fed in the pieces `input[..<split]` and
    /// `input[split...]`, or nil when it reports none.
    private func firstError(_ input: [UInt8], split: Int) -> HTTP1ResponseError? {
        var parser = HTTP1ResponseParser()
        parser.expectResponse(to: .get)
        for piece in [Array(input[..<split]), Array(input[split...])] {
            var offset = 0
            while true {
                do {
                    let step = try piece.withUnsafeBytes { try parser.next(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
                    offset += step.consumed
                    guard let event = step.event else { break }
                    if case .end = event { return nil }
                } catch let error as HTTP1ResponseError {
                    return error
                } catch {
                    Issue.record("unexpected error \(error)")
                    return nil
                }
            }
        }
        return nil
    }

    /// `bytes` with a CR put in before `position`, unless the byte there is an LF (the CR
    /// would then end the line, which is allowed). A CRLF pair follows, so that a section whose
    /// empty last line the CR turned into "CR CR LF" still ends.
    private func insertingBareCR(into bytes: [UInt8], at position: Int) -> [UInt8]? {
        if position < bytes.count && bytes[position] == UInt8(ascii: "\n") { return nil }
        var result = bytes
        result.insert(UInt8(ascii: "\r"), at: position)
        return result + Array("\r\n".utf8)
    }

    @Test("the clean inputs parse")
    func cleanInputsParse() {
        #expect(firstError(Self.head, split: 0) == nil)
        #expect(firstError(Self.chunkedHead + Self.trailers, split: 0) == nil)
    }

    @Test("a bare CR anywhere in a head, fed in two pieces split anywhere, is bareCarriageReturn")
    func inHead() {
        // The last position is after the head's final LF: that CR belongs to no section.
        for position in 0..<Self.head.count {
            guard let input = insertingBareCR(into: Self.head, at: position) else { continue }
            for split in 0...input.count {
                let error = firstError(input, split: split)
                #expect(error == .bareCarriageReturn, "CR before byte \(position), split at \(split): \(String(describing: error))")
            }
        }
    }

    @Test("a bare CR anywhere in a trailer section is bareCarriageReturn")
    func inTrailers() {
        for position in 0..<Self.trailers.count {
            guard let withCR = insertingBareCR(into: Self.trailers, at: position) else { continue }
            let input = Self.chunkedHead + withCR
            for split in Self.chunkedHead.count...input.count {
                let error = firstError(input, split: split)
                #expect(error == .bareCarriageReturn, "CR before trailer byte \(position), split at \(split): \(String(describing: error))")
            }
        }
    }

    @Test("a bare CR is named even when a line before it breaks another rule")
    func namedBeforeOtherErrors() {
        let input = Array("HTTP/1.1 200 OK\r\nBad Name: x\r\nX-A: b\rc\r\n\r\n".utf8)
        #expect(firstError(input, split: 0) == .bareCarriageReturn)
        let withoutCR = Array("HTTP/1.1 200 OK\r\nBad Name: x\r\nX-A: bc\r\n\r\n".utf8)
        #expect(firstError(withoutCR, split: 0) == .invalidFieldName)
    }
}
