// hop-floor: W1 (sequential GETs on one connection, HTTP/1.1 or HTTP/2) with the least a client
// can do, in three shapes, to measure what the shape itself costs on this machine apart from any
// HTTP library:
//
//   direct  one thread sends, waits in epoll_wait, reads: wrk's shape.
//   hop     each request is an `await` in a Swift task on the global executor: the task sends
//           on its own thread, and a loop thread that reads the socket resumes its
//           continuation, which puts the task back on a thread of the cooperative pool. This
//           is the path of any async API that does its I/O on a thread of its own, URLSession's
//           `data(for:)` among them.
//   loop    the same task, preferring a task executor that is the loop thread itself: the
//           continuation resumes on the thread that read the response (Courier-loop's shape).
//
// The socket work is the same in all three (one write, epoll_wait, one read a request; the
// response's end found from its Content-Length), so the differences between them are the
// threads'. An https URL puts OpenSSL's records in between (SSL_write and SSL_read, with the
// CA of BENCH_CA_FILE, else SSL_CERT_FILE), under a lock, since two threads use the connection.
// The TLS handshake offers "h2" and "http/1.1" by ALPN; a server that picks "h2" is spoken to
// through nghttp2 (HTTP2.swift), one stream at a time, as h2load does with one stream.
// Usage: hop-floor direct|hop|loop http[s]://IPv4:PORT/PATH COUNT. Prints one JSON line like the
// other clients (requests, seconds, bytes, errors).

import BenchSupport
import CHopFloor
import Glibc
import Synchronization

struct Target {
    var address = sockaddr_in()
    var host: String
    var path: String
    var hostField: String
    var secure: Bool

    /// `http[s]://A.B.C.D:PORT/PATH`: a numeric IPv4 address, as the harness's URLs are.
    init?(_ url: String) {
        secure = url.hasPrefix("https://")
        guard secure || url.hasPrefix("http://") else { return nil }
        let rest = url.dropFirst(secure ? 8 : 7)
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = String(rest[..<slash])
        path = slash < rest.endIndex ? String(rest[slash...]) : "/"
        hostField = authority
        let parts = authority.split(separator: ":", maxSplits: 1)
        guard parts.count == 2, let port = UInt16(parts[1]) else { return nil }
        host = String(parts[0])
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, String(parts[0]), &address.sin_addr) == 1 else { return nil }
    }
}

/// Fails the run with a message on standard error.
func fail(_ message: String) -> Never {
    let line = Array("hop-floor: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(1)
}

/// One keep-alive connection: the request's bytes, and a buffer the responses are read into.
final class Connection: @unchecked Sendable {
    let descriptor: Int32
    let request: [UInt8]
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)
    var filled = 0
    var bodyBytes = 0
    /// The TLS session of an https connection, used under `lock`.
    var tls: OpaquePointer?
    /// The HTTP/2 session when the server picked "h2", used under `lock`.
    var http2: HTTP2Client?
    let lock = Mutex(())

    init(_ target: Target) {
        request = Array("GET \(target.path) HTTP/1.1\r\nHost: \(target.hostField)\r\nUser-Agent: hop-floor\r\nAccept: */*\r\n\r\n".utf8)
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { fail("socket: \(String(cString: strerror(errno)))") }
        self.descriptor = descriptor
        var address = target.address
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { fail("connect: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        if target.secure {
            let tls = Self.handshake(descriptor, target)
            self.tls = tls
            var protocolName: UnsafePointer<UInt8>?
            var length: UInt32 = 0
            SSL_get0_alpn_selected(tls, &protocolName, &length)
            if length == 2, let protocolName, memcmp(protocolName, "h2", 2) == 0 {
                let http2 = HTTP2Client(target)
                http2.flush(tls)
                self.http2 = http2
            }
        }
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
    }

    /// A verified TLS session on the (still blocking) socket.
    static func handshake(_ descriptor: Int32, _ target: Target) -> OpaquePointer {
        guard let context = SSL_CTX_new(TLS_client_method()) else { fail("SSL_CTX_new failed") }
        guard let caFile = getenv("BENCH_CA_FILE") ?? getenv("SSL_CERT_FILE"),
              SSL_CTX_load_verify_locations(context, caFile, nil) == 1 else {
            fail("https needs BENCH_CA_FILE or SSL_CERT_FILE naming a readable CA file")
        }
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        let protocols: [UInt8] = [2] + Array("h2".utf8) + [8] + Array("http/1.1".utf8)
        guard SSL_CTX_set_alpn_protos(context, protocols, UInt32(protocols.count)) == 0 else { fail("SSL_CTX_set_alpn_protos failed") }
        guard let session = SSL_new(context) else { fail("SSL_new failed") }
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(session), target.host)
        SSL_set_fd(session, descriptor)
        guard SSL_connect(session) == 1 else {
            fail("TLS handshake failed (verification result \(SSL_get_verify_result(session)))")
        }
        return session
    }

    func send() {
        if let http2, let tls {
            lock.withLock { _ in
                http2.submitRequest()
                http2.flush(tls)
            }
            return
        }
        let written = request.withUnsafeBytes { bytes -> Int in
            guard let tls else { return Glibc.send(descriptor, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) }
            return lock.withLock { _ in
                ERR_clear_error()
                let written = SSL_write(tls, bytes.baseAddress, Int32(bytes.count))
                if written <= 0 { fail("SSL_write: \(Self.tlsFailure(tls, written))") }
                return Int(written)
            }
        }
        guard written == request.count else {
            fail(written < 0 ? "send: \(String(cString: strerror(errno)))" : "send wrote \(written) of \(request.count) bytes")
        }
    }

    /// Reads what the socket holds; true once a whole response is in, which is then dropped.
    func readResponse() -> Bool {
        guard filled < buffer.count else { fail("a response larger than \(buffer.count) bytes") }
        guard let tls else {
            let count = read(descriptor, buffer.baseAddress! + filled, buffer.count - filled)
            if count < 0 && errno == EAGAIN { return false }
            guard count > 0 else { fail(count == 0 ? "the server closed the connection" : "read: \(String(cString: strerror(errno)))") }
            return received(count)
        }
        return lock.withLock { _ in
            // Record by record until OpenSSL wants more from the socket or the response is whole.
            if let http2 { return readHTTP2(tls, http2) }
            while true {
                guard filled < buffer.count else { fail("a response larger than \(buffer.count) bytes") }
                ERR_clear_error()
                let count = SSL_read(tls, buffer.baseAddress! + filled, Int32(buffer.count - filled))
                if count <= 0 {
                    if SSL_get_error(tls, count) == SSL_ERROR_WANT_READ { return false }
                    fail("SSL_read: \(Self.tlsFailure(tls, count))")
                }
                if received(Int(count)) { return true }
            }
        }
    }

    /// `readResponse` over HTTP/2, under `lock`: what nghttp2 asks to send in answer (a SETTINGS
    /// acknowledgement, a WINDOW_UPDATE) goes out before the response is reported whole.
    func readHTTP2(_ tls: OpaquePointer, _ http2: HTTP2Client) -> Bool {
        var whole = false
        // Until OpenSSL wants more from the socket, or the stream has closed and OpenSSL holds
        // nothing more already read (which epoll would not report).
        repeat {
            ERR_clear_error()
            let count = SSL_read(tls, buffer.baseAddress!, Int32(buffer.count))
            if count <= 0 {
                if SSL_get_error(tls, count) == SSL_ERROR_WANT_READ { break }
                fail("SSL_read: \(Self.tlsFailure(tls, count))")
            }
            whole = http2.receive(UnsafeRawBufferPointer(rebasing: buffer[..<Int(count)]))
        } while !whole || SSL_pending(tls) > 0
        if nghttp2_session_want_write(http2.session) != 0 { http2.flush(tls) }
        if whole { bodyBytes = http2.bodyBytes }
        return whole
    }

    /// What went wrong with an SSL_read or SSL_write that returned `result`.
    static func tlsFailure(_ tls: OpaquePointer, _ result: Int32) -> String {
        switch SSL_get_error(tls, result) {
        case SSL_ERROR_ZERO_RETURN:
            return "the server closed the connection"
        case SSL_ERROR_SYSCALL:
            return errno == 0 ? "the server closed the connection" : String(cString: strerror(errno))
        default:
            var text = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(ERR_get_error(), &text, text.count)
            return text.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        }
    }

    /// Takes `count` bytes just read into the buffer; true once a whole response is in, which
    /// is then dropped.
    func received(_ count: Int) -> Bool {
        filled += count
        guard let (length, body) = responseLength() else { return false }
        bodyBytes = body
        filled -= length
        if filled > 0 { memmove(buffer.baseAddress!, buffer.baseAddress! + length, filled) }
        return true
    }

    /// The length of the response at the buffer's start and of its body, once all of it is in:
    /// the head's lines found with `memchr`, Content-Length read where a line starts with it.
    /// Anything but a 200 with a Content-Length ends the run: the floor measures that alone.
    func responseLength() -> (Int, Int)? {
        let base = UnsafeRawPointer(buffer.baseAddress!).assumingMemoryBound(to: UInt8.self)
        var lineStart = 0
        var bodyLength: Int?
        while lineStart < filled {
            guard let newline = memchr(base + lineStart, 0x0A, filled - lineStart) else { return nil }
            let lineEnd = UnsafeRawPointer(newline) - UnsafeRawPointer(base)
            let line = UnsafeBufferPointer(start: base + lineStart, count: lineEnd - lineStart)
            if lineStart == 0 {
                guard line.count >= 12, memcmp(line.baseAddress!, "HTTP/1.1 200", 12) == 0 else {
                    fail("the server answered \(String(decoding: line, as: UTF8.self))")
                }
            } else if line.isEmpty || (line.count == 1 && line[0] == 0x0D) {
                // The empty line: the head ends here.
                guard let bodyLength else { fail("a response without Content-Length") }
                let length = lineEnd + 1 + bodyLength
                return filled >= length ? (length, bodyLength) : nil
            } else if bodyLength == nil, line.count > 15, line[0] | 0x20 == UInt8(ascii: "c"),
                      strncasecmp(UnsafeRawPointer(line.baseAddress!).assumingMemoryBound(to: CChar.self), "content-length:", 15) == 0 {
                let digits = line.dropFirst(15).drop { $0 == UInt8(ascii: " ") }.prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
                guard (1...9).contains(digits.count) else { fail("a Content-Length of \(digits.count) digits") }
                bodyLength = digits.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
            }
            lineStart = lineEnd + 1
        }
        return nil
    }
}

/// Longest wait for a response before the run fails: a server that stops answering ends the
/// run with a message rather than hanging it (and the harness with it).
let responseTimeoutMilliseconds: Int32 = 10_000

func makeEpoll(_ descriptors: Int32...) -> Int32 {
    let epoll = epoll_create1(0)
    for descriptor in descriptors {
        var event = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(fd: descriptor))
        guard epoll_ctl(epoll, EPOLL_CTL_ADD, descriptor, &event) == 0 else { fail("epoll_ctl: \(String(cString: strerror(errno)))") }
    }
    return epoll
}

/// epoll_wait for at most the response timeout, retried when a signal interrupts it; the
/// number of events (0: the time ran out).
func waitForEvents(_ epoll: Int32, _ events: UnsafeMutablePointer<epoll_event>, _ capacity: Int32) -> Int {
    while true {
        let count = epoll_wait(epoll, events, capacity, responseTimeoutMilliseconds)
        if count >= 0 { return Int(count) }
        if errno != EINTR { fail("epoll_wait: \(String(cString: strerror(errno)))") }
    }
}

/// The loop thread of `hop` and `loop`: reads responses and resumes the task waiting for each;
/// for `loop` it also runs the jobs of the task that prefers it.
final class Loop: TaskExecutor, @unchecked Sendable {
    let connection: Connection
    let wakeup = eventfd(0, Int32(EFD_NONBLOCK))
    let epoll: Int32
    let waiter = Mutex<UnsafeContinuation<Int, Never>?>(nil)
    let jobs = Mutex<[UnownedJob]>([])
    /// The loop thread's id, once it runs: a job it enqueues itself needs no wake-up.
    let threadID = Atomic<UInt>(0)

    init(_ connection: Connection) {
        self.connection = connection
        epoll = makeEpoll(connection.descriptor, wakeup)
    }

    func start() {
        var thread = pthread_t()
        let box = Unmanaged.passRetained(self).toOpaque()
        let created = pthread_create(&thread, nil, { argument in Unmanaged<Loop>.fromOpaque(argument!).takeRetainedValue().run() }, box)
        guard created == 0 else { fail("pthread_create: \(String(cString: strerror(created)))") }
    }

    /// One request: the continuation is set before the request leaves, so the loop finds it.
    /// The cancellation handler stands for the one an API that can be cancelled installs for
    /// every request (URLSession's data(for:) does), at the same cost.
    func fetch() async -> Int {
        await withTaskCancellationHandler {
            await withUnsafeContinuation { continuation in
                waiter.withLock { $0 = continuation }
                connection.send()
            }
        } onCancel: {}
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        jobs.withLock { $0.append(unowned) }
        if threadID.load(ordering: .relaxed) != UInt(pthread_self()) {
            var one: UInt64 = 1
            _ = write(wakeup, &one, 8)
        }
    }

    func run() -> Never {
        threadID.store(UInt(pthread_self()), ordering: .relaxed)
        var events = [epoll_event](repeating: epoll_event(), count: 4)
        while true {
            let count = waitForEvents(epoll, &events, Int32(events.count))
            if count == 0 && waiter.withLock({ $0 != nil }) {
                fail("no response in \(responseTimeoutMilliseconds / 1000) s")
            }
            for index in 0..<count {
                if events[index].data.fd == wakeup {
                    var value: UInt64 = 0
                    _ = read(wakeup, &value, 8)
                } else if connection.readResponse() {
                    let continuation = waiter.withLock { value in defer { value = nil }; return value }
                    guard let continuation else { fail("a response came with no request waiting for it") }
                    continuation.resume(returning: connection.bodyBytes)
                }
            }
            while let job = jobs.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) {
                job.runSynchronously(on: asUnownedTaskExecutor())
            }
        }
    }
}

let arguments = CommandLine.arguments
guard arguments.count == 4, ["direct", "hop", "loop"].contains(arguments[1]), let target = Target(arguments[2]),
      let count = Int(arguments[3]), count > 0 else {
    fail("usage: hop-floor direct|hop|loop http[s]://IPv4:PORT/PATH COUNT")
}
// A write to a connection the server has closed fails with EPIPE, reported, rather than killing
// the process silently (OpenSSL's socket writes do not ask for MSG_NOSIGNAL).
signal(SIGPIPE, SIG_IGN)
let connection = Connection(target)

switch arguments[1] {
case "direct":
    let epoll = makeEpoll(connection.descriptor)
    var event = epoll_event()
    func fetch() -> Int {
        connection.send()
        repeat {
            if waitForEvents(epoll, &event, 1) == 0 { fail("no response in \(responseTimeoutMilliseconds / 1000) s") }
        } while !connection.readResponse()
        return connection.bodyBytes
    }
    _ = fetch()
    // sequentialLoads' loop without its await: this shape has no task to suspend.
    var tally = Tally()
    let start = ContinuousClock.now
    for _ in 0..<count {
        tally.bytes += fetch()
        tally.completed += 1
    }
    tally.seconds = seconds(ContinuousClock.now - start)
    emit(tally.fields)
default:
    let loop = Loop(connection)
    loop.start()
    _ = await loop.fetch()
    // As courier-bench does: a @Sendable closure, so that the loads do not run on the main actor.
    let tally = await withTaskExecutorPreference(arguments[1] == "loop" ? loop : nil) {
        await sequentialLoads(count) { @Sendable in await loop.fetch() }
    }
    emit(tally.fields)
}
