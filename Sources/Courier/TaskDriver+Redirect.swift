import CourierPolicies
import Foundation

/// Following a redirect: the next request is built from the policy's decision, offered to the
/// delegate (`willPerformHTTPRedirection`: task delegate, then session delegate), given a new
/// body stream when it needs one (`needNewBodyStream`), and sent.
extension TaskDriver {
    /// Builds the next request and asks the delegate about it; without a task delegate the
    /// redirect is followed as proposed.
    func askRedirectDelegate(_ redirect: RedirectPolicy.Redirect) {
        let (current, anyResponse, requested) = state.withLock { state -> (URLRequest?, URLResponse?, URLRequest?) in
            // A body dropped with the method stays dropped, whatever the upload gave.
            if redirect.bodyChange == .dropAndUseGET { state.bodySource = .request }
            defer { state.protocolRedirect = nil }
            return (state.request, state.response, state.protocolRedirect)
        }
        let response = anyResponse as? HTTPURLResponse
        if let requested {
            // A URLProtocol's redirect: its request is the proposal, as it is. Only an HTTP
            // response is put to the delegate (the method takes one); another is followed.
            guard let response, let delegate = taskDelegate, let task else {
                redirectAnswered(requested, keepsBody: false)
                return
            }
            let session = self.session
            enqueue { [self] in
                delegate.urlSession(session, task: task, willPerformHTTPRedirection: response, newRequest: requested) { [self] chosen in
                    redirectAnswered(chosen, keepsBody: false)
                }
            }
            return
        }
        guard let current, let response else {
            failRedirect(.courier(.badServerResponse, "The redirect has no request or response to follow.", url: originalURL))
            return
        }
        let proposed = Self.nextRequest(after: current, redirect)
        logger.debug("redirect", metadata: [
            "task": "\(identifier)", "status": "\(response.statusCode)", "to": "\(LogRedaction.url(redirect.url))",
            "method": "\(redirect.method)", "crossOrigin": "\(redirect.isCrossOrigin)",
        ])
        guard let delegate = taskDelegate, let task else {
            redirectAnswered(proposed, keepsBody: redirect.bodyChange == .keep)
            return
        }
        let session = self.session
        enqueue { [self] in
            delegate.urlSession(session, task: task, willPerformHTTPRedirection: response, newRequest: proposed) { [self] chosen in
                redirectAnswered(chosen, keepsBody: redirect.bodyChange == .keep)
            }
        }
    }

    /// The delegate's answer: nil refuses (the redirect response is the result), a request is
    /// loaded next. A streamed body is asked for again when the request still needs one.
    private func redirectAnswered(_ chosen: URLRequest?, keepsBody: Bool) {
        guard let next = chosen else {
            logger.debug("redirect refused", metadata: ["task": "\(identifier)"])
            run(state.withLock { $0.machine.handle(.redirectDecided(followed: false)) })
            return
        }
        let source = state.withLock { $0.bodySource }
        if keepsBody, case .request = source, next.httpBody == nil, next.httpBodyStream != nil {
            // The stream was read by the last exchange: the delegate must give a new one.
            guard let delegate = taskDelegate, let task else {
                failRedirect(.courier(.requestBodyStreamExhausted, "The request body stream cannot be sent again for the redirect: no delegate gives a new one (urlSession(_:task:needNewBodyStream:)).", url: next.url))
                return
            }
            let session = self.session
            enqueue { [self] in
                delegate.urlSession(session, task: task, needNewBodyStream: { [self] stream in
                    guard let stream else {
                        failRedirect(.courier(.requestBodyStreamExhausted, "The delegate gave no new body stream for the redirect.", url: next.url))
                        return
                    }
                    var resent = next
                    resent.httpBodyStream = stream
                    follow(resent)
                })
            }
            return
        }
        follow(next)
    }

    /// Sends `next` as the following hop.
    private func follow(_ next: URLRequest) {
        let actions = state.withLock { state -> TaskStateMachine.Actions in
            // Once only: a delegate that answers twice changes nothing the second time.
            guard case .awaitingRedirectDecision = state.machine.state else { return TaskStateMachine.Actions() }
            state.request = next
            state.keptBody = Data()
            state.response = nil
            return state.machine.handle(.redirectDecided(followed: true))
        }
        guard !actions.isEmpty else { return }
        task?.storage.withLock { $0.currentRequest = next }
        run(actions)
    }

    /// A redirect that cannot go on fails the task while it waits for its decision.
    private func failRedirect(_ error: URLError) {
        let actions = state.withLock { state -> TaskStateMachine.Actions in
            guard !state.machine.isFinished else { return TaskStateMachine.Actions() }
            state.failure = error
            return state.machine.handle(.cancelRequested)
        }
        run(actions)
    }

    /// The request the redirect proposes: the current one with the new URL and method, its
    /// body dropped when the method became GET, and the fields the policy removes (content
    /// fields with the body; credentials, cookies and configured secrets on another origin).
    static func nextRequest(after current: URLRequest, _ redirect: RedirectPolicy.Redirect) -> URLRequest {
        var next = current
        next.url = redirect.url
        next.httpMethod = redirect.method
        if redirect.bodyChange == .dropAndUseGET {
            next.httpBody = nil
            next.httpBodyStream = nil
        }
        if !redirect.removedFieldNames.isEmpty {
            for name in (current.allHTTPHeaderFields ?? [:]).keys where redirect.removedFieldNames.contains(name.lowercased()) {
                next.setValue(nil, forHTTPHeaderField: name)
            }
        }
        return next
    }
}
