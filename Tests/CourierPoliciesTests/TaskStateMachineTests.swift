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
        Script(name: "a loader's own redirect goes to the delegate; followed, another exchange", steps: [
            (.started, [.startExchange]),
            (.redirectRequested(redirect(to: "/elsewhere")), [.askRedirectDelegate(redirect(to: "/elsewhere"))]),
            (.bodyFinished, []),
            (.redirectDecided(followed: true), [.startExchange]),
            (head(200), [.deliverResponse]),
            (.redirectRequested(redirect(to: "/late")), []),
            (.bodyFinished, [.finish(.success)]),
        ], final: .finished),
        Script(name: "a loader's refused redirect delivers its response", steps: [
            (.started, [.startExchange]),
            (.redirectRequested(redirect(to: "/no")), [.askRedirectDelegate(redirect(to: "/no"))]),
            (.redirectDecided(followed: false), [.deliverResponse, .deliverKeptResponse, .finish(.success)]),
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

    @Test("a loader's own redirects count toward the same limit")
    func loaderRedirectLimit() {
        var machine = TaskStateMachine()
        #expect(machine.handle(.started) == [.startExchange])
        for hop in 1...16 {
            #expect(machine.handle(.redirectRequested(Self.redirect(to: "/hop\(hop)"))) == [.askRedirectDelegate(Self.redirect(to: "/hop\(hop)"))])
            #expect(machine.handle(.redirectDecided(followed: true)) == [.startExchange])
        }
        #expect(machine.handle(.redirectRequested(Self.redirect(to: "/hop17"))) == [.cancelExchange, .finish(.redirectFailed(.tooManyRedirects(limit: 16)))])
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
            .redirectRequested(Self.redirect(to: "/own")),
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

    /// `handleDeliverableHead()` stands for `.responseHeadReceived` of a head that is no
    /// redirect and carries no challenge or Retry-After: from every state random sequences reach,
    /// the two give the same actions and leave the same machine.
    @Test("a deliverable head does what its facts would")
    func deliverableHead() {
        var generator = SplitMix64(seed: 0xD311)
        let events: [Event] = [
            .started, Self.head(200), Self.head(302, "/r"), .keptBodyOverflowed, .bodyFinished,
            .redirectDecided(followed: true), .redirectDecided(followed: false), .retryTimerFired,
            Self.head(503, retryAfter: "1"), Self.challenge(), .credentialDecided(retry: true), .exchangeFailed, .cancelRequested,
        ]
        // Statuses with a Location too: only a redirect status makes one a redirect.
        let plain: [(Int, String?)] = [(200, nil), (204, nil), (200, "/elsewhere"), (300, "/choice"), (304, nil), (305, "/p"), (404, nil), (429, nil), (500, nil), (503, nil)]
        for (status, _) in plain { #expect(!RedirectPolicy.isRedirect(status: status)) }
        for _ in 0..<300 {
            var machine = TaskStateMachine(retryPolicy: RetryPolicy(maximumDelay: 5, maximumAttempts: 3))
            for _ in 0..<Int(generator.next() % 10) {
                _ = machine.handle(events[Int(generator.next() % UInt64(events.count))])
            }
            for (status, location) in plain {
                var byFacts = machine
                var direct = machine
                let expected = byFacts.handle(Self.head(status, location))
                #expect(Array(direct.handleDeliverableHead()) == Array(expected), "\(status) in \(machine.state)")
                #expect(direct.state == byFacts.state)
                #expect(direct.redirectCount == byFacts.redirectCount && direct.retryCount == byFacts.retryCount)
                #expect(direct.authenticationCount == byFacts.authenticationCount)
            }
        }
    }

    @Test("isRedirect names the statuses a Location makes a redirect")
    func redirectStatuses() {
        let policy = RedirectPolicy()
        for status in 100...599 {
            let decision = policy.decide(status: status, location: "/next", requestURL: Self.url, method: "GET", redirectsSoFar: 0)
            let delivered: Bool
            if case .deliver = decision { delivered = true } else { delivered = false }
            #expect(delivered == !RedirectPolicy.isRedirect(status: status), "\(status)")
        }
    }

    // MARK: Authentication

    /// A 401 (or 407) head with a challenge the driver can answer.
    static func challenge(_ status: Int = 401) -> Event {
        .responseHeadReceived(.init(status: status, requestURL: url, method: "GET", challengesAuthentication: true))
    }

    static let authenticationScripts: [Script] = [
        Script(name: "a challenge answered with a credential", steps: [
            (.started, [.startExchange]),
            (challenge(), [.keepBodyAside]),
            (.bodyFinished, [.askForCredential]),
            (.credentialDecided(retry: true), [.startExchange]),
            (head(200), [.deliverResponse]),
            (.bodyFinished, [.finish(.success)]),
        ], final: .finished),
        Script(name: "a proxy challenge answered with a credential", steps: [
            (.started, [.startExchange]),
            (challenge(407), [.keepBodyAside]),
            (.bodyFinished, [.askForCredential]),
            (.credentialDecided(retry: true), [.startExchange]),
            (head(200), [.deliverResponse]),
            (.bodyFinished, [.finish(.success)]),
        ], final: .finished),
        Script(name: "no credential delivers the 401 and its body", steps: [
            (.started, [.startExchange]),
            (challenge(), [.keepBodyAside]),
            (.bodyFinished, [.askForCredential]),
            (.credentialDecided(retry: false), [.deliverResponse, .deliverKeptResponse, .finish(.success)]),
            (.credentialDecided(retry: true), []),
            (.bodyFinished, []),
        ], final: .finished),
        Script(name: "a wrong credential is challenged again", steps: [
            (.started, [.startExchange]),
            (challenge(), [.keepBodyAside]),
            (.bodyFinished, [.askForCredential]),
            (.credentialDecided(retry: true), [.startExchange]),
            (challenge(), [.keepBodyAside]),
            (.bodyFinished, [.askForCredential]),
            (.credentialDecided(retry: false), [.deliverResponse, .deliverKeptResponse, .finish(.success)]),
        ], final: .finished),
        Script(name: "a redirect, then a challenge", steps: [
            (.started, [.startExchange]),
            (head(302, "/login"), [.keepBodyAside]),
            (.bodyFinished, [.askRedirectDelegate(redirect(to: "/login"))]),
            (.redirectDecided(followed: true), [.startExchange]),
            (challenge(), [.keepBodyAside]),
            (.bodyFinished, [.askForCredential]),
            (.credentialDecided(retry: true), [.startExchange]),
            (head(200), [.deliverResponse]),
            (.bodyFinished, [.finish(.success)]),
        ], final: .finished),
        Script(name: "cancel while the credential is asked for", steps: [
            (.started, [.startExchange]),
            (challenge(), [.keepBodyAside]),
            (.bodyFinished, [.askForCredential]),
            (.cancelRequested, [.finish(.cancelled)]),
            (.credentialDecided(retry: true), []),
            (.cancelRequested, []),
        ], final: .finished),
        Script(name: "cancel while a challenge's body is kept goes through the exchange", steps: [
            (.started, [.startExchange]),
            (challenge(), [.keepBodyAside]),
            (.cancelRequested, [.cancelExchange]),
            (.exchangeFailed, [.finish(.exchangeFailed)]),
            (.credentialDecided(retry: true), []),
        ], final: .finished),
        Script(name: "a challenge body too large to keep is delivered", steps: [
            (.started, [.startExchange]),
            (challenge(), [.keepBodyAside]),
            (.keptBodyOverflowed, [.deliverResponse, .deliverKeptResponse]),
            (.credentialDecided(retry: true), []),
            (.bodyFinished, [.finish(.success)]),
        ], final: .finished),
        Script(name: "an exchange failure while the challenge's body is kept", steps: [
            (.started, [.startExchange]),
            (challenge(), [.keepBodyAside]),
            (.exchangeFailed, [.finish(.exchangeFailed)]),
        ], final: .finished),
        Script(name: "a 401 without a challenge Courier can answer is delivered", steps: [
            (.started, [.startExchange]),
            (head(401), [.deliverResponse]),
            (.bodyFinished, [.finish(.success)]),
        ], final: .finished),
        Script(name: "a 407 without a challenge Courier can answer is delivered", steps: [
            (.started, [.startExchange]),
            (head(407), [.deliverResponse]),
            (.credentialDecided(retry: true), []),
            (.bodyFinished, [.finish(.success)]),
        ], final: .finished),
        Script(name: "credentialDecided out of place does nothing", steps: [
            (.credentialDecided(retry: true), []),
            (.credentialDecided(retry: false), []),
            (.started, [.startExchange]),
            (.credentialDecided(retry: true), []),
            (challenge(), [.keepBodyAside]),
            (.credentialDecided(retry: true), []),
            (.credentialDecided(retry: false), []),
            (.bodyFinished, [.askForCredential]),
            (.exchangeFailed, []),
            (.deliveryFailed, []),
            (.bodyFinished, []),
            (.keptBodyOverflowed, []),
            (.redirectDecided(followed: true), []),
            (.retryTimerFired, []),
        ], final: .awaitingCredential),
        Script(name: "credentialDecided while a redirect is decided does nothing", steps: [
            (.started, [.startExchange]),
            (head(302, "/next"), [.keepBodyAside]),
            (.bodyFinished, [.askRedirectDelegate(redirect(to: "/next"))]),
            (.credentialDecided(retry: true), []),
            (.redirectDecided(followed: false), [.deliverResponse, .deliverKeptResponse, .finish(.success)]),
        ], final: .finished),
    ]

    @Test("authentication scripts", arguments: authenticationScripts)
    func runAuthentication(_ script: Script) {
        run(script)
    }

    @Test("an answered challenge counts; a refused one does not")
    func authenticationCount() {
        var machine = TaskStateMachine()
        #expect(machine.authenticationCount == 0)
        #expect(machine.handle(.started) == [.startExchange])
        #expect(machine.handle(Self.challenge()) == [.keepBodyAside])
        #expect(machine.handle(.bodyFinished) == [.askForCredential])
        #expect(machine.state == .awaitingCredential)
        #expect(machine.handle(.credentialDecided(retry: true)) == [.startExchange])
        #expect(machine.authenticationCount == 1)
        #expect(machine.state == .exchanging)
        #expect(machine.redirectCount == 0)
        #expect(machine.retryCount == 0)

        #expect(machine.handle(Self.challenge(407)) == [.keepBodyAside])
        #expect(machine.handle(.bodyFinished) == [.askForCredential])
        #expect(machine.handle(.credentialDecided(retry: false)) == [.deliverResponse, .deliverKeptResponse, .finish(.success)])
        #expect(machine.authenticationCount == 1)
    }

    @Test("after maximumChallengesPerTask answered challenges, the next is the result")
    func authenticationLimit() {
        let limit = AuthenticationEngine.maximumChallengesPerTask
        var machine = TaskStateMachine()
        #expect(machine.handle(.started) == [.startExchange])
        for attempt in 1...limit {
            #expect(machine.handle(Self.challenge()) == [.keepBodyAside], "attempt \(attempt)")
            #expect(machine.handle(.bodyFinished) == [.askForCredential])
            #expect(machine.handle(.credentialDecided(retry: true)) == [.startExchange])
            #expect(machine.authenticationCount == attempt)
        }
        #expect(machine.handle(Self.challenge()) == [.deliverResponse])
        #expect(machine.state == .receiving)
        #expect(machine.handle(.credentialDecided(retry: true)) == [])
        #expect(machine.handle(.bodyFinished) == [.finish(.success)])
        #expect(machine.authenticationCount == limit)
    }

    /// Random sequences with challenges: still one ending at most, nothing after it, every
    /// `startExchange` from a start, a followed redirect, a retry or a credential, every
    /// `askForCredential` from a finished body, and never more answered challenges than the limit.
    @Test("random sequences with challenges keep the invariants")
    func randomSequencesWithChallenges() {
        var generator = SplitMix64(seed: 0xA17F)
        let events: [Event] = [
            .started, Self.head(200), Self.head(401), Self.challenge(), Self.challenge(407), Self.head(302, "/r"),
            .keptBodyOverflowed, .bodyFinished, .bodyFinished, .credentialDecided(retry: true), .credentialDecided(retry: true),
            .credentialDecided(retry: false), .redirectDecided(followed: true), .redirectDecided(followed: false),
            .exchangeFailed, .deliveryFailed, .cancelRequested,
        ]
        for _ in 0..<2000 {
            var machine = TaskStateMachine()
            var finishes = 0
            for _ in 0..<64 {
                let event = generator.pick(events)
                let wasFinished = machine.isFinished
                let actions = machine.handle(event)
                if wasFinished { #expect(actions.isEmpty) }
                finishes += actions.filter { if case .finish = $0 { return true } else { return false } }.count
                if actions.contains(.startExchange) {
                    #expect(event == .started || event == .redirectDecided(followed: true) || event == .credentialDecided(retry: true))
                }
                if actions.contains(.askForCredential) {
                    #expect(event == .bodyFinished)
                    #expect(machine.state == .awaitingCredential)
                }
            }
            #expect(finishes <= 1)
            #expect(machine.authenticationCount <= AuthenticationEngine.maximumChallengesPerTask)
        }
    }
}
