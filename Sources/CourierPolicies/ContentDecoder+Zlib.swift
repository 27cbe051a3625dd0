import CCourierZlib

/// Undoes the gzip or the deflate coding with zlib.
///
/// - gzip (RFC 1952): zlib reads the gzip wrapper itself. A body may hold several gzip members
///   one after another (RFC 1952 section 2.2); each is decoded in turn, as curl does. Bytes after a
///   member that do not start another one are corrupt.
/// - deflate: RFC 9110 section 8.4.1.2 means the zlib format (RFC 1950), but many servers send raw
///   deflate data (RFC 1951). The first two bytes tell which (see `Format.windowBits(first:second:)`).
///   Bytes after the end of the stream are corrupt.
final class ZlibDecodingStage: ContentDecodingStage {
    /// Which wrapper the coded stream has.
    enum Format {
        /// RFC 1952 gzip members.
        case gzip
        /// RFC 1950 zlib, or raw RFC 1951 deflate data, told apart by the first two bytes.
        case zlibOrRaw

        /// zlib's `windowBits` for a 32 KiB window (2^15, the largest deflate allows, RFC 1951
        /// section 2) read inside a zlib wrapper.
        static let zlibWindowBits: Int32 = 15
        /// The same window, inside a gzip wrapper: zlib asks for 16 to be added.
        static let gzipWindowBits: Int32 = 16 + zlibWindowBits
        /// The same window with no wrapper at all: zlib asks for the negated value.
        static let rawWindowBits: Int32 = -zlibWindowBits

        /// The `windowBits` for a deflate-coded stream starting with `first`, `second`.
        ///
        /// RFC 1950 section 2.2: a zlib header is CMF then FLG, where the low nibble of CMF (CM)
        /// is 8 for deflate and CMF × 256 + FLG is a multiple of 31 (the FCHECK bits make it so).
        /// Anything else is taken for raw deflate data. A raw stream could pass the check only by
        /// starting with a stored block whose padding bits are set (CM = 8 puts BTYPE = 00 and a
        /// set bit 3 in the first byte), which encoders do not write; zlib would then report it
        /// corrupt (header or Adler-32 check) rather than decode it wrongly.
        static func windowBits(first: UInt8, second: UInt8) -> Int32 {
            let compressionMethodIsDeflate = first & 0x0F == 8
            let checkBitsMatch = (UInt16(first) << 8 | UInt16(second)) % 31 == 0
            return compressionMethodIsDeflate && checkBitsMatch ? zlibWindowBits : rawWindowBits
        }
    }

    /// Where the stage is in its coded stream.
    enum Phase {
        /// No byte of a stream yet (or of a next gzip member: see `ended`). Next: `sniffing`
        /// (deflate, one byte arrived) or `inStream`.
        case awaitingStream
        /// deflate only: the first byte arrived alone and is held until the second tells the
        /// wrapper. Next: `inStream`.
        case sniffing(UInt8)
        /// zlib is inside a stream. Next: `ended` at its end marker.
        case inStream
        /// The end marker passed. Next: `inStream` when gzip bytes follow (another member);
        /// for deflate, more bytes are an error.
        case ended
    }

    private let format: Format
    private let coding: ContentCoding
    private var phase = Phase.awaitingStream
    /// zlib's stream state, at a fixed address: zlib keeps a pointer back to it and rejects a
    /// stream that moved. Nil until the first byte.
    private var stream: UnsafeMutablePointer<z_stream>?
    /// Where zlib writes decoded bytes; reused for every chunk.
    private let buffer = UnsafeMutableRawBufferPointer.allocate(
        byteCount: ContentDecoder.outputChunkBytes, alignment: MemoryLayout<UInt64>.alignment
    )

    /// A stage for `format`.
    init(format: Format) {
        self.format = format
        self.coding = format == .gzip ? .gzip : .deflate
    }

    deinit {
        if let stream {
            inflateEnd(stream)
            stream.deallocate()
        }
        buffer.deallocate()
    }

    func decode(
        _ input: UnsafeRawBufferPointer, next: (UnsafeRawBufferPointer) throws(ContentDecodingError) -> Void
    ) throws(ContentDecodingError) {
        guard !input.isEmpty else { return }
        var input = input
        if format == .zlibOrRaw {
            switch phase {
            case .awaitingStream where input.count == 1:
                phase = .sniffing(input[0])
                return
            case .awaitingStream:
                try start(windowBits: Format.windowBits(first: input[0], second: input[1]))
            case .sniffing(let first):
                try start(windowBits: Format.windowBits(first: first, second: input[0]))
                try withUnsafeBytes(of: first) { (held) throws(ContentDecodingError) in
                    try inflate(held, next: next)
                }
            case .inStream:
                break
            case .ended:
                throw .corrupt(coding, "bytes after the end of the deflate stream")
            }
        }
        // zlib counts input in a 32-bit uInt; a larger buffer goes in slices.
        while !input.isEmpty {
            let slice = min(input.count, Int(uInt.max))
            try inflate(UnsafeRawBufferPointer(rebasing: input[..<slice]), next: next)
            input = UnsafeRawBufferPointer(rebasing: input[slice...])
        }
    }

    func finish() throws(ContentDecodingError) {
        switch phase {
        case .awaitingStream, .ended: return
        case .sniffing, .inStream: throw .truncated(coding)
        }
    }

    /// Sets zlib up for a stream with `windowBits`: creates its state the first time, resets it
    /// after that (for the next gzip member).
    private func start(windowBits: Int32) throws(ContentDecodingError) {
        if let stream {
            guard inflateReset2(stream, windowBits) == Z_OK else { throw .corrupt(coding, "zlib could not be reset") }
        } else {
            let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
            // Null zalloc, zfree and opaque ask zlib for malloc and free.
            stream.initialize(to: z_stream())
            let status = courier_inflate_init2(stream, windowBits)
            guard status == Z_OK else {
                stream.deallocate()
                throw .corrupt(coding, status == Z_MEM_ERROR ? "zlib is out of memory" : "zlib could not start (\(status))")
            }
            self.stream = stream
        }
        phase = .inStream
    }

    /// Inflates all of `input` (at most `uInt.max` bytes), handing decoded chunks to `next`.
    private func inflate(
        _ input: UnsafeRawBufferPointer, next: (UnsafeRawBufferPointer) throws(ContentDecodingError) -> Void
    ) throws(ContentDecodingError) {
        guard let base = input.baseAddress else { return }
        var consumed = 0
        while consumed < input.count {
            switch phase {
            case .awaitingStream:
                // gzip's first byte; deflate was started by `decode`.
                try start(windowBits: Format.gzipWindowBits)
            case .ended:
                // RFC 1952 section 2.2: a gzip body is a series of members. Start the next one;
                // bytes that are not a gzip header make zlib fail with "incorrect header check".
                guard format == .gzip else { throw .corrupt(coding, "bytes after the end of the deflate stream") }
                // Checked here because zlib waits for two bytes before it looks: a lone trailing
                // byte would otherwise pass for the start of a member cut short. 0x1F is ID1
                // (RFC 1952 section 2.3.1).
                guard input[consumed] == 0x1F else { throw .corrupt(coding, "bytes after the end of the gzip data") }
                try start(windowBits: Format.gzipWindowBits)
            case .sniffing, .inStream:
                break
            }
            guard let stream else { preconditionFailure("zlib was started above") }
            // zlib declares next_in mutable for old compilers only; it never writes through it.
            stream.pointee.next_in = UnsafeMutablePointer(mutating: (base + consumed).assumingMemoryBound(to: Bytef.self))
            stream.pointee.avail_in = uInt(input.count - consumed)
            try inflateAvailableInput(stream, next: next)
            consumed = input.count - Int(stream.pointee.avail_in)
        }
    }

    /// Runs zlib until it has taken all the input it was given, or reached the end of a stream,
    /// handing each filled part of the buffer to `next`.
    private func inflateAvailableInput(
        _ stream: UnsafeMutablePointer<z_stream>, next: (UnsafeRawBufferPointer) throws(ContentDecodingError) -> Void
    ) throws(ContentDecodingError) {
        while true {
            stream.pointee.next_out = buffer.baseAddress!.assumingMemoryBound(to: Bytef.self)
            stream.pointee.avail_out = uInt(buffer.count)
            let status = CCourierZlib.inflate(stream, Z_NO_FLUSH)
            let produced = buffer.count - Int(stream.pointee.avail_out)
            if produced > 0 {
                try next(UnsafeRawBufferPointer(rebasing: buffer[..<produced]))
            }
            switch status {
            case Z_STREAM_END:
                phase = .ended
                return
            case Z_OK:
                // zlib stops when the input ran out or the buffer filled. A full buffer may
                // leave decoded bytes inside zlib, so go round again; otherwise all was taken.
                if stream.pointee.avail_out > 0 && stream.pointee.avail_in == 0 { return }
            case Z_BUF_ERROR where stream.pointee.avail_in == 0:
                // No progress possible: zlib needs more input (this is not an error in zlib's sense).
                return
            case Z_NEED_DICT:
                // RFC 1950 section 2.2, FDICT: HTTP has no way to agree on a preset dictionary.
                throw .corrupt(coding, "the zlib stream asks for a preset dictionary")
            case Z_MEM_ERROR:
                throw .corrupt(coding, "zlib is out of memory")
            default:
                let message = stream.pointee.msg.map { String(cString: $0) } ?? "zlib error \(status)"
                throw .corrupt(coding, message)
            }
        }
    }
}
