import CCourierNghttp2
import CourierCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A response's header blocks: collected field by field as nghttp2 decodes them, into the
/// session's one buffer, and handed to the delegate as a head, an interim head or trailers.
extension HTTP2ClientSession {
    func beginHeaders(_ streamID: Int32) {
        guard let state = streams[streamID] else {
            endBlock()
            return
        }
        blockStream = (streamID, Unmanaged.passUnretained(state))
        // A block abandoned halfway (its list too large, or a field nghttp2 refused) never ended:
        // its bytes are not this block's.
        blockEnd = 0
        state.fieldLocations.removeAll(keepingCapacity: true)
        state.nameBits = 0
        state.status = nil
        state.contentLength = -1
        state.headerBytes = 0
    }

    func endBlock() {
        blockStream = nil
        if blockBytes.count > Self.keptBlockLimit { blockBytes = [] }
    }

    /// Room a header block's fields get at once: a typical response head is collected in the
    /// session's buffer without growing it, and with one allocation for its locations.
    static let typicalHeadBytes = 512
    static let typicalHeadFields = 16

    /// Returns false to reset the stream (header list too large).
    func header(_ streamID: Int32, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) -> Bool {
        // The state is changed in place, found without a lookup (or a retain) when the block's
        // start kept it.
        let limit = configuration.maxHeaderListSize
        if let block = blockStream, block.id == streamID {
            return block.state._withUnsafeGuaranteedRef { collect(name: name, value: value, into: $0, limit: limit) }
        }
        // A field outside the block begun (none is: nghttp2 begins every block) is dropped.
        return true
    }

    private func collect(
        name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>, into state: StreamState, limit: Int
    ) -> Bool {
        // RFC 9113 section 6.5.2: each field counts its name, its value and 32 octets.
        state.headerBytes += name.count + value.count + 32
        if state.headerBytes > limit {
            state.headerListTooLarge = true
            return false
        }
        if name.first == UInt8(ascii: ":") {
            // nghttp2 has checked the pseudo-fields: only :status reaches a client.
            if Self.hasName(name, ":status") { state.status = Self.decimal(value) }
            return true
        }
        appendField(name: name, value: value, to: state)
        if Self.hasName(name, "content-length") {
            // nghttp2 refuses a Content-Length that is not a number, and a second one; one of
            // more than 18 digits is left to whoever reads the field (nil: not known).
            state.contentLength = Self.decimal(value, maxDigits: 18)
        }
        return true
    }

    /// Adds a regular field to the block being collected, its name in canonical case.
    private func appendField(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>, to state: StreamState) {
        if state.fieldLocations.capacity == 0 { state.fieldLocations.reserveCapacity(Self.typicalHeadFields) }
        let nameStart = blockEnd
        let valueStart = nameStart + name.count
        let end = valueStart + value.count
        if end > blockBytes.count {
            // At most the header list's limit: each field counted 32 bytes more than it holds.
            blockBytes += repeatElement(0, count: Swift.max(end, 2 * blockBytes.count, Self.typicalHeadBytes) - blockBytes.count)
        }
        blockBytes.withUnsafeMutableBytes { bytes in
            Self.copyCanonicalName(UnsafeRawBufferPointer(name), to: bytes.baseAddress! + nameStart)
            if let source = value.baseAddress { (bytes.baseAddress! + valueStart).copyMemory(from: source, byteCount: value.count) }
        }
        blockEnd = end
        state.fieldLocations.append(HTTPFields.Location(name: nameStart..<valueStart, value: valueStart..<end))
        state.nameBits |= HTTPFields.nameBit(count: name.count, first: name.first ?? 0, last: name.last ?? 0)
    }

    /// True when `name` is `wanted`, byte for byte: nghttp2 gives names in lower case (a
    /// pseudo-field's, and a regular field's once it has checked them).
    private static func hasName(_ name: UnsafeBufferPointer<UInt8>, _ wanted: StaticString) -> Bool {
        guard name.count == wanted.utf8CodeUnitCount, let base = name.baseAddress else { return false }
        return memcmp(base, wanted.utf8Start, name.count) == 0
    }

    /// The value of a `:status` field (or of a Content-Length), or nil when it is not a decimal
    /// number of at most `maxDigits` digits.
    static func decimal(_ bytes: UnsafeBufferPointer<UInt8>, maxDigits: Int = 9) -> Int? {
        guard !bytes.isEmpty, bytes.count <= maxDigits else { return nil }
        var value = 0
        for byte in bytes {
            guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }

    /// A HEADERS frame, with its CONTINUATIONs, has been received: the block goes to the delegate.
    func headerBlockEnded(_ streamID: Int32, endStream: Bool) {
        // nghttp2 begins every block it completes (``beginHeaders(_:)``): one not begun is
        // a stream the session does not know.
        guard let block = blockStream, block.id == streamID else {
            endBlock()
            return
        }
        let state = block.state.takeUnretainedValue()
        if endStream { state.endStreamReceived = true }
        // The collected block goes into the head or trailers: its bytes copied out of the
        // session's buffer, its locations moved.
        let end = blockEnd
        let storage = blockBytes.withUnsafeBufferPointer { Array(UnsafeBufferPointer(rebasing: $0[..<end])) }
        endBlock()
        let fields = HTTPFields(validatedStorage: storage, locations: state.fieldLocations, nameBits: state.nameBits)
        let status = state.status
        state.fieldLocations = []
        state.nameBits = 0
        state.status = nil
        headerBlockComplete(streamID, state, fields, status: status)
    }

    /// A complete header block: an interim or the final response head, or trailers.
    private func headerBlockComplete(_ streamID: Int32, _ state: StreamState, _ fields: HTTPFields, status: Int?) {
        if let status {
            var head = HTTPResponseHead(version: .http2, status: status, fields: fields)
            head.validatedContentLength = state.contentLength
            if (100..<200).contains(status) {
                delegate?.http2Stream(streamID, didReceiveInformationalHead: head)
                return
            }
            state.headDelivered = true
            delegate?.http2Stream(streamID, didReceiveHead: head)
        } else if state.headDelivered {
            delegate?.http2Stream(streamID, didReceiveTrailers: fields)
        }
    }

    /// Writes `name` in canonical case at `destination`, "content-type" → "Content-Type":
    /// HTTP/2 names are lower case on the wire, but responses should look the same to users
    /// whatever the protocol. Field names are tokens (ASCII). This runs for every field: the
    /// name is copied in one go and its letters raised in place.
    static func copyCanonicalName(_ name: UnsafeRawBufferPointer, to destination: UnsafeMutableRawPointer) {
        guard let source = name.baseAddress else { return }
        destination.copyMemory(from: source, byteCount: name.count)
        let out = destination.assumingMemoryBound(to: UInt8.self)
        var upper = true
        for index in 0..<name.count {
            let byte = out[index]
            if upper && byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z") { out[index] = byte - 32 }
            upper = byte == UInt8(ascii: "-")
        }
    }
}
