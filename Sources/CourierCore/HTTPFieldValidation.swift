/// Character classes of RFC 9110 section 5, as byte tests.
public enum HTTPFieldValidation {
    /// `tchar` of RFC 9110 section 5.6.2: the characters a `token` (field name, method) is
    /// made of: letters, digits and the marks ! # $ % & ' * + - . ^ _ ` | ~. Looked up in two
    /// 64-bit masks (bytes 0–63 and 64–127; nothing above is a tchar) rather than tested range
    /// by range, since parsers call this for every byte of every field name.
    @inlinable
    public static func isTokenCharacter(_ byte: UInt8) -> Bool {
        // Bit n of the first mask is byte n; of the second, byte 64 + n.
        let low: UInt64 = 0x03FF_6CFA_0000_0000
        let high: UInt64 = 0x57FF_FFFF_C7FF_FFFE
        guard byte < 0x80 else { return false }
        let mask = byte < 0x40 ? low : high
        return (mask >> UInt64(byte & 0x3F)) & 1 == 1
    }

    /// A byte allowed inside a field value: HTAB, SP, VCHAR or obs-text (RFC 9110 section 5.5).
    /// Everything else — NUL, CR, LF, the other controls and DEL — is refused.
    @inlinable
    public static func isFieldValueCharacter(_ byte: UInt8) -> Bool {
        byte == 0x09 || (byte >= 0x20 && byte != 0x7F)
    }

    /// True when `bytes` is a non-empty token.
    @inlinable
    public static func isToken<C: Collection>(_ bytes: C) -> Bool where C.Element == UInt8 {
        !bytes.isEmpty && bytes.allSatisfy(isTokenCharacter)
    }

    /// True when every byte may appear in a field value.
    @inlinable
    public static func isValidFieldValue<C: Collection>(_ bytes: C) -> Bool where C.Element == UInt8 {
        bytes.allSatisfy(isFieldValueCharacter)
    }

    /// True when `bytes` may stand as a request target or authority on a request line:
    /// visible ASCII or obs-text, no spaces, no controls.
    @inlinable
    public static func isValidTarget<C: Collection>(_ bytes: C) -> Bool where C.Element == UInt8 {
        !bytes.isEmpty && bytes.allSatisfy { $0 > 0x20 && $0 != 0x7F }
    }

    /// ASCII lower-casing of one byte.
    @inlinable
    public static func lowercased(_ byte: UInt8) -> UInt8 {
        (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) ? byte | 0x20 : byte
    }
}
