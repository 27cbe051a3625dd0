import CourierCore
import Testing

/// `tchar` of RFC 9110 section 5.6.2, written out from the grammar.
private let tchars: Set<UInt8> = {
    var set = Set("!#$%&'*+-.^_`|~".utf8)
    set.formUnion(UInt8(ascii: "0")...UInt8(ascii: "9"))
    set.formUnion(UInt8(ascii: "A")...UInt8(ascii: "Z"))
    set.formUnion(UInt8(ascii: "a")...UInt8(ascii: "z"))
    return set
}()

/// The delimiters of RFC 9110 section 5.6.2: visible ASCII that is not a tchar.
private let delimiters = Array("\"(),/:;<=>?@[\\]{}".utf8)

/// C0 controls other than HTAB, and DEL.
private let controlsButTab: [UInt8] = Array(0x00...0x08) + Array(0x0A...0x1F) + [0x7F]

@Suite("HTTPFieldValidation")
struct HTTPFieldValidationTests {
    // MARK: Tokens

    @Test("there are 77 tchars")
    func tcharCount() {
        #expect(tchars.count == 77)
    }

    @Test("every tchar is accepted")
    func everyTcharAccepted() {
        for byte in tchars.sorted() {
            #expect(HTTPFieldValidation.isTokenCharacter(byte), "byte 0x\(String(byte, radix: 16)) is a tchar")
        }
    }

    @Test("no other byte is a tchar")
    func onlyTcharsAccepted() {
        for value in 0...255 {
            let byte = UInt8(value)
            if !tchars.contains(byte) {
                #expect(!HTTPFieldValidation.isTokenCharacter(byte), "byte 0x\(String(byte, radix: 16)) is not a tchar")
            }
        }
    }

    @Test("delimiters are refused in tokens", arguments: delimiters)
    func delimitersRefused(_ byte: UInt8) {
        #expect(!HTTPFieldValidation.isTokenCharacter(byte))
        #expect(!HTTPFieldValidation.isToken([UInt8(ascii: "X"), byte, UInt8(ascii: "Y")]))
    }

    @Test("space, HTAB, controls, DEL and obs-text are refused in tokens", arguments: [0x20, 0x09] + controlsButTab + [0x80, 0xA0, 0xC3, 0xFF] as [UInt8])
    func whitespaceAndControlsRefused(_ byte: UInt8) {
        #expect(!HTTPFieldValidation.isTokenCharacter(byte))
        #expect(!HTTPFieldValidation.isToken([UInt8(ascii: "X"), byte]))
    }

    @Test("isToken accepts non-empty runs of tchars", arguments: [
        "GET", "Content-Type", "x", "M-SEARCH", "!#$%&'*+-.^_`|~", "0", "X_Custom.Field~1",
    ])
    func validTokens(_ token: String) {
        #expect(HTTPFieldValidation.isToken(token.utf8))
    }

    @Test("isToken refuses the empty string and anything with a non-tchar", arguments: [
        "", " ", "GET ", " GET", "Content Type", "Host:", "a\tb", "naïve", "a\r\nb", "(x)", "\u{0}",
    ])
    func invalidTokens(_ token: String) {
        #expect(!HTTPFieldValidation.isToken(token.utf8))
    }

    // MARK: Field values

    @Test("HTAB, SP, every VCHAR and every obs-text byte may appear in a value")
    func valueCharactersAccepted() {
        var allowed: [UInt8] = [0x09, 0x20]
        allowed += Array(0x21...0x7E)
        allowed += Array(0x80...0xFF)
        for byte in allowed {
            #expect(HTTPFieldValidation.isFieldValueCharacter(byte), "byte 0x\(String(byte, radix: 16)) is allowed in a value")
        }
        #expect(allowed.count == 2 + 94 + 128)
    }

    @Test("CR, LF, NUL, DEL and the other controls may not appear in a value", arguments: controlsButTab)
    func valueControlsRefused(_ byte: UInt8) {
        #expect(!HTTPFieldValidation.isFieldValueCharacter(byte))
        #expect(!HTTPFieldValidation.isValidFieldValue([UInt8(ascii: "a"), byte, UInt8(ascii: "b")]))
        #expect(!HTTPFieldValidation.isValidFieldValue([byte]))
    }

    @Test("the controls refused in values are exactly 0x00-0x08, 0x0A-0x1F and 0x7F")
    func valueRefusalsAreExact() {
        var refused: [UInt8] = []
        for value in 0...255 where !HTTPFieldValidation.isFieldValueCharacter(UInt8(value)) {
            refused.append(UInt8(value))
        }
        #expect(refused == controlsButTab)
    }

    @Test("whole values", arguments: [
        ("", true), ("text/html; charset=utf-8", true), ("a\tb", true), (" padded ", true), ("caf\u{E9}", true),
        ("a\r\nX-Injected: 1", false), ("a\rb", false), ("a\nb", false), ("a\u{0}b", false), ("a\u{7F}", false),
        ("\u{1B}[31m", false), ("trailing\r\n", false),
    ])
    func wholeValues(_ value: String, _ valid: Bool) {
        #expect(HTTPFieldValidation.isValidFieldValue(value.utf8) == valid)
    }

    // MARK: Word-at-a-time scans

    @Test("tokenPrefixCount stops at the first non-tchar, whatever the byte and wherever it stands (all 256 bytes, at each of 20 places)")
    func tokenPrefixCountFindsTheFirstNonTchar() {
        var wrong: [String] = []
        let filler = Array("Content-Type-abcXYZ019".utf8)
        for value in 0...255 {
            let byte = UInt8(value)
            for place in 0..<20 {
                var bytes = Array(filler[..<place]) + [byte] + Array(filler[place...])
                // A tail after the byte, so that the scan has a whole word to read past it.
                bytes += Array("-more-and-more".utf8)
                let expected = tchars.contains(byte) ? bytes.count : place
                let counted = bytes.withUnsafeBytes { HTTPFieldValidation.tokenPrefixCount($0) }
                let whole = bytes.withUnsafeBytes { HTTPFieldValidation.isToken($0) }
                if counted != expected || whole != tchars.contains(byte) { wrong.append("byte 0x\(String(byte, radix: 16)) at \(place)") }
            }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(5))")
        #expect([UInt8]().withUnsafeBytes { HTTPFieldValidation.isToken($0) } == false)
    }

    @Test("refusedInValue marks exactly the refused bytes of a word: every byte at every place among tricky neighbours, and 200,000 random words")
    func refusedInValueIsExact() {
        func expected(_ word: UInt64) -> UInt64 {
            var mask: UInt64 = 0
            for place in 0..<8 where !HTTPFieldValidation.isFieldValueCharacter(UInt8(truncatingIfNeeded: word >> (8 * place))) {
                mask |= 0x80 << (8 * place)
            }
            return mask
        }
        var wrong: [String] = []
        let neighbours: [UInt8] = [0x00, 0x08, 0x09, 0x0A, 0x1F, 0x20, 0x61, 0x7E, 0x7F, 0x80, 0xFF]
        for value in 0...255 {
            for place in 0..<8 {
                for neighbour in neighbours {
                    var word = UInt64(neighbour) &* 0x0101_0101_0101_0101
                    word &= ~(UInt64(0xFF) << (8 * place))
                    word |= UInt64(value) << (8 * place)
                    if HTTPFieldValidation.refusedInValue(word) != expected(word) { wrong.append(String(word, radix: 16)) }
                }
            }
        }
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        for _ in 0..<200_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let word = state ^ (state >> 29)
            if HTTPFieldValidation.refusedInValue(word) != expected(word) { wrong.append(String(word, radix: 16)) }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(5))")
    }

    @Test("fieldValuePrefixCount stops at the first byte no value may hold (all 256 bytes, at each of 30 places)")
    func fieldValuePrefixCountFindsTheFirstRefusedByte() {
        var wrong: [String] = []
        // Letters, spaces, a tab and obs-text: all allowed, some in the same word as the byte.
        let filler = Array("text/html; q=0.9,\t caf\u{e9} \u{7e}/x-y".utf8)
        for value in 0...255 {
            let byte = UInt8(value)
            let allowed = HTTPFieldValidation.isFieldValueCharacter(byte)
            for place in 0..<30 {
                let bytes = Array(filler[..<place]) + [byte] + Array(filler[place...]) + Array("\r\n".utf8)
                let expected = allowed ? bytes.count - 2 : place
                let counted = bytes.withUnsafeBytes { HTTPFieldValidation.fieldValuePrefixCount($0) }
                if counted != expected { wrong.append("byte 0x\(String(byte, radix: 16)) at \(place): \(counted)") }
            }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(5))")
        #expect([UInt8]().withUnsafeBytes { HTTPFieldValidation.fieldValuePrefixCount($0) } == 0)
    }

    @Test("isValidFieldValue over raw bytes refuses one control at any place and length (all 256 bytes, lengths 1-40)")
    func rawValuesCheckEveryByte() {
        var wrong: [String] = []
        for value in 0...255 {
            let byte = UInt8(value)
            let allowed = HTTPFieldValidation.isFieldValueCharacter(byte)
            for length in 1...40 {
                for place in 0..<length {
                    var bytes = [UInt8](repeating: UInt8(ascii: "v"), count: length)
                    bytes[place] = byte
                    let valid = bytes.withUnsafeBytes { HTTPFieldValidation.isValidFieldValue($0) }
                    if valid != allowed { wrong.append("byte 0x\(String(byte, radix: 16)) at \(place) of \(length)") }
                }
            }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(5))")
        #expect([UInt8]().withUnsafeBytes { HTTPFieldValidation.isValidFieldValue($0) })
    }

    @Test("caseInsensitiveEquals: a byte pair differing at any place agrees with byte-by-byte lower-casing (all 256 x 256 pairs, lengths 1-20)")
    func caseInsensitiveEqualsAgreesWithBytewise() {
        var wrong: [String] = []
        for length in [1, 7, 8, 9, 15, 16, 20] {
            for place in Set([0, length / 2, length - 1]) {
                var left = Array("Content-Type-XyZ-0123".utf8.prefix(length))
                var right = Array("cONTENT-tYPE-xYz-0123".utf8.prefix(length))
                for a in 0...255 {
                    for b in 0...255 {
                        left[place] = UInt8(a)
                        right[place] = UInt8(b)
                        let expected = HTTPFieldValidation.lowercased(UInt8(a)) == HTTPFieldValidation.lowercased(UInt8(b))
                        let equal = left.withUnsafeBytes { l in
                            right.withUnsafeBytes { r in HTTPFieldValidation.caseInsensitiveEquals(l.baseAddress!, r.baseAddress!, count: length) }
                        }
                        if equal != expected { wrong.append("0x\(String(a, radix: 16)) vs 0x\(String(b, radix: 16)) at \(place) of \(length)") }
                    }
                }
            }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(5))")
    }

    @Test("equalsLowercased: capitals of the bytes fold, nothing else does, and the lengths must agree")
    func equalsLowercasedFoldsOnlyTheBytesCapitals() {
        func check(_ bytes: String, _ lowercase: String) -> Bool {
            Array(bytes.utf8).withUnsafeBytes { b in Array(lowercase.utf8).withUnsafeBytes { HTTPFieldValidation.equalsLowercased(b, $0) } }
        }
        #expect(check("Transfer-Encoding", "transfer-encoding"))
        #expect(check("TE", "te"))
        #expect(check("", ""))
        #expect(!check("TE", "t"))
        #expect(!check("te", "tE"), "the known name is taken as it is: a capital there matches nothing")
        #expect(!check("@", "`"), "'@' is no capital: it does not fold to '`'")
        #expect(!check("[", "{"))
        #expect(!check("Te", "tf"))
    }

    // MARK: Request targets

    @Test("isValidTarget accepts visible ASCII and obs-text", arguments: [
        "/", "/index.html", "/search?q=a%20b&x=1", "*", "example.com:443", "http://example.com/path",
        "[::1]:8080", "/caf\u{E9}", "/~user/!$&'()*+,;=:@",
    ])
    func validTargets(_ target: String) {
        #expect(HTTPFieldValidation.isValidTarget(target.utf8))
    }

    @Test("isValidTarget refuses empty targets, spaces and controls", arguments: [
        "", " ", "/a b", " /", "/ ", "/a\tb", "/a\r\nX-Injected: 1", "/a\rb", "/a\nb", "/\u{0}", "/\u{7F}", "/\u{1}",
        "example.com\r\n",
    ])
    func invalidTargets(_ target: String) {
        #expect(!HTTPFieldValidation.isValidTarget(target.utf8))
    }

    @Test("isValidTarget, byte by byte: only bytes above SP, except DEL")
    func targetBytes() {
        for value in 0...255 {
            let byte = UInt8(value)
            let expected = byte > 0x20 && byte != 0x7F
            #expect(HTTPFieldValidation.isValidTarget([UInt8(ascii: "/"), byte]) == expected, "byte 0x\(String(byte, radix: 16))")
        }
    }

    // MARK: Case

    @Test("lowercased folds A-Z only")
    func lowercasedFoldsASCIILetters() {
        for value in 0...255 {
            let byte = UInt8(value)
            let expected = (0x41...0x5A).contains(byte) ? byte + 0x20 : byte
            #expect(HTTPFieldValidation.lowercased(byte) == expected, "byte 0x\(String(byte, radix: 16))")
        }
    }
}

/// Request targets checked eight bytes at a time agree with the byte-by-byte rule.
@Suite("HTTPFieldValidation targets")
struct HTTPTargetValidationTests {
    @Test("every byte at every position of targets of 1 to 24 bytes: the word check and the byte rule agree")
    func everyByte() {
        for count in 1...24 {
            for position in 0..<count {
                for byte in UInt8.min...UInt8.max {
                    var target = Array(repeating: UInt8(ascii: "a"), count: count)
                    target[position] = byte
                    let expected = byte > 0x20 && byte != 0x7F
                    let byWords = target.withUnsafeBufferPointer { HTTPFieldValidation.isValidTarget($0) }
                    let byBytes = HTTPFieldValidation.isValidTarget(target[...])
                    if byWords != expected || byBytes != expected {
                        Issue.record("byte \(byte) at \(position) of \(count): words \(byWords), bytes \(byBytes)")
                        return
                    }
                }
            }
        }
        #expect(!HTTPFieldValidation.isValidTarget(UnsafeBufferPointer<UInt8>(start: nil, count: 0)), "an empty target")
    }

    @Test("a request head with a space or a control in its target or authority is refused")
    func heads() {
        for bad in ["/a b", "/a\u{7F}", "/\r\n", "/aaaaaaaaaaaaaaaaaaa\tb"] {
            let head = HTTPRequestHead(method: .get, target: bad, authority: "example.test", fields: HTTPFields())
            #expect(throws: HTTPFieldError.self, "\(bad.debugDescription)") { try head.validate() }
            let authority = HTTPRequestHead(method: .get, target: "/", authority: bad, fields: HTTPFields())
            #expect(throws: HTTPFieldError.self, "\(bad.debugDescription)") { try authority.validate() }
        }
        let good = HTTPRequestHead(method: .get, target: "/files/\u{e9}t\u{e9}.txt?q=1", authority: "127.0.0.1:8080", fields: HTTPFields())
        #expect(throws: Never.self) { try good.validate() }
    }
}
