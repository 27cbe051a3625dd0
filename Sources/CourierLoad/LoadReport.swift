import Foundation
import Histogram

/// The end-of-run report: wrk's text layout, or JSON with wrk's and h2load's figures.
struct LoadReport {
    let url: String
    let connections: Int
    let inFlight: Int
    let pipelined: Bool
    let rate: Double?
    let stats: LoadStats
    let elapsed: Duration

    var seconds: Double { Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18 }
    /// Started and neither answered nor failed when the run ended (the deadline cut them off).
    var unfinished: Int { max(0, stats.started - stats.completed - stats.failed) }
    /// Responses whose status was not 2xx or 3xx (wrk's "Non-2xx or 3xx responses").
    var non2xx3xx: Int { stats.statusClasses[1] + stats.statusClasses[4] + stats.statusClasses[5] }

    static let errorKinds = ["connect", "read", "write", "timeout", "other"]
    /// wrk's `--latency` percentiles, and with a rate wrk2's longer tail.
    var percentiles: [Double] { rate == nil ? [50, 75, 90, 99] : [50, 75, 90, 99, 99.9, 99.99, 99.999, 100] }

    var failureSummary: String {
        var parts = Self.errorKinds.compactMap { kind in stats.errors[kind].map { "\(kind) errors \($0)" } }
        if unfinished > 0 { parts.append("unfinished \(unfinished)") }
        return parts.isEmpty ? "nothing was sent" : parts.joined(separator: ", ")
    }

    private func time(_ nanoseconds: Double) -> String {
        switch nanoseconds {
        case 1e9...: return String(format: "%.2fs", nanoseconds / 1e9)
        case 1e6...: return String(format: "%.2fms", nanoseconds / 1e6)
        default: return String(format: "%.2fus", nanoseconds / 1e3)
        }
    }

    func text(distribution: Bool) -> String {
        let histogram = stats.latencies
        var lines: [String] = []
        lines.append("courier-load \(url)")
        var shape = "  \(connections) connections, \(inFlight) \(pipelined ? "pipelined" : "in flight") each"
        if !stats.protocols.isEmpty { shape += ", " + stats.protocols.sorted().joined(separator: ", ") }
        if let rate { shape += String(format: ", %.0f requests/s (latency from each request's scheduled start)", rate) }
        lines.append(shape)
        if histogram.totalCount > 0 {
            lines.append(
                "  Latency    avg \(time(histogram.mean))  stdev \(time(histogram.stdDeviation))  max \(time(Double(histogram.max)))"
                    + "  p50 \(time(Double(histogram.valueAtPercentile(50))))  p90 \(time(Double(histogram.valueAtPercentile(90))))"
                    + "  p99 \(time(Double(histogram.valueAtPercentile(99))))"
            )
            if distribution {
                lines.append("  Latency Distribution")
                for percentile in percentiles {
                    let label = percentile == percentile.rounded() ? String(format: "%.0f%%", percentile) : String(format: "%g%%", percentile)
                    let value = time(Double(histogram.valueAtPercentile(percentile)))
                    lines.append(String(repeating: " ", count: max(1, 10 - label.count)) + label + String(repeating: " ", count: max(1, 10 - value.count)) + value)
                }
                if rate != nil {
                    var spectrum = ""
                    histogram.outputPercentileDistribution(to: &spectrum, outputValueUnitScalingRatio: 1e6)
                    lines.append("")
                    lines.append("  Detailed Percentile spectrum (milliseconds):")
                    lines.append(spectrum.trimmingCharacters(in: .newlines))
                }
            }
        }
        lines.append(String(format: "  %d requests in %.2fs, %.2fMB read", stats.completed, seconds, Double(stats.bytes) / 1e6))
        if non2xx3xx > 0 { lines.append("  Non-2xx or 3xx responses: \(non2xx3xx)") }
        let errors = Self.errorKinds.compactMap { kind in stats.errors[kind].map { "\(kind) \($0)" } }
        lines.append("  Errors: \(errors.isEmpty ? "none" : errors.joined(separator: ", "))")
        if unfinished > 0 { lines.append("  Unfinished at the deadline: \(unfinished)") }
        lines.append("  Connections used: \(stats.localPorts.count + stats.connectionsOpened)")
        lines.append(String(format: "Requests/sec: %.2f", Double(stats.completed) / seconds))
        lines.append(String(format: "Transfer/sec: %.2fMB", Double(stats.bytes) / seconds / 1e6))
        return lines.joined(separator: "\n") + "\n"
    }

    /// One JSON object. The names follow wrk's summary (`requests`, `bytes`, `errors` by
    /// connect/read/write/status/timeout) and h2load's counts (`started`, `failed`, status
    /// classes); latencies are in microseconds.
    func json() -> String {
        let histogram = stats.latencies
        let microseconds = { (value: Double) in value / 1000 }
        var latency: [String: Any] = [:]
        if histogram.totalCount > 0 {
            latency = [
                "min": microseconds(Double(histogram.min)), "mean": microseconds(histogram.mean),
                "stdev": microseconds(histogram.stdDeviation), "max": microseconds(Double(histogram.max)),
            ]
            for percentile in Set(percentiles + [90, 99.9]) {
                let name = "p" + (percentile == percentile.rounded() ? String(Int(percentile)) : String(percentile))
                latency[name] = microseconds(Double(histogram.valueAtPercentile(percentile)))
            }
        }
        var errors: [String: Int] = Dictionary(uniqueKeysWithValues: Self.errorKinds.map { ($0, stats.errors[$0] ?? 0) })
        errors["status"] = non2xx3xx
        let statusCodes = Dictionary(uniqueKeysWithValues: (1...5).map { ("\($0)xx", stats.statusClasses[$0]) })
        let summary: [String: Any] = [
            "url": url, "connections": connections, "inFlightPerConnection": inFlight, "pipelined": pipelined,
            "rate": rate as Any? ?? NSNull(), "latencyCorrected": rate != nil,
            "seconds": seconds, "started": stats.started, "requests": stats.completed, "failed": stats.failed,
            "unfinished": unfinished, "requestsPerSecond": Double(stats.completed) / seconds,
            "bytes": stats.bytes, "bytesPerSecond": Double(stats.bytes) / seconds,
            "errors": errors, "statusCodes": statusCodes, "latencyMicroseconds": latency,
            "connectionsUsed": stats.localPorts.count + stats.connectionsOpened, "protocols": stats.protocols.sorted(),
        ]
        let data = (try? JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }
}
