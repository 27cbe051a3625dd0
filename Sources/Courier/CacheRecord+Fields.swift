import CourierCore
import Foundation

/// Header fields as the disk cache keeps them: a JSON array with one element per field, in
/// order (repeated fields stay repeated), `["Name", "value"]`; a field whose name or value is
/// not UTF-8 (obs-text, RFC 9110 section 5.5) is `["<base64 name>", "<base64 value>",
/// "base64"]`, so that its bytes come back exactly.
///
/// Both directions are written by hand for the form this writes: a disk hit decodes two lists,
/// and `JSONDecoder` took 229,000 instructions for them, 44% of the hit (`courier-bench
/// w1default` over distinct URLs, by callgrind). Text in any other form that is still JSON
/// (spaces, other escapes: a row written by another version, or by hand) goes to
/// `JSONDecoder`, so what reads is what always read.
extension CacheRecord {
    /// `fields` in the stored form. Fields that are not valid HTTP (a name that is not a token,
    /// a value with CR, LF or NUL; possible only in a response built by hand) are left out:
    /// ``decodeFields(_:)`` refuses them.
    static func encodeFields(_ fields: HTTPFields) -> String {
        var json: [UInt8] = [UInt8(ascii: "[")]
        json.reserveCapacity(fields.count * 48 + 2)
        fields.forEachField { name, value in
            guard HTTPFieldValidation.isToken(name), HTTPFieldValidation.isValidFieldValue(value) else { return }
            if json.count > 1 { json.append(UInt8(ascii: ",")) }
            json.append(UInt8(ascii: "["))
            // A token is ASCII; a value is written as it is when it is UTF-8.
            if String(validating: value, as: UTF8.self) != nil {
                appendJSONString(name, to: &json)
                json.append(UInt8(ascii: ","))
                appendJSONString(value, to: &json)
            } else {
                appendJSONString(Array(Data(name).base64EncodedString().utf8), to: &json)
                json.append(UInt8(ascii: ","))
                appendJSONString(Array(Data(value).base64EncodedString().utf8), to: &json)
                json.append(contentsOf: #","base64""#.utf8)
            }
            json.append(UInt8(ascii: "]"))
        }
        json.append(UInt8(ascii: "]"))
        return String(decoding: json, as: UTF8.self)
    }

    /// UTF-8 `bytes` of a valid field or a base64 text as a JSON string, escaped as
    /// `JSONEncoder` escapes: quote, backslash, solidus, and HTAB, the one control a valid
    /// field value may hold.
    private static func appendJSONString(_ bytes: some Collection<UInt8>, to json: inout [UInt8]) {
        json.append(UInt8(ascii: "\""))
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"):
                json.append(UInt8(ascii: "\\"))
                json.append(byte)
            case UInt8(ascii: "\t"):
                json.append(contentsOf: #"\t"#.utf8)
            default:
                json.append(byte)
            }
        }
        json.append(UInt8(ascii: "\""))
    }

    /// The fields written by ``encodeFields(_:)``; nil when `text` is anything else, or holds
    /// a field that is not valid HTTP (so a row altered by hand cannot inject a line break
    /// into a request built from it).
    static func decodeFields(_ text: String) -> HTTPFields? {
        var text = text
        var storage: [UInt8] = []
        let read = text.withUTF8 { bytes -> FieldRowsReader.Rows? in
            storage.reserveCapacity(bytes.count)
            var reader = FieldRowsReader(bytes)
            return reader.rows(into: &storage)
        }
        guard let read else {
            guard let rows = try? JSONDecoder().decode([[String]].self, from: Data(text.utf8)) else { return nil }
            return fields(rows.map { $0.map { Array($0.utf8) } })
        }
        // The usual case: every row a name and a value, which the reader put in `storage` one
        // after the other, as HTTPFields keeps them.
        guard read.ends.enumerated().allSatisfy({ $0.element == 2 * ($0.offset + 1) }) else {
            return fields(read.ends.indices.map { row in
                read.strings[(row == 0 ? 0 : read.ends[row - 1])..<read.ends[row]].map { Array(storage[$0]) }
            })
        }
        var locations: [HTTPFields.Location] = []
        locations.reserveCapacity(read.ends.count)
        for row in read.ends.indices {
            let name = read.strings[2 * row], value = read.strings[2 * row + 1]
            guard HTTPFieldValidation.isToken(storage[name]), HTTPFieldValidation.isValidFieldValue(storage[value]) else { return nil }
            locations.append(HTTPFields.Location(name: name, value: value))
        }
        guard storage.count < Int(UInt32.max) else { return nil }
        return HTTPFields(validatedStorage: storage, locations: locations)
    }

    /// Fields from decoded rows: `[name, value]`, or `[name, value, "base64"]` with both in
    /// base64; nil for any other row, or a field that is not valid HTTP.
    private static func fields(_ rows: [[[UInt8]]]) -> HTTPFields? {
        var storage: [UInt8] = []
        var locations: [HTTPFields.Location] = []
        locations.reserveCapacity(rows.count)
        for row in rows {
            let name: [UInt8]
            let value: [UInt8]
            switch row.count {
            case 2:
                name = row[0]
                value = row[1]
            case 3 where row[2] == Array("base64".utf8):
                guard let decodedName = Data(base64Encoded: Data(row[0])), let decodedValue = Data(base64Encoded: Data(row[1])) else { return nil }
                name = Array(decodedName)
                value = Array(decodedValue)
            default:
                return nil
            }
            guard HTTPFieldValidation.isToken(name), HTTPFieldValidation.isValidFieldValue(value) else { return nil }
            let nameStart = storage.count
            storage += name
            let valueStart = storage.count
            storage += value
            // Offsets are 32-bit in HTTPFields; no real header section comes near that.
            guard storage.count < Int(UInt32.max) else { return nil }
            locations.append(HTTPFields.Location(name: nameStart..<valueStart, value: valueStart..<storage.count))
        }
        return HTTPFields(validatedStorage: storage, locations: locations)
    }
}

/// Reads `[["a","b"],["c","d","e"]]` exactly as ``CacheRecord/encodeFields(_:)`` writes it:
/// no spaces, strings with the escapes it writes. Anything else gives nil, and the caller asks
/// `JSONDecoder`.
private struct FieldRowsReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0

    init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    /// Where the strings are in the storage, in order, and where each row's end in them.
    struct Rows {
        var strings: [Range<Int>] = []
        var ends: [Int] = []
    }

    /// The rows, their strings unescaped into `storage` one after the other.
    mutating func rows(into storage: inout [UInt8]) -> Rows? {
        guard take(UInt8(ascii: "[")) else { return nil }
        var rows = Rows()
        if take(UInt8(ascii: "]")) { return index == bytes.count ? rows : nil }
        repeat {
            guard take(UInt8(ascii: "[")) else { return nil }
            repeat {
                let start = storage.count
                guard string(into: &storage) else { return nil }
                rows.strings.append(start..<storage.count)
            } while take(UInt8(ascii: ","))
            guard take(UInt8(ascii: "]")) else { return nil }
            rows.ends.append(rows.strings.count)
        } while take(UInt8(ascii: ","))
        guard take(UInt8(ascii: "]")), index == bytes.count else { return nil }
        return rows
    }

    private mutating func take(_ byte: UInt8) -> Bool {
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    /// A string's bytes, appended to `storage`: raw ones as they are (not checked as UTF-8
    /// here: a value is checked as a field value, and was UTF-8 when written), and the escapes
    /// `encodeFields` writes. False for anything else.
    private mutating func string(into storage: inout [UInt8]) -> Bool {
        guard take(UInt8(ascii: "\"")) else { return false }
        while index < bytes.count {
            // A run without quote, backslash or control goes in one append.
            let runStart = index
            while index < bytes.count, bytes[index] != UInt8(ascii: "\""), bytes[index] != UInt8(ascii: "\\"), bytes[index] >= 0x20 {
                index += 1
            }
            storage.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
            guard index < bytes.count else { return false }
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return true
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { return false }
                let escaped = bytes[index]
                index += 1
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): storage.append(escaped)
                case UInt8(ascii: "t"): storage.append(UInt8(ascii: "\t"))
                default: return false
                }
            default:
                return false
            }
        }
        return false
    }
}
