/// A map from a pool's identifiers to values: the entries in one array, sorted by key.
///
/// A pool's identifiers are small integers handed out in increasing order, and a pool holds few
/// of them at a time (its connections, the requests waiting for one). Every request looks some
/// up several times; a `Dictionary` hashed each key with SipHash, about 200 instructions a
/// lookup, where a binary search over a few sorted integers costs a tenth of that. A new key is
/// normally the largest and is appended.
///
/// The keys being distinct integers also bounds where a key can be: no lower than its distance
/// below the last key allows, no higher than its distance above the first. While no key is
/// missing in between (a pool's connections, which seldom close), both bounds are the key's
/// index and a lookup makes no search; every gap widens the range by one.
///
/// Iteration is in key order.
public struct IdentifierMap<Key: PoolIdentifier, Value: Sendable>: Sendable, Sequence {
    public typealias Element = (key: Key, value: Value)

    @usableFromInline var entries: [Element] = []

    @inlinable
    public init() {}

    @inlinable
    public var count: Int { entries.count }

    @inlinable
    public var isEmpty: Bool { entries.isEmpty }

    /// The values, in key order.
    @inlinable
    public var values: LazyMapSequence<[Element], Value> { entries.lazy.map(\.value) }

    @inlinable
    public func makeIterator() -> IndexingIterator<[Element]> { entries.makeIterator() }

    /// Where `key` is, or where it would go.
    @inlinable
    func position(of key: Key) -> (index: Int, found: Bool) {
        // The newest key is the likeliest, and goes at the end.
        guard let last = entries.last else { return (0, false) }
        if last.key == key { return (entries.count - 1, true) }
        if last.key < key { return (entries.count, false) }
        // entries[i].key is at least the first key + i and at most the last key - (count - 1 - i).
        let count = entries.count
        var low = Swift.max(0, count - 1 - (last.key.rawValue - key.rawValue))
        var high = Swift.min(count - 1, Swift.max(0, key.rawValue - entries[0].key.rawValue))
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].key < key { low = middle + 1 } else { high = middle }
        }
        return (low, entries[low].key == key)
    }

    /// The value for `key`; setting nil removes it.
    @inlinable
    public subscript(key: Key) -> Value? {
        get {
            let (index, found) = position(of: key)
            return found ? entries[index].value : nil
        }
        set {
            let (index, found) = position(of: key)
            switch (newValue, found) {
            case (let value?, true): entries[index].value = value
            case (let value?, false) where index == entries.count: entries.append((key, value))
            case (let value?, false): entries.insert((key, value), at: index)
            case (nil, true): entries.remove(at: index)
            case (nil, false): break
            }
        }
    }

    /// Removes `key`, returning its value.
    @inlinable
    @discardableResult
    public mutating func removeValue(forKey key: Key) -> Value? {
        let (index, found) = position(of: key)
        return found ? entries.remove(at: index).value : nil
    }

    @inlinable
    public mutating func removeAll() {
        entries.removeAll()
    }
}
