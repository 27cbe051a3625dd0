@testable import Courier
import CourierCore
import Foundation
import Testing
import _CourierTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A directory of its own under the temporary directory, with the caches made on it;
/// `remove()` waits for their disk work, then deletes the directory with all in it.
private final class CacheTestDirectory {
    let url: URL
    private var caches: [URLCache] = []

    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("CourierURLCacheTests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// The cache directory (made by the cache itself).
    var cache: URL { url.appendingPathComponent("cache", isDirectory: true) }
    /// The database file.
    var database: URL { cache.appendingPathComponent("Cache.sqlite") }
    /// The folder of body files.
    var bodies: URL { cache.appendingPathComponent("Bodies", isDirectory: true) }

    /// A cache on ``cache`` (or `directory`).
    func makeCache(memory: Int, disk: Int, directory: URL? = nil) -> URLCache {
        let made = URLCache(memoryCapacity: memory, diskCapacity: disk, directory: directory ?? cache)
        caches.append(made)
        return made
    }

    /// A new cache on the same directory that keeps nothing in memory: what it finds comes
    /// from the disk.
    func diskReader() -> URLCache {
        makeCache(memory: 0, disk: 1 << 30)
    }

    /// The names in the bodies folder, sorted.
    func bodyFiles() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: bodies.path)) ?? []).sorted()
    }

    func remove() {
        for cache in caches { cache.flush() }
        try? FileManager.default.removeItem(at: url)
    }
}

/// A fixed moment, exact in seconds since 1970 and since 2001 (so dates round-trip bit for bit).
private let cacheEpoch = Date(timeIntervalSince1970: 1_750_000_000.5)

/// A request for `url`.
private func cacheRequest(_ url: String, method: String? = nil) -> URLRequest {
    var request = URLRequest(url: URL(string: url)!)
    if let method { request.httpMethod = method }
    return request
}

/// A cached 200 (or `status`) for `url`, with the session's internal fields set.
private func cachedEntry(
    _ url: String, body: Data, fields: HTTPFields = ["Content-Type": "text/plain"], status: Int = 200, version: String = "HTTP/1.1",
    policy: URLCache.StoragePolicy = .allowed, userInfo: [AnyHashable: Any]? = nil, requestFields: HTTPFields = ["Accept": "*/*"],
    responseTime: Date = cacheEpoch
) -> CachedURLResponse {
    let response = HTTPURLResponse(url: URL(string: url)!, statusCode: status, version: version, fields: fields)
    return CachedURLResponse(
        response: response, data: body, userInfo: userInfo, storagePolicy: policy, requestFields: requestFields,
        requestTime: responseTime.addingTimeInterval(-0.25), responseTime: responseTime
    )
}

/// `count` bytes, each `byte`.
private func cacheBody(_ count: Int, byte: UInt8 = 0x61) -> Data {
    Data(repeating: byte, count: count)
}

/// The permission bits of the file at `path`; nil when there is none.
private func cacheFileMode(_ path: String) -> mode_t? {
    var status = stat()
    guard stat(path, &status) == 0 else { return nil }
    return status.st_mode & 0o777
}

/// The number of rows in the store's table, read with a connection of its own.
private func cacheRowCount(_ database: URL) throws -> Int64 {
    let raw = try SQLiteDatabase(url: database)
    let statement = try raw.prepare("SELECT count(*) FROM responses")
    return try statement.step() ? statement.int64(at: 0) : -1
}

/// The body file of `key`'s row; nil for an inline body or no row.
private func cacheBodyFile(_ database: URL, key: String) throws -> String? {
    let raw = try SQLiteDatabase(url: database)
    let statement = try raw.prepare("SELECT body_file FROM responses WHERE key = ?1")
    try statement.bind(key, at: 1)
    return try statement.step() ? statement.text(at: 0) : nil
}

@Suite("URLCache and CachedURLResponse: the response store in memory and on disk")
struct URLCacheStoreTests {
    // MARK: Basics

    @Test("store, fetch, replace and remove, in memory at once and on disk after the queue ran")
    func storeFetchReplaceRemove() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let cache = directory.makeCache(memory: 1 << 20, disk: 1 << 24)
        let url = "https://example.test/a"
        let request = cacheRequest(url)
        #expect(cache.cachedResponse(for: request) == nil)
        // A lookup in a store never written creates nothing.
        #expect(!FileManager.default.fileExists(atPath: directory.cache.path))

        let first = cachedEntry(url, body: Data("first".utf8))
        cache.storeCachedResponse(first, for: request)
        #expect(cache.cachedResponse(for: request) === first)
        let second = cachedEntry(url, body: Data("second".utf8))
        cache.storeCachedResponse(second, for: request)
        #expect(cache.cachedResponse(for: request) === second)

        cache.flush()
        #expect(try cacheRowCount(directory.database) == 1)
        #expect(directory.diskReader().cachedResponse(for: request)?.data == Data("second".utf8))

        cache.removeCachedResponse(for: request)
        #expect(cache.cachedResponse(for: request) == nil)
        cache.flush()
        #expect(try cacheRowCount(directory.database) == 0)
        #expect(directory.diskReader().cachedResponse(for: request) == nil)
    }

    @Test("a lookup right after a store sees it, though the disk write is still queued and memory keeps nothing")
    func readAfterStore() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let cache = directory.makeCache(memory: 0, disk: 1 << 24)
        for index in 0..<20 {
            let url = "https://example.test/pending/\(index)"
            let entry = cachedEntry(url, body: cacheBody(index.isMultiple(of: 2) ? 100 : 40_000, byte: UInt8(index)))
            cache.storeCachedResponse(entry, for: cacheRequest(url))
            #expect(cache.cachedResponse(for: cacheRequest(url))?.data == entry.data, "entry \(index)")
        }
        // A removal hides the entry at once, though its row may still be on disk.
        cache.removeCachedResponse(for: cacheRequest("https://example.test/pending/0"))
        #expect(cache.cachedResponse(for: cacheRequest("https://example.test/pending/0")) == nil)
        cache.removeAllCachedResponses()
        for index in 0..<20 {
            #expect(cache.cachedResponse(for: cacheRequest("https://example.test/pending/\(index)")) == nil)
        }
        cache.flush()
        #expect(try cacheRowCount(directory.database) == 0)
        #expect(directory.bodyFiles().isEmpty)
    }

    @Test("only GET requests are keyed; the fragment is not part of the key")
    func keying() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let cache = directory.makeCache(memory: 1 << 20, disk: 1 << 24)
        let url = "https://example.test/page?q=1"
        let entry = cachedEntry(url, body: Data("page".utf8))

        cache.storeCachedResponse(entry, for: cacheRequest(url, method: "POST"))
        #expect(cache.cachedResponse(for: cacheRequest(url)) == nil)
        #expect(cache.currentMemoryUsage == 0)

        cache.storeCachedResponse(entry, for: cacheRequest(url + "#top"))
        #expect(cache.cachedResponse(for: cacheRequest(url)) === entry)
        #expect(cache.cachedResponse(for: cacheRequest(url + "#bottom")) === entry)
        for method in ["POST", "HEAD", "PUT", "DELETE"] {
            #expect(cache.cachedResponse(for: cacheRequest(url, method: method)) == nil, "\(method)")
        }
        // Another method's removal is not this key's either.
        cache.removeCachedResponse(for: cacheRequest(url, method: "DELETE"))
        #expect(cache.cachedResponse(for: cacheRequest(url)) === entry)

        #expect(URLCache.key(for: cacheRequest("https://example.test/p?q=1#frag")) == "https://example.test/p?q=1")
        #expect(URLCache.key(for: cacheRequest("https://example.test/p")) == "https://example.test/p")
        #expect(URLCache.key(for: cacheRequest("https://example.test/p", method: "POST")) == nil)
        cache.flush()
        #expect(try cacheBodyFile(directory.database, key: url) == nil)
        #expect(try cacheRowCount(directory.database) == 1)
    }

    @Test("storage policies: notAllowed is never stored, allowedInMemoryOnly never reaches the disk, allowed does")
    func storagePolicies() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let cache = directory.makeCache(memory: 1 << 20, disk: 1 << 24)
        let never = "https://example.test/never"
        let memoryOnly = "https://example.test/memory"
        let everywhere = "https://example.test/everywhere"

        cache.storeCachedResponse(cachedEntry(never, body: Data("n".utf8), policy: .notAllowed), for: cacheRequest(never))
        #expect(cache.cachedResponse(for: cacheRequest(never)) == nil)
        let inMemory = cachedEntry(memoryOnly, body: Data("m".utf8), policy: .allowedInMemoryOnly)
        cache.storeCachedResponse(inMemory, for: cacheRequest(memoryOnly))
        #expect(cache.cachedResponse(for: cacheRequest(memoryOnly)) === inMemory)
        let allowed = cachedEntry(everywhere, body: Data("e".utf8), policy: .allowed)
        cache.storeCachedResponse(allowed, for: cacheRequest(everywhere))
        cache.flush()

        let reader = directory.diskReader()
        #expect(reader.cachedResponse(for: cacheRequest(never)) == nil)
        #expect(reader.cachedResponse(for: cacheRequest(memoryOnly)) == nil)
        let fromDisk = try #require(reader.cachedResponse(for: cacheRequest(everywhere)))
        #expect(fromDisk.data == Data("e".utf8))
        #expect(fromDisk.storagePolicy == .allowed)
        #expect(try cacheRowCount(directory.database) == 1)

        // A memory-only entry replaces the key's disk entry too.
        let replacement = cachedEntry(everywhere, body: Data("r".utf8), policy: .allowedInMemoryOnly)
        cache.storeCachedResponse(replacement, for: cacheRequest(everywhere))
        #expect(cache.cachedResponse(for: cacheRequest(everywhere)) === replacement)
        cache.flush()
        #expect(try cacheRowCount(directory.database) == 0)
        #expect(directory.diskReader().cachedResponse(for: cacheRequest(everywhere)) == nil)

        // A store that keeps nothing changes nothing.
        cache.storeCachedResponse(cachedEntry(everywhere, body: Data("x".utf8), policy: .notAllowed), for: cacheRequest(everywhere))
        #expect(cache.cachedResponse(for: cacheRequest(everywhere)) === replacement)
    }

    // MARK: Capacities

    @Test("usage figures are the sums of the entries' costs; lowering a capacity evicts")
    func capacitiesAndUsage() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let cache = directory.makeCache(memory: 100_000, disk: 1 << 24)
        #expect(cache.memoryCapacity == 100_000)
        #expect(cache.diskCapacity == 1 << 24)
        #expect(cache.currentMemoryUsage == 0)
        #expect(cache.currentDiskUsage == 0)

        let a = cachedEntry("https://example.test/cap/a", body: cacheBody(1_000))
        let b = cachedEntry("https://example.test/cap/b", body: cacheBody(2_000))
        let costA = URLCache.cost(of: a)
        let costB = URLCache.cost(of: b)
        // Body, header fields (name + value + 4 each, response and request) and URL.
        #expect(costA == 1_000 + ("Content-Type".count + "text/plain".count + 4) + ("Accept".count + "*/*".count + 4) + "https://example.test/cap/a".count)
        cache.storeCachedResponse(a, for: cacheRequest("https://example.test/cap/a"))
        cache.storeCachedResponse(b, for: cacheRequest("https://example.test/cap/b"))
        #expect(cache.currentMemoryUsage == costA + costB)
        cache.flush()
        #expect(cache.currentDiskUsage == costA + costB)
        // A new object reads the figure from the file.
        #expect(directory.diskReader().currentDiskUsage == costA + costB)

        // 5% of 30,000 is 1,500: b no longer fits, a does.
        cache.memoryCapacity = 30_000
        #expect(cache.memoryCapacity == 30_000)
        #expect(cache.currentMemoryUsage == costA)
        cache.memoryCapacity = 0
        #expect(cache.currentMemoryUsage == 0)
        // Both still on disk.
        #expect(cache.cachedResponse(for: cacheRequest("https://example.test/cap/b"))?.data == b.data)

        // Room for b only: a, the less recently used on disk, goes.
        cache.diskCapacity = costB + 10
        cache.flush()
        #expect(cache.diskCapacity == costB + 10)
        #expect(cache.currentDiskUsage == costB)
        #expect(directory.diskReader().cachedResponse(for: cacheRequest("https://example.test/cap/a")) == nil)
        #expect(directory.diskReader().cachedResponse(for: cacheRequest("https://example.test/cap/b")) != nil)

        cache.diskCapacity = 0
        cache.flush()
        #expect(cache.currentDiskUsage == 0)
        #expect(try cacheRowCount(directory.database) == 0)

        // An entry that costs more than the whole disk capacity is not stored on disk.
        let small = directory.makeCache(memory: 0, disk: 5_000)
        let big = "https://example.test/cap/big"
        small.storeCachedResponse(cachedEntry(big, body: cacheBody(6_000)), for: cacheRequest(big))
        small.flush()
        #expect(small.cachedResponse(for: cacheRequest(big)) == nil)
        #expect(try cacheRowCount(directory.database) == 0)
        #expect(small.currentDiskUsage == 0)
    }

    @Test("the disk usage is a running total the database keeps; a store made without it gets it, summed, when opened")
    func usageTotal() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let cache = directory.makeCache(memory: 0, disk: 1 << 24)
        let urls = (0..<4).map { "https://example.test/usage/\($0)" }
        for (index, url) in urls.enumerated() {
            cache.storeCachedResponse(cachedEntry(url, body: cacheBody(500 * (index + 1))), for: cacheRequest(url))
        }
        cache.flush()
        func sums() throws -> (kept: Int64, summed: Int64) {
            let raw = try SQLiteDatabase(url: directory.database)
            let kept = try raw.prepare("SELECT total FROM usage WHERE id = 0")
            let summed = try raw.prepare("SELECT COALESCE(SUM(cost), 0) FROM responses")
            return (try kept.step() ? kept.int64(at: 0) : -1, try summed.step() ? summed.int64(at: 0) : -2)
        }
        var (kept, summed) = try sums()
        #expect(kept == summed && summed > 2_000)
        #expect(cache.currentDiskUsage == Int(summed))

        // As a Courier without the total left the file: no table, no triggers.
        try SQLiteDatabase(url: directory.database).execute("DROP TRIGGER usage_insert; DROP TRIGGER usage_delete; DROP TRIGGER usage_update; DROP TABLE usage;")
        let reopened = directory.diskReader()
        #expect(reopened.currentDiskUsage == Int(summed))
        (kept, summed) = try sums()
        #expect(kept == summed)
        // Replacing, adding and removing keep it.
        reopened.storeCachedResponse(cachedEntry(urls[0], body: cacheBody(7_000)), for: cacheRequest(urls[0]))
        reopened.storeCachedResponse(cachedEntry("https://example.test/usage/new", body: cacheBody(300)), for: cacheRequest("https://example.test/usage/new"))
        reopened.removeCachedResponse(for: cacheRequest(urls[1]))
        reopened.flush()
        (kept, summed) = try sums()
        #expect(kept == summed)
        #expect(reopened.currentDiskUsage == Int(summed))
        reopened.removeAllCachedResponses()
        reopened.flush()
        (kept, summed) = try sums()
        #expect(kept == 0 && summed == 0)
    }

    @Test("memory evicts the least recently used entry first; a lookup makes an entry recent")
    func memoryLRU() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let capacity = 100_000
        let cache = directory.makeCache(memory: capacity, disk: 0)
        // Two-digit indices: every URL, so every entry, has the same cost.
        let urls = (0..<40).map { "https://example.test/lru/\($0 < 10 ? "0" : "")\($0)" }
        let entries = urls.map { cachedEntry($0, body: cacheBody(4_000)) }
        let cost = URLCache.cost(of: entries[0])
        try #require(cost <= capacity / 20)
        let fits = capacity / cost
        try #require(fits < urls.count)

        for index in 0..<fits {
            cache.storeCachedResponse(entries[index], for: cacheRequest(urls[index]))
        }
        #expect(cache.currentMemoryUsage == fits * cost)
        // Entry 0 becomes the most recent; entry 1 is now the least recent.
        #expect(cache.cachedResponse(for: cacheRequest(urls[0])) === entries[0])
        cache.storeCachedResponse(entries[fits], for: cacheRequest(urls[fits]))
        #expect(cache.currentMemoryUsage <= capacity)
        #expect(cache.cachedResponse(for: cacheRequest(urls[0])) === entries[0])
        #expect(cache.cachedResponse(for: cacheRequest(urls[1])) == nil)
        #expect(cache.cachedResponse(for: cacheRequest(urls[2])) === entries[2])
        #expect(cache.cachedResponse(for: cacheRequest(urls[fits])) === entries[fits])

        // The rest push out the oldest in turn; usage never passes the capacity.
        for index in (fits + 1)..<urls.count {
            cache.storeCachedResponse(entries[index], for: cacheRequest(urls[index]))
            #expect(cache.currentMemoryUsage <= capacity)
        }
        #expect(cache.cachedResponse(for: cacheRequest(urls[urls.count - 1])) === entries[urls.count - 1])
        #expect(cache.currentMemoryUsage == fits * cost)
        // A cache with no disk capacity never made its directory.
        cache.flush()
        #expect(!FileManager.default.fileExists(atPath: directory.cache.path))
    }

    @Test("the disk evicts by last access: a lookup keeps an entry, the least recently used goes")
    func diskLRU() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let urls = ["a", "b", "c", "d"].map { "https://example.test/disk-lru/\($0)" }
        let entries = urls.enumerated().map { cachedEntry($0.element, body: cacheBody(20 * 1024, byte: UInt8($0.offset))) }
        let cost = URLCache.cost(of: entries[0])
        let cache = directory.makeCache(memory: 0, disk: 3 * cost + cost / 2)

        for index in 0..<3 {
            cache.storeCachedResponse(entries[index], for: cacheRequest(urls[index]))
            cache.flush()
        }
        #expect(directory.bodyFiles().count == 3)
        #expect(cache.currentDiskUsage == 3 * cost)
        // a is read (from disk: memory keeps nothing), so b is now the least recently used.
        #expect(cache.cachedResponse(for: cacheRequest(urls[0]))?.data == entries[0].data)
        cache.flush()
        cache.storeCachedResponse(entries[3], for: cacheRequest(urls[3]))
        cache.flush()

        let reader = directory.diskReader()
        #expect(reader.cachedResponse(for: cacheRequest(urls[0]))?.data == entries[0].data)
        #expect(reader.cachedResponse(for: cacheRequest(urls[1])) == nil)
        #expect(reader.cachedResponse(for: cacheRequest(urls[2]))?.data == entries[2].data)
        #expect(reader.cachedResponse(for: cacheRequest(urls[3]))?.data == entries[3].data)
        #expect(cache.currentDiskUsage == 3 * cost)
        // b's body file went with its row.
        #expect(directory.bodyFiles().count == 3)
    }

    @Test("an entry costing more than 5% of the memory capacity is kept on disk only, or not at all")
    func fivePercentRule() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let cache = directory.makeCache(memory: 100_000, disk: 1 << 24)
        let limit = 100_000 / 20
        let atLimitURL = "https://example.test/five/at"
        let aboveURL = "https://example.test/five/up"
        let memoryOnlyURL = "https://example.test/five/mo"
        let overhead = URLCache.cost(of: cachedEntry(atLimitURL, body: Data()))
        let atLimit = cachedEntry(atLimitURL, body: cacheBody(limit - overhead))
        let above = cachedEntry(aboveURL, body: cacheBody(limit - overhead + 1))
        #expect(URLCache.cost(of: atLimit) == limit)
        #expect(URLCache.cost(of: above) == limit + 1)

        cache.storeCachedResponse(atLimit, for: cacheRequest(atLimitURL))
        #expect(cache.currentMemoryUsage == limit)
        cache.storeCachedResponse(above, for: cacheRequest(aboveURL))
        #expect(cache.currentMemoryUsage == limit)
        // Served while its write is queued, and from disk afterwards, never put in memory.
        #expect(cache.cachedResponse(for: cacheRequest(aboveURL))?.data == above.data)
        cache.flush()
        #expect(cache.cachedResponse(for: cacheRequest(aboveURL))?.data == above.data)
        #expect(cache.currentMemoryUsage == limit)

        cache.storeCachedResponse(
            cachedEntry(memoryOnlyURL, body: cacheBody(limit - overhead + 1), policy: .allowedInMemoryOnly), for: cacheRequest(memoryOnlyURL)
        )
        #expect(cache.cachedResponse(for: cacheRequest(memoryOnlyURL)) == nil)
        cache.flush()
        #expect(try cacheRowCount(directory.database) == 2)
    }

    // MARK: Removal

    @Test("removeAllCachedResponses empties memory at once and the disk, files included")
    func removeAll() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let cache = directory.makeCache(memory: 1 << 20, disk: 1 << 24)
        let urls = (0..<3).map { "https://example.test/all/\($0)" }
        for (index, url) in urls.enumerated() {
            cache.storeCachedResponse(cachedEntry(url, body: cacheBody(index == 0 ? 100_000 : 100)), for: cacheRequest(url))
        }
        cache.flush()
        #expect(directory.bodyFiles().count == 1)
        let other = directory.diskReader()
        #expect(other.cachedResponse(for: cacheRequest(urls[0])) != nil)

        cache.removeAllCachedResponses()
        for url in urls { #expect(cache.cachedResponse(for: cacheRequest(url)) == nil) }
        #expect(cache.currentMemoryUsage == 0)
        cache.flush()
        #expect(cache.currentDiskUsage == 0)
        #expect(try cacheRowCount(directory.database) == 0)
        #expect(directory.bodyFiles().isEmpty)
        // Another object on the directory finds nothing either.
        for url in urls { #expect(other.cachedResponse(for: cacheRequest(url)) == nil) }
    }

    @Test("removeCachedResponses(since:) removes the entries received at or after the date, at once and on disk")
    func removeSince() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let cache = directory.makeCache(memory: 1 << 20, disk: 1 << 24)
        let old = "https://example.test/since/old"
        let edge = "https://example.test/since/edge"
        let new = "https://example.test/since/new"
        cache.storeCachedResponse(cachedEntry(old, body: cacheBody(100), responseTime: cacheEpoch), for: cacheRequest(old))
        cache.storeCachedResponse(cachedEntry(edge, body: cacheBody(100), responseTime: cacheEpoch.addingTimeInterval(50)), for: cacheRequest(edge))
        cache.storeCachedResponse(cachedEntry(new, body: cacheBody(100_000), responseTime: cacheEpoch.addingTimeInterval(200)), for: cacheRequest(new))
        cache.flush()

        cache.removeCachedResponses(since: cacheEpoch.addingTimeInterval(50))
        #expect(cache.cachedResponse(for: cacheRequest(old)) != nil)
        #expect(cache.cachedResponse(for: cacheRequest(edge)) == nil)
        #expect(cache.cachedResponse(for: cacheRequest(new)) == nil)
        cache.flush()
        let reader = directory.diskReader()
        #expect(reader.cachedResponse(for: cacheRequest(old)) != nil)
        #expect(reader.cachedResponse(for: cacheRequest(edge)) == nil)
        #expect(reader.cachedResponse(for: cacheRequest(new)) == nil)
        #expect(directory.bodyFiles().isEmpty)
        #expect(try cacheRowCount(directory.database) == 1)

        // With nothing in memory, the disk rows are hidden until their deletion has run.
        let diskOnly = directory.diskReader()
        diskOnly.storeCachedResponse(cachedEntry(new, body: cacheBody(100), responseTime: cacheEpoch.addingTimeInterval(300)), for: cacheRequest(new))
        diskOnly.flush()
        diskOnly.removeCachedResponses(since: cacheEpoch.addingTimeInterval(250))
        #expect(diskOnly.cachedResponse(for: cacheRequest(new)) == nil)
        #expect(diskOnly.cachedResponse(for: cacheRequest(old)) != nil)
        diskOnly.flush()
        #expect(try cacheRowCount(directory.database) == 1)
    }

    // MARK: The disk round trip

    @Test("every part of an entry comes back from disk: status, version, repeated fields in order, request fields, times")
    func diskRoundTrip() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let cache = directory.makeCache(memory: 0, disk: 1 << 24)
        let pairs: [(String, String)] = [
            ("Content-Type", "text/html; charset=UTF-8"), ("Set-Cookie", "a=1; Path=/"), ("Cache-Control", "max-age=60"),
            ("set-cookie", "b=2"), ("Vary", "Accept-Encoding, Accept-Language"), ("Cache-Control", "public"), ("X-Empty", ""),
            ("X-Quote", "say \"hi\" \\ there"), ("X-Unicode", "caf\u{E9} \u{1F600}"),
        ]
        var bytes = pairs.map { (Array($0.0.utf8), Array($0.1.utf8)) }
        // obs-text: a Latin-1 byte, not UTF-8.
        bytes.append((Array("X-Latin".utf8), [0x63, 0x61, 0x66, 0xE9]))
        let fields = rawFields(bytes)
        let requestFields = HTTPFields([("Accept-Encoding", "gzip"), ("Accept-Language", "fr"), ("Accept-Language", "en")])
        let url = "https://example.test/round/trip?x=1"
        for (index, size) in [100, 50_000].enumerated() {
            let entryURL = url + "&i=\(index)"
            let entry = cachedEntry(entryURL, body: cacheBody(size, byte: 0x42), fields: fields, status: 203, version: "HTTP/2", requestFields: requestFields)
            cache.storeCachedResponse(entry, for: cacheRequest(entryURL))
            cache.flush()

            let found = try #require(directory.diskReader().cachedResponse(for: cacheRequest(entryURL)))
            #expect(found !== entry)
            let response = try #require(found.response as? HTTPURLResponse)
            #expect(response.url == URL(string: entryURL))
            #expect(response.statusCode == 203)
            #expect(response.httpVersion == "HTTP/2")
            #expect(response.fields == fields)
            #expect(response.fields.count == pairs.count + 1)
            #expect(response.value(forHTTPHeaderField: "set-cookie") == "a=1; Path=/, b=2")
            #expect(response.value(forHTTPHeaderField: "Cache-Control") == "max-age=60, public")
            #expect(response.mimeType == "text/html")
            #expect(response.textEncodingName == "utf-8")
            #expect(found.requestFields == requestFields)
            #expect(found.requestTime == cacheEpoch.addingTimeInterval(-0.25))
            #expect(found.responseTime == cacheEpoch)
            #expect(found.storagePolicy == .allowed)
            #expect(found.data == entry.data)
        }

        // A plain URLResponse (a URLProtocol's, say) keeps its own MIME type, length and encoding.
        let plainURL = "https://example.test/round/plain"
        let plain = URLResponse(url: URL(string: plainURL)!, mimeType: "application/json", expectedContentLength: 42, textEncodingName: "utf-8")
        cache.storeCachedResponse(CachedURLResponse(response: plain, data: Data("{}".utf8)), for: cacheRequest(plainURL))
        cache.flush()
        let found = try #require(directory.diskReader().cachedResponse(for: cacheRequest(plainURL)))
        #expect(!(found.response is HTTPURLResponse))
        #expect(found.response.mimeType == "application/json")
        #expect(found.response.expectedContentLength == 42)
        #expect(found.response.textEncodingName == "utf-8")
        #expect(found.data == Data("{}".utf8))
    }

    @Test("a property-list user info comes back from disk; any other is kept in memory only")
    func userInfoRoundTrip() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let cache = directory.makeCache(memory: 1 << 20, disk: 1 << 24)
        let listURL = "https://example.test/info/list"
        let info: [AnyHashable: Any] = [
            "string": "text", "number": 42, "data": Data([1, 2, 3]), "list": ["x", "y"], "date": cacheEpoch,
            "nested": ["flag": true],
        ]
        cache.storeCachedResponse(cachedEntry(listURL, body: Data("l".utf8), userInfo: info), for: cacheRequest(listURL))

        let objectURL = "https://example.test/info/object"
        let object = NSObject()
        let objectEntry = cachedEntry(objectURL, body: Data("o".utf8), userInfo: ["object": object])
        cache.storeCachedResponse(objectEntry, for: cacheRequest(objectURL))
        let numberKeyURL = "https://example.test/info/number-key"
        cache.storeCachedResponse(cachedEntry(numberKeyURL, body: Data("n".utf8), userInfo: [1: "one"]), for: cacheRequest(numberKeyURL))
        cache.flush()

        let reader = directory.diskReader()
        let found = try #require(reader.cachedResponse(for: cacheRequest(listURL)))
        let userInfo = try #require(found.userInfo)
        #expect(userInfo["string"] as? String == "text")
        #expect(userInfo["number"] as? Int == 42)
        #expect(userInfo["data"] as? Data == Data([1, 2, 3]))
        #expect(userInfo["list"] as? [String] == ["x", "y"])
        #expect(userInfo["date"] as? Date == cacheEpoch)
        #expect((userInfo["nested"] as? [String: Any])?["flag"] as? Bool == true)

        // The entries are stored without the user info that is not a property list…
        let objectFromDisk = try #require(reader.cachedResponse(for: cacheRequest(objectURL)))
        #expect(objectFromDisk.userInfo == nil)
        #expect(objectFromDisk.data == Data("o".utf8))
        let numberKeyFromDisk = try #require(reader.cachedResponse(for: cacheRequest(numberKeyURL)))
        #expect(numberKeyFromDisk.userInfo == nil)
        // …which the memory copy keeps as it was given.
        #expect(cache.cachedResponse(for: cacheRequest(objectURL))?.userInfo?["object"] as? NSObject === object)
    }

    @Test("CachedURLResponse: Apple's initializers and defaults; a copy is equal and independent")
    func cachedResponseValues() throws {
        let response = try #require(HTTPURLResponse(url: URL(string: "https://example.test/v")!, statusCode: 200, httpVersion: nil, headerFields: nil))
        let before = Date()
        let plain = CachedURLResponse(response: response, data: Data("x".utf8))
        #expect(plain.response === response)
        #expect(plain.data == Data("x".utf8))
        #expect(plain.userInfo == nil)
        #expect(plain.storagePolicy == .allowed)
        #expect(plain.requestFields.isEmpty)
        #expect(plain.requestTime >= before && plain.responseTime >= before)

        let full = CachedURLResponse(response: response, data: Data("y".utf8), userInfo: ["k": "v"], storagePolicy: .allowedInMemoryOnly)
        #expect(full.userInfo?["k"] as? String == "v")
        #expect(full.storagePolicy == .allowedInMemoryOnly)
        #expect(URLCache.StoragePolicy.allowed.rawValue == 0)
        #expect(URLCache.StoragePolicy.allowedInMemoryOnly.rawValue == 1)
        #expect(URLCache.StoragePolicy.notAllowed.rawValue == 2)

        let copy = try #require(full.copy() as? CachedURLResponse)
        #expect(copy !== full)
        #expect(copy.isEqual(full))
        #expect(copy.hash == full.hash)
        copy.responseTime = Date.distantPast
        #expect(full.responseTime != Date.distantPast)
        #expect(!plain.isEqual(full))
    }

    // MARK: Damage

    @Test("a body file truncated, grown or removed by hand is never served, and its entry goes")
    func damagedBodyFiles() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let cache = directory.makeCache(memory: 0, disk: 1 << 24)
        let urls = ["truncated", "grown", "removed", "intact"].map { "https://example.test/damage/\($0)" }
        for (index, url) in urls.enumerated() {
            cache.storeCachedResponse(cachedEntry(url, body: cacheBody(100 * 1024, byte: UInt8(index))), for: cacheRequest(url))
        }
        cache.flush()
        var files: [String] = []
        for url in urls {
            files.append(try #require(try cacheBodyFile(directory.database, key: url)))
        }
        #expect(directory.bodyFiles() == files.sorted())

        let path = { (index: Int) in directory.bodies.appendingPathComponent(files[index]).path }
        #expect(truncate(path(0), 50 * 1024) == 0)
        let handle = try #require(FileHandle(forWritingAtPath: path(1)))
        handle.seekToEndOfFile()
        handle.write(Data([1]))
        handle.closeFile()
        #expect(unlink(path(2)) == 0)

        for index in 0..<3 {
            #expect(cache.cachedResponse(for: cacheRequest(urls[index])) == nil, "\(urls[index])")
        }
        #expect(cache.cachedResponse(for: cacheRequest(urls[3]))?.data == cacheBody(100 * 1024, byte: 3))
        cache.flush()
        // The damaged entries are gone, with their files; the intact one stays.
        #expect(try cacheRowCount(directory.database) == 1)
        #expect(directory.bodyFiles() == [files[3]])
        #expect(cache.currentDiskUsage == URLCache.cost(of: cachedEntry(urls[3], body: cacheBody(100 * 1024))))
    }

    @Test("opening a store removes body files no row names and abandoned partial files, and leaves the rest")
    func orphansRemoved() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let url = "https://example.test/orphans/kept"
        let cache = directory.makeCache(memory: 0, disk: 1 << 24)
        cache.storeCachedResponse(cachedEntry(url, body: cacheBody(100 * 1024, byte: 9)), for: cacheRequest(url))
        cache.flush()
        let kept = try #require(try cacheBodyFile(directory.database, key: url))

        let orphan = UUID().uuidString.lowercased()
        let abandoned = UUID().uuidString.lowercased() + ".partial"
        let inProgress = UUID().uuidString.lowercased() + ".partial"
        let foreign = "notes.txt"
        for name in [orphan, abandoned, inProgress, foreign] {
            #expect(FileManager.default.createFile(atPath: directory.bodies.appendingPathComponent(name).path, contents: Data("junk".utf8)))
        }
        try FileManager.default.setAttributes(
            [.modificationDate: Date().addingTimeInterval(-3_600)], ofItemAtPath: directory.bodies.appendingPathComponent(abandoned).path
        )

        let second = directory.makeCache(memory: 0, disk: 1 << 24)
        #expect(second.cachedResponse(for: cacheRequest(url))?.data == cacheBody(100 * 1024, byte: 9))
        second.flush()
        #expect(directory.bodyFiles() == [kept, inProgress, foreign].sorted())
        #expect(second.cachedResponse(for: cacheRequest(url))?.data == cacheBody(100 * 1024, byte: 9))
    }

    @Test("a damaged database file is moved aside with its bytes, and a new store works")
    func corruptDatabase() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        try FileManager.default.createDirectory(at: directory.cache, withIntermediateDirectories: true)
        let garbage = Data(repeating: 0x5A, count: 4096)
        try garbage.write(to: directory.database)

        let cache = directory.makeCache(memory: 0, disk: 1 << 24)
        let url = "https://example.test/corrupt"
        cache.storeCachedResponse(cachedEntry(url, body: cacheBody(30_000, byte: 5)), for: cacheRequest(url))
        cache.flush()
        #expect(cache.usesDisk)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.cache.path)
        let aside = try #require(names.first { $0.hasPrefix("Cache.sqlite.corrupt-") })
        #expect(try Data(contentsOf: directory.cache.appendingPathComponent(aside)) == garbage)
        #expect(directory.diskReader().cachedResponse(for: cacheRequest(url))?.data == cacheBody(30_000, byte: 5))
    }

    @Test("a directory that cannot be made leaves a cache in memory only, without a crash")
    func unwritableDirectory() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        // A path under a regular file: no one, not even root, can make that directory.
        let blocker = directory.url.appendingPathComponent("file")
        #expect(FileManager.default.createFile(atPath: blocker.path, contents: Data("x".utf8)))
        let cache = directory.makeCache(memory: 100_000, disk: 1 << 24, directory: blocker.appendingPathComponent("cache", isDirectory: true))

        let small = "https://example.test/unwritable/small"
        let entry = cachedEntry(small, body: cacheBody(100))
        cache.storeCachedResponse(entry, for: cacheRequest(small))
        cache.flush()
        #expect(!cache.usesDisk)
        #expect(cache.cachedResponse(for: cacheRequest(small)) === entry)
        #expect(cache.currentDiskUsage == 0)

        // Too large for memory, and no disk: kept nowhere.
        let large = "https://example.test/unwritable/large"
        cache.storeCachedResponse(cachedEntry(large, body: cacheBody(10_000)), for: cacheRequest(large))
        #expect(cache.cachedResponse(for: cacheRequest(large)) == nil)
        cache.removeCachedResponses(since: .distantPast)
        cache.removeCachedResponse(for: cacheRequest(small))
        cache.removeAllCachedResponses()
        cache.diskCapacity = 10
        cache.flush()
        #expect(cache.cachedResponse(for: cacheRequest(small)) == nil)
    }

    @Test("files are private: the directory and Bodies 0700, the database and body files 0600")
    func fileModes() throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let nested = directory.url.appendingPathComponent("nested/cache", isDirectory: true)
        let cache = directory.makeCache(memory: 0, disk: 1 << 24, directory: nested)
        let url = "https://example.test/modes"
        cache.storeCachedResponse(cachedEntry(url, body: cacheBody(100 * 1024)), for: cacheRequest(url))
        cache.flush()
        #expect(cacheFileMode(nested.path) == 0o700)
        #expect(cacheFileMode(nested.deletingLastPathComponent().path) == 0o700)
        #expect(cacheFileMode(nested.appendingPathComponent("Cache.sqlite").path) == 0o600)
        #expect(cacheFileMode(nested.appendingPathComponent("Bodies").path) == 0o700)
        let bodies = try FileManager.default.contentsOfDirectory(atPath: nested.appendingPathComponent("Bodies").path)
        #expect(bodies.count == 1)
        for name in bodies {
            #expect(cacheFileMode(nested.appendingPathComponent("Bodies").appendingPathComponent(name).path) == 0o600)
        }
    }

    // MARK: Tasks, configurations, locations

    @Test("the task-based variants use the task's current request")
    func taskVariants() async throws {
        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let cache = directory.makeCache(memory: 1 << 20, disk: 0)
        let url = "https://example.test/task"
        let request = cacheRequest(url)
        let task = session.dataTask(with: request)
        let entry = cachedEntry(url, body: Data("task".utf8))

        cache.storeCachedResponse(entry, for: task)
        #expect(cache.cachedResponse(for: request) === entry)
        let fromHandler: CachedURLResponse? = await withCheckedContinuation { continuation in
            cache.getCachedResponse(for: task) { continuation.resume(returning: $0) }
        }
        #expect(fromHandler === entry)
        let fromAsync = await cache.cachedResponse(for: task)
        #expect(fromAsync === entry)

        cache.removeCachedResponse(for: task)
        #expect(cache.cachedResponse(for: request) == nil)
        let afterRemoval = await cache.cachedResponse(for: task)
        #expect(afterRemoval == nil)
    }

    @Test("configurations: default uses the shared cache; each ephemeral one has its own that never touches a disk")
    func configurations() throws {
        let shared = URLCache.shared
        #expect(URLSessionConfiguration.default.urlCache === shared)
        #expect(shared.memoryCapacity == 512_000)
        #expect(shared.diskCapacity == 10_000_000)
        #expect(URLSessionConfiguration.default.requestCachePolicy == .useProtocolCachePolicy)

        let configuration = URLSessionConfiguration.ephemeral
        let cache = try #require(configuration.urlCache)
        #expect(cache !== shared)
        #expect(URLSessionConfiguration.ephemeral.urlCache !== cache)
        #expect(cache.memoryCapacity == 4 * 1024 * 1024)
        #expect(cache.diskCapacity == 0)
        #expect(cache.diskDirectory == nil)
        #expect(!cache.usesDisk)

        // Even with a disk capacity, it keeps to memory.
        cache.diskCapacity = 1 << 24
        let url = "https://example.test/ephemeral"
        let entry = cachedEntry(url, body: cacheBody(100 * 1024))
        cache.storeCachedResponse(entry, for: cacheRequest(url))
        cache.flush()
        #expect(cache.cachedResponse(for: cacheRequest(url)) === entry)
        #expect(cache.currentDiskUsage == 0)
        #expect(cache.diskDirectory == nil)

        configuration.requestCachePolicy = .returnCacheDataElseLoad
        let copy = try #require(configuration.copy() as? URLSessionConfiguration)
        #expect(copy.urlCache === cache)
        #expect(copy.requestCachePolicy == .returnCacheDataElseLoad)
        configuration.urlCache = nil
        #expect((configuration.copy() as? URLSessionConfiguration)?.urlCache == nil)
    }

    @Test("Apple's raw values of the request cache policies")
    func cachePolicyValues() {
        #expect(URLRequest.CachePolicy.useProtocolCachePolicy.rawValue == 0)
        #expect(URLRequest.CachePolicy.reloadIgnoringLocalCacheData.rawValue == 1)
        #expect(URLRequest.CachePolicy.returnCacheDataElseLoad.rawValue == 2)
        #expect(URLRequest.CachePolicy.returnCacheDataDontLoad.rawValue == 3)
        #expect(URLRequest.CachePolicy.reloadIgnoringLocalAndRemoteCacheData.rawValue == 4)
        #expect(URLRequest.CachePolicy.reloadRevalidatingCacheData.rawValue == 5)
        #expect(URLRequest.CachePolicy.reloadIgnoringCacheData == .reloadIgnoringLocalCacheData)
    }

    @Test("disk locations: the XDG cache home, else ~/.cache; relative paths under courier/, absolute ones as they are")
    func locations() {
        let xdg = ["XDG_CACHE_HOME": "/x/cache", "HOME": "/home/u"]
        #expect(URLCache.directory(forDiskPath: nil, environment: xdg).path == "/x/cache/courier/URLCache")
        #expect(URLCache.directory(forDiskPath: "", environment: xdg).path == "/x/cache/courier/URLCache")
        #expect(URLCache.directory(forDiskPath: "mine", environment: xdg).path == "/x/cache/courier/mine")
        #expect(URLCache.directory(forDiskPath: "/srv/cache", environment: xdg).path == "/srv/cache")
        // A relative XDG_CACHE_HOME is ignored, as the XDG specification says.
        let home = ["XDG_CACHE_HOME": "relative", "HOME": "/home/u"]
        #expect(URLCache.directory(forDiskPath: nil, environment: home).path == "/home/u/.cache/courier/URLCache")
        #expect(URLCache.directory(forDiskPath: "mine", environment: home).path == "/home/u/.cache/courier/mine")
        // Nothing is made before the disk is used.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("CourierURLCacheTests-\(UUID().uuidString)")
        let cache = URLCache(memoryCapacity: 1_000, diskCapacity: 1_000_000, directory: directory)
        #expect(cache.diskDirectory?.path == directory.path)
        #expect(cache.cachedResponse(for: cacheRequest("https://example.test/nothing")) == nil)
        #expect(cache.currentDiskUsage == 0)
        cache.flush()
        #expect(!FileManager.default.fileExists(atPath: directory.path))
    }

    // MARK: Crash safety

    /// A writer process storing 100 KiB entries is killed once it reported `threshold`
    /// entries, and `delay` microseconds later, so that the kill lands at different moments
    /// (writing a body file, renaming it, committing the row).
    @Test(
        "a writer killed with SIGKILL leaves a store that serves every reported entry whole and no entry in part",
        arguments: zip([2, 8, 20], [UInt32(0), 600, 3_000])
    )
    func killedWriter(threshold: Int, delay: UInt32) async throws {
        let bodySize = 100 * 1024
        let writer = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("courier-store-writer")
        try #require(FileManager.default.isExecutableFile(atPath: writer.path), "courier-store-writer is built with the tests")

        let directory = try CacheTestDirectory()
        defer { directory.remove() }
        let arguments = ["cache", directory.cache.path, "2000"]
        let run = try await onOwnThread { try runAndKillStoreWriter(writer, arguments: arguments, threshold: threshold, delay: delay) }
        let reported = run.reported
        #expect(run.killed, "the writer stopped after \(reported.count) entries: \(run.stderr)")
        #expect(run.terminationReason == .uncaughtSignal, "\(run.stderr)")
        let lastReported = try #require(reported.max())
        #expect(reported == Set(0...lastReported))

        // The database file is sound (opening it recovers the WAL).
        do {
            let raw = try SQLiteDatabase(url: directory.database)
            let check = try raw.prepare("PRAGMA integrity_check")
            #expect(try check.step())
            #expect(check.text(at: 0) == "ok")
        }

        let cache = directory.diskReader()
        #expect(cache.usesDisk)
        // Every reported entry is served whole; at most one more committed before its report
        // was printed; none after that; and nothing is ever served in part or wrong.
        for index in 0...(lastReported + 4) {
            let found = cache.cachedResponse(for: cacheRequest("https://example.test/entry/\(index)"))
            if index <= lastReported {
                #expect(found != nil, "entry \(index) was reported committed (last reported \(lastReported))")
            } else if index > lastReported + 1 {
                #expect(found == nil, "entry \(index) after the last reported \(lastReported)")
            }
            if let found {
                #expect(found.data == Data(repeating: UInt8(truncatingIfNeeded: index), count: bodySize), "entry \(index)'s body")
                #expect((found.response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Index") == "\(index)")
            }
        }
        cache.flush()
        // After the store tidied up, every remaining body file is named by a row, except at
        // most the one the writer was writing (a fresh .partial, left for a later cleanup).
        let rows = try cacheRowCount(directory.database)
        let files = directory.bodyFiles()
        #expect(files.filter { !$0.hasSuffix(".partial") }.count == Int(rows))
        #expect(files.filter { $0.hasSuffix(".partial") }.count <= 1)
    }
}
