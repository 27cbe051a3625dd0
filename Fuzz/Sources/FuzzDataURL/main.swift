// data: URL parsing (RFC 2397 with WHATWG's forgiving base64) on arbitrary input, taken as the
// text after "data:" (or whole when it already starts with a scheme). Whatever the input, the
// parser answers without trapping; what it accepts decodes to no more bytes than the URL holds,
// names a lower-cased type/subtype, and survives a round trip: the same bytes written back as
// base64 under the same type parse to the same value.
import CourierPolicies
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDataURL(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let url = text.lowercased().hasPrefix("data:") ? text : "data:" + text
    guard let parsed = try? DataURL.parse(url) else { return 0 }
    precondition(parsed.data.count <= url.utf8.count, "decoded \(parsed.data.count) bytes from a \(url.utf8.count)-byte URL")
    precondition(parsed.mimeType == parsed.mimeType.lowercased(), "media type not lower-cased: \(parsed.mimeType)")
    precondition(parsed.mimeType.split(separator: "/").count == 2, "media type is not type/subtype: \(parsed.mimeType)")
    let again = "data:\(parsed.mimeType);base64," + Data(parsed.data).base64EncodedString()
    guard let reparsed = try? DataURL.parse(again) else {
        preconditionFailure("the value written back does not parse: \(again.prefix(200))")
    }
    precondition(reparsed.data == parsed.data, "the bytes changed in a round trip")
    precondition(reparsed.mimeType == parsed.mimeType, "the type changed in a round trip")
    return 0
}
