import Foundation

/// Runs a program where a folder is a full file system: a tmpfs of a few KiB, mounted in a
/// private mount namespace (`unshare -Urm`, which needs no privilege where user namespaces are
/// allowed), so its writes fail with ENOSPC from the kernel, as on a real full disk. Nothing
/// outside the child sees the mount.
public enum FullFileSystem {
    public struct Run: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
        /// What the full folder held when the program ended.
        public var leftovers: [String]
    }

    /// The tmpfs size: room for a small file, not for a test's download.
    public static let size = 64 * 1024

    /// Runs `executable` with `arguments` (the string `{FULL}` in one is replaced by the full
    /// folder's path), in the full folder as working directory. With `stdoutIntoFullFolder`,
    /// its standard output is a file in the full folder; `TMPDIR` points there too. `size` is the
    /// tmpfs's room in bytes (whole pages).
    public static func run(
        _ executable: URL, _ arguments: [String], stdoutIntoFullFolder: Bool = false, size: Int = FullFileSystem.size,
        environment extra: [String: String] = [:]
    ) throws -> Run {
        let scratch = TestRun.makeDirectory("full-fs")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let full = scratch.appendingPathComponent("full")
        try FileManager.default.createDirectory(at: full, withIntermediateDirectories: true)
        let left = scratch.appendingPathComponent("left")
        let outside = scratch.appendingPathComponent("stdout")
        let script = """
            mount -t tmpfs -o size=\(size) courier-full "$FULL" || { echo "full-fs: cannot mount a tmpfs" >&2; exit 97; }
            cd "$FULL" || exit 97
            if [ "$INTO_FULL" = 1 ]; then "$@" > "$FULL/stdout"; else "$@" > "$OUTSIDE"; fi
            status=$?
            ls -A "$FULL" > "$LEFT"
            exit $status
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        process.arguments = ["-Urm", "/bin/sh", "-c", script, "full-fs", executable.path]
            + arguments.map { $0.replacingOccurrences(of: "{FULL}", with: full.path) }
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.lowercased().hasSuffix("_proxy") }
        environment.merge(extra) { _, given in given }
        environment["FULL"] = full.path
        environment["LEFT"] = left.path
        environment["OUTSIDE"] = outside.path
        environment["INTO_FULL"] = stdoutIntoFullFolder ? "1" : "0"
        environment["TMPDIR"] = full.path
        process.environment = environment
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let leftovers = ((try? String(contentsOf: left, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        let stdout = (try? String(contentsOf: outside, encoding: .utf8)) ?? ""
        return Run(status: process.terminationStatus, stdout: stdout, stderr: stderr, leftovers: leftovers)
    }
}
