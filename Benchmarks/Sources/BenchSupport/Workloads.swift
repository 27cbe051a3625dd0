// What the workload clients (courier-bench, foundation-bench, ahc-bench, hop-floor) and
// parser-bench share: the loops that drive W1, W2 and W4 over a client's own fetch call, and
// the timing and JSON output every client prints the same way.

import Foundation
import Synchronization

/// Seconds in `duration`, as a Double.
public func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

/// Prints `fields` as one JSON object on one line, keys sorted.
///
/// Written here rather than with JSONSerialization: that pulls in enough of Foundation to add
/// 4–5 MB to the peak RSS of the process at its very end (a Foundation program of a few lines
/// goes from 18 to 23 MB), and the harness reports that peak as the client's.
public func emit(_ fields: [String: Any]) {
    print(json(fields))
}

/// `value` as JSON: numbers, strings, booleans, and objects and arrays of them.
func json(_ value: Any) -> String {
    switch value {
    case let object as [String: Any]:
        return "{" + object.keys.sorted().map { json($0) + ":" + json(object[$0]!) }.joined(separator: ",") + "}"
    case let array as [Any]:
        return "[" + array.map(json).joined(separator: ",") + "]"
    case let flag as Bool:
        return flag ? "true" : "false"
    case let number as Int:
        return String(number)
    case let number as Int64:
        return String(number)
    case let number as UInt64:
        return String(number)
    case let number as Double:
        return number.isFinite ? "\(number)" : "null"
    case let text as String:
        var escaped = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": escaped += "\\\""
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            case "\r": escaped += "\\r"
            case "\t": escaped += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    escaped += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    escaped.unicodeScalars.append(scalar)
                }
            }
        }
        return escaped + "\""
    default:
        return json(String(describing: value))
    }
}

/// What a run of loads did.
public struct Tally: Sendable {
    public var completed = 0
    public var errors = 0
    public var bytes = 0
    public var seconds = 0.0

    public init() {}

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

/// W2: `count` loads with `concurrency` in flight, made by `concurrency` workers (child tasks)
/// that each load one request after another until `count` have been started: the shape of
/// Go's W2 workers and of wrk's connections, so that the harness adds no task a request.
public func concurrentLoads(_ count: Int, concurrency: Int, _ fetch: @escaping @Sendable () async throws -> Int) async -> Tally {
    let tickets = Tickets(count)
    let start = ContinuousClock.now
    var tally = await withTaskGroup(of: Tally.self) { group -> Tally in
        for _ in 0..<min(concurrency, count) {
            group.addTask {
                var tally = Tally()
                while tickets.take() {
                    do { tally.bytes += try await fetch() } catch { tally.errors += 1 }
                    tally.completed += 1
                }
                return tally
            }
        }
        var total = Tally()
        for await part in group {
            total.completed += part.completed
            total.bytes += part.bytes
            total.errors += part.errors
        }
        return total
    }
    tally.seconds = seconds(ContinuousClock.now - start)
    return tally
}

/// W2T: `count` loads with `concurrency` in flight, each in a child task of its own (a task
/// group that starts the next load as one finishes): W2's shape until 2026-12-07. The task a
/// load, and the group's wake-up as each one ends, are the harness's cost on top of the client's.
public func loadsInChildTasks(_ count: Int, concurrency: Int, _ fetch: @escaping @Sendable () async throws -> Int) async -> Tally {
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

/// The loads W2's workers may still start, handed out one at a time.
final class Tickets: Sendable {
    private let left: Atomic<Int>

    init(_ count: Int) { left = Atomic(count) }

    /// Takes one; false once all `count` are taken.
    func take() -> Bool {
        left.subtract(1, ordering: .relaxed).newValue >= 0
    }
}
