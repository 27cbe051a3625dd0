import CourierCore
import CourierSync
import Foundation
import Logging

// MARK: - URLCache

/// Apple's `URLCache`: responses kept by request, in memory and on disk.
///
/// This object only stores and fetches; the session decides, by RFC 9111, what to store and
/// whether a stored response may answer a request.
///
/// **Keys.** An entry is found by its request's URL without the fragment (`absoluteString`),
/// for `GET` requests only: a lookup for another method finds nothing and a store for another
/// method does nothing. One entry per key: a new one replaces the old, in memory and on disk.
/// A store that would keep the entry nowhere (see below) changes nothing.
///
/// **Where an entry goes.** By its `storagePolicy`: `.notAllowed` is never stored;
/// `.allowedInMemoryOnly` only in memory; `.allowed` in memory and on disk. Its cost (body
/// bytes plus an estimate of its header bytes, ``cost(of:)``) decides the rest: an entry
/// that costs more than 5% of the memory capacity is not kept in memory (Apple's documented
/// rule for the in-memory cache), and one that costs more than the whole disk capacity is not
/// stored on disk. (Apple's session also refuses to cache a response larger than about 5% of
/// the disk cache; that decision belongs to the session, not to this store.)
///
/// **Memory.** A least-recently-used list bounded by ``memoryCapacity``;
/// ``currentMemoryUsage`` is the sum of its costs. A lookup that finds an entry on disk puts
/// it in memory (when it fits).
///
/// **Disk.** A directory holding an SQLite file, `Cache.sqlite`, and a `Bodies` folder
/// (``CacheDatabase`` describes the layout and why a crash never leaves an entry with a
/// partial body). The directory is made with mode 0700, the files with 0600. The store is
/// opened on first use, not when the object is made; when it cannot be opened (a directory
/// that cannot be written, say), a warning is logged and the cache works in memory only.
/// Entries are evicted least recently used first when ``currentDiskUsage`` (the sum of the
/// costs on disk) exceeds ``diskCapacity``. Several caches, in one process or several, may
/// share a directory. A cache with a disk capacity of 0 never touches its directory.
///
/// **Threads.** Every method may be called from any thread. One lock guards the memory list
/// and the figures; another guards the disk store's reading connection (the two are never
/// held together). Storing never waits for the disk: the memory list and a map of pending
/// writes are updated under the lock, so that a lookup right after a store sees the entry,
/// and the disk work (writes, evictions, deletions) runs on the cache's own serial queue. A
/// lookup may read the disk on the caller's thread.
open class URLCache: NSObject, @unchecked Sendable {
    /// Where a cached response may be kept.
    public enum StoragePolicy: UInt, Sendable {
        /// In memory and on disk.
        case allowed = 0
        /// In memory only.
        case allowedInMemoryOnly = 1
        /// Not at all.
        case notAllowed = 2
    }

    /// Apple's memory capacity of the shared cache: 512,000 bytes.
    static let defaultMemoryCapacity = 512_000
    /// Apple's disk capacity of the shared cache: 10,000,000 bytes.
    static let defaultDiskCapacity = 10_000_000
    /// The memory capacity of an ephemeral configuration's cache: 4 MiB, in memory only.
    /// Apple gives ephemeral sessions a memory-only cache without documenting its size; 4 MiB
    /// holds a few hundred typical API responses, and entries of up to 5% of it (about
    /// 200 KiB) fit.
    static let ephemeralMemoryCapacity = 4 * 1024 * 1024
    /// A lookup served from memory marks the entry used on disk too, at most this often
    /// (one minute), so that an entry kept hot in memory is not the first evicted from disk.
    static let diskTouchInterval: TimeInterval = 60

    private static let sharedCache = Mutex<URLCache?>(nil)

    let state: Mutex<State>
    let disk: Mutex<DiskState>
    /// Runs the disk work, in order.
    let writer = DispatchQueue(label: "Courier URLCache writer")
    /// Jobs queued on `writer` and not finished; ``flush()`` waits for 0.
    let queuedJobs = Atomic<Int>(0)
    let logger = Logger(label: "courier")

    /// The cache of `URLSessionConfiguration.default`: 512,000 bytes in memory and
    /// 10,000,000 on disk, in `$XDG_CACHE_HOME/courier/URLCache/` (`~/.cache/courier/URLCache/`
    /// without it). Replaceable.
    open class var shared: URLCache {
        get {
            sharedCache.withLock { cache -> URLCache in
                if let cache { return cache }
                let made = URLCache(memoryCapacity: defaultMemoryCapacity, diskCapacity: defaultDiskCapacity, diskPath: nil)
                cache = made
                return made
            }
        }
        set {
            sharedCache.withLock { $0 = newValue }
        }
    }

    /// A cache with the given capacities, in bytes, on disk in `path`: a relative path is
    /// taken in `$XDG_CACHE_HOME/courier/` (`~/.cache/courier/`), an absolute one as it is;
    /// nil (or empty) is the shared cache's folder, `$XDG_CACHE_HOME/courier/URLCache/`.
    /// Nothing is created until the disk is first used.
    public init(memoryCapacity: Int, diskCapacity: Int, diskPath path: String?) {
        state = Mutex(State(memoryCapacity: max(0, memoryCapacity), diskCapacity: max(0, diskCapacity)))
        disk = Mutex(DiskState(directory: URLCache.directory(forDiskPath: path)))
        super.init()
    }

    /// A cache with the given capacities, in bytes, on disk in `directory` (nil: the shared
    /// cache's folder). Nothing is created until the disk is first used.
    public convenience init(memoryCapacity: Int, diskCapacity: Int, directory: URL?) {
        self.init(memoryCapacity: memoryCapacity, diskCapacity: diskCapacity, diskPath: directory?.path)
    }

    /// A cache that never uses a disk, whatever ``diskCapacity`` is set to later: an
    /// ephemeral configuration's.
    convenience init(memoryOnlyCapacity capacity: Int) {
        self.init(memoryCapacity: capacity, diskCapacity: 0, diskPath: nil)
        disk.withLock { $0.directory = nil }
        state.withLock { $0.diskPossible = false }
    }

    // MARK: Apple's API

    /// The response stored for `request`, from memory, else from disk; nil for none (and
    /// always for a request whose method is not `GET`).
    open func cachedResponse(for request: URLRequest) -> CachedURLResponse? {
        guard let key = Self.key(for: request) else { return nil }
        return cachedResponse(forKey: key)
    }

    /// Stores `cachedResponse` for `request` (a `GET`), replacing its entry, as the type's
    /// discussion says. Returns at once: the disk is written on the cache's queue.
    open func storeCachedResponse(_ cachedResponse: CachedURLResponse, for request: URLRequest) {
        guard let key = Self.key(for: request) else { return }
        store(cachedResponse, forKey: key)
    }

    /// Removes the entry of `request`, from memory at once and from disk on the cache's queue.
    open func removeCachedResponse(for request: URLRequest) {
        guard let key = Self.key(for: request) else { return }
        remove(key: key)
    }

    /// Removes every entry, this process's and, on disk, every other's sharing the directory.
    open func removeAllCachedResponses() {
        state.withLock { state in
            state.memory.removeAll()
            state.pending.removeAll()
            state.pendingClears += 1
            state.globalEpoch &+= 1
        }
        enqueue { [self] in
            defer { state.withLock { $0.pendingClears -= 1 } }
            guard let databases = openedDatabases(create: false) else { return }
            do {
                try databases.writer.removeAll()
                state.withLock { $0.diskUsage = 0 }
            } catch {
                diskFailed(error, while: "clear")
            }
        }
    }

    /// Removes the entries whose response was received at or after `date`.
    open func removeCachedResponses(since date: Date) {
        state.withLock { state in
            state.memory.removeAll { $0.response.responseTime >= date }
            for (key, change) in state.pending {
                // A pending write of such an entry still runs; the tombstone hides it, and
                // the disk deletion below (queued after it) removes it.
                if case .stored(let response, let generation) = change, response.responseTime >= date {
                    state.pending[key] = .removed(generation: generation)
                }
            }
            state.pendingRemovalDates.append(date)
            state.globalEpoch &+= 1
        }
        enqueue { [self] in
            defer {
                state.withLock { state in
                    if let index = state.pendingRemovalDates.firstIndex(of: date) { state.pendingRemovalDates.remove(at: index) }
                }
            }
            guard let databases = openedDatabases(create: false) else { return }
            do {
                let usage = try databases.writer.removeResponses(since: date)
                state.withLock { $0.diskUsage = usage }
            } catch {
                diskFailed(error, while: "clear")
            }
        }
    }

    /// The memory capacity in bytes. Lowering it evicts least recently used entries, and the
    /// ones that cost more than 5% of the new capacity, at once.
    open var memoryCapacity: Int {
        get { state.withLock { $0.memoryCapacity } }
        set {
            let capacity = max(0, newValue)
            state.withLock { state in
                state.memoryCapacity = capacity
                state.memory.removeAll { !State.fitsMemory($0.cost, capacity: capacity) }
                state.memory.evict(toCost: capacity)
            }
        }
    }

    /// The disk capacity in bytes. Lowering it evicts least recently used entries from disk
    /// on the cache's queue; 0 empties the disk store.
    open var diskCapacity: Int {
        get { state.withLock { $0.diskCapacity } }
        set {
            let capacity = max(0, newValue)
            let lowered = state.withLock { state -> Bool in
                defer { state.diskCapacity = capacity }
                return capacity < state.diskCapacity
            }
            guard lowered else { return }
            enqueue { [self] in
                guard let databases = openedDatabases(create: false) else { return }
                do {
                    let usage = try databases.writer.evict(capacity: state.withLock { $0.diskCapacity })
                    state.withLock { $0.diskUsage = usage }
                } catch {
                    diskFailed(error, while: "evict from")
                }
            }
        }
    }

    /// The sum of the costs of the entries in memory, in bytes.
    open var currentMemoryUsage: Int {
        state.withLock { $0.memory.totalCost }
    }

    /// The sum of the costs of the entries on disk, in bytes, as of the last disk work
    /// finished (writes queued and not yet done are not counted).
    open var currentDiskUsage: Int {
        let usesDisk = state.withLock { $0.diskPossible && $0.diskCapacity > 0 }
        // Opening an existing store reads its usage.
        if usesDisk { _ = openedDatabases(create: false) }
        return state.withLock { $0.diskUsage }
    }

    /// Stores `cachedResponse` for the task's current request (its original one before it
    /// started).
    open func storeCachedResponse(_ cachedResponse: CachedURLResponse, for dataTask: URLSessionDataTask) {
        guard let request = dataTask.currentRequest ?? dataTask.originalRequest else { return }
        storeCachedResponse(cachedResponse, for: request)
    }

    /// Passes the response stored for the task's current request (nil for none) to
    /// `completionHandler`, on another thread.
    open func getCachedResponse(for dataTask: URLSessionDataTask, completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void) {
        let request = dataTask.currentRequest ?? dataTask.originalRequest
        DispatchQueue.global().async { [self] in
            completionHandler(request.flatMap { cachedResponse(for: $0) })
        }
    }

    /// Removes the entry of the task's current request.
    open func removeCachedResponse(for dataTask: URLSessionDataTask) {
        guard let request = dataTask.currentRequest ?? dataTask.originalRequest else { return }
        removeCachedResponse(for: request)
    }

    /// The response stored for the task's current request; nil for none.
    open func cachedResponse(for dataTask: URLSessionDataTask) async -> CachedURLResponse? {
        await withCheckedContinuation { continuation in
            getCachedResponse(for: dataTask) { continuation.resume(returning: $0) }
        }
    }

    open override var description: String {
        let (memory, entries, diskUsage) = state.withLock { ($0.memory.totalCost, $0.memory.count, $0.diskUsage) }
        return "<URLCache memory: \(entries) entries, \(memory) bytes; disk: \(diskUsage) bytes>"
    }

    // MARK: For the session and the tests

    /// The key of `request`: its URL without the fragment; nil when it has no URL or its
    /// method is not `GET`.
    static func key(for request: URLRequest) -> String? {
        guard (request.httpMethod ?? "GET") == "GET", let url = request.url else { return nil }
        var text = url.absoluteString
        // In an absolute URL string, "#" can only start the fragment. Searched in the UTF-8
        // bytes (a search by Character took 14,000 instructions for a 37-byte URL, twice a
        // request).
        return text.withUTF8 { bytes in
            guard let hash = bytes.firstIndex(of: UInt8(ascii: "#")) else { return nil }
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[..<hash]), as: UTF8.self)
        } ?? text
    }

    /// What an entry counts for against the capacities: its body's bytes, plus its header
    /// fields' bytes (response and request; name, value and 4 bytes of framing each) and its
    /// URL's, an estimate of what the entry costs beyond its body.
    static func cost(of cached: CachedURLResponse) -> Int {
        var cost = cached.data.count
        if let http = cached.response as? HTTPURLResponse { cost += fieldBytes(http.fields) }
        cost += fieldBytes(cached.requestFields)
        cost += cached.response.url?.absoluteString.utf8.count ?? 0
        return cost
    }

    private static func fieldBytes(_ fields: HTTPFields) -> Int {
        var bytes = 0
        fields.forEachField { name, value in bytes += name.count + value.count + 4 }
        return bytes
    }

    /// Waits until the disk work queued so far (and any it queued in turn) is done: for
    /// tests, and a process about to exit. Never call it on the cache's queue.
    func flush() {
        repeat {
            writer.sync {}
        } while queuedJobs.load(ordering: .acquiring) > 0
    }

    /// The directory of the disk store; nil for a cache that never uses a disk.
    var diskDirectory: URL? {
        disk.withLock { $0.directory }
    }

    /// True while the cache may use its disk store: it has a directory, and the store has not
    /// failed to open.
    var usesDisk: Bool {
        state.withLock { $0.diskPossible }
    }

    /// `$XDG_CACHE_HOME/courier/<path>`: `~/.cache/courier/<path>` without it; `URLCache`
    /// for nil or empty; an absolute `path` as it is.
    static func directory(forDiskPath path: String?, environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        let courier = XDGDirectories.cache(environment: environment)
        guard let path, !path.isEmpty else { return courier.appendingPathComponent("URLCache", isDirectory: true) }
        if path.hasPrefix("/") { return URL(fileURLWithPath: path, isDirectory: true) }
        return courier.appendingPathComponent(path, isDirectory: true)
    }

    // MARK: Lookup

    /// What the memory side found for a key.
    private enum Lookup {
        /// In memory or pending; `touchDisk`: mark it used on disk.
        case memory(CachedURLResponse, key: String, touchDisk: Bool)
        /// Nothing, and the disk is not to be asked (a pending removal, or no disk).
        case miss
        /// Ask the disk; promote what it has only if `epoch` is unchanged by then. Rows whose
        /// response time is at or after `hiddenSince` are being removed.
        case disk(epoch: State.Epoch, hiddenSince: Date?)
    }

    /// The lookup behind ``cachedResponse(for:)``, by key.
    func cachedResponse(forKey key: String) -> CachedURLResponse? {
        let now = Date()
        let lookup = state.withLock { state -> Lookup in
            if let hit = state.memory.hit(key, now: now, touchInterval: Self.diskTouchInterval) {
                return .memory(hit.response, key: key, touchDisk: hit.touchDisk)
            }
            switch state.pending[key] {
            case .stored(let response, _)?: return .memory(response, key: key, touchDisk: false)
            case .removed?: return .miss
            case nil: break
            }
            guard state.diskPossible, state.diskCapacity > 0, state.pendingClears == 0 else { return .miss }
            return .disk(epoch: state.epoch(for: key), hiddenSince: state.pendingRemovalDates.min())
        }
        switch lookup {
        case .miss:
            return nil
        case .memory(let response, let key, let touchDisk):
            if touchDisk { touch(key, at: now) }
            return response
        case .disk(let epoch, let hiddenSince):
            return diskResponse(forKey: key, epoch: epoch, hiddenSince: hiddenSince, now: now)
        }
    }

    /// Reads the entry of `key` from disk (on the caller's thread), checks its body, and puts
    /// it in memory.
    private func diskResponse(forKey key: String, epoch: State.Epoch, hiddenSince: Date?, now: Date) -> CachedURLResponse? {
        guard let databases = openedDatabases(create: false) else { return nil }
        let lookup: CacheDatabase.Lookup
        do {
            // The reading connection is used under the disk lock only.
            lookup = try disk.withLock { _ in try databases.reader.entry(forKey: key) }
        } catch {
            diskFailed(error, while: "read")
            return nil
        }
        let entry: CacheDatabase.StoredEntry
        switch lookup {
        case .missing:
            return nil
        case .unreadable(let id):
            logger.debug("URLCache: an unreadable entry for \(key) is removed from the disk store.")
            removeRow(id)
            return nil
        case .found(let found):
            entry = found
        }
        if let hiddenSince, entry.record.responseTime >= hiddenSince { return nil }

        let body: Data?
        switch entry.body {
        case .inline(let data): body = data
        case .file(let name): body = databases.reader.readBody(named: name, size: entry.record.bodySize)
        }
        guard let body, let response = entry.record.makeCachedResponse(body: body) else {
            // A body file missing, truncated or grown: never served, and the row goes.
            logger.debug("URLCache: the body of the entry for \(key) does not match its record; the entry is removed.")
            removeRow(entry.id)
            return nil
        }

        let cost = Self.cost(of: response)
        state.withLock { state in
            // Not when the key changed meanwhile (a store or removal since the lookup began),
            // which would put an older entry in front of the newer one.
            guard state.epoch(for: key) == epoch, !state.memory.contains(key), state.pending[key] == nil,
                State.fitsMemory(cost, capacity: state.memoryCapacity)
            else { return }
            state.memory.insert(key, MemoryLRU.Entry(response: response, cost: cost, onDisk: true, lastDiskTouch: now))
            state.memory.evict(toCost: state.memoryCapacity)
        }
        touch(key, at: now)
        return response
    }

    // MARK: Store and remove

    /// The store behind ``storeCachedResponse(_:for:)``, by key.
    func store(_ cachedResponse: CachedURLResponse, forKey key: String) {
        guard cachedResponse.storagePolicy != .notAllowed else { return }
        let cost = Self.cost(of: cachedResponse)
        let now = Date()
        let job = state.withLock { state -> DiskJob? in
            let inMemory = State.fitsMemory(cost, capacity: state.memoryCapacity)
            let diskUsable = state.diskPossible && state.diskCapacity > 0
            let toDisk = cachedResponse.storagePolicy == .allowed && diskUsable && cost <= state.diskCapacity
            // Kept nowhere: nothing changes.
            guard inMemory || toDisk else { return nil }
            state.bump(key)
            if inMemory {
                state.memory.insert(key, MemoryLRU.Entry(response: cachedResponse, cost: cost, onDisk: toDisk, lastDiskTouch: now))
                state.memory.evict(toCost: state.memoryCapacity)
            } else {
                state.memory.remove(key)
            }
            guard diskUsable else {
                // No disk (or none to use): nothing to write, and no older entry there to
                // hide, since lookups do not ask the disk either.
                state.pending[key] = nil
                return nil
            }
            state.generation &+= 1
            let generation = state.generation
            if toDisk {
                state.pending[key] = .stored(cachedResponse, generation: generation)
                return .write(generation: generation)
            }
            // In memory only: the disk's older entry of the key goes, hidden until it has.
            state.pending[key] = .removed(generation: generation)
            return .delete(generation: generation)
        }
        switch job {
        case nil:
            return
        case .write(let generation)?:
            enqueue { [self] in
                defer { finishPending(key, generation: generation) }
                writeToDisk(cachedResponse, key: key, cost: cost)
            }
        case .delete(let generation)?:
            enqueue { [self] in
                defer { finishPending(key, generation: generation) }
                deleteFromDisk(key: key)
            }
        }
    }

    /// The removal behind ``removeCachedResponse(for:)``, by key.
    func remove(key: String) {
        let generation = state.withLock { state -> UInt64? in
            state.memory.remove(key)
            state.bump(key)
            guard state.diskPossible, state.diskCapacity > 0 else {
                state.pending[key] = nil
                return nil
            }
            state.generation &+= 1
            state.pending[key] = .removed(generation: state.generation)
            return state.generation
        }
        guard let generation else { return }
        enqueue { [self] in
            defer { finishPending(key, generation: generation) }
            deleteFromDisk(key: key)
        }
    }

    // MARK: State

    /// A change of a key that the disk does not show yet.
    enum PendingChange {
        /// A write queued: lookups are answered from here.
        case stored(CachedURLResponse, generation: UInt64)
        /// A deletion queued: lookups find nothing.
        case removed(generation: UInt64)

        var generation: UInt64 {
            switch self {
            case .stored(_, let generation), .removed(let generation): generation
            }
        }
    }

    /// What the cache's lock guards.
    struct State {
        /// A count of the changes that may make a disk lookup's result stale: one counter per
        /// bucket of keys, and one for changes of every key.
        struct Epoch: Equatable {
            var key: UInt64
            var global: UInt64
        }

        /// Buckets of ``keyEpochs``: a collision only makes a promotion to memory skipped.
        static let epochBuckets = 64

        var memoryCapacity: Int
        var diskCapacity: Int
        var memory = MemoryLRU()
        /// Changes queued for the disk, by key.
        var pending: [String: PendingChange] = [:]
        /// The last generation given to a pending change.
        var generation: UInt64 = 0
        /// False for a memory-only cache, and once the disk store failed.
        var diskPossible = true
        /// The disk usage as of the last disk work.
        var diskUsage = 0
        /// Clearings queued: the disk is not asked until they are done.
        var pendingClears = 0
        /// Dates of ``removeCachedResponses(since:)`` queued: rows received at or after the
        /// earliest are hidden until they are done.
        var pendingRemovalDates: [Date] = []
        var keyEpochs = [UInt64](repeating: 0, count: Self.epochBuckets)
        var globalEpoch: UInt64 = 0

        init(memoryCapacity: Int, diskCapacity: Int) {
            self.memoryCapacity = memoryCapacity
            self.diskCapacity = diskCapacity
        }

        /// True when an entry costing `cost` may be kept in a memory of `capacity`: at most 5%
        /// of it (Apple's rule), and the capacity is not 0.
        static func fitsMemory(_ cost: Int, capacity: Int) -> Bool {
            capacity > 0 && cost <= capacity / 20
        }

        func epoch(for key: String) -> Epoch {
            Epoch(key: keyEpochs[Self.bucket(key)], global: globalEpoch)
        }

        /// Records a change of `key`.
        mutating func bump(_ key: String) {
            keyEpochs[Self.bucket(key)] &+= 1
        }

        static func bucket(_ key: String) -> Int {
            Int(UInt(bitPattern: key.hashValue) % UInt(epochBuckets))
        }
    }
}
