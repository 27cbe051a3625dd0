/// Objects by a positive integer identifier, kept in slots of one array instead of a
/// `Dictionary`: HTTP/2 streams by stream id, a session's tasks by task identifier.
///
/// An identifier's home slot is its Fibonacci hash: the identifier divided by the step its
/// kind rises by (2 for a client's odd stream ids, 1 for task identifiers), times 2^64 / φ,
/// keeping the top bits. One multiplication, and identifiers handed out in rising order spread
/// evenly over the slots however many stay live (a block of old, long-lived ones does not sit
/// in the slots the next ones want, as it would with the identifier itself as the slot). A
/// taken slot sends an identifier to the next free one (linear probing); a removal moves later
/// entries of the same run back, so that no lookup meets a gap before its key; the table keeps
/// at least twice as many slots as entries.
///
/// A `Dictionary` hashed each identifier with SipHash on every lookup, insertion and removal:
/// a request over HTTP/2 made about a dozen such operations across the session and the
/// connection, and every task two in the session's registry. The pool's `IdentifierMap` (a
/// sorted array) would shift its entries on every removal, and streams and tasks end in any
/// order, hundreds or thousands live at a time. Iteration is in the slots' order, as arbitrary
/// as a dictionary's.
public struct SlotTable<Key: FixedWidthInteger & Sendable, Value: AnyObject>: Sequence {
    @usableFromInline
    struct Slot {
        /// 0 for an empty slot: identifiers are positive.
        @usableFromInline var id: Key
        @usableFromInline var value: Value?

        @inlinable
        init(id: Key, value: Value?) {
            self.id = id
            self.value = value
        }
    }

    @usableFromInline var slots: [Slot]
    /// `slots.count - 1`; the count is a power of two.
    @usableFromInline var mask: Int
    /// 64 - log2(slots.count): how far a hash moves down to become a slot.
    @usableFromInline var hashShift: Int
    /// log2 of the step identifiers rise by.
    @usableFromInline let shift: Int
    @usableFromInline var entries: Int

    /// Entries in the table.
    @inlinable
    public var count: Int { entries }

    /// A table for identifiers that rise by `step` (a power of two), with `capacity` slots at
    /// first (rounded up to a power of two, at least 8).
    @inlinable
    public init(step: Int = 1, capacity: Int = 16) {
        precondition(step > 0 && step & (step - 1) == 0, "the step is a power of two")
        var size = 8
        while size < capacity { size <<= 1 }
        slots = Array(repeating: Slot(id: 0, value: nil), count: size)
        mask = size - 1
        hashShift = 64 - size.trailingZeroBitCount
        shift = step.trailingZeroBitCount
        entries = 0
    }

    @inlinable
    public var isEmpty: Bool { entries == 0 }

    /// The identifiers in the table, in no particular order.
    @inlinable
    public var keys: [Key] {
        var keys: [Key] = []
        keys.reserveCapacity(entries)
        for slot in slots where slot.id != 0 { keys.append(slot.id) }
        return keys
    }

    /// The objects in the table, in no particular order.
    @inlinable
    public var values: [Value] {
        var values: [Value] = []
        values.reserveCapacity(entries)
        for slot in slots where slot.id != 0 {
            if let value = slot.value { values.append(value) }
        }
        return values
    }

    /// The slot `id` belongs in.
    @inlinable @inline(__always)
    func home(_ id: Key) -> Int {
        let hash = UInt64(truncatingIfNeeded: id >> shift) &* 0x9E37_79B9_7F4A_7C15
        return Int(truncatingIfNeeded: hash >> UInt64(hashShift))
    }

    /// The slot holding `id`, or nil.
    @inlinable
    func index(of id: Key) -> Int? {
        guard id > 0 else { return nil }
        var index = home(id)
        while true {
            let found = slots[index].id
            if found == id { return index }
            if found == 0 { return nil }
            index = (index + 1) & mask
        }
    }

    /// The object for `id`; setting nil removes it. Identifiers are positive: 0 and negative
    /// ones are never present, and storing under one traps.
    @inlinable
    public subscript(id: Key) -> Value? {
        get {
            guard let index = index(of: id) else { return nil }
            return slots[index].value
        }
        set {
            if let newValue {
                insert(newValue, for: id)
            } else {
                removeValue(forKey: id)
            }
        }
    }

    @inlinable
    mutating func insert(_ value: Value, for id: Key) {
        precondition(id > 0, "identifiers are positive")
        if let index = index(of: id) {
            slots[index].value = value
            return
        }
        if (entries + 1) * 2 > slots.count { grow() }
        var index = home(id)
        while slots[index].id != 0 { index = (index + 1) & mask }
        slots[index] = Slot(id: id, value: value)
        entries += 1
    }

    /// Removes `id` and returns its object, or nil when it was not present.
    @inlinable @discardableResult
    public mutating func removeValue(forKey id: Key) -> Value? {
        guard var hole = index(of: id) else { return nil }
        let removed = slots[hole].value
        slots[hole] = Slot(id: 0, value: nil)
        entries -= 1
        // Entries after the hole in the same run move back into it when the hole lies on
        // their way from their home slot; the run ends at the first empty slot.
        var next = (hole + 1) & mask
        while slots[next].id != 0 {
            let wanted = home(slots[next].id)
            // Whether `wanted` lies cyclically in (hole, next]: if so the entry is reachable
            // where it is and stays.
            let reachable = hole <= next ? (hole < wanted && wanted <= next) : (hole < wanted || wanted <= next)
            if !reachable {
                slots[hole] = slots[next]
                slots[next] = Slot(id: 0, value: nil)
                hole = next
            }
            next = (next + 1) & mask
        }
        return removed
    }

    @inlinable
    mutating func grow() {
        let old = slots
        slots = Array(repeating: Slot(id: 0, value: nil), count: old.count * 2)
        mask = slots.count - 1
        hashShift -= 1
        for slot in old where slot.id != 0 {
            var index = home(slot.id)
            while slots[index].id != 0 { index = (index + 1) & mask }
            slots[index] = slot
        }
    }

    /// How many slots past its home slot `id` sits; nil when absent. For tests.
    func probeLength(of id: Key) -> Int? {
        guard let index = index(of: id) else { return nil }
        return (index - home(id)) & mask
    }

    public struct Iterator: IteratorProtocol {
        @usableFromInline let slots: [Slot]
        @usableFromInline var index = 0

        @inlinable
        init(slots: [Slot]) {
            self.slots = slots
        }

        @inlinable
        public mutating func next() -> (key: Key, value: Value)? {
            while index < slots.count {
                let slot = slots[index]
                index += 1
                if slot.id != 0, let value = slot.value { return (slot.id, value) }
            }
            return nil
        }
    }

    /// The entries as they stand now: changes made while iterating are not seen.
    @inlinable
    public func makeIterator() -> Iterator { Iterator(slots: slots) }
}

extension SlotTable.Slot: Sendable where Value: Sendable {}
extension SlotTable: Sendable where Value: Sendable {}
