import CourierReactor
import CourierSync
import CourierTransport
import Foundation
import Histogram

/// What one worker counted. Latencies are in nanoseconds, from each request's intended start
/// (with a rate, `-R`) or from the moment it was sent.
struct LoadStats: Sendable {
    var latencies = Histogram<UInt64>(highestTrackableValue: 3_600_000_000_000, numberOfSignificantValueDigits: .three)
    /// Requests sent (or queued for a connection).
    var started = 0
    /// Responses received in full, whatever their status.
    var completed = 0
    /// Response body bytes.
    var bytes: Int64 = 0
    /// Failed requests by kind, in wrk's terms: connect, read, write, timeout, other.
    var errors: [String: Int] = [:]
    /// Final responses by status class (index 1 for 1xx … 5 for 5xx).
    var statusClasses = [Int](repeating: 0, count: 6)
    /// Connections seen (local ports) or opened.
    var localPorts: Set<UInt16> = []
    var connectionsOpened = 0
    var protocols: Set<String> = []

    /// The last port and protocol noted, which a run on few connections repeats for nearly
    /// every request: compared before the sets are touched, which hash what they are given.
    private var lastPort: UInt16?
    private var lastProtocol: String?

    var failed: Int { errors.values.reduce(0, +) }

    mutating func noteLocalPort(_ port: UInt16) {
        guard port != lastPort else { return }
        lastPort = port
        localPorts.insert(port)
    }

    mutating func noteProtocol(_ name: String) {
        guard name != lastProtocol else { return }
        lastProtocol = name
        protocols.insert(name)
    }

    mutating func record(latencyFrom start: MonotonicInstant, to end: MonotonicInstant) {
        let nanoseconds = UInt64(max(0, end.nanoseconds &- start.nanoseconds))
        _ = latencies.record(min(nanoseconds, latencies.highestTrackableValue))
    }

    mutating func recordStatus(_ status: Int) {
        let index = status / 100
        if index >= 1 && index <= 5 { statusClasses[index] += 1 }
    }

    mutating func add(_ other: LoadStats) {
        latencies.add(other.latencies)
        started += other.started
        completed += other.completed
        bytes += other.bytes
        for (kind, count) in other.errors { errors[kind, default: 0] += count }
        for index in statusClasses.indices { statusClasses[index] += other.statusClasses[index] }
        localPorts.formUnion(other.localPorts)
        connectionsOpened += other.connectionsOpened
        protocols.formUnion(other.protocols)
    }

    /// wrk's error kinds for a transport failure.
    static func kind(_ error: TransportError) -> String {
        switch error {
        case .dial: return "connect"
        case .timedOut: return "timeout"
        case .connectionLost, .remoteProtocol: return "read"
        case .localProtocol, .bodyStream: return "write"
        case .cancelled, .shutDown: return "other"
        }
    }
}

/// How many requests to make: a total, until a deadline, or both (whichever ends first).
final class Plan: Sendable {
    let total: Int?
    let deadline: MonotonicInstant?
    private let issued = Atomic<Int>(0)

    init(total: Int?, deadline: MonotonicInstant?) {
        self.total = total
        self.deadline = deadline
    }

    /// Claims the right to start one more request.
    func claim() -> Bool {
        if let deadline, MonotonicInstant.now >= deadline { return false }
        guard let total else { return true }
        return issued.add(1, ordering: .relaxed).newValue <= total
    }
}

/// When each request of a rate-limited worker should start (`-R`, as wrk2 does): one every
/// `interval`, whether or not the previous one was answered, so that a stall shows in the
/// latencies of the requests it held back (coordinated omission corrected). Without a rate,
/// every request is due at once.
struct Pacer: Sendable {
    let interval: Duration?
    private(set) var next: MonotonicInstant

    init(interval: Duration?, start: MonotonicInstant) {
        self.interval = interval
        self.next = start
    }

    /// The intended start of the next request when it is due by `now` (and moves on to the
    /// one after it); nil when it is not due yet (wait until ``next``).
    mutating func take(now: MonotonicInstant) -> MonotonicInstant? {
        guard let interval else { return now }
        guard next <= now else { return nil }
        defer { next += interval }
        return next
    }
}

/// One connection's share of the load.
protocol LoadWorker: AnyObject, Sendable {
    func start()
    /// A copy of what it counted so far (consistent: taken under its lock).
    func snapshot() -> LoadStats
}

extension Duration {
    /// The whole nanoseconds, for histograms and dispatch deadlines.
    var nanoseconds: Int {
        Int(components.seconds) * 1_000_000_000 + Int(components.attoseconds / 1_000_000_000)
    }
}
