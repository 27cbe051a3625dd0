import Foundation

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
