import CourierCore
import CourierHTTP1
import Foundation
import Testing

/// One parser case read from a `.transcript` file: input bytes and the events they must yield.
///
/// File format (see Transcripts/README.md):
///
///     === case name
///     method: HEAD                      optional, default GET
///     options: allowsBareLineFeed, maxHeaderFieldCount=3
///     eof                               optional: the connection closes after the input
///     --- input
///     HTTP/1.1 200 OK                   each line gets CRLF appended ...
///     hello\c                           ... unless it ends with \c
///     @repeat 3 ab                      "ababab", no CRLF appended
///     --- events
///     head HTTP/1.1 200 OK
///     field Content-Length: 5
///     body hello
///     end
///     reuse keepAlive
struct Transcript: Sendable, CustomTestStringConvertible {
    enum Event: Equatable, Sendable, CustomStringConvertible {
        case head(String, [HTTPFields.Field])
        case body([UInt8])
        case end([HTTPFields.Field])
        case error(String)

        var description: String {
            switch self {
            case .head(let line, let fields): return "head \(line) \(fields)"
            case .body(let bytes): return "body \(bytes.count) bytes: \(String(decoding: bytes.prefix(64), as: UTF8.self).debugDescription)"
            case .end(let trailers): return "end \(trailers)"
            case .error(let kind): return "error \(kind)"
            }
        }
    }

    var name: String
    var file: String
    var method = HTTPMethod.get
    var options = HTTP1ParserOptions()
    var closesAfterInput = false
    var input: [UInt8] = []
    var events: [Event] = []
    var reuse: HTTP1ConnectionReuse?

    var testDescription: String { "\(file): \(name)" }

    /// True when the transcript ends at a message boundary the parser can see, so bytes after
    /// it must stay unread.
    var endsAtBoundary: Bool {
        guard !closesAfterInput, let last = events.last else { return false }
        switch last {
        case .end: return true
        case .head: return reuse == .upgraded
        default: return false
        }
    }
}

enum TranscriptError: Error, CustomStringConvertible {
    case malformed(String)
    var description: String {
        switch self { case .malformed(let why): return why }
    }
}

extension Transcript {
    /// Every case of every `.transcript` file in the test bundle.
    static let all: [Transcript] = {
        guard let directory = Bundle.module.url(forResource: "Transcripts", withExtension: nil) else {
            fatalError("the Transcripts resource folder is missing from the test bundle")
        }
        let files = (try? FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)) ?? []
        var cases: [Transcript] = []
        for file in files.sorted(by: { $0.lastPathComponent < $1.lastPathComponent })
        where file.pathExtension == "transcript" {
            do {
                cases += try parse(String(contentsOf: file, encoding: .utf8), file: file.lastPathComponent)
            } catch {
                fatalError("\(file.lastPathComponent): \(error)")
            }
        }
        return cases
    }()

    static func parse(_ text: String, file: String) throws -> [Transcript] {
        enum Section { case preamble, input, events }
        var cases: [Transcript] = []
        var current: Transcript?
        var section = Section.preamble
        var pendingBody: [UInt8]?

        func flushBody() {
            if let body = pendingBody {
                current!.events.append(.body(body))
                pendingBody = nil
            }
        }
        func finish() {
            flushBody()
            if let done = current { cases.append(done) }
        }

        for rawLine in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = String(rawLine)
            if line.hasPrefix("=== ") {
                finish()
                current = Transcript(name: String(line.dropFirst(4)), file: file)
                section = .preamble
                continue
            }
            guard current != nil else { continue }
            if line == "--- input" { section = .input; continue }
            if line == "--- events" { section = .events; continue }
            switch section {
            case .preamble:
                if line.isEmpty || line.hasPrefix("#") { continue }
                try parsePreamble(line, into: &current!)
            case .input:
                if line.hasPrefix("@repeat ") {
                    let parts = line.dropFirst(8).split(separator: " ", maxSplits: 1)
                    guard parts.count == 2, let count = Int(parts[0]) else { throw TranscriptError.malformed("bad @repeat: \(line)") }
                    let unit = try unescape(String(parts[1]))
                    for _ in 0..<count { current!.input += unit }
                } else if line.hasSuffix("\\c") {
                    current!.input += try unescape(String(line.dropLast(2)))
                } else {
                    current!.input += try unescape(line) + [13, 10]
                }
            case .events:
                if line.isEmpty || line.hasPrefix("#") { continue }
                let (keyword, rest) = splitKeyword(line)
                if keyword != "body" && keyword != "body-repeat" { flushBody() }
                switch keyword {
                case "head": current!.events.append(.head(rest, []))
                case "field", "trailer":
                    guard let last = current!.events.popLast() else { throw TranscriptError.malformed("\(keyword) before head/end") }
                    let field = try parseField(rest)
                    switch (keyword, last) {
                    case ("field", .head(let statusLine, let fields)): current!.events.append(.head(statusLine, fields + [field]))
                    case ("trailer", .end(let fields)): current!.events.append(.end(fields + [field]))
                    default: throw TranscriptError.malformed("\(keyword) must follow \(keyword == "field" ? "head" : "end")")
                    }
                case "body": pendingBody = (pendingBody ?? []) + (try unescape(rest))
                case "body-repeat":
                    let parts = rest.split(separator: " ", maxSplits: 1)
                    guard parts.count == 2, let count = Int(parts[0]) else { throw TranscriptError.malformed("bad body-repeat: \(line)") }
                    let unit = try unescape(String(parts[1]))
                    var body = pendingBody ?? []
                    for _ in 0..<count { body += unit }
                    pendingBody = body
                case "end": current!.events.append(.end([]))
                case "error": current!.events.append(.error(rest))
                case "reuse":
                    switch rest {
                    case "keepAlive": current!.reuse = .keepAlive
                    case "close": current!.reuse = .close
                    case "upgraded": current!.reuse = .upgraded
                    default: throw TranscriptError.malformed("bad reuse: \(rest)")
                    }
                default: throw TranscriptError.malformed("unknown event line: \(line)")
                }
            }
        }
        finish()
        return cases
    }

    private static func parsePreamble(_ line: String, into transcript: inout Transcript) throws {
        if line == "eof" {
            transcript.closesAfterInput = true
            return
        }
        let (keyword, rest) = splitKeyword(line)
        switch keyword {
        case "method:": transcript.method = HTTPMethod(rest)
        case "options:":
            for option in rest.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
                let parts = option.split(separator: "=")
                switch (String(parts[0]), parts.count == 2 ? Int(parts[1]) : nil) {
                case ("allowsBareLineFeed", nil): transcript.options.allowsBareLineFeed = true
                case ("allowsObsoleteLineFolding", nil): transcript.options.allowsObsoleteLineFolding = true
                case ("noEmptyLineBeforeStatusLine", nil): transcript.options.skipsOneEmptyLineBeforeStatusLine = false
                case ("maxHeaderSectionBytes", let value?): transcript.options.maxHeaderSectionBytes = value
                case ("maxHeaderFieldCount", let value?): transcript.options.maxHeaderFieldCount = value
                case ("maxChunkExtensionBytes", let value?): transcript.options.maxChunkExtensionBytes = value
                case ("maxInformationalResponses", let value?): transcript.options.maxInformationalResponses = value
                default: throw TranscriptError.malformed("unknown option: \(option)")
                }
            }
        default: throw TranscriptError.malformed("unknown preamble line: \(line)")
        }
    }

    private static func splitKeyword(_ line: String) -> (String, String) {
        guard let space = line.firstIndex(of: " ") else { return (line, "") }
        return (String(line[..<space]), String(line[line.index(after: space)...]))
    }

    private static func parseField(_ text: String) throws -> HTTPFields.Field {
        guard let colon = text.firstIndex(of: ":") else { throw TranscriptError.malformed("field without colon: \(text)") }
        let name = String(text[..<colon])
        var value = String(text[text.index(after: colon)...])
        if value.hasPrefix(" ") { value.removeFirst() }
        return HTTPFields.Field(name: name, value: String(decoding: try unescape(value), as: UTF8.self))
    }

    /// Unescapes `\r \n \t \0 \s \\ \xHH`.
    static func unescape(_ text: String) throws -> [UInt8] {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "\\") else {
                bytes.append(byte)
                continue
            }
            switch iterator.next() {
            case UInt8(ascii: "r"): bytes.append(13)
            case UInt8(ascii: "n"): bytes.append(10)
            case UInt8(ascii: "t"): bytes.append(9)
            case UInt8(ascii: "0"): bytes.append(0)
            case UInt8(ascii: "s"): bytes.append(32)
            case UInt8(ascii: "\\"): bytes.append(UInt8(ascii: "\\"))
            case UInt8(ascii: "x"):
                guard let high = iterator.next(), let low = iterator.next(),
                      let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16) else {
                    throw TranscriptError.malformed("bad \\x escape in \(text)")
                }
                bytes.append(value)
            default:
                throw TranscriptError.malformed("bad escape in \(text)")
            }
        }
        return bytes
    }
}
