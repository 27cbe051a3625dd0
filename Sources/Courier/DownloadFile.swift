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
        /// Why writing failed, if it did; nothing more is written after that.
        var failure: String?
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
        var template = Array(directory.appendingPathComponent("CourierDownload_XXXXXX.tmp").path.utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { courier_make_temporary_file($0.baseAddress!, 4) }
        guard descriptor >= 0 else {
            throw DownloadFileError("Cannot create a file in \(directory.path): \(String(cString: strerror(errno))).")
        }
        let path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return DownloadFile(url: URL(fileURLWithPath: path), descriptor: descriptor)
    }

    /// The reason writing failed, if it did.
    var failure: String? { output.withLock { $0.failure } }

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
            let reason = String(cString: strerror(errno))
            output.failure = output.failure ?? "Cannot finish writing \(url.path): \(reason)."
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
        return false
    }

    /// Writes all of `bytes`, retrying short writes; the errno of a failed write, else nil.
    private static func writeAll(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer) -> Int32? {
        var offset = 0
        while offset < bytes.count {
            let written = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 {
                let code = errno
                if code == EINTR { continue }
                return code
            }
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
