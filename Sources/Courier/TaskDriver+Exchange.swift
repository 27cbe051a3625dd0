import CourierCore
import CourierHTTP1
import CourierPolicies
import CourierSync
import CourierTransport
import Foundation
import Logging

/// What the transport reports of the current exchange (on an event loop): the head, the body,
/// the end or the failure, each turned into the machine's next event.
extension TaskDriver {
    func exchange(_ exchange: HTTPExchange, didSendBodyBytes totalBytesSent: Int64) {
        guard let task, state.withLock({ $0.exchange === exchange && !$0.machine.isFinished }) else { return }
        let (previous, expected) = task.storage.withLock { storage -> (Int64, Int64) in
            let previous = storage.countOfBytesSent
            storage.countOfBytesSent = totalBytesSent
            return (previous, storage.countOfBytesExpectedToSend)
        }
        guard let delegate = Self.taskDelegate(of: task, in: session) else { return }
        let session = self.session
        enqueue {
            delegate.urlSession(session, task: task, didSendBodyData: totalBytesSent - previous, totalBytesSent: totalBytesSent, totalBytesExpectedToSend: expected)
        }
    }

    /// An interim head (103 Early Hints, say) goes to the task delegate's
    /// `didReceiveInformationalResponse`, on the delegate queue, before the final response.
    func exchange(_ exchange: HTTPExchange, didReceiveInformationalHead head: HTTPResponseHead) {
        let url = state.withLock { state in state.exchange === exchange ? state.request?.url : nil }
        guard let url, let task, let delegate = taskDelegate else { return }
        let response = HTTPURLResponse(url: url, head: head)
        let session = self.session
        enqueue { delegate.urlSession(session, task: task, didReceiveInformationalResponse: response) }
    }

    /// Connection progress, for a task delegate that asks for it, on the delegate queue.
    func exchange(_ exchange: HTTPExchange, didMakeProgress progress: ConnectionProgress) {
        guard let task, let delegate = taskDelegate as? CourierConnectionProgressDelegate,
            let progress = CourierConnectionProgress(progress)
        else { return }
        let session = self.session
        enqueue { delegate.urlSession(session, task: task, courierConnectionProgress: progress) }
    }

    func exchange(_ exchange: HTTPExchange, didReceiveHead head: HTTPResponseHead) {
        if refusesResumeRange(head, exchange: exchange) { return }
        var storedBody: Data?
        var staleInstead: CachedURLResponse?
        // Cookies first: whatever follows this response (a redirect, a retry with a
        // credential) carries the ones it set.
        if head.fields.contains("Set-Cookie") {
            let (current, request) = state.withLock { state in (state.exchange === exchange, state.request) }
            if current, let url = request?.url { storeCookies(from: head, url: url, request: request) }
        }
        var confirmed = false
        let actions = state.withLock { state -> TaskStateMachine.Actions in
            guard state.exchange === exchange, let url = state.request?.url else { return TaskStateMachine.Actions() }
            if let fallback = staleAnswer(forFailureStatus: head.status, in: &state) {
                // The origin answered 5xx: the stale stored response answers instead.
                state.exchange = nil
                staleInstead = fallback
                return TaskStateMachine.Actions()
            }
            var response = HTTPURLResponse(url: url, head: head)
            if let (merged, body) = mergedNotModified(head, url: url, in: &state) {
                // A 304 to the cache's conditional request: the stored response, refreshed.
                response = merged
                storedBody = body
            } else {
                prepareStoring(response, in: &state)
            }
            state.response = response
            let retryAfter = head.status == 429 || head.status == 503 ? head.fields.first("Retry-After") : nil
            // Inside a tunnel the origin answers: its 407 is a response, never the proxy's challenge.
            let proxyMayChallenge = state.proxy.map { !$0.isTunnel || state.tunnelRefused } ?? false
            let challenges = readChallenges(head, viaProxy: state.proxy != nil, proxyMayChallenge: proxyMayChallenge, in: &state)
            confirmed = state.authentication.confirmedServer || state.authentication.confirmedProxy
            // Most responses ask for nothing but their delivery: the machine is told so without
            // the facts the policies would read.
            if !challenges, retryAfter == nil, !RedirectPolicy.isRedirect(status: response.statusCode) {
                return state.machine.handleDeliverableHead()
            }
            let location = (300..<400).contains(response.statusCode) ? response.fields.first("Location") : nil
            return state.machine.handle(.responseHeadReceived(.init(
                status: response.statusCode, location: location, retryAfter: retryAfter, requestURL: url,
                method: state.request?.httpMethod ?? "GET", bodyIsReplayable: retryAfter == nil || Self.isReplayable(state.bodySource, state.request),
                receivedAt: retryAfter == nil ? Date(timeIntervalSince1970: 0) : Date(), challengesAuthentication: challenges
            )))
        }
        if let staleInstead {
            exchange.cancel()
            answerFromCache(staleInstead)
            return
        }
        if confirmed { rememberConfirmedCredentials() }
        run(actions)
        if let storedBody { deliverStoredBody(storedBody) }
    }

    /// Counts body bytes as received (as on the wire, before decoding), for the task's
    /// counter and its progress.
    func countReceived(_ count: Int) {
        guard let task else { return }
        let (received, progress) = task.storage.withLock { storage -> (Int64, Progress?) in
            storage.countOfBytesReceived += Int64(count)
            return (storage.countOfBytesReceived, storage.progress)
        }
        progress?.completedUnitCount = received
    }

    func exchange(_ exchange: HTTPExchange, didReceiveBodyBytes bytes: UnsafeRawBufferPointer) {
        countReceived(bytes.count)
        enum Route { case stale, keep, overflow, deliver(ContentDecoder?) }
        let route = state.withLock { state -> Route in
            guard state.exchange === exchange else { return .stale }
            guard case .keepingBody = state.machine.state else {
                // Undecoded bytes count now; a decoder's output is counted as it comes.
                if state.decoder == nil {
                    state.decodedBytes += Int64(bytes.count)
                    if state.cache.collected != nil { collectForCache(bytes, in: &state) }
                }
                return .deliver(state.decoder)
            }
            state.keptBody.append(contentsOf: bytes)
            return state.keptBody.count > Self.maxKeptRedirectBytes ? .overflow : .keep
        }
        let decoder: ContentDecoder?
        switch route {
        case .stale, .keep:
            return
        case .overflow:
            run(state.withLock { $0.machine.handle(.keptBodyOverflowed) })
            return
        case .deliver(let current):
            decoder = current
        }
        deliverBody(bytes, from: exchange, decoder: decoder)
    }

    func exchange(_ exchange: HTTPExchange, didCompleteWithTrailers trailers: HTTPFields?, metrics: ExchangeMetrics) {
        let actions = state.withLock { state -> TaskStateMachine.Actions in
            guard state.exchange === exchange else { return TaskStateMachine.Actions() }
            record(metrics, in: &state)
            state.exchange = nil
            return state.machine.handle(.bodyFinished)
        }
        run(actions)
    }

    func exchange(_ exchange: HTTPExchange, didFailWith error: TransportError, metrics: ExchangeMetrics) {
        if case .dial(.proxy(.tunnelRefused(_, let head, _, let sentAuthorization))) = error, head.status == 407,
           let challenge = tunnelChallenge(head, sentAuthorization: sentAuthorization, exchange: exchange) {
            switch challenge {
            case .notOurs:
                // The tunnel was asked for with another request's credential: this request
                // goes again with its own, and its credential is not counted as refused.
                startExchange()
            case .ask(let proxyHead):
                // Answered as a 407 response would be, from the status and the challenges
                // alone: no other field of the proxy's reply (a Set-Cookie) and no body reaches
                // the origin's cookies, cache or delegate.
                self.exchange(exchange, didReceiveHead: proxyHead)
                self.exchange(exchange, didCompleteWithTrailers: nil, metrics: metrics)
            }
            return
        }
        let url = currentURL
        var stale: CachedURLResponse?
        let actions = state.withLock { state -> TaskStateMachine.Actions in
            guard state.exchange === exchange else { return TaskStateMachine.Actions() }
            record(metrics, in: &state)
            if case .exchanging = state.machine.state, !state.cancelRequested, let fallback = staleAnswer(forFailureStatus: nil, in: &state) {
                state.exchange = nil
                stale = fallback
                return TaskStateMachine.Actions()
            }
            if state.failure == nil { state.failure = .from(error, url: url) }
            return state.machine.handle(.exchangeFailed)
        }
        if let stale {
            answerFromCache(stale)
            return
        }
        run(actions)
    }

    /// True when the body can be sent again: none, bytes, or a file (opened anew); not a stream.
    static func isReplayable(_ source: BodySource, _ request: URLRequest?) -> Bool {
        if case .request = source, let request { return request.httpBody != nil || request.httpBodyStream == nil }
        return true
    }

    /// Adds the transaction of a finished exchange, when a task delegate will see metrics.
    func record(_ metrics: ExchangeMetrics, in state: inout State) {
        guard state.collectsMetrics, let request = state.request else { return }
        state.transactions.append(URLSessionTaskTransactionMetrics(
            request: state.transportRequest.map { Self.wireRequest(request, $0) } ?? request,
            response: state.response, metrics: metrics, bodyBytesAfterDecoding: state.decodedBytes
        ))
    }
}
