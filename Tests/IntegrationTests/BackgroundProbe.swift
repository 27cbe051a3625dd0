import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A run of `courier-background-probe` (built next to the test binary): a background session
/// in another process, with one download task (see its main.swift). Its stdout and stderr go
/// to files, not pipes: the daemon it may start could inherit a pipe and keep it open.
final class BackgroundProbe {
    enum Ending: String, Sendable, CustomTestStringConvertible {
        /// exit(0) after the first didWriteData.
        case exit = "--exit"
        /// SIGKILL inside the first didWriteData.
        case kill = "--kill"
        /// Connected until stdin reaches end of file.
        case hold = "--hold"
        /// SIGKILL inside didFinishDownloadingTo.
        case killInFinish = "--kill-in-finish"

        var testDescription: String {
            switch self {
            case .exit: "exits"
            case .kill: "is killed"
            case .hold: "holds"
            case .killInFinish: "is killed in didFinishDownloadingTo"
            }
        }
    }

    static var executable: URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("courier-background-probe")
    }

    let process: Process
    private let folder: URL
    private let output: URL
    private let errorsFile: URL
    private let input: Pipe?

    init(identifier: String, url: URL, description: String, ending: Ending, environment: [String: String]? = nil, currentDirectory: URL? = nil) throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.executable.path), "courier-background-probe is built with the tests")
        let folder = TestRun.makeDirectory("background-probe")
        let output = folder.appendingPathComponent("stdout")
        let errorsFile = folder.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errorsFile.path, contents: nil)
        let process = Process()
        process.executableURL = Self.executable
        process.arguments = [identifier, url.absoluteString, "--description", description, ending.rawValue]
        if let environment { process.environment = environment }
        if let currentDirectory { process.currentDirectoryURL = currentDirectory }
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = try FileHandle(forWritingTo: errorsFile)
        let input = ending == .hold ? Pipe() : nil
        if let input {
            process.standardInput = input
        } else {
            process.standardInput = FileHandle.nullDevice
        }
        try process.run()
        self.process = process
        self.folder = folder
        self.output = output
        self.errorsFile = errorsFile
        self.input = input
    }

    /// What it printed on stdout so far.
    var printed: String { (try? String(contentsOf: output, encoding: .utf8)) ?? "" }

    /// What it printed on stderr so far.
    var errors: String { (try? String(contentsOf: errorsFile, encoding: .utf8)) ?? "" }

    /// N of a `started N` line in `text`.
    static func startedIdentifier(in text: String) -> Int? {
        for line in text.split(separator: "\n") where line.hasPrefix("started ") {
            return Int(line.dropFirst("started ".count))
        }
        return nil
    }

    /// The task identifier it printed as `started N`; nil when it exited without, or after `timeout`.
    func started(timeout: Duration = .seconds(120)) async -> Int? {
        _ = await pollUntil(timeout: timeout) { Self.startedIdentifier(in: printed) != nil || !process.isRunning }
        return Self.startedIdentifier(in: printed)
    }

    /// Waits for it to exit; false after `timeout`.
    func exited(timeout: Duration = .seconds(120)) async -> Bool {
        await pollUntil(timeout: timeout) { !process.isRunning }
    }

    /// Ends a holding probe: closes its stdin and waits for it to exit, terminating it (SIGTERM)
    /// if the end of file does not reach it (a process that inherited the pipe's write end keeps
    /// it open). Either way its session is gone once this returns true.
    func endHolding() async -> Bool {
        try? input?.fileHandleForWriting.close()
        if await exited(timeout: .seconds(60)) { return true }
        process.terminate()
        return await exited(timeout: .seconds(30))
    }

    /// Ends it however it is, and deletes its output; blocking, for clean-ups.
    func stop() {
        try? input?.fileHandleForWriting.close()
        if process.isRunning, !waitBlocking(seconds: 10, { !process.isRunning }) {
            process.terminate()
            if !waitBlocking(seconds: 10, { !process.isRunning }) {
                kill(process.processIdentifier, SIGKILL)
                _ = waitBlocking(seconds: 10) { !process.isRunning }
            }
        }
        try? FileManager.default.removeItem(at: folder)
    }
}
