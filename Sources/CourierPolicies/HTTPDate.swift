import Foundation

/// RFC 9110 §5.6.7 HTTP-date: IMF-fixdate, and the obsolete RFC 850 and asctime forms when parsing.
///
/// ```
/// Sun, 06 Nov 1994 08:49:37 GMT    IMF-fixdate  = day-name "," SP date1 SP time-of-day SP GMT
/// Sunday, 06-Nov-94 08:49:37 GMT   rfc850-date  = day-name-l "," SP date2 SP time-of-day SP GMT
/// Sun Nov  6 08:49:37 1994         asctime-date = day-name SP date3 SP time-of-day SP year
/// ```
///
/// Parsing follows the grammar exactly: day names, month names and "GMT" are case-sensitive
/// (`%s` in the ABNF), every field has its fixed number of digits, and nothing may follow the
/// date. Only the surrounding whitespace (OWS, which a field value never keeps) is skipped. The
/// day name is not checked against the date: the grammar does not ask it, and a wrong weekday
/// changes nothing the cache computes. The date itself must exist (no 31 November, no 29 February
/// outside a leap year); a leap second (`23:59:60`, allowed by the grammar) is the next second.
///
/// Dates are computed by calendar arithmetic in UTC, with no `DateFormatter`, no locale and no
/// clock, using the same day counting as ``CookieDateParser``.
public enum HTTPDate {
    /// The date `text` denotes in any of the three forms, or nil when it is none of them.
    ///
    /// An rfc850-date has a two-digit year. RFC 9110 reads one that looks more than 50 years in
    /// the future as the most recent past year with those digits, which needs the present; this
    /// parser has no clock, so it fixes the century as RFC 6265bis §5.1.1 does: 70–99 are
    /// 1970–1999 and 00–69 are 2000–2069. The two readings differ only for years no sender of
    /// this obsolete form writes.
    public static func parse(_ text: String) -> Date? {
        let bytes = trimmed(Array(text.utf8)[...])
        return imfFixdate(bytes) ?? rfc850Date(bytes) ?? asctimeDate(bytes)
    }

    /// An IMF-fixdate only (the one form a sender generates), for fields that accept no other.
    static func parseIMFFixdate(_ text: String) -> Date? {
        imfFixdate(trimmed(Array(text.utf8)[...]))
    }

    /// `date` as an IMF-fixdate, e.g. "Sun, 06 Nov 1994 08:49:37 GMT". Fractions of a second are
    /// dropped (rounded down). A date outside the years 0000–9999 (which four digits cannot
    /// write) is clamped to the nearest one they can, and NaN is written as the epoch.
    public static func format(_ date: Date) -> String {
        let interval = date.timeIntervalSince1970
        let clamped = interval.isNaN ? 0 : min(max(interval, earliestFormattable), latestFormattable)
        let seconds = Int(clamped.rounded(.down))
        let days = seconds >= 0 ? seconds / secondsPerDay : (seconds - (secondsPerDay - 1)) / secondsPerDay
        let secondOfDay = seconds - days * secondsPerDay
        let (year, month, day) = civilDate(daysSince1970: days)
        // 1970-01-01 was a Thursday (index 4, counting from Sunday).
        let weekday = ((days % 7) + 7 + 4) % 7
        let time = "\(padded(secondOfDay / 3_600, 2)):\(padded(secondOfDay / 60 % 60, 2)):\(padded(secondOfDay % 60, 2))"
        return "\(dayNames[weekday]), \(padded(day, 2)) \(monthNames[month - 1]) \(padded(year, 4)) \(time) GMT"
    }

    // MARK: The three forms

    private static let dayNames = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let longDayNames = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
    private static let monthNames = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    private static let secondsPerDay = 86_400
    /// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z, the dates a four-digit year can write.
    private static let earliestFormattable: TimeInterval = -62_167_219_200
    private static let latestFormattable: TimeInterval = 253_402_300_799

    /// `day-name "," SP day SP month SP year SP time-of-day SP "GMT"`.
    private static func imfFixdate(_ bytes: ArraySlice<UInt8>) -> Date? {
        var reader = Reader(bytes)
        guard reader.oneOf(dayNames) != nil, reader.literal(", "), let day = reader.digits(2), reader.literal(" "),
              let month = reader.oneOf(monthNames), reader.literal(" "), let year = reader.digits(4), reader.literal(" "),
              let time = reader.timeOfDay(), reader.literal(" GMT"), reader.atEnd else { return nil }
        return date(year: year, month: month + 1, day: day, time: time)
    }

    /// `day-name-l "," SP day "-" month "-" 2DIGIT SP time-of-day SP "GMT"`.
    private static func rfc850Date(_ bytes: ArraySlice<UInt8>) -> Date? {
        var reader = Reader(bytes)
        guard reader.oneOf(longDayNames) != nil, reader.literal(", "), let day = reader.digits(2), reader.literal("-"),
              let month = reader.oneOf(monthNames), reader.literal("-"), let shortYear = reader.digits(2), reader.literal(" "),
              let time = reader.timeOfDay(), reader.literal(" GMT"), reader.atEnd else { return nil }
        // The century, fixed as the doc comment of `parse` explains.
        let year = shortYear >= 70 ? 1900 + shortYear : 2000 + shortYear
        return date(year: year, month: month + 1, day: day, time: time)
    }

    /// `day-name SP month SP ( 2DIGIT / ( SP DIGIT ) ) SP time-of-day SP year`.
    private static func asctimeDate(_ bytes: ArraySlice<UInt8>) -> Date? {
        var reader = Reader(bytes)
        guard reader.oneOf(dayNames) != nil, reader.literal(" "), let month = reader.oneOf(monthNames), reader.literal(" ") else { return nil }
        let day: Int
        if reader.literal(" ") {
            guard let digit = reader.digits(1) else { return nil }
            day = digit
        } else {
            guard let digits = reader.digits(2) else { return nil }
            day = digits
        }
        guard reader.literal(" "), let time = reader.timeOfDay(), reader.literal(" "), let year = reader.digits(4), reader.atEnd else { return nil }
        return date(year: year, month: month + 1, day: day, time: time)
    }

    /// The instant of a UTC date and time, or nil when the day does not exist in that month.
    private static func date(year: Int, month: Int, day: Int, time: (hour: Int, minute: Int, second: Int)) -> Date? {
        guard day >= 1, day <= CookieDateParser.daysIn(month: month, year: year) else { return nil }
        let days = CookieDateParser.daysSince1970(year: year, month: month, day: day)
        let seconds = days * secondsPerDay + time.hour * 3_600 + time.minute * 60 + time.second
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// Year, month (1–12) and day of the proleptic Gregorian date `days` after 1970-01-01: the
    /// inverse of ``CookieDateParser/daysSince1970(year:month:day:)`` (Howard Hinnant's
    /// `civil_from_days`; 719,468 days from 0000-03-01 to 1970-01-01, 146,097 days a 400-year era).
    static func civilDate(daysSince1970 days: Int) -> (year: Int, month: Int, day: Int) {
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097                                                // 0…146096
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365  // 0…399
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)       // 0…365, from March
        let shiftedMonth = (5 * dayOfYear + 2) / 153                                         // 0…11, March = 0
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// `value` in decimal, zero-padded to `width` digits.
    private static func padded(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    /// The bytes without leading and trailing SP and HTAB.
    private static func trimmed(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var start = bytes.startIndex
        var end = bytes.endIndex
        while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
        while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
        return bytes[start..<end]
    }

    /// Reads the pieces of a date from left to right; every read either consumes what it
    /// matched or fails (the callers give up at the first failure).
    private struct Reader {
        let bytes: ArraySlice<UInt8>
        var index: Int

        init(_ bytes: ArraySlice<UInt8>) {
            self.bytes = bytes
            index = bytes.startIndex
        }

        var atEnd: Bool { index == bytes.endIndex }

        /// The exact bytes of `text` (case-sensitive).
        mutating func literal(_ text: String) -> Bool {
            var position = index
            for byte in text.utf8 {
                guard position < bytes.endIndex, bytes[position] == byte else { return false }
                position += 1
            }
            index = position
            return true
        }

        /// The index of the name in `names` that comes next, spelled exactly. No name in one list
        /// is a prefix of another, so the first match is the only one.
        mutating func oneOf(_ names: [String]) -> Int? {
            for (offset, name) in names.enumerated() {
                if literal(name) { return offset }
            }
            return nil
        }

        /// Exactly `count` DIGITs, as a number.
        mutating func digits(_ count: Int) -> Int? {
            guard bytes.endIndex - index >= count else { return nil }
            var value = 0
            for position in index..<(index + count) {
                let byte = bytes[position]
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            index += count
            return value
        }

        /// `time-of-day = hour ":" minute ":" second`, two digits each, 00:00:00 to 23:59:60.
        mutating func timeOfDay() -> (hour: Int, minute: Int, second: Int)? {
            guard let hour = digits(2), literal(":"), let minute = digits(2), literal(":"), let second = digits(2),
                  hour <= 23, minute <= 59, second <= 60 else { return nil }
            return (hour, minute, second)
        }
    }
}
