import ArgumentParser
import Courier
import CourierSync
import Foundation

/// Where the body goes, written as it arrives: standard output, a file opened before the
/// request (`-o`), or a file chosen when the response arrives (`-O`, `-J`, `-C -`). Anything
/// written before the destination is open (a redirect's head with `-i`) waits for it.
final class OutputSink: @unchecked Sendable {
    /// Where the body is to go.
    enum Destination {
        case handle(FileHandle)
        /// `-o FILE`: created (or emptied) when the response arrives, so a transfer that gets
        /// none leaves no file, as with curl.
        case file(String)
        /// `-O`: the URL's last path segment, in the current directory; with `-J`, the
        /// response's Content-Disposition file name when it has one.
        case remoteName(fromURL: String, useHeaderName: Bool, directory: String?)
        /// `-C -`: append to `path` from `offset`, which only a 206 whose range starts there
        /// allows.
        case resume(path: String, offset: Int64)
    }

    private struct State {
        var destination: Destination
        var handle: FileHandle?
        var early = Data()
        var written: String?
        /// The first write error: later writes are not attempted.
        var failure: (message: String, code: Int32)?
    }

    private let state: Mutex<State>

    init(_ destination: Destination) {
        var initial = State(destination: destination)
        if case .handle(let handle) = destination { initial.handle = handle }
        state = Mutex(initial)
    }

    convenience init(handle: FileHandle) {
        self.init(.handle(handle))
    }

    /// The file the body went to, when it was chosen at the response (`-O`, `-J`).
    var writtenFile: String? { state.withLock { $0.written } }

    /// The file the body goes to, as a message names it.
    var describedDestination: String {
        state.withLock { state in
            if let written = state.written { return written }
            switch state.destination {
            case .file(let path), .resume(let path, _): return path
            case .remoteName(let fromURL, _, let directory): return directory.map { ($0 as NSString).appendingPathComponent(fromURL) } ?? fromURL
            case .handle: return "standard output"
            }
        }
    }

    /// Opens the destination for `response`; nil, or why it cannot be (with curl's exit code).
    func prepare(for response: URLResponse) -> (message: String, code: Int32)? {
        state.withLock { state -> (message: String, code: Int32)? in
            guard state.handle == nil else { return nil }
            let handle: FileHandle
            switch state.destination {
            case .handle(let given):
                handle = given
            case .file(let path):
                guard let opened = Self.create(path) else {
                    return ("cannot write \(path): \(String(cString: strerror(errno)))", 23)
                }
                handle = opened
                state.written = path
            case .remoteName(let fromURL, let useHeaderName, let directory):
                let name: String
                switch Self.remoteFileName(fromURL, useHeaderName: useHeaderName, directory: directory, response: response) {
                case .success(let chosen): name = chosen
                case .failure(let failure): return (failure.message, failure.code)
                }
                guard let opened = Self.create(name) else {
                    return ("cannot write \(name)", 23)
                }
                handle = opened
                state.written = name
            case .resume(let path, let offset):
                let status = (response as? HTTPURLResponse)?.statusCode ?? 200
                guard status == 206 else {
                    if status == 416 {
                        return ("the server cannot send \(path) from byte \(offset) (416): is the file complete already?", 33)
                    }
                    return ("the server does not seem to support byte ranges (it answered \(status)): cannot resume \(path)", 33)
                }
                let contentRange = (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Range") ?? ""
                guard Self.rangeStart(ofContentRange: contentRange) == offset else {
                    return ("the server sent \(contentRange.isEmpty ? "no Content-Range" : "Content-Range \(contentRange)") for a resume from byte \(offset)", 33)
                }
                guard let opened = FileHandle(forWritingAtPath: path) else { return ("cannot write \(path)", 23) }
                do {
                    try opened.truncate(atOffset: UInt64(offset))
                    try opened.seekToEnd()
                } catch {
                    return ("cannot append to \(path): \(error)", 23)
                }
                handle = opened
            }
            state.handle = handle
            if !state.early.isEmpty {
                let early = state.early
                state.early = Data()
                return Self.write(early, to: handle, in: &state)
            }
            return nil
        }
    }

    /// Opens `path` for writing as curl does: created (0666 less the umask) or emptied in place.
    /// Never replaced: FileManager's createFile writes a new file and renames it over the
    /// path, which would put a plain file where a device such as /dev/null was.
    static func create(_ path: String) -> FileHandle? {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o666)
        guard descriptor >= 0 else { return nil }
        return FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    }

    /// True when a download task may bring this destination's body: `-O`, or an `-o` file
    /// that does not exist yet or is a plain file of this user's with one link. Another
    /// destination (standard output, `-C -`, a device such as /dev/null, a symbolic link, a
    /// file with other links) is written into as the bytes arrive, as curl does.
    var takesDownloadedFile: Bool {
        switch state.withLock({ $0.destination }) {
        case .file(let path):
            var status = stat()
            return Self.isReplaceable(path, status: &status)
        case .remoteName: return true
        case .handle, .resume: return false
        }
    }

    /// True when `path` does not exist, or is a plain file of this user's with one link:
    /// replacing it with another file is the same as writing it anew. `status` gets what lstat
    /// found (zeroed when nothing is there).
    private static func isReplaceable(_ path: String, status: inout stat) -> Bool {
        guard lstat(path, &status) == 0 else {
            status = stat()
            return errno == ENOENT
        }
        return status.st_mode & S_IFMT == S_IFREG && status.st_nlink == 1 && status.st_uid == geteuid()
    }

    /// Puts a downloaded file (a whole body, or what a failed transfer kept) where `-o` or `-O`
    /// says, as if the body had been written there: moved when it can be, else copied and
    /// deleted. The file gets the mode of the file it replaces, or a new file's (0666 less the
    /// umask). Nil, or why it could not be put there (curl's exit code 23).
    func adopt(_ file: URL, for response: URLResponse?) -> (message: String, code: Int32)? {
        let target: String
        switch state.withLock({ $0.destination }) {
        case .file(let path):
            target = path
        case .remoteName(let fromURL, let useHeaderName, let directory):
            switch Self.remoteFileName(fromURL, useHeaderName: useHeaderName, directory: directory, response: response) {
            case .success(let name): target = name
            case .failure(let failure):
                unlink(file.path)
                return (failure.message, failure.code)
            }
        case .handle, .resume:
            unlink(file.path)
            return ("a downloaded file cannot go to standard output", 23)
        }
        state.withLock { $0.written = target }
        var status = stat()
        if Self.isReplaceable(target, status: &status) {
            // The mode of the file replaced, or of a new one.
            let mode = status.st_mode != 0 ? status.st_mode & 0o7777 : 0o666 & ~Self.umask
            if chmod(file.path, mode) == 0, rename(file.path, target) == 0 { return nil }
        }
        defer { unlink(file.path) }
        return Self.copy(file.path, to: target)
    }

    /// Copies `source` into `target`, opened as every output is (``create(_:)``), in 1 MiB
    /// pieces.
    private static func copy(_ source: String, to target: String) -> (message: String, code: Int32)? {
        guard let input = FileHandle(forReadingAtPath: source) else {
            return ("cannot read the downloaded file \(source): \(String(cString: strerror(errno)))", 23)
        }
        guard let output = create(target) else { return ("cannot write \(target): \(String(cString: strerror(errno)))", 23) }
        do {
            while let piece = try input.read(upToCount: 1 << 20), !piece.isEmpty {
                try output.write(contentsOf: piece)
            }
            try output.close()
            return nil
        } catch {
            return ("write error on \(target): \(reason(error))", 23)
        }
    }

    /// The process's umask, read without changing it (the umask(2) call would set it, and a
    /// file made meanwhile by another transfer would get the wrong mode).
    private static let umask: mode_t = {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        for line in status.split(separator: "\n") where line.hasPrefix("Umask:") {
            if let value = mode_t(line.dropFirst(6).trimmingCharacters(in: .whitespaces), radix: 8) { return value }
        }
        return 0o022
    }()

    /// The file `-O` writes: the URL's last segment, or with `-J` the response's
    /// Content-Disposition name, in `directory` when given.
    private static func remoteFileName(_ fromURL: String, useHeaderName: Bool, directory: String?, response: URLResponse?) -> Result<String, CLIFailure> {
        var name = fromURL
        var namedByServer = false
        if useHeaderName, let http = response as? HTTPURLResponse,
           let disposition = http.value(forHTTPHeaderField: "Content-Disposition"),
           let headerName = fileName(fromContentDisposition: disposition) {
            name = headerName
            namedByServer = true
        }
        if let directory { name = (directory as NSString).appendingPathComponent(name) }
        // As curl's -J: a name from the server never replaces a file.
        if namedByServer, FileManager.default.fileExists(atPath: name) {
            return .failure(CLIFailure(message: "refusing to overwrite \(name), named by the server's Content-Disposition", code: 23))
        }
        return .success(name)
    }

    /// Writes body bytes; nil, or why they could not be written (curl's exit code 23). After a
    /// failure nothing more is written: the caller stops the transfer.
    func write(_ data: Data) -> (message: String, code: Int32)? {
        state.withLock { state in
            guard let handle = state.handle else {
                state.early.append(data)
                return nil
            }
            return Self.write(data, to: handle, in: &state)
        }
    }

    /// A write that reports the system's error (a full disk, a closed pipe), where
    /// `FileHandle.write(_:)` drops it and the bytes with it.
    private static func write(_ data: Data, to handle: FileHandle, in state: inout State) -> (message: String, code: Int32)? {
        if let failed = state.failure { return failed }
        do {
            try handle.write(contentsOf: data)
            return nil
        } catch {
            let failure = (message: "write error on \(state.written ?? Self.describe(handle)): \(Self.reason(error))", code: Int32(23))
            state.failure = failure
            return failure
        }
    }

    /// Closes a file destination; nil, or why its last bytes may not have reached the disk.
    func close() -> (message: String, code: Int32)? {
        state.withLock { state in
            guard let handle = state.handle, handle !== FileHandle.standardOutput else { return nil }
            state.handle = nil
            do {
                try handle.synchronize()
                try handle.close()
                return nil
            } catch {
                if state.failure != nil { return nil }
                return ("write error on \(state.written ?? Self.describe(handle)): \(Self.reason(error))", 23)
            }
        }
    }

    private static func describe(_ handle: FileHandle) -> String {
        handle === FileHandle.standardOutput ? "standard output" : "the output file"
    }

    /// The system's words for a write error (`No space left on device`), without Foundation's
    /// wrapping.
    static func reason(_ error: any Error) -> String {
        let nsError = error as NSError
        if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code)))
        }
        if nsError.domain == NSPOSIXErrorDomain { return String(cString: strerror(Int32(nsError.code))) }
        return nsError.localizedDescription
    }

    /// The file name of a Content-Disposition value (`filename=`, quoted or not), reduced to
    /// its last path component; nil when there is none or it is unusable (empty, `.`, `..`).
    static func fileName(fromContentDisposition value: String) -> String? {
        for parameter in value.split(separator: ";").dropFirst() {
            let parts = parameter.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces).lowercased() == "filename" else { continue }
            var name = parts[1].trimmingCharacters(in: .whitespaces)
            if name.hasPrefix("\""), name.hasSuffix("\""), name.count >= 2 { name = String(name.dropFirst().dropLast()) }
            // Only the last component: a server never picks the directory.
            name = String(name.split(whereSeparator: { $0 == "/" || $0 == "\\" }).last ?? "")
            guard !name.isEmpty, name != ".", name != "..", !name.contains("\0") else { return nil }
            return name
        }
        return nil
    }

    /// The first byte of a `Content-Range: bytes FIRST-LAST/LENGTH` value.
    static func rangeStart(ofContentRange value: String) -> Int64? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst(6)
        guard let dash = spec.firstIndex(of: "-") else { return nil }
        return Int64(spec[..<dash].trimmingCharacters(in: .whitespaces))
    }
}

/// curl's options for where the body goes and which part of it: `-O`, `-J`, `-C`, `-r`, and
/// the upload of `-T`.
struct OutputOptions: ParsableArguments {
    @Flag(name: [.customShort("O"), .customLong("remote-name")], help: "Write the body to a file named like the URL's last path segment, in the current directory; once per URL, for the URLs no -o names.")
    var remoteNameCount: Int

    @Flag(name: [.customShort("J"), .customLong("remote-header-name")], help: "With -O: name the file as the server's Content-Disposition says (never overwriting a file).")
    var remoteHeaderName = false

    @Option(name: [.customShort("C"), .customLong("continue-at")], help: "Resume a transfer: - (from the size of the -o or -O file); only a 206 from that byte is appended.")
    var continueAt: String?

    @Option(name: [.customShort("r"), .customLong("range")], help: "Ask for these bytes only, e.g. 0-499, 500-, -500.")
    var range: String?

    @Option(name: [.customShort("T"), .customLong("upload-file")], help: "PUT this file (streamed from disk) to the URL; a URL ending in / gets the file's name.")
    var uploadFile: String?

    /// The destination for the body, given `-o`; sets the request's Range for `-r` and `-C`.
    func destination(output: String?, remoteName: Bool, url: URL, request: inout URLRequest, directory: String? = nil) throws -> OutputSink.Destination {
        if remoteHeaderName && remoteNameCount == 0 { throw ValidationError("-J needs -O") }
        if let range {
            guard range.range(of: #"^[0-9]*-[0-9]*(,[0-9]*-[0-9]*)*$"#, options: .regularExpression) != nil, range != "-" else {
                throw ValidationError("-r \(range): give a byte range such as 0-499, 500- or -500")
            }
            request.setValue("bytes=\(range)", forHTTPHeaderField: "Range")
        }
        var remoteFile: String?
        if remoteName {
            let last = url.lastPathComponent
            guard !last.isEmpty, last != "/" else {
                throw CLIFailure(message: "the URL has no file name for -O: \(url.absoluteString)", code: 23)
            }
            remoteFile = last
        }
        if let continueAt {
            guard continueAt == "-" else { throw ValidationError("-C takes - (resume from the output file's size)") }
            guard let path = output ?? remoteFile else { throw ValidationError("-C - needs -o FILE or -O") }
            let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value ?? 0
            if size > 0 {
                if range != nil { throw ValidationError("-C and -r exclude each other") }
                request.setValue("bytes=\(size)-", forHTTPHeaderField: "Range")
                return .resume(path: path, offset: size)
            }
        }
        if let remoteFile { return .remoteName(fromURL: remoteFile, useHeaderName: remoteHeaderName, directory: directory) }
        if let output, output != "-" { return .file(output) }
        return .handle(.standardOutput)
    }

    /// The URL of a `-T` upload: a URL ending in `/` gets the file's name, as with curl.
    func uploadURL(_ url: URL) -> URL {
        guard let uploadFile, url.path(percentEncoded: true).hasSuffix("/") else { return url }
        return url.appendingPathComponent(URL(fileURLWithPath: uploadFile).lastPathComponent)
    }
}

/// A failure with curl's exit code for it.
struct CLIFailure: Error, CustomStringConvertible {
    var message: String
    var code: Int32
    var description: String { message }
}
