// URL and request building through the public API: the input is split at newlines into a
// URL, a method and header lines ("Name: value"). Whatever the input, building the request
// either fails with a URLError or gives a head whose Host is the URL's authority and whose
// encoding has no injected line; the one-pass reading of a plain URL agrees with Foundation's.
@_spi(Fuzzing) import Courier
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzURLRequest(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    guard let first = lines.first, let url = URL(string: first) else { return 0 }
    precondition(FuzzingHooks.plainURLReadingAgrees(url), "the one-pass URL reading differs from Foundation's")
    var request = URLRequest(url: url)
    if lines.count > 1 { request.httpMethod = lines[1] }
    for line in lines.dropFirst(2) {
        guard let colon = line.firstIndex(of: ":") else { continue }
        request.addValue(String(line[line.index(after: colon)...]), forHTTPHeaderField: String(line[..<colon]))
    }
    if size % 2 == 1 { request.httpBody = Data(text.utf8.prefix(16)) }
    do {
        let head = try FuzzingHooks.encodedHead(for: request)
        let headText = String(decoding: head, as: UTF8.self)
        precondition(headText.hasSuffix("\r\n\r\n"), "the head does not end with an empty line")
        let headLines = headText.dropLast(4).components(separatedBy: "\r\n")
        precondition(headLines.allSatisfy { !$0.contains("\r") && !$0.contains("\n") }, "a bare CR or LF in the head")
        precondition(headLines.count >= 2 && headLines[1].hasPrefix("Host: "), "Host is not the second line")
    } catch is URLError {
        return 0
    } catch {
        preconditionFailure("an error that is not a URLError escaped: \(error)")
    }
    return 0
}
