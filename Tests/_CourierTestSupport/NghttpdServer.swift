import Foundation

/// nghttpd (Debian's nghttp2-server) on 127.0.0.1: nghttp2's own HTTP/2 server, serving a
/// document root over TLS with the test PKI, and stopped by PID.
public final class NghttpdServer: Sendable {
    public let port: Int
    public let pid: Int32
    public let root: URL

    /// Starts nghttpd on a free port with `files` (name → bytes) in its document root.
    public init(files: [String: [UInt8]], tls: Bool = true) throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/nghttpd") || FileManager.default.isExecutableFile(atPath: "/usr/bin/nghttpd") else {
            throw TestServerError("nghttpd is not installed (apt-get install nghttp2-server)")
        }
        let binary = FileManager.default.isExecutableFile(atPath: "/usr/bin/nghttpd") ? "/usr/bin/nghttpd" : "/usr/sbin/nghttpd"
        let pki = try TestCertificates.make()
        let directory = TestRun.makeDirectory("nghttpd")
        root = directory.appendingPathComponent("root")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        for (name, bytes) in files {
            _ = FileManager.default.createFile(atPath: root.appendingPathComponent(name).path, contents: Data(bytes))
        }
        let port = freeLoopbackPort()
        var arguments = ["--address=127.0.0.1", "-d", root.path]
        arguments += tls ? [String(port), pki.serverKey, pki.serverPEM] : ["--no-tls", String(port)]
        self.pid = try startServerProcess(binary, arguments, directory: directory)
        self.port = port
        guard waitForListener(port: port) else {
            stop()
            throw TestServerError("nghttpd did not start on port \(port)")
        }
    }

    public func url(_ path: String, scheme: String = "https") -> URL { URL(string: "\(scheme)://127.0.0.1:\(port)\(path)")! }

    public func stop() {
        ChildProcesses.stop(pid)
        ChildProcesses.forget(pid)
    }

    deinit { stop() }
}
