import CourierSync
import Dispatch
import Testing

/// CourierSync's `Mutex`, the lock of every Courier module: it excludes, hands back what its
/// body returns, and gives the lock up when the body throws. (That ThreadSanitizer sees it is
/// shown by `scripts/sanitize.sh thread`: with Synchronization's own Mutex, the event loop's
/// inbox alone gave ten reports in `EventLoopTests`.)
@Suite("MutexTests")
struct MutexTests {
    private struct Refusal: Error, Equatable {
        let value: Int
    }

    @Test("increments from eight threads at once all count: the lock excludes")
    func excludes() {
        let counter = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<20_000 {
                counter.withLock { $0 += 1 }
            }
        }
        #expect(counter.withLock { $0 } == 160_000)
    }

    @Test("the body's result comes back, and a typed error thrown under the lock leaves it free")
    func resultsAndErrors() throws {
        let state = Mutex([Int]())
        let count = state.withLock { value -> Int in
            value.append(1)
            return value.count
        }
        #expect(count == 1)
        #expect(throws: Refusal(value: 7)) {
            try state.withLock { (value: inout [Int]) throws(Refusal) -> Void in
                value.append(2)
                throw Refusal(value: 7)
            }
        }
        // Free again, with the write made before the throw kept.
        #expect(state.withLock { $0 } == [1, 2])
    }
}
