// Chunked decoding: the input is the body of a chunked response (chunk sizes, extensions,
// data, trailers), parsed whole and cut at positions chosen from its first two bytes.
import CourierHTTP1
import FuzzSupport

let head: [UInt8] = Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHTTP1Chunked(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 2 else { return 0 }
    let body = UnsafeBufferPointer(start: data + 2, count: size - 2)
    let input = head + Array(body)
    let (method, options) = configuration(from: data[0] & 0x1C)
    input.withUnsafeBytes { bytes in
        let cut = head.count + Int(data[1]) * body.count / 256
        let whole = parse(bytes, cuts: [], method: method, options: options)
        let split = parse(bytes, cuts: [cut], method: method, options: options)
        precondition(whole == split, "whole and split feeding disagree")
    }
    return 0
}
