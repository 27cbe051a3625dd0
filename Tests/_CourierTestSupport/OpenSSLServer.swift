import Foundation
import Glibc

/// `openssl s_server` on 127.0.0.1: a real TLS peer for handshakes nginx will not produce,
/// such as refusing a connection without a client certificate (`-Verify`).
public final class OpenSSLServer: Sendable {
    public let port: Int
    public let pid: Int32

    /// Starts `openssl s_server -www` with `arguments` added; throws when it does not come up.
    public init(certificate: String, key: String, arguments: [String]) throws {
        let port = freeLoopbackPort()
        self.pid = try startServerProcess(
            "/usr/bin/openssl",
            ["s_server", "-accept", "127.0.0.1:\(port)", "-cert", certificate, "-key", key, "-www", "-quiet"] + arguments,
            directory: TestRun.makeDirectory("s_server")
        )
        self.port = port
        guard waitForListener(port: port) else {
            stop()
            throw TestServerError("openssl s_server did not start on port \(port)")
        }
    }

    public func url(_ path: String = "/") -> URL { URL(string: "https://127.0.0.1:\(port)\(path)")! }

    public func stop() {
        ChildProcesses.stop(pid)
        ChildProcesses.forget(pid)
    }

    deinit { stop() }
}
