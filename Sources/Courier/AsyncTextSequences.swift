import Foundation

// Text views of an asynchronous byte sequence, as Apple's Foundation has them on Darwin
// (`.unicodeScalars`, `.characters`, `.lines`) and Foundation on Linux lacks. Offered on
// `URLSession.AsyncBytes`; the sequences work over any `AsyncSequence` of `UInt8`.

/// The Unicode scalars of a byte sequence decoded as UTF-8; an ill-formed sequence decodes to
/// U+FFFD, one per maximal invalid subpart (as the standard library's decoder does).
public struct AsyncUnicodeScalarSequence<Base: AsyncSequence>: AsyncSequence where Base.Element == UInt8 {
    public typealias Element = Unicode.Scalar
    let base: Base

    public init(_ base: Base) {
        self.base = base
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator())
    }

    /// Decodes with up to four bytes of look-ahead, the longest UTF-8 sequence.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        var pending: [UInt8] = []
        var baseEnded = false

        public mutating func next() async throws -> Unicode.Scalar? {
            while pending.count < 4 && !baseEnded {
                if let byte = try await base.next() { pending.append(byte) } else { baseEnded = true }
            }
            var parser = Unicode.UTF8.ForwardParser()
            var bytes = pending.makeIterator()
            switch parser.parseScalar(from: &bytes) {
            case .valid(let encoded):
                pending.removeFirst(encoded.count)
                return Unicode.UTF8.decode(encoded)
            case .error(let length):
                pending.removeFirst(length)
                return Unicode.Scalar(0xFFFD)
            case .emptyInput:
                return nil
            }
        }
    }
}

/// The characters (extended grapheme clusters) of a byte sequence decoded as UTF-8. A
/// character is handed out once the next one has begun, or at the end.
public struct AsyncCharacterSequence<Base: AsyncSequence>: AsyncSequence where Base.Element == UInt8 {
    public typealias Element = Character
    let base: Base

    public init(_ base: Base) {
        self.base = base
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(scalars: AsyncUnicodeScalarSequence(base).makeAsyncIterator())
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        var scalars: AsyncUnicodeScalarSequence<Base>.AsyncIterator
        /// Scalars read but not yet handed out: one character, or the start of a second.
        var pending = ""

        public mutating func next() async throws -> Character? {
            while true {
                if pending.count >= 2, let first = pending.first {
                    pending.removeFirst()
                    return first
                }
                guard let scalar = try await scalars.next() else {
                    guard let last = pending.first else { return nil }
                    pending.removeFirst()
                    return last
                }
                pending.unicodeScalars.append(scalar)
            }
        }
    }
}

/// The lines of a byte sequence decoded as UTF-8, without their terminators: LF, CR, CR LF,
/// NEL (U+0085), LINE SEPARATOR and PARAGRAPH SEPARATOR end a line. As Apple's
/// `AsyncLineSequence` does, empty lines are not handed out.
public struct AsyncLineSequence<Base: AsyncSequence>: AsyncSequence where Base.Element == UInt8 {
    public typealias Element = String
    let base: Base

    public init(_ base: Base) {
        self.base = base
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(characters: AsyncCharacterSequence(base).makeAsyncIterator())
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        var characters: AsyncCharacterSequence<Base>.AsyncIterator

        public mutating func next() async throws -> String? {
            var line = ""
            while let character = try await characters.next() {
                if lineTerminators.contains(character) {
                    if line.isEmpty { continue }
                    return line
                }
                line.append(character)
            }
            return line.isEmpty ? nil : line
        }
    }
}

/// What ends a line for ``AsyncLineSequence``.
private let lineTerminators: Set<Character> = ["\n", "\r", "\r\n", "\u{85}", "\u{2028}", "\u{2029}"]

extension URLSession.AsyncBytes {
    /// The body as Unicode scalars, decoded as UTF-8.
    public var unicodeScalars: AsyncUnicodeScalarSequence<Self> { AsyncUnicodeScalarSequence(self) }
    /// The body as characters, decoded as UTF-8.
    public var characters: AsyncCharacterSequence<Self> { AsyncCharacterSequence(self) }
    /// The body as lines of text, decoded as UTF-8 (empty lines are skipped, as Apple's are).
    public var lines: AsyncLineSequence<Self> { AsyncLineSequence(self) }
}

extension AsyncUnicodeScalarSequence: Sendable where Base: Sendable {}
extension AsyncCharacterSequence: Sendable where Base: Sendable {}
extension AsyncLineSequence: Sendable where Base: Sendable {}
