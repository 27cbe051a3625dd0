import DequeModule
import Foundation

/// A few threads for work that blocks (name resolution, reading a user's stream or a file),
/// so event loops never do.
public final class BlockingPool: @unchecked Sendable {
    private let condition = NSCondition()
    /// Work waiting for a thread; guarded by `condition`. Each closure is held in a struct:
    /// a bare closure in a generic container is wrapped in a thunk (an allocation) on the way
    /// in and again on the way out.
    private var queue = Deque<Work>()
    /// Threads started so far; guarded by `condition`.
    private var threads = 0
    /// Threads waiting for work; guarded by `condition`.
    private var idle = 0
    private let maxThreads: Int
    private let name: String

    /// A pool that grows on demand up to `maxThreads` threads.
    public init(maxThreads: Int = 8, name: String = "courier-blocking") {
        self.maxThreads = maxThreads
        self.name = name
    }

    /// The pool shared by every session.
    public static let shared = BlockingPool()

    /// Runs `work` on a pool thread.
    public func submit(_ work: @escaping @Sendable () -> Void) {
        condition.lock()
        queue.append(Work(run: work))
        // Idle threads only count down once they wake: compare with the work queued, so two
        // submissions in a row never both wait for the one thread that is idle.
        let startThread = queue.count > idle && threads < maxThreads
        if startThread { threads += 1 }
        condition.signal()
        let index = threads
        condition.unlock()
        if startThread {
            let thread = Thread { [self] in workLoop() }
            thread.name = "\(name)-\(index)"
            thread.start()
        }
    }

    private func workLoop() {
        while true {
            condition.lock()
            while queue.isEmpty {
                idle += 1
                condition.wait()
                idle -= 1
            }
            let work = queue.removeFirst()
            condition.unlock()
            work.run()
        }
    }

    private struct Work {
        let run: @Sendable () -> Void
    }
}
