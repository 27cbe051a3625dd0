import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Where a background identifier's state lives, by the documented rules, and the daemon named
/// in it. Computed here on its own, not asked of Courier, so the tests check the layout.
enum BackgroundState {
    /// `<name>`: the identifier's UTF-8 bytes, those outside `[A-Za-z0-9._-]` (and a leading
    /// `.`) written as `%XX`, upper-case.
    static func name(_ identifier: String) -> String {
        let hex = Array("0123456789ABCDEF")
        var name = ""
        for (index, byte) in identifier.utf8.enumerated() {
            let plain = (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
                || (byte == UInt8(ascii: ".") && index > 0)
            if plain {
                name.append(Character(Unicode.Scalar(byte)))
            } else {
                name += "%\(hex[Int(byte >> 4)])\(hex[Int(byte & 0xF)])"
            }
        }
        return name
    }

    /// `<data>`: `$XDG_DATA_HOME` when set and absolute, else `$HOME/.local/share`.
    static func dataDirectory(environment: [String: String]) -> URL {
        if let value = environment["XDG_DATA_HOME"], value.hasPrefix("/") {
            return URL(fileURLWithPath: value, isDirectory: true)
        }
        let home = environment["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? FileManager.default.homeDirectoryForCurrentUser.path
        return URL(fileURLWithPath: home, isDirectory: true).appendingPathComponent(".local/share", isDirectory: true)
    }

    /// `<data>/courier/background/<name>/` for a process with `environment`.
    static func directory(_ identifier: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        // Built as a path: the name's `%` must stay as it is.
        URL(fileURLWithPath: dataDirectory(environment: environment).path + "/courier/background/" + name(identifier), isDirectory: true)
    }

    /// The pid in `daemon.pid` (decimal, then a newline); nil without a well-formed one.
    static func daemonPID(in directory: URL) -> pid_t? {
        guard let text = try? String(contentsOf: directory.appendingPathComponent("daemon.pid"), encoding: .utf8), text.hasSuffix("\n") else {
            return nil
        }
        return pid_t(text.dropLast())
    }

    /// True when `pid` is a live (not zombie) `courier-background` process.
    static func isRunningDaemon(_ pid: pid_t) -> Bool {
        guard pid > 0 else { return false }
        let stat = readBackgroundProcFile("/proc/\(pid)/stat")
        guard let close = stat.lastIndex(of: ")"),
              let state = stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).first,
              state != "Z", state != "X",
              let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")
        else { return false }
        var name = URL(fileURLWithPath: executable).lastPathComponent
        // A binary rebuilt while the daemon runs shows as deleted.
        if name.hasSuffix(" (deleted)") { name.removeLast(" (deleted)".count) }
        return name == "courier-background"
    }

    /// Waits (up to `timeout`) for `daemon.pid` to name a running daemon other than `old`.
    static func waitForDaemon(in directory: URL, otherThan old: pid_t? = nil, timeout: Duration = .seconds(60)) async -> pid_t? {
        var found: pid_t?
        _ = await pollUntil(timeout: timeout) {
            guard let pid = daemonPID(in: directory), pid != old, isRunningDaemon(pid) else { return false }
            found = pid
            return true
        }
        return found
    }

    /// Lets the directory's daemon exit (it is left with nothing to do), ending it after
    /// `patience` seconds if it has not; blocking, for clean-ups.
    static func stopDaemon(in directory: URL, patience: Double = 10) {
        guard let pid = daemonPID(in: directory), isRunningDaemon(pid) else { return }
        if waitBlocking(seconds: patience, { !isRunningDaemon(pid) }) { return }
        kill(pid, SIGTERM)
        if waitBlocking(seconds: 10, { !isRunningDaemon(pid) }) { return }
        kill(pid, SIGKILL)
        _ = waitBlocking(seconds: 10) { !isRunningDaemon(pid) }
    }
}

/// A /proc file read to its end (they report a size of 0, so it is read until EOF).
func readBackgroundProcFile(_ path: String) -> String {
    guard let file = fopen(path, "r") else { return "" }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = chunk.withUnsafeMutableBytes { fread($0.baseAddress, 1, $0.count, file) }
        if count <= 0 { break }
        bytes += chunk[..<count]
    }
    return String(decoding: bytes, as: UTF8.self)
}
