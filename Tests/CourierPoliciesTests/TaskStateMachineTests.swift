import CourierPolicies
import Foundation
import Testing
import _CourierTestSupport

@Suite("TaskStateMachine")
struct TaskStateMachineTests {
    typealias Event = TaskStateMachine.Event
    typealias Action = TaskStateMachine.Action

    static let url = URL(string: "http://example.test/start")!

    static func head(_ status: Int, _ location: String? = nil, method: String = "GET", retryAfter: String? = nil) -> Event {
        .responseHeadReceived(.init(status: status, location: location, retryAfter: retryAfter, requestURL: url, method: method))
    }

    static func redirect(to path: String, method: String = "GET") -> RedirectPolicy.Redirect {
        RedirectPolicy.Redirect(
            url: URL(string: "http://example.test\(path)")!, method: method, bodyChange: .keep,
            isCrossOrigin: false, removedFieldNames: []
        )
    }

    /// A sequence of events and the actions each must return.
    struct Script: Sendable, CustomStringConvertible {
        var name: String
        var steps: [(Event, [Action])]
        var final: TaskStateMachine.State
        var description: String { name }
    }

    static let scripts: [Script] = [
        Script(name: "plain success", steps: [
            (.started, [.startExchange]),
            (head(200), [.deliverResponse]),
            (.bodyFinished, [.finish(.success)]),
        ], final: .finished),
        Script(name: "followed redirect", steps: [
            (.started, [.startExchange]),
            (head(302, "/next"), [.keepBodyAside]),
            (.bodyFinished, [.askRedirectDelegate(redirect(to: "/next"))]),
            (.redirectDecided(followed: true), [.startExchange]),
            (head(200), [.deliverResponse]),
            (.bodyFinished, [.finish(.success)]),
        ], final: .finished),
        Script(name: "refused redirect delivers the 3xx and its body", steps: [
            (.started, [.startExchange]),
            (head(301, "/moved"), [.keepBodyAside]),
            (.bodyFinished, [.askRedirectDelegate(redirect(to: "/moved"))]),
            (.redirectDecided(followed: false), [.deliverResponse, .deliverKeptResponse, .finish(.success)]),
        ], final: .finished),
        Script(name: "a redirect body too large to keep is delivered", steps: [
            (.started, [.startExchange]),
            (head(307, "/big"), [.keepBodyAside]),
            (.keptBodyOverflowed, [.deliverResponse, .deliverKeptResponse]),
            (.bodyFinished, [.finish(.success)]),
        ], final: .finished),
        Script(name: "a Location that is no URL fails the task", steps: [
            (.started, [.startExchange]),
            (head(302, "http://[::1"), [.cancelExchange, .finish(.redirectFailed(.badLocation("http://[::1")))]),
            (.exchangeFailed, []),
            (.bodyFinished, []),
        ], final: .finished),
        Script(name: "cancel before start", steps: [
            (.cancelRequested, [.finish(.cancelled)]),
            (.started, []),
        ], final: .finished),
        Script(name: "cancel mid-exchange goes through the exchange", steps: [
            (.started, [.startExchange]),
            (.cancelRequested, [.cancelExchange]),
            (.exchangeFailed, [.finish(.exchangeFailed)]),
            (.cancelRequested, []),
        ], final: .finished),
        Script(name: "cancel while the delegate decides", steps: [
            (.started, [.startExchange]),
            (head(308, "/p"), [.keepBodyAside]),
            (.bodyFinished, [.askRedirectDelegate(redirect(to: "/p"))]),
            (.cancelRequested, [.finish(.cancelled)]),
            (.redirectDecided(followed: true), []),
        ], final: .finished),
        Script(name: "delivery failure cancels the exchange", steps: [
            (.started, [.startExchange]),
            (head(200), [.deliverResponse]),
            (.deliveryFailed, [.cancelExchange, .finish(.deliveryFailed)]),
            (.exchangeFailed, []),
        ], final: .finished),
        Script(name: "304 and 300 are responses, not redirects", steps: [
            (.started, [.startExchange]),
            (head(304, "/x"), [.deliverResponse]),
            (.bodyFinished, [.finish(.success)]),
        ], final: .finished),
        Script(name: "events out of place do nothing", steps: [
            (.bodyFinished, []),
            (.redirectDecided(followed: true), []),
            (.started, [.startExchange]),
            (.started, []),
            (.bodyFinished, []),
            (.redirectDecided(followed: false), []),
        ], final: .exchanging),
    ]

    @Test("scripts", arguments: scripts)
    func run(_ script: Script) {
        var machine = TaskStateMachine()
        for (index, (event, expected)) in script.steps.enumerated() {
            let actions = machine.handle(event)
            #expect(Array(actions) == expected, "step \(index): \(event)")
        }
        #expect(machine.state == script.final)
    }

    @Test("a 503 with a short Retry-After is retried, then delivered when attempts run out")
    func retries() {
        var machine = TaskStateMachine(retryPolicy: RetryPolicy(maximumDelay: 2, maximumAttempts: 1))
        #expect(machine.handle(.started) == [.startExchange])
        #expect(machine.handle(Self.head(503, retryAfter: "1")) == [.keepBodyAside])
        #expect(machine.handle(.bodyFinished) == [.scheduleRetry(after: 1)])
        #expect(machine.handle(.retryTimerFired) == [.startExchange])
        #expect(machine.retryCount == 1)
        #expect(machine.handle(Self.head(503, retryAfter: "1")) == [.deliverResponse])
        #expect(machine.handle(.bodyFinished) == [.finish(.success)])

        var cancelled = TaskStateMachine(retryPolicy: RetryPolicy(maximumDelay: 2, maximumAttempts: 1))
        _ = cancelled.handle(.started)
        _ = cancelled.handle(Self.head(429, retryAfter: "2"))
        _ = cancelled.handle(.bodyFinished)
        #expect(cancelled.handle(.cancelRequested) == [.finish(.cancelled)])
        #expect(cancelled.handle(.retryTimerFired) == [])
    }

    @Test("a chain of 16 redirects is followed; the 17th fails the task")
    func redirectLimit() {
        var machine = TaskStateMachine()
        #expect(machine.handle(.started) == [.startExchange])
        for hop in 1...16 {
            #expect(machine.handle(Self.head(302, "/hop\(hop)")) == [.keepBodyAside])
            #expect(machine.handle(.bodyFinished) == [.askRedirectDelegate(Self.redirect(to: "/hop\(hop)"))])
            #expect(machine.handle(.redirectDecided(followed: true)) == [.startExchange])
            #expect(machine.redirectCount == hop)
        }
        #expect(machine.handle(Self.head(302, "/hop17")) == [.cancelExchange, .finish(.redirectFailed(.tooManyRedirects(limit: 16)))])
        #expect(machine.isFinished)
    }

    /// Random event sequences: the machine never finishes twice, never acts after finishing, and
    /// every `startExchange` comes from `started` or a followed redirect.
    @Test("random sequences keep the invariants")
    func randomSequences() {
        var generator = SplitMix64(seed: 0x5EED)
        let events: [Event] = [
            .started, Self.head(200), Self.head(302, "/r"), Self.head(303, "ftp://x/"), .keptBodyOverflowed,
            .bodyFinished, .redirectDecided(followed: true), .redirectDecided(followed: false), .retryTimerFired, Self.head(503, retryAfter: "1"),
            .exchangeFailed, .deliveryFailed, .cancelRequested,
        ]
        for _ in 0..<2000 {
            var machine = TaskStateMachine(retryPolicy: RetryPolicy(maximumDelay: 5, maximumAttempts: 3))
            var finishes = 0
            for _ in 0..<24 {
                let event = events[Int(generator.next() % UInt64(events.count))]
                let wasFinished = machine.isFinished
                let actions = machine.handle(event)
                if wasFinished { #expect(actions.isEmpty) }
                finishes += actions.filter { if case .finish = $0 { return true } else { return false } }.count
                if actions.contains(.startExchange) {
                    #expect(event == .started || event == .redirectDecided(followed: true) || event == .retryTimerFired)
                }
            }
            #expect(finishes <= 1)
            #expect(machine.redirectCount <= RedirectPolicy.maximumRedirects)
            #expect(machine.retryCount <= 3)
        }
    }
}
