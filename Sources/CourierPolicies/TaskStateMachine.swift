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
    /// Where the task is.
    public enum State: Sendable, Equatable {
        /// Created, not resumed. Next: `exchanging` (started) or `finished` (cancelled).
        case idle
        /// A request is in the transport and its response head has not arrived. Next:
        /// `receiving`, `keepingRedirect` or `finished`.
        case exchanging
        /// A redirect to follow arrived; its body is being kept in case the delegate refuses
        /// the redirect. Next: `awaitingRedirectDecision` (body complete), `receiving` (body too
        /// large to keep: delivered as the result) or `finished`.
        case keepingRedirect(RedirectPolicy.Redirect)
        /// The redirect's delegate was asked. Next: `exchanging` (followed) or `finished`
        /// (refused: the redirect response is the result; or cancelled).
        case awaitingRedirectDecision(RedirectPolicy.Redirect)
        /// The final response is being delivered. Next: `finished`.
        case receiving
        /// Completed; nothing more happens.
        case finished
    }

    /// Facts the driver reports.
    public enum Event: Sendable, Equatable {
        /// `resume()` was called for the first time.
        case started
        /// The final (non-1xx) head of the current exchange arrived.
        case responseHeadReceived(status: Int, location: String?, requestURL: URL, method: String)
        /// The redirect body being kept grew past what is kept.
        case redirectBodyOverflowed
        /// The current exchange's response body is complete.
        case bodyFinished
        /// The delegate answered a redirect: `followed` when a next request will be sent.
        case redirectDecided(followed: Bool)
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
        case redirectFailed(RedirectPolicy.Failure)
        case exchangeFailed
        case deliveryFailed
    }

    /// Commands for the driver, carried out in the order returned.
    public enum Action: Sendable, Equatable {
        /// Send the current request as a new exchange.
        case startExchange
        /// Hand the response head to the delivery sink; body bytes follow it there.
        case deliverResponse
        /// Keep the body bytes of this redirect response aside.
        case keepRedirectBody
        /// Ask the delegate whether to follow this redirect.
        case askRedirectDelegate(RedirectPolicy.Redirect)
        /// Hand the kept redirect response and its body so far to the sink.
        case deliverKeptResponse
        /// Stop the current exchange.
        case cancelExchange
        /// Complete the task.
        case finish(Ending)
    }

    public private(set) var state = State.idle
    /// Redirects followed so far.
    public private(set) var redirectCount = 0
    public let policy: RedirectPolicy

    public init(policy: RedirectPolicy = RedirectPolicy()) {
        self.policy = policy
    }

    /// True once the task completed.
    public var isFinished: Bool { state == .finished }

    /// Feeds one fact; returns what to do, in order.
    public mutating func handle(_ event: Event) -> [Action] {
        switch (state, event) {
        case (.finished, _):
            return []

        case (.idle, .started):
            state = .exchanging
            return [.startExchange]
        case (.idle, .cancelRequested):
            state = .finished
            return [.finish(.cancelled)]

        case (.exchanging, .responseHeadReceived(let status, let location, let url, let method)):
            switch policy.decide(status: status, location: location, requestURL: url, method: method, redirectsSoFar: redirectCount) {
            case .deliver:
                state = .receiving
                return [.deliverResponse]
            case .follow(let redirect):
                state = .keepingRedirect(redirect)
                return [.keepRedirectBody]
            case .fail(let failure):
                state = .finished
                return [.cancelExchange, .finish(.redirectFailed(failure))]
            }

        case (.keepingRedirect, .redirectBodyOverflowed):
            state = .receiving
            return [.deliverResponse, .deliverKeptResponse]
        case (.keepingRedirect(let redirect), .bodyFinished):
            state = .awaitingRedirectDecision(redirect)
            return [.askRedirectDelegate(redirect)]
        case (.receiving, .bodyFinished):
            state = .finished
            return [.finish(.success)]

        case (.awaitingRedirectDecision, .redirectDecided(let followed)):
            if followed {
                redirectCount += 1
                state = .exchanging
                return [.startExchange]
            }
            state = .finished
            return [.deliverResponse, .deliverKeptResponse, .finish(.success)]
        case (.awaitingRedirectDecision, .cancelRequested):
            state = .finished
            return [.finish(.cancelled)]

        case (.exchanging, .exchangeFailed), (.keepingRedirect, .exchangeFailed), (.receiving, .exchangeFailed):
            state = .finished
            return [.finish(.exchangeFailed)]
        case (.keepingRedirect, .deliveryFailed), (.receiving, .deliveryFailed):
            state = .finished
            return [.cancelExchange, .finish(.deliveryFailed)]
        case (.exchanging, .cancelRequested), (.keepingRedirect, .cancelRequested), (.receiving, .cancelRequested):
            // The exchange reports its cancellation as a failure, which finishes the task.
            return [.cancelExchange]

        default:
            return []
        }
    }
}
