/// The actions of one pool event, in order.
///
/// A request's events give one or two actions (an idle connection leased: cancel its idle
/// timer, execute; a connection released: schedule its idle timer), so the first two are held
/// inline and only a longer answer (shutdown, many waiters failed at once) uses an array. An
/// array for every answer was two heap allocations a request.
@frozen
public struct PoolActions<DialError: Error & Sendable & Equatable>: RandomAccessCollection, Sendable, Equatable, ExpressibleByArrayLiteral, CustomStringConvertible {
    public typealias Element = PoolAction<DialError>

    // Filled in order: `second` only when `first` is set, `overflow` only when both are.
    // Equality compares these, so one list of actions has one representation.
    @usableFromInline var first: Element?
    @usableFromInline var second: Element?
    @usableFromInline var overflow: [Element] = []

    @inlinable
    public init() {}

    @inlinable
    public init(arrayLiteral elements: Element...) {
        self.init(elements)
    }

    @inlinable
    public init<S: Sequence>(_ elements: S) where S.Element == Element {
        append(contentsOf: elements)
    }

    @inlinable
    public var startIndex: Int { 0 }

    @inlinable
    public var endIndex: Int {
        guard first != nil else { return 0 }
        return second == nil ? 1 : 2 + overflow.count
    }

    @inlinable
    public subscript(position: Int) -> Element {
        switch position {
        case 0: return first!
        case 1: return second!
        default: return overflow[position - 2]
        }
    }

    @inlinable
    public mutating func append(_ action: Element) {
        if first == nil {
            first = action
        } else if second == nil {
            second = action
        } else {
            overflow.append(action)
        }
    }

    @inlinable
    public mutating func append<S: Sequence>(contentsOf actions: S) where S.Element == Element {
        for action in actions { append(action) }
    }

    /// Puts `action` before the others.
    @inlinable
    public mutating func prepend(_ action: Element) {
        var shifted = PoolActions(CollectionOfOne(action))
        shifted.append(contentsOf: self)
        self = shifted
    }

    @inlinable
    public static func + (lhs: Self, rhs: Self) -> Self {
        var joined = lhs
        joined.append(contentsOf: rhs)
        return joined
    }

    @inlinable
    public static func += (lhs: inout Self, rhs: Self) {
        lhs.append(contentsOf: rhs)
    }

    public var description: String { "\(Array(self))" }
}
