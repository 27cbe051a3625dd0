import CourierCore
import CourierSync
import Foundation
import Logging

/// The disk side of a ``URLCache``: the work its writer queue does, and opening the store.
extension URLCache {
    // MARK: Disk work (on the writer queue)

    /// Work a store queues.
    enum DiskJob {
        case write(generation: UInt64)
        case delete(generation: UInt64)
    }

    /// Queues `work` on the writer queue, counted for ``flush()``.
    func enqueue(_ work: @escaping @Sendable () -> Void) {
        _ = queuedJobs.add(1, ordering: .relaxed)
        writer.async { [self] in
            work()
            _ = self.queuedJobs.subtract(1, ordering: .releasing)
        }
    }

    /// Writes an entry, creating the store when needed.
    func writeToDisk(_ cachedResponse: CachedURLResponse, key: String, cost: Int) {
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
    func deleteFromDisk(key: String) {
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
    func removeRow(_ id: Int64) {
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
    func touch(_ key: String, at time: Date) {
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
    func finishPending(_ key: String, generation: UInt64) {
        state.withLock { state in
            if state.pending[key]?.generation == generation { state.pending[key] = nil }
        }
    }

    // MARK: Opening the disk store

    /// The two connections to an open store.
    struct Databases: Sendable {
        /// For lookups, under the disk lock.
        let reader: CacheDatabase
        /// For the writer queue alone.
        let writer: CacheDatabase
    }

    /// The disk store, opened on first use.
    enum DiskBacking {
        case unopened
        case open(Databases)
        /// It could not be opened, or is damaged: memory only from now on.
        case unavailable
    }

    /// What the disk lock guards.
    struct DiskState {
        /// Nil for a cache that never uses a disk.
        var directory: URL?
        var backing = DiskBacking.unopened
    }

    /// The open store; opens it when needed: always when `create`, else only when its file
    /// exists (a lookup or deletion in a store never written needs no directory). Nil when
    /// there is no store, or it cannot be opened (logged once; the cache then keeps to memory).
    func openedDatabases(create: Bool) -> Databases? {
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
    func diskFailed(_ error: any Error, while action: String) {
        if let failure = error as? SQLiteError, failure.isCorruption {
            disk.withLock { $0.backing = .unavailable }
            state.withLock { $0.diskPossible = false }
            logger.warning("URLCache: the disk cache is damaged (\(failure)); responses are cached in memory only.")
        } else {
            logger.warning("URLCache: cannot \(action) the disk cache (\(error)).")
        }
    }

}
