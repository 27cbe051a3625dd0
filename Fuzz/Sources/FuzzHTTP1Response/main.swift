// HTTP/1 response parsing: each input is parsed whole and again cut at positions chosen from
// the input; both must give the same events. Byte 0 picks the request method and leniencies;
// bytes 1-2 pick the cuts; the rest is the response.
import CourierHTTP1
import FuzzSupport

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHTTP1Response(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 3 else { return 0 }
    let (method, options) = configuration(from: data[0])
    let input = UnsafeRawBufferPointer(start: data + 3, count: size - 3)
    let first = Int(data[1]) * input.count / 256
    let second = first + Int(data[2]) * (input.count - first) / 256
    let whole = parse(input, cuts: [], method: method, options: options)
    let split = parse(input, cuts: [first, second], method: method, options: options)
    precondition(whole == split, "whole and split feeding disagree")
    if input.count <= 64 {
        // Short inputs are also fed one byte at a time.
        let bytewise = parse(input, cuts: Array(0..<input.count), method: method, options: options)
        precondition(whole == bytewise, "whole and byte-at-a-time feeding disagree")
    }
    return 0
}
