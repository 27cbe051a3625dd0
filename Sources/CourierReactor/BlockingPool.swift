import DequeModule
import Synchronization
import Foundation

/// A few threads for work that blocks (name resolution, reading a user's stream or a file),
/// so event loops never do.
public final class BlockingPool: @unchecked Sendable {
    private let condition = NSCondition()
    /// Work waiting for a thread; guarded by `condition`.
    private var queue = Deque<@Sendable () -> Void>()
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
        queue.append(work)
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
            work()
        }
    }
}

/// Jobs run one after another, in the order given, on a ``BlockingPool``: the first job to
/// arrive submits a drain that runs until none is left, so no thread is held while idle and
/// no second thread ever runs the same series (a download's writes, say).
public final class SerialWork: Sendable {
    private struct Queue {
        var jobs = Deque<@Sendable () -> Void>()
        var draining = false
    }

    private let queue = Mutex(Queue())
    private let pool: BlockingPool

    public init(pool: BlockingPool = .shared) {
        self.pool = pool
    }

    /// Runs `job` after every job given before it.
    public func async(_ job: @escaping @Sendable () -> Void) {
        let startDrain = queue.withLock { queue -> Bool in
            queue.jobs.append(job)
            guard !queue.draining else { return false }
            queue.draining = true
            return true
        }
        if startDrain { pool.submit { [self] in drain() } }
    }

    private func drain() {
        while let job = queue.withLock({ queue -> (@Sendable () -> Void)? in
            guard !queue.jobs.isEmpty else {
                queue.draining = false
                return nil
            }
            return queue.jobs.removeFirst()
        }) {
            job()
        }
    }
}
