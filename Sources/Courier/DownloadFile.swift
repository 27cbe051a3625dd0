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
/// Bytes are written straight from the connection's buffer on the event loop (no copy, no
/// queue), so memory use does not grow with the file. A failed write is remembered; the runner
/// then cancels the exchange and reports `.cannotWriteToFile`.
final class DownloadFile: Sendable {
    /// Where the file is; valid until `remove()`.
    let url: URL
    private let descriptor: Mutex<Int32>
    private let failureMessage = Mutex<String?>(nil)
    private let removed = Atomic(false)

    /// Takes over an open descriptor for the file at `url`.
    init(url: URL, descriptor: Int32) {
        self.url = url
        self.descriptor = Mutex(descriptor)
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
        descriptor.withLock { descriptor -> Bool in
            guard descriptor >= 0, failureMessage.withLock({ $0 == nil }) else { return false }
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

    /// Closes the file; false when a write or the close failed (the data may not be on disk).
    func close() -> Bool {
        let closeError = descriptor.withLock { descriptor -> Int32 in
            guard descriptor >= 0 else { return 0 }
            defer { descriptor = -1 }
            return Glibc.close(descriptor) == 0 ? 0 : errno
        }
        if closeError != 0 {
            let reason = String(cString: strerror(closeError))
            failureMessage.withLock { $0 = $0 ?? "Cannot finish writing \(url.path): \(reason)." }
        }
        return failure == nil
    }

    /// Closes and deletes the file; only the first call deletes (a later file may have the name).
    func remove() {
        _ = close()
        guard !removed.exchange(true, ordering: .relaxed) else { return }
        unlink(url.path)
    }
}

/// Why a download file could not be created.
struct DownloadFileError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
