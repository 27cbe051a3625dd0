import CCourierSQLite
import CourierCore
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif


/// POSIX file operations on body files.
enum BodyFiles {
    /// A failed system call, as the store's error type.
    static func failure(_ what: String, code: Int32 = errno) -> SQLiteError {
        SQLiteError(code: SQLITE_CANTOPEN, message: "\(what): \(String(cString: strerror(code))).")
    }

    /// True when `mode` (a `st_mode`) is a directory's.
    static func isDirectory(_ mode: mode_t) -> Bool { mode & 0o170000 == 0o040000 }
    /// True when `mode` (a `st_mode`) is a regular file's.
    static func isRegularFile(_ mode: mode_t) -> Bool { mode & 0o170000 == 0o100000 }

    /// Creates the folder at `path` with mode 0700 when missing.
    static func makeDirectory(_ path: String) throws {
        if mkdir(path, 0o700) == 0 {
            // The umask can only have narrowed it.
            _ = chmod(path, 0o700)
            return
        }
        let code = errno
        var status = stat()
        if code == EEXIST, stat(path, &status) == 0, isDirectory(status.st_mode) { return }
        throw failure("Cannot create the directory \(path)", code: code)
    }

    /// Writes `data` to a new file at `path` (mode 0600) and syncs it, so that a system
    /// crash after the rename that follows cannot leave a file of the right size with other
    /// bytes.
    static func writeFile(_ data: Data, to path: String) throws {
        let descriptor = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw failure("Cannot create \(path)") }
        var isOpen = true
        defer { if isOpen { close(descriptor) } }
        let written = data.withUnsafeBytes { bytes -> Bool in
            guard let base = bytes.baseAddress else { return true }
            var offset = 0
            while offset < bytes.count {
                let count = write(descriptor, base + offset, bytes.count - offset)
                if count < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                offset += count
            }
            return true
        }
        guard written else { throw failure("Cannot write \(path)") }
        guard fsync(descriptor) == 0 else { throw failure("Cannot sync \(path)") }
        isOpen = false
        guard close(descriptor) == 0 else { throw failure("Cannot close \(path)") }
    }

    /// The file at `path` when it has exactly `size` bytes; nil otherwise.
    static func readFile(_ path: String, size: Int) -> Data? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, isRegularFile(status.st_mode), Int(status.st_size) == size else { return nil }
        guard size > 0 else { return Data() }
        return readIntoNewData(size) { base, length in
            var offset = 0
            while offset < length {
                let count = read(descriptor, base + offset, length - offset)
                if count < 0 {
                    if errno == EINTR { continue }
                    return -1
                }
                // Shorter than it said: truncated while we read.
                if count == 0 { return -1 }
                offset += count
            }
            return offset
        }
    }

    /// The modification time of the file at `path`; nil when it cannot be read.
    static func modificationDate(_ path: String) -> Date? {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        return Date(timeIntervalSince1970: Double(status.st_mtim.tv_sec) + Double(status.st_mtim.tv_nsec) / 1e9)
    }
}
