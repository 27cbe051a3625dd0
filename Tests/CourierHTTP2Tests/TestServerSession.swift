import CCourierNghttp2
import CourierCore
import Foundation

/// An nghttp2 server session in memory: the real peer for the client core's tests. It records
/// requests and answers as each test scripts it.
final class TestServerSession {
    struct Request {
        var headers: [(String, String)] = []
        var body: [UInt8] = []
        var complete = false
    }

    var session: OpaquePointer!
    var requests: [Int32: Request] = [:]
    /// Response bodies being sent, by stream.
    var outgoing: [Int32: (bytes: [UInt8], offset: Int, trailers: [(String, String)])] = [:]
    var closedStreams: [Int32: UInt32] = [:]

    init(maxSendHeaderBlock: Int = 64 * 1024, settings: [(Int32, UInt32)] = []) {
        var callbacks: OpaquePointer?
        nghttp2_session_callbacks_new(&callbacks)
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks) { _, frame, user in
            TestServerSession.from(user).requests[courier_nghttp2_frame_stream_id(frame!)] = Request()
            return 0
        }
        nghttp2_session_callbacks_set_on_header_callback(callbacks) { _, frame, name, nameLength, value, valueLength, _, user in
            let stream = courier_nghttp2_frame_stream_id(frame!)
            TestServerSession.from(user).requests[stream]?.headers.append((
                String(decoding: UnsafeBufferPointer(start: name, count: nameLength), as: UTF8.self),
                String(decoding: UnsafeBufferPointer(start: value, count: valueLength), as: UTF8.self)
            ))
            return 0
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) { _, _, stream, data, length, user in
            TestServerSession.from(user).requests[stream]?.body += UnsafeBufferPointer(start: data, count: length)
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, user in
            let stream = courier_nghttp2_frame_stream_id(frame!)
            if courier_nghttp2_frame_flags(frame!) & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0 {
                TestServerSession.from(user).requests[stream]?.complete = true
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, stream, code, user in
            TestServerSession.from(user).closedStreams[stream] = code
            return 0
        }
        var option: OpaquePointer?
        nghttp2_option_new(&option)
        nghttp2_option_set_max_send_header_block_length(option, maxSendHeaderBlock)
        nghttp2_session_server_new2(&session, callbacks, Unmanaged.passUnretained(self).toOpaque(), option)
        nghttp2_option_del(option)
        nghttp2_session_callbacks_del(callbacks)
        var entries = settings.map { nghttp2_settings_entry(settings_id: $0.0, value: $0.1) }
        nghttp2_submit_settings(session, 0, &entries, entries.count)
    }

    deinit { nghttp2_session_del(session) }

    static func from(_ user: UnsafeMutableRawPointer?) -> TestServerSession {
        Unmanaged<TestServerSession>.fromOpaque(user!).takeUnretainedValue()
    }

    func receive(_ bytes: [UInt8]) -> Int {
        bytes.withUnsafeBufferPointer { nghttp2_session_mem_recv(session, $0.baseAddress, $0.count) }
    }

    func output() -> [UInt8] {
        var result: [UInt8] = []
        while true {
            var data: UnsafePointer<UInt8>?
            let count = nghttp2_session_mem_send(session, &data)
            guard count > 0, let data else { return result }
            result += UnsafeBufferPointer(start: data, count: count)
        }
    }

    /// Answers a stream: status, fields, a body sent through flow control, optional trailers.
    func respond(_ stream: Int32, status: Int = 200, headers: [(String, String)] = [], body: [UInt8] = [], trailers: [(String, String)] = []) {
        outgoing[stream] = (body, 0, trailers)
        withHeaders([(":status", String(status))] + headers) { nva in
            var provider = courier_nghttp2_data_provider { session, stream, buffer, length, flags, _, user in
                let server = TestServerSession.from(user)
                guard var entry = server.outgoing[stream] else { return 0 }
                let count = min(length, entry.bytes.count - entry.offset)
                entry.bytes.withUnsafeBufferPointer { source in
                    buffer!.update(from: source.baseAddress! + entry.offset, count: count)
                }
                entry.offset += count
                server.outgoing[stream] = entry
                if entry.offset == entry.bytes.count {
                    flags!.pointee |= UInt32(NGHTTP2_DATA_FLAG_EOF.rawValue)
                    if !entry.trailers.isEmpty {
                        flags!.pointee |= UInt32(NGHTTP2_DATA_FLAG_NO_END_STREAM.rawValue)
                        server.withHeaders(entry.trailers) { trailerNV in
                            _ = nghttp2_submit_trailer(session, stream, trailerNV.baseAddress, trailerNV.count)
                        }
                    }
                }
                return count
            }
            _ = nghttp2_submit_response(session, stream, nva.baseAddress, nva.count, &provider)
        }
    }

    /// Sends a header block without ending the stream (a 1xx response).
    func sendInterim(_ stream: Int32, status: Int) {
        withHeaders([(":status", String(status))]) { nva in
            _ = nghttp2_submit_headers(session, 0, stream, nil, nva.baseAddress, nva.count, nil)
        }
    }

    func reset(_ stream: Int32, code: UInt32) {
        nghttp2_submit_rst_stream(session, 0, stream, code)
    }

    func goAway(lastStreamID: Int32) {
        nghttp2_submit_goaway(session, 0, lastStreamID, 0, nil, 0)
    }

    func withHeaders<R>(_ pairs: [(String, String)], _ body: (UnsafeMutableBufferPointer<nghttp2_nv>) -> R) -> R {
        var storage: [UInt8] = []
        var ranges: [(Range<Int>, Range<Int>)] = []
        for (name, value) in pairs {
            let n = storage.count
            storage += name.utf8
            let v = storage.count
            storage += value.utf8
            ranges.append((n..<v, v..<storage.count))
        }
        return storage.withUnsafeMutableBufferPointer { bytes in
            var nva = ranges.map { name, value in
                nghttp2_nv(name: bytes.baseAddress! + name.lowerBound, value: bytes.baseAddress! + value.lowerBound,
                           namelen: name.count, valuelen: value.count, flags: 0)
            }
            return nva.withUnsafeMutableBufferPointer { body($0) }
        }
    }
}
