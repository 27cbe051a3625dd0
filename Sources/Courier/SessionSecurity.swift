import CourierSync
import CourierTLS
import CourierTransport
import Foundation

/// Turns the transport's TLS decisions into Apple's authentication challenges: server trust
/// (`NSURLAuthenticationMethodServerTrust`) and client certificates
/// (`NSURLAuthenticationMethodClientCertificate`). They go to the session delegate's
/// `urlSession(_:didReceive:completionHandler:)` first; when it does not implement that, to
/// the task delegate's task-level method; without either, default handling applies.
final class SessionSecurity: ConnectionSecurityDelegate, @unchecked Sendable {
    /// The session, held weakly (the session owns the transport that owns this object), for
    /// a challenge raised with no task to give it (a connection dialled for a request that
    /// was cancelled meanwhile). Only a session made with a delegate is held here (see
    /// `attach(_:)`); a task's challenge takes the session from the task's driver.
    private let owner = Mutex<WeakSession>(WeakSession())

    struct WeakSession {
        weak var session: URLSession?
    }

    /// Holds `session` for challenges without a task. A weak reference gives the session a
    /// side table, and with one every retain and release of the session takes the runtime's
    /// slow path, several a request: so a session without a delegate, which has no one to ask
    /// about such a challenge (it gets default handling), is not held.
    func attach(_ session: URLSession) {
        owner.withLock { $0.session = session }
    }

    /// The session to ask about a challenge on `task`: its driver's, else the one attached.
    private func session(for found: (task: URLSessionTask?, session: URLSession?)) -> URLSession? {
        found.session ?? owner.withLock { $0.session }
    }

    func evaluateServerTrust(_ request: ServerTrustRequest, completion: @escaping @Sendable (ServerTrustDecision) -> Void) {
        let defaultDecision: ServerTrustDecision
        switch request.verdict {
        case .success: defaultDecision = .accept
        case .failure(let failure): defaultDecision = .reject(failure)
        }
        let found = Self.task(exchangeDelegate: request.exchange?.delegate, owner: request.owner)
        guard let session = session(for: found) else {
            completion(defaultDecision)
            return
        }
        let trust = SecTrust(chain: request.chain, host: request.origin.host)
        let space = URLProtectionSpace(
            host: request.origin.host, port: Int(request.origin.port), protocol: NSURLProtectionSpaceHTTPS,
            realm: nil, authenticationMethod: NSURLAuthenticationMethodServerTrust
        )
        space.serverTrust = trust
        ChallengeRouter.route(space, session: session, task: found.task) { disposition, credential in
            switch disposition {
            case .useCredential:
                if let accepted = credential?.trust, accepted === trust {
                    completion(.accept)
                } else if credential?.trust != nil {
                    // A trust from another challenge: accept only if it is the same chain.
                    completion(credential!.trust!.chain == trust.chain ? .accept : .reject(.untrusted(code: 0, reason: "the credential is for another server trust")))
                } else {
                    completion(.reject(request.verdict.failure ?? .untrusted(code: 0, reason: "the delegate answered without a server-trust credential")))
                }
            case .performDefaultHandling:
                completion(defaultDecision)
            case .cancelAuthenticationChallenge:
                completion(.cancel)
            case .rejectProtectionSpace:
                completion(.reject(request.verdict.failure ?? .untrusted(code: 0, reason: "the delegate rejected the protection space")))
            }
        }
    }

    func chooseClientIdentity(_ request: ClientIdentityRequest, completion: @escaping @Sendable (ClientIdentityDecision) -> Void) {
        let found = Self.task(exchangeDelegate: request.exchange?.delegate, owner: request.owner)
        guard let session = session(for: found) else {
            completion(.none)
            return
        }
        let space = URLProtectionSpace(
            host: request.origin.host, port: Int(request.origin.port), protocol: NSURLProtectionSpaceHTTPS,
            realm: nil, authenticationMethod: NSURLAuthenticationMethodClientCertificate
        )
        space.distinguishedNames = request.acceptableIssuers.isEmpty ? nil : request.acceptableIssuers.map { Data($0) }
        ChallengeRouter.route(space, session: session, task: found.task) { disposition, credential in
            switch disposition {
            case .useCredential:
                guard let identity = credential?.identity?.identity else {
                    completion(.none)
                    return
                }
                var chosen = identity
                let extra = credential?.certificates.compactMap { ($0 as? SecCertificate)?.certificate } ?? []
                if !extra.isEmpty { chosen.intermediates = extra }
                completion(.identity(chosen))
            case .performDefaultHandling, .rejectProtectionSpace:
                completion(.none)
            case .cancelAuthenticationChallenge:
                completion(.cancel)
            }
        }
    }
}

/// The task a connection's TLS challenge is raised on, and its session: the one whose exchange
/// (a data, upload or download task's, or a WebSocket handshake) or whose own connection (a
/// stream task's) it is.
extension SessionSecurity {
    static func task(
        exchangeDelegate: (any HTTPExchangeDelegate)?, owner: (any ConnectionOwner)?
    ) -> (task: URLSessionTask?, session: URLSession?) {
        if let driver = exchangeDelegate as? TaskDriver { return (driver.task, driver.session) }
        if let socket = exchangeDelegate as? WebSocketDriver { return (socket.task, socket.session) }
        if let stream = owner as? StreamTaskDriver { return (stream.task, stream.session) }
        return (nil, nil)
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let failure) = self { return failure }
        return nil
    }
}

/// Marks the answer of a delegate method left to its default implementation, so the router
/// knows to ask the next delegate. Never seen outside Courier.
enum ChallengeDefaults {
    static let unhandled = URLCredential(user: "", password: "", persistence: .none)
}

/// Delivers one challenge: session delegate, then task delegate, then default handling, on the
/// session's delegate queue; answers exactly once.
enum ChallengeRouter {
    typealias Answer = @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void

    static func route(_ space: URLProtectionSpace, session: URLSession, task: URLSessionTask?, answer: @escaping Answer) {
        let sessionDelegate = session.delegate
        let taskDelegate = task?.delegate ?? (sessionDelegate as? URLSessionTaskDelegate)
        guard sessionDelegate != nil || taskDelegate != nil else {
            answer(.performDefaultHandling, nil)
            return
        }
        let once = Once(answer)
        let sender = ChallengeSender(once)
        // Built on the delegate queue (the storage may read its file; never on an event loop).
        // A connection-level challenge has failed before only if the delegate's answer was
        // refused, which ends the connection: its count is 0. The proposed credential is the
        // storage's default for the space, as for any challenge.
        let makeChallenge: @Sendable () -> URLAuthenticationChallenge = {
            URLAuthenticationChallenge(
                protectionSpace: space, proposedCredential: session.frozenConfiguration.urlCredentialStorage?.defaultCredential(for: space),
                previousFailureCount: 0, failureResponse: nil, error: nil, sender: sender
            )
        }
        let askTask: @Sendable (URLAuthenticationChallenge) -> Void = { challenge in
            guard let task, let taskDelegate else {
                once(.performDefaultHandling, nil)
                return
            }
            taskDelegate.urlSession(session, task: task, didReceive: challenge) { disposition, credential in
                if credential === ChallengeDefaults.unhandled {
                    once(.performDefaultHandling, nil)
                } else {
                    once(disposition, credential)
                }
            }
        }
        session.delegateQueue.addOperation {
            let challenge = makeChallenge()
            guard let sessionDelegate else {
                askTask(challenge)
                return
            }
            sessionDelegate.urlSession(session, didReceive: challenge) { disposition, credential in
                if credential === ChallengeDefaults.unhandled {
                    session.delegateQueue.addOperation { askTask(challenge) }
                } else {
                    once(disposition, credential)
                }
            }
        }
    }
}

extension ChallengeRouter {
    /// Delivers a task-level challenge (HTTP authentication) to the task delegate — the
    /// task's own, whose default passes it to the session delegate's task-level method — on
    /// the delegate queue; without one, or when neither implements it, default handling.
    static func routeToTask(
        _ space: URLProtectionSpace, session: URLSession, task: URLSessionTask?, proposedCredential: URLCredential?,
        previousFailureCount: Int, failureResponse: URLResponse?, answer: @escaping Answer
    ) {
        guard let task, let taskDelegate = task.delegate ?? (session.delegate as? URLSessionTaskDelegate) else {
            answer(.performDefaultHandling, nil)
            return
        }
        let once = Once(answer)
        let challenge = URLAuthenticationChallenge(
            protectionSpace: space, proposedCredential: proposedCredential, previousFailureCount: previousFailureCount,
            failureResponse: failureResponse, error: nil, sender: ChallengeSender(once)
        )
        session.delegateQueue.addOperation {
            taskDelegate.urlSession(session, task: task, didReceive: challenge) { disposition, credential in
                if credential === ChallengeDefaults.unhandled {
                    once(.performDefaultHandling, nil)
                } else {
                    once(disposition, credential)
                }
            }
        }
    }
}

/// Calls the wrapped answer the first time only.
final class Once: @unchecked Sendable {
    private let answer = Mutex<ChallengeRouter.Answer?>(nil)

    init(_ answer: @escaping ChallengeRouter.Answer) {
        self.answer.withLock { $0 = answer }
    }

    func callAsFunction(_ disposition: URLSession.AuthChallengeDisposition, _ credential: URLCredential?) {
        let taken = answer.withLock { stored -> ChallengeRouter.Answer? in
            defer { stored = nil }
            return stored
        }
        taken?(disposition, credential)
    }
}

/// The sender of Courier's challenges: the old answering methods, routed to the same answer.
final class ChallengeSender: NSObject, URLAuthenticationChallengeSender, @unchecked Sendable {
    private let once: Once

    init(_ once: Once) {
        self.once = once
    }

    func use(_ credential: URLCredential, for challenge: URLAuthenticationChallenge) { once(.useCredential, credential) }
    func continueWithoutCredential(for challenge: URLAuthenticationChallenge) { once(.useCredential, nil) }
    func cancel(_ challenge: URLAuthenticationChallenge) { once(.cancelAuthenticationChallenge, nil) }
    func performDefaultHandling(for challenge: URLAuthenticationChallenge) { once(.performDefaultHandling, nil) }
    func rejectProtectionSpaceAndContinue(with challenge: URLAuthenticationChallenge) { once(.rejectProtectionSpace, nil) }
}
