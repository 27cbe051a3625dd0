import CourierSync
import Foundation
import Glibc

/// An HTTP/2 peer that breaks the protocol on request, for the HTTP/2 fault suite: cleartext h2
/// with prior knowledge on 127.0.0.1 (a Python 3 program, standard library only: frames and
/// HPACK by hand, one thread per connection reading frames and one per request answering),
/// run by the test harness and stopped by PID.
///
/// The server sends its SETTINGS (MAX_CONCURRENT_STREAMS 100), ACKs the client's SETTINGS and
/// PINGs, decodes each request's header block (HPACK with Huffman and the dynamic table) and
/// answers by `:path`, the query ignored (so a test can tag its requests with one):
/// - `/ok`: 200, `hello\n` (HEADERS, then DATA with END_STREAM).
/// - `/goaway-storm`: 1000 GOAWAY frames (NO_ERROR), last-stream-ids odd and decreasing down to
///   the request's own stream (so it is never refused), then a FIN; nothing answers the request.
/// - `/goaway-storm-refuse`: the same, but the last GOAWAY's last-stream-id is below the request's
///   stream: the request is refused (never processed).
/// - `/rst-flood`: RST_STREAM (CANCEL) on the request's stream, then 10,000 RST_STREAM frames on
///   idle streams (odd ids the client has not opened); the connection stays open.
/// - `/settings-flood`: 100,000 SETTINGS frames (MAX_CONCURRENT_STREAMS 100, not ACKs) in one
///   write, then the `/ok` answer.
/// - `/ping-flood`: 100,000 PING frames in one write, then the `/ok` answer.
/// - `/continuation-flood`: HEADERS (`:status 200`) without END_HEADERS, then CONTINUATION frames of
///   16 KiB (one valid literal field `x-junk` each) until the client closes (or 300 s pass).
/// - `/hpack-bomb`: one HEADERS frame (END_STREAM) that indexes a 4000-byte `x-bomb` field into
///   the client's dynamic table and references it 10,000 times: 14 KB on the wire, 40 MB of fields.
/// - `/window-overflow`: WINDOW_UPDATE of 2^31 − 1 on the request's stream, then on the
///   connection: each takes a window past 2^31 − 1. Nothing else; the connection stays open.
/// - `/data-after-end`: the `/ok` answer, then two more DATA frames on the same stream.
/// - `/never-ends`: HEADERS 200, then a DATA chunk (`tick <n>\n`) every 100 ms, never END_STREAM,
///   until the client resets the stream or closes (or 300 s pass).
/// - `/silent`: HEADERS 200 without END_STREAM, then nothing on the stream until the client
///   resets it or closes (or 300 s pass).
/// - anything else: 404.
///
/// Every response head carries `x-connection: <n>`, the connection's number (from 1, in accept
/// order). ``log()`` has one line per connection event and per request:
/// `conn <n>: open from …`, `conn <n>: stream <id>: GET <path>`, `conn <n>: stream <id>: reset
/// by the client (CANCEL)`, `conn <n>: GOAWAY from the client: …`, `conn <n>: closed (<why>)`.
public final class H2FaultServer: Sendable {
    public let port: Int
    /// The server's folder, with `server.log` (see ``log()``) and `server.pid`.
    public let directory: URL
    public let pid: Int32

    private static let sharedServer = Mutex<Result<H2FaultServer, TestServerError>?>(nil)

    /// The server shared by a test process, started on first use.
    public static func shared() throws -> H2FaultServer {
        try sharedServer.withLock { cached in
            if let cached { return try cached.get() }
            let result = Result { () throws(TestServerError) -> H2FaultServer in try H2FaultServer() }
            cached = result
            return try result.get()
        }
    }

    public func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

    /// Printed (alone on a line, with the port after it) once the port listens.
    private static let readyMarker = "h2-fault-server ready"

    // Argument: the port.
    private static let program = #"""
    import socket, struct, sys, threading, time

    # An HTTP/2 peer that misbehaves on request: cleartext h2 with prior knowledge, one thread per
    # connection (it reads frames) and one per request (it answers). Frames and HPACK by hand.

    PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
    END_STREAM = ACK = 0x1
    END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
    NO_ERROR, PROTOCOL_ERROR, COMPRESSION_ERROR, CANCEL = 0x0, 0x1, 0x9, 0x8
    ERROR_NAMES = ["NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
                   "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
                   "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"]
    MAX_FRAME = 16384  # the client's SETTINGS_MAX_FRAME_SIZE is never assumed larger
    SAFETY_LIMIT = 300.0  # seconds an endless behaviour runs at most, should a client never close

    log_lock = threading.Lock()

    def log(message):
        with log_lock:
            print(message, flush=True)

    def error_name(code):
        return ERROR_NAMES[code] if code < len(ERROR_NAMES) else "error %d" % code

    def frame(kind, flags, stream_id, payload=b""):
        return struct.pack(">BHBBI", len(payload) >> 16, len(payload) & 0xFFFF, kind, flags, stream_id & 0x7FFFFFFF) + payload

    # ---- HPACK (RFC 7541) ----

    class HPACKError(Exception):
        pass

    STATIC_TABLE = [
        (b":authority", b""), (b":method", b"GET"), (b":method", b"POST"), (b":path", b"/"),
        (b":path", b"/index.html"), (b":scheme", b"http"), (b":scheme", b"https"), (b":status", b"200"),
        (b":status", b"204"), (b":status", b"206"), (b":status", b"304"), (b":status", b"400"),
        (b":status", b"404"), (b":status", b"500"), (b"accept-charset", b""), (b"accept-encoding", b"gzip, deflate"),
        (b"accept-language", b""), (b"accept-ranges", b""), (b"accept", b""), (b"access-control-allow-origin", b""),
        (b"age", b""), (b"allow", b""), (b"authorization", b""), (b"cache-control", b""),
        (b"content-disposition", b""), (b"content-encoding", b""), (b"content-language", b""), (b"content-length", b""),
        (b"content-location", b""), (b"content-range", b""), (b"content-type", b""), (b"cookie", b""),
        (b"date", b""), (b"etag", b""), (b"expect", b""), (b"expires", b""),
        (b"from", b""), (b"host", b""), (b"if-match", b""), (b"if-modified-since", b""),
        (b"if-none-match", b""), (b"if-range", b""), (b"if-unmodified-since", b""), (b"last-modified", b""),
        (b"link", b""), (b"location", b""), (b"max-forwards", b""), (b"proxy-authenticate", b""),
        (b"proxy-authorization", b""), (b"range", b""), (b"referer", b""), (b"refresh", b""),
        (b"retry-after", b""), (b"server", b""), (b"set-cookie", b""), (b"strict-transport-security", b""),
        (b"transfer-encoding", b""), (b"user-agent", b""), (b"vary", b""), (b"via", b""),
        (b"www-authenticate", b""),
    ]

    HUFFMAN = [  # (code, bit length) for symbols 0..255 and EOS (256): RFC 7541 appendix B
        (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), (0xfffffe4, 28), (0xfffffe5, 28), (0xfffffe6, 28), (0xfffffe7, 28),
        (0xfffffe8, 28), (0xffffea, 24), (0x3ffffffc, 30), (0xfffffe9, 28), (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28), (0xfffffec, 28),
        (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28), (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28),
        (0xffffff4, 28), (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28), (0xffffff8, 28), (0xffffff9, 28), (0xffffffa, 28), (0xffffffb, 28),
        (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12), (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11),
        (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11), (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6),
        (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6), (0x1a, 6), (0x1b, 6), (0x1c, 6), (0x1d, 6),
        (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8), (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10),
        (0x1ffa, 13), (0x21, 6), (0x5d, 7), (0x5e, 7), (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7),
        (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7), (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7),
        (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7), (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7),
        (0xfc, 8), (0x73, 7), (0xfd, 8), (0x1ffb, 13), (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6),
        (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5), (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6),
        (0x27, 6), (0x6, 5), (0x74, 7), (0x75, 7), (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5),
        (0x2b, 6), (0x76, 7), (0x2c, 6), (0x8, 5), (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7),
        (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15), (0x7fc, 11), (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28),
        (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20), (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22), (0x7fffd9, 23),
        (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23), (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23),
        (0xffffec, 24), (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23), (0xffffee, 24), (0x7fffe1, 23), (0x7fffe2, 23), (0x7fffe3, 23),
        (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23), (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24),
        (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22), (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21),
        (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22), (0xfffff0, 24), (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23), (0x7fffec, 23),
        (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21), (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23),
        (0xfffea, 20), (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22), (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23),
        (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20), (0x7fff1, 19), (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25),
        (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27), (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25),
        (0x7fff2, 19), (0x1fffe3, 21), (0x3ffffe6, 26), (0x7ffffe0, 27), (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27), (0xfffff2, 24),
        (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26), (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27),
        (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21), (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23),
        (0x3fffea, 22), (0x3fffeb, 22), (0x1ffffee, 25), (0x1ffffef, 25), (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
        (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26), (0x7ffffe7, 27), (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27),
        (0x7ffffeb, 27), (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27), (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27), (0x3ffffee, 26),
        (0x3fffffff, 30),
    ]

    HUFFMAN_DECODE = {(length, code): symbol for symbol, (code, length) in enumerate(HUFFMAN)}

    def huffman_decode(data):
        out = bytearray()
        code = length = 0
        for byte in data:
            for shift in range(7, -1, -1):
                code = (code << 1) | ((byte >> shift) & 1)
                length += 1
                symbol = HUFFMAN_DECODE.get((length, code))
                if symbol is not None:
                    if symbol == 256:
                        raise HPACKError("EOS inside a Huffman string")
                    out.append(symbol)
                    code = length = 0
                elif length > 30:
                    raise HPACKError("invalid Huffman code")
        # The padding is the most significant bits of EOS (all ones), shorter than a byte.
        if length > 7 or code != (1 << length) - 1:
            raise HPACKError("invalid Huffman padding")
        return bytes(out)

    def decode_integer(data, position, prefix_bits):
        if position >= len(data):
            raise HPACKError("truncated integer")
        mask = (1 << prefix_bits) - 1
        value = data[position] & mask
        position += 1
        if value < mask:
            return value, position
        shift = 0
        while True:
            if position >= len(data):
                raise HPACKError("truncated integer")
            byte = data[position]
            position += 1
            value += (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value, position
            if shift > 28:
                raise HPACKError("integer too large")

    def decode_string(data, position):
        if position >= len(data):
            raise HPACKError("truncated string")
        huffman = data[position] & 0x80
        length, position = decode_integer(data, position, 7)
        if position + length > len(data):
            raise HPACKError("truncated string")
        raw = bytes(data[position:position + length])
        return (huffman_decode(raw) if huffman else raw), position + length

    class HPACKDecoder:
        # One per connection: the client's encoder indexes fields (user-agent, :authority, ...) into
        # the dynamic table, so every representation must be decoded to stay in step.
        def __init__(self, limit=4096):
            self.limit = limit  # our SETTINGS_HEADER_TABLE_SIZE (never changed from the default)
            self.max_size = limit
            self.entries = []  # newest first
            self.size = 0

        def entry(self, index):
            if index == 0:
                raise HPACKError("index 0")
            if index <= len(STATIC_TABLE):
                return STATIC_TABLE[index - 1]
            dynamic = index - len(STATIC_TABLE) - 1
            if dynamic >= len(self.entries):
                raise HPACKError("index %d beyond the dynamic table" % index)
            return self.entries[dynamic]

        def evict(self):
            while self.size > self.max_size and self.entries:
                name, value = self.entries.pop()
                self.size -= len(name) + len(value) + 32

        def add(self, name, value):
            # An entry larger than the table empties it and is not kept (RFC 7541 section 4.4).
            self.entries.insert(0, (name, value))
            self.size += len(name) + len(value) + 32
            self.evict()

        def decode(self, block):
            fields = []
            position = 0
            seen_field = False
            while position < len(block):
                byte = block[position]
                if byte & 0x80:  # indexed field
                    index, position = decode_integer(block, position, 7)
                    fields.append(self.entry(index))
                    seen_field = True
                elif byte & 0x40:  # literal with incremental indexing
                    index, position = decode_integer(block, position, 6)
                    if index:
                        name = self.entry(index)[0]
                    else:
                        name, position = decode_string(block, position)
                    value, position = decode_string(block, position)
                    self.add(name, value)
                    fields.append((name, value))
                    seen_field = True
                elif byte & 0x20:  # dynamic table size update, only before the first field
                    if seen_field:
                        raise HPACKError("table size update after a field")
                    size, position = decode_integer(block, position, 5)
                    if size > self.limit:
                        raise HPACKError("table size %d above the limit" % size)
                    self.max_size = size
                    self.evict()
                else:  # literal without indexing (0000) or never indexed (0001)
                    index, position = decode_integer(block, position, 4)
                    if index:
                        name = self.entry(index)[0]
                    else:
                        name, position = decode_string(block, position)
                    value, position = decode_string(block, position)
                    fields.append((name, value))
                    seen_field = True
            return fields

    def encode_integer(value, prefix_bits, flags=0):
        mask = (1 << prefix_bits) - 1
        if value < mask:
            return bytes([flags | value])
        out = bytearray([flags | mask])
        value -= mask
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        return bytes(out)

    def literal(name, value, indexing=False):
        # A literal field with a literal name, no Huffman: without indexing unless asked.
        return (b"\x40" if indexing else b"\x00") + encode_integer(len(name), 7) + name + encode_integer(len(value), 7) + value

    STATUS = {200: b"\x88", 404: b"\x8d"}  # static table indexes 8 and 13

    def split_header_block(stream_id, block, end_stream):
        # HEADERS and as many CONTINUATION frames as the block needs, END_HEADERS on the last.
        pieces = [block[i:i + MAX_FRAME] for i in range(0, len(block), MAX_FRAME)] or [b""]
        out = []
        for index, piece in enumerate(pieces):
            flags = END_HEADERS if index == len(pieces) - 1 else 0
            if index == 0:
                out.append(frame(HEADERS, flags | (END_STREAM if end_stream else 0), stream_id, piece))
            else:
                out.append(frame(CONTINUATION, flags, stream_id, piece))
        return b"".join(out)


    # ---- Connections ----

    class ClientGone(Exception):
        pass

    class Connection:
        counter = 0
        counter_lock = threading.Lock()

        def __init__(self, sock, address):
            with Connection.counter_lock:
                Connection.counter += 1
                self.number = Connection.counter
            self.sock = sock
            self.address = address
            self.write_lock = threading.Lock()
            self.gone = threading.Event()  # the client closed, or a write failed
            self.closed = False  # under write_lock: the socket is closed
            self.write_shut = False  # under write_lock: FIN sent, nothing more to write
            self.reset_streams = set()
            self.decoder = HPACKDecoder()

        def log(self, message):
            log("conn %d: %s" % (self.number, message))

        def send(self, data):
            # Every write holds the lock, so frames never interleave and close() waits for writers.
            with self.write_lock:
                if self.closed or self.write_shut or self.gone.is_set():
                    raise ClientGone("connection closed")
                try:
                    self.sock.sendall(data)
                except OSError as error:
                    self.gone.set()
                    raise ClientGone(repr(error))

        def shutdown_write(self):
            with self.write_lock:
                if not self.closed and not self.write_shut:
                    self.write_shut = True
                    try:
                        self.sock.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass

        def stream_open(self, stream_id):
            return not self.gone.is_set() and stream_id not in self.reset_streams

        def close(self):
            self.gone.set()
            try:
                self.sock.shutdown(socket.SHUT_RDWR)  # wakes a writer blocked in sendall
            except OSError:
                pass
            with self.write_lock:
                if not self.closed:
                    self.closed = True
                    self.sock.close()

        def serve(self):
            self.log("open from %s:%d" % self.address)
            reason = "client closed"
            try:
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.sock.settimeout(SAFETY_LIMIT)
                reader = self.sock.makefile("rb", buffering=65536)
                preface = reader.read(len(PREFACE))
                if preface != PREFACE:
                    reason = "no HTTP/2 preface: %r" % preface[:40]
                    return
                # Our SETTINGS: at most 100 concurrent streams; everything else the defaults.
                self.send(frame(SETTINGS, 0, 0, struct.pack(">HI", 0x3, 100)))
                block_stream, block, block_end_stream = None, b"", False
                while True:
                    head = reader.read(9)
                    if len(head) < 9:
                        break
                    length = (head[0] << 16) | (head[1] << 8) | head[2]
                    kind, flags = head[3], head[4]
                    stream_id = struct.unpack(">I", head[5:9])[0] & 0x7FFFFFFF
                    payload = reader.read(length)
                    if len(payload) < length:
                        break
                    if block_stream is not None and (kind != CONTINUATION or stream_id != block_stream):
                        reason = "frame type %d inside a header block" % kind
                        self.send(frame(GOAWAY, 0, 0, struct.pack(">II", 0, PROTOCOL_ERROR)))
                        return
                    if kind == SETTINGS and not flags & ACK:
                        self.send(frame(SETTINGS, ACK, 0))
                    elif kind == PING and not flags & ACK:
                        self.send(frame(PING, ACK, 0, payload))
                    elif kind == HEADERS:
                        fragment = payload
                        if flags & PADDED:
                            pad = fragment[0]
                            fragment = fragment[1:len(fragment) - pad]
                        if flags & PRIORITY_FLAG:
                            fragment = fragment[5:]
                        if flags & END_HEADERS:
                            self.request(stream_id, fragment, bool(flags & END_STREAM))
                        else:
                            block_stream, block, block_end_stream = stream_id, fragment, bool(flags & END_STREAM)
                    elif kind == CONTINUATION:
                        if block_stream is None:
                            reason = "CONTINUATION outside a header block"
                            return
                        block += payload
                        if flags & END_HEADERS:
                            self.request(block_stream, block, block_end_stream)
                            block_stream, block = None, b""
                    elif kind == RST_STREAM and len(payload) == 4:
                        self.reset_streams.add(stream_id)
                        self.log("stream %d: reset by the client (%s)" % (stream_id, error_name(struct.unpack(">I", payload)[0])))
                    elif kind == GOAWAY and len(payload) >= 8:
                        last, code = struct.unpack(">II", payload[:8])
                        self.log("GOAWAY from the client: %s, last stream %d, %r" % (error_name(code), last & 0x7FFFFFFF, payload[8:200]))
                    # DATA, WINDOW_UPDATE, PRIORITY and SETTINGS/PING ACKs need nothing from us.
            except HPACKError as error:
                reason = "HPACK error in the request: %s" % error
                try:
                    self.send(frame(GOAWAY, 0, 0, struct.pack(">II", 0, COMPRESSION_ERROR)))
                except ClientGone:
                    pass
            except ClientGone as error:
                reason = "client gone: %s" % error
            except Exception as error:
                reason = "error: %r" % error
            finally:
                self.close()
                self.log("closed (%s)" % reason)

        def request(self, stream_id, block, end_stream):
            fields = self.decoder.decode(block)
            pseudo = {name: value for name, value in fields if name.startswith(b":")}
            method = pseudo.get(b":method", b"?").decode("latin-1")
            path = pseudo.get(b":path", b"").decode("latin-1")
            self.log("stream %d: %s %s" % (stream_id, method, path))
            handler = ROUTES.get(path.split("?")[0], not_found)
            threading.Thread(target=self.run_handler, args=(handler, stream_id, path), daemon=True).start()

        def run_handler(self, handler, stream_id, path):
            try:
                handler(self, stream_id)
            except ClientGone as error:
                self.log("stream %d: %s: client gone (%s)" % (stream_id, path, error))
            except Exception as error:
                self.log("stream %d: %s: error %r" % (stream_id, path, error))


    # ---- Behaviours, by path (the query is ignored) ----

    def response_head(conn, status, extra=b""):
        return STATUS[status] + literal(b"x-connection", str(conn.number).encode()) + extra

    def ok(conn, stream_id):
        block = response_head(conn, 200, literal(b"content-type", b"text/plain") + literal(b"content-length", b"6"))
        conn.send(split_header_block(stream_id, block, False) + frame(DATA, END_STREAM, stream_id, b"hello\n"))

    def not_found(conn, stream_id):
        block = response_head(conn, 404, literal(b"content-length", b"10"))
        conn.send(split_header_block(stream_id, block, False) + frame(DATA, END_STREAM, stream_id, b"not found\n"))

    def goaway_frames(stream_id, count):
        # Odd (client-initiated) last-stream-ids, decreasing, the last one the request's own stream:
        # legal (a GOAWAY may lower the id, never raise it) and the request is never refused.
        return [frame(GOAWAY, 0, 0, struct.pack(">II", last, NO_ERROR) + b"storm") for last in range(stream_id + 2 * (count - 1), stream_id - 1, -2)]

    def goaway_storm(conn, stream_id):
        conn.send(b"".join(goaway_frames(stream_id, 1000)))
        conn.log("stream %d: 1000 GOAWAY frames sent, closing" % stream_id)
        conn.shutdown_write()

    def goaway_storm_refuse(conn, stream_id):
        # 999 as above, then a last one below the request's stream: the request is refused
        # (never processed), which a client may retry on a new connection.
        last = frame(GOAWAY, 0, 0, struct.pack(">II", max(stream_id - 2, 0), NO_ERROR) + b"storm")
        conn.send(b"".join(goaway_frames(stream_id, 999)) + last)
        conn.log("stream %d: 1000 GOAWAY frames sent (the last refusing it), closing" % stream_id)
        conn.shutdown_write()

    def rst_flood(conn, stream_id):
        conn.send(frame(RST_STREAM, 0, stream_id, struct.pack(">I", CANCEL)))
        # Idle streams: client-initiated ids the client has not opened.
        ids = range(stream_id + 2, stream_id + 2 + 2 * 10000, 2)
        frames = [frame(RST_STREAM, 0, other, struct.pack(">I", CANCEL)) for other in ids]
        for start in range(0, len(frames), 1000):
            conn.send(b"".join(frames[start:start + 1000]))
        conn.log("stream %d: RST_STREAM and 10000 more for idle streams sent" % stream_id)

    SETTINGS_FLOOD = frame(SETTINGS, 0, 0, struct.pack(">HI", 0x3, 100)) * 100000
    PING_FLOOD = b"".join(frame(PING, 0, 0, struct.pack(">Q", index)) for index in range(100000))

    def settings_flood(conn, stream_id):
        conn.send(SETTINGS_FLOOD)
        conn.log("stream %d: 100000 SETTINGS sent" % stream_id)
        ok(conn, stream_id)

    def ping_flood(conn, stream_id):
        conn.send(PING_FLOOD)
        conn.log("stream %d: 100000 PING sent" % stream_id)
        ok(conn, stream_id)

    # 16 KiB of valid HPACK: one literal field (no indexing) "x-junk: aaa..." filling the frame.
    JUNK_VALUE_LENGTH = MAX_FRAME - 1 - 1 - len(b"x-junk") - len(encode_integer(16373, 7))
    JUNK_BLOCK = literal(b"x-junk", b"a" * JUNK_VALUE_LENGTH)
    assert len(JUNK_BLOCK) == MAX_FRAME

    def continuation_flood(conn, stream_id):
        # HEADERS without END_HEADERS, then CONTINUATION frames until the client closes. The whole
        # flood holds the write lock: nothing may come between a HEADERS and its CONTINUATIONs.
        batch = frame(CONTINUATION, 0, stream_id, JUNK_BLOCK) * 16
        sent = 0
        deadline = time.monotonic() + SAFETY_LIMIT
        with conn.write_lock:
            try:
                conn.sock.sendall(frame(HEADERS, 0, stream_id, response_head(conn, 200)))
                while time.monotonic() < deadline:
                    conn.sock.sendall(batch)
                    sent += 16
                why = "the safety limit"
            except OSError as error:
                conn.gone.set()
                why = repr(error)
        conn.log("stream %d: CONTINUATION flood stopped after %d frames: %s" % (stream_id, sent, why))

    def hpack_bomb(conn, stream_id):
        # A 4000-byte value indexed into the client's dynamic table (4038 of its 4096 bytes), then
        # referenced 10000 times (index 62, one byte each): 14 KB on the wire, 40 MB of fields.
        bomb = literal(b"x-bomb", b"b" * 4000, indexing=True)
        block = response_head(conn, 200) + bomb + b"\xbe" * 10000
        conn.send(split_header_block(stream_id, block, True))
        conn.log("stream %d: HPACK bomb sent (%d bytes, %d bytes of fields)" % (stream_id, len(block), 10000 * (6 + 4000)))

    def window_overflow(conn, stream_id):
        # Each increment alone takes a window from 65535 past 2^31 - 1 (RFC 9113 section 6.9.1).
        conn.send(frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">I", 0x7FFFFFFF))
                  + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x7FFFFFFF)))
        conn.log("stream %d: overflowing WINDOW_UPDATE frames sent" % stream_id)

    def data_after_end(conn, stream_id):
        ok(conn, stream_id)
        conn.send(frame(DATA, 0, stream_id, b"after the end\n") + frame(DATA, END_STREAM, stream_id, b"and more\n"))
        conn.log("stream %d: DATA after END_STREAM sent" % stream_id)

    def never_ends(conn, stream_id):
        conn.send(split_header_block(stream_id, response_head(conn, 200, literal(b"content-type", b"text/plain")), False))
        deadline = time.monotonic() + SAFETY_LIMIT
        tick = 0
        while conn.stream_open(stream_id) and time.monotonic() < deadline:
            conn.send(frame(DATA, 0, stream_id, b"tick %d\n" % tick))
            tick += 1
            time.sleep(0.1)
        conn.log("stream %d: /never-ends stopped after %d chunks" % (stream_id, tick))

    def silent(conn, stream_id):
        conn.send(split_header_block(stream_id, response_head(conn, 200, literal(b"content-type", b"text/plain")), False))
        deadline = time.monotonic() + SAFETY_LIMIT
        while conn.stream_open(stream_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        conn.log("stream %d: /silent ended" % stream_id)

    ROUTES = {
        "/ok": ok,
        "/silent": silent,
        "/goaway-storm": goaway_storm,
        "/goaway-storm-refuse": goaway_storm_refuse,
        "/rst-flood": rst_flood,
        "/settings-flood": settings_flood,
        "/ping-flood": ping_flood,
        "/continuation-flood": continuation_flood,
        "/hpack-bomb": hpack_bomb,
        "/window-overflow": window_overflow,
        "/data-after-end": data_after_end,
        "/never-ends": never_ends,
    }

    def main():
        port = int(sys.argv[1])
        listener = socket.create_server(("127.0.0.1", port), backlog=128)
        log("h2-fault-server ready %d" % port)
        while True:
            try:
                sock, address = listener.accept()
                sock.setblocking(True)
                threading.Thread(target=Connection(sock, address).serve, daemon=True).start()
            except Exception as error:
                log("accept: %r" % error)

    main()
    """#

    /// Starts the server; throws when python3 is missing or the server does not come up.
    public init() throws(TestServerError) {
        let python = try pythonInterpreter(importing: ["socket", "struct", "threading"], missing: "Python 3")
        let directory = TestRun.makeDirectory("h2-fault")
        let port = freeLoopbackPort()
        let pid = try startServerProcess(python, ["-c", Self.program, "\(port)"], directory: directory, output: directory.appendingPathComponent("server.log"))
        self.pid = pid
        self.port = port
        self.directory = directory
        // The program prints the marker once the port listens.
        guard waitForReadyMarker(Self.readyMarker, in: directory.appendingPathComponent("server.log"), pid: pid) else {
            let output = log()
            stop()
            throw TestServerError("the HTTP/2 fault server did not start on 127.0.0.1:\(port): see \(directory.path)/server.log\n\(output)")
        }
    }

    /// The server's output: the ready line, then one line per connection event and per request.
    public func log() -> String {
        (try? String(contentsOf: directory.appendingPathComponent("server.log"), encoding: .utf8)) ?? ""
    }

    /// A request as the server logged it.
    public struct LoggedRequest: Sendable, Equatable {
        /// The connection's number, as in the `x-connection` response header.
        public var connection: Int
        public var stream: Int
        /// The `:path`, query included.
        public var path: String
    }

    /// The requests whose path (query included) contains `marker`, in the order the server read
    /// them. A request is logged before anything answers it.
    public func requests(pathContaining marker: String) -> [LoggedRequest] {
        log().split(separator: "\n").compactMap { line -> LoggedRequest? in
            // conn <n>: stream <id>: <METHOD> <path>
            let words = line.split(separator: " ")
            guard words.count == 6, words[0] == "conn", words[2] == "stream", words[1].hasSuffix(":"), words[3].hasSuffix(":"),
                  words[4].allSatisfy({ $0.isUppercase }), words[5].contains(marker),
                  let connection = Int(words[1].dropLast()), let stream = Int(words[3].dropLast()) else { return nil }
            return LoggedRequest(connection: connection, stream: stream, path: String(words[5]))
        }
    }

    /// True once the server has seen connection `number` end (the client closed or reset it).
    public func hasClosed(connection number: Int) -> Bool {
        log().split(separator: "\n").contains { $0.hasPrefix("conn \(number): closed") }
    }

    /// True once the client has reset `stream` of connection `number` (RST_STREAM).
    public func hasSeenReset(connection number: Int, stream: Int) -> Bool {
        log().split(separator: "\n").contains { $0.hasPrefix("conn \(number): stream \(stream): reset by the client") }
    }

    public func stop() {
        ChildProcesses.stop(pid)
        ChildProcesses.forget(pid)
    }
}
