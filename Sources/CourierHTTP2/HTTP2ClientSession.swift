import CCourierNghttp2
import CourierCore

/// The client side of one HTTP/2 connection as a sans-IO core over libnghttp2: bytes from the
/// network go in through ``receive(_:)``, bytes for the network come out of
/// ``drainOutput(into:)``, and what happens is reported synchronously to the delegate. nghttp2's
/// callbacks only record and report; this type never touches a socket or a clock.
///
/// Flow control is manual: received DATA counts against the windows until the delegate calls
/// ``consume(streamID:count:)``, so a stream whose reader is paused stops its sender without
/// stalling the others. Server push is disabled.
public final class HTTP2ClientSession {
    /// Per-stream bookkeeping for the response.
    /// A stream's state. A class, changed in place where the table holds it: a struct would be
    /// taken out and put back for each change (in the dictionary that held streams before the
    /// table, through modify accessors whose frames took a malloc each, six a request).
    final class StreamState {
        /// Where the fields of the header block being received lie in the session's
        /// ``blockBytes``, laid out for ``HTTPFields/init(validatedStorage:locations:)``.
        @exclusivity(unchecked) var fieldLocations: [HTTPFields.Location] = []
        /// `HTTPFields.nameBit(count:first:last:)` of each name collected in the block.
        @exclusivity(unchecked) var nameBits: UInt64 = 0
        /// The block's `:status`, when it had one.
        @exclusivity(unchecked) var status: Int?
        /// The block's Content-Length: -1 while it has none, nil when it has one too long to
        /// read here (``HTTPResponseHead/validatedContentLength``).
        @exclusivity(unchecked) var contentLength: Int? = -1
        @exclusivity(unchecked) var headerBytes = 0
        @exclusivity(unchecked) var headDelivered = false
        @exclusivity(unchecked) var endStreamReceived = false
        @exclusivity(unchecked) var headerListTooLarge = false
        @exclusivity(unchecked) var peerResetCode: UInt32?
        @exclusivity(unchecked) var cancelledLocally = false
    }

    public let configuration: HTTP2Configuration
    @exclusivity(unchecked) public weak var delegate: HTTP2SessionDelegate?
    @exclusivity(unchecked) var session: OpaquePointer!
    @exclusivity(unchecked) var streams = SlotTable<Int32, StreamState>(step: 2)
    /// The stream whose header block is being received. A block's fields arrive one after
    /// another with no other stream's between them (its CONTINUATION frames follow its HEADERS,
    /// RFC 9113 section 4.3), so the block's callbacks find the stream here instead of in the
    /// table: one lookup a block rather than one a field. Set by ``beginHeaders(_:)``, cleared
    /// when the block or the stream ends. Not retained: the table holds the state until the
    /// stream closes, and the close clears this first.
    @exclusivity(unchecked) var blockStream: (id: Int32, state: Unmanaged<StreamState>)?
    /// The bytes of the header block being received: its regular fields, names already in
    /// canonical case, written from offset 0 up to ``blockEnd``. One buffer serves every block
    /// of the connection, since blocks never interleave; each field is copied in with two
    /// `memcpy`s, and the block's bytes are copied out once, to an array of their own size,
    /// when it ends. Its size only grows, and it is dropped when a block leaves it larger than
    /// ``keptBlockLimit``.
    @exclusivity(unchecked) var blockBytes: [UInt8] = []
    @exclusivity(unchecked) var blockEnd = 0
    /// The buffer a request's header block is written into, and its nv array
    /// (``submitValidatedRequest(_:body:)``); kept between requests.
    @exclusivity(unchecked) private var blockScratch: [UInt8] = []
    @exclusivity(unchecked) private var fieldScratch: [nghttp2_nv] = []
    /// The fields of the last shared set sent (the default fields), as they went into the
    /// block: copied whole into the next request that carries the same set. Not private: the
    /// tests put a marked block here to see it copied.
    @exclusivity(unchecked) var sharedFieldBlock: SharedFieldBlock?
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS; 100 (RFC 9113's suggested minimum)
    /// until it says otherwise.
    @exclusivity(unchecked) public private(set) var remoteMaxConcurrentStreams = 100
    /// Set after a GOAWAY from the server.
    @exclusivity(unchecked) public private(set) var goAwayLastStreamID: Int32?
    /// nghttp2's words for the last connection-level error it found in the peer's bytes.
    @exclusivity(unchecked) var lastErrorMessage: String?
    /// True after ``goAway()``: the session ends on our request, not an error.
    @exclusivity(unchecked) var terminatedLocally = false
    /// The error code of a GOAWAY nghttp2 sent because the peer broke the protocol.
    @exclusivity(unchecked) var sentGoAwayError: UInt32?
    /// The blocks nghttp2 allocates for this session come from here (courier_h2_pool_create).
    private var memoryPool: UnsafeMutablePointer<courier_h2_pool>?

    public init(configuration: HTTP2Configuration = HTTP2Configuration(), delegate: HTTP2SessionDelegate? = nil) throws(HTTP2Error) {
        self.configuration = configuration
        self.delegate = delegate
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { throw .setupFailed("out of memory") }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, onBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, onHeader)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, onFrameReceived)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, onDataChunk)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, onStreamClose)
        nghttp2_session_callbacks_set_error_callback2(callbacks, onError)
        nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, onFrameSent)
        var option: OpaquePointer?
        guard nghttp2_option_new(&option) == 0, let option else { throw .setupFailed("out of memory") }
        defer { nghttp2_option_del(option) }
        nghttp2_option_set_no_auto_window_update(option, 1)
        nghttp2_option_set_peer_max_concurrent_streams(option, UInt32(remoteMaxConcurrentStreams))
        var memory = nghttp2_mem()
        guard let pool = courier_h2_pool_create(&memory) else { throw .setupFailed("out of memory") }
        memoryPool = pool
        var created: OpaquePointer?
        let status = nghttp2_session_client_new3(&created, callbacks, Unmanaged.passUnretained(self).toOpaque(), option, &memory)
        guard status == 0, let created else { throw .setupFailed(String(cString: nghttp2_strerror(status))) }
        session = created
        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: UInt32(configuration.initialStreamWindowSize)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue), value: UInt32(configuration.maxHeaderListSize)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: UInt32(configuration.maxConcurrentPushStreams)),
        ]
        _ = nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
        _ = nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, configuration.connectionWindowSize)
    }

    deinit {
        nghttp2_session_del(session)
        courier_h2_pool_destroy(memoryPool)
    }

    /// Calls `body` with the session an nghttp2 callback's `userData` points at, borrowed: the
    /// session owns the nghttp2 session that is calling, so it outlives the call, and taking
    /// it as a strong reference would cost a retain and a release for each callback (about a
    /// dozen a response: one for each field, frame and stream end).
    @inline(__always)
    static func with<Result>(_ userData: UnsafeMutableRawPointer?, _ body: (HTTP2ClientSession) -> Result) -> Result {
        Unmanaged<HTTP2ClientSession>.fromOpaque(userData!)._withUnsafeGuaranteedRef(body)
    }

    // MARK: Bytes in and out

    /// Feeds bytes from the network; events are reported to the delegate while this runs.
    public func receive(_ bytes: UnsafeRawBufferPointer) throws(HTTP2Error) {
        guard bytes.count > 0 else { return }
        let result = nghttp2_session_mem_recv(session, bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), bytes.count)
        if result < 0 { throw .protocolViolation(String(cString: nghttp2_strerror(Int32(result)))) }
    }

    /// Moves every frame waiting to be sent into `buffer`.
    public func drainOutput(into buffer: inout ByteBuffer) {
        while true {
            var data: UnsafePointer<UInt8>?
            let count = nghttp2_session_mem_send(session, &data)
            guard count > 0, let data else { return }
            buffer.write(UnsafeRawBufferPointer(start: data, count: count))
        }
    }

    /// The connection-level error that ended the session, once its GOAWAY has been drained:
    /// nghttp2 answers a peer's protocol violation by queueing GOAWAY and reading no more.
    /// Check after each ``drainOutput(into:)``.
    public var connectionFailure: HTTP2Error? {
        guard let code = sentGoAwayError else { return nil }
        return .protocolViolation(lastErrorMessage ?? "the connection failed with \(HTTP2ErrorCode.name(code))")
    }

    /// True when frames are waiting to be sent.
    public var wantsWrite: Bool { nghttp2_session_want_write(session) != 0 }

    /// False once both sides have nothing more to say (after GOAWAY and the last stream).
    public var wantsRead: Bool { nghttp2_session_want_read(session) != 0 }

    /// Streams open now.
    public var openStreamCount: Int { streams.count }

    // MARK: Requests

    /// Opens a stream for a request. HTTP/1-only fields (Connection, Keep-Alive,
    /// Proxy-Connection, Transfer-Encoding, Upgrade, Host) are dropped; names are lower-cased;
    /// `content-length` is written only for a body of known length.
    public func submitRequest(_ head: HTTPRequestHead, body: HTTP2RequestBody) throws(HTTP2SubmitError) -> Int32 {
        do {
            try head.validate()
        } catch {
            throw .invalidRequest(error)
        }
        return try submitValidatedRequest(head, body: body)
    }

    /// ``submitRequest(_:body:)`` for a head that already passed `HTTPRequestHead.validate()`
    /// (the transport validates every request once, before it reaches a pool).
    public func submitValidatedRequest(_ head: HTTPRequestHead, body: HTTP2RequestBody) throws(HTTP2SubmitError) -> Int32 {
        // One buffer holds every name and value (names lower-cased), sized up front; the nv
        // array points into it. nghttp2 copies what it is given, so both are the session's and
        // serve every request (three allocations a request fewer). Nothing here makes a String
        // per field.
        var length: String?
        if case .known(let count) = body { length = String(count) }
        var capacity = 32 + Self.pseudoNameBytes
        capacity += head.method.rawValue.utf8.count + head.scheme.utf8.count + head.authority.utf8.count + head.target.utf8.count
        // At least the bytes of every name and value (removed fields may leave theirs behind).
        capacity += head.fields.storageByteCount
        capacity += length.map { 14 + $0.utf8.count } ?? 0
        if blockScratch.count < capacity {
            blockScratch = [UInt8](repeating: 0, count: Swift.max(capacity, 2 * blockScratch.count))
        }
        var fields: [nghttp2_nv] = []
        swap(&fields, &fieldScratch)
        fields.removeAll(keepingCapacity: true)
        var provider = courier_nghttp2_data_provider(readBodyCallback)
        let streamID: Int32 = blockScratch.withUnsafeMutableBufferPointer { whole in
            // Filled in one pass, by copies of whole names and values into the buffer sized
            // above (dropped fields only leave it shorter); appending field by field to an array
            // cost about twice as much, its per-byte lower-casing most.
            var writer = RequestBlockWriter(buffer: UnsafeMutableBufferPointer(rebasing: whole[..<capacity]))
            swap(&writer.fields, &fields)
            writer.add(":method", head.method.rawValue)
            writer.add(":scheme", head.scheme)
            writer.add(":authority", head.authority)
            writer.add(":path", head.target)
            if let shared = sharedFieldBlock, shared.fields.isIdentical(to: head.fields) {
                writer.add(shared)
            } else {
                let (start, firstField) = (writer.end, writer.fields.count)
                head.fields.forEachField { name, value in
                    guard let kept = Self.keptName(name, value: value) else { return }
                    writer.add(name, value, lowerCasingName: kept == .lowerCased)
                }
                if head.fields.isSharedValidated {
                    sharedFieldBlock = SharedFieldBlock(
                        fields: head.fields, bytes: Array(whole[start..<writer.end]),
                        lengths: writer.fields[firstField...].map { SharedFieldBlock.Lengths(name: $0.namelen, value: $0.valuelen) }
                    )
                }
            }
            if let length { writer.add("content-length", length) }
            swap(&writer.fields, &fields)
            if body == .none {
                return nghttp2_submit_request(session, nil, fields, fields.count, nil, nil)
            }
            return nghttp2_submit_request(session, nil, fields, fields.count, &provider, nil)
        }
        fieldScratch = fields
        // A request with very large fields does not leave its buffer behind for the session's life.
        if blockScratch.count > Self.keptBlockLimit { blockScratch = [] }
        guard streamID > 0 else { throw .streamUnavailable(String(cString: nghttp2_strerror(streamID))) }
        streams[streamID] = StreamState()
        return streamID
    }

    /// The bytes of the four pseudo-field names a request carries.
    private static let pseudoNameBytes = ":method:scheme:authority:path".utf8.count
    /// The largest header-block buffer (a request's or a response's) a session keeps between blocks.
    static let keptBlockLimit = 16 * 1024

    /// Writes a request's header block as nghttp2 takes it: every name and value in one buffer,
    /// and an nv entry for each pointing into it. A value type with mutating methods rather
    /// than a local function over captured variables: captured variables get a runtime
    /// exclusivity check at every use.
    private struct RequestBlockWriter {
        let buffer: UnsafeMutableBufferPointer<UInt8>
        var fields: [nghttp2_nv] = []
        var end = 0

        init(buffer: UnsafeMutableBufferPointer<UInt8>) {
            self.buffer = buffer
        }

        /// Copies `name` (lower-cased when asked) and `value` after what is written.
        mutating func add(_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, lowerCasingName: Bool = false) {
            precondition(end + name.count + value.count <= buffer.count, "the header block outgrew the size counted for it")
            let nameStart = end
            copy(name)
            if lowerCasingName {
                for index in nameStart..<end { buffer[index] = HTTPFieldValidation.lowercased(buffer[index]) }
            }
            let valueStart = end
            copy(value)
            fields.append(nghttp2_nv(
                name: buffer.baseAddress! + nameStart, value: buffer.baseAddress! + valueStart,
                namelen: name.count, valuelen: value.count, flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)
            ))
        }

        /// Copies the fields of a shared block after what is written, as one run of bytes.
        mutating func add(_ block: SharedFieldBlock) {
            precondition(end + block.bytes.count <= buffer.count, "the header block outgrew the size counted for it")
            block.bytes.withUnsafeBytes { copy($0) }
            var position = end - block.bytes.count
            for lengths in block.lengths {
                let name = buffer.baseAddress! + position
                fields.append(nghttp2_nv(
                    name: name, value: name + lengths.name,
                    namelen: lengths.name, valuelen: lengths.value, flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)
                ))
                position += lengths.name + lengths.value
            }
        }

        /// Adds a field whose name is written in the source (already lower-case).
        mutating func add(_ name: StaticString, _ value: String) {
            HTTP2ClientSession.withBytes(of: value) { add(UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount), $0) }
        }

        private mutating func copy(_ bytes: UnsafeRawBufferPointer) {
            guard let source = bytes.baseAddress, bytes.count > 0 else { return }
            UnsafeMutableRawPointer(buffer.baseAddress! + end).copyMemory(from: source, byteCount: bytes.count)
            end += bytes.count
        }
    }

    /// One shared set of fields (``HTTPFields/isSharedValidated``) as it went into a header
    /// block: the names (lower-cased) and values of the fields kept, one after the other, and
    /// their lengths.
    struct SharedFieldBlock {
        struct Lengths {
            var name: Int
            var value: Int
        }

        let fields: HTTPFields
        let bytes: [UInt8]
        let lengths: [Lengths]
    }

    /// Calls `body` with the UTF-8 bytes of `string`, without a copy when the string holds them
    /// contiguously (a native string does).
    private static func withBytes(of string: String, _ body: (UnsafeRawBufferPointer) -> Void) {
        if string.utf8.withContiguousStorageIfAvailable({ body(UnsafeRawBufferPointer($0)) }) == nil {
            var copy = string
            copy.withUTF8 { body(UnsafeRawBufferPointer($0)) }
        }
    }

    /// More body bytes are available for a stream whose source said "not ready".
    public func resumeBody(streamID: Int32) {
        _ = nghttp2_session_resume_data(session, streamID)
    }

    /// False once the connection has used up its stream identifiers (2^31 − 1, RFC 9113
    /// section 5.1.1): further requests need a new connection.
    public var canOpenStream: Bool { nghttp2_session_get_next_stream_id(session) <= UInt32(Int32.max) }

    /// Moves the next stream identifier forward, so tests can reach the end of the space.
    func setNextStreamID(_ streamID: Int32) {
        _ = nghttp2_session_set_next_stream_id(session, streamID)
    }

    /// The delegate has taken `count` bytes of a stream's DATA: credit the windows.
    public func consume(streamID: Int32, count: Int) {
        guard count > 0 else { return }
        _ = nghttp2_session_consume(session, streamID, count)
    }

    /// Sets a stream's receive window to `size` bytes; a larger one is announced at once
    /// (WINDOW_UPDATE with the difference).
    public func setStreamWindow(_ streamID: Int32, to size: Int) {
        _ = nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, Int32(clamping: size))
    }

    /// Resets a stream with CANCEL; the delegate hears of its close as `.cancelled`.
    public func cancelStream(_ streamID: Int32) {
        guard let state = streams[streamID] else { return }
        state.cancelledLocally = true
        _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, HTTP2ErrorCode.cancel)
    }

    /// Sends a PING: to learn whether an idle connection is alive, or how long its round trip is.
    public func ping() {
        _ = nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nil)
    }

    /// Sends GOAWAY: no new streams will be opened.
    public func goAway() {
        terminatedLocally = true
        _ = nghttp2_session_terminate_session(session, HTTP2ErrorCode.noError)
    }

    /// Request fields that HTTP/2 does not carry (RFC 9113 section 8.2.2, and `host`, which
    /// `:authority` replaces), lower-case; `content-length` is written from the body's length.
    static let droppedFields: [[UInt8]] = [
        "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host", "content-length",
    ].map { Array($0.utf8) }

    /// Bit n is set when a name in ``droppedFields`` is n bytes long.
    static let droppedLengths: UInt64 = droppedFields.reduce(0) { $0 | 1 << UInt64($1.count) }

    /// How a request field's name goes on the wire.
    enum KeptName {
        case asIs
        case lowerCased
    }

    /// Whether a request field is sent, and whether its name needs lower-casing: nil for the
    /// fields in ``droppedFields`` and for a `te` other than `trailers`.
    static func keptName(_ name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> KeptName? {
        // Only a name as long as a dropped one is compared (most fields are not).
        if name.count < 64 && droppedLengths & (1 << name.count) != 0 {
            for candidate in droppedFields where isNamed(candidate, name) { return nil }
        }
        if name.count == 2 && isNamed(teName, name) && !(value.count == 8 && isNamed(trailersValue, value)) { return nil }
        for byte in name where byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") { return .lowerCased }
        return .asIs
    }

    /// True when `bytes`, lower-cased, are `candidate` (lower case).
    private static func isNamed(_ candidate: [UInt8], _ bytes: UnsafeRawBufferPointer) -> Bool {
        candidate.withUnsafeBytes { HTTPFieldValidation.equalsLowercased(bytes, $0) }
    }

    static let teName = Array("te".utf8)
    static let trailersValue = Array("trailers".utf8)

    // MARK: Callback bodies (a header block's: HTTP2ClientSession+HeaderBlocks.swift)

    func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        let type = Int(courier_nghttp2_frame_type(frame))
        let flags = courier_nghttp2_frame_flags(frame)
        let streamID = courier_nghttp2_frame_stream_id(frame)
        let endStream = flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
        switch type {
        case Int(NGHTTP2_HEADERS.rawValue):
            headerBlockEnded(streamID, endStream: endStream)
        case Int(NGHTTP2_DATA.rawValue):
            if endStream, let state = streams[streamID] { state.endStreamReceived = true }
        case Int(NGHTTP2_RST_STREAM.rawValue):
            if let state = streams[streamID] { state.peerResetCode = courier_nghttp2_rst_stream_error_code(frame) }
        case Int(NGHTTP2_SETTINGS.rawValue):
            guard flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 else {
                delegate?.http2DidReceiveSettingsAcknowledgement()
                return
            }
            let limit = courier_nghttp2_settings_value(frame, Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue))
            if limit >= 0 {
                remoteMaxConcurrentStreams = Int(min(limit, Int64(Int32.max)))
                delegate?.http2DidReceiveMaxConcurrentStreams(remoteMaxConcurrentStreams)
            }
        case Int(NGHTTP2_GOAWAY.rawValue):
            let last = courier_nghttp2_goaway_last_stream_id(frame)
            goAwayLastStreamID = last
            delegate?.http2DidReceiveGoAway(lastStreamID: last, errorCode: courier_nghttp2_goaway_error_code(frame))
        case Int(NGHTTP2_PING.rawValue):
            if flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0 { delegate?.http2DidReceivePingAcknowledgement() }
        default:
            break
        }
    }

    func dataChunk(_ streamID: Int32, _ bytes: UnsafeRawBufferPointer) {
        delegate?.http2Stream(streamID, didReceiveData: bytes)
    }

    func streamClosed(_ streamID: Int32, errorCode: UInt32) {
        if blockStream?.id == streamID { endBlock() }
        guard let state = streams.removeValue(forKey: streamID) else { return }
        let error: HTTP2StreamError?
        if state.cancelledLocally {
            error = .cancelled
        } else if state.headerListTooLarge {
            error = .headerListTooLarge
        } else if errorCode == HTTP2ErrorCode.refusedStream || (state.peerResetCode == nil && goAwayLastStreamID.map { streamID > $0 } == true) {
            error = .refused
        } else if let peerCode = state.peerResetCode, !(peerCode == HTTP2ErrorCode.noError && state.endStreamReceived) {
            error = .reset(code: peerCode)
        } else if errorCode != HTTP2ErrorCode.noError {
            error = .protocolError(code: errorCode)
        } else if !state.endStreamReceived {
            error = .reset(code: errorCode)
        } else {
            error = nil
        }
        delegate?.http2Stream(streamID, didCloseWith: error)
    }

    func readBody(_ streamID: Int32, into buffer: UnsafeMutableRawBufferPointer, flags: UnsafeMutablePointer<UInt32>) -> Int {
        guard let delegate else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
        switch delegate.http2Stream(streamID, readBodyInto: buffer) {
        case .bytes(let count, let end):
            if end { flags.pointee |= UInt32(NGHTTP2_DATA_FLAG_EOF.rawValue) }
            return count
        case .notReady:
            return Int(NGHTTP2_ERR_DEFERRED.rawValue)
        }
    }

}

// MARK: nghttp2 callbacks: find the session and hand over.

private let onBeginHeaders: nghttp2_on_begin_headers_callback = { _, frame, userData in
    guard let frame else { return 0 }
    HTTP2ClientSession.with(userData) { $0.beginHeaders(courier_nghttp2_frame_stream_id(frame)) }
    return 0
}

private let onHeader: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
    guard let frame, let name, let value else { return 0 }
    let accepted = HTTP2ClientSession.with(userData) {
        $0.header(
            courier_nghttp2_frame_stream_id(frame),
            name: UnsafeBufferPointer(start: name, count: nameLength),
            value: UnsafeBufferPointer(start: value, count: valueLength)
        )
    }
    return accepted ? 0 : Int32(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue)
}

private let onFrameReceived: nghttp2_on_frame_recv_callback = { _, frame, userData in
    guard let frame else { return 0 }
    HTTP2ClientSession.with(userData) { $0.frameReceived(frame) }
    return 0
}

private let onDataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, streamID, data, length, userData in
    guard let data else { return 0 }
    HTTP2ClientSession.with(userData) { $0.dataChunk(streamID, UnsafeRawBufferPointer(start: data, count: length)) }
    return 0
}

private let onStreamClose: nghttp2_on_stream_close_callback = { _, streamID, errorCode, userData in
    HTTP2ClientSession.with(userData) { $0.streamClosed(streamID, errorCode: errorCode) }
    return 0
}

private let onFrameSent: nghttp2_on_frame_send_callback = { _, frame, userData in
    guard let frame, Int(courier_nghttp2_frame_type(frame)) == Int(NGHTTP2_GOAWAY.rawValue) else { return 0 }
    let code = courier_nghttp2_goaway_error_code(frame)
    if code != HTTP2ErrorCode.noError { HTTP2ClientSession.with(userData) { $0.sentGoAwayError = code } }
    return 0
}

private let onError: nghttp2_error_callback2 = { _, _, message, length, userData in
    guard let message else { return 0 }
    let text = UnsafeRawBufferPointer(start: message, count: length)
    HTTP2ClientSession.with(userData) { $0.lastErrorMessage = String(decoding: text, as: UTF8.self) }
    return 0
}

private let readBodyCallback: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, userData in
    guard let buffer, let flags else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
    return HTTP2ClientSession.with(userData) {
        $0.readBody(streamID, into: UnsafeMutableRawBufferPointer(start: buffer, count: length), flags: flags)
    }
}
