import Foundation

/// Reads one `Set-Cookie` field value into a ``SetCookie`` by the parsing algorithm of
/// RFC 6265bis (draft-ietf-httpbis-rfc6265bis) §5.6, byte by byte:
///
/// ```
/// set-cookie-string = name-value-pair *( ";" cookie-av )    ; as the algorithm splits it
/// name-value-pair   = [ name "=" ] value                     ; no "=": a nameless cookie
/// cookie-av         = attribute-name [ "=" attribute-value ]
/// ```
///
/// The algorithm is forgiving about syntax (servers send far worse than §4.1's grammar) and
/// strict where a byte could change what a cookie means: a control character anywhere refuses
/// the whole field (truncating at it instead could drop a `Secure` written after it), and so
/// does a name and value longer than ``maximumNameValueBytes``.
///
/// Attributes are read in order. The storage model (§5.7) takes the last attribute of each
/// name, so a later attribute replaces an earlier one. An attribute the algorithm ignores (an
/// unreadable `Expires`, a malformed `Max-Age`, an empty `Domain`, any value longer than
/// ``maximumAttributeValueBytes``) leaves the earlier one in place. An attribute whose value is
/// read as "none" still replaces: `Path=x` (the default path), `SameSite=bogus` ("Default"),
/// `Domain=.` (host-only).
///
/// The parser needs no clock. §5.6.1 caps an `Expires` at 400 days after now, but that cap is
/// a storage concern: ``SetCookie/expires`` is the date as written, and the jar applies the cap
/// with its own `now`. The `Max-Age` cap (§5.6.2 step 5) needs no clock, so it is applied here
/// (``maximumAgeSeconds``).
public enum SetCookieParser {
    /// The largest size of a cookie's name and value together, in UTF-8 bytes, after trimming
    /// (RFC 6265bis §5.6 step 5). A longer cookie is ignored whole.
    public static let maximumNameValueBytes = 4096
    /// The largest size of one attribute value, in UTF-8 bytes, after trimming (RFC 6265bis
    /// §5.6, attributes step 6). A longer attribute is ignored and the cookie is kept.
    public static let maximumAttributeValueBytes = 1024
    /// The longest lifetime a `Max-Age` can give, in seconds: 400 days, the cookie-age-limit
    /// of RFC 6265bis §5.5 and §5.6.2 step 5. A larger `Max-Age` is lowered to it.
    public static let maximumAgeSeconds: Int64 = 400 * 24 * 60 * 60

    /// The cookie in one `Set-Cookie` field value, or nil when RFC 6265bis §5.6 (or §5.7 step 2,
    /// an empty name and value) says to ignore the field.
    ///
    /// The field's bytes are its UTF-8. Bytes from 0x80 up are kept as written, in the name,
    /// the value and the attributes.
    public static func parse(_ field: String) -> SetCookie? {
        let bytes = Array(field.utf8)

        // §5.6 step 1: a CTL other than HTAB anywhere refuses the whole set-cookie-string.
        guard !bytes.contains(where: CookieSyntax.isForbiddenControl) else { return nil }

        // Step 2: the name-value-pair runs up to the first ";". The unparsed-attributes start
        // at that ";".
        let pairEnd = bytes.firstIndex(of: CookieSyntax.semicolon) ?? bytes.endIndex
        let pair = bytes[..<pairEnd]

        // Step 3: split at the first "=". Without one, the name is empty and the whole pair
        // is the value (a nameless cookie).
        var name: ArraySlice<UInt8>
        var value: ArraySlice<UInt8>
        if let equals = pair.firstIndex(of: CookieSyntax.equals) {
            name = pair[..<equals]
            value = pair[(equals + 1)...]
        } else {
            name = pair[pair.startIndex..<pair.startIndex]
            value = pair
        }

        // Step 4: trim WSP (SP and HTAB) around both. Whitespace inside is kept.
        name = CookieSyntax.trimmingWhitespace(name)
        value = CookieSyntax.trimmingWhitespace(value)

        // §5.7 step 2, applied here: a cookie with no name and no value is ignored. Nothing
        // the attributes say could make it worth storing.
        guard !(name.isEmpty && value.isEmpty) else { return nil }

        // Step 5: a name and value over 4096 bytes together ignore the whole field.
        guard name.count + value.count <= maximumNameValueBytes else { return nil }

        // Step 6.
        var cookie = SetCookie(name: CookieSyntax.string(name), value: CookieSyntax.string(value))

        // The last Domain read, after its leading "." is stripped and it is lowercased. It is
        // checked once every attribute has been read (see the end of this function).
        var domain: [UInt8]?

        // The unparsed-attributes, one cookie-av per pass. `start` is the ";" that opens the
        // next cookie-av.
        var start = pairEnd
        // Attributes step 1: stop when the unparsed-attributes are empty.
        while start < bytes.endIndex {
            // Step 2: discard the ";".
            let avStart = start + 1
            // Step 3: the cookie-av runs up to the next ";" or to the end.
            let avEnd = bytes[avStart...].firstIndex(of: CookieSyntax.semicolon) ?? bytes.endIndex
            let av = bytes[avStart..<avEnd]
            start = avEnd

            // Step 4: split at the first "=". Without one, the whole cookie-av is the name
            // and the value is empty.
            var attributeName: ArraySlice<UInt8>
            var attributeValue: ArraySlice<UInt8>
            if let equals = av.firstIndex(of: CookieSyntax.equals) {
                attributeName = av[..<equals]
                attributeValue = av[(equals + 1)...]
            } else {
                attributeName = av
                attributeValue = av[av.endIndex..<av.endIndex]
            }

            // Step 5: trim WSP around both.
            attributeName = CookieSyntax.trimmingWhitespace(attributeName)
            attributeValue = CookieSyntax.trimmingWhitespace(attributeValue)

            // Step 6: a value over 1024 bytes ignores this cookie-av only.
            guard attributeValue.count <= maximumAttributeValueBytes else { continue }

            // Step 7: known names are processed by §5.6.1 to §5.6.7 and RFC 2965's rules.
            // Unknown names are ignored.
            guard let attribute = Attribute(attributeName) else { continue }
            apply(attribute, value: attributeValue, to: &cookie, domain: &domain)
            // Step 8: back to step 1.
        }

        if let domain {
            // §5.6.3 strips one leading "." and no more. A value that still starts with one
            // ("Domain=..example.com") can match no host name, because a host name has no empty
            // label. §5.7 step 10 would ignore such a cookie at storage, so it is refused here,
            // which keeps `domain` free of a leading dot.
            if domain.first == CookieSyntax.dot { return nil }
            // `Domain=.` leaves an empty domain-attribute, which means host-only (the "otherwise"
            // branch of §5.7 step 10), the same as no Domain at all.
            cookie.domain = domain.isEmpty ? nil : CookieSyntax.string(domain[...])
        }
        return cookie
    }

    /// The attributes the parser knows. Names are matched ignoring ASCII case only, so
    /// `Secure` spelled with a non-ASCII look-alike is an unknown attribute.
    private enum Attribute: CaseIterable {
        case expires, maxAge, domain, path, secure, httpOnly, sameSite
        case comment, commentURL, version, port, discard

        /// The name as RFC 6265bis (the first seven) and RFC 2965 (the rest) spell it.
        var spelling: String {
            switch self {
            case .expires: "Expires"
            case .maxAge: "Max-Age"
            case .domain: "Domain"
            case .path: "Path"
            case .secure: "Secure"
            case .httpOnly: "HttpOnly"
            case .sameSite: "SameSite"
            case .comment: "Comment"
            case .commentURL: "CommentURL"
            case .version: "Version"
            case .port: "Port"
            case .discard: "Discard"
            }
        }

        init?(_ name: ArraySlice<UInt8>) {
            guard let match = Self.allCases.first(where: { CookieSyntax.equalsIgnoringASCIICase(name, $0.spelling) }) else { return nil }
            self = match
        }
    }

    /// Applies one cookie-av whose value is at most 1024 bytes and trimmed.
    private static func apply(_ attribute: Attribute, value: ArraySlice<UInt8>, to cookie: inout SetCookie, domain: inout [UInt8]?) {
        switch attribute {
        case .expires:
            // §5.6.1 steps 1–2: an unreadable date ignores the cookie-av. Steps 3–4 (the 400-day
            // cap against now) are left to the jar (see the type's notes).
            if let date = CookieDateParser.parse(bytes: value) { cookie.expires = date }
        case .maxAge:
            if let seconds = maxAge(value) { cookie.maxAge = seconds }
        case .domain:
            // RFC 6265 §5.2.3 says an empty Domain SHOULD be ignored. The earlier Domain, if any,
            // stays.
            guard !value.isEmpty else { return }
            // §5.6.3 step 2: strip one leading ".". Step 3: lowercase it. Only ASCII letters
            // are lowercased, because §5.7 step 8 refuses a non-ASCII domain at storage.
            let stripped = value.first == CookieSyntax.dot ? value.dropFirst() : value
            domain = stripped.map(CookieSyntax.lowercased)
        case .path:
            // §5.6.4: empty, or not starting with "/", means the default path (nil). It still
            // replaces an earlier Path.
            cookie.path = value.first == CookieSyntax.slash ? CookieSyntax.string(value) : nil
        case .secure:
            // §5.6.5: the value, if any, means nothing ("Secure=false" is Secure).
            cookie.secure = true
        case .httpOnly:
            // §5.6.6, as Secure.
            cookie.httpOnly = true
        case .sameSite:
            // §5.6.7 steps 1–5: enforcement starts as "Default", and only None, Strict and Lax
            // (in any case) change it. An unknown value is "Default" (nil) and still replaces an
            // earlier SameSite.
            cookie.sameSite = CookieSameSite.allCases.first { CookieSyntax.equalsIgnoringASCIICase(value, $0.rawValue) }
        case .comment:
            // RFC 2965 §3.2.2: `Comment=value`, a token or a quoted-string. Its quotes are
            // removed, and a backslash inside is kept as written. An empty comment is ignored.
            let text = CookieSyntax.unquoted(value)
            if !text.isEmpty { cookie.comment = CookieSyntax.string(text) }
        case .commentURL:
            // RFC 2965 §3.2.2: `CommentURL="http_URL"`, handled like Comment.
            let text = CookieSyntax.unquoted(value)
            if !text.isEmpty { cookie.commentURL = CookieSyntax.string(text) }
        case .version:
            // RFC 2965 §3.2.2: `Version=1*DIGIT`, bare or quoted. Anything else is ignored.
            if let version = CookieSyntax.decimal(CookieSyntax.unquoted(value), atMost: Int.max) { cookie.version = version }
        case .port:
            if let ports = portList(value) { cookie.portList = ports }
        case .discard:
            cookie.discard = true
        }
    }

    /// RFC 6265bis §5.6.2 steps 1–5: the seconds of a Max-Age value, or nil to ignore it.
    ///
    /// A value that does not fit in 64 bits saturates. A positive one becomes
    /// ``maximumAgeSeconds`` (step 5 lowers it to that anyway). A negative one becomes
    /// `Int64.min`, which still means "expire now". Other negative values are kept as written.
    static func maxAge(_ value: ArraySlice<UInt8>) -> Int64? {
        // Step 1: the first character is a DIGIT or "-".
        guard let first = value.first, CookieSyntax.isDigit(first) || first == CookieSyntax.minus else { return nil }
        // Step 2: the rest are DIGITs. A "-" alone has no digits, so it is no integer and
        // is ignored (the RFC leaves that case unsaid).
        let digits = first == CookieSyntax.minus ? value.dropFirst() : value
        guard !digits.isEmpty, digits.allSatisfy(CookieSyntax.isDigit) else { return nil }
        // Step 3: the integer, saturating.
        var magnitude: Int64 = 0
        var overflowed = false
        for digit in digits {
            let (shifted, overflow1) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = shifted.addingReportingOverflow(Int64(digit - CookieSyntax.zero))
            if overflow1 || overflow2 {
                overflowed = true
                break
            }
            magnitude = sum
        }
        if first == CookieSyntax.minus { return overflowed ? Int64.min : -magnitude }
        // Steps 4–5: at most the cookie-age-limit.
        return overflowed ? maximumAgeSeconds : min(magnitude, maximumAgeSeconds)
    }

    /// RFC 2965 §3.2.2: `Port[="portlist"]`, with `portlist = 1#portnum`. The list may be quoted
    /// or bare, and it may have WSP around its commas. `Port` with no value, or with an empty
    /// one, is the empty list ("the port the request went to"). Nil, to ignore the attribute,
    /// when an element is empty, is not a number, or is over 65535.
    static func portList(_ value: ArraySlice<UInt8>) -> [Int]? {
        let list = CookieSyntax.unquoted(value)
        guard !list.isEmpty else { return [] }
        var ports: [Int] = []
        for element in list.split(separator: CookieSyntax.comma, omittingEmptySubsequences: false) {
            guard let port = CookieSyntax.decimal(CookieSyntax.trimmingWhitespace(element), atMost: 65_535) else { return nil }
            ports.append(port)
        }
        return ports
    }
}

/// Reads a cookie date (an `Expires` value) by the algorithm of RFC 6265bis §5.1.1. The
/// algorithm is deliberately loose: it splits the text into tokens at delimiters and picks
/// out a time, a day of the month, a month and a year by their shapes, in any order,
/// ignoring what it does not recognise (weekdays, "GMT", anything else). All three historical
/// HTTP formats read the same:
///
/// ```
/// Sun, 06 Nov 1994 08:49:37 GMT     IMF-fixdate (RFC 9110 §5.6.7)
/// Sunday, 06-Nov-94 08:49:37 GMT    RFC 850
/// Sun Nov  6 08:49:37 1994          asctime
/// ```
///
/// Dates are in UTC and computed by calendar arithmetic, with no `DateFormatter`, no locale and
/// no clock.
public enum CookieDateParser {
    /// The date a cookie-date denotes, or nil when §5.1.1 fails to parse it. A result lies
    /// between 1601-01-01T00:00:00Z and 9999-12-31T23:59:59Z, in whole seconds.
    public static func parse(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        return parse(bytes: bytes[...])
    }

    /// ``parse(_:)`` on the bytes of a value, as the Set-Cookie parser holds them.
    static func parse(bytes: ArraySlice<UInt8>) -> Date? {
        // The found-time, found-day-of-month, found-month and found-year flags are these
        // values being set.
        var foundTime: (hour: Int, minute: Int, second: Int)?
        var foundDayOfMonth: Int?
        var foundMonth: Int?
        var foundYear: Int?

        // Step 1: the date-tokens are the runs of non-delimiters.
        var index = bytes.startIndex
        while true {
            while index < bytes.endIndex, isDelimiter(bytes[index]) { index += 1 }
            guard index < bytes.endIndex else { break }
            let tokenStart = index
            while index < bytes.endIndex, !isDelimiter(bytes[index]) { index += 1 }
            let token = bytes[tokenStart..<index]

            // Step 2: each token is tried as a time, a day of the month, a month and a year,
            // in that order. The first production it matches, among those not yet found,
            // takes it. A token that matches none is skipped.
            if foundTime == nil, let found = time(token) {
                foundTime = found  // 2.1
            } else if foundDayOfMonth == nil, let found = number(token, digits: 1...2) {
                foundDayOfMonth = found  // 2.2
            } else if foundMonth == nil, let found = month(token) {
                foundMonth = found  // 2.3
            } else if foundYear == nil, let found = number(token, digits: 2...4) {
                foundYear = found  // 2.4
            }
        }

        // Part of step 5: every flag must be set.
        guard var year = foundYear, let monthNumber = foundMonth, let dayOfMonth = foundDayOfMonth, let hms = foundTime else { return nil }
        // Step 3: 70–99 are 1970–1999.
        if year >= 70 && year <= 99 { year += 1900 }
        // Step 4: 0–69 are 2000–2069. The step counts the value and not the digits written,
        // so "0070" is 1970 as well.
        if year >= 0 && year <= 69 { year += 2000 }
        // Step 5: the ranges. A leap second (":60") is refused.
        guard dayOfMonth >= 1 && dayOfMonth <= 31, year >= 1601, hms.hour <= 23, hms.minute <= 59, hms.second <= 59 else { return nil }
        // Step 6: the date must exist (no 30 February, no 29 February outside a leap year).
        guard dayOfMonth <= daysIn(month: monthNumber, year: year) else { return nil }
        let days = daysSince1970(year: year, month: monthNumber, day: dayOfMonth)
        let seconds = days * 86_400 + hms.hour * 3_600 + hms.minute * 60 + hms.second
        // Step 7. Every result is a whole number of seconds that a Double holds exactly.
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// `delimiter = %x09 / %x20-2F / %x3B-40 / %x5B-60 / %x7B-7E`. Every other byte (digits,
    /// ":", letters, other controls and bytes from 0x7F up) is a non-delimiter.
    static func isDelimiter(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x09, 0x20...0x2F, 0x3B...0x40, 0x5B...0x60, 0x7B...0x7E: true
        default: false
        }
    }

    /// `time = hms-time [ non-digit *OCTET ]`, `hms-time = time-field ":" time-field ":" time-field`,
    /// `time-field = 1*2DIGIT`.
    static func time(_ token: ArraySlice<UInt8>) -> (hour: Int, minute: Int, second: Int)? {
        var index = token.startIndex
        // One time-field: one or two digits. A third digit makes the token fail to match,
        // because the next byte must then be ":" or (after the last field) a non-digit.
        func field() -> Int? {
            var value = 0
            let start = index
            while index < token.endIndex, index - start < 2, CookieSyntax.isDigit(token[index]) {
                value = value * 10 + Int(token[index] - CookieSyntax.zero)
                index += 1
            }
            return index > start ? value : nil
        }
        func colon() -> Bool {
            guard index < token.endIndex, token[index] == CookieSyntax.colon else { return false }
            index += 1
            return true
        }
        guard let hour = field(), colon(), let minute = field(), colon(), let second = field() else { return nil }
        // [ non-digit *OCTET ]: the end, or anything that starts with a non-digit.
        guard index == token.endIndex || !CookieSyntax.isDigit(token[index]) else { return nil }
        return (hour, minute, second)
    }

    /// `day-of-month = 1*2DIGIT [ non-digit *OCTET ]` and `year = 2*4DIGIT [ non-digit *OCTET ]`:
    /// a token that starts with a run of as many digits as allowed, then ends or goes on with a
    /// non-digit. The value is the value of that run.
    static func number(_ token: ArraySlice<UInt8>, digits allowed: ClosedRange<Int>) -> Int? {
        var count = 0
        var value = 0
        for byte in token {
            guard CookieSyntax.isDigit(byte) else { break }
            count += 1
            // More digits than allowed: no prefix of the run is followed by a non-digit.
            guard count <= allowed.upperBound else { return nil }
            value = value * 10 + Int(byte - CookieSyntax.zero)
        }
        return allowed.contains(count) ? value : nil
    }

    /// The month names, in order. An ABNF string is case-insensitive in ASCII.
    private static let monthNames: [[UInt8]] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"].map { Array($0.utf8) }

    /// `month = ( "jan" / … / "dec" ) *OCTET`: the month (1–12) named by the token's first three
    /// bytes, whatever follows ("November", "Nov.", "novXYZ").
    static func month(_ token: ArraySlice<UInt8>) -> Int? {
        guard token.count >= 3 else { return nil }
        let prefix = token.prefix(3).map(CookieSyntax.lowercased)
        guard let index = monthNames.firstIndex(of: prefix) else { return nil }
        return index + 1
    }

    /// Days in a month of the proleptic Gregorian calendar (the calendar of every year from 1601).
    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    static func isLeap(_ year: Int) -> Bool {
        year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
    }

    /// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's
    /// `days_from_civil`). The year is counted from March, so the leap day falls at the end of
    /// the counted year. 146,097 is the number of days in a 400-year era, and 719,468 is the
    /// number of days from 0000-03-01 to 1970-01-01.
    static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
        let marchYear = month <= 2 ? year - 1 : year
        let era = (marchYear >= 0 ? marchYear : marchYear - 399) / 400
        let yearOfEra = marchYear - era * 400                                    // 0…399
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1  // 0…365
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear  // 0…146096
        return era * 146_097 + dayOfEra - 719_468
    }
}

/// The byte classes and small readers both parsers share.
private enum CookieSyntax {
    static let semicolon = UInt8(ascii: ";")
    static let equals = UInt8(ascii: "=")
    static let dot = UInt8(ascii: ".")
    static let slash = UInt8(ascii: "/")
    static let minus = UInt8(ascii: "-")
    static let comma = UInt8(ascii: ",")
    static let colon = UInt8(ascii: ":")
    static let quote = UInt8(ascii: "\"")
    static let zero = UInt8(ascii: "0")

    /// %x00-08 / %x0A-1F / %x7F: the CTLs except HTAB (RFC 6265bis §5.6 step 1).
    static func isForbiddenControl(_ byte: UInt8) -> Bool {
        (byte <= 0x08) || (byte >= 0x0A && byte <= 0x1F) || byte == 0x7F
    }

    /// WSP: SP or HTAB.
    static func isWhitespace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }

    static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    static func lowercased(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
    }

    static func trimmingWhitespace(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var start = bytes.startIndex
        var end = bytes.endIndex
        while start < end, isWhitespace(bytes[start]) { start += 1 }
        while end > start, isWhitespace(bytes[end - 1]) { end -= 1 }
        return bytes[start..<end]
    }

    /// The bytes inside one pair of enclosing double quotes, or the bytes as they are.
    static func unquoted(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        guard bytes.count >= 2, bytes.first == quote, bytes.last == quote else { return bytes }
        return bytes.dropFirst().dropLast()
    }

    /// `1*DIGIT` as a number no larger than `limit`; nil for anything else or a larger number.
    static func decimal(_ bytes: ArraySlice<UInt8>, atMost limit: Int) -> Int? {
        guard !bytes.isEmpty else { return nil }
        var value = 0
        for byte in bytes {
            guard isDigit(byte) else { return nil }
            let (shifted, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = shifted.addingReportingOverflow(Int(byte - zero))
            guard !overflow1, !overflow2, sum <= limit else { return nil }
            value = sum
        }
        return value
    }

    /// True when the bytes spell `text` in any ASCII case.
    static func equalsIgnoringASCIICase(_ bytes: ArraySlice<UInt8>, _ text: String) -> Bool {
        let other = text.utf8
        guard bytes.count == other.count else { return false }
        return zip(bytes, other).allSatisfy { lowercased($0) == lowercased($1) }
    }

    /// The bytes as a String. The parsers cut only at ASCII bytes, so a slice of valid UTF-8
    /// stays valid and round-trips exactly.
    static func string(_ bytes: ArraySlice<UInt8>) -> String {
        String(decoding: bytes, as: UTF8.self)
    }
}
