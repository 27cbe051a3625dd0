import CourierCore
import CourierPolicies
import CourierTransport
import Foundation

/// The cache stage (RFC 9111, a private cache): before a GET goes out, the configuration's
/// `urlCache` may answer it (fresh, or as the request's cache policy allows), or turn it into
/// a conditional request whose 304 is merged with the stored response; after a response
/// arrives, a storable one is kept (its body collected as it is delivered), an unsafe method
/// invalidates what it changed. ``HTTPCachePolicy`` decides; this file acts
/// (docs/internals/session.md, "Cache").
extension TaskDriver {
    /// A task's cache bookkeeping, in its ``State``.
    struct CacheState {
        /// The stored response the current exchange revalidates (a conditional request).
        var validating: CachedURLResponse?
        /// The current response comes from the cache: its body is stored decoded, and the
        /// exchange is none.
        var answeredFromCache = false
        /// The body of the current response as delivered, collected to be stored; nil when
        /// it will not be stored.
        var collected: Data?
        /// Most bytes collected before giving up on storing.
        var collectLimit = 0
        /// When the current request went out, and the fields it carried (for Vary).
        var requestTime = Date(timeIntervalSince1970: 0)
        var requestFields = HTTPFields()
        /// The response to store once its body is complete.
        var pending: CachedURLResponse?
        /// A stale stored response that may answer if the origin fails (RFC 5861
        /// stale-if-error), while the request goes out to replace it.
        var staleFallback: CachedURLResponse?
    }

    /// What the cache stage decided for a request about to go out.
    enum CacheStep {
        /// Send it (conditional fields added when it revalidates).
        case send
        /// Answer with this stored response; nothing is sent.
        case answer(CachedURLResponse)
        /// Fail without sending (`.returnCacheDataDontLoad` and nothing stored).
        case fail(URLError)
    }

    /// The effective cache policy: the request's, or the configuration's when the request
    /// leaves it to the protocol.
    func cachePolicy(of request: URLRequest) -> URLRequest.CachePolicy {
        request.cachePolicy == .useProtocolCachePolicy ? session.frozenConfiguration.requestCachePolicy : request.cachePolicy
    }

    /// Looks the request up in the cache and decides (RFC 9111 §4 and the cache policy).
    func consultCache(_ request: URLRequest, transportRequest: inout TransportRequest) -> CacheStep {
        guard let cache = session.cache, let url = request.url else { return .send }
        let method = transportRequest.head.method.rawValue
        let policy = cachePolicy(of: request)
        let now = Date()
        state.withLock { state in
            state.cache = CacheState()
            state.cache.requestTime = now
            state.cache.requestFields = transportRequest.head.fields
        }
        guard method == "GET" else { return .send }
        switch policy {
        case .reloadIgnoringLocalCacheData, .reloadIgnoringLocalAndRemoteCacheData:
            return .send
        default:
            break
        }
        // A caller that sends its own validators handles the 304 itself.
        let fields = transportRequest.head.fields
        if fields.contains("If-None-Match") || fields.contains("If-Modified-Since") || fields.contains("If-Range") || fields.contains("Range") {
            return policy == .returnCacheDataDontLoad
                ? .fail(.courier(.resourceUnavailable, "The request carries its own validators or range; the cache does not answer it.", url: url))
                : .send
        }
        let stored = cache.cachedResponse(for: request)
        let facts = stored.flatMap(Self.facts)
        let matching = facts.flatMap { HTTPCachePolicy.varyMatches($0, requestFields: fields) ? $0 : nil }
        guard let stored, let matching else {
            if policy == .returnCacheDataDontLoad {
                return .fail(.courier(.resourceUnavailable, "Nothing is cached for this request, and its cache policy forbids loading it.", url: url))
            }
            return .send
        }
        switch policy {
        case .returnCacheDataElseLoad, .returnCacheDataDontLoad:
            return .answer(stored)
        case .reloadRevalidatingCacheData:
            return revalidate(stored, matching, transportRequest: &transportRequest)
        default:
            switch HTTPCachePolicy.decide(matching, requestFields: fields, now: now) {
            case .fresh, .staleWhileRevalidate:
                return .answer(stored)
            case .validate:
                state.withLock { $0.cache.staleFallback = stored }
                return revalidate(stored, matching, transportRequest: &transportRequest)
            }
        }
    }

    /// Adds the stored response's validators to the request; without any, a plain request.
    private func revalidate(_ stored: CachedURLResponse, _ facts: StoredResponseFacts, transportRequest: inout TransportRequest) -> CacheStep {
        let conditional = HTTPCachePolicy.conditionalFields(for: facts)
        guard !conditional.isEmpty else { return .send }
        for field in conditional.fields { transportRequest.head.fields.set(name: field.name, value: field.value) }
        state.withLock { $0.cache.validating = stored }
        return .send
    }

    /// What the policy needs to know of a stored response.
    static func facts(_ stored: CachedURLResponse) -> StoredResponseFacts? {
        guard let response = stored.response as? HTTPURLResponse else { return nil }
        return StoredResponseFacts(
            status: response.statusCode, responseFields: response.fields, requestFields: stored.requestFields,
            requestTime: stored.requestTime, responseTime: stored.responseTime
        )
    }

    // MARK: Answering from the cache

    /// Delivers a stored response as the current hop's, with no exchange: the machine sees its
    /// head (a stored redirect is followed), the sink its body, then its end.
    func answerFromCache(_ stored: CachedURLResponse) {
        guard let cachedResponse = stored.response as? HTTPURLResponse, let url = cachedResponse.url ?? currentURL else { return }
        logger.debug("answered from the cache", metadata: ["task": "\(identifier)", "url": "\(LogRedaction.url(url))"])
        let response = HTTPURLResponse(url: state.withLock { $0.request?.url } ?? url, statusCode: cachedResponse.statusCode, version: cachedResponse.httpVersion, fields: cachedResponse.fields)
        let actions = state.withLock { state -> TaskStateMachine.Actions in
            guard !state.machine.isFinished, let requestURL = state.request?.url else { return TaskStateMachine.Actions() }
            state.response = response
            state.exchange = nil
            state.cache.answeredFromCache = true
            state.cache.collected = nil
            let location = (300..<400).contains(response.statusCode) ? response.fields.first("Location") : nil
            let actions = state.machine.handle(.responseHeadReceived(.init(
                status: response.statusCode, location: location, requestURL: requestURL, method: state.request?.httpMethod ?? "GET"
            )))
            state.transactions.append(URLSessionTaskTransactionMetrics(cachedRequest: state.request ?? URLRequest(url: requestURL), response: response, bodyBytes: Int64(stored.data.count)))
            return actions
        }
        run(actions)
        deliverStoredBody(stored.data)
        run(state.withLock { $0.machine.handle(.bodyFinished) })
    }

    /// Body bytes from the cache (a hit, or the stored body after a merged 304): kept aside
    /// for a redirect or handed to the sink, undecoded (the cache holds what was delivered,
    /// decoded already).
    func deliverStoredBody(_ data: Data) {
        guard !data.isEmpty else { return }
        enum Route { case keep, overflow, deliver }
        let route = state.withLock { state -> Route in
            guard case .keepingBody = state.machine.state else {
                state.decodedBytes += Int64(data.count)
                return .deliver
            }
            state.keptBody.append(data)
            return state.keptBody.count > Self.maxKeptRedirectBytes ? .overflow : .keep
        }
        switch route {
        case .keep: return
        case .overflow: run(state.withLock { $0.machine.handle(.keptBodyOverflowed) })
        case .deliver:
            let failure = data.withUnsafeBytes { sink.receive($0, from: nil, driver: self) }
            if let failure { fail(failure, with: .deliveryFailed) }
        }
    }

    // MARK: A 304 merged with the stored response

    /// For a conditional request's 304: the stored response with its fields updated
    /// (RFC 9111 §4.3.4), to deliver in place of the 304, and the stored body. Nil when the
    /// response is anything else.
    func mergedNotModified(_ head: HTTPResponseHead, url: URL, in state: inout State) -> (HTTPURLResponse, Data)? {
        guard head.status == 304, let stored = state.cache.validating, let storedResponse = stored.response as? HTTPURLResponse else { return nil }
        let merged = HTTPCachePolicy.merge(stored: storedResponse.fields, notModified: head.fields)
        let response = HTTPURLResponse(url: url, statusCode: storedResponse.statusCode, version: storedResponse.httpVersion, fields: merged)
        // The stored entry takes the new fields and times; the body stays.
        state.cache.pending = CachedURLResponse(
            response: response, data: stored.data, userInfo: stored.userInfo, storagePolicy: stored.storagePolicy,
            requestFields: state.cache.requestFields, requestTime: state.cache.requestTime, responseTime: Date()
        )
        state.cache.collected = nil
        state.cache.answeredFromCache = true
        return (response, stored.data)
    }

    /// The stale stored response to answer with instead of a failure (a transport error, or a
    /// 500, 502, 503 or 504), when its stale-if-error window allows (RFC 5861 §4).
    func staleAnswer(forFailureStatus status: Int?, in state: inout State) -> CachedURLResponse? {
        if let status, ![500, 502, 503, 504].contains(status) { return nil }
        guard let stored = state.cache.staleFallback, let facts = Self.facts(stored),
              HTTPCachePolicy.mayServeStaleOnError(facts, requestFields: state.cache.requestFields, now: Date()) else { return nil }
        state.cache.staleFallback = nil
        state.cache.collected = nil
        logger.debug("the origin failed: a stale stored response answers (stale-if-error)", metadata: ["task": "\(identifier)"])
        return stored
    }

    // MARK: Storing

    /// At a final response head: starts collecting its body when it can be stored; for an
    /// unsafe method's success, removes what it invalidates.
    func prepareStoring(_ response: HTTPURLResponse, in state: inout State) {
        guard let cache = session.cache, let request = state.request, let url = request.url else { return }
        let method = request.httpMethod ?? "GET"
        if method == "HEAD" {
            refreshFromHead(response, request: request, cache: cache)
            return
        }
        if !["GET", "HEAD", "OPTIONS", "TRACE"].contains(method.uppercased()) {
            let invalidated = HTTPCachePolicy.invalidatedURLs(method: method, status: response.statusCode, requestURL: url, responseFields: response.fields)
            if !invalidated.isEmpty {
                for target in invalidated { cache.removeCachedResponse(for: URLRequest(url: target)) }
            }
            return
        }
        guard !state.cache.answeredFromCache, cachePolicy(of: request) != .reloadIgnoringLocalAndRemoteCacheData,
              HTTPCachePolicy.isStorable(method: method, requestFields: state.cache.requestFields, status: response.statusCode, responseFields: response.fields) else {
            state.cache.collected = nil
            return
        }
        // Apple's rule: a response larger than 5% of the cache is not kept.
        let limit = max(cache.memoryCapacity, cache.diskCapacity) / 20
        if response.expectedContentLength > Int64(limit) {
            state.cache.collected = nil
            return
        }
        state.cache.collectLimit = limit
        state.cache.collected = Data()
    }

    /// RFC 9111 §4.3.5: a 200 to HEAD whose validators match the stored GET response updates
    /// its header fields (the stored body stays).
    private func refreshFromHead(_ response: HTTPURLResponse, request: URLRequest, cache: URLCache) {
        guard response.statusCode == 200, let url = request.url else { return }
        let getRequest = URLRequest(url: url)
        guard let stored = cache.cachedResponse(for: getRequest), let storedResponse = stored.response as? HTTPURLResponse else { return }
        let storedTag = storedResponse.fields.first("ETag"), newTag = response.fields.first("ETag")
        let storedDate = storedResponse.fields.first("Last-Modified"), newDate = response.fields.first("Last-Modified")
        let matches = (storedTag != nil || newTag != nil) ? storedTag == newTag : (storedDate != nil && storedDate == newDate)
        guard matches else { return }
        let merged = HTTPCachePolicy.merge(stored: storedResponse.fields, notModified: response.fields)
        let refreshed = HTTPURLResponse(url: storedResponse.url ?? url, statusCode: storedResponse.statusCode, version: storedResponse.httpVersion, fields: merged)
        cache.storeCachedResponse(CachedURLResponse(
            response: refreshed, data: stored.data, userInfo: stored.userInfo, storagePolicy: stored.storagePolicy,
            requestFields: stored.requestFields, requestTime: Date(), responseTime: Date()
        ), for: getRequest)
    }

    /// Adds delivered (decoded) body bytes to what is collected for the cache.
    func collectForCache(_ bytes: UnsafeRawBufferPointer, in state: inout State) {
        guard state.cache.collected != nil else { return }
        if state.cache.collected!.count + bytes.count > state.cache.collectLimit {
            state.cache.collected = nil
            return
        }
        state.cache.collected!.append(contentsOf: bytes)
    }

    /// At a successful end: the response to propose to the cache (and to
    /// `willCacheResponse`), or nil.
    func cacheProposal() -> (CachedURLResponse, URLRequest)? {
        state.withLock { state -> (CachedURLResponse, URLRequest)? in
            guard let request = state.request else { return nil }
            if let pending = state.cache.pending {
                state.cache.pending = nil
                return (pending, request)
            }
            guard let body = state.cache.collected, let response = state.response as? HTTPURLResponse else { return nil }
            state.cache.collected = nil
            return (CachedURLResponse(
                response: response, data: body, userInfo: nil, storagePolicy: .allowed,
                requestFields: state.cache.requestFields, requestTime: state.cache.requestTime, responseTime: Date()
            ), request)
        }
    }

    /// True when the data delegate is asked `willCacheResponse` (Apple asks it of data tasks
    /// delivered through a delegate, and not in ephemeral sessions).
    var asksWillCacheResponse: Bool {
        sink is DelegateDataSink && task is URLSessionDataTask && session.frozenConfiguration.kind != .ephemeral && dataDelegate != nil
    }

    /// Stores a proposal in the configuration's cache.
    func store(_ proposal: CachedURLResponse?, for request: URLRequest) {
        guard let proposal, let cache = session.cache else { return }
        cache.storeCachedResponse(proposal, for: request)
    }
}
