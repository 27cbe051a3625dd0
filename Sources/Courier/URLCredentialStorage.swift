import CCourierSQLite
import CourierSync
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The key, in the options of ``URLCredentialStorage/remove(_:for:options:)``, whose true
/// value (an `NSNumber` or a `Bool`) lets a `.synchronizable` credential be removed.
public let NSURLCredentialStorageRemoveSynchronizableCredentials: String = "NSURLCredentialStorageRemoveSynchronizableCredentials"

extension Notification.Name {
    /// Posted on `NotificationCenter.default` after a change to a credential storage (one
    /// that changed something); the object is the storage, there is no user info. Courier
    /// posts it on the thread that made the change, after the storage's lock is released.
    public static let NSURLCredentialStorageChanged = Notification.Name("NSURLCredentialStorageChangedNotification")
}

/// User-and-password credentials by protection space, with a default per space: Apple's
/// `URLCredentialStorage`.
///
/// In a space, credentials are kept by user name; setting one for a user replaces that user's
/// previous one. What is kept depends on the credential's persistence:
/// - `.none`: nothing; such a credential is never stored. Nor is a credential without a user
///   (a server trust, a client identity).
/// - `.forSession`: in memory, for the life of the storage object.
/// - `.permanent`: in memory and in the storage's file, so that later storages (and other
///   processes) find it.
/// - `.synchronizable`: like `.permanent` (Linux has no service to synchronize it with), and
///   removed only when asked to with ``NSURLCredentialStorageRemoveSynchronizableCredentials``.
///
/// The first credential set for a space becomes its default, unless a default is set
/// explicitly with ``setDefaultCredential(_:for:)``. Removing the default leaves the space
/// without one.
///
/// The file of ``shared`` and ``init()`` is `$XDG_DATA_HOME/courier/credentials.sqlite`
/// (`~/.local/share/courier/credentials.sqlite` by default); an ephemeral configuration's
/// storage has none. The file is opened and read on the storage's first use, and every change
/// is written at once, row by row, so that processes sharing the file never lose each other's
/// credentials. A storage reads the file only once: what another process adds later is seen
/// by storages made after. When the file cannot be opened or written, the storage carries on
/// in memory and logs a warning (never a credential); a damaged file is renamed
/// `credentials.sqlite.corrupt-<milliseconds since 1970>` and a new one started.
///
/// - Warning: permanent passwords are stored as they are, protected by the file's mode (0600)
///   and its directory's (0700) only: as safe as the user's account, not encrypted as in a
///   keychain. Keep a password that must not reach the disk `.forSession`.
///
/// Thread-safe: one lock guards the storage; notifications are posted and completion handlers
/// called outside it.
open class URLCredentialStorage: NSObject, @unchecked Sendable {
    /// Where a storage keeps its permanent credentials.
    enum Store {
        /// In memory only (ephemeral configurations): permanent credentials last as long as
        /// the storage.
        case memory
        /// The SQLite file at the URL, created (with its directory) when missing.
        case file(URL)
    }

    /// The file behind the permanent credentials, as far as it got.
    ///
    /// `unopened` → `open` (the first use opened and read it) or `memory` (it could not be
    /// opened); it stays `unopened` while the file does not exist and nothing is to be saved,
    /// or while another process holds the file's lock too long. `open` → `memory` when a
    /// write finds the file damaged. `memory` is final.
    enum Backing: Sendable {
        /// Not used yet.
        case unopened(URL)
        /// Permanent credentials are written through to the file.
        case open(CredentialDatabase)
        /// No file: an in-memory storage, or one whose file failed.
        case memory
    }

    /// The credentials of one protection space.
    struct SpaceEntry: Sendable {
        /// The space, as ``allCredentials`` gives it.
        let space: URLProtectionSpace
        /// By user name; never empty (an entry without credentials is removed).
        var credentials: [String: URLCredential] = [:]
        /// The user whose credential is the default; nil when none is.
        var defaultUser: String?
    }

    /// What the lock guards.
    struct State: Sendable {
        var backing: Backing
        var entries: [ProtectionSpaceKey: SpaceEntry] = [:]
    }

    private static let sharedStorage = URLCredentialStorage()

    /// The shared storage; its permanent credentials are in the user's data directory (see the
    /// type's discussion).
    open class var shared: URLCredentialStorage { sharedStorage }

    /// Guarded: all of the storage's state, including the file's connection.
    private let state: Mutex<State>
    private let logger = Logger(label: "courier")

    /// A storage with its permanent credentials in the user's data directory, like
    /// ``shared`` (and sharing its file, but not its memory).
    public override init() {
        state = Mutex(State(backing: URLCredentialStorage.backing(for: URLCredentialStorage.defaultStore)))
        super.init()
    }

    /// A storage whose permanent credentials go to `store`.
    init(store: Store) {
        state = Mutex(State(backing: URLCredentialStorage.backing(for: store)))
        super.init()
    }

    // MARK: Reading

    /// The credentials of `space` by user name; nil when it has none.
    open func credentials(for space: URLProtectionSpace) -> [String : URLCredential]? {
        let key = ProtectionSpaceKey(space)
        return withLoadedState { $0.entries[key]?.credentials }
    }

    /// The credentials of every space that has any, by space and user name.
    open var allCredentials: [URLProtectionSpace : [String : URLCredential]] {
        withLoadedState { state in
            var all: [URLProtectionSpace: [String: URLCredential]] = [:]
            for entry in state.entries.values {
                all[entry.space] = entry.credentials
            }
            return all
        }
    }

    /// The default credential of `space`; nil when it has none.
    open func defaultCredential(for space: URLProtectionSpace) -> URLCredential? {
        let key = ProtectionSpaceKey(space)
        return withLoadedState { state in
            guard let entry = state.entries[key], let user = entry.defaultUser else { return nil }
            return entry.credentials[user]
        }
    }

    // MARK: Changing

    /// Keeps `credential` for `space`, replacing the one of the same user; it becomes the
    /// space's default when the space has none. A `.none` credential, or one without a user,
    /// is not stored.
    open func set(_ credential: URLCredential, for space: URLProtectionSpace) {
        store(credential, for: space, asDefault: false)
    }

    /// Keeps `credential` for `space`, as ``set(_:for:)`` does, and makes it the space's
    /// default.
    open func setDefaultCredential(_ credential: URLCredential, for space: URLProtectionSpace) {
        store(credential, for: space, asDefault: true)
    }

    /// Removes the credential of `credential`'s user from `space`, in memory and on disk; a
    /// `.synchronizable` one stays. See ``remove(_:for:options:)``.
    open func remove(_ credential: URLCredential, for space: URLProtectionSpace) {
        remove(credential, for: space, options: nil)
    }

    /// Removes the credential of `credential`'s user from `space`, in memory and on disk, and
    /// with it the space's default when it was that. A `.synchronizable` credential (the one
    /// given or the one stored) is removed only when `options` holds
    /// ``NSURLCredentialStorageRemoveSynchronizableCredentials`` with a true value.
    ///
    /// The stored credential is found by user name; its password need not match.
    open func remove(_ credential: URLCredential, for space: URLProtectionSpace, options: [String : AnyObject]? = [:]) {
        guard let user = credential.user else { return }
        let mayRemoveSynchronizable = URLCredentialStorage.removesSynchronizable(options)
        let key = ProtectionSpaceKey(space)
        let changed = withLoadedState { state -> Bool in
            guard var entry = state.entries[key], let stored = entry.credentials[user] else { return false }
            if stored.persistence == .synchronizable || credential.persistence == .synchronizable, !mayRemoveSynchronizable {
                return false
            }
            entry.credentials[user] = nil
            if entry.defaultUser == user { entry.defaultUser = nil }
            state.entries[key] = entry.credentials.isEmpty ? nil : entry
            if stored.persistence.isWrittenToDisk {
                write([.delete(key, user: user)], in: &state)
            }
            return true
        }
        if changed { postChanged() }
    }

    // MARK: On behalf of a task

    /// Passes the credentials of `protectionSpace` to `completionHandler`, at once, on the
    /// calling thread. The task is not used; a subclass may use it.
    open func getCredentials(
        for protectionSpace: URLProtectionSpace, task: URLSessionTask,
        completionHandler: @escaping @Sendable ([String : URLCredential]?) -> Void
    ) {
        completionHandler(credentials(for: protectionSpace))
    }

    /// The credentials of `protectionSpace`, from ``getCredentials(for:task:completionHandler:)``.
    open func credentials(for protectionSpace: URLProtectionSpace, task: URLSessionTask) async -> [String : URLCredential]? {
        await withCheckedContinuation { continuation in
            getCredentials(for: protectionSpace, task: task) { continuation.resume(returning: $0) }
        }
    }

    /// ``set(_:for:)``; the task is not used.
    open func set(_ credential: URLCredential, for protectionSpace: URLProtectionSpace, task: URLSessionTask) {
        set(credential, for: protectionSpace)
    }

    /// ``remove(_:for:options:)``; the task is not used.
    open func remove(_ credential: URLCredential, for protectionSpace: URLProtectionSpace, options: [String : AnyObject]? = [:], task: URLSessionTask) {
        remove(credential, for: protectionSpace, options: options)
    }

    /// Passes the default credential of `space` to `completionHandler`, at once, on the
    /// calling thread. The task is not used; a subclass may use it.
    open func getDefaultCredential(
        for space: URLProtectionSpace, task: URLSessionTask, completionHandler: @escaping @Sendable (URLCredential?) -> Void
    ) {
        completionHandler(defaultCredential(for: space))
    }

    /// The default credential of `protectionSpace`, from
    /// ``getDefaultCredential(for:task:completionHandler:)``.
    open func defaultCredential(for protectionSpace: URLProtectionSpace, task: URLSessionTask) async -> URLCredential? {
        await withCheckedContinuation { continuation in
            getDefaultCredential(for: protectionSpace, task: task) { continuation.resume(returning: $0) }
        }
    }

    /// ``setDefaultCredential(_:for:)``; the task is not used.
    open func setDefaultCredential(_ credential: URLCredential, for protectionSpace: URLProtectionSpace, task: URLSessionTask) {
        setDefaultCredential(credential, for: protectionSpace)
    }

    // MARK: Internals

    /// `$XDG_DATA_HOME/courier/credentials.sqlite`, `XDG_DATA_HOME` defaulting to
    /// `$HOME/.local/share` (the XDG base directory specification).
    static func defaultStoreURL(environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        XDGDirectories.data("credentials.sqlite", environment: environment)
    }

    /// The store of ``shared`` and ``init()``.
    static var defaultStore: Store { .file(defaultStoreURL()) }

    private static func backing(for store: Store) -> Backing {
        switch store {
        case .memory: .memory
        case .file(let url): .unopened(url)
        }
    }

    /// True when `options` allow removing a `.synchronizable` credential.
    private static func removesSynchronizable(_ options: [String: AnyObject]?) -> Bool {
        guard let value = options?[NSURLCredentialStorageRemoveSynchronizableCredentials] else { return false }
        if let number = value as? NSNumber { return number.boolValue }
        if let flag = value as? Bool { return flag }
        return false
    }

    /// Runs `body` under the lock, after opening and reading the file if this is the
    /// storage's first use and the file exists. A missing file is created only when there is
    /// something to write (see `write(_:in:)`): reading leaves no file behind.
    private func withLoadedState<T: Sendable>(_ body: (inout State) -> T) -> T {
        state.withLock { state -> T in
            if case .unopened(let url) = state.backing, FileManager.default.fileExists(atPath: url.path) {
                load(url, into: &state)
            }
            return body(&state)
        }
    }

    /// Opens (or creates) the file at `url` and takes in the credentials it holds for users
    /// that memory has none for. The storage stays in memory when the file cannot be had, and
    /// tries again on its next use when another process held the file's lock too long.
    private func load(_ url: URL, into state: inout State) {
        let rows: [CredentialDatabase.Row]
        switch CredentialDatabase.open(at: url, logger: logger) {
        case .opened(let database, let stored):
            state.backing = .open(database)
            rows = stored
        case .busy:
            return
        case .unavailable:
            state.backing = .memory
            return
        }
        for row in rows {
            var entry = state.entries[row.key] ?? SpaceEntry(space: row.key.makeSpace())
            guard entry.credentials[row.user] == nil else { continue }
            entry.credentials[row.user] = row.credential
            // Rows come ordered by user; should processes have marked two defaults, the first wins.
            if row.isDefault, entry.defaultUser == nil { entry.defaultUser = row.user }
            state.entries[row.key] = entry
        }
    }

    /// Keeps `credential` for `space`: see ``set(_:for:)``.
    private func store(_ credential: URLCredential, for space: URLProtectionSpace, asDefault: Bool) {
        guard let user = credential.user, credential.persistence != .none else { return }
        let key = ProtectionSpaceKey(space)
        let changed = withLoadedState { state -> Bool in
            var entry = state.entries[key] ?? SpaceEntry(space: key.makeSpace())
            let previous = entry.credentials[user]
            let defaultUser: String? = asDefault || entry.defaultUser == nil ? user : entry.defaultUser
            let movesDefault = defaultUser != entry.defaultUser
            if let previous, previous.isEqual(credential), !movesDefault { return false }

            var changes: [CredentialDatabase.Change] = []
            // A default moving to this user takes the mark off the others' rows, so that the
            // file agrees with memory (another process's mark included: the last one set wins).
            if movesDefault { changes.append(.clearDefault(key)) }
            if credential.persistence.isWrittenToDisk {
                changes.append(.save(key, credential, isDefault: defaultUser == user))
            } else if previous?.persistence.isWrittenToDisk == true {
                // A session credential replaces the permanent one of the same user.
                changes.append(.delete(key, user: user))
            }

            entry.credentials[user] = credential
            entry.defaultUser = defaultUser
            state.entries[key] = entry
            write(changes, in: &state)
            return true
        }
        if changed { postChanged() }
    }

    /// Writes `changes` to the file, in one transaction, when the storage has a file. A failure
    /// leaves the change in memory only and is logged (the path and SQLite's reason, never a
    /// credential); a damaged file detaches the storage from it.
    private func write(_ changes: [CredentialDatabase.Change], in state: inout State) {
        guard !changes.isEmpty else { return }
        if case .unopened(let url) = state.backing {
            // The file did not exist when this change began; only a credential to save makes it.
            guard changes.contains(where: \.isSave) else { return }
            load(url, into: &state)
        }
        guard case .open(let database) = state.backing else { return }
        do {
            try database.apply(changes)
        } catch let error as SQLiteError where error.isCorruption {
            logger.warning("The credential store \(database.url.path) is damaged (\(error.message)); this storage keeps its credentials in memory from now on.")
            state.backing = .memory
        } catch {
            logger.warning("Cannot write to the credential store \(database.url.path) (\(error)); the change is kept in memory only.")
        }
    }

    private func postChanged() {
        NotificationCenter.default.post(name: .NSURLCredentialStorageChanged, object: self)
    }
}

extension URLCredential.Persistence {
    /// True for the persistences a credential storage writes to its file.
    fileprivate var isWrittenToDisk: Bool { self == .permanent || self == .synchronizable }
}

/// The fields that make a protection space what it is (those `URLProtectionSpace.isEqual`
/// compares), as a value: the key of a storage's credentials.
struct ProtectionSpaceKey: Hashable, Sendable {
    var protocolName: String?
    var host: String
    var port: Int
    var realm: String?
    var authenticationMethod: String
    var proxyType: String?

    init(_ space: URLProtectionSpace) {
        protocolName = space.protocol
        host = space.host
        port = space.port
        realm = space.realm
        authenticationMethod = space.authenticationMethod
        proxyType = space.proxyType
    }

    init(protocolName: String?, host: String, port: Int, realm: String?, authenticationMethod: String, proxyType: String?) {
        self.protocolName = protocolName
        self.host = host
        self.port = port
        self.realm = realm
        self.authenticationMethod = authenticationMethod
        self.proxyType = proxyType
    }

    /// A new space with these fields (a proxy space when there is a proxy type).
    func makeSpace() -> URLProtectionSpace {
        if let proxyType {
            return URLProtectionSpace(proxyHost: host, port: port, type: proxyType, realm: realm, authenticationMethod: authenticationMethod)
        }
        return URLProtectionSpace(host: host, port: port, protocol: protocolName, realm: realm, authenticationMethod: authenticationMethod)
    }
}

/// The SQLite file behind a credential storage's permanent credentials.
///
/// One table, one row per credential: the space's fields, the user, the password, the
/// persistence (`.permanent` or `.synchronizable`) and whether it is the space's default.
/// `PRAGMA user_version` holds the schema version. Changes insert, replace or delete single
/// rows inside a transaction that takes the write lock at its start; the table is never
/// rewritten whole, so processes sharing the file keep each other's rows. Deleted rows are
/// overwritten (`secure_delete`), so a removed password does not linger in the file's free
/// pages.
///
/// `@unchecked Sendable`: it lives in its storage's state and is used only under that lock.
final class CredentialDatabase: @unchecked Sendable {
    /// The schema this code reads and writes. A file with a newer one (from a later Courier)
    /// is left alone and the storage stays in memory.
    static let schemaVersion: Int64 = 1

    /// Version 1. A nil protocol, realm or proxy type is NULL. SQLite treats NULLs as distinct
    /// in a PRIMARY KEY or UNIQUE constraint, so the key is a unique index in which each NULL
    /// is replaced by an empty blob: a value that no text equals, which keeps a nil realm
    /// apart from an empty one while two nil realms collide as they should.
    private static let schema = """
        CREATE TABLE IF NOT EXISTS credentials (
            protocol TEXT,
            host TEXT NOT NULL,
            port INTEGER NOT NULL,
            realm TEXT,
            method TEXT NOT NULL,
            proxy_type TEXT,
            user TEXT NOT NULL,
            password TEXT NOT NULL,
            persistence INTEGER NOT NULL,
            is_default INTEGER NOT NULL DEFAULT 0
        );
        CREATE UNIQUE INDEX IF NOT EXISTS credentials_key ON credentials (
            host, port, method, user, coalesce(protocol, x''), coalesce(realm, x''), coalesce(proxy_type, x'')
        );
        """

    /// The rows of one space: parameters ?1 to ?6 as bound by `bind(_:to:)`. `IS` matches
    /// NULL with NULL, as the key does.
    private static let spaceCondition =
        "protocol IS ?1 AND host = ?2 AND port = ?3 AND realm IS ?4 AND method = ?5 AND proxy_type IS ?6"

    /// One stored credential.
    struct Row {
        let key: ProtectionSpaceKey
        let user: String
        let credential: URLCredential
        let isDefault: Bool
    }

    /// A change to the file.
    enum Change: Sendable {
        /// Insert the credential's row, or replace the row of its user in the space.
        case save(ProtectionSpaceKey, URLCredential, isDefault: Bool)
        /// Delete the user's row in the space.
        case delete(ProtectionSpaceKey, user: String)
        /// Take the default mark off every row of the space.
        case clearDefault(ProtectionSpaceKey)

        /// True for `save`: the one change that needs a file to exist.
        var isSave: Bool {
            if case .save = self { return true }
            return false
        }
    }

    /// The file.
    let url: URL
    private let database: SQLiteDatabase

    private init(url: URL) throws {
        self.url = url
        self.database = try SQLiteDatabase(url: url, fileMode: 0o600)
        try database.execute("PRAGMA secure_delete = ON")
        // Creates the table in a new file; accepts a file of this version; refuses a newer one.
        try database.migrate(to: Self.schemaVersion, schema: Self.schema)
    }

    /// What opening the file gave.
    enum Opening {
        /// The file, and the credentials it holds.
        case opened(CredentialDatabase, [Row])
        /// Another process held the file's lock for longer than the busy timeout: try again
        /// on the next use.
        case busy
        /// No usable file: a path that cannot be made or written, a schema from a later
        /// Courier, a damaged file that cannot be moved aside.
        case unavailable
    }

    /// Opens the file at `url` and reads its rows. A damaged file is moved aside and a new
    /// one started. Failures are logged (the path and SQLite's reason).
    static func open(at url: URL, logger: Logger) -> Opening {
        do {
            return try openAndRead(url)
        } catch let error as SQLiteError where error.isCorruption {
            let aside = SQLiteDatabase.asidePath(for: url.path)
            guard SQLiteDatabase.moveAside(url.path, to: aside) else {
                logger.warning("The credential store \(url.path) is damaged (\(error.message)) and cannot be moved aside; credentials are kept in memory.")
                return .unavailable
            }
            logger.warning("The credential store \(url.path) was damaged (\(error.message)); moved to \(aside), a new one is started.")
            do {
                return try openAndRead(url)
            } catch {
                return failure(error, opening: url, logger: logger)
            }
        } catch {
            return failure(error, opening: url, logger: logger)
        }
    }

    private static func openAndRead(_ url: URL) throws -> Opening {
        let database = try CredentialDatabase(url: url)
        return .opened(database, try database.rows())
    }

    /// Logs why the file at `url` could not be opened, and whether to try again.
    private static func failure(_ error: any Error, opening url: URL, logger: Logger) -> Opening {
        if let error = error as? SQLiteError, error.isBusy {
            logger.warning("The credential store \(url.path) stayed locked by another process (\(error.message)); trying again on the next use.")
            return .busy
        }
        logger.warning("Cannot open the credential store \(url.path) (\(error)); credentials are kept in memory.")
        return .unavailable
    }

    /// Every stored credential, ordered by user.
    func rows() throws -> [Row] {
        let statement = try database.prepare("""
            SELECT protocol, host, port, realm, method, proxy_type, user, password, persistence, is_default
            FROM credentials ORDER BY user
            """)
        var rows: [Row] = []
        while try statement.step() {
            guard let host = statement.text(at: 1), let method = statement.text(at: 4), let user = statement.text(at: 6),
                let password = statement.text(at: 7)
            else { continue }
            let key = ProtectionSpaceKey(
                protocolName: statement.text(at: 0), host: host, port: Int(truncatingIfNeeded: statement.int64(at: 2)),
                realm: statement.text(at: 3), authenticationMethod: method, proxyType: statement.text(at: 5)
            )
            let synchronizable = Int64(URLCredential.Persistence.synchronizable.rawValue)
            let persistence: URLCredential.Persistence = statement.int64(at: 8) == synchronizable ? .synchronizable : .permanent
            let credential = URLCredential(user: user, password: password, persistence: persistence)
            rows.append(Row(key: key, user: user, credential: credential, isDefault: statement.int64(at: 9) != 0))
        }
        return rows
    }

    /// Applies `changes` in one transaction: all of them or, when one fails, none.
    func apply(_ changes: [Change]) throws {
        try database.transaction {
            for change in changes {
                switch change {
                case .save(let key, let credential, let isDefault):
                    guard let user = credential.user, let password = credential.password else { continue }
                    let statement = try database.prepare("""
                        INSERT OR REPLACE INTO credentials
                            (protocol, host, port, realm, method, proxy_type, user, password, persistence, is_default)
                        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                        """)
                    try bind(key, to: statement)
                    try statement.bind(user, at: 7)
                    try statement.bind(password, at: 8)
                    try statement.bind(Int64(credential.persistence.rawValue), at: 9)
                    try statement.bind(Int64(isDefault ? 1 : 0), at: 10)
                    try statement.run()
                case .delete(let key, let user):
                    let statement = try database.prepare("DELETE FROM credentials WHERE \(Self.spaceCondition) AND user = ?7")
                    try bind(key, to: statement)
                    try statement.bind(user, at: 7)
                    try statement.run()
                case .clearDefault(let key):
                    let statement = try database.prepare("UPDATE credentials SET is_default = 0 WHERE \(Self.spaceCondition) AND is_default != 0")
                    try bind(key, to: statement)
                    try statement.run()
                }
            }
        }
    }

    /// Binds the space's fields to parameters ?1 to ?6 (see `spaceCondition`).
    private func bind(_ key: ProtectionSpaceKey, to statement: SQLiteStatement) throws {
        try statement.bind(key.protocolName, at: 1)
        try statement.bind(key.host, at: 2)
        try statement.bind(Int64(key.port), at: 3)
        try statement.bind(key.realm, at: 4)
        try statement.bind(key.authenticationMethod, at: 5)
        try statement.bind(key.proxyType, at: 6)
    }
}
