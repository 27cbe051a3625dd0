import CCourierBrotli
import CCourierZlib

/// One content coding (RFC 9110 section 8.4.1).
public enum ContentCoding: String, Sendable, Equatable {
    /// RFC 1952 gzip (also sent as `x-gzip`).
    case gzip
    /// RFC 1950 zlib, or the raw RFC 1951 deflate some servers send under this name.
    case deflate
    /// RFC 7932 Brotli.
    case brotli = "br"
    case identity

    /// The codings of a Content-Encoding field value, in the order they were applied (the
    /// field's order), identity dropped; nil when one of them is a coding Courier cannot
    /// decode (the body is then delivered as received, as Apple does).
    public static func codings(fromContentEncoding value: String) -> [ContentCoding]? {
        var codings: [ContentCoding] = []
        for item in value.split(separator: ",") {
            let name = item.trimmingASCIIWhitespace().lowercased()
            switch name {
            case "": continue
            case "gzip", "x-gzip": codings.append(.gzip)
            case "deflate": codings.append(.deflate)
            case "br": codings.append(.brotli)
            case "identity": continue
            default: return nil
            }
        }
        return codings
    }
}

/// Bounds on what decoding may produce: a defence against decompression bombs (a few KiB that
/// decode to gigabytes).
public struct ContentDecodingLimits: Sendable, Equatable {
    /// Most decoded bytes one body may produce. 1 GiB by default: far above what an API or a
    /// page sends compressed, and small enough that a bomb cannot fill memory or a disk.
    public var maximumDecodedBytes: Int64
    /// Largest decoded/encoded ratio, checked once `ratioCheckThreshold` decoded bytes were
    /// produced. 1,000 by default: gzip's own ceiling is about 1,032:1 and legitimate text
    /// rarely passes 100:1, while Brotli bombs reach millions to one.
    public var maximumRatio: Int
    /// Decoded bytes below which the ratio is not checked: small bodies of repeated bytes are
    /// legitimate. 1 MiB by default.
    public var ratioCheckThreshold: Int64

    public init(maximumDecodedBytes: Int64 = 1 << 30, maximumRatio: Int = 1000, ratioCheckThreshold: Int64 = 1 << 20) {
        self.maximumDecodedBytes = maximumDecodedBytes
        self.maximumRatio = maximumRatio
        self.ratioCheckThreshold = ratioCheckThreshold
    }

    /// The defaults above.
    public static let `default` = ContentDecodingLimits()
}

/// Why a body could not be decoded.
public enum ContentDecodingError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The coded stream is malformed.
    case corrupt(ContentCoding, String)
    /// The body ended before the coded stream did.
    case truncated(ContentCoding)
    /// Decoding would produce more than `maximumDecodedBytes`.
    case decodedSizeExceeded(limit: Int64)
    /// The decoded/encoded ratio passed `maximumRatio`.
    case ratioExceeded(limit: Int)

    public var description: String {
        switch self {
        case .corrupt(let coding, let detail): return "the \(coding.rawValue) data is corrupt (\(detail))"
        case .truncated(let coding): return "the \(coding.rawValue) data ends before its end marker"
        case .decodedSizeExceeded(let limit): return "the body decodes to more than \(limit) bytes"
        case .ratioExceeded(let limit): return "the body decodes to more than \(limit) times its compressed size"
        }
    }
}

/// Decodes a response body coded with one or more content codings, as it arrives.
///
/// Stacked codings are undone in reverse order of application, streaming: the output of one
/// stage feeds the next, and no stage keeps more than its 64 KiB output buffer, so memory does
/// not depend on the body's size or ratio.
///
/// Not thread-safe: callers use it from one thread at a time (the session layer feeds a body
/// from its connection's event loop), which is why it may be handed between threads.
public final class ContentDecoder: @unchecked Sendable {
    /// Largest piece handed to `output` at once.
    public static let outputChunkBytes = 64 * 1024

    /// Encoded bytes consumed and decoded bytes produced so far.
    public private(set) var encodedByteCount: Int64 = 0
    public private(set) var decodedByteCount: Int64 = 0

    private let limits: ContentDecodingLimits
    /// Stages in decoding order (the last-applied coding first).
    private let stages: [DecoderStage]
    private var failure: ContentDecodingError?

    /// `codings` in the order they were applied (as `codings(fromContentEncoding:)` returns).
    public init(codings: [ContentCoding], limits: ContentDecodingLimits = .default) {
        self.limits = limits
        self.stages = codings.reversed().compactMap { coding -> DecoderStage? in
            switch coding {
            case .gzip: return ZlibStage(coding: .gzip)
            case .deflate: return ZlibStage(coding: .deflate)
            case .brotli: return BrotliStage()
            case .identity: return nil
            }
        }
    }

    /// Feeds encoded bytes; `output` gets decoded bytes (lent for the call) zero or more times.
    public func decode(_ input: UnsafeRawBufferPointer, output: (UnsafeRawBufferPointer) -> Void) throws(ContentDecodingError) {
        if let failure { throw failure }
        encodedByteCount += Int64(input.count)
        do {
            try feed(input, stage: 0, ending: false, output: output)
        } catch {
            failure = error
            throw error
        }
    }

    /// The body ended: flushes what remains; `.truncated` when a stream is incomplete.
    public func finish(output: (UnsafeRawBufferPointer) -> Void) throws(ContentDecodingError) {
        if let failure { throw failure }
        do {
            try feed(UnsafeRawBufferPointer(start: nil, count: 0), stage: 0, ending: true, output: output)
        } catch {
            failure = error
            throw error
        }
    }

    /// Runs `input` through stage `index` and the ones after it. When `ending`, each stage is
    /// told the input is over after its last bytes.
    private func feed(_ input: UnsafeRawBufferPointer, stage index: Int, ending: Bool, output: (UnsafeRawBufferPointer) -> Void) throws(ContentDecodingError) {
        guard index < stages.count else {
            try emit(input, output: output)
            return
        }
        try stages[index].process(input) { (chunk) throws(ContentDecodingError) in
            try feed(chunk, stage: index + 1, ending: false, output: output)
        }
        if ending {
            try stages[index].end()
            try feed(UnsafeRawBufferPointer(start: nil, count: 0), stage: index + 1, ending: true, output: output)
        }
    }

    /// Hands decoded bytes out after checking the limits.
    private func emit(_ bytes: UnsafeRawBufferPointer, output: (UnsafeRawBufferPointer) -> Void) throws(ContentDecodingError) {
        guard !bytes.isEmpty else { return }
        let total = decodedByteCount + Int64(bytes.count)
        if total > limits.maximumDecodedBytes { throw .decodedSizeExceeded(limit: limits.maximumDecodedBytes) }
        if total > limits.ratioCheckThreshold, total / max(encodedByteCount, 1) > Int64(limits.maximumRatio) {
            throw .ratioExceeded(limit: limits.maximumRatio)
        }
        decodedByteCount = total
        output(bytes)
    }
}

/// One decoding stage: consumes coded bytes, produces decoded ones in bounded chunks.
protocol DecoderStage: AnyObject {
    /// Decodes `input`, handing each produced chunk on.
    func process(_ input: UnsafeRawBufferPointer, _ next: (UnsafeRawBufferPointer) throws(ContentDecodingError) -> Void) throws(ContentDecodingError)
    /// The input is over: fails when the coded stream did not end.
    func end() throws(ContentDecodingError)
}

/// gzip (RFC 1952) and deflate (RFC 1950, or raw RFC 1951) through zlib.
final class ZlibStage: DecoderStage {
    private let coding: ContentCoding
    private var stream = z_stream()
    private var initialized = false
    /// True between a stream's first byte and its end marker.
    private var midStream = false
    /// True after a stream's end marker: more bytes start another gzip member.
    private var streamEnded = false
    /// Deflate only: the first byte, held until the second tells zlib-wrapped from raw.
    private var pendingFirstByte: UInt8?
    private let output = UnsafeMutableRawBufferPointer.allocate(byteCount: ContentDecoder.outputChunkBytes, alignment: 16)
    private let oneByte = UnsafeMutableRawBufferPointer.allocate(byteCount: 1, alignment: 1)

    /// gzip: 16 + 15 asks zlib for a gzip wrapper and the largest window (32 KiB).
    private static let gzipWindowBits: Int32 = 16 + 15
    /// deflate: 15 for a zlib wrapper (RFC 1950); negated, raw deflate data (RFC 1951).
    private static let zlibWindowBits: Int32 = 15

    init(coding: ContentCoding) {
        self.coding = coding
    }

    deinit {
        if initialized { inflateEnd(&stream) }
        output.deallocate()
        oneByte.deallocate()
    }

    /// Starts (or restarts, for the next gzip member) zlib with `windowBits`.
    private func start(windowBits: Int32) throws(ContentDecodingError) {
        if initialized {
            guard inflateReset2(&stream, windowBits) == Z_OK else { throw .corrupt(coding, "zlib could not restart") }
        } else {
            guard courier_inflate_init2(&stream, windowBits) == Z_OK else { throw .corrupt(coding, "zlib could not start") }
            initialized = true
        }
    }

    /// RFC 1950 section 2.2: a zlib header's method is 8 (deflate) and CMF·256 + FLG is a
    /// multiple of 31. Anything else is taken for raw deflate data.
    private static func windowBits(first: UInt8, second: UInt8) -> Int32 {
        let isZlib = first & 0x0F == 8 && (UInt16(first) << 8 | UInt16(second)) % 31 == 0
        return isZlib ? zlibWindowBits : -zlibWindowBits
    }

    func process(_ input: UnsafeRawBufferPointer, _ next: (UnsafeRawBufferPointer) throws(ContentDecodingError) -> Void) throws(ContentDecodingError) {
        guard !input.isEmpty else { return }
        if coding == .deflate && !initialized {
            // The wrapper is decided on the first two bytes, which may arrive one at a time.
            if let first = pendingFirstByte {
                pendingFirstByte = nil
                try start(windowBits: Self.windowBits(first: first, second: input[0]))
                oneByte[0] = first
                try inflate(UnsafeRawBufferPointer(oneByte), next)
            } else if input.count == 1 {
                pendingFirstByte = input[0]
                midStream = true
                return
            } else {
                try start(windowBits: Self.windowBits(first: input[0], second: input[1]))
            }
        }
        try inflate(input, next)
    }

    /// Inflates all of `input`. Bytes after a gzip member's end start the next member
    /// (concatenated members, RFC 1952 section 2.2); zlib rejects them when they are not one.
    private func inflate(_ input: UnsafeRawBufferPointer, _ next: (UnsafeRawBufferPointer) throws(ContentDecodingError) -> Void) throws(ContentDecodingError) {
        guard let base = input.baseAddress, !input.isEmpty else { return }
        var offset = 0
        while offset < input.count {
            if !initialized {
                try start(windowBits: Self.gzipWindowBits)
            } else if streamEnded {
                guard coding == .gzip else { throw .corrupt(coding, "data after the end of the stream") }
                try start(windowBits: Self.gzipWindowBits)
                streamEnded = false
            }
            midStream = true
            stream.next_in = UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: Bytef.self) + offset)
            stream.avail_in = uInt(input.count - offset)
            decoding: while true {
                stream.next_out = output.baseAddress!.assumingMemoryBound(to: Bytef.self)
                stream.avail_out = uInt(output.count)
                let status = CCourierZlib.inflate(&stream, Z_NO_FLUSH)
                let produced = output.count - Int(stream.avail_out)
                if produced > 0 { try next(UnsafeRawBufferPointer(rebasing: output[..<produced])) }
                switch status {
                case Z_OK:
                    // Go on while input remains or the output filled (more may be pending).
                    if stream.avail_in == 0 && stream.avail_out > 0 { break decoding }
                case Z_STREAM_END:
                    streamEnded = true
                    midStream = false
                    break decoding
                case Z_BUF_ERROR where stream.avail_in == 0:
                    // No progress possible without more input.
                    break decoding
                default:
                    let message = stream.msg.map { String(cString: $0) } ?? "zlib error \(status)"
                    throw .corrupt(coding, message)
                }
            }
            offset = input.count - Int(stream.avail_in)
        }
    }

    func end() throws(ContentDecodingError) {
        if midStream { throw .truncated(coding) }
    }
}

/// Brotli (RFC 7932) through Debian's libbrotlidec.
final class BrotliStage: DecoderStage {
    private let decoder: OpaquePointer?
    private var midStream = false
    private var finished = false
    private let output = UnsafeMutableRawBufferPointer.allocate(byteCount: ContentDecoder.outputChunkBytes, alignment: 16)

    init() {
        decoder = BrotliDecoderCreateInstance(nil, nil, nil)
    }

    deinit {
        if let decoder { BrotliDecoderDestroyInstance(decoder) }
        output.deallocate()
    }

    func process(_ input: UnsafeRawBufferPointer, _ next: (UnsafeRawBufferPointer) throws(ContentDecodingError) -> Void) throws(ContentDecodingError) {
        guard let base = input.baseAddress, !input.isEmpty else { return }
        guard let decoder else { throw .corrupt(.brotli, "the decoder could not be created") }
        guard !finished else { throw .corrupt(.brotli, "data after the end of the stream") }
        midStream = true
        var availableIn = input.count
        var nextIn: UnsafePointer<UInt8>? = base.assumingMemoryBound(to: UInt8.self)
        while true {
            var availableOut = output.count
            var nextOut: UnsafeMutablePointer<UInt8>? = output.baseAddress!.assumingMemoryBound(to: UInt8.self)
            let result = BrotliDecoderDecompressStream(decoder, &availableIn, &nextIn, &availableOut, &nextOut, nil)
            let produced = output.count - availableOut
            if produced > 0 { try next(UnsafeRawBufferPointer(rebasing: output[..<produced])) }
            switch result {
            case BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT:
                continue
            case BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT:
                return
            case BROTLI_DECODER_RESULT_SUCCESS:
                midStream = false
                finished = true
                if availableIn > 0 { throw .corrupt(.brotli, "data after the end of the stream") }
                return
            default:
                throw .corrupt(.brotli, String(cString: BrotliDecoderErrorString(BrotliDecoderGetErrorCode(decoder))))
            }
        }
    }

    func end() throws(ContentDecodingError) {
        if midStream { throw .truncated(.brotli) }
    }
}

extension Substring {
    /// The text without leading and trailing spaces and tabs.
    fileprivate func trimmingASCIIWhitespace() -> Substring {
        var text = self
        while let first = text.first, first == " " || first == "\t" { text = text.dropFirst() }
        while let last = text.last, last == " " || last == "\t" { text = text.dropLast() }
        return text
    }
}
