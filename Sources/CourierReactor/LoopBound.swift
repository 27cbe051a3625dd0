/// Carries a value that is not Sendable from its event loop to work that will run on the same
/// loop; unwrapping elsewhere is a programming error caught in debug builds.
public struct LoopBound<Value>: @unchecked Sendable {
    public let loop: EventLoop
    private let stored: Value

    public init(_ value: Value, loop: EventLoop) {
        self.loop = loop
        self.stored = value
    }

    /// The value; on its loop only.
    public var value: Value {
        loop.assertInEventLoop()
        return stored
    }
}
