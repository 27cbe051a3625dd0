import ArgumentParser
import CourierCore
import CourierTLS
import CourierTransport
import Dispatch
import Foundation
import Histogram
import Synchronization

/// `courier-load`: an HTTP load generator on Courier's own transport, in the manner of wrk and
/// h2load. Each of `-c` connections is its own pool of one connection that keeps `-m` requests
/// in flight (HTTP/2 streams; always one for HTTP/1.1); a completed request starts the next one
/// on the event loop, with no task hops in between.
@main
struct CourierLoad: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "courier-load",
        abstract: "Load-test a URL with Courier's transport (HTTP/1.1, or HTTP/2 by ALPN or prior knowledge)."
    )

    @Option(name: .customShort("n"), help: "Total requests (default: run for -d seconds).")
    var requests: Int?

    @Option(name: .customShort("d"), help: "Duration in seconds (default 10 when -n is not given).")
    var duration: Double?

    @Option(name: .customShort("c"), help: "Connections.")
    var connections = 1

    @Option(name: .customShort("m"), help: "Concurrent streams per connection (HTTP/2).")
    var streams = 1

    @Flag(help: "Speak HTTP/2 on cleartext connections without negotiation (h2c prior knowledge).")
    var h2c = false

    @Flag(help: "Offer only http/1.1 in ALPN on TLS connections.")
    var http1 = false

    @Option(name: .customShort("X"), help: "Method.")
    var method = "GET"

    @Option(name: .customShort("H"), help: "A header, \"Name: value\". Repeatable.")
    var headers: [String] = []

    @Option(help: "Request body; @FILE reads a file.")
    var data: String?

    @Option(help: "Trust the CA certificates in this PEM file.")
    var cacert: String?

    @Flag(name: .customShort("k"), help: "Accept any server certificate.")
    var insecure = false

    @Flag(help: "Print the results as JSON.")
    var json = false

    @Argument(help: "The URL.")
    var url: String

    mutating func run() throws {
        guard let parsed = URL(string: url), let scheme = parsed.scheme.flatMap(Origin.Scheme.init(rawValue:)), let host = parsed.host() else {
            throw ValidationError("not an http(s) URL: \(url)")
        }
        let origin = Origin(scheme: scheme, host: host, port: parsed.port.flatMap(UInt16.init(exactly:)))
        var fields = HTTPFields([("User-Agent", "courier-load/\(version)"), ("Accept", "*/*")])
        for header in headers {
            guard let colon = header.firstIndex(of: ":") else { throw ValidationError("bad header: \(header)") }
            fields.append(name: header[..<colon].trimmingCharacters(in: .whitespaces), value: header[header.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        var target = parsed.path(percentEncoded: true)
        if target.isEmpty { target = "/" }
        if let query = parsed.query(percentEncoded: true) { target += "?" + query }
        var body = RequestBody.empty
        if let data {
            if data.hasPrefix("@") {
                guard let bytes = FileManager.default.contents(atPath: String(data.dropFirst())) else { throw ValidationError("cannot read \(data)") }
                body = .bytes(bytes)
            } else {
                body = .bytes(Data(data.utf8))
            }
        }
        let head = HTTPRequestHead(method: HTTPMethod(method), target: target, authority: origin.authority, scheme: scheme.rawValue, fields: fields)
        let request = TransportRequest(origin: origin, head: head, body: body, idleTimeout: .seconds(30))

        var configuration = HTTPTransport.Configuration()
        configuration.pool.maxConnections = 1
        configuration.pool.maxIdleConnections = 1
        configuration.http2PriorKnowledge = h2c
        if http1 { configuration.tls.applicationProtocols = ["http/1.1"] }
        if let cacert {
            guard let pem = FileManager.default.contents(atPath: cacert) else { throw ValidationError("cannot read \(cacert)") }
            configuration.tls.trustRoots = try TrustStore(pemBundle: Array(pem))
        }
        if insecure { configuration.securityDelegate = AcceptAnyServer() }

        let inFlight = max(1, streams)
        let plan = Plan(total: requests, deadline: requests == nil ? .now + .milliseconds(Int64((duration ?? 10) * 1000)) : nil)
        let done = DispatchSemaphore(value: 0)
        let workers = (0..<max(1, connections)).map { _ in
            Worker(transport: HTTPTransport(configuration: configuration), request: request, inFlight: inFlight, plan: plan) { done.signal() }
        }
        let start = ContinuousClock.now
        for worker in workers { worker.start() }
        for _ in workers { done.wait() }
        let elapsed = ContinuousClock.now - start
        for worker in workers { worker.transport.shutdown() }
        report(workers, elapsed: elapsed, origin: origin)
    }

    private func report(_ workers: [Worker], elapsed: Duration, origin: Origin) {
        var histogram = Histogram<UInt64>(highestTrackableValue: 120_000_000_000, numberOfSignificantValueDigits: .three)
        var completed = 0, bytes: Int64 = 0
        var errors: [String: Int] = [:]
        var localPorts: Set<UInt16> = []
        var protocols: Set<String> = []
        for worker in workers {
            let result = worker.result.withLock { $0 }
            histogram.add(result.latencies)
            completed += result.completed
            bytes += result.bytes
            for (kind, count) in result.errors { errors[kind, default: 0] += count }
            localPorts.formUnion(result.localPorts)
            protocols.formUnion(result.protocols)
        }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let microseconds = { (ns: UInt64) in Double(ns) / 1000 }
        let summary: [String: Any] = [
            "requests": completed, "seconds": seconds, "requestsPerSecond": Double(completed) / seconds,
            "bytes": bytes, "bytesPerSecond": Double(bytes) / seconds,
            "latencyMicroseconds": [
                "p50": microseconds(histogram.valueAtPercentile(50)), "p90": microseconds(histogram.valueAtPercentile(90)),
                "p99": microseconds(histogram.valueAtPercentile(99)), "max": microseconds(histogram.max),
            ],
            "errors": errors, "connectionsUsed": localPorts.count, "protocols": Array(protocols).sorted(),
        ]
        if json {
            let data = (try? JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys])) ?? Data()
            print(String(decoding: data, as: UTF8.self))
            return
        }
        func time(_ ns: UInt64) -> String {
            ns >= 1_000_000 ? String(format: "%.2fms", Double(ns) / 1e6) : String(format: "%.0fus", Double(ns) / 1e3)
        }
        print("courier-load \(url)")
        print("  \(workers.count) connections, \(workers.first?.inFlight ?? 1) in flight each, \(protocols.sorted().joined(separator: ", "))")
        print("  Latency    p50 \(time(histogram.valueAtPercentile(50)))  p90 \(time(histogram.valueAtPercentile(90)))  p99 \(time(histogram.valueAtPercentile(99)))  max \(time(histogram.max))")
        print(String(format: "  %d requests in %.2fs, %.2fMB read", completed, seconds, Double(bytes) / 1e6))
        print("  Errors: \(errors.isEmpty ? "none" : errors.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
        print("  Connections used: \(localPorts.count)")
        print(String(format: "Requests/sec: %.2f", Double(completed) / seconds))
        print(String(format: "Transfer/sec: %.2fMB", Double(bytes) / seconds / 1e6))
    }
}

let version = "0.1.0"

/// How many requests to make: a total, or until a deadline.
final class Plan: Sendable {
    let total: Int?
    let deadline: ContinuousClock.Instant?
    private let issued = Atomic<Int>(0)

    init(total: Int?, deadline: ContinuousClock.Instant?) {
        self.total = total
        self.deadline = deadline
    }

    /// Claims the right to start one more request.
    func claim() -> Bool {
        if let deadline { return ContinuousClock.now < deadline }
        return issued.add(1, ordering: .relaxed).newValue <= (total ?? 0)
    }
}

/// One connection's share of the load: keeps `inFlight` requests going on its own transport,
/// starting the next request from the completion callback, on the event loop.
final class Worker: HTTPExchangeDelegate, @unchecked Sendable {
    struct Result {
        var latencies = Histogram<UInt64>(highestTrackableValue: 120_000_000_000, numberOfSignificantValueDigits: .three)
        var completed = 0
        var bytes: Int64 = 0
        var errors: [String: Int] = [:]
        var localPorts: Set<UInt16> = []
        var protocols: Set<String> = []
        var running = 0
    }

    let transport: HTTPTransport
    let request: TransportRequest
    let inFlight: Int
    let plan: Plan
    let finished: @Sendable () -> Void
    let result = Mutex(Result())

    init(transport: HTTPTransport, request: TransportRequest, inFlight: Int, plan: Plan, finished: @escaping @Sendable () -> Void) {
        self.transport = transport
        self.request = request
        self.inFlight = inFlight
        self.plan = plan
        self.finished = finished
    }

    func start() {
        var started = 0
        for _ in 0..<inFlight where plan.claim() {
            started += 1
            result.withLock { $0.running += 1 }
            launch()
        }
        if started == 0 { finished() }
    }

    private func launch() {
        transport.execute(request, delegate: self)
    }

    func exchange(_ exchange: HTTPExchange, didSendBodyBytes totalBytesSent: Int64) {}
    func exchange(_ exchange: HTTPExchange, didReceiveHead head: HTTPResponseHead) {}
    func exchange(_ exchange: HTTPExchange, didReceiveBodyBytes bytes: UnsafeRawBufferPointer) {}

    func exchange(_ exchange: HTTPExchange, didCompleteWithTrailers trailers: HTTPFields?, metrics: ExchangeMetrics) {
        finish(exchange, metrics: metrics, error: nil)
    }

    func exchange(_ exchange: HTTPExchange, didFailWith error: TransportError, metrics: ExchangeMetrics) {
        finish(exchange, metrics: metrics, error: error)
    }

    private func finish(_ exchange: HTTPExchange, metrics: ExchangeMetrics, error: TransportError?) {
        // The exchange's start is when it entered the transport.
        let end = ContinuousClock.now
        let begin = metrics.fetchStart ?? end
        let elapsed = end - begin
        let nanoseconds = UInt64(max(0, elapsed.components.seconds)) * 1_000_000_000 + UInt64(max(0, elapsed.components.attoseconds / 1_000_000_000))
        let continueRunning = plan.claim()
        let allDone = result.withLock { result -> Bool in
            if let error {
                result.errors[Self.kind(error), default: 0] += 1
            } else {
                result.completed += 1
                _ = result.latencies.record(nanoseconds)
            }
            result.bytes += metrics.responseBodyBytesReceived
            if let port = metrics.localAddress?.port { result.localPorts.insert(port) }
            if let name = metrics.networkProtocolName { result.protocols.insert(name) }
            if !continueRunning { result.running -= 1 }
            return !continueRunning && result.running == 0
        }
        if continueRunning {
            launch()
        } else if allDone {
            finished()
        }
    }

    static func kind(_ error: TransportError) -> String {
        switch error {
        case .dial: return "connect"
        case .timedOut: return "timeout"
        case .connectionLost: return "connectionLost"
        case .remoteProtocol: return "protocol"
        case .localProtocol: return "request"
        case .bodyStream: return "body"
        case .cancelled: return "cancelled"
        case .shutDown: return "shutdown"
        }
    }
}

/// Trusts any server (-k).
final class AcceptAnyServer: ConnectionSecurityDelegate {
    func evaluateServerTrust(_ request: ServerTrustRequest, completion: @escaping @Sendable (ServerTrustDecision) -> Void) {
        completion(.accept)
    }

    func chooseClientIdentity(_ request: ClientIdentityRequest, completion: @escaping @Sendable (ClientIdentityDecision) -> Void) {
        completion(.none)
    }
}
