import CCourierLinux
import CourierSync

/// A fixed set of event loops sharing the work of a process.
public final class EventLoopGroup: Sendable {
    public let loops: [EventLoop]
    private let nextIndex = Atomic<Int>(0)

    /// A group of `count` loops (by default one per CPU the process may run on: its affinity
    /// mask, so a process pinned to one core runs one loop).
    public init(loopCount count: Int = Int(courier_available_cpus()), name: String = "courier-loop") throws(SystemError) {
        var loops: [EventLoop] = []
        for index in 0..<max(count, 1) { loops.append(try EventLoop(index: index, name: name)) }
        self.loops = loops
    }

    /// The process-wide group every session uses unless told otherwise, started on first use.
    /// Starting can fail when the process has no file descriptor left (an epoll instance and
    /// an eventfd per loop): the error is thrown, and a later call tries again.
    public static func shared() throws(SystemError) -> EventLoopGroup {
        try sharedGroup.withLock { group throws(SystemError) -> EventLoopGroup in
            if let group { return group }
            let made = try EventLoopGroup()
            group = made
            return made
        }
    }

    private static let sharedGroup = Mutex<EventLoopGroup?>(nil)

    /// The next loop, round robin.
    public func next() -> EventLoop {
        let index = nextIndex.add(1, ordering: .relaxed).oldValue
        return loops[index % loops.count]
    }

    /// The loop of the calling thread when it is one of ours, else the next one.
    public func currentOrNext() -> EventLoop {
        loops.first { $0.inEventLoop } ?? next()
    }

    /// Stops every loop.
    public func shutdown() {
        for loop in loops { loop.shutdown() }
    }
}
