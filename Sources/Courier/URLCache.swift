import CourierCore
import Foundation
import Logging
import Synchronization

// MARK: - CachedURLResponse

/// A response and its body as a cache keeps them: Apple's `CachedURLResponse`.
///
/// Immutable to user code. Courier's session also records, in internal fields, what RFC 9111
/// needs to judge the entry later: the request's header fields (for `Vary`), and when the
/// request was sent and the response received (for the age calculation). Set them before the
/// object is stored or shared: a cache hands out the object it was given.
open class CachedURLResponse: NSObject, NSCopying, @unchecked Sendable {
    private let storedResponse: URLResponse
    private let storedData: Data
    private let storedUserInfo: [AnyHashable: Any]?
    private let storedStoragePolicy: URLCache.StoragePolicy

    /// The header fields of the request that got the response, as sent, for `Vary` (RFC 9111
    /// section 4.1). Empty by default.
    var requestFields: HTTPFields
    /// When the request was sent: `request_time` of RFC 9111 section 4.2.3. The moment the
    /// object was made by default.
    var requestTime: Date
    /// When the response was received: `response_time` of RFC 9111 section 4.2.3, and the
    /// date ``URLCache/removeCachedResponses(since:)`` compares. The moment the object was
    /// made by default.
    var responseTime: Date

    /// A response allowed in memory and on disk, without user info.
    public init(response: URLResponse, data: Data) {
        let now = Date()
        storedResponse = response
        storedData = data
        storedUserInfo = nil
        storedStoragePolicy = .allowed
        requestFields = HTTPFields()
        requestTime = now
        responseTime = now
        super.init()
    }

    /// A response with user info and a storage policy. On disk, only user info that is a
    /// property list (string keys; strings, numbers, dates, data, arrays and dictionaries)
    /// is kept; other user info is kept in memory only.
    public init(response: URLResponse, data: Data, userInfo: [AnyHashable: Any]? = nil, storagePolicy: URLCache.StoragePolicy) {
        let now = Date()
        storedResponse = response
        storedData = data
        storedUserInfo = userInfo
        storedStoragePolicy = storagePolicy
        requestFields = HTTPFields()
        requestTime = now
        responseTime = now
        super.init()
    }

    /// A response with every internal field: the session's initializer.
    ///
    /// - Parameters:
    ///   - requestFields: the header fields of the request as sent (for `Vary`).
    ///   - requestTime: when that request was sent.
    ///   - responseTime: when the response head arrived.
    convenience init(
        response: URLResponse, data: Data, userInfo: [AnyHashable: Any]? = nil, storagePolicy: URLCache.StoragePolicy,
        requestFields: HTTPFields, requestTime: Date, responseTime: Date
    ) {
        self.init(response: response, data: data, userInfo: userInfo, storagePolicy: storagePolicy)
        self.requestFields = requestFields
        self.requestTime = requestTime
        self.responseTime = responseTime
    }

    /// The response.
    open var response: URLResponse { storedResponse }
    /// The body.
    open var data: Data { storedData }
    /// Whatever the storer attached; nil for none.
    open var userInfo: [AnyHashable: Any]? { storedUserInfo }
    /// Where a cache may keep it.
    open var storagePolicy: URLCache.StoragePolicy { storedStoragePolicy }

    open override func copy() -> Any {
        copy(with: nil)
    }

    /// A new object with the same values (internal fields included), so that changing the
    /// copy's internal fields leaves this one alone.
    open func copy(with zone: NSZone? = nil) -> Any {
        CachedURLResponse(
            response: storedResponse, data: storedData, userInfo: storedUserInfo, storagePolicy: storedStoragePolicy,
            requestFields: requestFields, requestTime: requestTime, responseTime: responseTime
        )
    }

    /// Equal when response, data and storage policy are (user info holds values that cannot be
    /// compared, as in swift-corelibs-foundation).
    open override func isEqual(_ value: Any?) -> Bool {
        guard let other = value as? CachedURLResponse else { return false }
        if other === self { return true }
        return response.isEqual(other.response) && data == other.data && storagePolicy == other.storagePolicy
    }

    open override var hash: Int {
        var hasher = Hasher()
        hasher.combine(response.hash)
        hasher.combine(data)
        hasher.combine(storagePolicy)
        return hasher.finalize()
    }

    open override var description: String {
        "<CachedURLResponse \(response.url?.absoluteString ?? "nil")> { \(data.count) bytes, \(storagePolicy) }"
    }
}

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

    private let state: Mutex<State>
    private let disk: Mutex<DiskState>
    /// Runs the disk work, in order.
    private let writer = DispatchQueue(label: "Courier URLCache writer")
    /// Jobs queued on `writer` and not finished; ``flush()`` waits for 0.
    private let queuedJobs = Atomic<Int>(0)
    private let logger = Logger(label: "courier")

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
        let text = url.absoluteString
        // In an absolute URL string, "#" can only start the fragment.
        if let hash = text.firstIndex(of: "#") { return String(text[..<hash]) }
        return text
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

    // MARK: Disk work (on the writer queue)

    /// Work a store queues.
    private enum DiskJob {
        case write(generation: UInt64)
        case delete(generation: UInt64)
    }

    /// Queues `work` on the writer queue, counted for ``flush()``.
    private func enqueue(_ work: @escaping @Sendable () -> Void) {
        _ = queuedJobs.add(1, ordering: .relaxed)
        writer.async { [self] in
            work()
            _ = self.queuedJobs.subtract(1, ordering: .releasing)
        }
    }

    /// Writes an entry, creating the store when needed.
    private func writeToDisk(_ cachedResponse: CachedURLResponse, key: String, cost: Int) {
        guard let databases = openedDatabases(create: true) else { return }
        let capacity = state.withLock { $0.diskCapacity }
        do {
            let usage: Int
            if cost <= capacity {
                let record = CacheRecord(cachedResponse, key: key, cost: cost)
                usage = try databases.writer.store(record, body: cachedResponse.data, capacity: capacity, now: Date())
            } else {
                // The capacity was lowered since the store: the entry no longer fits, and the
                // older one it replaces goes all the same.
                usage = try databases.writer.remove(key: key)
            }
            state.withLock { $0.diskUsage = usage }
        } catch {
            diskFailed(error, while: "write to")
        }
    }

    /// Deletes the entry of `key` from an existing store.
    private func deleteFromDisk(key: String) {
        guard let databases = openedDatabases(create: false) else { return }
        do {
            let usage = try databases.writer.remove(key: key)
            state.withLock { $0.diskUsage = usage }
        } catch {
            diskFailed(error, while: "delete from")
        }
    }

    /// Queues the deletion of the row `id` (one whose body did not match, or that could not
    /// be read).
    private func removeRow(_ id: Int64) {
        enqueue { [self] in
            guard let databases = openedDatabases(create: false) else { return }
            do {
                let usage = try databases.writer.remove(id: id)
                state.withLock { $0.diskUsage = usage }
            } catch {
                diskFailed(error, while: "delete from")
            }
        }
    }

    /// Queues marking the entry of `key` used at `time` on disk.
    private func touch(_ key: String, at time: Date) {
        enqueue { [self] in
            guard let databases = openedDatabases(create: false) else { return }
            do {
                try databases.writer.touch(key: key, at: time)
            } catch {
                diskFailed(error, while: "update")
            }
        }
    }

    /// Ends the pending change `generation` of `key`, unless a newer one replaced it.
    private func finishPending(_ key: String, generation: UInt64) {
        state.withLock { state in
            if state.pending[key]?.generation == generation { state.pending[key] = nil }
        }
    }

    // MARK: Opening the disk store

    /// The two connections to an open store.
    private struct Databases: Sendable {
        /// For lookups, under the disk lock.
        let reader: CacheDatabase
        /// For the writer queue alone.
        let writer: CacheDatabase
    }

    /// The disk store, opened on first use.
    private enum DiskBacking {
        case unopened
        case open(Databases)
        /// It could not be opened, or is damaged: memory only from now on.
        case unavailable
    }

    /// What the disk lock guards.
    private struct DiskState {
        /// Nil for a cache that never uses a disk.
        var directory: URL?
        var backing = DiskBacking.unopened
    }

    /// The open store; opens it when needed: always when `create`, else only when its file
    /// exists (a lookup or deletion in a store never written needs no directory). Nil when
    /// there is no store, or it cannot be opened (logged once; the cache then keeps to memory).
    private func openedDatabases(create: Bool) -> Databases? {
        var failure: (path: String, error: any Error)?
        var opened: (usage: Int, movedAside: String?)?
        let databases = disk.withLock { disk -> Databases? in
            switch disk.backing {
            case .open(let databases):
                return databases
            case .unavailable:
                return nil
            case .unopened:
                guard let directory = disk.directory else { return nil }
                guard create || FileManager.default.fileExists(atPath: CacheDatabase.fileURL(in: directory).path) else { return nil }
                do {
                    // The writer's connection first: it moves a damaged file aside.
                    let writer = try CacheDatabase.open(directory: directory)
                    let reader = try CacheDatabase.open(directory: directory)
                    let databases = Databases(reader: reader, writer: writer)
                    let usage = try reader.totalCost()
                    opened = (usage, writer.damagedFileMovedTo)
                    disk.backing = .open(databases)
                    return databases
                } catch {
                    failure = (directory.path, error)
                    disk.backing = .unavailable
                    return nil
                }
            }
        }
        if let failure {
            state.withLock { $0.diskPossible = false }
            logger.warning("URLCache: cannot use the disk cache in \(failure.path) (\(failure.error)); responses are cached in memory only.")
        }
        if let opened {
            state.withLock { $0.diskUsage = opened.usage }
            if let aside = opened.movedAside {
                logger.warning("URLCache: the disk cache's database was damaged; it was moved to \(aside) and a new one started.")
            }
            // Body files left by a crash, or by a database moved aside.
            enqueue { [self] in
                do {
                    let usage = try databases?.writer.removeOrphans(now: Date())
                    if let usage { state.withLock { $0.diskUsage = usage } }
                } catch {
                    diskFailed(error, while: "tidy")
                }
            }
        }
        return databases
    }

    /// Logs a failed disk operation. A damaged store is given up: the cache keeps to memory
    /// from then on (the next process that opens a store whose file no longer reads as a
    /// database moves it aside).
    private func diskFailed(_ error: any Error, while action: String) {
        if let failure = error as? SQLiteError, failure.isCorruption {
            disk.withLock { $0.backing = .unavailable }
            state.withLock { $0.diskPossible = false }
            logger.warning("URLCache: the disk cache is damaged (\(failure)); responses are cached in memory only.")
        } else {
            logger.warning("URLCache: cannot \(action) the disk cache (\(error)).")
        }
    }

    // MARK: State

    /// A change of a key that the disk does not show yet.
    private enum PendingChange {
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
    private struct State {
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

        private static func bucket(_ key: String) -> Int {
            Int(UInt(bitPattern: key.hashValue) % UInt(epochBuckets))
        }
    }
}

/// The memory side of a ``URLCache``: entries by key in least-recently-used order, with the
/// sum of their costs. A doubly linked list threaded through an array of nodes (free slots
/// reused), indexed by a dictionary: every operation is O(1) but the filtering ones.
struct MemoryLRU {
    /// One entry.
    struct Entry {
        var response: CachedURLResponse
        var cost: Int
        /// True when a disk copy is expected (so that hits mark it used there).
        var onDisk: Bool
        /// When the disk copy was last marked used.
        var lastDiskTouch: Date
    }

    private struct Node {
        var key: String
        var entry: Entry
        /// The next more recently used node; -1 for none.
        var newer: Int
        /// The next less recently used node; -1 for none.
        var older: Int
    }

    private var nodes: [Node?] = []
    private var freeSlots: [Int] = []
    private var slots: [String: Int] = [:]
    /// The most recently used node; -1 when empty.
    private var newest = -1
    /// The least recently used node; -1 when empty.
    private var oldest = -1
    /// The sum of the entries' costs.
    private(set) var totalCost = 0

    var count: Int { slots.count }

    func contains(_ key: String) -> Bool { slots[key] != nil }

    /// The entry of `key`, made the most recently used; `touchDisk` is true (and the touch
    /// recorded) when it has a disk copy last marked used `touchInterval` or more before `now`.
    mutating func hit(_ key: String, now: Date, touchInterval: TimeInterval) -> (response: CachedURLResponse, touchDisk: Bool)? {
        guard let slot = slots[key] else { return nil }
        moveToNewest(slot)
        var touchDisk = false
        if nodes[slot]!.entry.onDisk, now.timeIntervalSince(nodes[slot]!.entry.lastDiskTouch) >= touchInterval {
            nodes[slot]!.entry.lastDiskTouch = now
            touchDisk = true
        }
        return (nodes[slot]!.entry.response, touchDisk)
    }

    /// Adds `entry` as the most recently used, replacing the key's entry.
    mutating func insert(_ key: String, _ entry: Entry) {
        remove(key)
        let node = Node(key: key, entry: entry, newer: -1, older: newest)
        let slot: Int
        if let free = freeSlots.popLast() {
            nodes[free] = node
            slot = free
        } else {
            nodes.append(node)
            slot = nodes.count - 1
        }
        if newest >= 0 { nodes[newest]!.newer = slot }
        newest = slot
        if oldest < 0 { oldest = slot }
        slots[key] = slot
        totalCost += entry.cost
    }

    /// Removes the entry of `key`; returns it.
    @discardableResult
    mutating func remove(_ key: String) -> Entry? {
        guard let slot = slots.removeValue(forKey: key) else { return nil }
        return unlink(slot)
    }

    /// Removes every entry.
    mutating func removeAll() {
        self = MemoryLRU()
    }

    /// Removes the entries for which `predicate` is true.
    mutating func removeAll(where predicate: (Entry) -> Bool) {
        let matching = slots.filter { predicate(nodes[$0.value]!.entry) }.map(\.key)
        for key in matching { remove(key) }
    }

    /// Removes least recently used entries until the costs sum to at most `capacity`.
    mutating func evict(toCost capacity: Int) {
        while totalCost > capacity, oldest >= 0 {
            let slot = oldest
            slots.removeValue(forKey: nodes[slot]!.key)
            unlink(slot)
        }
    }

    /// Takes the node at `slot` out of the list and frees its slot (the caller removed its key).
    @discardableResult
    private mutating func unlink(_ slot: Int) -> Entry {
        let node = nodes[slot]!
        if node.newer >= 0 { nodes[node.newer]!.older = node.older } else { newest = node.older }
        if node.older >= 0 { nodes[node.older]!.newer = node.newer } else { oldest = node.newer }
        nodes[slot] = nil
        freeSlots.append(slot)
        totalCost -= node.entry.cost
        return node.entry
    }

    private mutating func moveToNewest(_ slot: Int) {
        guard slot != newest else { return }
        let node = nodes[slot]!
        // Not the newest, so it has a newer neighbour.
        nodes[node.newer]!.older = node.older
        if node.older >= 0 { nodes[node.older]!.newer = node.newer } else { oldest = node.newer }
        nodes[slot]!.older = newest
        nodes[slot]!.newer = -1
        nodes[newest]!.newer = slot
        newest = slot
    }
}
