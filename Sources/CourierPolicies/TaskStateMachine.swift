import Foundation

/// The life of one task across its exchanges: a redirect turns one task into several
/// exchanges, and the machine decides, from facts the driver reports, what happens next.
///
/// Design: the machine owns the phase, the redirect count and the redirect rules; the driver
/// (Courier's `TaskDriver`) owns the exchanges, the delegate calls and the bytes, and carries
/// out the returned actions in order. Events are facts (`responseHeadReceived`,
/// `bodyFinished`); actions are commands (`startExchange`, `finish`). An event that makes no
/// sense in the current state (a late callback of a cancelled exchange, say) returns no action.
public struct TaskStateMachine: Sendable {
    /// What a response asks for besides being delivered: another exchange.
    public enum FollowUp: Sendable, Equatable {
        /// A redirect to follow once the delegate agrees.
        case redirect(RedirectPolicy.Redirect)
        /// The same request again after this many seconds (``RetryPolicy``).
        case retry(after: Double)
        /// The same request again with a credential, once the delegate gives one (a 401/407).
        case authenticate
    }

    /// Where the task is.
    public enum State: Sendable, Equatable {
        /// Created, not resumed. Next: `exchanging` (started) or `finished` (cancelled).
        case idle
        /// A request is in the transport and its response head has not arrived. Next:
        /// `receiving`, `keepingBody` or `finished`.
        case exchanging
        /// A response that leads to another exchange arrived; its body is kept in case it
        /// becomes the result after all (a refused redirect, an unanswered challenge). Next:
        /// `awaitingRedirectDecision`, `waitingToRetry` or `awaitingCredential` (body complete), `receiving` (body too large to keep: delivered
        /// as the result) or `finished`.
        indirect case keepingBody(FollowUp)
        /// The redirect's delegate was asked. Next: `exchanging` (followed) or `finished`
        /// (refused: the redirect response is the result; or cancelled).
        indirect case awaitingRedirectDecision(RedirectPolicy.Redirect)
        /// Waiting for the retry delay. Next: `exchanging` or `finished` (cancelled).
        case waitingToRetry
        /// A challenge was put to the delegate. Next: `exchanging` (a credential to send) or
        /// `finished` (none: the 401/407 is the result; or cancelled).
        case awaitingCredential
        /// The final response is being delivered. Next: `finished`.
        case receiving
        /// Completed; nothing more happens.
        case finished
    }

    /// The facts of a response head that decide what follows it.
    public struct ResponseFacts: Sendable, Equatable {
        public var status: Int
        public var location: String?
        public var retryAfter: String?
        /// The URL and method of the request that got the response.
        public var requestURL: URL
        public var method: String
        /// True when the request body can be sent again (none, bytes or a file).
        public var bodyIsReplayable: Bool
        /// When the response arrived (wall clock), for a `Retry-After` date.
        public var receivedAt: Date
        /// The response is a 401/407 with a challenge Courier can answer (the driver reads the
        /// challenges with ``AuthenticationEngine``).
        public var challengesAuthentication: Bool

        public init(status: Int, location: String? = nil, retryAfter: String? = nil, requestURL: URL, method: String, bodyIsReplayable: Bool = true, receivedAt: Date = Date(timeIntervalSince1970: 0), challengesAuthentication: Bool = false) {
            self.challengesAuthentication = challengesAuthentication
            self.status = status
            self.location = location
            self.retryAfter = retryAfter
            self.requestURL = requestURL
            self.method = method
            self.bodyIsReplayable = bodyIsReplayable
            self.receivedAt = receivedAt
        }
    }

    /// Facts the driver reports.
    public enum Event: Sendable, Equatable {
        /// `resume()` was called for the first time.
        case started
        /// The final (non-1xx) head of the current exchange arrived.
        case responseHeadReceived(ResponseFacts)
        /// The body being kept grew past what is kept.
        case keptBodyOverflowed
        /// The current exchange's response body is complete.
        case bodyFinished
        /// The delegate answered a redirect: `followed` when a next request will be sent.
        case redirectDecided(followed: Bool)
        /// The loader itself reported a redirect to `Redirect` (a `URLProtocol`), in place of
        /// a response: the delegate decides, within the redirect limit.
        case redirectRequested(RedirectPolicy.Redirect)
        /// The retry delay is over.
        case retryTimerFired
        /// The challenge was answered: `retry` when a credential will be sent.
        case credentialDecided(retry: Bool)
        /// The current exchange failed (the transport's error is the driver's to keep).
        case exchangeFailed
        /// Delivering the body failed (decoding, writing the file); the exchange is still open.
        case deliveryFailed
        /// The user cancelled the task.
        case cancelRequested
    }

    /// How a task ends.
    public enum Ending: Sendable, Equatable {
        case success
        case cancelled
        indirect case redirectFailed(RedirectPolicy.Failure)
        case exchangeFailed
        case deliveryFailed
    }

    /// Commands for the driver, carried out in the order returned.
    public enum Action: Sendable, Equatable {
        /// Send the current request as a new exchange.
        case startExchange
        /// Hand the response head to the delivery sink; body bytes follow it there.
        case deliverResponse
        /// Keep the body bytes of this response aside.
        case keepBodyAside
        /// Ask the delegate whether to follow this redirect.
        indirect case askRedirectDelegate(RedirectPolicy.Redirect)
        /// Fire `retryTimerFired` after this many seconds.
        case scheduleRetry(after: Double)
        /// Put the response's challenge to the delegate (or answer it from what is known).
        case askForCredential
        /// Hand the body kept aside to the sink (after `deliverResponse`).
        case deliverKeptResponse
        /// Stop the current exchange.
        case cancelExchange
        /// Complete the task.
        case finish(Ending)
    }

    /// Up to three actions, in order, held inline: a task feeds the machine a few events per
    /// request, and an array for each answer would be a heap allocation on the hot path. The
    /// slots are plain actions and a count, not optionals: an `Action?` (a multi-payload enum
    /// in an optional) is destroyed through its type metadata, and a task destroyed some ten
    /// of them a request. A driver reads them by position (``count``, subscript).
    public struct Actions: Sequence, Sendable, Equatable, ExpressibleByArrayLiteral, CustomStringConvertible {
        // An unused slot holds `.keepBodyAside` (any case without a payload would do): always
        // the same one, so that equal lists are equal slot for slot.
        private var first = Action.keepBodyAside
        private var second = Action.keepBodyAside
        private var third = Action.keepBodyAside
        /// How many slots are used.
        public private(set) var count = 0

        public init() {}

        public init(_ first: Action) {
            self.first = first
            count = 1
        }

        public init(_ first: Action, _ second: Action) {
            self.first = first
            self.second = second
            count = 2
        }

        public init(_ first: Action, _ second: Action, _ third: Action) {
            self.first = first
            self.second = second
            self.third = third
            count = 3
        }

        /// For tests and tables; the machine itself uses the initializers above.
        public init(arrayLiteral elements: Action...) {
            precondition(elements.count <= 3, "at most three actions")
            count = elements.count
            if count > 0 { first = elements[0] }
            if count > 1 { second = elements[1] }
            if count > 2 { third = elements[2] }
        }

        public var isEmpty: Bool { count == 0 }

        /// The action at `position` (0 to ``count`` - 1).
        public subscript(position: Int) -> Action {
            precondition(position >= 0 && position < count, "no action at \(position)")
            switch position {
            case 0: return first
            case 1: return second
            default: return third
            }
        }

        public func makeIterator() -> Iterator {
            Iterator(actions: self)
        }

        /// Yields the actions in order, each copied out once, by position.
        public struct Iterator: IteratorProtocol {
            let actions: Actions
            var position = 0

            public mutating func next() -> Action? {
                guard position < actions.count else { return nil }
                defer { position += 1 }
                return actions[position]
            }
        }

        public var description: String { "\(Array(self))" }
    }

    public private(set) var state = State.idle
    /// Redirects followed so far.
    public private(set) var redirectCount = 0
    /// Retries made so far.
    public private(set) var retryCount = 0
    /// Challenges answered with a credential so far.
    public private(set) var authenticationCount = 0
    public let policy: RedirectPolicy
    public let retryPolicy: RetryPolicy

    public init(policy: RedirectPolicy = RedirectPolicy(), retryPolicy: RetryPolicy = .off) {
        self.policy = policy
        self.retryPolicy = retryPolicy
    }

    /// True once the task completed.
    public var isFinished: Bool {
        // `if case`, not `==`: the derived comparison of the indirect cases' payloads runs for
        // every call, and this is asked several times a request.
        if case .finished = state { return true }
        return false
    }

    /// The task's connection left HTTP for another task (a data task's `.becomeStream`): it
    /// is finished, with nothing left to do and no completion of its own.
    public mutating func handOver() {
        state = .finished
    }

    /// Feeds one fact; returns what to do, in order.
    ///
    /// Dispatches on the event first and tests the state with `if case`, which never copies the
    /// state's payload: this runs a few times per request.
    public mutating func handle(_ event: Event) -> Actions {
        if case .finished = state { return Actions() }
        switch event {
        case .started:
            guard case .idle = state else { return Actions() }
            state = .exchanging
            return Actions(.startExchange)

        case .responseHeadReceived(let facts):
            guard case .exchanging = state else { return Actions() }
            return headReceived(facts)

        case .keptBodyOverflowed:
            guard case .keepingBody = state else { return Actions() }
            state = .receiving
            return Actions(.deliverResponse, .deliverKeptResponse)

        case .bodyFinished:
            switch state {
            case .receiving:
                state = .finished
                return Actions(.finish(.success))
            case .keepingBody(.redirect(let redirect)):
                state = .awaitingRedirectDecision(redirect)
                return Actions(.askRedirectDelegate(redirect))
            case .keepingBody(.retry(let delay)):
                state = .waitingToRetry
                return Actions(.scheduleRetry(after: delay))
            case .keepingBody(.authenticate):
                state = .awaitingCredential
                return Actions(.askForCredential)
            default:
                return Actions()
            }

        case .redirectDecided(let followed):
            guard case .awaitingRedirectDecision = state else { return Actions() }
            if followed {
                redirectCount += 1
                state = .exchanging
                return Actions(.startExchange)
            }
            state = .finished
            return Actions(.deliverResponse, .deliverKeptResponse, .finish(.success))

        case .redirectRequested(let redirect):
            guard case .exchanging = state else { return Actions() }
            guard redirectCount < RedirectPolicy.maximumRedirects else {
                state = .finished
                return Actions(.cancelExchange, .finish(.redirectFailed(.tooManyRedirects(limit: RedirectPolicy.maximumRedirects))))
            }
            state = .awaitingRedirectDecision(redirect)
            return Actions(.askRedirectDelegate(redirect))

        case .credentialDecided(let retry):
            guard case .awaitingCredential = state else { return Actions() }
            if retry {
                authenticationCount += 1
                state = .exchanging
                return Actions(.startExchange)
            }
            state = .finished
            return Actions(.deliverResponse, .deliverKeptResponse, .finish(.success))

        case .retryTimerFired:
            guard case .waitingToRetry = state else { return Actions() }
            retryCount += 1
            state = .exchanging
            return Actions(.startExchange)

        case .exchangeFailed:
            switch state {
            case .exchanging, .keepingBody, .receiving:
                state = .finished
                return Actions(.finish(.exchangeFailed))
            default:
                return Actions()
            }

        case .deliveryFailed:
            switch state {
            case .keepingBody, .receiving:
                state = .finished
                return Actions(.cancelExchange, .finish(.deliveryFailed))
            default:
                return Actions()
            }

        case .cancelRequested:
            switch state {
            case .idle, .awaitingRedirectDecision, .waitingToRetry, .awaitingCredential:
                state = .finished
                return Actions(.finish(.cancelled))
            case .exchanging, .keepingBody, .receiving:
                // The exchange reports its cancellation as a failure, which finishes the task.
                return Actions(.cancelExchange)
            case .finished:
                return Actions()
            }
        }
    }

    /// A response head: a redirect to follow, a retry to wait for, a failure, or the result.
    private mutating func headReceived(_ facts: ResponseFacts) -> Actions {
        switch policy.decide(status: facts.status, location: facts.location, requestURL: facts.requestURL, method: facts.method, redirectsSoFar: redirectCount) {
        case .follow(let redirect):
            state = .keepingBody(.redirect(redirect))
            return Actions(.keepBodyAside)
        case .fail(let failure):
            state = .finished
            return Actions(.cancelExchange, .finish(.redirectFailed(failure)))
        case .deliver:
            if facts.challengesAuthentication && authenticationCount < AuthenticationEngine.maximumChallengesPerTask {
                state = .keepingBody(.authenticate)
                return Actions(.keepBodyAside)
            }
            if let delay = retryPolicy.delay(
                status: facts.status, retryAfter: facts.retryAfter, method: facts.method,
                bodyIsReplayable: facts.bodyIsReplayable, attemptsSoFar: retryCount, now: facts.receivedAt
            ) {
                state = .keepingBody(.retry(after: delay))
                return Actions(.keepBodyAside)
            }
            return receiveFinalResponse()
        }
    }

    /// The final head of the current exchange is a response that asks for nothing but to be
    /// delivered: its status is no redirect's (``RedirectPolicy/isRedirect(status:)``), it
    /// carries no challenge to answer and no `Retry-After`. What ``handle(_:)`` does with
    /// `.responseHeadReceived` for such a head, where every policy would say "deliver", without
    /// the facts: most responses are of this kind, and making the facts (the request's URL and
    /// method among them) and passing them through the event is work no rule would read.
    public mutating func handleDeliverableHead() -> Actions {
        guard case .exchanging = state else { return Actions() }
        return receiveFinalResponse()
    }

    private mutating func receiveFinalResponse() -> Actions {
        state = .receiving
        return Actions(.deliverResponse)
    }
}
