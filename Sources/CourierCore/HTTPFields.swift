/// An ordered list of HTTP fields (header or trailer lines), looked up by name without regard
/// to case.
///
/// Design note: the fields of a parsed message live as one byte array (the header section as
/// received) plus one array of offsets, so a response head costs two allocations however many
/// fields it has; strings are made only when a caller asks for one. Fields added by code are
/// appended to the same byte array. Removing a field drops its offsets and leaves its bytes.
public struct HTTPFields: Sendable, Equatable {
    /// Where one field's name and value sit in `storage`.
    public struct Location: Sendable, Equatable {
        @usableFromInline var nameStart: UInt32
        @usableFromInline var nameEnd: UInt32
        @usableFromInline var valueStart: UInt32
        @usableFromInline var valueEnd: UInt32

        /// Creates a location from byte offsets into the storage.
        @inlinable
        public init(name: Range<Int>, value: Range<Int>) {
            nameStart = UInt32(name.lowerBound)
            nameEnd = UInt32(name.upperBound)
            valueStart = UInt32(value.lowerBound)
            valueEnd = UInt32(value.upperBound)
        }

        /// Offsets of the name in the storage.
        public var name: Range<Int> { Int(nameStart)..<Int(nameEnd) }
        /// Offsets of the value in the storage.
        public var value: Range<Int> { Int(valueStart)..<Int(valueEnd) }
    }

    /// One field, as strings.
    public struct Field: Sendable, Hashable, CustomStringConvertible {
        public var name: String
        public var value: String

        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }

        public var description: String { "\(name): \(value)" }
    }

    @usableFromInline var storage: [UInt8]
    @usableFromInline var locations: [Location]
    /// Every name and value passed ``validate()`` (``validated()`` made this value) and no
    /// field was added since, so the check need not run again. Removing fields keeps it true.
    @usableFromInline var knownValid = false
    /// One bit for each name the fields hold (``nameBit(count:first:last:)``), set when a
    /// field is added and left set when one is removed: a lookup of a name whose bit is clear
    /// answers "none" without comparing a name. Most lookups of a response's fields are for
    /// names it does not have (Set-Cookie, Content-Encoding, Location, Retry-After).
    @usableFromInline var nameBits: UInt64 = 0

    /// An empty list.
    public init() {
        storage = []
        locations = []
    }

    /// Fields from name/value pairs, in order. Nothing is validated here; encoders validate.
    public init(_ fields: [(String, String)]) {
        self.init()
        for (name, value) in fields { append(name: name, value: value) }
    }

    /// Adopts bytes a parser has already validated, with the offsets of each field in them.
    ///
    /// - Warning: for parsers only. Nothing is checked: every location must lie inside
    ///   `storage`, and names and values must already satisfy RFC 9110.
    public init(validatedStorage storage: [UInt8], locations: [Location]) {
        self.storage = storage
        self.locations = locations
        nameBits = locations.reduce(0) { $0 | Self.nameBit(storage, $1) }
    }

    /// As ``init(validatedStorage:locations:)``, with the bits of the names already known: the
    /// union of ``nameBit(count:first:last:)`` over every name (a scanner that has them at
    /// hand computes them on its way).
    public init(validatedStorage storage: [UInt8], locations: [Location], nameBits: UInt64) {
        self.storage = storage
        self.locations = locations
        self.nameBits = nameBits
    }

    /// The bit of a name of `count` bytes whose first and last bytes are `first` and `last`,
    /// with 0x20 set in both: a name has the same bit whatever the case of its letters (the
    /// few other bytes this pairs up only cost a comparison).
    @inlinable
    public static func nameBit(count: Int, first: UInt8, last: UInt8) -> UInt64 {
        let mixed = UInt64(truncatingIfNeeded: count) &* 7 &+ UInt64(first | 0x20) &* 3 &+ UInt64(last | 0x20)
        return 1 << (mixed & 63)
    }

    /// The bit of the name at `location` in `storage`, read through the array's checked
    /// subscript: a location outside the storage traps here rather than reading past it.
    @inline(__always)
    static func nameBit(_ storage: [UInt8], _ location: Location) -> UInt64 {
        let start = Int(location.nameStart), end = Int(location.nameEnd)
        guard end > start else { return nameBit(count: 0, first: 0, last: 0) }
        return nameBit(count: end - start, first: storage[start], last: storage[end - 1])
    }

    /// The bit of `name`'s bytes.
    @inline(__always)
    static func nameBit(_ name: UnsafeBufferPointer<UInt8>) -> UInt64 {
        guard let first = name.first, let last = name.last else { return nameBit(count: 0, first: 0, last: 0) }
        return nameBit(count: name.count, first: first, last: last)
    }

    /// True when these fields come from ``validated()`` with no field added since: a set that
    /// many requests share as it is (the request builder's default fields). Removing a field
    /// keeps the mark (the fields stay valid), so a set made by removing fields from a shared
    /// one also counts as shared: no caller makes one today.
    public var isSharedValidated: Bool { knownValid }

    /// True when `other` is this very value: the same storage, not merely equal contents. A
    /// copy held somewhere keeps that storage from being changed in place (a change copies it
    /// first), so fields found identical to a held copy are the same fields.
    public func isIdentical(to other: HTTPFields) -> Bool {
        storage.withUnsafeBufferPointer { mine in
            other.storage.withUnsafeBufferPointer { mine.baseAddress == $0.baseAddress && mine.count == $0.count }
        } && locations.withUnsafeBufferPointer { mine in
            other.locations.withUnsafeBufferPointer { mine.baseAddress == $0.baseAddress && mine.count == $0.count }
        }
    }

    /// The number of fields.
    public var count: Int { locations.count }

    /// True when there are no fields.
    public var isEmpty: Bool { locations.isEmpty }

    /// The bytes of every name and value together: at least what the fields hold (removed
    /// fields may leave their bytes behind), for sizing an encoding up front.
    public var storageByteCount: Int { storage.count }

    /// The field at `index`, as strings.
    public subscript(index: Int) -> Field {
        let location = locations[index]
        return Field(name: string(location.name), value: string(location.value))
    }

    /// All fields, as strings, in order.
    public var fields: [Field] { (0..<count).map { self[$0] } }

    /// The value of the first field called `name` (any case), or nil.
    public func first(_ name: String) -> String? {
        guard let index = firstIndex(of: name) else { return nil }
        return string(locations[index].value)
    }

    /// Lends the bytes of the value of the first field called `name` (any case) to `body`; nil
    /// when there is no such field. No `String` is made.
    public func withFirstValue<R>(_ name: String, _ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R? {
        guard let index = firstIndex(of: name) else { return nil }
        let range = locations[index].value
        return try storage.withUnsafeBufferPointer { try body(UnsafeBufferPointer(rebasing: $0[range])) }
    }

    /// The values of every field called `name` (any case), in order.
    public func values(_ name: String) -> [String] {
        var name = name
        return name.withUTF8 { candidate in
            guard nameBits & Self.nameBit(candidate) != 0 else { return [] }
            return storage.withUnsafeBufferPointer { bytes in
                locations.filter { Self.nameMatches(bytes, $0, candidate) }.map { Self.string(bytes, $0.value) }
            }
        }
    }

    /// The values of every field called `name`, joined with ", " as RFC 9110 section 5.3
    /// allows for list-based fields; nil when there is none. The name and the storage are
    /// borrowed once for the scan, and no array is made: most names match once or not at all.
    public func combined(_ name: String) -> String? {
        var name = name
        return name.withUTF8 { candidate in
            guard nameBits & Self.nameBit(candidate) != 0 else { return nil }
            return storage.withUnsafeBufferPointer { bytes -> String? in
                var result: String?
                for location in locations where Self.nameMatches(bytes, location, candidate) {
                    let value = Self.string(bytes, location.value)
                    if result == nil {
                        result = value
                    } else {
                        result! += ", " + value
                    }
                }
                return result
            }
        }
    }

    /// True when a field called `name` is present.
    public func contains(_ name: String) -> Bool {
        firstIndex(of: name) != nil
    }

    /// The index of the first field called `name`, or nil.
    public func firstIndex(of name: String) -> Int? {
        // The name's bytes and the storage are borrowed once for the whole scan, not per field.
        var name = name
        return name.withUTF8 { candidate in
            guard nameBits & Self.nameBit(candidate) != 0 else { return nil }
            return storage.withUnsafeBufferPointer { bytes in
                locations.firstIndex { Self.nameMatches(bytes, $0, candidate) }
            }
        }
    }

    /// True when the name at `location` in `bytes` is `candidate`, ignoring ASCII case.
    @inline(__always)
    static func nameMatches(_ bytes: UnsafeBufferPointer<UInt8>, _ location: Location, _ candidate: UnsafeBufferPointer<UInt8>) -> Bool {
        let start = Int(location.nameStart)
        guard Int(location.nameEnd) - start == candidate.count else { return false }
        guard let name = bytes.baseAddress, let wanted = candidate.baseAddress else { return candidate.isEmpty }
        return HTTPFieldValidation.caseInsensitiveEquals(name + start, wanted, count: candidate.count)
    }

    /// Makes room for `fields` more fields holding `bytes` more bytes of names and values, so
    /// that appending them allocates nothing on the way.
    public mutating func reserveCapacity(fields: Int, bytes: Int) {
        storage.reserveCapacity(storage.count + bytes)
        locations.reserveCapacity(locations.count + fields)
    }

    /// Appends a field.
    public mutating func append(name: String, value: String) {
        knownValid = false
        let nameStart = storage.count
        Self.appendUTF8(of: name, to: &storage)
        let valueStart = storage.count
        Self.appendUTF8(of: value, to: &storage)
        let location = Location(name: nameStart..<valueStart, value: valueStart..<storage.count)
        locations.append(location)
        nameBits |= Self.nameBit(storage, location)
    }

    /// Appends a string's UTF-8 as one copy of contiguous bytes where it has them, rather than
    /// element by element through its UTF-8 view.
    @inline(__always)
    private static func appendUTF8(of string: String, to storage: inout [UInt8]) {
        let copied: Void? = string.utf8.withContiguousStorageIfAvailable { storage.append(contentsOf: $0) }
        if copied == nil { storage.append(contentsOf: string.utf8) }
    }

    /// Removes every field called `name`.
    public mutating func removeAll(named name: String) {
        let current = self
        locations.removeAll { current.nameMatches($0, name) }
    }

    /// Replaces every field called `name` with one holding `value`, at the first one's place
    /// (appended when there was none). A nil value removes them.
    public mutating func set(name: String, value: String?) {
        guard let value else {
            removeAll(named: name)
            return
        }
        let index = firstIndex(of: name)
        removeAll(named: name)
        append(name: name, value: value)
        if let index {
            let added = locations.removeLast()
            locations.insert(added, at: index)
        }
    }

    /// Lends the raw bytes of each field's name and value, in order; for encoders.
    public func forEachField(_ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) rethrows {
        try storage.withUnsafeBytes { bytes in
            for location in locations {
                try body(
                    UnsafeRawBufferPointer(rebasing: bytes[location.name]),
                    UnsafeRawBufferPointer(rebasing: bytes[location.value])
                )
            }
        }
    }

    /// True when the field at `index` has the name `name` (any case).
    public func name(at index: Int, is name: String) -> Bool {
        nameMatches(locations[index], name)
    }

    /// The value of the field at `index`.
    public func value(at index: Int) -> String {
        string(locations[index].value)
    }

    /// The name of the field at `index`, as received.
    public func name(at index: Int) -> String {
        string(locations[index].name)
    }

    public static func == (lhs: HTTPFields, rhs: HTTPFields) -> Bool {
        guard lhs.count == rhs.count else { return false }
        for index in 0..<lhs.count {
            let l = lhs.locations[index], r = rhs.locations[index]
            guard lhs.storage[l.name] == rhs.storage[r.name], lhs.storage[l.value] == rhs.storage[r.value] else {
                return false
            }
        }
        return true
    }

    @usableFromInline
    func nameMatches(_ location: Location, _ name: String) -> Bool {
        var name = name
        return name.withUTF8 { candidate in
            storage.withUnsafeBufferPointer { Self.nameMatches($0, location, candidate) }
        }
    }

    private func string(_ range: Range<Int>) -> String {
        storage.withUnsafeBufferPointer { Self.string($0, range) }
    }

    private static func string(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> String {
        String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self)
    }
}

extension HTTPFields: CustomStringConvertible {
    public var description: String { fields.map(\.description).joined(separator: "\n") }
}

extension HTTPFields: ExpressibleByDictionaryLiteral {
    public init(dictionaryLiteral elements: (String, String)...) {
        self.init(elements)
    }
}
