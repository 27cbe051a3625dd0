import CCourierSQLite
import CourierPolicies
import Foundation

/// The SQLite file behind a cookie storage's persistent cookies.
///
/// One table, one row per cookie, keyed by the cookie's key (name, domain, path); a column for
/// every field of ``StoredCookie``. Dates are seconds since 1970 as REAL (SQLite's double;
/// a date comes back within a fraction of a microsecond of what was written, exactly when it
/// was made from seconds since 1970); `SameSite` is its attribute value (`Strict`, `Lax`,
/// `None`) or NULL; the port list is decimal ports joined by commas (`80,443`), the empty text
/// for an empty list, NULL for none; flags are 0 or 1. `PRAGMA user_version` holds the schema
/// version. Session cookies are never in the file.
///
/// Sharing: changes upsert or delete single rows inside a transaction that takes the write
/// lock at its start (`BEGIN IMMEDIATE`); the table is never rewritten whole, so processes
/// sharing the file keep each other's cookies. A row that this code cannot read back (a wrong
/// type, text that is not UTF-8, an unknown `SameSite`, written by someone else) is skipped
/// when loading, and left in the file.
///
/// Files and crash safety are ``SQLiteDatabase``'s: a directory made with mode 0700, the file
/// and its `-wal` and `-shm` with 0600, WAL journaling with `synchronous=NORMAL`. That is
/// crash safe because in WAL mode a commit is a frame appended to the `-wal` file: a killed
/// process loses nothing that committed (the bytes are in the kernel's cache), and a system
/// crash or a power cut loses at most the last commits, never the file's consistency, since
/// every WAL frame carries a checksum and recovery drops a torn tail. Each `apply` is one
/// transaction: after a crash it is there whole or not at all. Deleted rows are overwritten
/// (`secure_delete`): a removed cookie is often a sign-in token, and should not linger in the
/// file's free pages.
///
/// Errors are ``SQLiteError``s: `isBusy` when another process held the file's lock for longer
/// than ``SQLiteDatabase/busyTimeout`` (trying again later may work), `isCorruption` when
/// damage shows up after opening (the owner should stop using the file).
///
/// Not thread-safe: one thread at a time. Its owner, `HTTPCookieStorage`, keeps it in its
/// state and serializes every call under its own lock (hence `@unchecked Sendable`); two
/// objects on one file, in one process or two, need no coordination beyond SQLite's locks.
final class CookieDatabase: @unchecked Sendable {
    /// The schema this code reads and writes. A file with a newer one (from a later Courier)
    /// is refused: ``open(at:)`` throws `SQLITE_ERROR`.
    static let schemaVersion: Int64 = 1

    /// Version 1. `expiry` is NOT NULL: only persistent cookies are stored. The index on it
    /// makes the purge of expired rows in ``load(now:)`` a range scan.
    private static let schema = """
        CREATE TABLE IF NOT EXISTS cookies (
            name TEXT NOT NULL,
            domain TEXT NOT NULL,
            path TEXT NOT NULL,
            value TEXT NOT NULL,
            host_only INTEGER NOT NULL,
            expiry REAL NOT NULL,
            secure INTEGER NOT NULL,
            http_only INTEGER NOT NULL,
            same_site TEXT,
            creation REAL NOT NULL,
            last_access REAL NOT NULL,
            comment TEXT,
            comment_url TEXT,
            version INTEGER NOT NULL,
            port_list TEXT,
            PRIMARY KEY (name, domain, path, host_only)
        );
        CREATE INDEX IF NOT EXISTS cookies_expiry ON cookies (expiry);
        """

    /// The table's columns, in the order of the SELECT's results (numbered from 0) and the
    /// INSERT's parameters (numbered from 1).
    private enum Column: Int32, CaseIterable {
        case name, domain, path, value, hostOnly, expiry, secure, httpOnly, sameSite, creation, lastAccess, comment, commentURL,
            version, portList

        /// The column's name in the table.
        var sqlName: String {
            switch self {
            case .name: "name"
            case .domain: "domain"
            case .path: "path"
            case .value: "value"
            case .hostOnly: "host_only"
            case .expiry: "expiry"
            case .secure: "secure"
            case .httpOnly: "http_only"
            case .sameSite: "same_site"
            case .creation: "creation"
            case .lastAccess: "last_access"
            case .comment: "comment"
            case .commentURL: "comment_url"
            case .version: "version"
            case .portList: "port_list"
            }
        }

        /// True for the columns of the key: an upsert finds the row by them and never changes them.
        var isKey: Bool { self == .name || self == .domain || self == .path || self == .hostOnly }

        /// Its index among the results of ``CookieDatabase/selectAll``.
        var result: Int32 { rawValue }
        /// Its parameter number in ``CookieDatabase/upsert``.
        var parameter: Int32 { rawValue + 1 }

        /// All columns, comma-separated, in order.
        static let list = allCases.map(\.sqlName).joined(separator: ", ")
    }

    /// Every row, oldest cookie first.
    private static let selectAll = "SELECT \(Column.list) FROM cookies ORDER BY creation"

    /// Inserts a cookie, or updates every other column of the row with its key.
    private static let upsert: String = {
        let parameters = Column.allCases.map { "?\($0.parameter)" }.joined(separator: ", ")
        let updates = Column.allCases.filter { !$0.isKey }.map { "\($0.sqlName) = excluded.\($0.sqlName)" }.joined(separator: ", ")
        return "INSERT INTO cookies (\(Column.list)) VALUES (\(parameters)) ON CONFLICT (name, domain, path, host_only) DO UPDATE SET \(updates)"
    }()

    /// Deletes the row with the key bound to ?1 (name), ?2 (domain), ?3 (path), ?4 (host-only).
    private static let deleteKey = "DELETE FROM cookies WHERE name = ?1 AND domain = ?2 AND path = ?3 AND host_only = ?4"

    /// The file.
    let url: URL
    /// Where ``open(at:)`` moved a damaged file it found at ``url`` before starting a new one;
    /// nil when the file was sound. For the owner to log.
    let damagedFileMovedTo: String?
    private let database: SQLiteDatabase

    private init(url: URL, damagedFileMovedTo: String?) throws {
        self.url = url
        self.damagedFileMovedTo = damagedFileMovedTo
        self.database = try SQLiteDatabase(url: url, fileMode: 0o600)
        try database.execute("PRAGMA secure_delete = ON")
        // Creates the table in a new file; accepts a file of this version; refuses a newer one.
        try database.migrate(to: Self.schemaVersion, schema: Self.schema)
    }

    /// Opens the file at `url`, creating it and its directory when missing. A damaged file
    /// (one that is not a database, say) is moved aside to `<name>.corrupt-<milliseconds since
    /// 1970>`, with its WAL, and a new one started; ``damagedFileMovedTo`` says where it went.
    ///
    /// - Throws: ``SQLiteError``: `isBusy` when another process held the lock too long;
    ///   `isCorruption` when a damaged file cannot be moved aside; `SQLITE_CANTOPEN` for a path
    ///   that cannot be made; `SQLITE_ERROR` for a schema from a later Courier.
    static func open(at url: URL) throws -> CookieDatabase {
        do {
            return try CookieDatabase(url: url, damagedFileMovedTo: nil)
        } catch let error as SQLiteError where error.isCorruption {
            // The failed connection is closed by now: the object that held it is gone.
            let aside = SQLiteDatabase.asidePath(for: url.path)
            guard SQLiteDatabase.moveAside(url.path, to: aside) else { throw error }
            return try CookieDatabase(url: url, damagedFileMovedTo: aside)
        }
    }

    /// The persistent cookies in the file that have not expired by `now`. The expired ones
    /// (expiry at or before `now`, as ``CookieJar`` counts them) are deleted first, in the same
    /// transaction. Rows that cannot be read back are skipped (see the type's discussion).
    func load(now: Date) throws -> [StoredCookie] {
        try database.transaction { () throws -> [StoredCookie] in
            let purge = try database.prepare("DELETE FROM cookies WHERE expiry <= ?1")
            try purge.bind(now.timeIntervalSince1970, at: 1)
            try purge.run()

            let select = try database.prepare(Self.selectAll)
            var cookies: [StoredCookie] = []
            while try select.step() {
                if let cookie = Self.cookie(in: select) { cookies.append(cookie) }
            }
            return cookies
        }
    }

    /// Writes a change of the jar in one transaction: all of it, or (when a statement fails)
    /// none of it.
    ///
    /// First the rows of `removed` are deleted; then each cookie of `stored` is written: a
    /// persistent one is upserted by its key, and a session one deletes the row with its key
    /// (the session cookie replaced that persistent one, and is not itself written). So a key
    /// in both ends as `stored` has it. A cookie whose dates are not finite numbers (none that
    /// ``CookieJar`` makes) could not be read back, and is treated like a session cookie.
    func apply(stored: [StoredCookie], removed: [StoredCookie.Key]) throws {
        guard !stored.isEmpty || !removed.isEmpty else { return }
        try database.transaction { () throws -> Void in
            let delete = try database.prepare(Self.deleteKey)
            for key in removed {
                try Self.delete(key, with: delete)
            }
            let upsert = try database.prepare(Self.upsert)
            for cookie in stored {
                if Self.isWritable(cookie) {
                    try Self.write(cookie, with: upsert)
                } else {
                    try Self.delete(cookie.key, with: delete)
                }
            }
        }
    }

    /// Deletes every row, this process's and every other's.
    func removeAll() throws {
        try database.transaction { () throws -> Void in
            try database.execute("DELETE FROM cookies")
        }
    }

    // MARK: Rows

    /// True when `cookie` is persistent and every date of it is a finite number.
    private static func isWritable(_ cookie: StoredCookie) -> Bool {
        guard let expiry = cookie.expiry else { return false }
        return [expiry, cookie.creation, cookie.lastAccess].allSatisfy { $0.timeIntervalSince1970.isFinite }
    }

    /// Runs `statement` (``deleteKey``) for `key`.
    private static func delete(_ key: StoredCookie.Key, with statement: SQLiteStatement) throws {
        statement.reset()
        try statement.bind(key.name, at: 1)
        try statement.bind(key.domain, at: 2)
        try statement.bind(key.path, at: 3)
        try statement.bind(Int64(key.hostOnly ? 1 : 0), at: 4)
        try statement.run()
    }

    /// Runs `statement` (``upsert``) for `cookie`, a persistent one.
    private static func write(_ cookie: StoredCookie, with statement: SQLiteStatement) throws {
        statement.reset()
        try statement.bind(cookie.name, at: Column.name.parameter)
        try statement.bind(cookie.domain, at: Column.domain.parameter)
        try statement.bind(cookie.path, at: Column.path.parameter)
        try statement.bind(cookie.value, at: Column.value.parameter)
        try statement.bind(Int64(cookie.hostOnly ? 1 : 0), at: Column.hostOnly.parameter)
        try statement.bind((cookie.expiry ?? .distantFuture).timeIntervalSince1970, at: Column.expiry.parameter)
        try statement.bind(Int64(cookie.secure ? 1 : 0), at: Column.secure.parameter)
        try statement.bind(Int64(cookie.httpOnly ? 1 : 0), at: Column.httpOnly.parameter)
        try statement.bind(cookie.sameSite?.rawValue, at: Column.sameSite.parameter)
        try statement.bind(cookie.creation.timeIntervalSince1970, at: Column.creation.parameter)
        try statement.bind(cookie.lastAccess.timeIntervalSince1970, at: Column.lastAccess.parameter)
        try statement.bind(cookie.comment, at: Column.comment.parameter)
        try statement.bind(cookie.commentURL, at: Column.commentURL.parameter)
        try statement.bind(Int64(cookie.version), at: Column.version.parameter)
        let ports = cookie.portList.map { ports in ports.map { String($0) }.joined(separator: ",") }
        try statement.bind(ports, at: Column.portList.parameter)
        try statement.run()
    }

    /// The cookie in the current row of `statement` (``selectAll``); nil when a column does
    /// not hold what ``write(_:with:)`` writes.
    private static func cookie(in statement: SQLiteStatement) -> StoredCookie? {
        let row = RowReader(statement: statement)
        do {
            return try StoredCookie(
                name: row.text(.name),
                value: row.text(.value),
                domain: row.text(.domain),
                hostOnly: row.flag(.hostOnly),
                path: row.text(.path),
                expiry: row.date(.expiry),
                secure: row.flag(.secure),
                httpOnly: row.flag(.httpOnly),
                sameSite: row.sameSite(.sameSite),
                creation: row.date(.creation),
                lastAccess: row.date(.lastAccess),
                comment: row.optionalText(.comment),
                commentURL: row.optionalText(.commentURL),
                version: row.integer(.version),
                portList: row.ports(.portList)
            )
        } catch {
            return nil
        }
    }

    private typealias UnreadableColumn = StrictRowReader.UnreadableColumn

    /// The store's columns read strictly (``StrictRowReader``), plus its own two encodings.
    private struct RowReader {
        let statement: SQLiteStatement
        private var row: StrictRowReader { StrictRowReader(statement: statement) }

        init(statement: SQLiteStatement) {
            self.statement = statement
        }

        func text(_ column: Column) throws -> String { try row.text(at: column.result) }
        func optionalText(_ column: Column) throws -> String? { try row.optionalText(at: column.result) }
        func flag(_ column: Column) throws -> Bool { try row.flag(at: column.result) }
        func date(_ column: Column) throws -> Date { try row.date(at: column.result) }

        /// An integer that fits an `Int`.
        func integer(_ column: Column) throws -> Int {
            guard let value = Int(exactly: try row.integer(at: column.result)) else { throw UnreadableColumn() }
            return value
        }

        /// NULL (no attribute), or `Strict`, `Lax` or `None`.
        func sameSite(_ column: Column) throws -> CookieSameSite? {
            guard let text = try optionalText(column) else { return nil }
            guard let sameSite = CookieSameSite(rawValue: text) else { throw UnreadableColumn() }
            return sameSite
        }

        /// NULL (no list), the empty text (an empty list), or decimal ports joined by commas.
        func ports(_ column: Column) throws -> [Int]? {
            guard let text = try optionalText(column) else { return nil }
            if text.isEmpty { return [] }
            var ports: [Int] = []
            for part in text.split(separator: ",", omittingEmptySubsequences: false) {
                guard let port = Int(part) else { throw UnreadableColumn() }
                ports.append(port)
            }
            return ports
        }
    }
}
