/// SplitMix64: a small, seedable generator that gives the same sequence on every platform, so
/// random tests repeat exactly from their seed.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    public var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A number in `0..<bound`.
    public mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
    /// A number in `range`.
    public mutating func inRange(_ range: ClosedRange<Int>) -> Int { range.lowerBound + below(range.count) }
    /// True `percent` times in a hundred.
    public mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
    /// One of `elements`.
    public mutating func pick<T>(_ elements: [T]) -> T { elements[below(elements.count)] }
}
