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
        !bytes.isEmpty && bytes.allSatisfy(isTargetCharacter)
    }

    /// ``isValidTarget(_:)`` on contiguous bytes, a word at a time (``everyWord(of:passes:)``);
    /// only a word that may hold a space, a control or DEL is looked at byte by byte.
    @inlinable
    public static func isValidTarget(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard bytes.count >= 8 else { return !bytes.isEmpty && bytes.allSatisfy(isTargetCharacter) }
        return everyWord(of: UnsafeRawBufferPointer(bytes)) { word, offset in
            !mayHoldByte(below: 0x21, orDeleteIn: word)
                || bytes[offset..<(offset + 8)].allSatisfy(isTargetCharacter)
        }
    }

    /// A byte allowed in a request target or authority: visible ASCII or obs-text.
    @inlinable
    public static func isTargetCharacter(_ byte: UInt8) -> Bool {
        byte > 0x20 && byte != 0x7F
    }

    /// The number of bytes at the start of `bytes` that are `tchar`s.
    ///
    /// Eight bytes at a time while they are letters, digits or '-' (what field names are
    /// made of), then byte by byte through the masks of ``isTokenCharacter(_:)`` for the rest.
    @inlinable
    public static func tokenPrefixCount(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard let base = bytes.baseAddress else { return 0 }
        var index = 0
        while index + 8 <= bytes.count {
            let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: index, as: UInt64.self))
            let plain = alphanumericOrDash(word)
            guard plain == highBits else {
                // The first byte that is not one: ~plain has its high bit set.
                index += (~plain & highBits).trailingZeroBitCount >> 3
                break
            }
            index += 8
        }
        while index < bytes.count && isTokenCharacter(bytes[index]) { index += 1 }
        return index
    }

    /// True when `bytes` is a non-empty token.
    @inlinable
    public static func isToken(_ bytes: UnsafeRawBufferPointer) -> Bool {
        !bytes.isEmpty && tokenPrefixCount(bytes) == bytes.count
    }

    /// True when every byte may appear in a field value, a word at a time
    /// (``everyWord(of:passes:)``); only a word that may hold a control (a tab is allowed) is
    /// looked at closely.
    @inlinable
    public static func isValidFieldValue(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count >= 8 else { return bytes.allSatisfy(isFieldValueCharacter) }
        return everyWord(of: bytes) { word, _ in !mayHoldControl(word) || refusedInValue(word) == 0 }
    }

    /// True when every eight-byte word of `bytes` (at least eight of them) passes `passes`,
    /// which gets the word (little-endian) and its offset: the words are read in order, the
    /// last (partial) one overlapping the one before it, and the first to fail ends the scan.
    @inlinable
    static func everyWord(of bytes: UnsafeRawBufferPointer, passes: (UInt64, Int) -> Bool) -> Bool {
        guard let base = bytes.baseAddress, bytes.count >= 8 else { return true }
        var index = 0
        while true {
            let offset = min(index, bytes.count - 8)
            let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
            if !passes(word, offset) { return false }
            index = offset + 8
            if index >= bytes.count { return true }
        }
    }

    /// The number of bytes at the start of `bytes` that may appear in a field value: where a
    /// value running to its line end stops, at the CR or LF (or at a byte no value may hold).
    /// Eight bytes at a time: a word that may hold a control is looked at closely, and the
    /// first refused byte found from its mask.
    @inlinable
    public static func fieldValuePrefixCount(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard let base = bytes.baseAddress else { return 0 }
        var index = 0
        while index + 8 <= bytes.count {
            let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: index, as: UInt64.self))
            if mayHoldControl(word) {
                let refused = refusedInValue(word)
                if refused != 0 { return index + refused.trailingZeroBitCount >> 3 }
            }
            index += 8
        }
        while index < bytes.count && isFieldValueCharacter(bytes[index]) { index += 1 }
        return index
    }

    /// True when the `count` bytes at `lhs` and at `rhs` are the same but for the case of
    /// ASCII letters. Eight bytes at a time (the last word overlapping the one before), each
    /// word's capitals lowered exactly: no other byte is changed, so '^' and '~', or '@' and
    /// '`', stay apart.
    @inlinable
    public static func caseInsensitiveEquals(_ lhs: UnsafeRawPointer, _ rhs: UnsafeRawPointer, count: Int) -> Bool {
        guard count >= 8 else {
            for index in 0..<count where lowercased(lhs.load(fromByteOffset: index, as: UInt8.self))
                != lowercased(rhs.load(fromByteOffset: index, as: UInt8.self)) {
                return false
            }
            return true
        }
        var index = 0
        while true {
            let offset = min(index, count - 8)
            let left = lowercasedWord(UInt64(littleEndian: lhs.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
            let right = lowercasedWord(UInt64(littleEndian: rhs.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
            if left != right { return false }
            index = offset + 8
            if index >= count { return true }
        }
    }

    /// `word` with each of its bytes 'A'-'Z' lowered (0x20 added), and no other byte changed.
    @inlinable
    static func lowercasedWord(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let low7 = word & (ones &* 0x7F)
        // High bit set in the bytes strictly between '@' and '[' that are below 0x80.
        let capitals = (ones &* (127 + 0x5B) &- low7) & (low7 &+ ones &* (127 - 0x40)) & ~word & highBits
        return word | (capitals >> 2)
    }

    /// 0x80 in every byte.
    @usableFromInline static let highBits: UInt64 = 0x8080_8080_8080_8080

    /// The high bit of each byte of `word` set when the byte is a letter, a digit or '-', and
    /// clear otherwise (bytes of 0x80 and above included). Each test is exact per byte: the
    /// arithmetic is on bytes with their high bit cleared, so nothing carries or borrows
    /// from one byte into the next.
    @inlinable
    static func alphanumericOrDash(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let low7 = word & (ones &* 0x7F)
        /// High bit set in the bytes strictly between `above` and `below`.
        @inline(__always) func between(_ above: UInt64, _ below: UInt64) -> UInt64 {
            (ones &* (127 + below) &- low7) & (low7 &+ ones &* (127 - above))
        }
        let inRange = between(0x2C, 0x2E) | between(0x2F, 0x3A) | between(0x40, 0x5B) | between(0x60, 0x7B)
        return inRange & ~word & highBits
    }

    /// True when one of the eight bytes of `word` is below 0x20 or is DEL (0x7F); never false
    /// when one is. Bytes of 0x80 and above (obs-text) count as neither.
    @inlinable
    public static func mayHoldControl(_ word: UInt64) -> Bool {
        mayHoldByte(below: 0x20, orDeleteIn: word)
    }

    /// True when one of the eight bytes of `word` is below `limit` (at most 0x80) or is DEL
    /// (0x7F); never false when one is, and a borrow may flag a byte after one that is. Bytes
    /// of 0x80 and above count as neither.
    @inlinable
    static func mayHoldByte(below limit: UInt8, orDeleteIn word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        // A byte below the limit borrows through its high bit when the limit is taken from
        // it; bytes with the high bit already set are masked out by ~word.
        let below = (word &- ones &* UInt64(limit)) & ~word & highBits
        // DEL becomes a zero byte, which borrows likewise when 1 is taken from it.
        let xored = word ^ (ones &* 0x7F)
        let delete = (xored &- ones) & ~xored & highBits
        return below | delete != 0
    }

    /// The high bit of each byte of `word` set when the byte may not appear in a field value
    /// (a control other than HTAB, or DEL), and clear otherwise. Exact per byte: the sums are
    /// on bytes with their high bit cleared, so nothing carries from one byte into the next.
    /// ``mayHoldControl(_:)`` is the quicker first look, which a tab or a borrow can fool.
    @inlinable
    public static func refusedInValue(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let low7Mask = ones &* 0x7F
        /// High bit set in the bytes equal to `byte`: after the xor those are the zero bytes,
        /// the only ones whose low seven bits plus 0x7F stay below 0x80 and whose high bit is clear.
        @inline(__always) func equal(_ byte: UInt64) -> UInt64 {
            let difference = word ^ (ones &* byte)
            return ~(((difference & low7Mask) &+ low7Mask) | difference) & highBits
        }
        // High bit set in the bytes whose low seven bits are 0x20 or more (0x20 + 0x60 = 0x80,
        // and 0x7F + 0x60 stays within the byte); bytes of 0x80 and above (obs-text) have it set already.
        let spaceOrAbove = ((word & low7Mask) &+ ones &* 0x60) | word
        let control = ~spaceOrAbove & highBits
        return (control & ~equal(0x09)) | equal(0x7F)
    }

    /// ASCII lower-casing of one byte.
    @inlinable
    public static func lowercased(_ byte: UInt8) -> UInt8 {
        (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) ? byte | 0x20 : byte
    }

    /// True when `bytes`, their ASCII capitals lowered, are `lowercase`, which holds no
    /// capitals: a received or given name against a known one.
    @inlinable
    public static func equalsLowercased(_ bytes: UnsafeRawBufferPointer, _ lowercase: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count == lowercase.count else { return false }
        for index in 0..<bytes.count where lowercased(bytes[index]) != lowercase[index] { return false }
        return true
    }
}
