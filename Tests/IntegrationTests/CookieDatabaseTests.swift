@testable import Courier
import CourierPolicies
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A directory of its own under the temporary directory; `remove()` deletes it with all in it.
private struct CookieStoreDirectory {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("CourierCookieDatabaseTests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// A store file in the directory.
    var store: URL { url.appendingPathComponent("cookies.sqlite") }

    func remove() {
        try? FileManager.default.removeItem(at: url)
    }
}

/// The permission bits of the file at `path`; nil when there is no file.
private func cookieStoreMode(_ path: String) -> mode_t? {
    var status = stat()
    guard stat(path, &status) == 0 else { return nil }
    return status.st_mode & 0o777
}

/// A fixed moment, exact in seconds since 1970 (so that dates round-trip bit for bit).
private let cookieEpoch = Date(timeIntervalSince1970: 1_750_000_000.5)

/// A persistent cookie on example.test, expiring a day after `cookieEpoch`.
private func persistentCookie(
    _ name: String, value: String = "v", domain: String = "example.test", path: String = "/",
    expiry: Date = cookieEpoch.addingTimeInterval(86_400)
) -> StoredCookie {
    StoredCookie(
        name: name, value: value, domain: domain, hostOnly: true, path: path, expiry: expiry, secure: false, httpOnly: false,
        sameSite: nil, creation: cookieEpoch, lastAccess: cookieEpoch
    )
}

/// A session cookie (no expiry) with the key of `persistentCookie(name)`.
private func sessionCookie(_ name: String) -> StoredCookie {
    var cookie = persistentCookie(name)
    cookie.expiry = nil
    return cookie
}

/// The names of `cookies`, sorted.
private func cookieNames(_ cookies: [StoredCookie]) -> [String] {
    cookies.map(\.name).sorted()
}

/// Errors of writer threads, collected for the test's thread.
private final class CookieWriterFailures: Sendable {
    private let failures = Mutex<[String]>([])

    func add(_ failure: String) { failures.withLock { $0.append(failure) } }
    var all: [String] { failures.withLock { $0 } }
}

/// The number of rows in the file's table, read with a connection of its own.
private func cookieRowCount(_ store: URL) throws -> Int64 {
    let database = try SQLiteDatabase(url: store)
    let statement = try database.prepare("SELECT count(*) FROM cookies")
    return try statement.step() ? statement.int64(at: 0) : -1
}

@Suite("CookieDatabase: the SQLite file of persistent cookies")
struct CookieDatabaseTests {
    @Test("every field of a persistent cookie comes back from a new connection; session cookies are never written")
    func roundTrip() throws {
        let directory = try CookieStoreDirectory()
        defer { directory.remove() }
        let full = StoredCookie(
            name: "sid", value: "abc=def; ü ✓", domain: "example.test", hostOnly: true, path: "/app",
            expiry: Date(timeIntervalSince1970: 1_750_086_400.25), secure: true, httpOnly: true, sameSite: .strict,
            creation: cookieEpoch, lastAccess: Date(timeIntervalSince1970: 1_750_000_010.75), comment: "a comment",
            commentURL: "https://example.test/cookies", version: 1, portList: [80, 443]
        )
        let minimal = StoredCookie(
            name: "pref", value: "", domain: "example.org", hostOnly: false, path: "/", expiry: Date(timeIntervalSince1970: 1_750_003_600),
            secure: false, httpOnly: false, sameSite: nil, creation: Date(timeIntervalSince1970: 1_749_999_000),
            lastAccess: Date(timeIntervalSince1970: 1_749_999_001)
        )
        let lax = StoredCookie(
            name: "lax", value: "1", domain: "example.org", hostOnly: false, path: "/docs", expiry: Date(timeIntervalSince1970: 2_000_000_000),
            secure: true, httpOnly: false, sameSite: .lax, creation: cookieEpoch, lastAccess: cookieEpoch, portList: []
        )
        let noneSite = StoredCookie(
            name: "none", value: "2", domain: "sub.example.org", hostOnly: true, path: "/", expiry: Date(timeIntervalSince1970: 1_900_000_000.125),
            secure: true, httpOnly: true, sameSite: CookieSameSite.none, creation: cookieEpoch, lastAccess: cookieEpoch, version: -3, portList: [8080]
        )
        let transient = sessionCookie("session")

        do {
            let database = try CookieDatabase.open(at: directory.store)
            #expect(database.damagedFileMovedTo == nil)
            try database.apply(stored: [full, minimal, transient, lax, noneSite], removed: [])
            // Its own connection sees them too.
            #expect(try Set(database.load(now: cookieEpoch)) == [full, minimal, lax, noneSite])
        }

        let reopened = try CookieDatabase.open(at: directory.store)
        let loaded = try reopened.load(now: cookieEpoch)
        #expect(loaded.count == 4)
        #expect(Set(loaded) == [full, minimal, lax, noneSite])
        // Field by field, for a readable failure.
        let sid = try #require(loaded.first(where: { $0.name == "sid" }))
        #expect(sid.value == full.value)
        #expect(sid.expiry == full.expiry)
        #expect(sid.lastAccess == full.lastAccess)
        #expect(sid.sameSite == .strict)
        #expect(sid.portList == [80, 443])
        #expect(sid.comment == "a comment")
        #expect(sid.commentURL == "https://example.test/cookies")
        #expect(sid.version == 1)
        #expect(loaded.first(where: { $0.name == "lax" })?.portList == [])
        #expect(loaded.first(where: { $0.name == "pref" })?.portList == nil)
        #expect(loaded.first(where: { $0.name == "pref" })?.sameSite == nil)
        #expect(loaded.first(where: { $0.name == "none" })?.sameSite == CookieSameSite.none)
        // The session cookie is not in the file.
        #expect(try cookieRowCount(directory.store) == 4)
    }

    @Test("a second apply with the same key updates the row in place")
    func upsertByKey() throws {
        let directory = try CookieStoreDirectory()
        defer { directory.remove() }
        let database = try CookieDatabase.open(at: directory.store)
        try database.apply(stored: [persistentCookie("a", value: "1"), persistentCookie("a", value: "1", path: "/other")], removed: [])
        var updated = persistentCookie("a", value: "2")
        updated.secure = true
        updated.lastAccess = cookieEpoch.addingTimeInterval(5)
        try database.apply(stored: [updated], removed: [])
        let loaded = try CookieDatabase.open(at: directory.store).load(now: cookieEpoch)
        #expect(Set(loaded) == [updated, persistentCookie("a", value: "1", path: "/other")])
    }

    @Test("a session cookie that replaces a persistent one deletes its row; removed keys are deleted")
    func sessionReplacesAndRemoved() throws {
        let directory = try CookieStoreDirectory()
        defer { directory.remove() }
        let database = try CookieDatabase.open(at: directory.store)
        try database.apply(stored: [persistentCookie("a"), persistentCookie("b"), persistentCookie("c"), persistentCookie("d")], removed: [])
        #expect(try cookieNames(database.load(now: cookieEpoch)) == ["a", "b", "c", "d"])

        // "a" becomes a session cookie; "b" goes; a key the file never had is no error.
        try database.apply(
            stored: [sessionCookie("a")],
            removed: [persistentCookie("b").key, StoredCookie.Key(name: "never", domain: "example.test", path: "/")]
        )
        #expect(try cookieNames(CookieDatabase.open(at: directory.store).load(now: cookieEpoch)) == ["c", "d"])

        // A key both removed and stored ends as stored.
        try database.apply(stored: [persistentCookie("c", value: "new")], removed: [persistentCookie("c").key, persistentCookie("d").key])
        let loaded = try CookieDatabase.open(at: directory.store).load(now: cookieEpoch)
        #expect(loaded == [persistentCookie("c", value: "new")])

        try database.removeAll()
        #expect(try CookieDatabase.open(at: directory.store).load(now: cookieEpoch).isEmpty)
        #expect(try cookieRowCount(directory.store) == 0)
    }

    @Test("load deletes the rows that expired by now (an expiry equal to now included) from the file")
    func expiredPurged() throws {
        let directory = try CookieStoreDirectory()
        defer { directory.remove() }
        let database = try CookieDatabase.open(at: directory.store)
        try database.apply(
            stored: [
                persistentCookie("old", expiry: cookieEpoch.addingTimeInterval(-1)), persistentCookie("edge", expiry: cookieEpoch),
                persistentCookie("fresh", expiry: cookieEpoch.addingTimeInterval(100)),
            ],
            removed: []
        )
        #expect(try cookieNames(database.load(now: cookieEpoch)) == ["fresh"])
        // A second connection, at a time when nothing would have expired: the rows are gone,
        // not merely filtered out.
        let reopened = try CookieDatabase.open(at: directory.store)
        #expect(try cookieNames(reopened.load(now: Date(timeIntervalSince1970: 0))) == ["fresh"])
        #expect(try cookieRowCount(directory.store) == 1)
    }

    @Test("the file and its -wal are 0600, a directory made for it 0700; an existing file is narrowed")
    func fileModes() throws {
        let directory = try CookieStoreDirectory()
        defer { directory.remove() }
        let nested = directory.url.appendingPathComponent("data/courier", isDirectory: true)
        let file = nested.appendingPathComponent("cookies.sqlite")
        let database = try CookieDatabase.open(at: file)
        try database.apply(stored: [persistentCookie("a")], removed: [])
        withExtendedLifetime(database) {
            #expect(cookieStoreMode(file.path) == 0o600)
            // A commit in WAL mode leaves the -wal file while the connection is open.
            #expect(cookieStoreMode(file.path + "-wal") == 0o600)
            if let mode = cookieStoreMode(file.path + "-shm") {
                #expect(mode == 0o600)
            }
            #expect(cookieStoreMode(nested.path) == 0o700)
            #expect(cookieStoreMode(nested.deletingLastPathComponent().path) == 0o700)
        }

        // An empty file readable by others (an empty file is an empty database to SQLite).
        let loose = directory.url.appendingPathComponent("loose.sqlite")
        #expect(FileManager.default.createFile(atPath: loose.path, contents: nil))
        #expect(chmod(loose.path, 0o644) == 0)
        let narrowed = try CookieDatabase.open(at: loose)
        try narrowed.apply(stored: [persistentCookie("b")], removed: [])
        withExtendedLifetime(narrowed) {
            #expect(cookieStoreMode(loose.path) == 0o600)
            #expect(cookieStoreMode(loose.path + "-wal") == 0o600)
        }
    }

    @Test("two connections to one file, each writing its own cookies, lose none")
    func twoWriters() throws {
        let directory = try CookieStoreDirectory()
        defer { directory.remove() }
        let first = try CookieDatabase.open(at: directory.store)
        let second = try CookieDatabase.open(at: directory.store)
        // Both have read the file before either writes.
        #expect(try first.load(now: cookieEpoch).isEmpty)
        #expect(try second.load(now: cookieEpoch).isEmpty)
        try first.apply(stored: [persistentCookie("first-1")], removed: [])
        try second.apply(stored: [persistentCookie("second-1")], removed: [])
        try first.apply(stored: [persistentCookie("first-2")], removed: [])
        try second.apply(stored: [persistentCookie("second-2")], removed: [persistentCookie("first-1").key])
        #expect(try cookieNames(first.load(now: cookieEpoch)) == ["first-2", "second-1", "second-2"])
        #expect(try cookieNames(CookieDatabase.open(at: directory.store).load(now: cookieEpoch)) == ["first-2", "second-1", "second-2"])
    }

    @Test("two connections writing from two threads at once keep every cookie")
    func concurrentWriters() throws {
        let directory = try CookieStoreDirectory()
        defer { directory.remove() }
        let databases = try [CookieDatabase.open(at: directory.store), CookieDatabase.open(at: directory.store)]
        let failures = CookieWriterFailures()
        // Each connection is used by one thread only, as its owner's lock would ensure.
        DispatchQueue.concurrentPerform(iterations: databases.count) { writer in
            do {
                for batch in 0..<40 {
                    let cookies = (0..<5).map { persistentCookie("w\(writer)-\(batch)-\($0)") }
                    try databases[writer].apply(stored: cookies, removed: [])
                }
            } catch {
                failures.add("writer \(writer): \(error)")
            }
        }
        #expect(failures.all.isEmpty)
        let loaded = try CookieDatabase.open(at: directory.store).load(now: cookieEpoch)
        #expect(loaded.count == 2 * 40 * 5)
        #expect(Set(loaded.map(\.name)).count == 400)
    }

    @Test("a damaged file is moved aside with its bytes, and a new store works")
    func corruptFile() throws {
        let directory = try CookieStoreDirectory()
        defer { directory.remove() }
        let garbage = Data(repeating: 0x5A, count: 4096)
        try garbage.write(to: directory.store)

        let database = try CookieDatabase.open(at: directory.store)
        let aside = try #require(database.damagedFileMovedTo)
        #expect(URL(fileURLWithPath: aside).lastPathComponent.hasPrefix("cookies.sqlite.corrupt-"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: aside)) == garbage)
        #expect(try database.load(now: cookieEpoch).isEmpty)
        try database.apply(stored: [persistentCookie("a")], removed: [])

        let reopened = try CookieDatabase.open(at: directory.store)
        #expect(reopened.damagedFileMovedTo == nil)
        #expect(try cookieNames(reopened.load(now: cookieEpoch)) == ["a"])
    }

    @Test("rows with data this store would not write are skipped, not fatal, and a later write replaces one")
    func unreadableRowsSkipped() throws {
        let directory = try CookieStoreDirectory()
        defer { directory.remove() }
        let database = try CookieDatabase.open(at: directory.store)
        try database.apply(stored: [persistentCookie("good")], removed: [])

        // Another program writes rows by hand, with raw SQL.
        let columns = "name, domain, path, value, host_only, expiry, secure, http_only, same_site, creation, last_access, comment, comment_url, version, port_list"
        let rows = [
            "'text-expiry', 'example.test', '/', 'v', 1, 'later', 0, 0, NULL, 1, 2, NULL, NULL, 0, NULL",
            "'infinite-expiry', 'example.test', '/', 'v', 1, 1e999, 0, 0, NULL, 1, 2, NULL, NULL, 0, NULL",
            "X'FF', 'example.test', '/', 'v', 1, 4e9, 0, 0, NULL, 1, 2, NULL, NULL, 0, NULL",
            "'bad-utf8', 'example.test', '/', CAST(X'C328' AS TEXT), 1, 4e9, 0, 0, NULL, 1, 2, NULL, NULL, 0, NULL",
            "'flag-two', 'example.test', '/', 'v', 2, 4e9, 0, 0, NULL, 1, 2, NULL, NULL, 0, NULL",
            "'same-site', 'example.test', '/', 'v', 1, 4e9, 0, 0, 'Sometimes', 1, 2, NULL, NULL, 0, NULL",
            "'ports', 'example.test', '/', 'v', 1, 4e9, 0, 0, NULL, 1, 2, NULL, NULL, 0, '80,http'",
            "'ports-gap', 'example.test', '/', 'v', 1, 4e9, 0, 0, NULL, 1, 2, NULL, NULL, 0, '80,,443'",
            "'version', 'example.test', '/', 'v', 1, 4e9, 0, 0, NULL, 1, 2, NULL, NULL, 'one', NULL",
            "'creation', 'example.test', '/', 'v', 1, 4e9, 0, 0, NULL, 'yesterday', 2, NULL, NULL, 0, NULL",
            "'comment-blob', 'example.test', '/', 'v', 1, 4e9, 0, 0, NULL, 1, 2, X'00FF', NULL, 0, NULL",
        ]
        do {
            let raw = try SQLiteDatabase(url: directory.store)
            for row in rows {
                try raw.execute("INSERT INTO cookies (\(columns)) VALUES (\(row))")
            }
            // Whole numbers are fine (the REAL columns store them as REAL).
            try raw.execute("INSERT INTO cookies (\(columns)) VALUES ('integers', 'example.test', '/', 'v', 1, 4000000000, 0, 0, NULL, 1, 2, NULL, NULL, 0, '443')")
        }
        #expect(try cookieRowCount(directory.store) == Int64(rows.count + 2))

        let loaded = try CookieDatabase.open(at: directory.store).load(now: cookieEpoch)
        #expect(cookieNames(loaded) == ["good", "integers"])
        let integers = try #require(loaded.first(where: { $0.name == "integers" }))
        #expect(integers.expiry == Date(timeIntervalSince1970: 4_000_000_000))
        #expect(integers.creation == Date(timeIntervalSince1970: 1))
        #expect(integers.portList == [443])
        // The unreadable rows stay in the file (they may be another program's), and a cookie
        // with the key of one replaces it.
        #expect(try cookieRowCount(directory.store) == Int64(rows.count + 2))
        try database.apply(stored: [persistentCookie("same-site")], removed: [])
        #expect(try cookieNames(database.load(now: cookieEpoch)) == ["good", "integers", "same-site"])
    }

    // MARK: Crash safety

    /// A writer process is killed once it reported `threshold` commits, and `delay`
    /// microseconds later, so that the kill lands at different moments of a transaction.
    @Test(
        "a writer process killed with SIGKILL leaves a sound file: every reported batch whole, no batch in part",
        arguments: zip([30, 75, 160], [UInt32(0), 700, 2_500])
    )
    func killedWriter(threshold: Int, delay: UInt32) async throws {
        let batches = 100_000
        let perBatch = 20
        let writer = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("courier-store-writer")
        try #require(FileManager.default.isExecutableFile(atPath: writer.path), "courier-store-writer is built with the tests")

        let directory = try CookieStoreDirectory()
        defer { directory.remove() }
        let arguments = [directory.store.path, String(batches), String(perBatch)]
        let run = try await onOwnThread { try runAndKillStoreWriter(writer, arguments: arguments, threshold: threshold, delay: delay) }
        let reported = run.reported
        #expect(run.killed, "the writer stopped after \(reported.count) commits: \(run.stderr)")
        #expect(run.terminationReason == .uncaughtSignal, "\(run.stderr)")
        let lastReported = try #require(reported.max())
        // Reported in order, none missing.
        #expect(reported == Set(0...lastReported))

        // The file is sound (opening it recovers the WAL) before the store looks at it.
        do {
            let raw = try SQLiteDatabase(url: directory.store)
            let check = try raw.prepare("PRAGMA integrity_check")
            #expect(try check.step())
            #expect(check.text(at: 0) == "ok")
        }

        let database = try CookieDatabase.open(at: directory.store)
        #expect(database.damagedFileMovedTo == nil)
        let cookies = try database.load(now: Date())
        var found: [Int: Set<String>] = [:]
        for cookie in cookies {
            // "b<batch>-<index>"
            let parts = cookie.name.dropFirst().split(separator: "-")
            let batch = try #require(parts.first.flatMap { Int($0) }, "\(cookie.name)")
            found[batch, default: []].insert(cookie.name)
            #expect(cookie.value.utf8.count >= 190)
        }
        // Every reported batch is there; at most one more committed before its report was
        // printed; nothing else.
        let present = Set(found.keys)
        #expect(present == Set(0...lastReported) || present == Set(0...lastReported + 1), "reported up to \(lastReported), present \(present.sorted().suffix(3))")
        // No batch in part: each present batch has all its cookies.
        for (batch, names) in found {
            #expect(names == Set((0..<perBatch).map { "b\(batch)-\($0)" }), "batch \(batch) has \(names.count) of \(perBatch)")
        }
    }
}
