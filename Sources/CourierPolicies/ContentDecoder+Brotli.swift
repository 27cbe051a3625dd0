import CCourierBrotli

/// Undoes the `br` coding (RFC 7932) with libbrotlidec's streaming decoder.
///
/// A Brotli stream is one stream (no members, unlike gzip): bytes after its last meta-block are
/// corrupt. The window is the standard one of RFC 7932 (at most 16 MiB); the large-window
/// extension is not HTTP's `br` and stays off.
final class BrotliDecodingStage: ContentDecodingStage {
    /// Where the stage is in its coded stream.
    enum Phase {
        /// No byte yet. Next: `inStream`.
        case awaitingStream
        /// The decoder is inside the stream. Next: `ended` once the last meta-block is decoded.
        case inStream
        /// The stream is complete; more bytes are an error. Final.
        case ended
    }

    private var phase = Phase.awaitingStream
    /// The decoder instance; nil until the first byte.
    private var decoder: OpaquePointer?
    /// Where the decoder writes decoded bytes; reused for every chunk.
    private let buffer = UnsafeMutableRawBufferPointer.allocate(
        byteCount: ContentDecoder.outputChunkBytes, alignment: MemoryLayout<UInt64>.alignment
    )

    /// A stage that has seen nothing yet.
    init() {}

    deinit {
        if let decoder { BrotliDecoderDestroyInstance(decoder) }
        buffer.deallocate()
    }

    func decode(
        _ input: UnsafeRawBufferPointer, next: (UnsafeRawBufferPointer) throws(ContentDecodingError) -> Void
    ) throws(ContentDecodingError) {
        guard let base = input.baseAddress, !input.isEmpty else { return }
        switch phase {
        case .awaitingStream:
            // Null allocation functions ask Brotli for malloc and free.
            guard let created = BrotliDecoderCreateInstance(nil, nil, nil) else {
                throw .corrupt(.brotli, "the Brotli decoder could not be created (out of memory)")
            }
            decoder = created
            phase = .inStream
        case .inStream:
            break
        case .ended:
            throw .corrupt(.brotli, "bytes after the end of the Brotli stream")
        }
        guard let decoder else { preconditionFailure("the decoder was created above") }

        var availableIn = input.count
        var nextIn: UnsafePointer<UInt8>? = base.assumingMemoryBound(to: UInt8.self)
        while true {
            var availableOut = buffer.count
            var nextOut: UnsafeMutablePointer<UInt8>? = buffer.baseAddress!.assumingMemoryBound(to: UInt8.self)
            // The last argument would receive a running total of output; the decoder keeps its own.
            let result = BrotliDecoderDecompressStream(decoder, &availableIn, &nextIn, &availableOut, &nextOut, nil)
            let produced = buffer.count - availableOut
            if produced > 0 {
                try next(UnsafeRawBufferPointer(rebasing: buffer[..<produced]))
            }
            switch result {
            case BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT:
                // The buffer filled: hand it on (done above) and go round with it empty again.
                continue
            case BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT:
                // Everything given was taken; the stream goes on in the next bytes.
                return
            case BROTLI_DECODER_RESULT_SUCCESS:
                phase = .ended
                if availableIn > 0 { throw .corrupt(.brotli, "bytes after the end of the Brotli stream") }
                return
            default:
                let code = BrotliDecoderGetErrorCode(decoder)
                let message = BrotliDecoderErrorString(code).map { String(cString: $0) } ?? "Brotli error \(code.rawValue)"
                throw .corrupt(.brotli, message)
            }
        }
    }

    func finish() throws(ContentDecodingError) {
        if case .inStream = phase { throw .truncated(.brotli) }
    }
}
