import Foundation

/// Why a `data:` URL could not be read. The message says what was wrong and where.
public struct DataURLError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A sentence for the user saying what is wrong with the URL.
    public var message: String

    /// The message.
    public var description: String { message }

    /// An error with this message.
    public init(_ message: String) {
        self.message = message
    }
}

/// A parsed `data:` URL (RFC 2397): `data:[<mediatype>][;base64],<data>`.
///
/// Read the way the WHATWG Fetch standard's "data: URL processor" reads it (what browsers do),
/// within RFC 2397's grammar; the choices that go beyond the RFC:
///
/// 1. The fragment is not part of the resource: everything from the first `#` is dropped
///    (even a `#` before the comma).
/// 2. A URL without a comma is refused.
/// 3. The part before the comma is taken as written (not percent-decoded) and split at `;`.
///    Surrounding ASCII whitespace is ignored. The last piece is the base64 marker when it is
///    `base64` in any case (and there is a `;` before it); a `base64` anywhere else is an
///    unknown parameter, and the data is not base64.
/// 4. The media type must be `token/token` (RFC 9110 tokens); it is lower-cased. A media type
///    that is not is replaced by `text/plain;charset=US-ASCII` and its parameters are dropped,
///    as browsers do, rather than failing the load. An empty media type (`data:,…`,
///    `data:;base64,…`, `data:;charset=utf-8,…`) means `text/plain`, with `US-ASCII` unless a
///    charset is given.
/// 5. Parameters are `name=value`; only `charset` is read (the first usable one wins). Its
///    value may be a quoted string; it is kept only when it is a non-empty token. Pieces
///    without `=` and other parameters are ignored (lenient, as every reader of `data:` URLs
///    is).
/// 6. The data is always percent-decoded; an escape that is not `%` and two hex digits stays as
///    it is, `%` included (the WHATWG rule), instead of failing.
/// 7. Base64 data is decoded "forgivingly" (WHATWG's forgiving-base64): ASCII whitespace is
///    removed after percent-decoding, padding may be missing, `=` may appear only as one or
///    two final padding characters, and anything outside the standard alphabet fails, as does
///    a length that leaves one character over. Unused low bits of the last character are
///    ignored.
/// 8. URLs longer than ``maxDataURLBytes`` are refused, to bound the memory one URL can take.
///
/// A pure value: parsing never performs I/O and never traps, whatever the input.
public struct DataURL: Sendable, Equatable {
    /// The longest `data:` URL accepted, in UTF-8 bytes (64 MiB): the decoded data is never
    /// larger than the URL, so this bounds what one URL can make Courier allocate.
    public static let maxDataURLBytes = 64 * 1024 * 1024

    /// The media type without parameters, lower-cased: "text/plain" when the URL names none
    /// or names one that is not `type/subtype` (RFC 2397's default is
    /// text/plain;charset=US-ASCII).
    public var mimeType: String

    /// The charset parameter's value as written, without quotes (e.g. "utf-8", "US-ASCII");
    /// "US-ASCII" when the URL gives no media type at all and no charset, or an invalid media
    /// type (RFC 2397's default); nil when a media type is given without a charset.
    public var textEncodingName: String?

    /// The decoded bytes.
    public var data: [UInt8]

    /// A parsed URL with these parts.
    public init(mimeType: String, textEncodingName: String?, data: [UInt8]) {
        self.mimeType = mimeType
        self.textEncodingName = textEncodingName
        self.data = data
    }

    /// Parses a whole `data:` URL string (the scheme in any case) by the rules in the type's
    /// documentation.
    ///
    /// - Throws: ``DataURLError`` when the string is longer than ``maxDataURLBytes``, does not
    ///   start with `data:`, has no comma, or carries base64 data that cannot be decoded.
    public static func parse(_ url: String) throws(DataURLError) -> DataURL {
        let length = url.utf8.count
        guard length <= maxDataURLBytes else {
            throw DataURLError("the data: URL is \(length) bytes long, more than the limit of \(maxDataURLBytes) bytes")
        }
        let bytes = Array(url.utf8)
        guard hasDataScheme(bytes) else {
            throw DataURLError("the URL does not start with \"data:\"")
        }
        let end = bytes.firstIndex(of: Byte.hash) ?? bytes.endIndex
        let rest = bytes[5..<end]
        guard let comma = rest.firstIndex(of: Byte.comma) else {
            throw DataURLError("the data: URL has no comma between its media type and its data")
        }
        let header = readHeader(rest[rest.startIndex..<comma])
        var data = percentDecoded(rest[(comma + 1)...])
        if header.isBase64 {
            data = try forgivingBase64Decoded(data)
        }
        return DataURL(mimeType: header.mimeType, textEncodingName: header.charset, data: data)
    }

    // MARK: - The part before the comma

    /// What the part before the comma says.
    private struct Header {
        var mimeType: String
        var charset: String?
        var isBase64: Bool
    }

    /// The fallback for an absent or invalid media type (RFC 2397 section 2).
    private static let defaultMimeType = "text/plain"
    private static let defaultCharset = "US-ASCII"

    /// True when `bytes` starts with `data:`, the letters in any case.
    private static func hasDataScheme(_ bytes: [UInt8]) -> Bool {
        let scheme = Array("data:".utf8)
        guard bytes.count >= scheme.count else { return false }
        for (byte, expected) in zip(bytes, scheme) where asciiLowercased(byte) != expected {
            return false
        }
        return true
    }

    private static func readHeader(_ header: ArraySlice<UInt8>) -> Header {
        var pieces = header.split(separator: Byte.semicolon, omittingEmptySubsequences: false).map(trimmed)
        var isBase64 = false
        if pieces.count >= 2, let last = pieces.last, equalsIgnoringCase(last, "base64") {
            isBase64 = true
            pieces.removeLast()
        }
        let mediaType = pieces.first ?? []
        var charset: String?
        for piece in pieces.dropFirst() where charset == nil {
            charset = charsetValue(piece)
        }
        if mediaType.isEmpty {
            return Header(mimeType: defaultMimeType, charset: charset ?? defaultCharset, isBase64: isBase64)
        }
        guard let slash = mediaType.firstIndex(of: Byte.slash) else {
            return Header(mimeType: defaultMimeType, charset: defaultCharset, isBase64: isBase64)
        }
        let type = mediaType[mediaType.startIndex..<slash]
        let subtype = mediaType[(slash + 1)...]
        guard isToken(type), isToken(subtype) else {
            return Header(mimeType: defaultMimeType, charset: defaultCharset, isBase64: isBase64)
        }
        let mimeType = String(decoding: mediaType.map(asciiLowercased), as: UTF8.self)
        return Header(mimeType: mimeType, charset: charset, isBase64: isBase64)
    }

    /// The value of a `charset=value` piece (unquoted), or nil when the piece is another
    /// parameter, has no `=`, or its value is empty or not a token.
    private static func charsetValue(_ piece: ArraySlice<UInt8>) -> String? {
        guard let equals = piece.firstIndex(of: Byte.equals) else { return nil }
        guard equalsIgnoringCase(trimmed(piece[piece.startIndex..<equals]), "charset") else { return nil }
        let value = unquoted(trimmed(piece[(equals + 1)...]))
        guard isToken(value[...]) else { return nil }
        return String(decoding: value, as: UTF8.self)
    }

    /// The content of a quoted string (RFC 9110 section 5.6.4: backslash escapes the next
    /// byte; anything after the closing quote is dropped), or the value as it is when it does
    /// not start with a quote.
    private static func unquoted(_ value: ArraySlice<UInt8>) -> [UInt8] {
        guard value.first == Byte.quote else { return Array(value) }
        var result: [UInt8] = []
        var index = value.startIndex + 1
        while index < value.endIndex {
            var byte = value[index]
            if byte == Byte.quote { break }
            if byte == Byte.backslash, index + 1 < value.endIndex {
                index += 1
                byte = value[index]
            }
            result.append(byte)
            index += 1
        }
        return result
    }

    // MARK: - The data

    /// `input` with every `%XX` escape replaced by its byte; a `%` not followed by two hex
    /// digits is kept as it is.
    private static func percentDecoded(_ input: ArraySlice<UInt8>) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(input.count)
        var index = input.startIndex
        while index < input.endIndex {
            let byte = input[index]
            if byte == Byte.percent, input.endIndex - index >= 3,
               let high = hexValue(input[index + 1]), let low = hexValue(input[index + 2]) {
                output.append(high << 4 | low)
                index += 3
            } else {
                output.append(byte)
                index += 1
            }
        }
        return output
    }

    /// WHATWG's forgiving-base64 decode, the decoding itself done by Foundation: the input is
    /// checked and normalised here (whitespace removed, padding completed, unused bits
    /// cleared) so that Foundation sees only canonical base64.
    private static func forgivingBase64Decoded(_ input: [UInt8]) throws(DataURLError) -> [UInt8] {
        var text = input.filter { !isASCIIWhitespace($0) }
        if text.count % 4 == 0, text.last == Byte.equals {
            text.removeLast()
            if text.last == Byte.equals { text.removeLast() }
        }
        if text.count % 4 == 1 {
            throw DataURLError("the base64 data of the data: URL has \(text.count) characters, which cannot be a whole number of bytes")
        }
        for byte in text where base64Value(byte) == nil {
            let shown = byte == Byte.equals ? "\"=\" before the end" : "the byte 0x\(String(byte, radix: 16, uppercase: true))"
            throw DataURLError("the base64 data of the data: URL holds \(shown), outside the base64 alphabet")
        }
        if text.isEmpty { return [] }
        // The last character of an unpadded group carries bits that no byte uses (4 after two
        // characters, 2 after three); WHATWG ignores them, so clear them before Foundation
        // sees them, then complete the padding.
        let unusedBits: UInt8
        switch text.count % 4 {
        case 2: unusedBits = 0x0F
        case 3: unusedBits = 0x03
        default: unusedBits = 0
        }
        if unusedBits != 0, let last = text.last, let value = base64Value(last) {
            text[text.count - 1] = base64Alphabet[Int(value & ~unusedBits)]
            text.append(contentsOf: repeatElement(Byte.equals, count: 4 - text.count % 4))
        }
        guard let decoded = Data(base64Encoded: Data(text)) else {
            throw DataURLError("the base64 data of the data: URL cannot be decoded")
        }
        return [UInt8](decoded)
    }

    /// The standard base64 alphabet (RFC 4648 section 4), by value.
    private static let base64Alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// The value of a base64 character, or nil for anything outside the standard alphabet.
    private static func base64Value(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return byte - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return byte - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0") + 52
        case UInt8(ascii: "+"): return 62
        case UInt8(ascii: "/"): return 63
        default: return nil
        }
    }

    // MARK: - Bytes

    private enum Byte {
        static let hash = UInt8(ascii: "#")
        static let comma = UInt8(ascii: ",")
        static let semicolon = UInt8(ascii: ";")
        static let slash = UInt8(ascii: "/")
        static let equals = UInt8(ascii: "=")
        static let quote = UInt8(ascii: "\"")
        static let backslash = UInt8(ascii: "\\")
        static let percent = UInt8(ascii: "%")
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// Tab, line feed, form feed, carriage return and space (WHATWG's ASCII whitespace).
    private static func isASCIIWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x09 || byte == 0x0A || byte == 0x0C || byte == 0x0D || byte == 0x20
    }

    private static func asciiLowercased(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 0x20 : byte
    }

    private static func trimmed(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var slice = bytes
        while let first = slice.first, isASCIIWhitespace(first) { slice = slice.dropFirst() }
        while let last = slice.last, isASCIIWhitespace(last) { slice = slice.dropLast() }
        return slice
    }

    /// True when `bytes` spells `word` (lower-case ASCII) in any case.
    private static func equalsIgnoringCase(_ bytes: ArraySlice<UInt8>, _ word: StaticString) -> Bool {
        let expected = word.withUTF8Buffer { Array($0) }
        return bytes.count == expected.count && zip(bytes, expected).allSatisfy { asciiLowercased($0) == $1 }
    }

    /// True when `bytes` is a non-empty RFC 9110 token (section 5.6.2).
    private static func isToken(_ bytes: ArraySlice<UInt8>) -> Bool {
        !bytes.isEmpty && bytes.allSatisfy(isTokenByte)
    }

    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }
}
