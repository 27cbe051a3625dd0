@testable import Courier
import CourierCore
import Foundation
import Testing
import _CourierTestSupport

/// The disk cache's stored form of header fields (CacheRecord+Fields.swift): written and read
/// by hand, and the same text JSONEncoder wrote and JSONDecoder read before.
@Suite("Cache field coding")
struct CacheFieldsCodingTests {
    /// The rows the JSONEncoder version wrote for `pairs`.
    func jsonEncoderText(_ pairs: [([UInt8], [UInt8])]) throws -> String {
        let rows: [[String]] = pairs.map { name, value in
            if let text = String(validating: value, as: UTF8.self) {
                return [String(decoding: name, as: UTF8.self), text]
            }
            return [Data(name).base64EncodedString(), Data(value).base64EncodedString(), "base64"]
        }
        return String(decoding: try JSONEncoder().encode(rows), as: UTF8.self)
    }

    @Test("random fields: the text is JSONEncoder's byte for byte, and reads back to the same fields")
    func sameAsJSONEncoder() throws {
        var generator = SplitMix64(seed: 17)
        let names = ["Content-Type", "X-A", "set-cookie", "ETag", "x_y.z~1"].map { Array($0.utf8) }
        // Quotes, backslashes, solidus, tab, space, UTF-8 of two, three and four bytes, and a
        // lone Latin-1 byte (obs-text, not UTF-8).
        let pieces: [[UInt8]] = ["a", "Z9", "\"", "\\", "/", "\t", " ", "é", "€", "😀", "; q=0.5"].map { Array($0.utf8) } + [[0xE9]]
        for round in 0..<300 {
            var pairs: [([UInt8], [UInt8])] = []
            for _ in 0..<Int(generator.below(8)) {
                var value: [UInt8] = []
                for _ in 0..<Int(generator.below(12)) {
                    // Every other round without the Latin-1 byte, so most values are UTF-8.
                    value += pieces[Int(generator.below(pieces.count - (round % 2)))]
                }
                // A value neither starts nor ends with whitespace.
                while value.first == 0x20 || value.first == 0x09 { value.removeFirst() }
                while value.last == 0x20 || value.last == 0x09 { value.removeLast() }
                pairs.append((names[Int(generator.below(names.count))], value))
            }
            let original = rawFields(pairs)
            let text = CacheRecord.encodeFields(original)
            #expect(text == (try jsonEncoderText(pairs)), "\(pairs)")
            #expect(CacheRecord.decodeFields(text) == original, "\(text)")
        }
    }

    @Test("JSON in another form still reads (spaces, \\u escapes, surrogate pairs); bad rows and invalid fields do not")
    func otherForms() {
        let spaced = #" [ [ "X-A" , "caf\u00e9" ] , ["X-B","\ud83d\ude00 \/ \"q\""] ] "#
        #expect(CacheRecord.decodeFields(spaced) == rawFields([(Array("X-A".utf8), Array("café".utf8)), (Array("X-B".utf8), Array("😀 / \"q\"".utf8))]))
        #expect(CacheRecord.decodeFields("[]") == HTTPFields())
        #expect(CacheRecord.decodeFields(#"[["WC1h","6Q==","base64"]]"#) == rawFields([(Array("X-a".utf8), [0xE9])]))
        // A line break in a value, a name that is not a token, a row of one, not JSON, trailing bytes.
        for text in [#"[["X-A","a\r\nb"]]"#, #"[["X A","b"]]"#, #"[["X-A"]]"#, "nonsense", #"[["X-A","b"]]x"#, #"[["X-A","b","hex"]]"#] {
            #expect(CacheRecord.decodeFields(text) == nil, "\(text)")
        }
    }
}
