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
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = ["s_server", "-accept", "127.0.0.1:\(port)", "-cert", certificate, "-key", key, "-www", "-quiet"] + arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        self.pid = process.processIdentifier
        self.port = port
        ChildProcesses.track(pid)
        let directory = TestRun.makeDirectory("s_server")
        try? String(pid).write(to: directory.appendingPathComponent("server.pid"), atomically: true, encoding: .utf8)
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
