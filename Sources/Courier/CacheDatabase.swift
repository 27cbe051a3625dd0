import CCourierSQLite
import CourierCore
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The SQLite file and the body files behind a ``URLCache``'s disk store.
///
/// Layout, in the cache's directory (made with mode 0700): `Cache.sqlite` (mode 0600, WAL,
/// `PRAGMA user_version` holds the schema version) with one row per entry, and `Bodies/`
/// (0700) with one file (0600) per body larger than ``inlineBodyLimit``, named by a random
/// UUID. A smaller body lives in its row, saving a file and its inode for the many small
/// responses (API replies, redirects) a cache holds.
///
/// Crash safety. A body file is written under a temporary name (`<uuid>.partial`) and synced;
/// then, inside the transaction that inserts its row (`BEGIN IMMEDIATE`, so holding the
/// file's write lock), it is renamed to its final name, and the row is committed. So:
///  1. a row never names a file that is not whole: the rename comes after the sync and
///     before the commit, and a crash before the commit leaves no row;
///  2. a file under a final name with no row (the process died between rename and commit,
///     or between a delete's commit and the unlink of its file) is an orphan, removed by
///     ``removeOrphans(now:)`` when a cache opens the store, under the write lock, so that it
///     never races another process's rename-then-commit;
///  3. a `.partial` file is removed once it is older than ``abandonedTemporaryAge`` (another
///     process may be writing it right now).
/// A row whose body file is missing or has another size than the row says (a file truncated
/// or removed by hand, or a system crash that lost the rename) is never served: the reader
/// checks the size before using the body, and the owner then deletes the row.
///
/// Rows are replaced, not updated: storing a key deletes its row and inserts a new one with a
/// new `id` (`AUTOINCREMENT`: never reused), so that a reader that found a bad body can
/// delete exactly the row it read, never a newer one.
///
/// Not thread-safe: one thread at a time, like ``SQLiteDatabase``. ``URLCache`` holds two:
/// one for reads, under its disk lock, and one for writes, used by its serial writer queue
/// alone (hence `@unchecked Sendable`). Processes sharing a directory coordinate through
/// SQLite's locks.
final class CacheDatabase: @unchecked Sendable {
    /// The schema this code reads and writes. A file with a newer one (from a later Courier)
    /// is refused: ``open(directory:)`` throws `SQLITE_ERROR`.
    static let schemaVersion: Int64 = 1
    /// The database file's name in the cache directory.
    static let fileName = "Cache.sqlite"
    /// The folder of the body files in the cache directory.
    static let bodiesFolder = "Bodies"
    /// Bodies of at most this many bytes are kept in their row: 16 KiB, below which a file of
    /// its own costs more (an inode, a block, an open and a sync) than a blob in the
    /// database's pages.
    static let inlineBodyLimit = 16 * 1024
    /// The suffix of a body file being written.
    static let temporarySuffix = ".partial"
    /// A `.partial` file older than this (10 minutes) belongs to a writer that died: no live
    /// writer takes that long between creating the file and renaming it.
    static let abandonedTemporaryAge: TimeInterval = 600

    /// The columns, numbered as in ``selectByKey``'s results; the INSERT's parameter of a
    /// column is its number too (`id` is not inserted).
    private enum Column: Int32 {
        case id = 0
        case key, url, kind, status, httpVersion, responseFields, mimeType, expectedLength, textEncoding, requestFields, requestTime,
            responseTime, storagePolicy, userInfo, bodySize, bodyFile, body, cost, lastAccess
    }

    /// Every column but `id`, in ``Column`` order.
    private static let columns =
        "key, url, kind, status, http_version, response_fields, mime_type, expected_length, text_encoding, request_fields, request_time, response_time, storage_policy, user_info, body_size, body_file, body, cost, last_access"
    private static let insert = "INSERT INTO responses (\(columns)) VALUES (\((1...19).map { "?\($0)" }.joined(separator: ", ")))"
    private static let selectByKey = "SELECT id, \(columns) FROM responses WHERE key = ?1"

    /// An entry found by ``entry(forKey:)``.
    struct StoredEntry {
        /// Where the body is.
        enum Body {
            case inline(Data)
            /// A file name in the bodies folder.
            case file(String)
        }

        /// The row's id, for ``remove(id:)``.
        let id: Int64
        let record: CacheRecord
        let body: Body
    }

    /// What a lookup found.
    enum Lookup {
        /// No row for the key.
        case missing
        case found(StoredEntry)
        /// A row this code cannot read back (altered by hand, or damaged): the owner deletes it.
        case unreadable(id: Int64)
    }

    /// The cache directory.
    let directory: URL
    /// Where ``open(directory:)`` moved a damaged database file it found before starting a
    /// new one; nil when the file was sound. For the owner to log.
    let damagedFileMovedTo: String?
    private let database: SQLiteDatabase
    private let bodiesPath: String
    /// The statements a lookup or a store runs, compiled once for the connection: compiling
    /// the lookup's took more instructions than running it.
    private var statements: [String: SQLiteStatement] = [:]

    /// The database file in `directory`.
    static func fileURL(in directory: URL) -> URL {
        directory.appendingPathComponent(fileName)
    }

    private init(directory: URL, damagedFileMovedTo: String?) throws {
        self.directory = directory
        self.damagedFileMovedTo = damagedFileMovedTo
        self.bodiesPath = directory.appendingPathComponent(Self.bodiesFolder, isDirectory: true).path
        // Makes the directory (0700) and the file (0600).
        self.database = try SQLiteDatabase(url: Self.fileURL(in: directory), fileMode: 0o600)
        try database.migrate(to: Self.schemaVersion, schema: Self.schema)
        try addUsageTotal()
        try BodyFiles.makeDirectory(bodiesPath)
    }

    /// Opens the store in `directory`, creating the directory, the file and the bodies folder
    /// when missing. A damaged file (one that is not a database) is moved aside to
    /// `Cache.sqlite.corrupt-<milliseconds since 1970>`, with its WAL, and a new one started;
    /// ``damagedFileMovedTo`` says where it went. Its body files become orphans.
    ///
    /// - Throws: ``SQLiteError``: `SQLITE_CANTOPEN` for a directory that cannot be made or
    ///   written; `isBusy` when another process held the lock too long; `SQLITE_ERROR` for a
    ///   schema from a later Courier.
    static func open(directory: URL) throws -> CacheDatabase {
        do {
            return try CacheDatabase(directory: directory, damagedFileMovedTo: nil)
        } catch let error as SQLiteError where error.isCorruption {
            let path = fileURL(in: directory).path
            let aside = SQLiteDatabase.asidePath(for: path)
            guard SQLiteDatabase.moveAside(path, to: aside) else { throw error }
            return try CacheDatabase(directory: directory, damagedFileMovedTo: aside)
        }
    }

    // MARK: Reading

    /// The entry stored under `key`. The body of an inline entry is in it; a file body is
    /// read with ``readBody(named:size:)``.
    func entry(forKey key: String) throws -> Lookup {
        try withStatement(Self.selectByKey) { statement in
            try statement.bind(key, at: 1)
            guard try statement.step() else { return .missing }
            let id = statement.int64(at: Column.id.rawValue)
            guard let entry = Self.entry(in: statement) else { return .unreadable(id: id) }
            return .found(entry)
        }
    }

    /// The body file `name`, when it has exactly `size` bytes; nil when it is missing, has
    /// another size, or cannot be read. Uses no connection: safe from any thread.
    func readBody(named name: String, size: Int) -> Data? {
        guard Self.isBodyFileName(name) else { return nil }
        return BodyFiles.readFile(bodiesPath + "/" + name, size: size)
    }

    /// The sum of the costs of every entry: the disk usage.
    func totalCost() throws -> Int {
        let kept = try withStatement("SELECT total FROM usage WHERE id = 0") { statement in
            try statement.step() ? Int(statement.int64(at: 0)) : nil
        }
        if let kept { return kept }
        // The row was deleted by hand: the sum, the slow way.
        return try withStatement("SELECT COALESCE(SUM(cost), 0) FROM responses") { statement in
            try statement.step() ? Int(statement.int64(at: 0)) : 0
        }
    }

    /// Adds the usage table and its triggers (``usageSchema``) when the file lacks them.
    private func addUsageTotal() throws {
        let present = try withStatement("SELECT count(*) FROM sqlite_master WHERE name IN ('usage', 'usage_insert', 'usage_delete', 'usage_update')") { statement in
            try statement.step() ? statement.int64(at: 0) : 0
        }
        guard present < 4 else { return }
        try database.transaction { try database.execute(Self.usageSchema) }
    }

    /// The number of entries.
    func count() throws -> Int {
        let statement = try database.prepare("SELECT count(*) FROM responses")
        return try statement.step() ? Int(statement.int64(at: 0)) : 0
    }

    // MARK: Writing

    /// Stores `record` with `body`, replacing the key's entry, then evicts the least recently
    /// used entries until the usage is at most `capacity`. Returns the usage.
    ///
    /// A body above ``inlineBodyLimit`` is written to its file before the transaction starts
    /// (a long write does not hold the lock other processes wait for) and renamed inside it;
    /// see the type's discussion for the order.
    func store(_ record: CacheRecord, body: Data, capacity: Int, now: Date) throws -> Int {
        var fileName: String?
        var temporaryPath: String?
        if body.count > Self.inlineBodyLimit {
            let name = UUID().uuidString.lowercased()
            let temporary = bodiesPath + "/" + name + Self.temporarySuffix
            try BodyFiles.makeDirectory(bodiesPath)
            do {
                try BodyFiles.writeFile(body, to: temporary)
            } catch {
                _ = unlink(temporary)
                throw error
            }
            fileName = name
            temporaryPath = temporary
        }

        var renamed = false
        do {
            let (usage, unreferenced) = try database.transaction { () throws -> (Int, [String]) in
                if let fileName, let temporaryPath {
                    guard rename(temporaryPath, bodiesPath + "/" + fileName) == 0 else {
                        throw BodyFiles.failure("Cannot rename \(temporaryPath)")
                    }
                    renamed = true
                }
                var stale = try deleteRows(key: record.key)
                try insertRow(record, fileName: fileName, inlineBody: fileName == nil ? body : nil, now: now)
                let eviction = try evict(toCapacity: capacity)
                stale += eviction.files
                return (eviction.usage, stale)
            }
            removeBodies(unreferenced)
            return usage
        } catch {
            if let temporaryPath { _ = unlink(temporaryPath) }
            if renamed, let fileName { _ = unlink(bodiesPath + "/" + fileName) }
            throw error
        }
    }

    /// Deletes the entry of `key`, if any. Returns the usage.
    func remove(key: String) throws -> Int {
        let (usage, files) = try database.transaction { () throws -> (Int, [String]) in
            let deleted = try deleteRows(key: key)
            let total = try totalCost()
            return (total, deleted)
        }
        removeBodies(files)
        return usage
    }

    /// Deletes the row `id` (one that ``entry(forKey:)`` returned), if it is still there.
    /// Returns the usage.
    func remove(id: Int64) throws -> Int {
        let (usage, files) = try database.transaction { () throws -> (Int, [String]) in
            let select = try database.prepare("SELECT body_file FROM responses WHERE id = ?1")
            try select.bind(id, at: 1)
            var deleted: [String] = []
            if try select.step(), let name = select.text(at: 0) { deleted.append(name) }
            select.reset()
            let delete = try database.prepare("DELETE FROM responses WHERE id = ?1")
            try delete.bind(id, at: 1)
            try delete.run()
            let total = try totalCost()
            return (total, deleted)
        }
        removeBodies(files)
        return usage
    }

    /// Deletes every entry, this process's and every other's.
    func removeAll() throws {
        let files = try database.transaction { () throws -> [String] in
            let deleted = try bodyFiles(where: "body_file IS NOT NULL")
            try database.execute("DELETE FROM responses")
            return deleted
        }
        removeBodies(files)
    }

    /// Deletes the entries whose response time is at or after `date`. Returns the usage.
    func removeResponses(since date: Date) throws -> Int {
        let (usage, files) = try database.transaction { () throws -> (Int, [String]) in
            let select = try database.prepare("SELECT body_file FROM responses WHERE response_time >= ?1 AND body_file IS NOT NULL")
            try select.bind(date.timeIntervalSince1970, at: 1)
            var deleted: [String] = []
            while try select.step() {
                if let name = select.text(at: 0) { deleted.append(name) }
            }
            select.reset()
            let delete = try database.prepare("DELETE FROM responses WHERE response_time >= ?1")
            try delete.bind(date.timeIntervalSince1970, at: 1)
            try delete.run()
            let total = try totalCost()
            return (total, deleted)
        }
        removeBodies(files)
        return usage
    }

    /// Evicts the least recently used entries until the usage is at most `capacity`.
    /// Returns the usage.
    func evict(capacity: Int) throws -> Int {
        let eviction = try database.transaction { () throws -> (usage: Int, files: [String]) in
            try evict(toCapacity: capacity)
        }
        removeBodies(eviction.files)
        return eviction.usage
    }

    /// Marks the entry of `key` used at `time` (for the eviction order).
    func touch(key: String, at time: Date) throws {
        try withStatement("UPDATE responses SET last_access = ?2 WHERE key = ?1 AND last_access < ?2") { statement in
            try statement.bind(key, at: 1)
            try statement.bind(time.timeIntervalSince1970, at: 2)
            try statement.run()
        }
    }

    /// Brings the bodies folder and the rows into agreement, under the write lock (see the
    /// type's discussion): deletes the rows whose body file is missing, and the body files no
    /// row names (`.partial` ones only once they are older than ``abandonedTemporaryAge``).
    /// Files with other names are left alone. Returns the usage.
    func removeOrphans(now: Date) throws -> Int {
        let (usage, orphans) = try database.transaction { () throws -> (Int, [String]) in
            try BodyFiles.makeDirectory(bodiesPath)
            let listed = (try? FileManager.default.contentsOfDirectory(atPath: bodiesPath)) ?? []
            let present = Set(listed)
            var referenced = Set<String>()
            var missing: [Int64] = []
            let select = try database.prepare("SELECT id, body_file FROM responses WHERE body_file IS NOT NULL")
            while try select.step() {
                let name = select.text(at: 1) ?? ""
                if present.contains(name) {
                    referenced.insert(name)
                } else {
                    missing.append(select.int64(at: 0))
                }
            }
            select.reset()
            let delete = try database.prepare("DELETE FROM responses WHERE id = ?1")
            for id in missing {
                delete.reset()
                try delete.bind(id, at: 1)
                try delete.run()
            }

            var unnamed: [String] = []
            for name in listed where !referenced.contains(name) {
                if name.hasSuffix(Self.temporarySuffix), Self.isBodyFileName(String(name.dropLast(Self.temporarySuffix.count))) {
                    let age = BodyFiles.modificationDate(bodiesPath + "/" + name).map { now.timeIntervalSince($0) } ?? 0
                    if age >= Self.abandonedTemporaryAge { unnamed.append(name) }
                } else if Self.isBodyFileName(name) {
                    unnamed.append(name)
                }
            }
            let total = try totalCost()
            return (total, unnamed)
        }
        // Unlinked after the commit: no row can come to name an orphan (names are never
        // reused), so there is no race left.
        for name in orphans {
            _ = unlink(bodiesPath + "/" + name)
        }
        return usage
    }

    // MARK: Internals (inside a transaction)

    /// Deletes the rows of `key`; returns their body files.
    private func deleteRows(key: String) throws -> [String] {
        let files = try withStatement("SELECT body_file FROM responses WHERE key = ?1 AND body_file IS NOT NULL") { select in
            try select.bind(key, at: 1)
            var files: [String] = []
            while try select.step() {
                if let name = select.text(at: 0) { files.append(name) }
            }
            return files
        }
        try withStatement("DELETE FROM responses WHERE key = ?1") { delete in
            try delete.bind(key, at: 1)
            try delete.run()
        }
        return files
    }

    /// The body files of the rows matching `condition` (SQL without parameters).
    private func bodyFiles(where condition: String) throws -> [String] {
        let select = try database.prepare("SELECT body_file FROM responses WHERE \(condition)")
        var files: [String] = []
        while try select.step() {
            if let name = select.text(at: 0) { files.append(name) }
        }
        return files
    }

    private func insertRow(_ record: CacheRecord, fileName: String?, inlineBody: Data?, now: Date) throws {
        try withStatement(Self.insert) { statement in try bindRow(record, fileName: fileName, inlineBody: inlineBody, now: now, to: statement) }
    }

    private func bindRow(_ record: CacheRecord, fileName: String?, inlineBody: Data?, now: Date, to statement: SQLiteStatement) throws {
        try statement.bind(record.key, at: Column.key.rawValue)
        try statement.bind(record.url, at: Column.url.rawValue)
        try statement.bind(record.kind.rawValue, at: Column.kind.rawValue)
        try statement.bind(Int64(record.statusCode), at: Column.status.rawValue)
        try statement.bind(record.httpVersion, at: Column.httpVersion.rawValue)
        try statement.bind(CacheRecord.encodeFields(record.responseFields), at: Column.responseFields.rawValue)
        try statement.bind(record.mimeType, at: Column.mimeType.rawValue)
        try statement.bind(record.expectedContentLength, at: Column.expectedLength.rawValue)
        try statement.bind(record.textEncodingName, at: Column.textEncoding.rawValue)
        try statement.bind(CacheRecord.encodeFields(record.requestFields), at: Column.requestFields.rawValue)
        try statement.bind(Self.seconds(record.requestTime), at: Column.requestTime.rawValue)
        try statement.bind(Self.seconds(record.responseTime), at: Column.responseTime.rawValue)
        try statement.bind(Int64(record.storagePolicy.rawValue), at: Column.storagePolicy.rawValue)
        try statement.bind(record.userInfo, at: Column.userInfo.rawValue)
        try statement.bind(Int64(record.bodySize), at: Column.bodySize.rawValue)
        if let fileName {
            try statement.bind(fileName, at: Column.bodyFile.rawValue)
            try statement.bindNull(at: Column.body.rawValue)
        } else {
            try statement.bindNull(at: Column.bodyFile.rawValue)
            try statement.bind(inlineBody ?? Data(), at: Column.body.rawValue)
        }
        try statement.bind(Int64(record.cost), at: Column.cost.rawValue)
        try statement.bind(Self.seconds(now), at: Column.lastAccess.rawValue)
        try statement.run()
    }

    /// Deletes least recently used rows (oldest `last_access` first, the older row first
    /// among equals) until the sum of the costs is at most `capacity`; returns that sum and
    /// the deleted rows' body files.
    private func evict(toCapacity capacity: Int) throws -> (usage: Int, files: [String]) {
        var usage = try totalCost()
        guard usage > capacity else { return (usage, []) }
        let select = try database.prepare("SELECT id, body_file, cost FROM responses ORDER BY last_access, id")
        var victims: [Int64] = []
        var files: [String] = []
        while usage > capacity, try select.step() {
            victims.append(select.int64(at: 0))
            if let name = select.text(at: 1) { files.append(name) }
            usage -= Int(select.int64(at: 2))
        }
        select.reset()
        let delete = try database.prepare("DELETE FROM responses WHERE id = ?1")
        for id in victims {
            delete.reset()
            try delete.bind(id, at: 1)
            try delete.run()
        }
        usage = try totalCost()
        return (usage, files)
    }

    /// Runs `body` with the connection's compiled `sql`, compiling it the first time; the
    /// statement is reset after (one left at a row would hold a read transaction open, and
    /// the connection would go on reading an old snapshot).
    private func withStatement<T>(_ sql: String, _ body: (SQLiteStatement) throws -> T) throws -> T {
        let statement: SQLiteStatement
        if let compiled = statements[sql] {
            statement = compiled
        } else {
            statement = try database.prepare(sql)
            statements[sql] = statement
        }
        defer { statement.reset() }
        return try body(statement)
    }

    /// Unlinks body files of deleted rows (after the commit). Names that are not body file
    /// names (a row altered by hand) are never unlinked.
    private func removeBodies(_ names: [String]) {
        for name in names where Self.isBodyFileName(name) {
            _ = unlink(bodiesPath + "/" + name)
        }
    }

    /// A date as stored: seconds since 1970; a date that is not a finite number as 0.
    private static func seconds(_ date: Date) -> Double {
        let seconds = date.timeIntervalSince1970
        return seconds.isFinite ? seconds : 0
    }

    /// True for a name this store gives a body file: a lower-case UUID (36 characters of hex
    /// digits and dashes). Never a path, `.` or `..`.
    static func isBodyFileName(_ name: String) -> Bool {
        name.utf8.count == 36
            && name.utf8.allSatisfy { ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "f")) || $0 == UInt8(ascii: "-") }
    }

    // MARK: Rows

    /// The entry in the current row of `statement` (``selectByKey``); nil when a column does
    /// not hold what ``insertRow(_:fileName:inlineBody:now:)`` writes.
    private static func entry(in statement: SQLiteStatement) -> StoredEntry? {
        let row = RowReader(statement: statement)
        do {
            guard let kind = CacheRecord.Kind(rawValue: try row.integer(.kind)),
                let policy = URLCache.StoragePolicy(rawValue: UInt(clamping: try row.integer(.storagePolicy))),
                let responseFields = CacheRecord.decodeFields(try row.text(.responseFields)),
                let requestFields = CacheRecord.decodeFields(try row.text(.requestFields))
            else { return nil }
            let status = try row.integer(.status)
            guard kind == .url || (0...999).contains(status) else { return nil }
            let bodySize = try row.integer(.bodySize)
            let cost = try row.integer(.cost)
            guard bodySize >= 0, let size = Int(exactly: bodySize), let costValue = Int(exactly: cost) else { return nil }
            let record = CacheRecord(
                key: try row.text(.key),
                url: try row.optionalText(.url),
                kind: kind,
                statusCode: Int(status),
                httpVersion: try row.text(.httpVersion),
                responseFields: responseFields,
                mimeType: try row.optionalText(.mimeType),
                expectedContentLength: try row.integer(.expectedLength),
                textEncodingName: try row.optionalText(.textEncoding),
                requestFields: requestFields,
                requestTime: try row.date(.requestTime),
                responseTime: try row.date(.responseTime),
                storagePolicy: policy,
                userInfo: try row.optionalBlob(.userInfo),
                bodySize: size,
                cost: costValue
            )
            let body: StoredEntry.Body
            if let name = try row.optionalText(.bodyFile) {
                guard isBodyFileName(name) else { return nil }
                body = .file(name)
            } else {
                guard let data = try row.optionalBlob(.body), data.count == size else { return nil }
                body = .inline(data)
            }
            return StoredEntry(id: statement.int64(at: Column.id.rawValue), record: record, body: body)
        } catch {
            return nil
        }
    }

    private typealias UnreadableColumn = StrictRowReader.UnreadableColumn

    /// The store's columns read strictly (``StrictRowReader``).
    private struct RowReader {
        let statement: SQLiteStatement
        private var row: StrictRowReader { StrictRowReader(statement: statement) }

        init(statement: SQLiteStatement) {
            self.statement = statement
        }

        func text(_ column: Column) throws -> String { try row.text(at: column.rawValue) }
        func optionalText(_ column: Column) throws -> String? { try row.optionalText(at: column.rawValue) }
        func optionalBlob(_ column: Column) throws -> Data? { try row.optionalBlob(at: column.rawValue) }
        func integer(_ column: Column) throws -> Int64 { try row.integer(at: column.rawValue) }
        func date(_ column: Column) throws -> Date { try row.date(at: column.rawValue) }
    }
}
