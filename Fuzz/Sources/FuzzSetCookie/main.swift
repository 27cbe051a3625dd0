// Set-Cookie fields on arbitrary bytes: each line of the input is one Set-Cookie field value.
// Whatever the input, the parser returns a cookie or nil and never traps. A cookie it returns
// keeps RFC 6265bis §5.6's shape: a name and value within 4096 UTF-8 bytes, not both empty,
// trimmed, free of control characters, with no ";" in either and no "=" in the name; a Domain
// that is non-empty, has no leading dot and no ASCII capital; a Path that starts with "/"; a
// Max-Age within 400 days; ports within 0…65535. The name and value written back as
// "name=value" read the same. Every date the cookie-date algorithm (§5.1.1) returns, whether
// from a whole line, from the text after "expires=", or in a cookie's Expires, falls in
// 1601…9999 in whole seconds.
import CourierPolicies
import Foundation

/// 1601-01-01T00:00:00Z and 9999-12-31T23:59:59Z in seconds since 1970 (Python's
/// `calendar.timegm`): the earliest and latest dates §5.1.1 can produce.
private let earliestDate = -11_644_473_600.0
private let latestDate = 253_402_300_799.0

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSetCookie(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
        let field = String(line)
        if let cookie = SetCookieParser.parse(field) {
            checkShape(cookie, field: field)
            precondition(SetCookieParser.parse(field) == cookie, "two reads of one field differ: \(field)")
            checkRoundTrip(cookie)
        }
        checkDate(CookieDateParser.parse(field), from: field)
        if let expires = valueAfterExpires(in: field) {
            checkDate(CookieDateParser.parse(expires), from: expires)
        }
    }
    return 0
}

/// %x00-08 / %x0A-1F / %x7F, the control characters §5.6 step 1 refuses.
private func isForbiddenControl(_ byte: UInt8) -> Bool {
    byte <= 0x08 || (byte >= 0x0A && byte <= 0x1F) || byte == 0x7F
}

private func isWhitespace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }

/// A parsed cookie keeps the algorithm's shape.
private func checkShape(_ cookie: SetCookie, field: String) {
    let name = Array(cookie.name.utf8)
    let value = Array(cookie.value.utf8)
    precondition(name.count + value.count <= SetCookieParser.maximumNameValueBytes, "a name and value over the limit: \(name.count) + \(value.count) bytes")
    precondition(!name.isEmpty || !value.isEmpty, "an empty name and value from: \(field)")
    for bytes in [name, value] {
        precondition(!bytes.contains(where: isForbiddenControl), "a control character in a name or value from: \(field)")
        precondition(!bytes.contains(UInt8(ascii: ";")), "a ';' in a name or value from: \(field)")
        precondition(bytes.first.map(isWhitespace) != true && bytes.last.map(isWhitespace) != true, "an untrimmed name or value from: \(field)")
    }
    precondition(!name.contains(UInt8(ascii: "=")), "an '=' in the name from: \(field)")

    if let domain = cookie.domain {
        let bytes = Array(domain.utf8)
        precondition(!bytes.isEmpty, "an empty domain from: \(field)")
        precondition(bytes.first != UInt8(ascii: "."), "a domain with a leading dot: \(domain)")
        precondition(!bytes.contains { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }, "a domain not lowercased: \(domain)")
        precondition(bytes.count <= SetCookieParser.maximumAttributeValueBytes, "a domain over the attribute limit")
    }
    if let path = cookie.path {
        precondition(path.utf8.first == UInt8(ascii: "/"), "a path that does not start with '/': \(path)")
        precondition(path.utf8.count <= SetCookieParser.maximumAttributeValueBytes, "a path over the attribute limit")
    }
    if let maxAge = cookie.maxAge {
        precondition(maxAge <= SetCookieParser.maximumAgeSeconds, "a Max-Age over 400 days: \(maxAge)")
    }
    for text in [cookie.comment, cookie.commentURL].compactMap({ $0 }) {
        precondition(!text.isEmpty && text.utf8.count <= SetCookieParser.maximumAttributeValueBytes, "a comment of \(text.utf8.count) bytes")
    }
    if let version = cookie.version {
        precondition(version >= 0, "a negative version: \(version)")
    }
    if let ports = cookie.portList {
        precondition(ports.allSatisfy { $0 >= 0 && $0 <= 65_535 }, "a port out of range: \(ports)")
    }
    checkDate(cookie.expires, from: field)
}

/// A cookie's name and value, written back as one field, read back the same. A nameless
/// cookie is written as "=value" so that a "=" in its value is not taken for the separator.
private func checkRoundTrip(_ cookie: SetCookie) {
    let written = cookie.name + "=" + cookie.value
    guard let reread = SetCookieParser.parse(written) else {
        preconditionFailure("a cookie's own name and value are refused: \(written)")
    }
    precondition(reread.name == cookie.name && reread.value == cookie.value, "name and value do not round-trip: \(written)")
    precondition(reread == SetCookie(name: cookie.name, value: cookie.value), "a bare name and value gained attributes: \(written)")
}

/// A date from the cookie-date algorithm lies in 1601…9999, in whole seconds.
private func checkDate(_ date: Date?, from text: String) {
    guard let date else { return }
    let seconds = date.timeIntervalSince1970
    precondition(seconds >= earliestDate && seconds <= latestDate, "a date outside 1601…9999 (\(seconds)) from: \(text)")
    precondition(seconds == seconds.rounded(.towardZero), "a date not in whole seconds (\(seconds)) from: \(text)")
}

/// The text after the first "expires=" (in any ASCII case) up to the next ";", if any.
private func valueAfterExpires(in field: String) -> String? {
    let bytes = Array(field.utf8)
    let key = Array("expires=".utf8)
    guard bytes.count >= key.count else { return nil }
    for start in 0...(bytes.count - key.count) {
        var matches = true
        for offset in 0..<key.count {
            var byte = bytes[start + offset]
            if byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") { byte |= 0x20 }
            if byte != key[offset] {
                matches = false
                break
            }
        }
        guard matches else { continue }
        let valueStart = start + key.count
        let valueEnd = bytes[valueStart...].firstIndex(of: UInt8(ascii: ";")) ?? bytes.count
        // The field is valid UTF-8 and the cut falls on ASCII bytes, so the slice decodes as is.
        return String(decoding: bytes[valueStart..<valueEnd], as: UTF8.self)
    }
    return nil
}
