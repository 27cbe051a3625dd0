import CourierSync
import Foundation

/// What `-v`, `--trace` and `--trace-ascii` print about a transfer, in curl's formats.
///
/// `-v` writes `* ` notes and the heads (`> ` sent, `< ` received) to standard error. The trace
/// options write every note (`== Info:`) and every block of bytes sent or received (the
/// request head, a `-d` body, each response head line, each chunk of body) to a file, or to
/// standard output for `-`: `--trace-ascii` as text lines broken at line ends, `--trace` as
/// hex and text, 16 bytes a line. A trace replaces `-v`, as it does in curl. The heads are the
/// ones Courier sent and received; on HTTP/2 they are shown in HTTP/1.1's form, as curl shows them.
final class Narrator: Sendable {
    enum Style: Sendable {
        case verbose
        case traceText
        case traceHex
    }

    let style: Style
    private let output: Mutex<FileHandle>

    init(style: Style, output: FileHandle) {
        self.style = style
        self.output = Mutex(output)
    }

    /// The narrator the options ask for: a trace to `path` ("-": standard output), else `-v`'s.
    static func make(verbose: Bool, traceText: String?, traceHex: String?) throws -> Narrator? {
        let (path, style): (String?, Style) = traceText.map { ($0, .traceText) } ?? traceHex.map { ($0, .traceHex) } ?? (nil, .verbose)
        guard let path else { return verbose ? Narrator(style: .verbose, output: .standardError) : nil }
        if path == "-" { return Narrator(style: style, output: .standardOutput) }
        guard let handle = OutputSink.create(path) else {
            throw CLIFailure(message: "cannot write the trace file \(path)", code: 23)
        }
        return Narrator(style: style, output: handle)
    }

    private func write(_ text: String) {
        output.withLock { $0.write(Data(text.utf8)) }
    }

    private func write(_ bytes: [UInt8]) {
        output.withLock { $0.write(Data(bytes)) }
    }

    /// A note: `* text` or `== Info: text`.
    func info(_ text: String) {
        write(style == .verbose ? "* \(text)\n" : "== Info: \(text)\n")
    }

    /// The request head, as lines without their line ends.
    func sentHead(_ lines: [String]) {
        if style == .verbose {
            write(lines.map { "> \($0)\n" }.joined() + ">\n")
        } else {
            write(block("=> Send header", Data((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8)))
        }
    }

    /// A request body sent (traces only).
    func sentBody(_ data: Data) {
        guard style != .verbose, !data.isEmpty else { return }
        write(block("=> Send data", data))
    }

    /// A response head, as lines without their line ends: for a trace, one block per line and
    /// one for the empty line that ends the head, as curl's come.
    func receivedHead(_ lines: [String]) {
        if style == .verbose {
            write(lines.map { "< \($0)\n" }.joined() + "<\n")
        } else {
            write(Array((lines + [""]).map { block("<= Recv header", Data(($0 + "\r\n").utf8)) }.joined()))
        }
    }

    /// Body bytes as they arrived (traces only).
    func receivedData(_ data: Data) {
        guard style != .verbose, !data.isEmpty else { return }
        write(block("<= Recv data", data))
    }

    /// A block of bytes as the trace shows it, built as bytes: through a `String(format:)` a
    /// byte, `--trace` took 13 seconds for an 8 MB body (curl 0.7).
    private func block(_ title: String, _ data: Data) -> [UInt8] {
        var text = Array("\(title), \(data.count) bytes (0x\(String(data.count, radix: 16)))\n".utf8)
        let hexDigits: StaticString = "0123456789abcdef"
        func appendHex(_ value: Int, digits minimum: Int) {
            var digits = minimum
            while digits < Int.bitWidth / 4 && value >> (4 * digits) != 0 { digits += 1 }
            for shift in stride(from: digits - 1, through: 0, by: -1) {
                text.append(hexDigits.utf8Start[(value >> (4 * shift)) & 0xF])
            }
        }
        func appendPrintable(_ byte: UInt8) {
            text.append((0x20..<0x7f).contains(byte) ? byte : UInt8(ascii: "."))
        }
        data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) in
            text.reserveCapacity(text.count + bytes.count * (style == .traceHex ? 5 : 2) + 64)
            var offset = 0
            while offset < bytes.count {
                // "%04x: ": at least four digits.
                appendHex(offset, digits: 4)
                text.append(UInt8(ascii: ":"))
                text.append(UInt8(ascii: " "))
                if style == .traceHex {
                    let end = min(offset + 16, bytes.count)
                    for byte in bytes[offset..<end] {
                        appendHex(Int(byte), digits: 2)
                        text.append(UInt8(ascii: " "))
                    }
                    text.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 3 * (16 - (end - offset))))
                    for byte in bytes[offset..<end] { appendPrintable(byte) }
                    text.append(UInt8(ascii: "\n"))
                    offset = end
                    continue
                }
                // Text: up to 64 bytes a line, a CR LF ending the line early (and not shown).
                var end = offset
                while end < bytes.count && end - offset < 64 {
                    if bytes[end] == 0x0D && end + 1 < bytes.count && bytes[end + 1] == 0x0A { break }
                    end += 1
                }
                for byte in bytes[offset..<end] { appendPrintable(byte) }
                text.append(UInt8(ascii: "\n"))
                offset = end
                if offset + 1 < bytes.count, bytes[offset] == 0x0D, bytes[offset + 1] == 0x0A { offset += 2 }
            }
        }
        return text
    }
}
