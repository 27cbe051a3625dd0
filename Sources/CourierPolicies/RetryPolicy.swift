import Foundation

/// A Courier extension, off by default: retrying an idempotent request that the server answered
/// 503 (Service Unavailable) or 429 (Too Many Requests) with a `Retry-After` it is willing to
/// wait for (RFC 9110 section 10.2.3, RFC 6585 section 4).
///
/// Only short, explicit waits are honoured: no `Retry-After`, or one longer than
/// `maximumDelay`, and the response is delivered as it is. Non-idempotent methods are never
/// retried (the server may have acted on the first attempt), and neither are requests whose body
/// cannot be sent again.
public struct RetryPolicy: Sendable, Equatable {
    /// Longest `Retry-After` honoured, in seconds; 0 turns retrying off.
    public var maximumDelay: Double
    /// Retries one task may make.
    public var maximumAttempts: Int

    /// Statuses whose `Retry-After` is honoured.
    public static let retriedStatuses: Set<Int> = [429, 503]

    /// Never retries.
    public static let off = RetryPolicy(maximumDelay: 0, maximumAttempts: 0)

    public init(maximumDelay: Double, maximumAttempts: Int) {
        self.maximumDelay = maximumDelay
        self.maximumAttempts = maximumAttempts
    }

    /// The wait before the next attempt, in seconds, or nil to deliver the response.
    ///
    /// 1. Retrying is on, the status is 429 or 503, and attempts remain.
    /// 2. The method is idempotent (RFC 9110 section 9.2.2) and the body can be sent again.
    /// 3. `Retry-After` is a delay in seconds, or an HTTP date (relative to `now`), no later
    ///    than `maximumDelay`.
    public func delay(status: Int, retryAfter: String?, method: String, bodyIsReplayable: Bool, attemptsSoFar: Int, now: Date) -> Double? {
        guard maximumDelay > 0, Self.retriedStatuses.contains(status), attemptsSoFar < maximumAttempts else { return nil }
        guard ["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"].contains(method.uppercased()), bodyIsReplayable else { return nil }
        guard let retryAfter, let seconds = Self.seconds(fromRetryAfter: retryAfter, now: now) else { return nil }
        return seconds <= maximumDelay ? seconds : nil
    }

    /// A `Retry-After` value in seconds from `now`: `delay-seconds` (digits), or an IMF-fixdate
    /// (`Sun, 06 Nov 1994 08:49:37 GMT`); a date in the past is no wait. Nil when malformed.
    public static func seconds(fromRetryAfter value: String, now: Date) -> Double? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            return Double(text.prefix(10)) // ten digits is over 300 years: more is noise
        }
        guard let date = HTTPDate.parseIMFFixdate(text) else { return nil }
        return max(0, date.timeIntervalSince(now))
    }
}
