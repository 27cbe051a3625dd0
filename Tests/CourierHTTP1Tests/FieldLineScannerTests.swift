import CCourierScan
import CourierCore
import CourierHTTP1
import Testing

/// The C scanner that reads a whole head's field lines (CCourierScan), checked against the
/// byte classes of `HTTPFieldValidation`, and the parser that uses it checked where a head has
/// more lines than one call of the scanner takes.
@Suite("Field line scanner")
struct FieldLineScannerTests {
    /// Runs `body` over `count` letters with `byte` at `position` (no byte changed when nil).
    private func withLetters<T>(count: Int, byte: UInt8?, at position: Int, _ body: (UnsafePointer<UInt8>, Int) -> T) -> T {
        var bytes = Array(repeating: UInt8(ascii: "a"), count: count)
        if let byte { bytes[position] = byte }
        // One spare byte, so an empty buffer still has an address.
        bytes.append(0)
        return bytes.withUnsafeBufferPointer { body($0.baseAddress!, count) }
    }

    /// Checks `prefixCount` against `isMember` for every byte at every position of runs of 1
    /// to 40 letters, and for an empty run.
    private func checkPrefix(_ prefixCount: (UnsafePointer<UInt8>, Int) -> Int, against isMember: (UInt8) -> Bool) {
        for count in 1...40 {
            for position in 0..<count {
                for byte in UInt8.min...UInt8.max {
                    let expected = isMember(byte) ? count : position
                    let found = withLetters(count: count, byte: byte, at: position, prefixCount)
                    if found != expected {
                        Issue.record("byte \(byte) at \(position) of \(count): \(found), expected \(expected)")
                        return
                    }
                }
            }
        }
        #expect(withLetters(count: 0, byte: nil, at: 0, prefixCount) == 0)
    }

    @Test("a token's length: every byte at every position, in runs shorter and longer than sixteen")
    func tokenPrefix() {
        checkPrefix({ courier_token_prefix_count($0, $1) }, against: HTTPFieldValidation.isTokenCharacter)
    }

    @Test("a value's length: every byte at every position, in runs shorter and longer than sixteen")
    func valuePrefix() {
        checkPrefix({ courier_field_value_prefix_count($0, $1) }, against: HTTPFieldValidation.isFieldValueCharacter)
    }

    /// The scanner's result for `text` from offset `start`, with room for `capacity` lines.
    private func scan(_ text: String, from start: Int = 0, capacity: Int = 8, bareLineFeed: Bool = false)
        -> (count: Int, next: Int, finished: Bool, lines: [HTTPFields.Location], nameBits: UInt64)
    {
        let bytes = Array(text.utf8)
        var locations = [courier_field_location](repeating: courier_field_location(), count: capacity)
        var next = -1
        var finished: Int32 = -1
        var nameBits: UInt64 = 0
        let count = bytes.withUnsafeBufferPointer { buffer in
            courier_scan_field_lines(
                buffer.baseAddress, buffer.count, start, bareLineFeed ? 1 : 0, &locations, capacity, &next, &finished, &nameBits
            )
        }
        let lines = locations.prefix(max(0, count)).map {
            HTTPFields.Location(name: Int($0.name_start)..<Int($0.name_end), value: Int($0.value_start)..<Int($0.value_end))
        }
        return (count, next, finished == 1, lines, nameBits)
    }

    @Test("lines are located, their values trimmed, and the empty line ends the scan")
    func locatesLines() {
        let head = "A: b\r\nLonger-Name:\t value with spaces \t\r\nEmpty:\r\n\r\nbody"
        let result = scan(head)
        #expect(result.count == 3)
        #expect(result.finished)
        #expect(result.next == head.utf8.count - 4)
        #expect(result.lines == [
            .init(name: 0..<1, value: 3..<4),
            .init(name: 6..<17, value: 20..<37),
            .init(name: 41..<46, value: 47..<47),
        ])
    }

    @Test("the scanner's name bits are the ones HTTPFields gives the same names")
    func nameBits() {
        let names = ["A", "Server", "content-type", "X-Request_Id.Trace~Mark!", "ETag", "Set-Cookie", "x", "Zz", "~", "1-2"]
        let head = names.map { "\($0): v\r\n" }.joined() + "\r\n"
        let result = scan(head, capacity: 16)
        #expect(result.count == names.count)
        let expected = names.reduce(UInt64(0)) { bits, name in
            let bytes = Array(name.utf8)
            return bits | HTTPFields.nameBit(count: bytes.count, first: bytes.first!, last: bytes.last!)
        }
        #expect(result.nameBits == expected)
        // A call that stops early has the bits of the lines it read (`manyFields` checks that
        // the parser's calls add up).
        let first = scan("A: 1\r\nB: 2\r\n\r\n", capacity: 1)
        #expect(first.nameBits == HTTPFields.nameBit(count: 1, first: UInt8(ascii: "A"), last: UInt8(ascii: "A")))
    }

    @Test("every field of a parsed head is found by name, in any case; others are not")
    func lookups() throws {
        let names = ["Server", "Date", "Content-Type", "Content-Length", "Last-Modified", "Connection", "ETag", "Accept-Ranges", "X-Long-Name_1"]
        let text = "HTTP/1.1 200 OK\r\n" + names.enumerated().map { index, name in
            name == "Content-Length" ? "\(name): 0\r\n" : "\(name): value \(index)\r\n"
        }.joined() + "\r\n"
        let parsed = try [head(Array(text.utf8), maxFields: 100), head(Array(text.utf8), maxFields: 100, pieceSize: 1)].map {
            try #require($0).get()
        }
        for head in parsed {
            for name in names {
                #expect(head.fields.contains(name), "\(name)")
                #expect(head.fields.contains(name.lowercased()), "\(name)")
                #expect(head.fields.contains(name.uppercased()), "\(name)")
                #expect(head.fields.combined(name) != nil, "\(name)")
            }
            for absent in ["Set-Cookie", "Content-Encoding", "Location", "Retry-After", "Serve", "Servers", "X"] {
                #expect(!head.fields.contains(absent), "\(absent)")
                #expect(head.fields.combined(absent) == nil, "\(absent)")
                #expect(head.fields.values(absent).isEmpty, "\(absent)")
            }
        }
        #expect(parsed.count == 2)
    }

    @Test("a full buffer stops at the next line, unfinished")
    func stopsWhenFull() {
        let head = "A: 1\r\nB: 2\r\nC: 3\r\n\r\n"
        let first = scan(head, capacity: 2)
        #expect(first.count == 2)
        #expect(!first.finished)
        #expect(first.next == 12)
        let rest = scan(head, from: first.next, capacity: 2)
        #expect(rest.count == 1)
        #expect(rest.finished)
        #expect(rest.next == head.utf8.count)
        // No room at all: the empty line still ends the scan; a field line does not fit.
        #expect(scan("\r\n", capacity: 0).finished)
        #expect(!scan("A: 1\r\n\r\n", capacity: 0).finished)
    }

    @Test("what the scanner does not take", arguments: [
        "A : b\r\n\r\n",          // space before the colon
        ": b\r\n\r\n",            // no name
        "A b\r\n\r\n",            // no colon
        "A: b\rc\r\n\r\n",        // bare CR in a value
        "A: b\u{7F}\r\n\r\n",     // DEL in a value
        "A: b\r\n c\r\n\r\n",     // a folded line
        "A: b\nC: d\n\n",         // bare line feeds, not allowed here
        "A: b\r\n",               // no empty line
        "A: b\r\n\r",             // cut inside the empty line
        "A(: b\r\n\r\n",          // a delimiter in the name
    ])
    func refuses(_ head: String) {
        #expect(scan(head).count == -1, "\(head.debugDescription)")
    }

    @Test("bare line feeds where allowed")
    func bareLineFeeds() {
        let result = scan("A: b\nC: d \r\n\n", bareLineFeed: true)
        #expect(result.count == 2)
        #expect(result.finished)
        #expect(result.lines.map(\.value) == [3..<4, 8..<9])
    }

    @Test("the scanner writes the parser's own field locations")
    func sharesTheLayout() {
        #expect(MemoryLayout<HTTPFields.Location>.size == MemoryLayout<courier_field_location>.size)
        #expect(MemoryLayout<HTTPFields.Location>.stride == MemoryLayout<courier_field_location>.stride)
        #expect(MemoryLayout<HTTPFields.Location>.alignment == MemoryLayout<courier_field_location>.alignment)
        let scanned = courier_field_location(name_start: 1, name_end: 2, value_start: 3, value_end: 4)
        let location = withUnsafeBytes(of: scanned) { $0.load(as: HTTPFields.Location.self) }
        #expect(location == HTTPFields.Location(name: 1..<2, value: 3..<4))
    }

    /// A response whose head has `count` fields named F0, F1, …
    private func response(fields count: Int) -> [UInt8] {
        var text = "HTTP/1.1 200 OK\r\n"
        for index in 0..<count { text += "F\(index): value \(index)\r\n" }
        return Array((text + "Content-Length: 2\r\n\r\nok").utf8)
    }

    /// The head the parser reads from `bytes` in one piece, or its error.
    private func head(_ bytes: [UInt8], maxFields: Int, pieceSize: Int? = nil) -> Result<HTTPResponseHead, HTTP1ResponseError>? {
        var options = HTTP1ParserOptions()
        options.maxHeaderFieldCount = maxFields
        var parser = HTTP1ResponseParser(options: options)
        parser.expectResponse(to: .get)
        let size = pieceSize ?? bytes.count
        var start = 0
        while start < bytes.count {
            let piece = Array(bytes[start..<min(start + size, bytes.count)])
            var offset = 0
            while offset < piece.count {
                do {
                    let step = try piece.withUnsafeBytes { try parser.next(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
                    if case .head(let head)? = step.event { return .success(head) }
                    offset += step.consumed
                    if step.event == nil { break }
                } catch let error as HTTP1ResponseError {
                    return .failure(error)
                } catch {
                    return nil
                }
            }
            start += size
        }
        return nil
    }

    @Test("heads of more lines than one scan takes: every field kept, the limit held", arguments: [31, 32, 33, 64, 65, 100])
    func manyFields(_ count: Int) throws {
        let bytes = response(fields: count)
        // The Content-Length line makes count + 1 fields.
        for limit in [count, count + 1, count + 2] {
            let whole = head(bytes, maxFields: limit)
            let bytewise = head(bytes, maxFields: limit, pieceSize: 1)
            switch (whole, bytewise) {
            case (.success(let head)?, .success(let other)?):
                #expect(limit >= count + 1, "a head over the limit of \(limit) was taken")
                #expect(head == other)
                #expect(head.fields.count == count + 1)
                // Every name is found, those of the scanner's first calls too (its bits add up).
                for index in 0..<count where head.fields.first("f\(index)") != "value \(index)" {
                    Issue.record("\(count) fields: F\(index) not found")
                    break
                }
                #expect(head.fields.first("Content-Length") == "2")
            case (.failure(.tooManyHeaderFields)?, .failure(.tooManyHeaderFields)?):
                #expect(limit == count, "the limit of \(limit) was not held for \(count + 1) fields")
            default:
                Issue.record("\(count) fields, limit \(limit): whole \(String(describing: whole)), bytewise \(String(describing: bytewise))")
            }
        }
    }
}
