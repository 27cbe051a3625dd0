import Foundation

// Text views of an asynchronous byte sequence, as Apple's Foundation has them on Darwin
// (`.unicodeScalars`, `.characters`, `.lines`) and Foundation on Linux lacks. Offered on
// `URLSession.AsyncBytes`; the sequences work over any `AsyncSequence` of `UInt8`.

/// The Unicode scalars of a byte sequence decoded as UTF-8; an ill-formed sequence decodes to
/// U+FFFD, one per maximal invalid subpart (as the standard library's decoder does).
public struct AsyncUnicodeScalarSequence<Base: AsyncSequence>: AsyncSequence where Base.Element == UInt8 {
    public typealias Element = Unicode.Scalar
    @usableFromInline let base: Base

    @inlinable
    public init(_ base: Base) {
        self.base = base
    }

    @inlinable
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator())
    }

    /// Decodes with up to four bytes of look-ahead, the longest UTF-8 sequence; an ASCII byte
    /// with none pending is a scalar at once. Inlinable, and run on the caller's executor
    /// (`next(isolation:)`), as the iterators below: a byte costs no hop (``URLSession/AsyncBytes``).
    public struct AsyncIterator: AsyncIteratorProtocol {
        @usableFromInline var base: Base.AsyncIterator
        @usableFromInline var pending: [UInt8] = []
        @usableFromInline var baseEnded = false

        @inlinable
        init(base: Base.AsyncIterator) {
            self.base = base
        }

        @inlinable
        public mutating func next() async throws -> Unicode.Scalar? {
            try await next(isolation: nil)
        }

        @inlinable
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> Unicode.Scalar? {
            if pending.isEmpty && !baseEnded {
                guard let byte = try await base.next(isolation: actor) else {
                    baseEnded = true
                    return nil
                }
                if byte < 0x80 { return Unicode.Scalar(byte) }
                pending.append(byte)
            }
            while pending.count < 4 && !baseEnded {
                if let byte = try await base.next(isolation: actor) { pending.append(byte) } else { baseEnded = true }
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
    @usableFromInline let base: Base

    @inlinable
    public init(_ base: Base) {
        self.base = base
    }

    @inlinable
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(scalars: AsyncUnicodeScalarSequence(base).makeAsyncIterator())
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        @usableFromInline var scalars: AsyncUnicodeScalarSequence<Base>.AsyncIterator
        /// Scalars read but not yet handed out: one character, or the start of a second.
        @usableFromInline var pending = ""

        @inlinable
        init(scalars: AsyncUnicodeScalarSequence<Base>.AsyncIterator) {
            self.scalars = scalars
        }

        @inlinable
        public mutating func next() async throws -> Character? {
            try await next(isolation: nil)
        }

        @inlinable
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> Character? {
            while true {
                if pending.count >= 2, let first = pending.first {
                    pending.removeFirst()
                    return first
                }
                guard let scalar = try await scalars.next(isolation: actor) else {
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
    @usableFromInline let base: Base

    @inlinable
    public init(_ base: Base) {
        self.base = base
    }

    @inlinable
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator())
    }

    /// Splits the bytes themselves, then decodes each line (ill-formed UTF-8 as U+FFFD, as
    /// ``AsyncUnicodeScalarSequence`` does). That finds the lines that characters would: each
    /// terminator is a scalar of its own (CR, LF; NEL is C2 85, the two separators E2 80 A8
    /// and E2 80 A9, and C2 and E2 only ever begin a sequence) and a character of its own
    /// (a control: nothing combines with it), and since empty lines are skipped, CR LF needs
    /// no case of its own. A unit test compares the two over random bytes.
    public struct AsyncIterator: AsyncIteratorProtocol {
        @usableFromInline var base: Base.AsyncIterator
        @usableFromInline var line: [UInt8] = []

        @inlinable
        init(base: Base.AsyncIterator) {
            self.base = base
        }

        @inlinable
        public mutating func next() async throws -> String? {
            try await next(isolation: nil)
        }

        @inlinable
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> String? {
            while let byte = try await base.next(isolation: actor) {
                switch byte {
                case 0x0A, 0x0D:
                    break
                case 0x85 where line.last == 0xC2:
                    line.removeLast()
                case 0xA8, 0xA9:
                    guard line.count >= 2, line[line.count - 1] == 0x80, line[line.count - 2] == 0xE2 else {
                        line.append(byte)
                        continue
                    }
                    line.removeLast(2)
                default:
                    line.append(byte)
                    continue
                }
                if !line.isEmpty { return takeLine() }
            }
            return line.isEmpty ? nil : takeLine()
        }

        @inlinable
        mutating func takeLine() -> String {
            defer { line.removeAll(keepingCapacity: true) }
            return String(decoding: line, as: UTF8.self)
        }
    }
}

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
