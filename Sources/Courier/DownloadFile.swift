import CCourierLinux
import Foundation
import Synchronization

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

    /// Where the file is; valid until `remove()`.
    let url: URL
    private struct Output {
        var descriptor: Int32
        var buffer: [UInt8] = []
    }
    private let output: Mutex<Output>
    private let failureMessage = Mutex<String?>(nil)
    private let removed = Atomic(false)

    /// Takes over an open descriptor for the file at `url`.
    init(url: URL, descriptor: Int32) {
        self.url = url
        self.output = Mutex(Output(descriptor: descriptor))
    }

    /// Creates an empty file, readable only by this user, in `directory`.
    static func create(in directory: URL) throws(DownloadFileError) -> DownloadFile {
        var template = Array(directory.appendingPathComponent("CourierDownload_XXXXXX.tmp").path.utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { courier_make_temporary_file($0.baseAddress!, 4) }
        guard descriptor >= 0 else {
            throw DownloadFileError("Cannot create a file in \(directory.path): \(String(cString: strerror(errno))).")
        }
        let path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return DownloadFile(url: URL(fileURLWithPath: path), descriptor: descriptor)
    }

    /// The reason writing failed, if it did.
    var failure: String? { failureMessage.withLock { $0 } }

    /// Appends `bytes`; false (and nothing more is written) once a write failed.
    func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
        output.withLock { output -> Bool in
            guard output.descriptor >= 0, failureMessage.withLock({ $0 == nil }) else { return false }
            if output.buffer.count + bytes.count > Self.bufferSize {
                guard flush(&output) else { return false }
            }
            if bytes.count >= Self.bufferSize { return writeAll(output.descriptor, bytes) }
            if output.buffer.capacity < Self.bufferSize { output.buffer.reserveCapacity(Self.bufferSize) }
            output.buffer.append(contentsOf: bytes)
            return true
        }
    }

    /// Writes what is buffered and closes the file; false when a write or the close failed
    /// (the data may not be on disk).
    func close() -> Bool {
        finish(keepingData: true)
    }

    /// Closes and deletes the file; only the first call deletes (a later file may have the name).
    func remove() {
        _ = finish(keepingData: false)
        guard !removed.exchange(true, ordering: .relaxed) else { return }
        unlink(url.path)
    }

    private func finish(keepingData: Bool) -> Bool {
        let closeError = output.withLock { output -> Int32 in
            guard output.descriptor >= 0 else { return 0 }
            if keepingData && failureMessage.withLock({ $0 == nil }) { _ = flush(&output) }
            output.buffer = []
            defer { output.descriptor = -1 }
            return Glibc.close(output.descriptor) == 0 ? 0 : errno
        }
        if closeError != 0 {
            let reason = String(cString: strerror(closeError))
            failureMessage.withLock { $0 = $0 ?? "Cannot finish writing \(url.path): \(reason)." }
        }
        return failure == nil
    }

    /// Writes the buffer out and empties it.
    private func flush(_ output: inout Output) -> Bool {
        guard !output.buffer.isEmpty else { return true }
        let done = output.buffer.withUnsafeBytes { writeAll(output.descriptor, $0) }
        output.buffer.removeAll(keepingCapacity: true)
        return done
    }

    /// Writes all of `bytes`, retrying short writes; records the failure if one fails.
    private func writeAll(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 {
                let code = errno
                if code == EINTR { continue }
                let reason = String(cString: strerror(code))
                failureMessage.withLock { $0 = "Cannot write to \(url.path): \(reason)." }
                return false
            }
            offset += written
        }
        return true
    }
}

/// Why a download file could not be created.
struct DownloadFileError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
