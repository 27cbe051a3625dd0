// What the workload clients (courier-bench, foundation-bench, ahc-bench) and parser-bench
// share: the loops that drive W1, W2 and W4 over a client's own fetch call, and the timing
// and JSON output every client prints the same way.

import Foundation

/// Seconds in `duration`, as a Double.
public func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

/// Prints `fields` as one JSON object on one line, keys sorted.
public func emit(_ fields: [String: Any]) {
    let data = (try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])) ?? Data()
    print(String(decoding: data, as: UTF8.self))
}

/// What a run of loads did.
public struct Tally: Sendable {
    public var completed = 0
    public var errors = 0
    public var bytes = 0
    public var seconds = 0.0

    /// The fields every client prints: requests (succeeded), seconds, bytes, errors.
    public var fields: [String: Any] {
        ["requests": completed - errors, "seconds": seconds, "bytes": bytes, "errors": errors]
    }
}

/// W1 and W4: `count` loads one after the other. `fetch` returns the body's size.
public func sequentialLoads(_ count: Int, _ fetch: () async throws -> Int) async -> Tally {
    var tally = Tally()
    let start = ContinuousClock.now
    for _ in 0..<count {
        do { tally.bytes += try await fetch() } catch { tally.errors += 1 }
        tally.completed += 1
    }
    tally.seconds = seconds(ContinuousClock.now - start)
    return tally
}

/// W2: `count` loads with `concurrency` in flight, in a task group.
public func concurrentLoads(_ count: Int, concurrency: Int, _ fetch: @escaping @Sendable () async throws -> Int) async -> Tally {
    let start = ContinuousClock.now
    var tally = await withTaskGroup(of: (Int, Int).self) { group -> Tally in
        var tally = Tally()
        var launched = 0
        func launch() {
            launched += 1
            group.addTask {
                do { return (try await fetch(), 0) } catch { return (0, 1) }
            }
        }
        while launched < min(concurrency, count) { launch() }
        for await (size, failed) in group {
            tally.completed += 1
            tally.bytes += size
            tally.errors += failed
            if launched < count { launch() }
        }
        return tally
    }
    tally.seconds = seconds(ContinuousClock.now - start)
    return tally
}
