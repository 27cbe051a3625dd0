// Request-field validation and encoding: the input is split at NUL bytes into a method, a
// target, an authority and then field name/value pairs. A head that validates must encode to
// exactly one line per request line, Host, kept field and framing field, with no CR or LF
// inside a line (no header injection); a head that does not validate must write nothing.
import CourierCore
import CourierHTTP1

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRequestEncoding(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let parts = UnsafeBufferPointer(start: data, count: size).split(separator: 0, omittingEmptySubsequences: false)
        .map { String(decoding: $0, as: UTF8.self) }
    guard parts.count >= 3 else { return 0 }
    var fields = HTTPFields()
    var index = 3
    while index + 1 < parts.count {
        fields.append(name: parts[index], value: parts[index + 1])
        index += 2
    }
    let head = HTTPRequestHead(method: HTTPMethod(parts[0]), target: parts[1], authority: parts[2], fields: fields)
    let framing: HTTP1BodyFraming = size % 3 == 0 ? .none : (size % 3 == 1 ? .contentLength(Int64(size)) : .chunked)
    var buffer = ByteBuffer()
    do {
        try HTTP1RequestEncoder.encodeHead(head, framing: framing, into: &buffer)
    } catch {
        precondition(buffer.readableBytes == 0, "a rejected head wrote bytes")
        return 0
    }
    let bytes = buffer.readableBytesArray()
    precondition(bytes.suffix(4) == [13, 10, 13, 10], "the head does not end with an empty line")
    var kept = 0
    fields.forEachField { name, _ in
        let lower = String(decoding: name, as: UTF8.self).lowercased()
        if !["host", "content-length", "transfer-encoding", "connection"].contains(lower) { kept += 1 }
    }
    let expectedLines = 2 + kept + (framing == .none ? 0 : 1)
    var lines = 0
    var index2 = 0
    var lineStart = 0
    while index2 < bytes.count - 2 {
        if bytes[index2] == 13 {
            precondition(bytes[index2 + 1] == 10, "a bare CR in the encoded head")
            precondition(index2 > lineStart, "an empty line inside the head")
            lines += 1
            index2 += 2
            lineStart = index2
            continue
        }
        precondition(bytes[index2] != 10, "a bare LF in the encoded head")
        index2 += 1
    }
    precondition(lines == expectedLines, "the head has \(lines) lines, expected \(expectedLines)")
    return 0
}
