import CourierPolicies
import Foundation
import Testing

@Suite("RetryPolicy")
struct RetryPolicyTests {
    let policy = RetryPolicy(maximumDelay: 5, maximumAttempts: 2)
    let now = Date(timeIntervalSince1970: 784_111_777) // Sun, 06 Nov 1994 08:49:37 GMT

    @Test("Retry-After values", arguments: [
        ("0", 0.0), ("3", 3.0), (" 5 ", 5.0), ("Sun, 06 Nov 1994 08:49:40 GMT", 3.0), ("Sun, 06 Nov 1994 08:49:00 GMT", 0.0),
    ])
    func values(_ text: String, _ seconds: Double) {
        #expect(RetryPolicy.seconds(fromRetryAfter: text, now: now) == seconds)
    }

    @Test("malformed Retry-After", arguments: ["", "-1", "1.5", "soon", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun, 32 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 PST"])
    func malformed(_ text: String) {
        #expect(RetryPolicy.seconds(fromRetryAfter: text, now: now) == nil)
    }

    @Test("what is retried")
    func decisions() {
        func delay(_ status: Int, _ after: String?, _ method: String = "GET", replayable: Bool = true, attempts: Int = 0) -> Double? {
            policy.delay(status: status, retryAfter: after, method: method, bodyIsReplayable: replayable, attemptsSoFar: attempts, now: now)
        }
        #expect(delay(503, "2") == 2)
        #expect(delay(429, "5") == 5)
        #expect(delay(429, "6") == nil, "longer than the bound")
        #expect(delay(503, nil) == nil, "no Retry-After")
        #expect(delay(500, "1") == nil, "not 429 or 503")
        #expect(delay(503, "1", "POST") == nil, "not idempotent")
        #expect(delay(503, "1", "PUT") == 1)
        #expect(delay(503, "1", replayable: false) == nil, "a stream body cannot be sent again")
        #expect(delay(503, "1", attempts: 2) == nil, "attempts used up")
        #expect(RetryPolicy.off.delay(status: 503, retryAfter: "1", method: "GET", bodyIsReplayable: true, attemptsSoFar: 0, now: now) == nil)
    }
}
