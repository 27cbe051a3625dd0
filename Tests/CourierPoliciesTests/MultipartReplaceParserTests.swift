import CourierPolicies
import Foundation
import Testing
import _CourierTestSupport

/// `MultipartReplaceParser`: the boundary of a `multipart/x-mixed-replace` Content-Type, and the
/// parts of a body fed in any pieces (RFC 2046 §5.1.1 framing).
@Suite("MultipartReplaceParser")
struct MultipartReplaceParserTests {
    // MARK: Running the parser

    struct Field: Equatable, CustomStringConvertible {
        var name: String
        var value: String
        var description: String { "\(name): \(value)" }
    }

    struct Part: Equatable, CustomStringConvertible {
        var fields: [Field]
        var body: [UInt8]
        var description: String { "\(fields) \(String(decoding: body, as: UTF8.self).debugDescription)" }
    }

    /// What a run of the parser produced, and any misordered events.
    struct Outcome: Equatable {
        var parts: [Part] = []
        /// A part began and has not ended.
        var open = false
        var violations: [String] = []
        /// `isFinished` after the last `parse`, before `finish`.
        var finishedBeforeFinish = false
        var finishedAfterFinish = false
        var failure: MultipartReplaceParser.Failure?

        mutating func take(_ event: MultipartReplaceParser.Event) {
            switch event {
            case .partBegan(let fields):
                if open { violations.append("partBegan inside part \(parts.count)") }
                parts.append(Part(fields: fields.map { Field(name: $0.name, value: $0.value) }, body: []))
                open = true
            case .body(let bytes):
                if bytes.isEmpty { violations.append("an empty body event") }
                guard open, !parts.isEmpty else {
                    violations.append("body bytes outside a part")
                    return
                }
                parts[parts.count - 1].body.append(contentsOf: bytes)
            case .partEnded:
                if !open { violations.append("partEnded outside a part") }
                open = false
            }
        }
    }

    /// Feeds `input` cut at `cuts` (positions in `1..<input.count`, any order, repeats allowed),
    /// then calls `finish` when asked.
    static func run(_ input: [UInt8], boundary: String = "XYZ", cuts: [Int] = [], finish: Bool = true) -> Outcome {
        var parser = MultipartReplaceParser(boundary: boundary)
        var outcome = Outcome()
        let edges = [0] + Set(cuts.filter { $0 > 0 && $0 < input.count }).sorted() + [input.count]
        for (start, end) in zip(edges, edges.dropFirst()) {
            var failure: MultipartReplaceParser.Failure?
            input[start..<end].withUnsafeBytes { bytes in
                do throws(MultipartReplaceParser.Failure) {
                    try parser.parse(bytes) { outcome.take($0) }
                } catch {
                    failure = error
                }
            }
            if let failure {
                outcome.failure = failure
                return outcome
            }
        }
        outcome.finishedBeforeFinish = parser.isFinished
        if finish {
            parser.finish { outcome.take($0) }
            outcome.finishedAfterFinish = parser.isFinished
        }
        return outcome
    }

    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    static func part(_ fields: [(String, String)], _ body: String) -> Part {
        Part(fields: fields.map { Field(name: $0.0, value: $0.1) }, body: bytes(body))
    }

    // MARK: The boundary parameter

    @Test("boundary(ofContentType:): the boundary of multipart/x-mixed-replace, quoted or not, among other parameters")
    func boundaryParameter() {
        let cases: [(String, String?)] = [
            ("multipart/x-mixed-replace; boundary=XYZ", "XYZ"),
            ("multipart/x-mixed-replace;boundary=XYZ", "XYZ"),
            ("Multipart/X-Mixed-Replace; BOUNDARY=frame", "frame"),
            ("multipart/x-mixed-replace; boundary=\"frame boundary\"", "frame boundary"),
            ("multipart/x-mixed-replace; boundary=\"--myboundary\"", "--myboundary"),
            ("multipart/x-mixed-replace; charset=utf-8; boundary=abc123", "abc123"),
            ("multipart/x-mixed-replace; boundary=abc123; charset=utf-8", "abc123"),
            ("multipart/x-mixed-replace; boundary = spaced ", "spaced"),
            ("  multipart/x-mixed-replace  ;  boundary=padded", "padded"),
            ("multipart/x-mixed-replace; boundary=" + String(repeating: "b", count: 70), String(repeating: "b", count: 70)),
            ("multipart/x-mixed-replace; boundary=\"" + String(repeating: "q", count: 70) + "\"", String(repeating: "q", count: 70)),
            // Not this type.
            ("multipart/mixed; boundary=XYZ", nil),
            ("multipart/form-data; boundary=XYZ", nil),
            ("text/html; boundary=XYZ", nil),
            ("multipart/x-mixed-replacement; boundary=XYZ", nil),
            ("", nil),
            // No usable boundary.
            ("multipart/x-mixed-replace", nil),
            ("multipart/x-mixed-replace; charset=utf-8", nil),
            ("multipart/x-mixed-replace; boundary=", nil),
            ("multipart/x-mixed-replace; boundary=\"\"", nil),
            ("multipart/x-mixed-replace; boundary=" + String(repeating: "b", count: 71), nil),
            ("multipart/x-mixed-replace; boundary=\"" + String(repeating: "q", count: 71) + "\"", nil),
        ]
        for (contentType, expected) in cases {
            #expect(MultipartReplaceParser.boundary(ofContentType: contentType) == expected, "\(contentType.debugDescription)")
        }
    }

    // MARK: Framing

    /// Three parts with headers; bodies hold CR, LF, dashes and a boundary prefix.
    static let threeParts = bytes([
        "This is the preamble; --XY is not a delimiter.\r\n",
        "--XYZ\r\n",
        "Content-Type: text/plain\r\n",
        "X-Frame: 1\r\n",
        "\r\n",
        "first\r\nframe --XY\r\n-\r\n--XZ",
        "\r\n--XYZ  \t\r\n",
        "Content-Type: application/octet-stream\r\n",
        "X-Spaced:    padded value   \r\n",
        "X-Empty:\r\n",
        "\r\n",
        "\r\n\r\n--\r\n--X\r\n--XY",
        "\r\n--XYZ\r\n",
        "content-type:application/json\r\n",
        "\r\n",
        "{\"frame\": 3}",
        "\r\n--XYZ--\r\n",
        "The epilogue.\r\n",
    ].joined())

    static let threePartsExpected: [Part] = [
        part([("Content-Type", "text/plain"), ("X-Frame", "1")], "first\r\nframe --XY\r\n-\r\n--XZ"),
        part([("Content-Type", "application/octet-stream"), ("X-Spaced", "padded value"), ("X-Empty", "")], "\r\n\r\n--\r\n--X\r\n--XY"),
        part([("content-type", "application/json")], "{\"frame\": 3}"),
    ]

    @Test("three parts: the preamble is skipped, each part's fields (names as sent, values trimmed) and body come back exactly")
    func threePartsAtOnce() {
        let outcome = Self.run(Self.threeParts)
        #expect(outcome.failure == nil)
        #expect(outcome.violations == [])
        #expect(outcome.parts == Self.threePartsExpected)
        #expect(!outcome.open)
        #expect(outcome.finishedBeforeFinish, "the closing delimiter finishes the body")
    }

    @Test("the same input cut in two at every position, and fed byte by byte, gives the same parts")
    func threePartsEverySplit() {
        let whole = Self.run(Self.threeParts)
        #expect(whole.parts == Self.threePartsExpected)
        for cut in 1..<Self.threeParts.count {
            let outcome = Self.run(Self.threeParts, cuts: [cut])
            #expect(outcome == whole, "cut at \(cut)")
        }
        let byteByByte = Self.run(Self.threeParts, cuts: Array(1..<Self.threeParts.count))
        #expect(byteByByte == whole)
    }

    @Test("a part with an empty body gives partBegan and partEnded with no body event")
    func emptyBody() {
        let input = Self.bytes("--XYZ\r\nContent-Type: image/jpeg\r\n\r\n\r\n--XYZ\r\nContent-Type: text/plain\r\n\r\nB\r\n--XYZ--")
        for cuts in [[], Array(1..<input.count)] {
            let outcome = Self.run(input, cuts: cuts)
            #expect(outcome.violations == [], "no empty body event")
            #expect(outcome.parts == [Self.part([("Content-Type", "image/jpeg")], ""), Self.part([("Content-Type", "text/plain")], "B")])
            #expect(outcome.finishedBeforeFinish)
        }
    }

    @Test("a part without header lines has no fields")
    func noHeaderLines() {
        let input = Self.bytes("--XYZ\r\n\r\nraw body\r\n--XYZ\r\n\r\n\r\n--XYZ--\r\n")
        for cuts in [[], Array(1..<input.count)] {
            let outcome = Self.run(input, cuts: cuts)
            #expect(outcome.violations == [])
            #expect(outcome.parts == [Self.part([], "raw body"), Self.part([], "")])
        }
    }

    @Test("after the closing delimiter everything is ignored, even what looks like another part, and isFinished is true")
    func epilogueIgnored() {
        let input = Self.bytes("--XYZ\r\nX-Frame: 1\r\n\r\nonly\r\n--XYZ--\r\nepilogue\r\n--XYZ\r\nX-Frame: 2\r\n\r\nghost\r\n--XYZ--\r\n")
        for cuts in [[], Array(1..<input.count)] {
            let outcome = Self.run(input, cuts: cuts)
            #expect(outcome.violations == [])
            #expect(outcome.parts == [Self.part([("X-Frame", "1")], "only")])
            #expect(outcome.finishedBeforeFinish)
            #expect(outcome.finishedAfterFinish)
        }

        // More bytes after the end give no events at all.
        var parser = MultipartReplaceParser(boundary: "XYZ")
        var events = 0
        let first = Self.bytes("--XYZ\r\n\r\nx\r\n--XYZ--")
        first.withUnsafeBytes { bytes in
            do throws(MultipartReplaceParser.Failure) {
                try parser.parse(bytes) { _ in events += 1 }
            } catch {
                Issue.record("unexpected \(error)")
            }
        }
        #expect(parser.isFinished)
        let before = events
        let more = Self.bytes("\r\n--XYZ\r\nContent-Type: a\r\n\r\nmore\r\n--XYZ\r\n" + String(repeating: "z", count: 40_000))
        more.withUnsafeBytes { bytes in
            do throws(MultipartReplaceParser.Failure) {
                try parser.parse(bytes) { _ in events += 1 }
            } catch {
                Issue.record("the epilogue is not a head: \(error)")
            }
        }
        parser.finish { _ in events += 1 }
        #expect(events == before)
        #expect(parser.isFinished)
    }

    @Test("a body that ends without the closing delimiter: at most a delimiter's length is held back, and finish ends the part with it")
    func missingClosingDelimiter() {
        let input = Self.bytes("--XYZ\r\nContent-Type: text/plain\r\n\r\nfirst\r\n--XYZ\r\nContent-Type: text/plain\r\n\r\nhello world")
        let unfinished = Self.run(input, finish: false)
        #expect(unfinished.failure == nil)
        #expect(unfinished.violations == [])
        #expect(unfinished.open, "the last part is still open")
        #expect(!unfinished.finishedBeforeFinish)
        #expect(unfinished.parts.count == 2)
        let held = unfinished.parts.last?.body ?? []
        #expect(Self.bytes("hello world").starts(with: held))
        #expect(held.count >= "hello world".utf8.count - ("\r\n--XYZ".utf8.count - 1), "only what could start a delimiter is held back")

        for cuts in [[], Array(1..<input.count)] {
            let outcome = Self.run(input, cuts: cuts)
            #expect(outcome.violations == [])
            #expect(!outcome.open)
            #expect(outcome.finishedAfterFinish)
            #expect(outcome.parts == [Self.part([("Content-Type", "text/plain")], "first"), Self.part([("Content-Type", "text/plain")], "hello world")])
        }
    }

    @Test("a stream that ends in what could have been a delimiter's start gives those bytes to the last part")
    func endsInDelimiterPrefix() {
        for tail in ["\r", "\r\n", "\r\n-", "\r\n--", "\r\n--X", "\r\n--XY"] {
            let input = Self.bytes("--XYZ\r\n\r\nend" + tail)
            for cuts in [[], Array(1..<input.count)] {
                let outcome = Self.run(input, cuts: cuts)
                #expect(outcome.violations == [])
                #expect(outcome.parts == [Self.part([], "end" + tail)], "\(tail.debugDescription)")
                #expect(!outcome.open)
            }
        }
    }

    @Test("a stream that ends inside a head or before any delimiter gives no part")
    func endsBeforeABody() {
        for text in ["", "preamble only", "preamble --XY", "--XYZ", "--XYZ\r\n", "--XYZ\r\nContent-Type: a\r\n"] {
            let outcome = Self.run(Self.bytes(text))
            #expect(outcome.failure == nil)
            #expect(outcome.parts == [], "\(text.debugDescription)")
            #expect(outcome.finishedAfterFinish)
        }
    }

    // MARK: Limits

    @Test("a head over maximumHeadBytes fails with .headTooLong, fed at once or in pieces; one under it parses")
    func headTooLong() {
        #expect(MultipartReplaceParser.maximumHeadBytes == 16 * 1024)
        let long = String(repeating: "a", count: 17 * 1024)

        // One long line, complete.
        let complete = Self.bytes("--XYZ\r\nContent-Type: text/plain\r\nX-Long: \(long)\r\n\r\nbody\r\n--XYZ--\r\n")
        #expect(Self.run(complete).failure == .headTooLong)
        // A line that never ends, in 1 KiB pieces.
        let endless = Self.bytes("--XYZ\r\nX-Long: \(long)")
        let pieces = Array(stride(from: 1024, to: endless.count, by: 1024))
        #expect(Self.run(endless, cuts: pieces).failure == .headTooLong)
        // Many short lines and no blank line.
        let manyLines = Self.bytes("--XYZ\r\n" + String(repeating: "X-Line: 0123456789\r\n", count: 1000))
        #expect(Self.run(manyLines, cuts: pieces).failure == .headTooLong)
        // The rest of a delimiter line, over the limit without a line end.
        let delimiterLine = Self.bytes("--XYZ" + String(repeating: " ", count: 17 * 1024))
        #expect(Self.run(delimiterLine, cuts: pieces).failure == .headTooLong)
        // A later part's head too.
        let later = Self.bytes("--XYZ\r\n\r\nfine\r\n--XYZ\r\nX-Long: \(long)\r\n\r\n")
        let laterOutcome = Self.run(later)
        #expect(laterOutcome.failure == .headTooLong)
        #expect(laterOutcome.parts.first == Self.part([], "fine"), "the part before is delivered whole")

        // Under the limit: fine, at once and in 100-byte pieces (byte by byte would rescan the
        // head 15 000 times).
        let value = String(repeating: "b", count: 15 * 1024)
        let under = Self.bytes("--XYZ\r\nX-Big: \(value)\r\n\r\nok\r\n--XYZ--")
        for cuts in [[], Array(stride(from: 100, to: under.count, by: 100))] {
            let outcome = Self.run(under, cuts: cuts)
            #expect(outcome.failure == nil)
            #expect(outcome.parts == [Self.part([("X-Big", value)], "ok")])
        }

        // A long body is no head: 64 KiB without a line end is fine.
        let bigBody = String(repeating: "c", count: 64 * 1024)
        let body = Self.bytes("--XYZ\r\n\r\n\(bigBody)\r\n--XYZ--")
        let bodyOutcome = Self.run(body, cuts: Array(stride(from: 1000, to: body.count, by: 1000)))
        #expect(bodyOutcome.failure == nil)
        #expect(bodyOutcome.parts == [Self.part([], bigBody)])
    }

    // MARK: Random streams in random pieces

    /// What steers random bodies at the parser's edges: line ends, dashes and boundary prefixes.
    static let fragments: [[UInt8]] = ["\r", "\n", "\r\n", "-", "--", "\r\n-", "\r\n--", "\r\n--X", "\r\n--XY", "--XY", "--XYZ", "\r\n--XYZ", "X", "Y", "Z", "\r\n\r\n"]
        .map { Array($0.utf8) }

    /// Random bytes with fragments mixed in; with `sanitize`, no `--XYZ` (the last byte of each
    /// becomes `Q`), so that no delimiter, whole or without its CRLF, is in a body or preamble.
    static func randomBytes(_ random: inout SplitMix64, count: Int, sanitize: Bool = true) -> [UInt8] {
        var bytes: [UInt8] = []
        while bytes.count < count {
            if random.chance(35) {
                bytes += random.pick(fragments)
            } else {
                bytes.append(UInt8(truncatingIfNeeded: random.next()))
            }
        }
        guard sanitize else { return bytes }
        let dashBoundary = Array("--XYZ".utf8)
        var index = 0
        while index + dashBoundary.count <= bytes.count {
            if bytes[index..<(index + dashBoundary.count)].elementsEqual(dashBoundary) {
                bytes[index + dashBoundary.count - 1] = UInt8(ascii: "Q")
            }
            index += 1
        }
        return bytes
    }

    struct Generated {
        var input: [UInt8]
        var parts: [Part]
        var closed: Bool
    }

    /// A random stream: an optional preamble, one to four parts with zero to three fields and
    /// random binary bodies, transport padding after some delimiters, and a closing delimiter
    /// (with an epilogue that may look like anything) or none.
    static func generate(seed: UInt64) -> Generated {
        var random = SplitMix64(seed: seed)
        var input: [UInt8] = []
        if random.chance(50) {
            let count = random.inRange(1...30)
            input += randomBytes(&random, count: count) + bytes("\r\n")
        }
        var parts: [Part] = []
        for index in 0..<random.inRange(1...4) {
            input += bytes(index == 0 ? "--XYZ" : "\r\n--XYZ")
            if random.chance(25) { input += bytes(random.pick([" ", "\t", " \t "])) }
            input += bytes("\r\n")
            var fields: [Field] = []
            for _ in 0..<random.below(4) {
                let name = random.pick(["Content-Type", "X-Frame", "Content-Length", "x-lower", "X-Empty"])
                let value = String((0..<random.below(12)).map { _ in random.pick(Array("abcXYZ019-/; =")) })
                    .trimmingCharacters(in: .whitespaces)
                let before = random.pick(["", " ", "   ", "\t"])
                let after = random.pick(["", "", " ", "\t "])
                input += bytes("\(name):\(before)\(value)\(after)\r\n")
                fields.append(Field(name: name, value: value))
            }
            input += bytes("\r\n")
            let bodyCount = random.chance(15) ? 0 : random.inRange(1...60)
            let body = randomBytes(&random, count: bodyCount)
            input += body
            parts.append(Part(fields: fields, body: body))
        }
        let closed = random.chance(60)
        if closed {
            input += bytes("\r\n--XYZ--")
            if random.chance(60) {
                let count = random.below(40)
                input += bytes("\r\n") + randomBytes(&random, count: count, sanitize: false)
            }
        }
        return Generated(input: input, parts: parts, closed: closed)
    }

    @Test("random streams: every cut in two, byte by byte, and random cuts all give the generated parts", arguments: 1...40 as ClosedRange<UInt64>)
    func randomSplits(_ seed: UInt64) {
        let generated = Self.generate(seed: seed)
        let input = generated.input
        let whole = Self.run(input)
        #expect(whole.failure == nil)
        #expect(whole.violations == [])
        #expect(!whole.open)
        #expect(whole.parts == generated.parts, "seed \(seed)")
        #expect(whole.finishedBeforeFinish == generated.closed)
        #expect(whole.finishedAfterFinish)

        var mismatches: [Int] = []
        for cut in 1..<max(1, input.count) where Self.run(input, cuts: [cut]) != whole {
            mismatches.append(cut)
        }
        #expect(mismatches == [], "seed \(seed): cuts in two that change the outcome")
        #expect(Self.run(input, cuts: Array(1..<max(1, input.count))) == whole, "seed \(seed): byte by byte")

        var random = SplitMix64(seed: seed &* 0x9E37_79B9)
        for round in 0..<20 where input.count > 1 {
            let cuts = (0..<random.inRange(1...min(input.count - 1, 12))).map { _ in random.inRange(1...(input.count - 1)) }
            #expect(Self.run(input, cuts: cuts) == whole, "seed \(seed), round \(round): cuts \(cuts.sorted())")
        }
    }

    @Test("a seed gives the same stream every time")
    func generatorIsDeterministic() {
        for seed in 1...5 as ClosedRange<UInt64> {
            #expect(Self.generate(seed: seed).input == Self.generate(seed: seed).input)
        }
    }

    @Test("a 200 KiB random binary body in 1..4 KiB pieces streams out whole, before the stream ends")
    func largeBinaryBody() {
        var random = SplitMix64(seed: 0x4D50_5254)
        let body = Self.randomBytes(&random, count: 200 * 1024)
        let input = Self.bytes("--XYZ\r\nContent-Type: application/octet-stream\r\n\r\n") + body
            + Self.bytes("\r\n--XYZ\r\nContent-Type: text/plain\r\n\r\nnext\r\n--XYZ--\r\n")
        var cuts: [Int] = []
        var position = 0
        while true {
            position += random.inRange(1024...4096)
            guard position < input.count else { break }
            cuts.append(position)
        }
        let outcome = Self.run(input, cuts: cuts)
        #expect(outcome.failure == nil)
        #expect(outcome.violations == [])
        #expect(outcome.parts.count == 2)
        #expect(outcome.parts.first?.body == body)
        #expect(outcome.parts.last == Self.part([("Content-Type", "text/plain")], "next"))

        // Streaming: after all but the last few bytes of the body, nearly all of it is out.
        var parser = MultipartReplaceParser(boundary: "XYZ")
        var streamed = 0
        let headAndBody = Array(input[..<(input.count - Self.bytes("\r\n--XYZ\r\nContent-Type: text/plain\r\n\r\nnext\r\n--XYZ--\r\n").count)])
        headAndBody.withUnsafeBytes { bytes in
            do throws(MultipartReplaceParser.Failure) {
                try parser.parse(bytes) { event in
                    if case .body(let chunk) = event { streamed += chunk.count }
                }
            } catch {
                Issue.record("unexpected \(error)")
            }
        }
        #expect(streamed >= body.count - ("\r\n--XYZ".utf8.count - 1))
        #expect(streamed <= body.count)
    }
}
