import Courier
import Foundation
import Testing

/// The text views of a byte sequence (`lines`, `characters`, `unicodeScalars`) against the
/// standard library's decoding of the same bytes whole: random mixes of ASCII, every line
/// terminator, combining marks, flags and ill-formed UTF-8.
struct AsyncTextSequenceTests {
    /// An asynchronous sequence of the given bytes, handed out one at a time.
    struct Bytes: AsyncSequence {
        typealias Element = UInt8
        let bytes: [UInt8]

        struct AsyncIterator: AsyncIteratorProtocol {
            var rest: ArraySlice<UInt8>
            mutating func next() async throws -> UInt8? { rest.popFirst() }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(rest: bytes[...]) }
    }

    /// Pieces the random inputs are made of: text, the terminators (LF, CR, CR LF, NEL,
    /// U+2028, U+2029), a combining acute, a regional indicator, and lone or truncated bytes
    /// that begin or continue those (C2 and E2 without their ends, 80, 85, A8 on their own).
    static let pieces: [[UInt8]] = [
        Array("a".utf8), Array("line".utf8), Array(" ".utf8), [0x0A], [0x0D], [0x0D, 0x0A], [0xC2, 0x85], [0xE2, 0x80, 0xA8],
        [0xE2, 0x80, 0xA9], [0xCC, 0x81], [0xF0, 0x9F, 0x87, 0xAB], [0xC2], [0xE2], [0xE2, 0x80], [0x80], [0x85], [0xA8], [0xFF],
        Array("é".utf8),
    ]

    /// Seeded, so that a failure repeats.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var value = state
            value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
            value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
            return value ^ (value >> 31)
        }
    }

    static func inputs() -> [[UInt8]] {
        var generator = Generator(state: 42)
        return (0..<1500).map { _ in
            (0..<Int.random(in: 0...24, using: &generator)).flatMap { _ in pieces.randomElement(using: &generator)! }
        }
    }

    @Test("lines, characters and scalars are the whole decoding's")
    func matchesWholeDecoding() async throws {
        let terminators: Set<Character> = ["\n", "\r", "\r\n", "\u{85}", "\u{2028}", "\u{2029}"]
        for input in Self.inputs() {
            let text = String(decoding: input, as: UTF8.self)
            var lines: [String] = []
            for try await line in AsyncLineSequence(Bytes(bytes: input)) { lines.append(line) }
            #expect(lines == text.split(whereSeparator: { terminators.contains($0) }).map(String.init), "\(input)")
            var characters: [Character] = []
            for try await character in AsyncCharacterSequence(Bytes(bytes: input)) { characters.append(character) }
            #expect(characters == Array(text), "\(input)")
            var scalars: [Unicode.Scalar] = []
            for try await scalar in AsyncUnicodeScalarSequence(Bytes(bytes: input)) { scalars.append(scalar) }
            #expect(scalars == Array(text.unicodeScalars), "\(input)")
        }
    }
}
