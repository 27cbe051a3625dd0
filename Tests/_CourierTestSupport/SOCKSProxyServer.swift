import CourierSync
import Foundation
import Glibc

/// A SOCKS5 proxy on 127.0.0.1 (PyPI `pproxy` 2.7), run by the test harness and stopped by PID.
///
/// One pproxy process listens on two ports: ``openPort`` takes requests without
/// authentication, and ``authPort`` only after the username/password method (RFC 1929) with
/// ``user`` / ``password``. Both accept IPv4, IPv6 and domain-name destinations and resolve
/// names themselves. `scripts/lib/ensure-system.sh test` installs pproxy for the `python3` on
/// `PATH`, which is the interpreter used here (as for ``HttpbinServer``).
///
/// pproxy's ways, which tests have to allow for:
/// - It sends the success reply (REP 0) before it connects to the destination, echoing the
///   request's address (a domain-name reply to a domain-name request); an unreachable or
///   unresolvable destination shows as the connection closing after that reply, never as a
///   SOCKS error code.
/// - On ``authPort`` a greeting without the username/password method, or wrong credentials,
///   make it close the connection without a reply (no 0xFF method, no failure status).
/// - By default pproxy lets a client address that once authenticated in without credentials
///   for 30 days; it is started with `--auth=-1`, so every connection must authenticate.
public final class SOCKSProxyServer: Sendable {
    /// The user name ``authPort`` accepts.
    public static let user = "socksuser"
    /// The password of ``user``.
    public static let password = "socks-secret"

    /// Takes requests without authentication.
    public let openPort: Int
    /// Takes requests only after authenticating as ``user`` / ``password``.
    public let authPort: Int
    /// pproxy's folder, with `pproxy.log` (see ``log()``).
    public let directory: URL
    /// The pproxy process (both ports).
    public let pid: Int32

    private static let sharedServer = Mutex<Result<SOCKSProxyServer, TestServerError>?>(nil)

    /// The server shared by a test process, started on first use.
    public static func shared() throws -> SOCKSProxyServer {
        try sharedServer.withLock { cached in
            if let cached { return try cached.get() }
            let result = Result { () throws(TestServerError) -> SOCKSProxyServer in try SOCKSProxyServer() }
            cached = result
            return try result.get()
        }
    }

    /// Starts pproxy; throws when it is not installed or does not listen on both ports.
    public init() throws(TestServerError) {
        let python = try pythonInterpreter(importing: ["pproxy"], missing: "pproxy")
        let directory = TestRun.makeDirectory("pproxy")
        let openPort = freeLoopbackPort()
        let authPort = freeLoopbackPort()
        // -u: unbuffered, so the log is current; -v: one line per connection.
        let arguments = [
            "-u", "-m", "pproxy", "-v", "--auth=-1",
            "-l", "socks5://127.0.0.1:\(openPort)",
            "-l", "socks5://127.0.0.1:\(authPort)#\(Self.user):\(Self.password)",
        ]
        let pid = try startServerProcess(python, arguments, directory: directory, output: directory.appendingPathComponent("pproxy.log"))
        self.pid = pid
        self.openPort = openPort
        self.authPort = authPort
        self.directory = directory
        // Importing pproxy takes a few hundred milliseconds.
        let deadline = Date().addingTimeInterval(20)
        var listening = false
        while Date() < deadline, !Self.hasExited(pid) {
            if waitForListener(port: openPort, timeout: 0.25), waitForListener(port: authPort, timeout: 0.25) {
                listening = true
                break
            }
        }
        guard listening else {
            let output = self.log()
            stop()
            throw TestServerError("pproxy did not listen on 127.0.0.1:\(openPort) and 127.0.0.1:\(authPort): try `\(python) \(arguments.joined(separator: " "))`\n\(output)")
        }
    }

    /// pproxy's output. At start it prints `Serving on … 127.0.0.1:PORT by socks5` per port;
    /// then, for each request it accepts, before connecting:
    ///
    ///     socks5 127.0.0.1:51464 -> localhost:39200
    ///
    /// (the client's address and port, then the destination as the client sent it: a name
    /// stays a name, so a `socks5h`-style request shows the host name and a locally resolved one
    /// the address). Refusals and failures look like `Unauthorized SOCKS from 127.0.0.1`,
    /// `Unauthorized SOCKS b'user':b'wrong' from 127.0.0.1`, `[Errno 111] Connect call failed
    /// ('127.0.0.1', 1) from 127.0.0.1`. The harness's start-up probes (a connection opened and
    /// closed on each port) leave `Unsupported protocol from 127.0.0.1`.
    public func log() -> String {
        (try? String(contentsOf: directory.appendingPathComponent("pproxy.log"), encoding: .utf8)) ?? ""
    }

    /// The destinations of the accepted requests, oldest first, as `host:port` the way the
    /// clients sent them (e.g. "localhost:39200", "127.0.0.1:39200", "::1:39200").
    public func destinations() -> [String] {
        self.log().split(separator: "\n").compactMap { line -> String? in
            guard line.hasPrefix("socks5 "), let arrow = line.range(of: " -> ") else { return nil }
            return String(line[arrow.upperBound...])
        }
    }

    /// Stops the server.
    public func stop() {
        ChildProcesses.stop(pid)
        ChildProcesses.forget(pid)
    }

    private static func hasExited(_ pid: Int32) -> Bool {
        var status: Int32 = 0
        return waitpid(pid, &status, WNOHANG) == pid || kill(pid, 0) != 0
    }
}
