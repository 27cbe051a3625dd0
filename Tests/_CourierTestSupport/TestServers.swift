import CourierSync
import Foundation
import Glibc

/// Where test servers keep their files and PID records: `$COURIER_TEST_RUN_DIR` when the test
/// script sets it (so it can stop leftovers by PID), else a folder under the temporary directory,
/// removed when the process exits.
public enum TestRun {
    public static let directory: URL = {
        if let path = ProcessInfo.processInfo.environment["COURIER_TEST_RUN_DIR"] {
            let base = URL(fileURLWithPath: path)
            try? FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
            return base
        }
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("courier-test-\(getpid())")
        try? FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        // Run without the test script (which removes its own), the folder goes when the process
        // exits: a `swift test` by hand left tens of MB of fixtures each time. Registered before
        // any server starts, so it runs after the handler that stops them (atexit runs the last
        // registered first).
        atexit { TestRun.removeOwnDirectory() }
        return base
    }()

    private static func removeOwnDirectory() {
        try? FileManager.default.removeItem(at: directory)
    }

    /// The temporary directory (`TMPDIR`) of the programs the tests run, such as `courier`: a
    /// download file of theirs (`courier -o` downloads through a download task) then never
    /// shows among this process's own, which the tests behind ``DownloadFilesLock`` compare.
    public static let childTemporaryDirectory: URL = makeDirectory("child-tmp")

    /// A fresh folder for one server.
    public static func makeDirectory(_ name: String) -> URL {
        let url = directory.appendingPathComponent("\(name)-\(getpid())-\(UUID().uuidString.prefix(8))")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }
}

/// Ports already handed out by `freeLoopbackPort` in this process.
private let handedOutPorts = Mutex<Set<Int>>([])

/// A free TCP port on 127.0.0.1, found by binding port 0 and closing the socket. The kernel may
/// offer a port again once it is closed, so a port this process already handed out (and whose
/// server may not have bound it yet) is never returned twice.
public func freeLoopbackPort() -> Int {
    while true {
        let port = probeFreeLoopbackPort()
        if port == 0 { return 0 }  // nothing could be bound; the server's start reports it
        let fresh = handedOutPorts.withLock { $0.insert(port).inserted }
        if fresh { return port }
    }
}

private func probeFreeLoopbackPort() -> Int {
    let (fd, port) = bindLoopbackPort()
    close(fd)
    return port
}

/// A TCP socket bound to a port of 127.0.0.1 the kernel chose, not listening, and that port.
private func bindLoopbackPort() -> (descriptor: Int32, port: Int) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

/// A loopback port nothing listens on, for as long as this object lives: the port stays bound
/// to a socket that never listens, so a connection to it is refused, and no other socket can
/// take it meanwhile. A port only probed (``freeLoopbackPort()``) is free again once probed, and
/// a server that binds port 0 (the in-process raw servers do) can be given it, so a test that
/// expected a refusal would reach that server instead.
public final class ClosedLoopbackPort: @unchecked Sendable {
    public let port: Int
    private let descriptor: Int32

    public init() {
        (descriptor, port) = bindLoopbackPort()
    }

    deinit { close(descriptor) }
}

/// Starts a test server: tracked so it is stopped when the test process exits, and its PID
/// recorded in `directory/server.pid` for the test script to stop leftovers. Its standard output
/// and error go to the file `output` (created or truncated) when given, else they are discarded.
func startServerProcess(_ executable: String, _ arguments: [String], directory: URL, output: URL? = nil) throws(TestServerError) -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    process.standardInput = FileHandle.nullDevice
    var outputHandle: FileHandle?
    if let output {
        guard FileManager.default.createFile(atPath: output.path, contents: nil),
              let handle = FileHandle(forWritingAtPath: output.path) else {
            throw TestServerError("cannot create \(output.path) for the output of \(executable)")
        }
        outputHandle = handle
    }
    process.standardOutput = outputHandle ?? FileHandle.nullDevice
    process.standardError = outputHandle ?? FileHandle.nullDevice
    // The child has its own copy of the descriptor once started (or none when it could not be).
    defer { try? outputHandle?.close() }
    do {
        try process.run()
    } catch {
        throw TestServerError("cannot start \(executable): \(error)")
    }
    let pid = process.processIdentifier
    ChildProcesses.track(pid)
    try? String(pid).write(to: directory.appendingPathComponent("server.pid"), atomically: true, encoding: .utf8)
    return pid
}

/// The real interpreter behind `python3` on `PATH` (not a pyenv shim), when it can import every
/// module in `modules`. `$COURIER_PYTHON` overrides the search. `missing` names the modules in
/// the error thrown when one cannot be imported, e.g. "httpbin or waitress".
func pythonInterpreter(importing modules: [String], missing: String) throws(TestServerError) -> String {
    let environment = ProcessInfo.processInfo.environment
    let candidate: String
    if let chosen = environment["COURIER_PYTHON"], !chosen.isEmpty {
        candidate = chosen
    } else {
        let path = environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        guard let found = path.split(separator: ":").map({ "\($0)/python3" }).first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw TestServerError("python3 is not installed (scripts/lib/ensure-system.sh test installs it with httpbin)")
        }
        candidate = found
    }
    let names = modules.map { "'\($0)'" }.joined(separator: ", ")
    let probe = "import sys, importlib.util as u; print(sys.executable if all(u.find_spec(m) for m in [\(names)]) else '')"
    let executable: String
    do {
        executable = try runTool(candidate, ["-c", probe]).trimmingCharacters(in: .whitespacesAndNewlines)
    } catch {
        throw TestServerError("\(candidate) does not run: \(error)")
    }
    guard !executable.isEmpty, FileManager.default.isExecutableFile(atPath: executable) else {
        throw TestServerError("\(missing) is missing for \(candidate) (scripts/lib/ensure-system.sh test installs \(modules.count == 1 ? "it" : "them"))")
    }
    return executable
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port`.
public func waitForListener(port: Int, timeout: TimeInterval = 10) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if let fd = connectToLoopback(port: port) {
            close(fd)
            return true
        }
        usleep(20_000)
    }
    return false
}

/// A blocking TCP socket connected to 127.0.0.1:`port`, or nil when nothing accepts there.
public func connectToLoopback(port: Int) -> Int32? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = UInt16(port).bigEndian
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard result == 0 else {
        close(fd)
        return nil
    }
    return fd
}

/// Processes started by the harness, stopped by PID when the test process exits.
enum ChildProcesses {
    private static let pids = Mutex<Set<Int32>>([])
    private static let registered = Mutex(false)

    static func track(_ pid: Int32) {
        pids.withLock { _ = $0.insert(pid) }
        let first = registered.withLock { done -> Bool in
            defer { done = true }
            return !done
        }
        if first { atexit { ChildProcesses.stopAll() } }
    }

    static func forget(_ pid: Int32) {
        pids.withLock { _ = $0.remove(pid) }
    }

    static func stopAll() {
        for pid in pids.withLock({ $0 }) { stop(pid) }
    }

    /// SIGTERM, then SIGKILL if it lingers.
    static func stop(_ pid: Int32) {
        kill(pid, SIGTERM)
        for _ in 0..<100 {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid || kill(pid, 0) != 0 { return }
            usleep(20_000)
        }
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
    }
}

/// Why a test server could not start.
public struct TestServerError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Waits up to `seconds` for `marker` to appear in the file at `log`, which the server process
/// `pid` writes once it listens; false when the process exits first or the time runs out.
public func waitForReadyMarker(_ marker: String, in log: URL, pid: Int32, seconds: TimeInterval = 30) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline, !processHasExited(pid) {
        if let text = try? String(contentsOf: log, encoding: .utf8), text.contains(marker) { return true }
        usleep(20_000)
    }
    return false
}

/// True when the child `pid` has exited (and is reaped here) or is gone.
public func processHasExited(_ pid: Int32) -> Bool {
    var status: Int32 = 0
    return waitpid(pid, &status, WNOHANG) == pid || kill(pid, 0) != 0
}
