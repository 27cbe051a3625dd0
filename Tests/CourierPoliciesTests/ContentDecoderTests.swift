import CourierPolicies
import Testing
import _CourierTestSupport

/// A named coding case: the codings a body carries and how to make its coded form.
struct CodingCase: Sendable, CustomTestStringConvertible {
    var name: String
    var codings: [ContentCoding]
    var encode: @Sendable ([UInt8]) -> [UInt8]

    var testDescription: String { name }

    static let gzip = CodingCase(name: "gzip", codings: [.gzip]) { deflated($0, .gzip) }
    static let zlibDeflate = CodingCase(name: "deflate (zlib)", codings: [.deflate]) { deflated($0, .zlib) }
    static let rawDeflate = CodingCase(name: "deflate (raw)", codings: [.deflate]) { deflated($0, .raw) }
    static let brotli = CodingCase(name: "br", codings: [.brotli]) { brotliCompressed($0) }
    /// "gzip, br": gzip applied first, then Brotli.
    static let gzipThenBrotli = CodingCase(name: "gzip, br", codings: [.gzip, .brotli]) { brotliCompressed(deflated($0, .gzip)) }
    /// "deflate, gzip": zlib applied first, then gzip.
    static let deflateThenGzip = CodingCase(name: "deflate, gzip", codings: [.deflate, .gzip]) { deflated(deflated($0, .zlib), .gzip) }

    static let single: [CodingCase] = [.gzip, .zlibDeflate, .rawDeflate, .brotli]
    static let all: [CodingCase] = single + [.gzipThenBrotli, .deflateThenGzip]
}

/// Limits that let 5 MiB of zeros through: their ratio is about 1,000:1 in gzip (its ceiling) and
/// hundreds of thousands to one in Brotli.
private let generousLimits = ContentDecodingLimits(maximumRatio: .max)

@Suite("Content-Encoding field parsing")
struct ContentEncodingParsingTests {
    @Test("codings(fromContentEncoding:)", arguments: [
        ("gzip", [ContentCoding.gzip]),
        ("GZIP", [.gzip]),
        ("x-gzip", [.gzip]),
        ("X-Gzip", [.gzip]),
        ("deflate", [.deflate]),
        ("br", [.brotli]),
        (" gzip , br ", [.gzip, .brotli]),
        ("\tgzip,\tbr\t", [.gzip, .brotli]),
        ("gzip,,br", [.gzip, .brotli]),
        ("deflate, gzip", [.deflate, .gzip]),
        ("identity", []),
        ("gzip, identity", [.gzip]),
        ("", []),
        (" , ", []),
        ("compress", nil),
        ("x-compress", nil),
        ("zstd", nil),
        ("gzip, zstd", nil),
        ("gzip;q=1", nil),
        ("g zip", nil),
    ] as [(String, [ContentCoding]?)])
    func parse(value: String, expected: [ContentCoding]?) {
        #expect(ContentCoding.codings(fromContentEncoding: value) == expected)
    }

    @Test("only ASCII letters fold: the Kelvin sign is not a k, and non-ASCII names are refused")
    func nonASCII() {
        #expect(ContentCoding.codings(fromContentEncoding: "gzıp") == nil)
        #expect(ContentCoding.codings(fromContentEncoding: "\u{212A}") == nil)
        #expect(ContentCoding.codings(fromContentEncoding: "gzip\u{00A0}") == nil)
    }
}

@Suite("Content decoder")
struct ContentDecoderTests {
    // MARK: Round trips

    @Test("text round-trips", arguments: CodingCase.all, Feeding.allCases)
    func text(coding: CodingCase, feeding: Feeding) {
        let outcome = decode(coding.encode(sampleText), coding.codings, feeding: feeding)
        #expect(outcome.error == nil)
        #expect(outcome.output == sampleText)
        #expect(outcome.decodedByteCount == Int64(sampleText.count))
    }

    @Test("an empty content round-trips to nothing", arguments: CodingCase.all, Feeding.allCases)
    func emptyContent(coding: CodingCase, feeding: Feeding) {
        let coded = coding.encode([])
        #expect(!coded.isEmpty)
        let outcome = decode(coded, coding.codings, feeding: feeding)
        #expect(outcome.error == nil)
        #expect(outcome.output.isEmpty)
        #expect(outcome.encodedByteCount == Int64(coded.count))
    }

    @Test("1 MiB of random bytes round-trips in chunks of at most 256 KiB", arguments: CodingCase.all, Feeding.allCases)
    func randomMebibyte(coding: CodingCase, feeding: Feeding) {
        let data = randomBytes(1 << 20, seed: 42)
        let outcome = decode(coding.encode(data), coding.codings, feeding: feeding)
        #expect(outcome.error == nil)
        #expect(sameBytes(outcome.output, data))
        #expect(outcome.largestChunk <= ContentDecoder.outputChunkBytes)
    }

    @Test("5 MiB of zeros round-trips when the limits allow, in chunks of at most 256 KiB", arguments: CodingCase.all, Feeding.allCases)
    func zeros(coding: CodingCase, feeding: Feeding) {
        let count = 5 << 20
        let outcome = decode(coding.encode([UInt8](repeating: 0, count: count)), coding.codings, feeding: feeding,
                             limits: generousLimits, keepsOutput: false)
        #expect(outcome.error == nil)
        #expect(outcome.outputCount == count)
        #expect(outcome.decodedByteCount == Int64(count))
        #expect(outcome.largestChunk <= ContentDecoder.outputChunkBytes)
    }

    @Test("a decoder without codings passes bytes through, split into chunks of at most 256 KiB")
    func noCodings() {
        let data = randomBytes(600_000, seed: 3)
        for codings in [[], [ContentCoding.identity]] {
            let outcome = decode(data, codings, feeding: .whole)
            #expect(outcome.error == nil)
            #expect(sameBytes(outcome.output, data))
            #expect(outcome.largestChunk == ContentDecoder.outputChunkBytes)
        }
    }

    // MARK: Empty bodies

    @Test("an empty body is not an error and produces nothing", arguments: CodingCase.all)
    func emptyBody(coding: CodingCase) throws {
        let decoder = ContentDecoder(codings: coding.codings)
        var chunks = 0
        try decoder.decode(UnsafeRawBufferPointer(start: nil, count: 0)) { _ in chunks += 1 }
        try decoder.finish { _ in chunks += 1 }
        #expect(chunks == 0)
        #expect(decoder.decodedByteCount == 0)
    }

    @Test("one byte and then the end is a truncated stream", arguments: CodingCase.all)
    func oneByte(coding: CodingCase) {
        let coded = coding.encode(sampleText)
        let outcome = decode(Array(coded.prefix(1)), coding.codings, feeding: .whole)
        #expect(outcome.error == .truncated(coding.codings.last!))
    }

    // MARK: deflate wrappers

    @Test("deflate is read with and without its zlib wrapper", arguments: Feeding.allCases)
    func deflateWrappers(feeding: Feeding) {
        for level: Int32 in [0, 1, 6, 9] {
            let zlib = deflated(sampleText, .zlib, level: level)
            let raw = deflated(sampleText, .raw, level: level)
            #expect(zlib.count == raw.count + 6, "2 header bytes and a 4-byte Adler-32 apart")
            #expect(decode(zlib, [.deflate], feeding: feeding).output == sampleText)
            #expect(decode(raw, [.deflate], feeding: feeding).output == sampleText)
        }
    }

    @Test("a zlib stream that asks for a preset dictionary is corrupt")
    func presetDictionary() {
        // CMF 0x78, FLG 0xBB: FDICT set, and 0x78BB is a multiple of 31.
        let outcome = decode([0x78, 0xBB, 0, 0, 0, 1, 0x03, 0x00], [.deflate], feeding: .whole)
        guard case .corrupt(.deflate, let message)? = outcome.error else {
            Issue.record("expected corrupt deflate, got \(String(describing: outcome.error))")
            return
        }
        #expect(message.contains("dictionary"))
    }

    // MARK: gzip members

    @Test("concatenated gzip members decode one after another", arguments: Feeding.allCases)
    func concatenatedMembers(feeding: Feeding) {
        let first = Array("first member\n".utf8)
        let second = randomBytes(100_000, seed: 9)
        let third: [UInt8] = []
        let body = deflated(first, .gzip) + deflated(second, .gzip) + deflated(third, .gzip) + deflated(sampleText, .gzip)
        let outcome = decode(body, [.gzip], feeding: feeding)
        #expect(outcome.error == nil)
        #expect(outcome.output == first + second + sampleText)
    }

    @Test("a second gzip member that is cut short is truncated", arguments: Feeding.allCases)
    func truncatedSecondMember(feeding: Feeding) {
        let second = deflated(sampleText, .gzip)
        let outcome = decode(deflated(sampleText, .gzip) + second.prefix(5), [.gzip], feeding: feeding)
        #expect(outcome.error == .truncated(.gzip))
        #expect(outcome.output == sampleText)
    }

    // MARK: Corrupt, truncated, trailing bytes

    /// gzip and zlib carry a checksum (CRC-32, Adler-32), so any flip is caught; raw deflate and
    /// Brotli do not, and a flip may decode to other bytes. The flip chosen here is one Brotli's
    /// decoder rejects (the input is deterministic).
    @Test("a flipped byte in the middle is corrupt", arguments: [CodingCase.gzip, .zlibDeflate, .brotli], Feeding.allCases)
    func flippedByte(coding: CodingCase, feeding: Feeding) {
        var coded = coding.encode(sampleText)
        coded[coded.count / 2] ^= 0xFF
        let outcome = decode(coded, coding.codings, feeding: feeding)
        guard case .corrupt(let named, let message)? = outcome.error else {
            Issue.record("expected corrupt, got \(String(describing: outcome.error))")
            return
        }
        #expect(named == coding.codings[0])
        #expect(!message.isEmpty)
    }

    @Test("a bad header is corrupt", arguments: Feeding.allCases)
    func badHeader(feeding: Feeding) {
        var gzip = deflated(sampleText, .gzip)
        gzip[1] = 0x8C  // the second magic byte is 0x8B
        #expect(decode(gzip, [.gzip], feeding: feeding).error == .corrupt(.gzip, "incorrect header check"))

        var method = deflated(sampleText, .gzip)
        method[2] = 7  // CM: 8 is deflate, the only method
        #expect(decode(method, [.gzip], feeding: feeding).error == .corrupt(.gzip, "unknown compression method"))

        // Raw deflate with block type 3, which RFC 1951 reserves.
        #expect(decode([0x07, 0x00, 0x00], [.deflate], feeding: feeding).error == .corrupt(.deflate, "invalid block type"))

        // A Brotli stream of 0xFF bytes: an invalid window size, then reserved bits.
        let brotli = decode([UInt8](repeating: 0xFF, count: 16), [.brotli], feeding: feeding)
        guard case .corrupt(.brotli, _)? = brotli.error else {
            Issue.record("expected corrupt br, got \(String(describing: brotli.error))")
            return
        }
    }

    @Test("a stream cut short is truncated at finish", arguments: CodingCase.all, Feeding.allCases)
    func truncated(coding: CodingCase, feeding: Feeding) {
        let coded = coding.encode(randomBytes(10_000, seed: 5) + sampleText)
        for cut in [1, 2, 5, 10, 11, coded.count / 3, coded.count / 2, coded.count - 4, coded.count - 1] {
            let outcome = decode(Array(coded.prefix(cut)), coding.codings, feeding: feeding)
            #expect(outcome.error == .truncated(coding.codings.last!), "cut at \(cut) of \(coded.count)")
        }
    }

    @Test("bytes after the end of a stream are corrupt", arguments: CodingCase.all, Feeding.allCases)
    func trailingGarbage(coding: CodingCase, feeding: Feeding) {
        for garbage in [Array("garbage".utf8), [0], [0x0A]] {
            let outcome = decode(coding.encode(sampleText) + garbage, coding.codings, feeding: feeding)
            guard case .corrupt(let named, _)? = outcome.error else {
                Issue.record("expected corrupt after \(garbage), got \(String(describing: outcome.error))")
                continue
            }
            #expect(named == coding.codings.last!)
            #expect(outcome.output == sampleText)
        }
    }

    @Test("an inner stream cut short is truncated, named by its coding")
    func innerTruncated() {
        // The gzip stream is cut, then wrapped whole in Brotli: Brotli ends fine, gzip does not.
        let innerCut = Array(deflated(sampleText, .gzip).dropLast(3))
        let outcome = decode(brotliCompressed(innerCut), [.gzip, .brotli], feeding: .whole)
        #expect(outcome.error == .truncated(.gzip))
    }

    // MARK: Limits

    @Test("50 MiB of zeros in 50 KB of gzip exceed the default ratio", arguments: Feeding.allCases)
    func ratioBomb(feeding: Feeding) {
        let bomb = deflated([UInt8](repeating: 0, count: 50 << 20), .gzip)
        #expect(bomb.count < 60_000)
        let outcome = decode(bomb, [.gzip], feeding: feeding, keepsOutput: false)
        #expect(outcome.error == .ratioExceeded(limit: 1000))
        // Above the threshold, the ratio of what was handed out to what was fed stayed in bounds.
        #expect(outcome.decodedByteCount < 1 << 20 || outcome.decodedByteCount <= Int64(1000) * outcome.encodedByteCount)
        #expect(outcome.largestChunk <= ContentDecoder.outputChunkBytes)
    }

    @Test("decoding stops at maximumDecodedBytes, never counting past it", arguments: Feeding.allCases)
    func sizeBomb(feeding: Feeding) {
        let limit: Int64 = 10 << 20
        let limits = ContentDecodingLimits(maximumDecodedBytes: limit, maximumRatio: .max)
        let bomb = deflated([UInt8](repeating: 0, count: 50 << 20), .gzip)
        let outcome = decode(bomb, [.gzip], feeding: feeding, limits: limits, keepsOutput: false)
        #expect(outcome.error == .decodedSizeExceeded(limit: limit))
        #expect(outcome.decodedByteCount <= limit)
        #expect(Int64(outcome.outputCount) == outcome.decodedByteCount)
        #expect(outcome.decodedByteCount > limit - Int64(ContentDecoder.outputChunkBytes))
    }

    @Test("a Brotli bomb is stopped by its ratio")
    func brotliBomb() {
        let bomb = brotliCompressed([UInt8](repeating: 0, count: 64 << 20), quality: 11)
        let outcome = decode(bomb, [.brotli], feeding: .whole, keepsOutput: false)
        #expect(outcome.error == .ratioExceeded(limit: 1000))
        #expect(outcome.decodedByteCount < 2 << 20, "stopped soon after the threshold")
    }

    @Test("the ratio is not checked below ratioCheckThreshold")
    func ratioThreshold() {
        let limits = ContentDecodingLimits(maximumRatio: 10, ratioCheckThreshold: 1 << 20)
        let small = decode(deflated([UInt8](repeating: 0, count: 512 << 10), .gzip), [.gzip], feeding: .whole, limits: limits)
        #expect(small.error == nil)
        #expect(small.outputCount == 512 << 10)
        let large = decode(deflated([UInt8](repeating: 0, count: 2 << 20), .gzip), [.gzip], feeding: .whole, limits: limits)
        #expect(large.error == .ratioExceeded(limit: 10))
        #expect(large.decodedByteCount <= 1 << 20)
    }

    @Test("a body exactly at maximumDecodedBytes passes")
    func exactlyAtLimit() {
        let data = randomBytes(100_000, seed: 11)
        let exact = decode(deflated(data, .gzip), [.gzip], feeding: .randomPieces, limits: ContentDecodingLimits(maximumDecodedBytes: 100_000))
        #expect(exact.error == nil)
        #expect(sameBytes(exact.output, data))
        let under = decode(deflated(data, .gzip), [.gzip], feeding: .randomPieces, limits: ContentDecodingLimits(maximumDecodedBytes: 99_999))
        #expect(under.error == .decodedSizeExceeded(limit: 99_999))
    }

    // MARK: Errors stick

    @Test("after an error every call throws it again")
    func stickyError() {
        var coded = deflated(sampleText, .gzip)
        coded[0] = 0
        let decoder = ContentDecoder(codings: [.gzip])
        var first: ContentDecodingError?
        coded.withUnsafeBytes { bytes in
            do throws(ContentDecodingError) {
                try decoder.decode(bytes) { _ in }
            } catch {
                first = error
            }
            #expect(first == .corrupt(.gzip, "incorrect header check"))
            let valid = deflated(sampleText, .gzip)
            _ = valid.withUnsafeBytes { valid in
                #expect(throws: first!) { try decoder.decode(valid) { _ in Issue.record("output after an error") } }
            }
            #expect(throws: first!) { try decoder.finish { _ in Issue.record("output after an error") } }
            #expect(throws: first!) { try decoder.finish { _ in } }
        }
    }

    @Test("a limit error sticks too")
    func stickyLimit() {
        let limits = ContentDecodingLimits(maximumDecodedBytes: 1000)
        let decoder = ContentDecoder(codings: [.gzip], limits: limits)
        let coded = deflated(sampleText, .gzip)
        coded.withUnsafeBytes { bytes in
            #expect(throws: ContentDecodingError.decodedSizeExceeded(limit: 1000)) { try decoder.decode(bytes) { _ in } }
            #expect(throws: ContentDecodingError.decodedSizeExceeded(limit: 1000)) { try decoder.finish { _ in } }
        }
        #expect(decoder.decodedByteCount == 0, "the one chunk would cross the limit, so none was handed out")
    }

    // MARK: Descriptions

    @Test("descriptions say what happened and which limit to raise")
    func descriptions() {
        #expect(ContentDecodingError.corrupt(.gzip, "incorrect header check").description.contains("gzip"))
        #expect(ContentDecodingError.corrupt(.gzip, "incorrect header check").description.contains("incorrect header check"))
        #expect(ContentDecodingError.truncated(.brotli).description.contains("br"))
        #expect(ContentDecodingError.decodedSizeExceeded(limit: 10).description.contains("maximumDecodedBytes"))
        #expect(ContentDecodingError.ratioExceeded(limit: 10).description.contains("maximumRatio"))
    }
}
