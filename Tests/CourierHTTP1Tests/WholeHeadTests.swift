import CourierCore
import CourierHTTP1
import Testing

/// A head that arrives whole is parsed in one pass; a head that arrives in pieces is gathered
/// line by line and parsed after. The two must agree on every input: the same head, the same
/// bytes used, the same framing after it, and the same error. Each head below is fed both
/// ways as it is and with one byte changed or removed at every position.
@Suite("Whole-head parsing")
struct WholeHeadTests {
    /// What the parser reported, in order, until the message ended or failed.
    private enum Outcome: Equatable, CustomStringConvertible {
        case informational(HTTPResponseHead)
        case head(HTTPResponseHead, usedUpTo: Int)
        case body([UInt8])
        case end(HTTPFields?)
        case failed(String)
        case needsMore

        var description: String {
            switch self {
            case .informational(let head): return "informational \(head.status)"
            case .head(let head, let used): return "head \(head.status) \(head.reason) \(head.fields.fields) up to \(used)"
            case .body(let bytes): return "body \(bytes.count) bytes"
            case .end(let trailers): return "end \(trailers?.fields ?? [])"
            case .failed(let error): return "failed \(error)"
            case .needsMore: return "needs more"
            }
        }
    }

    /// Feeds `input` in pieces of `piece` bytes (the whole input when nil) and records what
    /// the parser reported; body spans are merged.
    private func outcomes(_ input: [UInt8], options: HTTP1ParserOptions, piece: Int?) -> [Outcome] {
        var parser = HTTP1ResponseParser(options: options)
        parser.expectResponse(to: .get)
        var outcomes: [Outcome] = []
        var body: [UInt8] = []
        var used = 0
        let size = piece ?? max(input.count, 1)
        var pieceStart = 0
        while pieceStart < input.count {
            let chunk = Array(input[pieceStart..<min(pieceStart + size, input.count)])
            var offset = 0
            while true {
                let step: HTTP1ParseStep
                do {
                    step = try chunk.withUnsafeBytes { try parser.next(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
                } catch {
                    if !body.isEmpty { outcomes.append(.body(body)) }
                    return outcomes + [.failed("\(error)")]
                }
                used += step.consumed
                switch step.event {
                case .informational(let head)?:
                    outcomes.append(.informational(head))
                case .head(let head)?:
                    outcomes.append(.head(head, usedUpTo: used))
                case .body(let range)?:
                    body += chunk[(offset + range.lowerBound)..<(offset + range.upperBound)]
                case .end(let trailers)?:
                    if !body.isEmpty { outcomes.append(.body(body)) }
                    return outcomes + [.end(trailers)]
                case nil:
                    break
                }
                offset += step.consumed
                if step.event == nil { break }
            }
            pieceStart += size
        }
        if !body.isEmpty { outcomes.append(.body(body)) }
        return outcomes + [.needsMore]
    }

    private static let heads: [String] = [
        "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nContent-Type: application/octet-stream\r\nContent-Length: 5\r\nConnection: keep-alive\r\nETag: \"6740c9f0-64\"\r\n\r\nhello",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Tabs:\t a\tb \t\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 404 Not Found\r\nContent-Length: 2\r\nX-Empty:\r\nX-Obs: caf\u{e9}\r\n\r\nno",
        "HTTP/1.1 204\r\nA: b\r\n\r\n",
        "HTTP/1.1 200 OK\nContent-Length: 1\nX-Folded: a\r\n b\r\n\r\nz",
        "\r\nHTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n",
        // Names and values longer than sixteen bytes, marks in a name, whitespace to trim
        // on both sides of a value: the scanner's vector loops and the byte-by-byte ends.
        "HTTP/1.1 200 OK\r\nX-Request_Id.Trace~Mark!: \t 0123456789abcdef-0123456789abcdef \t\r\nContent-Length: 3\r\nX-Obs-Text-Long: caf\u{e9} au lait, caf\u{e9} cr\u{e8}me\r\n\r\nabc",
    ]

    private static let optionSets: [HTTP1ParserOptions] = {
        var lenient = HTTP1ParserOptions()
        lenient.allowsBareLineFeed = true
        lenient.allowsObsoleteLineFolding = true
        var strict = HTTP1ParserOptions()
        strict.skipsOneEmptyLineBeforeStatusLine = false
        strict.maxHeaderFieldCount = 3
        var small = HTTP1ParserOptions()
        small.maxHeaderSectionBytes = 64
        return [HTTP1ParserOptions(), lenient, strict, small]
    }()

    /// Bytes that mean something to a head: line ends, whitespace, the colon, controls, DEL,
    /// obs-text, a letter, a digit.
    private static let replacements: [UInt8?] = [0x0D, 0x0A, 0x20, 0x09, 0x3A, 0x00, 0x7F, 0xE9, 0x41, 0x31, nil]

    private func check(_ input: [UInt8], _ options: HTTP1ParserOptions, _ label: String) -> Bool {
        let whole = outcomes(input, options: options, piece: nil)
        let bytewise = outcomes(input, options: options, piece: 1)
        let split = outcomes(input, options: options, piece: 7)
        guard whole == bytewise, whole == split else {
            Issue.record("\(label): whole \(whole), bytewise \(bytewise), pieces of 7 \(split)")
            return false
        }
        return true
    }

    @Test("heads as they are: whole and in pieces agree", arguments: 0..<heads.count)
    func unchanged(_ index: Int) {
        let input = Array(Self.heads[index].utf8)
        for (number, options) in Self.optionSets.enumerated() {
            _ = check(input, options, "head \(index), options \(number)")
        }
        // Parsed whole at all, not only refused alike.
        let whole = outcomes(input, options: Self.optionSets[1], piece: nil)
        #expect(whole.contains { if case .head = $0 { return true } else { return false } }, "\(whole)")
    }

    @Test("a byte changed or removed anywhere: whole and in pieces agree", arguments: 0..<heads.count)
    func mutated(_ index: Int) {
        let input = Array(Self.heads[index].utf8)
        for (number, options) in Self.optionSets.enumerated() {
            for position in input.indices {
                for replacement in Self.replacements {
                    var changed = input
                    if let replacement { changed[position] = replacement } else { changed.remove(at: position) }
                    let label = "head \(index), options \(number), byte \(position) → \(replacement.map { "\($0)" } ?? "removed")"
                    if !check(changed, options, label) { return }
                }
            }
        }
    }
}
