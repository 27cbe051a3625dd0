// Content decoding (RFC 9110 section 8.4): undoing the codings a server applied to a response body,
// as the body arrives.
//
// Design note. The decoder is a chain of stages, one per coding, in decoding order (the last coding
// applied is undone first). Encoded bytes go into the first stage; every stage hands what it produces
// straight to the next one, and the last stage's output goes to the caller after the limits are
// checked. Each stage owns one output buffer of `ContentDecoder.outputChunkBytes` and reuses it, so
// memory is bounded by the number of stages, never by the size of the body or its compression ratio.
// The stages own their C state (zlib's `z_stream`, Brotli's decoder instance), create it on the first
// byte they see (an empty body allocates nothing) and free it in `deinit`.

/// One content coding (RFC 9110 section 8.4.1).
public enum ContentCoding: String, Sendable, Equatable {
    /// gzip (RFC 9110 section 8.4.1.3, format in RFC 1952); `x-gzip` is the same coding.
    case gzip
    /// deflate (RFC 9110 section 8.4.1.2): the zlib format of RFC 1950. Many servers send the raw
    /// deflate data of RFC 1951 under this name instead; the decoder accepts both.
    case deflate
    /// Brotli (RFC 7932), registered for HTTP as `br`.
    case brotli = "br"
    /// No coding (RFC 9110 section 8.4.1): the bytes are the content.
    case identity

    /// Parses a Content-Encoding field value.
    ///
    /// The value is a comma-separated list (RFC 9110 section 8.4) of coding names, compared without
    /// regard to case (section 8.4.1), with optional spaces and tabs around each; empty list elements
    /// are ignored as section 5.6.1 allows. `x-gzip` is taken for `gzip` (section 8.4.1.3).
    ///
    /// - Parameter value: The field value, such as `"gzip"` or `"gzip, br"`.
    /// - Returns: The codings in the order they were applied (the field's order), `identity` entries
    ///   dropped; an empty array when there is nothing to decode; `nil` when any coding is one Courier
    ///   cannot decode, in which case the body should be delivered as received, as Apple does.
    public static func codings(fromContentEncoding value: String) -> [ContentCoding]? {
        var codings: [ContentCoding] = []
        for element in value.utf8.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
            let name = element.trimmingOptionalWhitespace()
            if name.isEmpty { continue }
            if name.equalsASCIICaseInsensitive("gzip") || name.equalsASCIICaseInsensitive("x-gzip") {
                codings.append(.gzip)
            } else if name.equalsASCIICaseInsensitive("deflate") {
                codings.append(.deflate)
            } else if name.equalsASCIICaseInsensitive("br") {
                codings.append(.brotli)
            } else if name.equalsASCIICaseInsensitive("identity") {
                continue
            } else {
                return nil
            }
        }
        return codings
    }
}

/// Bounds on what decoding may produce: a defence against decompression bombs, bodies of a few
/// kilobytes that decode to gigabytes.
public struct ContentDecodingLimits: Sendable, Equatable {
    /// Most decoded bytes one body may produce.
    ///
    /// The default, 1 GiB, is far beyond what a page or an API response decodes to, yet bounds
    /// what a hostile server can make a client write to memory or disk from a small body. Raise it
    /// for downloads of large compressed files.
    public var maximumDecodedBytes: Int64
    /// Largest ratio of decoded bytes to encoded bytes, checked once `ratioCheckThreshold` decoded
    /// bytes were produced.
    ///
    /// The default is 1,000: deflate (gzip, zlib) cannot exceed about 1,032:1, since one
    /// back-reference of at most 258 bytes costs at least two bits, and legitimate text rarely
    /// passes 100:1. Brotli, whose bombs reach millions to one, is what this mostly stops.
    ///
    /// The ratio is of the bytes so far, so a body whose beginning is far more compressible than
    /// the rest (a long run of zeros, then dense data) can pass it early; raise the limit for such
    /// bodies.
    public var maximumRatio: Int
    /// Decoded bytes below which the ratio is not checked, because small bodies of repeated bytes
    /// (a blank image, padding) are legitimate. The default is 1 MiB.
    public var ratioCheckThreshold: Int64
    /// Most codings one body may stack (`Content-Encoding: gzip, gzip, …`). Each costs a
    /// decoder's state and buffers up front, so a head listing thousands would cost megabytes
    /// before a byte decodes. The default is 5, curl's bound too.
    public var maximumCodings: Int = 5

    /// Creates limits; every parameter defaults to the value documented on its property.
    ///
    /// - Parameters:
    ///   - maximumDecodedBytes: Most decoded bytes one body may produce (default 1 GiB).
    ///   - maximumRatio: Largest decoded/encoded ratio (default 1,000).
    ///   - ratioCheckThreshold: Decoded bytes below which the ratio is not checked (default 1 MiB).
    public init(maximumDecodedBytes: Int64 = 1 << 30, maximumRatio: Int = 1000, ratioCheckThreshold: Int64 = 1 << 20) {
        self.maximumDecodedBytes = maximumDecodedBytes
        self.maximumRatio = maximumRatio
        self.ratioCheckThreshold = ratioCheckThreshold
    }

    /// The defaults: 1 GiB, a ratio of 1,000, checked from 1 MiB on.
    public static let `default` = ContentDecodingLimits()
}

/// Why a response body could not be decoded. The peer's fault, or a limit of the caller's.
public enum ContentDecodingError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The coded stream is malformed; the text is zlib's or Brotli's message where it gave one.
    case corrupt(ContentCoding, String)
    /// The body ended before the coded stream did.
    case truncated(ContentCoding)
    /// Decoding would produce more than `maximumDecodedBytes`.
    case decodedSizeExceeded(limit: Int64)
    /// The decoded/encoded ratio passed `maximumRatio`.
    case ratioExceeded(limit: Int)

    /// What went wrong and what to do about it, as a phrase that fits after a colon.
    public var description: String {
        switch self {
        case .corrupt(let coding, let detail):
            return "the \(coding.rawValue)-coded body is corrupt (\(detail)); the server sent malformed data or a wrong Content-Encoding"
        case .truncated(let coding):
            return "the body ended in the middle of its \(coding.rawValue)-coded data; the transfer was cut short"
        case .decodedSizeExceeded(let limit):
            return "the body decodes to more than \(limit) bytes, the limit set by ContentDecodingLimits.maximumDecodedBytes; raise it if so large a body is expected"
        case .ratioExceeded(let limit):
            return "the body decodes to more than \(limit) times its coded size, as a decompression bomb does; raise ContentDecodingLimits.maximumRatio if so compressible a body is expected"
        }
    }
}

/// Decodes a response body coded with one or more content codings, as it arrives.
///
/// Feed the body with ``decode(_:output:)`` as it is received and call ``finish(output:)`` when it
/// ends. Decoded bytes go to the `output` closure in chunks of at most ``outputChunkBytes``, so
/// memory stays bounded whatever the size or the compression ratio of the body. The limits are
/// checked before bytes are handed out: a chunk that would cross one is not delivered.
///
/// After an error every further call throws the same error.
///
/// Not thread-safe: one caller at a time. It is `Sendable` so that it may be handed between
/// threads (the session keeps it under its task lock and feeds it from one event loop); it must
/// never be used from two threads at once.
public final class ContentDecoder: @unchecked Sendable {
    /// Largest chunk handed to `output` at once (256 KiB), and the size of each stage's buffer.
    /// The size of the buffers a delegate's `Data` is made in (`ReadCopies`): with 64 KiB
    /// chunks each filled a quarter of one, and a body decoded faster than the delegate took it
    /// kept more in flight than are kept for reuse, so that every decoded page was a fresh one.
    public static let outputChunkBytes = 256 * 1024

    /// Encoded bytes fed so far.
    public private(set) var encodedByteCount: Int64 = 0
    /// Decoded bytes handed to `output` so far.
    public private(set) var decodedByteCount: Int64 = 0

    /// The bounds checked as bytes are produced.
    private let limits: ContentDecodingLimits
    /// One stage per coding, in decoding order: the last coding applied first.
    private let stages: [any ContentDecodingStage]
    /// The first error; once set, every call throws it again.
    private var failure: ContentDecodingError?

    /// Creates a decoder for a body coded with `codings`.
    ///
    /// - Parameters:
    ///   - codings: The codings in the order they were applied, as ``ContentCoding/codings(fromContentEncoding:)``
    ///     returns them. They are undone in reverse order: for `"gzip, br"` Brotli is decoded first,
    ///     then gzip. `identity` entries are ignored.
    ///   - limits: Bounds on what decoding may produce.
    public init(codings: [ContentCoding], limits: ContentDecodingLimits = .default) {
        self.limits = limits
        self.stages = codings.reversed().compactMap { coding -> (any ContentDecodingStage)? in
            switch coding {
            case .gzip: return ZlibDecodingStage(format: .gzip)
            case .deflate: return ZlibDecodingStage(format: .zlibOrRaw)
            case .brotli: return BrotliDecodingStage()
            case .identity: return nil
            }
        }
    }

    /// Feeds encoded bytes.
    ///
    /// - Parameters:
    ///   - input: The next bytes of the body, as received.
    ///   - output: Called zero or more times with decoded bytes, lent for the call only.
    /// - Throws: ``ContentDecodingError`` when the data is corrupt or a limit is passed, and again
    ///   on every call after that.
    public func decode(_ input: UnsafeRawBufferPointer, output: (UnsafeRawBufferPointer) -> Void) throws(ContentDecodingError) {
        if let failure { throw failure }
        encodedByteCount += Int64(input.count)
        do {
            try push(input, into: 0, output: output)
        } catch {
            failure = error
            throw error
        }
    }

    /// Tells the decoder the body ended.
    ///
    /// An empty body (nothing was ever fed) is not an error and produces nothing: a `HEAD` response
    /// or a 204 may carry a Content-Encoding and no bytes.
    ///
    /// - Parameter output: Called zero or more times with the last decoded bytes.
    /// - Throws: ``ContentDecodingError/truncated(_:)`` when a coded stream was begun but not
    ///   completed, or the error an earlier call threw.
    public func finish(output: (UnsafeRawBufferPointer) -> Void) throws(ContentDecodingError) {
        if let failure { throw failure }
        do {
            // Every stage hands on all it can as soon as it can, so nothing is pending here: a
            // stage's end only has to say whether its stream was complete. Outer stages first, so
            // the error names the coding that was cut.
            for stage in stages {
                try stage.finish()
            }
        } catch {
            failure = error
            throw error
        }
    }

    /// Runs `bytes` through the stage at `index` and every stage after it.
    private func push(_ bytes: UnsafeRawBufferPointer, into index: Int, output: (UnsafeRawBufferPointer) -> Void) throws(ContentDecodingError) {
        guard index < stages.count else {
            try deliver(bytes, output: output)
            return
        }
        try stages[index].decode(bytes) { (produced) throws(ContentDecodingError) in
            try push(produced, into: index + 1, output: output)
        }
    }

    /// Checks the limits for decoded `bytes`, then hands them to `output` in chunks of at most
    /// `outputChunkBytes` (stages never produce more; this only splits the input of a decoder
    /// without stages).
    private func deliver(_ bytes: UnsafeRawBufferPointer, output: (UnsafeRawBufferPointer) -> Void) throws(ContentDecodingError) {
        var start = 0
        while start < bytes.count {
            let end = min(start + Self.outputChunkBytes, bytes.count)
            let total = decodedByteCount + Int64(end - start)
            try checkLimits(decodedTotal: total)
            decodedByteCount = total
            output(UnsafeRawBufferPointer(rebasing: bytes[start..<end]))
            start = end
        }
    }

    /// Throws when `decodedTotal` decoded bytes would pass a limit.
    private func checkLimits(decodedTotal: Int64) throws(ContentDecodingError) {
        if decodedTotal > limits.maximumDecodedBytes {
            throw .decodedSizeExceeded(limit: limits.maximumDecodedBytes)
        }
        if decodedTotal >= limits.ratioCheckThreshold {
            // decoded / encoded > ratio, without division: decoded > ratio × encoded. A product
            // that overflows is beyond any decoded size, so it passes.
            let (allowed, overflow) = Int64(limits.maximumRatio).multipliedReportingOverflow(by: encodedByteCount)
            if !overflow && decodedTotal > allowed {
                throw .ratioExceeded(limit: limits.maximumRatio)
            }
        }
    }
}

/// One stage of a ``ContentDecoder``: undoes one coding.
///
/// A stage is fed the bytes of its coded stream and hands what it decodes to `next` in chunks of
/// at most `ContentDecoder.outputChunkBytes`, lent for the call. It consumes all it is given
/// before returning, so no input is ever held by the caller for it.
protocol ContentDecodingStage: AnyObject {
    /// Decodes `input`, handing each decoded chunk to `next`; rethrows what `next` throws.
    func decode(
        _ input: UnsafeRawBufferPointer, next: (UnsafeRawBufferPointer) throws(ContentDecodingError) -> Void
    ) throws(ContentDecodingError)

    /// The input ended: throws `.truncated` when a stream was begun and not completed.
    func finish() throws(ContentDecodingError)
}

extension BidirectionalCollection where Element == UInt8, SubSequence == Self {
    /// The bytes without leading and trailing optional whitespace (OWS: spaces and horizontal tabs,
    /// RFC 9110 section 5.6.3).
    fileprivate func trimmingOptionalWhitespace() -> SubSequence {
        let isWhitespace = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        var text = self
        while let first = text.first, isWhitespace(first) { text = text.dropFirst() }
        while let last = text.last, isWhitespace(last) { text = text.dropLast() }
        return text
    }

    /// True when the bytes spell `name` (lowercase ASCII) with letters in either case. Only ASCII
    /// letters fold, so no other character can pass for a coding name.
    fileprivate func equalsASCIICaseInsensitive(_ name: StaticString) -> Bool {
        guard count == name.utf8CodeUnitCount else { return false }
        let expected = UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
        return zip(self, expected).allSatisfy { byte, lower in
            let folded = (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte | 0x20 : byte
            return folded == lower
        }
    }
}
