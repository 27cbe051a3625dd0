import ArgumentParser
import Courier
import Foundation

/// curl's `--retry` family: which failures are tried again, and after how long.
struct RetryOptions: ParsableArguments {
    @Option(name: .customLong("retry"), help: "Try a transient failure again, up to this many times: a timeout, a name that did not resolve, or a 408, 429, 500, 502, 503 or 504.")
    var retries: Int = 0

    @Option(name: .customLong("retry-delay"), help: "Wait this many seconds between tries (default: 1, doubling each time, or the server's Retry-After).")
    var delay: Int?

    @Option(name: .customLong("retry-max-time"), help: "Start no new try after this many seconds.")
    var maximumTime: Double?

    @Flag(name: .customLong("retry-connrefused"), help: "With --retry: also try again when the connection is refused.")
    var connectionRefused = false

    @Flag(name: .customLong("retry-all-errors"), help: "With --retry: try again after any failure.")
    var allErrors = false

    func validate() throws {
        if retries < 0 { throw ValidationError("--retry takes 0 or more") }
        if let delay, delay < 0 { throw ValidationError("--retry-delay takes 0 or more seconds") }
    }

    /// Why `outcome` is worth another try (curl's words), or nil.
    func reason(for outcome: Transfer.Outcome, failsOnStatus: Bool) -> String? {
        if let error = outcome.error as? URLError, outcome.failedStatus == nil, !outcome.tooManyRedirects {
            switch error.code {
            case .timedOut: return "Timeout"
            case .cannotFindHost, .dnsLookupFailed: return "Timeout"
            case .cannotConnectToHost where connectionRefused: return "Connection refused"
            default: return allErrors ? "Error" : nil
            }
        }
        if let status = outcome.failedStatus ?? outcome.status, [408, 429, 500, 502, 503, 504].contains(status) {
            return "HTTP error"
        }
        if allErrors, outcome.outputFailure == nil {
            if outcome.error != nil || outcome.tooManyRedirects { return "Error" }
            if failsOnStatus, let status = outcome.status, status >= 400 { return "Error" }
        }
        return nil
    }

    /// Seconds before try number `attempt` + 2: --retry-delay (0 meaning the default, as
    /// with curl), else a short Retry-After, else 1, 2, 4, … up to ten minutes.
    func delay(before attempt: Int, response: HTTPURLResponse?) -> Int {
        if let delay, delay > 0 { return delay }
        if let status = response?.statusCode, status == 429 || status == 503,
           let value = response?.value(forHTTPHeaderField: "Retry-After"), let seconds = Int(value.trimmingCharacters(in: .whitespaces)), seconds >= 0 {
            return min(seconds, 600)
        }
        return min(1 << min(attempt, 10), 600)
    }

    /// True when a try after `delay` more seconds still starts within --retry-max-time.
    func allows(elapsed: TimeInterval, delay: Int) -> Bool {
        guard let maximumTime else { return true }
        return elapsed + Double(delay) <= maximumTime
    }
}
