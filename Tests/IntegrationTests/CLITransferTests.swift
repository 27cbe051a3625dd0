import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// `courier -T`, `-O`, `-J`, `-r` and `-C -`, as curl users know them, against nginx.
@Suite("courier transfers")
struct CLITransferTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    /// Runs courier in `directory`; fails the test when the executable is missing.
    func courier(_ arguments: [String], in directory: URL? = nil) async throws -> (status: Int32, stdout: String, stderr: String) {
        try #require(try await runCourier(arguments, directory: directory))
    }

    func scratch() -> URL {
        TestRun.makeDirectory("cli-transfer")
    }

    @Test("-T PUTs the file; a URL ending in / gets the file's name")
    func uploadFile() async throws {
        let directory = scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let bytes = deterministicBytes(count: 300_000, seed: 51)
        let name = "upload-\(UUID().uuidString.prefix(8)).bin"
        let file = directory.appendingPathComponent(name)
        try Data(bytes).write(to: file)
        let put = try await courier(["-f", "-T", file.path, nginx.url("/dav/cli/").absoluteString])
        #expect(put.status == 0, "\(put.stderr)")
        let back = directory.appendingPathComponent("back.bin")
        let get = try await courier(["-f", "-o", back.path, nginx.url("/dav/cli/\(name)").absoluteString])
        #expect(get.status == 0, "\(get.stderr)")
        #expect(try Data(contentsOf: back) == Data(bytes))
    }

    @Test("-O names the file after the URL, in the current directory")
    func remoteName() async throws {
        let directory = scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try await courier(["-O", nginx.url("/files/64k.bin").absoluteString], in: directory)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.isEmpty)
        #expect(try Array(Data(contentsOf: directory.appendingPathComponent("64k.bin"))) == NginxServer.fixtures["64k.bin"])
    }

    @Test("-O -J takes the Content-Disposition name, its last component only, and never overwrites")
    func remoteHeaderName() async throws {
        let directory = scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = nginx.url("/disposition/hello.txt").absoluteString
        let run = try await courier(["-O", "-J", url], in: directory)
        #expect(run.status == 0, "\(run.stderr)")
        let named = directory.appendingPathComponent("named by server.txt")
        #expect(try Array(Data(contentsOf: named)) == NginxServer.fixtures["hello.txt"])
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("hello.txt").path))
        #expect(!FileManager.default.fileExists(atPath: directory.deletingLastPathComponent().appendingPathComponent("named by server.txt").path))

        try Data("mine".utf8).write(to: named)
        let again = try await courier(["-O", "-J", url], in: directory)
        #expect(again.status == 23, "\(again.stderr)")
        #expect(again.stderr.contains("refusing to overwrite"))
        #expect(try Data(contentsOf: named) == Data("mine".utf8))
    }

    var courierExecutable: URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("courier")
    }

    @Test("-o into a FIFO writes into it and leaves it a FIFO (as curl: a file is never renamed over the path)")
    func outputIntoFIFO() async throws {
        let directory = scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let fifo = directory.appendingPathComponent("pipe").path
        try #require(mkfifo(fifo, 0o600) == 0)
        let received = Mutex(Data())
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) {
            // Blocks until a writer opens the FIFO.
            guard let handle = FileHandle(forReadingAtPath: fifo) else { return }
            let data = handle.readDataToEndOfFile()
            received.withLock { $0 = data }
        }
        let run = try await courier(["-s", "-o", fifo, nginx.url("/files/64k.bin").absoluteString])
        if group.wait(timeout: .now() + 1) == .timedOut {
            // courier never opened it: a writer of our own lets the reader end.
            let unblock = open(fifo, O_WRONLY | O_NONBLOCK)
            if unblock >= 0 { close(unblock) }
            _ = group.wait(timeout: .now() + 10)
        }
        #expect(run.status == 0, "\(run.stderr)")
        var status = stat()
        #expect(lstat(fifo, &status) == 0 && status.st_mode & S_IFMT == S_IFIFO, "still a FIFO")
        #expect(Array(received.withLock { $0 }) == NginxServer.fixtures["64k.bin"])
    }

    @Test("-o puts a download task's file in place: the bytes whole, the mode of a new file, and no temporary file left")
    func downloadedFileInPlace() async throws {
        let directory = scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let target = directory.appendingPathComponent("sub/one.bin")
        try FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
        // The download's temporary file goes to a directory of the test's own.
        let temporary = directory.appendingPathComponent("tmp")
        try FileManager.default.createDirectory(at: temporary, withIntermediateDirectories: true)
        let run = try #require(try await runCourier(["-s", "-o", target.path, nginx.url("/files/1m.bin").absoluteString], environment: ["TMPDIR": temporary.path]))
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try Array(Data(contentsOf: target)) == NginxServer.fixtures["1m.bin"])
        var status = stat()
        #expect(lstat(target.path, &status) == 0)
        // The umask as /proc tells it (setting it to read it would race with other tests).
        let statusText = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let maskLine = try #require(statusText.split(separator: "\n").first { $0.hasPrefix("Umask:") })
        let mask = try #require(mode_t(maskLine.dropFirst(6).trimmingCharacters(in: .whitespaces), radix: 8))
        #expect(status.st_mode & 0o7777 == 0o666 & ~mask, "created as curl creates it, not 0600 as a temporary file")
        #expect(try FileManager.default.contentsOfDirectory(atPath: temporary.path).isEmpty, "no download file left behind")
    }

    @Test("a full disk under -o fails with curl's 23 and the system's reason, instead of exiting 0 with the bytes lost")
    func fullDiskOutputFile() throws {
        let run = try FullFileSystem.run(courierExecutable, ["-o", "{FULL}/out", nginx.url("/files/1m.bin").absoluteString])
        #expect(run.status == 23, "\(run.stderr)")
        #expect(run.stderr.contains("write error on "), "\(run.stderr)")
        #expect(run.stderr.contains(String(cString: strerror(ENOSPC))), "\(run.stderr)")
        #expect(run.leftovers == ["out"], "as curl, the part written stays")
    }

    @Test("a full disk behind standard output fails with curl's 23 too")
    func fullDiskStandardOutput() throws {
        let run = try FullFileSystem.run(courierExecutable, [nginx.url("/files/1m.bin").absoluteString], stdoutIntoFullFolder: true)
        #expect(run.status == 23, "\(run.stderr)")
        #expect(run.stderr.contains("write error on standard output"), "\(run.stderr)")
        #expect(run.stderr.contains(String(cString: strerror(ENOSPC))), "\(run.stderr)")
    }

    @Test("the progress meter: curl's heading and a last line at 100% with the size, on standard error for -o; nothing with -s")
    func progressMeter() async throws {
        let directory = scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = nginx.url("/files/1m.bin").absoluteString
        let shown = try await courier(["-o", directory.appendingPathComponent("out").path, url])
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(shown.stderr.hasPrefix("  % Total    % Received % Xferd  Average Speed   Time    Time     Time  Current\n"), "\(shown.stderr)")
        let last = shown.stderr.split(whereSeparator: { $0 == "\r" || $0 == "\n" }).last.map(String.init) ?? ""
        #expect(last.hasPrefix("100 1024k  100 1024k    0     0 "), "\(last)")
        #expect(shown.stderr.hasSuffix("\n"))
        let silent = try await courier(["-s", "-o", directory.appendingPathComponent("quiet").path, url])
        #expect(silent.status == 0)
        #expect(silent.stderr.isEmpty, "\(silent.stderr)")
    }

    @Test("-v: the request line with the version sent, the response's fields in the order sent, and no '* ?' line for a failed handshake")
    func verbose() async throws {
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.write("HTTP/1.0 200 OK\r\nZ-First: 1\r\nA-Second: 2\r\nZ-First: 3\r\nContent-Length: 2\r\n\r\nok")
        }
        defer { server.stop() }
        let run = try await courier(["-s", "-v", server.url("/v").absoluteString])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "ok")
        #expect(run.stderr.contains("> GET /v HTTP/1.1\n"), "\(run.stderr)")
        #expect(run.stderr.contains("< HTTP/1.0 200 OK\n< Z-First: 1\n< A-Second: 2\n< Z-First: 3\n< Content-Length: 2\n"), "\(run.stderr)")

        let failed = try await courier(["-s", "-v", nginx.tlsURL("selfsigned", "/files/hello.txt").absoluteString])
        #expect(failed.status == 60, "\(failed.stderr)")
        #expect(!failed.stderr.contains("* ?"), "\(failed.stderr)")
    }

    @Test("-#: a bar of hashes ending at 100.0%, instead of the table")
    func progressBar() async throws {
        let directory = scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try await courier(["-#", "-o", directory.appendingPathComponent("out").path, nginx.url("/files/1m.bin").absoluteString])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(!run.stderr.contains("% Total"), "\(run.stderr)")
        let last = run.stderr.split(whereSeparator: { $0 == "\r" || $0 == "\n" }).last.map(String.init) ?? ""
        #expect(last.hasPrefix("####"), "\(last)")
        #expect(last.hasSuffix("100.0%"), "\(last)")
    }

    @Test("-O with a URL that names no file fails with curl's 23")
    func remoteNameWithoutName() async throws {
        let run = try await courier(["-O", nginx.url("/").absoluteString], in: scratch())
        #expect(run.status == 23, "\(run.stderr)")
    }

    @Test("-r asks for a byte range: a 206 with those bytes")
    func range() async throws {
        let run = try await courier(["-i", "-r", "6-9", nginx.url("/files/hello.txt").absoluteString])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.hasPrefix("HTTP/1.1 206"))
        #expect(run.stdout.hasSuffix("\r\n\r\nfrom"))
    }

    @Test("-C - appends what is missing to a partial file; the file ends whole")
    func resume() async throws {
        let directory = scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let fixture = try #require(NginxServer.fixtures["1m.bin"])
        let file = directory.appendingPathComponent("partial.bin")
        // A partial file: the first 400,000 bytes.
        try Data(fixture.prefix(400_000)).write(to: file)
        let run = try await courier(["-f", "-C", "-", "-o", file.path, nginx.url("/files/1m.bin").absoluteString])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try Array(Data(contentsOf: file)) == fixture)
    }

    @Test("-C - against a body without byte ranges: curl's 33, and the partial file is left as it was")
    func resumeWithoutRanges() async throws {
        let directory = scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("partial.bin")
        let partial = Data("Hello".utf8)
        try partial.write(to: file)
        // nginx answers SSI-processed bodies (/chunked/) whole, ignoring Range.
        let run = try await courier(["-C", "-", "-o", file.path, nginx.url("/chunked/hello.txt").absoluteString])
        #expect(run.status == 33, "\(run.stderr)")
        #expect(run.stderr.contains("byte ranges"))
        #expect(try Data(contentsOf: file) == partial)
    }

    /// Runs courier under `ulimit -n limit` from bash, after closing every descriptor above 2
    /// that the test process let the shell inherit (other tests' pipes can leak into it) and
    /// opening `occupied` descriptors of its own.
    private func courierWithDescriptorLimit(_ limit: Int, occupied: Int) async throws -> (reason: Process.TerminationReason, status: Int32, stderr: String) {
        let url = nginx.url("/files/hello.txt").absoluteString
        return try await onOwnThread { try Self.courierWithDescriptorLimit(limit, occupied: occupied, url: url) }
    }

    private static func courierWithDescriptorLimit(_ limit: Int, occupied: Int, url: String) throws -> (reason: Process.TerminationReason, status: Int32, stderr: String) {
        let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let executable = directory.appendingPathComponent("courier").path
        try #require(FileManager.default.isExecutableFile(atPath: executable))
        let script = """
            for fd in $(ls /proc/$$/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null; done
            for fd in $(seq 3 $((2 + $2))); do eval "exec $fd</dev/null"; done
            ulimit -n $1
            exec "$0" "$3"
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = ["-c", script, executable, String(limit), String(occupied), url]
        let err = Pipe()
        process.standardError = err
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationReason, process.terminationStatus, stderr)
    }

    @Test(
        "with too few file descriptors, courier says so and exits 1 instead of crashing in libdispatch",
        arguments: [(6, 0), (9, 3), (8, 4)]
    )
    func tooFewFileDescriptors(limit: Int, occupied: Int) async throws {
        let run = try await courierWithDescriptorLimit(limit, occupied: occupied)
        #expect(run.reason == .exit, "\(run.stderr)")
        #expect(run.status == 1, "\(run.stderr)")
        #expect(run.stderr.contains("Too many open files"), "\(run.stderr)")
        #expect(run.stderr.contains("raise `ulimit -n`"), "\(run.stderr)")
    }

    @Test("a small descriptor limit that leaves enough free still fetches")
    func smallFileDescriptorLimit() async throws {
        let run = try await courierWithDescriptorLimit(64, occupied: 20)
        #expect(run.reason == .exit, "\(run.stderr)")
        #expect(run.status == 0, "\(run.stderr)")
    }
}
