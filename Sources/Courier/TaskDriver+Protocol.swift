import CourierPolicies
import Foundation

/// Requests loaded by a `URLProtocol` subclass (the configuration's `protocolClasses`, or the
/// registered classes for the shared session). The load stands in for an exchange, as a
/// `data:` or `file:` load does: the machine sees a final response, the sink gets the
/// protocol's response and bytes, so every delivery mode works. What the protocol reports
/// is taken as it is: its response is not decoded, redirected, retried or authenticated by
/// the session; its redirect goes to the delegate; its error completes the task unchanged.
extension TaskDriver {
    /// Starts `type` on the current request: its canonical form becomes the task's
    /// `currentRequest`, the instance gets the body the task sends and the session cache's
    /// response for the request.
    func startProtocolLoad(_ type: URLProtocol.Type, task: URLSessionTask, request: URLRequest) {
        let canonical = type.canonicalRequest(for: request)
        var loaded = canonical
        let source = state.withLock { $0.bodySource }
        switch source {
        case .data(let data): loaded.httpBody = data
        case .file(let file): loaded.httpBodyStream = InputStream(url: file)
        case .request, .delegateStream: break
        }
        let cache = session.cache
        // Entries over 5% of the cache's memory stay out of it (as URLCache does).
        let collectLimit = cache.map { max($0.memoryCapacity / 20, 0) } ?? 0
        let load = URLProtocolLoad(driver: self, collectLimit: collectLimit)
        let proceed = state.withLock { state -> Bool in
            guard !state.machine.isFinished else { return false }
            state.request = canonical
            state.exchange = nil
            state.protocolLoad = load
            state.response = nil
            state.decoder = nil
            state.decodedBytes = 0
            return true
        }
        guard proceed else { return }
        task.storage.withLock { storage in
            storage.currentRequest = canonical
            storage.countOfBytesExpectedToSend = Int64(loaded.httpBody?.count ?? 0)
        }
        logger.debug("URLProtocol load", metadata: ["task": "\(identifier)", "class": "\(type)", "url": "\(LogRedaction.url(canonical.url))"])
        let usesCache = canonical.cachePolicy != .reloadIgnoringLocalCacheData && canonical.cachePolicy != .reloadIgnoringLocalAndRemoteCacheData
        load.start { [loaded] client in
            let cached = usesCache ? cache?.cachedResponse(for: loaded) : nil
            let instance = type.init(request: loaded, cachedResponse: cached, client: client)
            instance.task = task
            return instance
        }
        // A cancel that came before the load was known is applied now.
        if state.withLock({ $0.cancelRequested }) { cancelProtocolLoad(load) }
    }

    /// Cancels a protocol load: it is stopped and the task fails as a cancelled exchange does.
    func cancelProtocolLoad(_ load: URLProtocolLoad) {
        let current = state.withLock { $0.protocolLoad === load }
        guard current else { return }
        load.stop()
        fail(.courier(.cancelled, "cancelled", url: currentURL), with: .exchangeFailed)
    }

    // MARK: The client's reports

    func protocolResponded(_ load: URLProtocolLoad, _ response: URLResponse) {
        let actions = state.withLock { state -> TaskStateMachine.Actions in
            guard state.protocolLoad === load, !state.machine.isFinished, let request = state.request else { return TaskStateMachine.Actions() }
            state.response = response
            state.decoder = nil
            state.decodedBytes = 0
            let url = response.url ?? request.url ?? URL(fileURLWithPath: "/")
            return state.machine.handle(.responseHeadReceived(.init(status: 200, requestURL: url, method: request.httpMethod ?? "GET")))
        }
        run(actions)
    }

    func protocolLoaded(_ load: URLProtocolLoad, _ data: Data) {
        guard state.withLock({ $0.protocolLoad === load && !$0.machine.isFinished }) else { return }
        countLocalBytes(data.count)
        data.withUnsafeBytes { deliverBody($0, from: nil, decoder: nil) }
    }

    /// The load completed; `cacheable` is its body when the protocol allowed storing it.
    func protocolFinished(_ load: URLProtocolLoad, cacheable: (Data, URLCache.StoragePolicy)?) {
        let actions = state.withLock { state -> TaskStateMachine.Actions in
            guard state.protocolLoad === load else { return TaskStateMachine.Actions() }
            if let (body, policy) = cacheable, let response = state.response {
                state.cache.pending = CachedURLResponse(response: response, data: body, userInfo: nil, storagePolicy: policy)
            }
            return state.machine.handle(.bodyFinished)
        }
        run(actions)
    }

    /// The load failed: the task completes with `error` as the protocol gave it.
    func protocolFailed(_ load: URLProtocolLoad, _ error: any Error) {
        let actions = state.withLock { state -> TaskStateMachine.Actions in
            guard state.protocolLoad === load else { return TaskStateMachine.Actions() }
            if state.failure == nil {
                state.failure = error as? URLError ?? .courier(.unknown, "The URLProtocol failed: \(error)", url: state.request?.url)
                state.reportedError = error
            }
            return state.machine.handle(.exchangeFailed)
        }
        run(actions)
    }

    /// The protocol redirected the load: the delegate decides on `request` as it is
    /// (`willPerformHTTPRedirection` for an HTTP response); refused, `response` is the result.
    func protocolRedirected(_ load: URLProtocolLoad, to request: URLRequest, response: URLResponse) {
        let actions = state.withLock { state -> TaskStateMachine.Actions in
            guard state.protocolLoad === load, let url = request.url else { return TaskStateMachine.Actions() }
            state.response = response
            state.protocolRedirect = request
            let from = state.request?.url
            let crossOrigin = from.map { !Self.sameOrigin($0, url) } ?? true
            let redirect = RedirectPolicy.Redirect(url: url, method: request.httpMethod ?? "GET", bodyChange: .keep, isCrossOrigin: crossOrigin, removedFieldNames: [])
            return state.machine.handle(.redirectRequested(redirect))
        }
        if actions.isEmpty, request.url == nil {
            fail(.courier(.badURL, "The URLProtocol redirected to a request without a URL.", url: currentURL), with: .exchangeFailed)
            return
        }
        run(actions)
    }

    /// Puts a protocol's challenge to the delegates: a server-trust or client-certificate
    /// challenge to the session delegate first, any other to the task delegate.
    func protocolChallenged(_ challenge: URLAuthenticationChallenge, answer: @escaping ChallengeRouter.Answer) {
        let space = challenge.protectionSpace
        let method = space.authenticationMethod
        if method == NSURLAuthenticationMethodServerTrust || method == NSURLAuthenticationMethodClientCertificate {
            ChallengeRouter.route(space, session: session, task: task, answer: answer)
        } else {
            ChallengeRouter.routeToTask(
                space, session: session, task: task, proposedCredential: challenge.proposedCredential,
                previousFailureCount: challenge.previousFailureCount, failureResponse: challenge.failureResponse, answer: answer
            )
        }
    }

    private static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        a.scheme?.lowercased() == b.scheme?.lowercased() && a.host?.lowercased() == b.host?.lowercased() && a.port == b.port
    }
}
