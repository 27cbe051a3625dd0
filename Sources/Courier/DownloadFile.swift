import CCourierLinux
import CourierReactor
import CourierSync
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The temporary file a download task writes its body into, as it arrives.
///
/// Bytes are gathered from the connection's buffer on the event loop into a 256 KiB buffer
/// and written out when it fills (and at the end), so memory use does not grow with the file
/// and an HTTP/2 download of 8 KiB DATA frames is not one system call per frame. A failed
/// write is remembered; the runner then cancels the exchange and reports `.cannotWriteToFile`.
final class DownloadFile: Sendable {
    /// Bytes gathered before a write.
    static let bufferSize = 256 * 1024
    /// The most bytes one `write` system call is given; a larger write is made in slices.
    ///
    /// Design note: Linux sizes the page-cache folios of a buffered write after the write
    /// (ext4 does on the 6.18 kernel of our CI machine), so a 256 KiB write takes its page
    /// cache in 256 KiB blocks. On a VM with free page reporting (virtio-balloon), free blocks
    /// of 128 KiB and more are the ones handed back to the host, and the first write to each of
    /// their pages waits for the host to back it again. Writing a 1 GiB file three seconds
    /// after the last one (a C loop on one core): 1.7 s of system time in 256 KiB writes, 1.1 s
    /// in 128 KiB ones, 0.6–0.7 s in 32 or 64 KiB ones, 1.0–1.4 s in 8 KiB ones (more calls).
    /// Elsewhere the slices cost three more system calls per 256 KiB.
    static let writeSliceSize = 64 * 1024

    /// Where the file is; valid until `remove()`.
    let url: URL
    private struct Output {
        var descriptor: Int32
        var buffer: [UInt8] = []
        /// Why writing failed, if it did; nothing more is written after that.
        var failure: String?
        /// The system's error number of that failure.
        var failureNumber: Int32?
        var removed = false
    }
    private let output: Mutex<Output>

    /// Takes over an open descriptor for the file at `url`.
    init(url: URL, descriptor: Int32) {
        self.url = url
        self.output = Mutex(Output(descriptor: descriptor))
    }

    /// Creates an empty file, readable only by this user, in `directory`.
    static func create(in directory: URL) throws(DownloadFileError) -> DownloadFile {
        guard let (path, descriptor) = makeUniqueFile(in: directory, prefix: "CourierDownload_", suffix: ".tmp") else {
            throw DownloadFileError("Cannot create a file in \(directory.path): \(String(cString: strerror(errno))).")
        }
        return DownloadFile(url: URL(fileURLWithPath: path), descriptor: descriptor)
    }

    /// Creates a new file named `prefix`, six random characters and `suffix` in `directory`,
    /// readable only by this user; its path and open descriptor, or nil (errno says why).
    private static func makeUniqueFile(in directory: URL, prefix: String, suffix: String) -> (path: String, descriptor: Int32)? {
        var template = Array(directory.appendingPathComponent("\(prefix)XXXXXX\(suffix)").path.utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { courier_make_temporary_file($0.baseAddress!, Int32(suffix.utf8.count)) }
        guard descriptor >= 0 else { return nil }
        return (template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }, descriptor)
    }

    /// Opens a partial file kept by resume data, cut to its first `offset` bytes, to go on
    /// writing after them. Nil when it is gone, shorter than `offset`, or not a regular file of
    /// this user's (resume data may come from anywhere: it must never make Courier write over
    /// another file).
    static func reopen(partial url: URL, at offset: Int64) -> DownloadFile? {
        let descriptor = open(url.path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_uid == geteuid(),
              Int64(status.st_size) >= offset, ftruncate(descriptor, off_t(offset)) == 0,
              lseek(descriptor, off_t(offset), SEEK_SET) == off_t(offset) else {
            Glibc.close(descriptor)
            return nil
        }
        return DownloadFile(url: url, descriptor: descriptor)
    }

    /// Empties the file to write the body from its start (a resumed download the server
    /// answered whole); false when that failed.
    func startOver() -> Bool {
        output.withLock { output -> Bool in
            guard output.descriptor >= 0, output.failure == nil else { return false }
            output.buffer.removeAll(keepingCapacity: true)
            guard ftruncate(output.descriptor, 0) == 0, lseek(output.descriptor, 0, SEEK_SET) == 0 else {
                return record(errno, in: &output)
            }
            return true
        }
    }

    /// Writes what is buffered, closes the file and keeps it under a new partial-file name in
    /// the same directory, for resume data; returns that name, or nil (and the file is deleted)
    /// when the bytes could not be made safe. This object no longer refers to any file after.
    func keep() -> URL? {
        let closed = output.withLock { output -> Bool in
            defer { output.removed = true }
            guard !output.removed else { return false }
            return finish(&output, keepingData: true)
        }
        guard closed else {
            unlink(url.path)
            return nil
        }
        let directory = url.deletingLastPathComponent()
        guard let (path, placeholder) = Self.makeUniqueFile(in: directory, prefix: PartialDownloadFiles.prefix, suffix: PartialDownloadFiles.suffix) else {
            unlink(url.path)
            return nil
        }
        Glibc.close(placeholder)
        // The rename replaces the placeholder that reserved the name.
        guard rename(url.path, path) == 0 else {
            unlink(path)
            unlink(url.path)
            return nil
        }
        return URL(fileURLWithPath: path)
    }

    /// Writes what is buffered (unless a write failed before), closes the file and hands it
    /// over as it is: its URL, or nil (and the file is deleted) when it holds no byte. This
    /// object no longer refers to any file after.
    func handOver() -> URL? {
        let held = output.withLock { output -> Bool in
            defer { output.removed = true }
            guard !output.removed else { return false }
            _ = finish(&output, keepingData: true)
            return true
        }
        guard held else { return nil }
        var status = stat()
        guard stat(url.path, &status) == 0, status.st_size > 0 else {
            unlink(url.path)
            return nil
        }
        return url
    }

    /// The reason writing failed, if it did.
    var failure: String? { output.withLock { $0.failure } }

    /// `.cannotWriteToFile` for a failed write: its reason (or `fallback`), with the system's
    /// error (a `POSIXError`, such as `ENOSPC`) as the underlying error.
    func writeError(url: URL?, fallback: String = "The download could not be written.") -> URLError {
        let (reason, number) = output.withLock { ($0.failure, $0.failureNumber) }
        let underlying = number.flatMap(POSIXErrorCode.init(rawValue:)).map { POSIXError($0) }
        return .courier(.cannotWriteToFile, reason ?? fallback, url: url, underlying: underlying)
    }

    /// Appends `bytes`; false (and nothing more is written) once a write failed.
    func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
        output.withLock { output -> Bool in
            guard output.descriptor >= 0, output.failure == nil else { return false }
            if output.buffer.count + bytes.count > Self.bufferSize {
                guard flush(&output) else { return false }
            }
            if bytes.count >= Self.bufferSize { return record(Self.writeAll(output.descriptor, bytes), in: &output) }
            if output.buffer.capacity < Self.bufferSize { output.buffer.reserveCapacity(Self.bufferSize) }
            output.buffer.append(contentsOf: bytes)
            return true
        }
    }

    /// Writes what is buffered and closes the file; false when a write or the close failed
    /// (the data may not be on disk).
    func close() -> Bool {
        output.withLock { finish(&$0, keepingData: true) }
    }

    /// Closes and deletes the file; only the first call deletes (a later file may have the name).
    func remove() {
        let unlinkNow = output.withLock { output -> Bool in
            _ = finish(&output, keepingData: false)
            defer { output.removed = true }
            return !output.removed
        }
        if unlinkNow { unlink(url.path) }
    }

    private func finish(_ output: inout Output, keepingData: Bool) -> Bool {
        guard output.descriptor >= 0 else { return output.failure == nil }
        if keepingData && output.failure == nil { _ = flush(&output) }
        output.buffer = []
        if Glibc.close(output.descriptor) != 0 {
            let number = errno
            if output.failure == nil {
                output.failure = "Cannot finish writing \(url.path): \(String(cString: strerror(number)))."
                output.failureNumber = number
            }
        }
        output.descriptor = -1
        return output.failure == nil
    }

    /// Writes the buffer out and empties it.
    private func flush(_ output: inout Output) -> Bool {
        guard !output.buffer.isEmpty else { return true }
        let descriptor = output.descriptor
        let error = output.buffer.withUnsafeBytes { Self.writeAll(descriptor, $0) }
        output.buffer.removeAll(keepingCapacity: true)
        return record(error, in: &output)
    }

    /// Notes a failed write (its errno); true when there was none.
    private func record(_ error: Int32?, in output: inout Output) -> Bool {
        guard let error else { return true }
        output.failure = "Cannot write to \(url.path): \(String(cString: strerror(error)))."
        output.failureNumber = error
        return false
    }

    /// Writes all of `bytes`, in slices of at most ``writeSliceSize``, retrying short writes;
    /// the errno of a failed write, else nil.
    private static func writeAll(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer) -> Int32? {
        var offset = 0
        while offset < bytes.count {
            let written = retryingOnInterrupt {
                Glibc.write(descriptor, bytes.baseAddress! + offset, min(bytes.count - offset, writeSliceSize))
            }
            if written < 0 { return errno }
            offset += written
        }
        return nil
    }
}

/// Why a download file could not be created.
struct DownloadFileError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}

/// The files resume data keeps: `CourierPartial_XXXXXX.partial` in the directory the download
/// wrote to. Each stays until a download resumes from it (it then becomes that download's file)
/// or until it is older than `maximumAge`: the first download task a process makes deletes the
/// partial files of the temporary directory last written more than seven days ago.
enum PartialDownloadFiles {
    static let prefix = "CourierPartial_"
    static let suffix = ".partial"
    /// How long an unused partial file is kept: seven days.
    static let maximumAge: TimeInterval = 7 * 24 * 3600

    static func isPartialFileName(_ name: String) -> Bool {
        name.hasPrefix(prefix) && name.hasSuffix(suffix) && name.count > prefix.count + suffix.count && !name.contains("/")
    }

    /// Deletes the partial files in `directory` not written for `maximumAge`; returns how many.
    @discardableResult
    static func sweep(_ directory: URL, now: Date = Date()) -> Int {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        var removed = 0
        for name in names where isPartialFileName(name) {
            let path = directory.appendingPathComponent(name).path
            var status = stat()
            guard lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_uid == geteuid() else { continue }
            let written = Date(timeIntervalSince1970: TimeInterval(status.st_mtim.tv_sec))
            if now.timeIntervalSince(written) > maximumAge, unlink(path) == 0 { removed += 1 }
        }
        return removed
    }

    /// Runs the sweep of the temporary directory once per process, off the caller's thread.
    static func sweepOnce() {
        _ = sweepStarted
    }

    private static let sweepStarted: Bool = {
        let directory = FileManager.default.temporaryDirectory
        DispatchQueue.global(qos: .utility).async { sweep(directory) }
        return true
    }()
}
