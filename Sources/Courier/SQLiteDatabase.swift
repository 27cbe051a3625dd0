import CCourierSQLite
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A failed SQLite call, or a failure to make the database's file or directory.
struct SQLiteError: Error, CustomStringConvertible {
    /// The SQLite result code (`SQLITE_BUSY`, `SQLITE_CORRUPT`, …); `SQLITE_CANTOPEN` when the
    /// file or its directory could not be made.
    let code: Int32
    /// `sqlite3_errmsg`, or the system's reason. SQLite's messages never quote bound values, so
    /// this holds no password and may be logged.
    let message: String

    /// True when the file is damaged or is not a database at all: retrying will not help, the
    /// file has to be moved aside.
    var isCorruption: Bool {
        // The low byte is the primary code, in case extended codes are ever switched on.
        let primary = code & 0xff
        return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB
    }

    /// True when another connection held a lock for longer than the busy timeout: trying
    /// again later may work.
    var isBusy: Bool {
        let primary = code & 0xff
        return primary == SQLITE_BUSY || primary == SQLITE_LOCKED
    }

    var description: String { "SQLite error \(code): \(message)" }
}

/// One connection to an SQLite database file, for Courier's on-disk stores (the credential
/// storage and the cookie storage; the disk cache is to follow).
///
/// Not thread-safe by itself: a store keeps its connection under the store's lock and uses it
/// only there. The connection is opened without SQLite's own mutex (`SQLITE_OPEN_NOMUTEX`),
/// which allows use from any thread, one at a time.
///
/// Files: a missing directory is created with mode 0700 (the XDG base directory rule), and the
/// database file with `fileMode` (0600 by default) before SQLite opens it, so that it is never
/// readable by others, not even for a moment. SQLite gives the `-wal` and `-shm` files it
/// creates the database file's mode; ones left by an earlier run are narrowed to it as well.
///
/// Journaling is WAL with `synchronous=NORMAL`. A commit appends to the `-wal` file and does
/// not wait for the disk; the WAL is synced only before a checkpoint copies it into the
/// database. A crash of the process loses nothing (the bytes are in the kernel's cache); a
/// crash of the system or a power cut may lose the last transactions, but never corrupts the
/// file: every WAL frame carries a checksum, and recovery drops a torn tail, leaving the
/// database as of an earlier commit. Without WAL (a file system that cannot share memory)
/// NORMAL is not that safe, and `synchronous=FULL` is used instead.
///
/// Another process using the same file waits up to ``busyTimeout`` for its locks instead of
/// failing at once with `SQLITE_BUSY`.
final class SQLiteDatabase {
    /// Milliseconds a statement waits for another connection's lock; a short write by another
    /// process fits well within it, a hung one does not stall the caller for long.
    static let busyTimeout: Int32 = 2_000

    /// The database file.
    let path: String
    private let handle: OpaquePointer

    /// Opens the database at `url`, creating it and its directory when missing.
    ///
    /// - Parameter fileMode: the mode of a new file, and of an existing one (and its `-wal`
    ///   and `-shm`) that has another.
    init(url: URL, fileMode: mode_t = 0o600) throws {
        let path = url.path
        try SQLiteDatabase.makeDirectory(url.deletingLastPathComponent().path)
        try SQLiteDatabase.createFile(path, mode: fileMode)

        var opened: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let result = sqlite3_open_v2(path, &opened, flags, nil)
        guard result == SQLITE_OK, let connection = opened else {
            let message = opened.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(result))
            sqlite3_close_v2(opened)
            throw SQLiteError(code: result == SQLITE_OK ? SQLITE_CANTOPEN : result, message: message)
        }
        self.handle = connection
        self.path = path

        sqlite3_busy_timeout(handle, SQLiteDatabase.busyTimeout)
        // The first read of the file: a damaged one fails here with SQLITE_NOTADB.
        let journal = try prepare("PRAGMA journal_mode=WAL")
        let mode = try journal.step() ? journal.text(at: 0) : nil
        journal.reset()
        try execute(mode?.lowercased() == "wal" ? "PRAGMA synchronous=NORMAL" : "PRAGMA synchronous=FULL")
        for suffix in ["-wal", "-shm"] {
            // Missing files (ENOENT) are fine: SQLite makes them with the database's mode.
            _ = chmod(path + suffix, fileMode)
        }
    }

    deinit {
        // close_v2 defers the close until statements still alive are finalized.
        sqlite3_close_v2(handle)
    }

    /// Runs `sql`, one or more statements without parameters, ignoring any rows.
    func execute(_ sql: String) throws {
        let result = sqlite3_exec(handle, sql, nil, nil, nil)
        guard result == SQLITE_OK else { throw failure(result) }
    }

    /// Compiles one statement; bind its parameters and step through its rows.
    func prepare(_ sql: String) throws -> SQLiteStatement {
        var compiled: OpaquePointer?
        let result = sqlite3_prepare_v2(handle, sql, -1, &compiled, nil)
        guard result == SQLITE_OK else {
            sqlite3_finalize(compiled)
            throw failure(result)
        }
        guard let statement = compiled else {
            throw SQLiteError(code: SQLITE_MISUSE, message: "No statement in the SQL text.")
        }
        return SQLiteStatement(handle: statement, database: self)
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it (or the
    /// commit) throws.
    ///
    /// `BEGIN IMMEDIATE` takes the write lock at the start, so two processes' transactions
    /// queue (for up to ``busyTimeout``) instead of failing halfway with `SQLITE_BUSY`.
    func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let value = try body()
            try execute("COMMIT")
            return value
        } catch {
            // A failed statement may already have ended the transaction.
            if sqlite3_get_autocommit(handle) == 0 {
                sqlite3_exec(handle, "ROLLBACK", nil, nil, nil)
            }
            throw error
        }
    }

    /// The `PRAGMA user_version` of the file: the schema version its store wrote; 0 for a new
    /// file.
    func userVersion() throws -> Int64 {
        let statement = try prepare("PRAGMA user_version")
        let version = try statement.step() ? statement.int64(at: 0) : 0
        statement.reset()
        return version
    }

    /// Sets `PRAGMA user_version`; part of the current transaction, if any.
    func setUserVersion(_ version: Int64) throws {
        try execute("PRAGMA user_version = \(version)")
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    var changes: Int { Int(sqlite3_changes(handle)) }

    /// Brings a store's file to schema `version`: runs `schema` in a new file (user version 0)
    /// and sets the version, accepts a file already at `version`, and refuses any other
    /// (one from a later Courier, whose rows this code could misread) with `SQLITE_ERROR`.
    func migrate(to version: Int64, schema: String) throws {
        if try userVersion() == version { return }
        try transaction {
            // Read again under the write lock: another process may have created it meanwhile.
            let current = try userVersion()
            if current == version { return }
            guard current == 0 else {
                throw SQLiteError(code: SQLITE_ERROR, message: "Schema version \(current) is newer than this Courier's \(version).")
            }
            try execute(schema)
            try setUserVersion(version)
        }
    }

    /// The error for `code`, with the connection's message.
    func failure(_ code: Int32) -> SQLiteError {
        SQLiteError(code: code, message: String(cString: sqlite3_errmsg(handle)))
    }

    // MARK: Files

    /// Where a store moves its damaged file at `path`: `<path>.corrupt-<milliseconds since
    /// 1970>`, next to it.
    static func asidePath(for path: String) -> String {
        path + ".corrupt-\(Int64(Date().timeIntervalSince1970 * 1000))"
    }

    /// Renames the damaged database file at `path` (closed) to `aside`, so that a new one can
    /// be started in its place; true when that worked.
    static func moveAside(_ path: String, to aside: String) -> Bool {
        guard rename(path, aside) == 0 else { return false }
        // The WAL goes along under the name SQLite looks for next to `aside`, so that the two
        // can still be opened together to recover what is left. The -shm is only an index of
        // the WAL, rebuilt when needed.
        _ = rename(path + "-wal", aside + "-wal")
        _ = unlink(path + "-shm")
        return true
    }

    /// Creates `directory` and its missing parents with mode 0700; existing ones are left as
    /// they are.
    private static func makeDirectory(_ directory: String) throws {
        let absolute = directory.hasPrefix("/") ? directory : FileManager.default.currentDirectoryPath + "/" + directory
        var path = ""
        for component in absolute.split(separator: "/") {
            path += "/\(component)"
            if isDirectory(path) { continue }
            if mkdir(path, 0o700) == 0 {
                // The umask can only have narrowed it; make it exactly 0700.
                _ = chmod(path, 0o700)
                continue
            }
            let failure = errno
            // Another process may have made it meanwhile.
            if failure == EEXIST, isDirectory(path) { continue }
            throw SQLiteError(code: SQLITE_CANTOPEN, message: "Cannot create the directory \(path): \(String(cString: strerror(failure))).")
        }
    }

    private static func isDirectory(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }

    /// Creates the file at `path` with `mode` when missing, and narrows an existing file's
    /// mode to `mode`, before SQLite opens it.
    private static func createFile(_ path: String, mode: mode_t) throws {
        let descriptor = open(path, O_CREAT | O_RDWR | O_CLOEXEC, mode)
        guard descriptor >= 0 else {
            let failure = errno
            throw SQLiteError(code: SQLITE_CANTOPEN, message: "Cannot open \(path): \(String(cString: strerror(failure))).")
        }
        defer { close(descriptor) }
        var status = stat()
        if fstat(descriptor, &status) == 0, status.st_mode & 0o777 != mode {
            // Fails (EPERM) for a file owned by someone else; SQLite then uses it as it is.
            _ = fchmod(descriptor, mode)
        }
    }
}

/// A compiled SQL statement of an ``SQLiteDatabase``: bind parameters (numbered from 1),
/// step through rows, read columns (numbered from 0). Finalized when released; used under the
/// same lock as its database.
final class SQLiteStatement {
    private let handle: OpaquePointer
    /// Keeps the connection open as long as the statement lives.
    private let database: SQLiteDatabase

    fileprivate init(handle: OpaquePointer, database: SQLiteDatabase) {
        self.handle = handle
        self.database = database
    }

    deinit {
        sqlite3_finalize(handle)
    }

    // MARK: Binding

    /// Binds text, or NULL for nil.
    func bind(_ value: String?, at index: Int32) throws {
        guard let value else { return try bindNull(at: index) }
        let length = value.utf8.count
        guard length <= Int(Int32.max) else { throw SQLiteError(code: SQLITE_TOOBIG, message: "Text too large to bind.") }
        let result = value.withCString { courier_sqlite3_bind_text_transient(handle, index, $0, Int32(length)) }
        try check(result)
    }

    /// Binds an integer.
    func bind(_ value: Int64, at index: Int32) throws {
        try check(sqlite3_bind_int64(handle, index, value))
    }

    /// Binds a blob, or NULL for nil.
    func bind(_ value: Data?, at index: Int32) throws {
        guard let value else { return try bindNull(at: index) }
        guard value.count <= Int(Int32.max) else { throw SQLiteError(code: SQLITE_TOOBIG, message: "Blob too large to bind.") }
        let result = value.withUnsafeBytes { bytes -> Int32 in
            // An empty buffer may have no address, and a NULL pointer would bind NULL.
            guard let base = bytes.baseAddress else { return sqlite3_bind_zeroblob(handle, index, 0) }
            return courier_sqlite3_bind_blob_transient(handle, index, base, Int32(bytes.count))
        }
        try check(result)
    }

    /// Binds a floating-point number. SQLite has no NaN: a NaN is bound as NULL.
    func bind(_ value: Double, at index: Int32) throws {
        try check(sqlite3_bind_double(handle, index, value))
    }

    /// Binds NULL.
    func bindNull(at index: Int32) throws {
        try check(sqlite3_bind_null(handle, index))
    }

    // MARK: Running

    /// Runs the statement to its next row: true when a row is ready for the column getters,
    /// false when the statement is done.
    func step() throws -> Bool {
        let result = sqlite3_step(handle)
        switch result {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw database.failure(result)
        }
    }

    /// Runs the statement to its end, ignoring any rows.
    func run() throws {
        while try step() {}
    }

    /// Makes the statement ready to run again and clears its bindings. A statement stopped
    /// at a row holds a read transaction until it is reset or released.
    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    // MARK: Columns of the current row

    func isNull(at column: Int32) -> Bool {
        sqlite3_column_type(handle, column) == SQLITE_NULL
    }

    /// The column's storage class: `SQLITE_INTEGER`, `SQLITE_FLOAT`, `SQLITE_TEXT`,
    /// `SQLITE_BLOB` or `SQLITE_NULL`. Ask before reading the column: a getter that converts
    /// the value (``text(at:)`` of a number, say) changes what this returns afterwards.
    func storageClass(at column: Int32) -> Int32 {
        sqlite3_column_type(handle, column)
    }

    /// The column as a floating-point number; 0 for NULL.
    func double(at column: Int32) -> Double {
        sqlite3_column_double(handle, column)
    }

    /// The column as an integer; 0 for NULL.
    func int64(at column: Int32) -> Int64 {
        sqlite3_column_int64(handle, column)
    }

    /// The column as text; nil for NULL.
    func text(at column: Int32) -> String? {
        // Text first, then its length: that order is the one SQLite documents as safe.
        guard let bytes = sqlite3_column_text(handle, column) else { return nil }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }

    /// The column as bytes; nil for NULL.
    func blob(at column: Int32) -> Data? {
        if isNull(at: column) { return nil }
        let bytes = sqlite3_column_blob(handle, column)
        let count = Int(sqlite3_column_bytes(handle, column))
        guard let start = bytes, count > 0 else { return Data() }
        return Data(bytes: start, count: count)
    }

    private func check(_ result: Int32) throws {
        guard result == SQLITE_OK else { throw database.failure(result) }
    }
}

/// Strict readers of a statement's current row, for stores that must refuse what they did not
/// write (a row damaged, or written by another tool): each checks the column's storage class
/// before reading it (reading may convert it) and throws ``UnreadableColumn`` otherwise.
struct StrictRowReader {
    /// A column that does not hold what the store writes.
    struct UnreadableColumn: Error {}

    let statement: SQLiteStatement

    /// Text that is valid UTF-8 (not NULL, a number or a blob).
    func text(at index: Int32) throws -> String {
        guard let text = try optionalText(at: index) else { throw UnreadableColumn() }
        return text
    }

    /// NULL, or text that is valid UTF-8.
    func optionalText(at index: Int32) throws -> String? {
        switch statement.storageClass(at: index) {
        case SQLITE_NULL:
            return nil
        case SQLITE_TEXT:
            // The bytes as stored: `text(at:)` would repair bad UTF-8 instead of refusing it.
            guard let bytes = statement.blob(at: index), let text = String(validating: bytes, as: UTF8.self) else {
                throw UnreadableColumn()
            }
            return text
        default:
            throw UnreadableColumn()
        }
    }

    /// NULL, or a blob.
    func optionalBlob(at index: Int32) throws -> Data? {
        switch statement.storageClass(at: index) {
        case SQLITE_NULL: return nil
        case SQLITE_BLOB: return statement.blob(at: index)
        default: throw UnreadableColumn()
        }
    }

    /// An integer.
    func integer(at index: Int32) throws -> Int64 {
        guard statement.storageClass(at: index) == SQLITE_INTEGER else { throw UnreadableColumn() }
        return statement.int64(at: index)
    }

    /// The integer 0 (false) or 1 (true).
    func flag(at index: Int32) throws -> Bool {
        switch try integer(at: index) {
        case 0: return false
        case 1: return true
        default: throw UnreadableColumn()
        }
    }

    /// A finite number of seconds since 1970. A REAL column reports whole numbers as REAL
    /// too; an INTEGER is accepted as well, for rows written by other tools.
    func date(at index: Int32) throws -> Date {
        let storage = statement.storageClass(at: index)
        guard storage == SQLITE_FLOAT || storage == SQLITE_INTEGER else { throw UnreadableColumn() }
        let seconds = statement.double(at: index)
        guard seconds.isFinite else { throw UnreadableColumn() }
        return Date(timeIntervalSince1970: seconds)
    }
}
