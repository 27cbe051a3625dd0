import CourierCore
import CourierHTTP1
import Testing

/// Field values are checked eight bytes at a time where they are long enough: every control
/// byte must still be refused wherever it sits in a long value, and every allowed byte
/// (tab, space, visible ASCII, obs-text) accepted there.
@Suite("Field value scan")
struct FieldValueScanTests {
    /// The parser's answer to a response whose one field has `value`: the value it kept, or
    /// the error.
    private func parse(value: [UInt8]) -> Result<String?, HTTP1ResponseError> {
        var parser = HTTP1ResponseParser()
        parser.expectResponse(to: .get)
        let bytes = Array("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Long: ".utf8) + value + Array("\r\n\r\n".utf8)
        do {
            let step = try bytes.withUnsafeBytes { try parser.next($0) }
            guard case .head(let head)? = step.event else { return .success(nil) }
            return .success(head.fields.first("X-Long"))
        } catch let error as HTTP1ResponseError {
            return .failure(error)
        } catch {
            Issue.record("unexpected error \(error)")
            return .success(nil)
        }
    }

    /// A value of 24 letters with `byte` at `position`.
    private func value(with byte: UInt8, at position: Int) -> [UInt8] {
        var value = Array(repeating: UInt8(ascii: "a"), count: 24)
        value[position] = byte
        return value
    }

    @Test("a control byte anywhere in a long value is refused")
    func controlsAreRefused() {
        // CR and LF end the line before the value is checked: they are refused as bad lines.
        let lineEnds: [UInt8] = [0x0A, 0x0D]
        let controls = Array(UInt8(0x00)...UInt8(0x1F)).filter { $0 != 0x09 } + [0x7F]
        for byte in controls {
            // Positions 1 to 22: the first and last byte would be trimmed as whitespace if tab.
            for position in 1..<23 {
                switch parse(value: value(with: byte, at: position)) {
                case .failure(.invalidFieldValue):
                    continue
                case .failure where lineEnds.contains(byte):
                    continue
                default:
                    Issue.record("byte \(byte) at \(position) was not refused")
                    return
                }
            }
        }
    }

    @Test("tab, visible ASCII and obs-text anywhere in a long value are kept")
    func allowedBytesAreKept() {
        let allowed = [UInt8(0x09)] + Array(UInt8(0x20)...UInt8(0x7E)) + Array(UInt8(0x80)...UInt8(0xFF))
        for byte in allowed {
            for position in 1..<23 {
                let bytes = value(with: byte, at: position)
                guard case .success(let kept?) = parse(value: bytes) else {
                    Issue.record("byte \(byte) at \(position) was refused")
                    return
                }
                #expect(Array(kept.utf8).count >= 23, "byte \(byte) at \(position): the value was cut")
            }
        }
    }
}
