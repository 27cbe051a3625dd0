import CourierSync
import Foundation
import Glibc

/// httpbin (PyPI `httpbin` 0.10) on 127.0.0.1, served by waitress, run by the test harness and
/// stopped by PID.
///
/// waitress is one process with worker threads, so the PID the harness records is the whole
/// server: stopping it leaves no worker behind (gunicorn's pre-fork workers would outlive a
/// SIGKILL of their master for a while). `scripts/lib/ensure-system.sh test` installs both
/// packages for the `python3` on `PATH`, which is the interpreter used here.
///
/// Useful endpoints: `/get`, `/anything/…` (echoes method, headers, body as JSON), `/headers`,
/// `/redirect/N` (N relative hops then `/get`), `/absolute-redirect/N`,
/// `/redirect-to?url=…&status_code=…` (point it at 127.0.0.1 only), `/status/NNN`, `/gzip`,
/// `/deflate`, `/brotli` (JSON with `"gzipped"`, `"deflated"`, `"brotli"`: true).
public final class HttpbinServer: Sendable {
    public let port: Int
    public let directory: URL
    public let pid: Int32

    private static let sharedServer = Mutex<Result<HttpbinServer, TestServerError>?>(nil)

    /// The server shared by a test process, started on first use.
    public static func shared() throws -> HttpbinServer {
        try sharedServer.withLock { cached in
            if let cached { return try cached.get() }
            let result = Result { () throws(TestServerError) -> HttpbinServer in try HttpbinServer() }
            cached = result
            return try result.get()
        }
    }

    /// The base URL, e.g. `http://127.0.0.1:PORT`.
    public var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// `path` may carry a query, e.g. `/redirect-to?url=…`.
    public func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

    /// Starts httpbin; throws when it is not installed or does not answer.
    public init() throws(TestServerError) {
        let python = try pythonInterpreter(importing: ["httpbin", "waitress"], missing: "httpbin or waitress")
        let directory = TestRun.makeDirectory("httpbin")
        let port = freeLoopbackPort()
        let arguments = ["-m", "waitress", "--listen=127.0.0.1:\(port)", "--threads=8", "httpbin:app"]
        self.pid = try startServerProcess(python, arguments, directory: directory)
        self.port = port
        self.directory = directory
        // Importing Flask takes a second or more on a busy machine; the first answer to /get
        // says the application is loaded, not only that the socket listens.
        guard waitForHTTPAnswer(port: port, path: "/get", timeout: 30) else {
            stop()
            throw TestServerError("httpbin did not answer on port \(port): try `\(python) \(arguments.joined(separator: " "))`")
        }
    }

    /// Stops the server.
    public func stop() {
        ChildProcesses.stop(pid)
        ChildProcesses.forget(pid)
    }
}

/// Sends `GET path` to 127.0.0.1:`port` over a raw socket until an HTTP response head comes
/// back or `timeout` passes; any status counts as an answer.
public func waitForHTTPAnswer(port: Int, path: String, timeout: TimeInterval = 10) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n".utf8)
    while Date() < deadline {
        if httpAnswerPrefix(port: port, request: request, deadline: deadline).hasPrefix("HTTP/1.") { return true }
        usleep(50_000)
    }
    return false
}

/// The first bytes of the answer to `request`, or "" when the connection fails.
private func httpAnswerPrefix(port: Int, request: [UInt8], deadline: Date) -> String {
    guard let fd = connectToLoopback(port: port) else { return "" }
    defer { close(fd) }
    let sent = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    guard sent == request.count else { return "" }
    var received: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 512)
    while received.count < 12 {
        let remaining = deadline.timeIntervalSinceNow
        guard remaining > 0 else { break }
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, Int32(min(remaining, 5) * 1000)) > 0 else { break }
        let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { break }
        received += chunk[..<count]
    }
    return String(decoding: received, as: UTF8.self)
}
