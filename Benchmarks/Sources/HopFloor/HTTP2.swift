// hop-floor over HTTP/2 (an https URL whose server picks "h2" by ALPN): the least an h2 client
// can do with nghttp2, as h2load does. One stream at a time on the connection: each request is a
// HEADERS frame written with one SSL_write, and its response is whole when nghttp2 closes the
// stream. Settings as h2load's defaults: windows of 2^30 - 1 for the stream and the connection.

import CHopFloor
import Glibc

final class HTTP2Client {
    let session: OpaquePointer
    /// The request's fields, built once: nghttp2 is told not to copy them.
    let fields: [nghttp2_nv]
    let storage: [UnsafeMutablePointer<UInt8>]
    var streamID: Int32 = 0
    var completed = false
    var bodyBytes = 0
    /// What `flush` writes, kept between requests.
    var output: [UInt8] = []

    init(_ target: Target) {
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { fail("nghttp2_session_callbacks_new failed") }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_header_callback(callbacks) { _, frame, name, nameLength, value, valueLength, _, user in
            let client = Unmanaged<HTTP2Client>.fromOpaque(user!).takeUnretainedValue()
            guard frame!.pointee.hd.stream_id == client.streamID, nameLength == 7, let name, let value,
                  memcmp(name, ":status", 7) == 0 else { return 0 }
            if valueLength != 3 || memcmp(value, "200", 3) != 0 {
                fail("the server answered \(String(decoding: UnsafeBufferPointer(start: value, count: valueLength), as: UTF8.self))")
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) { _, _, streamID, _, length, user in
            let client = Unmanaged<HTTP2Client>.fromOpaque(user!).takeUnretainedValue()
            if streamID == client.streamID { client.bodyBytes += length }
            return 0
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, streamID, errorCode, user in
            let client = Unmanaged<HTTP2Client>.fromOpaque(user!).takeUnretainedValue()
            guard streamID == client.streamID else { return 0 }
            if errorCode != 0 { fail("the server reset the stream (HTTP/2 error \(errorCode))") }
            client.completed = true
            return 0
        }
        let pairs = [(":method", "GET"), (":scheme", "https"), (":authority", target.hostField), (":path", target.path),
                     ("user-agent", "hop-floor"), ("accept", "*/*")]
        let storage = pairs.flatMap { [Self.bytes($0.0), Self.bytes($0.1)] }
        self.storage = storage
        fields = pairs.indices.map { index in
            nghttp2_nv(name: storage[2 * index], value: storage[2 * index + 1], namelen: pairs[index].0.utf8.count,
                       valuelen: pairs[index].1.utf8.count,
                       flags: UInt8(NGHTTP2_NV_FLAG_NO_COPY_NAME.rawValue | NGHTTP2_NV_FLAG_NO_COPY_VALUE.rawValue))
        }
        var session: OpaquePointer?
        guard nghttp2_session_client_new(&session, callbacks, nil) == 0, let session else { fail("nghttp2_session_client_new failed") }
        self.session = session
        nghttp2_session_set_user_data(session, Unmanaged.passUnretained(self).toOpaque())
        let window: UInt32 = (1 << 30) - 1
        var settings = [nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
                        nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: window)]
        guard nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count) == 0,
              nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, Int32(window)) == 0 else {
            fail("nghttp2 refused the settings")
        }
    }

    deinit {
        nghttp2_session_del(session)
        storage.forEach { $0.deallocate() }
    }

    static func bytes(_ text: String) -> UnsafeMutablePointer<UInt8> {
        let utf8 = Array(text.utf8)
        let pointer = UnsafeMutablePointer<UInt8>.allocate(capacity: max(utf8.count, 1))
        pointer.initialize(from: utf8, count: utf8.count)
        return pointer
    }

    /// Opens the next stream; `flush` then writes its HEADERS.
    func submitRequest() {
        completed = false
        bodyBytes = 0
        streamID = nghttp2_submit_request(session, nil, fields, fields.count, nil, nil)
        guard streamID > 0 else { fail("nghttp2_submit_request: \(String(cString: nghttp2_strerror(streamID)))") }
    }

    /// Writes what nghttp2 has to send (a request, a SETTINGS acknowledgement, a WINDOW_UPDATE)
    /// in one TLS record.
    func flush(_ tls: OpaquePointer) {
        output.removeAll(keepingCapacity: true)
        while true {
            var data: UnsafePointer<UInt8>?
            let count = nghttp2_session_mem_send(session, &data)
            guard count >= 0 else { fail("nghttp2_session_mem_send: \(String(cString: nghttp2_strerror(Int32(count))))") }
            if count == 0 { break }
            output.append(contentsOf: UnsafeBufferPointer(start: data, count: count))
        }
        guard !output.isEmpty else { return }
        ERR_clear_error()
        let written = SSL_write(tls, output, Int32(output.count))
        if written != output.count { fail("SSL_write: \(Connection.tlsFailure(tls, written))") }
    }

    /// Takes bytes read from the connection; true once the open stream has closed.
    func receive(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let used = nghttp2_session_mem_recv(session, bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), bytes.count)
        guard used == bytes.count else { fail("nghttp2_session_mem_recv: \(String(cString: nghttp2_strerror(Int32(used))))") }
        return completed
    }
}
