import Foundation

/// Splits a `multipart/x-mixed-replace` body into its parts as the bytes arrive (sans-IO): each
/// part is a head of header fields and a body, and replaces the one before (a server push of
/// camera frames or status updates). The framing is RFC 2046's multipart syntax: a delimiter line
/// `--boundary` before each part, `--boundary--` after the last.
///
/// Body bytes are handed out as soon as they cannot be the start of the next delimiter, so a
/// part's body streams; only a delimiter's length is held back. A stream that ends without the
/// closing delimiter (the server closed the connection, as streaming servers do) ends its last
/// part there.
public struct MultipartReplaceParser {
    public enum Event {
        /// A part begins, with its header fields (names as sent).
        case partBegan([(name: String, value: String)])
        /// Bytes of the current part's body.
        case body(UnsafeRawBufferPointer)
        /// The current part is complete.
        case partEnded
    }

    public enum Failure: Error, Equatable {
        /// A part's head (or the line after a delimiter) is longer than ``maximumHeadBytes``.
        case headTooLong
    }

    /// The longest head a part may have: 16 KiB.
    public static let maximumHeadBytes = 16 * 1024

    private enum Phase {
        /// Before the first delimiter: the preamble is skipped.
        case preamble
        /// After a delimiter: the rest of its line, or `--` for the end.
        case delimiterLine
        case head
        case body
        /// After the closing delimiter: everything is ignored.
        case epilogue
    }

    private let dashBoundary: [UInt8]
    /// The delimiter as it follows a body: CRLF, `--`, the boundary.
    private let bodyDelimiter: [UInt8]
    private var phase = Phase.preamble
    private var buffer: [UInt8] = []

    /// A parser for the boundary of a `Content-Type: multipart/x-mixed-replace; boundary=…`.
    public init(boundary: String) {
        dashBoundary = Array("--\(boundary)".utf8)
        bodyDelimiter = Array("\r\n--\(boundary)".utf8)
    }

    /// The boundary parameter of a `multipart/x-mixed-replace` Content-Type; nil for any other
    /// type, or one without a usable boundary (1 to 70 characters, RFC 2046 §5.1.1).
    public static func boundary(ofContentType contentType: String) -> String? {
        let parameters = contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard let type = parameters.first, type.lowercased() == "multipart/x-mixed-replace" else { return nil }
        for parameter in parameters.dropFirst() {
            guard let equals = parameter.firstIndex(of: "="),
                  parameter[..<equals].trimmingCharacters(in: .whitespaces).lowercased() == "boundary" else { continue }
            var value = parameter[parameter.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            guard (1...70).contains(value.utf8.count), !value.contains("\r"), !value.contains("\n") else { return nil }
            return value
        }
        return nil
    }

    /// True after the closing delimiter.
    public var isFinished: Bool {
        if case .epilogue = phase { return true }
        return false
    }

    /// Parses the next bytes of the body, reporting what they complete.
    public mutating func parse(_ input: UnsafeRawBufferPointer, _ emit: (Event) -> Void) throws(Failure) {
        buffer.append(contentsOf: input)
        var index = 0
        defer { buffer.removeFirst(index) }
        while index < buffer.count {
            switch phase {
            case .preamble:
                guard let found = find(dashBoundary, from: index) else {
                    // Only what could start a delimiter is kept.
                    index = max(index, buffer.count - (dashBoundary.count - 1))
                    return
                }
                index = found + dashBoundary.count
                phase = .delimiterLine
            case .delimiterLine:
                guard buffer.count - index >= 2 else { return }
                if buffer[index] == UInt8(ascii: "-"), buffer[index + 1] == UInt8(ascii: "-") {
                    phase = .epilogue
                    continue
                }
                guard let newline = buffer[index...].firstIndex(of: UInt8(ascii: "\n")) else {
                    if buffer.count - index > Self.maximumHeadBytes { throw .headTooLong }
                    return
                }
                index = newline + 1
                phase = .head
            case .head:
                guard let (fields, end) = try readHead(from: index) else { return }
                index = end
                phase = .body
                emit(.partBegan(fields))
            case .body:
                if let found = find(bodyDelimiter, from: index) {
                    emitBody(index..<found, emit)
                    emit(.partEnded)
                    index = found + bodyDelimiter.count
                    phase = .delimiterLine
                } else {
                    let safe = buffer.count - (bodyDelimiter.count - 1)
                    if safe > index {
                        emitBody(index..<safe, emit)
                        index = safe
                    }
                    return
                }
            case .epilogue:
                index = buffer.count
            }
        }
    }

    /// The body ended: a part still open ends with the bytes held back.
    public mutating func finish(_ emit: (Event) -> Void) {
        if case .body = phase {
            emitBody(0..<buffer.count, emit)
            emit(.partEnded)
        }
        buffer = []
        phase = .epilogue
    }

    private func emitBody(_ range: Range<Int>, _ emit: (Event) -> Void) {
        guard !range.isEmpty else { return }
        buffer.withUnsafeBytes { emit(.body(UnsafeRawBufferPointer(rebasing: $0[range]))) }
    }

    /// A part's head from `start`: its fields and where its body starts; nil until the blank
    /// line that ends it arrived.
    private func readHead(from start: Int) throws(Failure) -> ([(name: String, value: String)], Int)? {
        var fields: [(name: String, value: String)] = []
        var lineStart = start
        while true {
            guard let newline = buffer[lineStart...].firstIndex(of: UInt8(ascii: "\n")) else {
                if buffer.count - start > Self.maximumHeadBytes { throw .headTooLong }
                return nil
            }
            if newline - start > Self.maximumHeadBytes { throw .headTooLong }
            var lineEnd = newline
            if lineEnd > lineStart, buffer[lineEnd - 1] == UInt8(ascii: "\r") { lineEnd -= 1 }
            if lineEnd == lineStart { return (fields, newline + 1) }
            let line = String(decoding: buffer[lineStart..<lineEnd], as: UTF8.self)
            if let colon = line.firstIndex(of: ":") {
                let name = String(line[..<colon]).trimmingCharacters(in: .whitespaces)
                let value = String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
                if !name.isEmpty { fields.append((name, value)) }
            }
            lineStart = newline + 1
        }
    }

    private func find(_ pattern: [UInt8], from start: Int) -> Int? {
        buffer[start...].firstRange(of: pattern)?.lowerBound
    }
}
