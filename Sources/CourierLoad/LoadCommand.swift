import ArgumentParser
import CourierCore
import CourierReactor
import CourierTLS
import CourierTransport
import Dispatch
import Foundation

/// `courier-load`: an HTTP load generator on Courier's own transport, in the manner of wrk,
/// wrk2 and h2load. Each of `-c` connections keeps `-m` requests in flight (HTTP/2 streams; one
/// for HTTP/1.1), or with `-P` pipelines that many HTTP/1.1 requests; `-R` paces the requests
/// at a constant rate and measures latency from when each should have started.
@main
struct LoadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "courier-load",
        abstract: "Load-test a URL with Courier's transport (HTTP/1.1, or HTTP/2 by ALPN or prior knowledge).",
        discussion: """
            Runs for -d (10s when neither -n nor -d is given), or until -n requests were made, whichever \
            comes first. At the end of -d the run stops at once: requests still in flight are reported \
            as unfinished. The exit status is 1 when no request got a response.
            """
    )

    @Option(name: .customShort("n"), help: "Total requests.")
    var requests: Int?

    @Option(name: .customShort("d"), help: ArgumentHelp("How long to run, a hard deadline (10, 10s, 500ms, 2m).", valueName: "duration"))
    var duration: String?

    @Option(name: .customShort("c"), help: "Connections.")
    var connections = 1

    @Option(name: .customShort("m"), help: "Concurrent streams per connection (HTTP/2).")
    var streams = 1

    @Option(name: [.customShort("P"), .customLong("pipeline")], help: "HTTP/1.1 requests pipelined per connection.")
    var pipeline: Int?

    @Option(name: [.customShort("R"), .customLong("rate")], help: "Requests per second over all connections (constant rate; latency corrected for coordinated omission).")
    var rate: Double?

    @Option(help: ArgumentHelp("A request with no response within this time fails as a timeout.", valueName: "duration"))
    var timeout = "10s"

    @Flag(help: "Print the latency distribution.")
    var latency = false

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

    mutating func validate() throws {
        guard connections >= 1 else { throw ValidationError("-c must be at least 1") }
        guard streams >= 1 else { throw ValidationError("-m must be at least 1") }
        if let requests, requests < 0 { throw ValidationError("-n must not be negative") }
        if let pipeline {
            guard pipeline >= 1 else { throw ValidationError("-P must be at least 1") }
            guard !h2c, streams == 1 else { throw ValidationError("-P pipelines HTTP/1.1; it cannot go with --h2c or -m") }
        }
        if let rate, !(rate > 0 && rate.isFinite) { throw ValidationError("-R must be a positive number of requests per second") }
        if let duration, LoadCommand.parseDuration(duration) == nil { throw ValidationError("-d: not a duration: \(duration)") }
        if LoadCommand.parseDuration(timeout) == nil { throw ValidationError("--timeout: not a duration: \(timeout)") }
    }

    /// "10", "10s", "250ms", "2m", "1h", "1.5s".
    static func parseDuration(_ text: String) -> Duration? {
        let units: [(String, Double)] = [("ms", 0.001), ("us", 0.000_001), ("s", 1), ("m", 60), ("h", 3600)]
        var number = Substring(text)
        var scale = 1.0
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            number = text.dropLast(suffix.count)
            scale = factor
            break
        }
        guard let value = Double(number), value >= 0, value.isFinite else { return nil }
        return .nanoseconds(Int64(value * scale * 1e9))
    }

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
        var bodyBytes = Data()
        if let data {
            if data.hasPrefix("@") {
                guard let bytes = FileManager.default.contents(atPath: String(data.dropFirst())) else { throw ValidationError("cannot read \(data)") }
                bodyBytes = bytes
            } else {
                bodyBytes = Data(data.utf8)
            }
        }
        // Checked once, here: a bad -H stops the run at once with its reason rather than failing
        // every request, and the transport's check of each request skips fields marked checked.
        let checkedFields: HTTPFields
        do { checkedFields = try fields.validated() } catch { throw ValidationError("bad header: \(error)") }
        let head = HTTPRequestHead(method: HTTPMethod(method), target: target, authority: origin.authority, scheme: scheme.rawValue, fields: checkedFields)
        let timeout = LoadCommand.parseDuration(timeout) ?? .seconds(10)

        var configuration = HTTPTransport.Configuration()
        configuration.pool.maxConnections = 1
        configuration.pool.maxIdleConnections = 1
        configuration.connectTimeout = timeout
        configuration.http2PriorKnowledge = h2c
        if http1 || pipeline != nil { configuration.tls.applicationProtocols = ["http/1.1"] }
        if let cacert {
            guard let pem = FileManager.default.contents(atPath: cacert) else { throw ValidationError("cannot read \(cacert)") }
            configuration.tls.trustRoots = try TrustStore(pemBundle: Array(pem))
        }
        if insecure { configuration.securityDelegate = AcceptAnyServer() }

        let start = MonotonicInstant.now
        let runFor = duration.flatMap(LoadCommand.parseDuration) ?? (requests == nil ? .seconds(10) : nil)
        let deadline = runFor.map { start + $0 }
        let plan = Plan(total: requests, deadline: deadline)
        // With a rate, each connection takes its share, the connections' schedules interleaved.
        let interval = rate.map { Duration.nanoseconds(Int64(1e9 * Double(connections) / $0)) }
        func pacer(_ index: Int) -> Pacer {
            Pacer(interval: interval, start: start + (interval ?? .zero) * index / connections)
        }
        let done = DispatchSemaphore(value: 0)
        let signal: @Sendable () -> Void = { done.signal() }
        var workers: [LoadWorker] = []
        var transports: [HTTPTransport] = []
        if let pipeline {
            let transport = HTTPTransport(configuration: configuration)
            transports.append(transport)
            for index in 0..<connections {
                workers.append(
                    try PipelineWorker(
                        transport: transport, origin: origin, head: head, body: Array(bodyBytes), depth: pipeline, timeout: timeout,
                        pacer: pacer(index), plan: plan, finished: signal
                    )
                )
            }
        } else {
            var request = TransportRequest(origin: origin, head: head, body: bodyBytes.isEmpty ? .empty : .bytes(bodyBytes), idleTimeout: timeout)
            request.collectsTimings = true
            for index in 0..<connections {
                let transport = HTTPTransport(configuration: configuration)
                transports.append(transport)
                workers.append(
                    ExchangeWorker(
                        transport: transport, request: request, slots: streams, timeout: timeout, pacer: pacer(index), plan: plan,
                        finished: signal
                    )
                )
            }
        }
        for worker in workers { worker.start() }
        var stoppedAtDeadline = false
        for _ in workers {
            if let deadline {
                let left = max(.zero, deadline - .now)
                if done.wait(timeout: .now() + .nanoseconds(left.nanoseconds)) == .timedOut {
                    stoppedAtDeadline = true
                    break
                }
            } else {
                done.wait()
            }
        }
        let elapsed = MonotonicInstant.now - start
        var stats = LoadStats()
        for worker in workers { stats.add(worker.snapshot()) }
        // A hard deadline: what is still in flight is reported, not waited for.
        if !stoppedAtDeadline { for transport in transports { transport.shutdown() } }
        let report = LoadReport(
            url: url, connections: connections, inFlight: pipeline ?? streams, pipelined: pipeline != nil, rate: rate, stats: stats,
            elapsed: elapsed
        )
        if json {
            print(report.json())
        } else {
            print(report.text(distribution: latency), terminator: "")
        }
        if stats.completed == 0 && stats.started > 0 {
            var standardError = FileHandle.standardError
            print("courier-load: no request got a response (\(report.failureSummary))", to: &standardError)
            throw ExitCode(1)
        }
    }
}

let version = "0.2.0"

extension FileHandle: @retroactive TextOutputStream {
    public func write(_ string: String) {
        write(Data(string.utf8))
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
