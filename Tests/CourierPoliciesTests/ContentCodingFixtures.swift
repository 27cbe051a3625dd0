import CCourierBrotli
import CCourierZlib
import CourierPolicies
import Testing
import _CourierTestSupport

// Helpers for the content decoder tests: coded inputs made with zlib's and Brotli's encoders, and
// a runner that feeds a decoder in the three ways every case is fed.

/// The wrappers zlib's deflate can write.
enum DeflateWrapper {
    /// RFC 1952 gzip.
    case gzip
    /// RFC 1950 zlib (what HTTP's "deflate" means).
    case zlib
    /// Raw RFC 1951 deflate data (what many servers send as "deflate").
    case raw

    /// deflateInit2's windowBits for a 32 KiB window: 15, plus 16 for gzip, negated for raw.
    var windowBits: Int32 {
        switch self {
        case .gzip: return 16 + 15
        case .zlib: return 15
        case .raw: return -15
        }
    }
}

/// `data` compressed with zlib at `level` (6 is zlib's default, 9 its best).
func deflated(_ data: [UInt8], _ wrapper: DeflateWrapper, level: Int32 = 6) -> [UInt8] {
    var stream = z_stream()
    precondition(courier_deflate_init2(&stream, level, wrapper.windowBits) == Z_OK)
    defer { deflateEnd(&stream) }
    var output = [UInt8](repeating: 0, count: Int(deflateBound(&stream, uLong(data.count))) + 64)
    let written = data.withUnsafeBufferPointer { input in
        output.withUnsafeMutableBufferPointer { out in
            stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
            stream.avail_in = uInt(input.count)
            stream.next_out = out.baseAddress
            stream.avail_out = uInt(out.count)
            let status = deflate(&stream, Z_FINISH)
            precondition(status == Z_STREAM_END, "deflate did not finish: \(status)")
            return out.count - Int(stream.avail_out)
        }
    }
    return Array(output[..<written])
}

/// `data` compressed with Brotli at `quality` (0...11; 11 is the encoder's default).
func brotliCompressed(_ data: [UInt8], quality: Int32 = 5) -> [UInt8] {
    var size = BrotliEncoderMaxCompressedSize(data.count)
    var output = [UInt8](repeating: 0, count: max(size, 64))
    size = output.count
    let ok = data.withUnsafeBufferPointer { input in
        output.withUnsafeMutableBufferPointer { out in
            // 22 is BROTLI_DEFAULT_WINDOW, a 4 MiB window.
            BrotliEncoderCompress(quality, 22, BROTLI_MODE_GENERIC, input.count, input.baseAddress, &size, out.baseAddress)
        }
    }
    precondition(ok == BROTLI_TRUE, "Brotli could not compress")
    return Array(output[..<size])
}

/// `count` random bytes, the same for the same seed.
func randomBytes(_ count: Int, seed: UInt64 = 1) -> [UInt8] {
    var generator = SplitMix64(seed: seed)
    var bytes = [UInt8](repeating: 0, count: count)
    var index = 0
    while index < count {
        var word = generator.next()
        for _ in 0..<8 where index < count {
            bytes[index] = UInt8(truncatingIfNeeded: word)
            word >>= 8
            index += 1
        }
    }
    return bytes
}

/// Some text that compresses like a real page.
let sampleText: [UInt8] = Array(
    (0..<200).map { "Line \($0): the quick brown fox jumps over the lazy dog, \($0 * 7919 % 1000) times.\n" }.joined().utf8
)

/// How a case's input is fed to the decoder.
enum Feeding: CaseIterable, Sendable, CustomTestStringConvertible {
    /// All bytes in one call.
    case whole
    /// One byte per call.
    case byteByByte
    /// Pieces of random sizes (1 byte to 4 KiB, and now and then an empty one), seeded.
    case randomPieces

    var testDescription: String {
        switch self {
        case .whole: return "whole"
        case .byteByByte: return "one byte at a time"
        case .randomPieces: return "random pieces"
        }
    }

    /// The end offsets of the pieces of an input of `count` bytes.
    func cuts(_ count: Int) -> [Int] {
        switch self {
        case .whole:
            return [count]
        case .byteByByte:
            return count == 0 ? [0] : Array(1...count)
        case .randomPieces:
            var generator = SplitMix64(seed: UInt64(count) &+ 7)
            var cuts: [Int] = []
            var offset = 0
            repeat {
                let size = generator.next() % 16 == 0 ? 0 : Int(generator.next() % 4096) + 1
                offset = min(offset + size, count)
                cuts.append(offset)
            } while offset < count
            return cuts
        }
    }
}

/// What one run of a decoder produced.
struct DecodeOutcome {
    /// The decoded bytes (empty when the run did not keep them).
    var output: [UInt8] = []
    /// How many decoded bytes arrived.
    var outputCount = 0
    /// The error `decode` or `finish` threw, if any.
    var error: ContentDecodingError?
    /// The largest chunk handed to `output`.
    var largestChunk = 0
    /// The decoder's counts after the run.
    var decodedByteCount: Int64 = 0
    var encodedByteCount: Int64 = 0
}

/// Feeds `input` to a fresh decoder for `codings` as `feeding` says, then finishes it, stopping at
/// the first error. Records every chunk's size and checks after each call that the decoder never
/// counted more than `limits.maximumDecodedBytes`.
func decode(
    _ input: [UInt8], _ codings: [ContentCoding], feeding: Feeding, limits: ContentDecodingLimits = .default,
    keepsOutput: Bool = true
) -> DecodeOutcome {
    let decoder = ContentDecoder(codings: codings, limits: limits)
    var outcome = DecodeOutcome()
    let collect = { (chunk: UnsafeRawBufferPointer) in
        outcome.outputCount += chunk.count
        outcome.largestChunk = max(outcome.largestChunk, chunk.count)
        if keepsOutput { outcome.output.append(contentsOf: chunk) }
    }
    // The largest decodedByteCount seen between calls (one #expect per call would be slow).
    var largestCount: Int64 = 0
    input.withUnsafeBytes { bytes in
        var start = 0
        do throws(ContentDecodingError) {
            for end in feeding.cuts(bytes.count) {
                try decoder.decode(UnsafeRawBufferPointer(rebasing: bytes[start..<end]), output: collect)
                largestCount = max(largestCount, decoder.decodedByteCount)
                start = end
            }
            try decoder.finish(output: collect)
        } catch {
            outcome.error = error
        }
    }
    #expect(max(largestCount, decoder.decodedByteCount) <= limits.maximumDecodedBytes)
    outcome.decodedByteCount = decoder.decodedByteCount
    outcome.encodedByteCount = decoder.encodedByteCount
    return outcome
}
