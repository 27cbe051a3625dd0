import CourierSync
import Foundation
import Glibc

/// A TCP peer for `URLSessionStreamTask` tests on 127.0.0.1 (a Python 3 program, standard
/// library only, one thread per connection), run by the test harness and stopped by PID.
///
/// Four ports:
/// - ``echoPort``: plain TCP; echoes every byte as it arrives. When the client half-closes,
///   it sends `BYE\n` and closes.
/// - ``tlsEchoPort``: the same over TLS from the first byte (the test CA's `server.pem`, no
///   ALPN). After `BYE\n` it sends close_notify, then closes.
/// - ``startTLSPort``: a STARTTLS-style line protocol. The server sends `HELLO\n`; each line
///   (LF or CRLF) is answered in plaintext with `ECHO <line>\n`, except `STARTTLS`, answered
///   with `GO\n`, after which the server takes the TLS handshake (as a server, the same
///   certificate) and behaves as ``tlsEchoPort``. The plaintext phase never reads past a
///   line's LF, so TLS bytes sent straight after `STARTTLS\n` are not lost. Client EOF in the
///   plaintext phase closes the connection without `BYE`.
/// - ``sourcePort``: the first line the client sends is a command:
///   - `SEND <n>`: sends n bytes of ``sourcePattern(count:)`` (n up to 64 MiB and more),
///     then closes (a full close: FIN after the data).
///   - `HOLD`: reads and discards everything, never writes, closes when the client closes
///     (or half-closes). The server keeps reading, so this gives no write back-pressure.
///   - `STALL`: never reads and never writes, so the client's writes back up once the socket
///     buffers fill (about 4 MB on loopback); closes when the client's FIN or reset arrives,
///     or after 300 seconds (a FIN queued behind unsent bytes never arrives).
///   - `RESET`: closes at once with a TCP reset (SO_LINGER 0).
///   Anything else closes the connection.
///
/// On both TLS ports the client must end its side with close_notify (as `closeWrite()` does):
/// OpenSSL 3 takes a bare FIN as a fatal error, answers with a decode_error alert and sends no
/// `BYE` (`server.log` shows `SSLEOFError`).
///
/// TLS clients trust the server through the test CA: ``certificates`` (made with
/// `TestCertificates.make()`, which also puts the test CA in this process's system trust
/// store, as for ``WebSocketEchoServer``); `certificates.caPEM` is the CA file alone.
public final class StreamEchoServer: Sendable {
    /// Plain TCP echo; `BYE\n` and close after the client half-closes.
    public let echoPort: Int
    /// TLS echo (TLS from the first byte); `BYE\n`, close_notify and close after the client's EOF.
    public let tlsEchoPort: Int
    /// `HELLO\n`, then `ECHO <line>\n` per line until `STARTTLS` → `GO\n` → TLS echo.
    public let startTLSPort: Int
    /// `SEND <n>` / `HOLD` / `STALL` / `RESET`.
    public let sourcePort: Int
    /// The test PKI the TLS ports use (`server.pem` / `server.key`; trust `caPEM`).
    public let certificates: TestCertificates
    /// The server's folder, with `server.log` (see ``log()``) and `server.pid`.
    public let directory: URL
    /// The Python process (all four ports).
    public let pid: Int32

    private static let sharedServer = Mutex<Result<StreamEchoServer, TestServerError>?>(nil)

    /// The server shared by a test process, started on first use.
    public static func shared() throws -> StreamEchoServer {
        try sharedServer.withLock { cached in
            if let cached { return try cached.get() }
            let result = Result { () throws(TestServerError) -> StreamEchoServer in try StreamEchoServer() }
            cached = result
            return try result.get()
        }
    }

    /// The first `count` bytes ``sourcePort`` sends for `SEND <count>`: byte i is
    /// (i * 7 + 3) mod 256.
    public static func sourcePattern(count: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
    }

    /// Printed (alone on a line, with the ports after it) once all four ports listen.
    private static let readyMarker = "stream-echo-server ready"

    // Arguments: echo port, TLS echo port, STARTTLS port, source port, certificate, key.
    private static let program = #"""
    import select, socket, ssl, struct, sys, threading

    PATTERN = bytes((i * 7 + 3) % 256 for i in range(256)) * 256  # 64 KiB; starts every 256 bytes
    STALL_LIMIT = 300.0

    log_lock = threading.Lock()

    def log(kind, message):
        with log_lock:
            print("%s: %s" % (kind, message), file=sys.stderr, flush=True)

    def receive_exactly(sock, count):
        data = b""
        while len(data) < count:
            piece = sock.recv(count - len(data))
            if not piece:
                raise ConnectionError("end of stream inside a line")
            data += piece
        return data

    def read_line(sock):
        # One line without its LF (and a CR before it), or None at end of stream. Peeks first,
        # so it never takes a byte past the LF off the socket.
        line = b""
        while True:
            peeked = sock.recv(4096, socket.MSG_PEEK)
            if not peeked:
                return None
            end = peeked.find(b"\n")
            line += receive_exactly(sock, len(peeked) if end < 0 else end + 1)
            if end >= 0:
                line = line[:-1]
                return line[:-1] if line.endswith(b"\r") else line
            if len(line) > 1 << 20:
                raise ValueError("line longer than 1 MiB")

    def echo(sock):
        while True:
            data = sock.recv(65536)
            if not data:
                break
            sock.sendall(data)
        sock.sendall(b"BYE\n")

    def plain_echo(conn):
        echo(conn)
        try:
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the client closed both ways and its reset came back first

    def tls_echo(conn):
        tls = context.wrap_socket(conn, server_side=True)
        try:
            echo(tls)
            tls.settimeout(5)
            try:
                tls.unwrap()  # close_notify (the client's EOF came first, so this does not wait)
            except (OSError, ValueError):
                pass
        finally:
            tls.close()

    def start_tls(conn):
        conn.sendall(b"HELLO\n")
        while True:
            line = read_line(conn)
            if line is None:
                return
            if line == b"STARTTLS":
                conn.sendall(b"GO\n")
                tls_echo(conn)
                return
            conn.sendall(b"ECHO " + line + b"\n")

    def drain_waiting(conn):
        # Takes the bytes already received, so the close that follows is a FIN, not a reset.
        conn.setblocking(False)
        try:
            while conn.recv(65536):
                pass
        except BlockingIOError:
            pass
        finally:
            conn.setblocking(True)

    def source(conn):
        line = read_line(conn)
        if line is None:
            return
        words = line.split()
        if len(words) == 2 and words[0] == b"SEND" and words[1].isdigit():
            remaining = int(words[1])
            while remaining > 0:
                piece = PATTERN if remaining >= len(PATTERN) else PATTERN[:remaining]
                conn.sendall(piece)
                remaining -= len(piece)
            conn.shutdown(socket.SHUT_WR)
            drain_waiting(conn)
        elif words == [b"HOLD"]:
            while conn.recv(65536):
                pass
        elif words == [b"STALL"]:
            poller = select.poll()
            poller.register(conn, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
            poller.poll(STALL_LIMIT * 1000)
        elif words == [b"RESET"]:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            log("source", "unknown command %r" % line)

    def run(kind, handler, conn):
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            handler(conn)
        except Exception as error:
            log(kind, repr(error))
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def accept(kind, listener, handler):
        while True:
            try:
                conn, _ = listener.accept()
                conn.setblocking(True)
                threading.Thread(target=run, args=(kind, handler, conn), daemon=True).start()
            except Exception as error:
                log(kind, "accept: %r" % error)

    echo_port, tls_port, start_tls_port, source_port = (int(value) for value in sys.argv[1:5])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[5], sys.argv[6])
    servers = [("echo", echo_port, plain_echo), ("tls", tls_port, tls_echo),
               ("starttls", start_tls_port, start_tls), ("source", source_port, source)]
    listeners = [(kind, socket.create_server(("127.0.0.1", port), backlog=128), handler) for kind, port, handler in servers]
    for kind, listener, handler in listeners:
        threading.Thread(target=accept, args=(kind, listener, handler), daemon=True).start()
    print("stream-echo-server ready %d %d %d %d" % (echo_port, tls_port, start_tls_port, source_port), flush=True)
    threading.Event().wait()
    """#

    /// Starts the server; throws when python3 is missing or the server does not come up.
    public init() throws(TestServerError) {
        let python = try pythonInterpreter(importing: ["ssl"], missing: "Python's ssl module")
        let certificates: TestCertificates
        do {
            certificates = try TestCertificates.make()
        } catch {
            throw TestServerError("the test certificates cannot be made: \(error)")
        }
        let directory = TestRun.makeDirectory("stream-echo")
        let echoPort = freeLoopbackPort()
        let tlsEchoPort = freeLoopbackPort()
        let startTLSPort = freeLoopbackPort()
        let sourcePort = freeLoopbackPort()
        let arguments = ["-c", Self.program, "\(echoPort)", "\(tlsEchoPort)", "\(startTLSPort)", "\(sourcePort)",
                         certificates.serverPEM, certificates.serverKey]
        let pid = try startServerProcess(python, arguments, directory: directory, output: directory.appendingPathComponent("server.log"))
        self.pid = pid
        self.echoPort = echoPort
        self.tlsEchoPort = tlsEchoPort
        self.startTLSPort = startTLSPort
        self.sourcePort = sourcePort
        self.certificates = certificates
        self.directory = directory
        // The program prints the marker once all four ports listen.
        guard waitForReadyMarker(Self.readyMarker, in: directory.appendingPathComponent("server.log"), pid: pid) else {
            let output = log()
            stop()
            throw TestServerError("the stream echo server did not start on 127.0.0.1:\(echoPort), \(tlsEchoPort), \(startTLSPort), \(sourcePort): see \(directory.path)/server.log\n\(output)")
        }
    }

    /// The server's output: the ready line, then one line per connection that ended in an
    /// error (`kind: error`), e.g. a client that reset or failed the TLS handshake.
    public func log() -> String {
        (try? String(contentsOf: directory.appendingPathComponent("server.log"), encoding: .utf8)) ?? ""
    }

    public func stop() {
        ChildProcesses.stop(pid)
        ChildProcesses.forget(pid)
    }
}
