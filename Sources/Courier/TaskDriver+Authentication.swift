import CourierCore
import CourierPolicies
import CourierTransport
import Foundation

/// HTTP authentication (401 and 407): the challenges of a response are read and ranked by
/// ``AuthenticationEngine``, put one at a time to the task delegate as a
/// `URLAuthenticationChallenge`, and answered by sending the request again with the chosen
/// credential. Credentials that worked are remembered by the session and sent before the
/// server asks (docs/internals/session.md, "Authentication").
extension TaskDriver {
    /// A task's authentication bookkeeping, in its ``State``.
    struct AuthenticationState {
        /// The usable challenges of the challenging response, strongest first.
        var offers: [AuthenticationOffer] = []
        /// The next of `offers` to put to the delegate (a rejected space moves on).
        var nextOffer = 0
        /// The challenging response came from the proxy (407).
        var challengeIsProxy = false
        /// The credential the task answered the server's and the proxy's challenge with; sent
        /// with every following exchange that stays in its protection space.
        var server: ChosenCredential?
        var proxy: ChosenCredential?
        /// What the current exchange carried.
        var sentServer: SentCredential?
        var sentProxy: SentCredential?
        /// Rejections per protection space: the challenge's `previousFailureCount`.
        var failureCounts: [URLProtectionSpace: Int] = [:]
        /// Credentials default handling already tried per space (user and password), so that
        /// it never offers one twice.
        var triedByDefault: [URLProtectionSpace: Set<String>] = [:]
        /// A response accepted what the exchange carried: remember it (``rememberConfirmedCredentials``).
        var confirmedServer = false
        var confirmedProxy = false
    }

    /// A credential the task chose for a protection space.
    struct ChosenCredential {
        var space: URLProtectionSpace
        var offer: AuthenticationOffer
        var credential: URLCredential
        var user: String
        var password: String
        /// Uses of the Digest nonce so far.
        var nonceCount: UInt32 = 0
        /// Given by the delegate: stored in the credential storage once it works.
        var fromDelegate: Bool
    }

    /// A credential an exchange carried. A class, as ``ProxyHop`` is: both ride in optionals
    /// through every request's start, where an optional struct of several strings is copied
    /// and destroyed through its type metadata even when it is nil.
    final class SentCredential: Sendable {
        let realm: String?
        let isDigest: Bool
        let user: String
        let password: String
        let persistence: URLCredential.Persistence
        /// Chosen by this task (not sent from the session's memory).
        let chosenByTask: Bool

        init(realm: String?, isDigest: Bool, user: String, password: String, persistence: URLCredential.Persistence, chosenByTask: Bool) {
            self.realm = realm
            self.isDigest = isDigest
            self.user = user
            self.password = password
            self.persistence = persistence
            self.chosenByTask = chosenByTask
        }
    }

    /// An HTTP proxy as authentication sees it: the server of its protection space, and how
    /// requests reach it.
    final class ProxyHop: Equatable, Sendable {
        let server: ProxyServer
        /// An `https` request, tunnelled with CONNECT: its credential goes with the CONNECT.
        let isTunnel: Bool
        /// The CONNECT request target, `host:port`.
        let tunnelTarget: String

        init(server: ProxyServer, isTunnel: Bool, tunnelTarget: String) {
            self.server = server
            self.isTunnel = isTunnel
            self.tunnelTarget = tunnelTarget
        }

        static func == (lhs: ProxyHop, rhs: ProxyHop) -> Bool {
            lhs.server == rhs.server && lhs.isTunnel == rhs.isTunnel && lhs.tunnelTarget == rhs.tunnelTarget
        }
        /// Apple's proxy type for the protection space: an HTTPS proxy for a tunnel.
        var protectionSpaceType: String { isTunnel ? NSURLProtectionSpaceHTTPSProxy : NSURLProtectionSpaceHTTPProxy }
    }

    // MARK: On the way out

    /// Adds `Authorization` and `Proxy-Authorization` to the request about to go out: the
    /// task's chosen credentials while the request stays in their space, else what the
    /// session remembers (unless the caller set the field itself). Returns what was sent.
    func addAuthorization(to transportRequest: inout TransportRequest, request: URLRequest, source: BodySource, proxy: ProxyHop?) -> (server: SentCredential?, proxy: SentCredential?) {
        // The common case, no credential anywhere, costs two atomic loads.
        let rememberedSomething = session.remembersCredentials.load(ordering: .acquiring)
        guard rememberedSomething || hasChosenCredential.load(ordering: .acquiring), let url = request.url else { return (nil, nil) }
        let method = transportRequest.head.method.rawValue
        let uri = transportRequest.head.target
        // The body is hashed only by Digest auth-int: copied out only when a Digest credential
        // may answer (an upload with Basic is not copied for nothing).
        let digestPossible = state.withLock { state in
            state.authentication.server?.offer.isDigest == true || state.authentication.proxy?.offer.isDigest == true
        } || (rememberedSomething && session.preemptiveAuthentication.withLock { $0.entries.contains { $0.method != .basic } })
        let body = digestPossible ? Self.bodyBytes(source, request) : nil
        let scheme = url.scheme?.lowercased() ?? "http"
        var host = url.host(percentEncoded: false) ?? ""
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let port = url.port ?? AuthenticationScope.defaultPort(scheme)
        var path = url.path(percentEncoded: true)
        if path.isEmpty { path = "/" }
        // The caller's own field (the request's or the configuration's) is left alone.
        let callerAuthorizes = transportRequest.head.fields.contains("Authorization")
        let callerProxyAuthorizes = transportRequest.head.fields.contains("Proxy-Authorization") || transportRequest.tunnelAuthorization != nil

        return state.withLock { state in
            var sent: (server: SentCredential?, proxy: SentCredential?) = (nil, nil)
            if let value = chosenAuthorization(&state.authentication.server, scheme: scheme, host: host, port: port, isProxy: false, method: method, uri: uri, body: body) {
                transportRequest.head.fields.set(name: "Authorization", value: value.header)
                sent.server = value.sent
            } else if !callerAuthorizes && rememberedSomething,
                      let remembered = session.preemptiveAuthentication.withLock({
                          $0.authorization(scheme: scheme, host: host, port: port, isProxy: false, path: path, method: method, uri: uri, body: body, clientNonce: Self.clientNonce())
                      }) {
                transportRequest.head.fields.set(name: "Authorization", value: remembered.value)
                sent.server = SentCredential(
                    realm: remembered.entry.realm, isDigest: remembered.entry.method != .basic, user: remembered.entry.user,
                    password: remembered.entry.password, persistence: .forSession, chosenByTask: false
                )
            }
            // Proxy-Authorization goes to a proxy only, never to an origin: on the forwarded
            // request, or on the CONNECT of a tunnel (which the origin never sees).
            guard let proxy else { return sent }
            let proxyPort = Int(proxy.server.port)
            let proxyMethod = proxy.isTunnel ? "CONNECT" : method
            let proxyURI = proxy.isTunnel ? proxy.tunnelTarget : uri
            let proxyBody = proxy.isTunnel ? [] : body
            func setProxyAuthorization(_ value: String) {
                if proxy.isTunnel {
                    transportRequest.tunnelAuthorization = value
                } else {
                    transportRequest.head.fields.set(name: "Proxy-Authorization", value: value)
                }
            }
            if let value = chosenAuthorization(&state.authentication.proxy, scheme: "http", host: proxy.server.host, port: proxyPort, isProxy: true, method: proxyMethod, uri: proxyURI, body: proxyBody) {
                setProxyAuthorization(value.header)
                sent.proxy = value.sent
            } else if rememberedSomething, !callerProxyAuthorizes,
                      let remembered = session.preemptiveAuthentication.withLock({
                          $0.authorization(scheme: "http", host: proxy.server.host, port: proxyPort, isProxy: true, path: "/", method: proxyMethod, uri: proxyURI, body: proxyBody, clientNonce: Self.clientNonce())
                      }) {
                setProxyAuthorization(remembered.value)
                sent.proxy = SentCredential(
                    realm: remembered.entry.realm, isDigest: remembered.entry.method != .basic, user: remembered.entry.user,
                    password: remembered.entry.password, persistence: .forSession, chosenByTask: false
                )
            }
            return sent
        }
    }

    /// The `Authorization` (or `Proxy-Authorization`) value answering `offer` with a user and
    /// password: Basic, or Digest over the request's method, URI and body with `nonceCount`.
    static func authorization(
        answering offer: AuthenticationOffer, user: String, password: String,
        method: String, uri: String, body: [UInt8]?, nonceCount: UInt32
    ) throws(AuthenticationCredentialError) -> String {
        switch offer {
        case .basic:
            return try HTTPAuthorization.basic(user: user, password: password)
        case .digest(let challenge):
            return try HTTPAuthorization.digest(
                challenge, user: user, password: password,
                request: DigestRequest(method: method, uri: uri, body: body, clientNonce: clientNonce(), nonceCount: nonceCount)
            )
        }
    }

    /// Default handling's pick among `candidates` (in order): the first with a user and a
    /// password that is not the one that just `failed` and that default handling has not sent
    /// in this space before (`tried` holds those, and gains the pick).
    static func firstUntried(_ candidates: [URLCredential], failed: URLCredential?, tried: inout Set<String>) -> URLCredential? {
        for candidate in candidates {
            guard let user = candidate.user, let password = candidate.password else { continue }
            if let failed, failed.user == user, failed.password == password { continue }
            guard tried.insert(user + "\u{0}" + password).inserted else { continue }
            return candidate
        }
        return nil
    }

    /// The field value for a chosen credential when the request is in its space.
    private func chosenAuthorization(
        _ chosen: inout ChosenCredential?, scheme: String, host: String, port: Int, isProxy: Bool, method: String, uri: String, body: [UInt8]?
    ) -> (header: String, sent: SentCredential)? {
        guard var current = chosen, current.space.isProxy() == isProxy,
              current.space.host.lowercased() == host.lowercased(), current.space.port == port,
              isProxy || current.space.protocol == scheme else { return nil }
        if case .digest(let challenge) = current.offer {
            // The session counts each nonce's uses, for this task and every other.
            current.nonceCount = session.preemptiveAuthentication.withLock {
                $0.nextNonceCount(scheme: scheme, host: host, port: port, isProxy: isProxy, realm: challenge.realm, nonce: challenge.nonce)
            }
        }
        let header: String
        do throws(AuthenticationCredentialError) {
            header = try Self.authorization(
                answering: current.offer, user: current.user, password: current.password,
                method: method, uri: uri, body: body, nonceCount: current.nonceCount
            )
        } catch {
            return nil
        }
        chosen = current
        return (header, SentCredential(
            realm: current.offer.realm, isDigest: current.offer.isDigest, user: current.user, password: current.password,
            persistence: current.credential.persistence, chosenByTask: true
        ))
    }

    /// The body's bytes for Digest `auth-int`; nil for a file or stream.
    static func bodyBytes(_ source: BodySource, _ request: URLRequest) -> [UInt8]? {
        switch source {
        case .data(let data): return Array(data)
        case .file, .delegateStream: return nil
        case .request:
            if let body = request.httpBody { return Array(body) }
            return request.httpBodyStream == nil ? [] : nil
        }
    }

    /// A Digest client nonce: 16 random bytes in hex.
    static func clientNonce() -> String {
        var generator = SystemRandomNumberGenerator()
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(32)
        for _ in 0..<16 {
            let byte = UInt8.random(in: 0...255, using: &generator)
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: On the way in

    /// Reads the challenges of a response head (under the task's lock): true when it is a
    /// 401, or a 407 from the proxy the request went through (`proxyMayChallenge`: a forwarded
    /// request's, or the CONNECT's), with a challenge Courier can answer. A response that is
    /// neither confirms the credentials the exchange carried.
    func readChallenges(_ head: HTTPResponseHead, viaProxy: Bool, proxyMayChallenge: Bool, in state: inout State) -> Bool {
        let isServerChallenge = head.status == 401
        let isProxyChallenge = head.status == 407 && proxyMayChallenge
        // A credential is confirmed by an answer that got past it: not a new challenge, not a
        // 407 (the request never left the proxy), not a server error (which may come from a
        // gateway that never checked it).
        if head.status < 500 {
            if !isServerChallenge, !isProxyChallenge, state.authentication.sentServer?.chosenByTask == true { state.authentication.confirmedServer = true }
            if !isProxyChallenge, viaProxy, state.authentication.sentProxy?.chosenByTask == true { state.authentication.confirmedProxy = true }
        }
        guard isServerChallenge || isProxyChallenge else { return false }
        let (offers, malformed) = AuthenticationEngine.offers(inFields: head.fields.values(isProxyChallenge ? "Proxy-Authenticate" : "WWW-Authenticate"))
        if !malformed.isEmpty {
            logger.debug("challenge refused", metadata: ["task": "\(identifier)", "reason": "\(malformed.map(\.description).joined(separator: "; "))"])
        }
        state.authentication.offers = AuthenticationEngine.onePerSpace(offers)
        state.authentication.nextOffer = 0
        state.authentication.challengeIsProxy = isProxyChallenge
        return !offers.isEmpty
    }

    /// Remembers the credentials a successful response confirmed: in the session (sent before
    /// the server asks, unless the credential's persistence is `.none`) and, when the delegate
    /// gave them with `.forSession` or `.permanent`, in the credential storage.
    func rememberConfirmedCredentials() {
        let confirmed = state.withLock { state -> [(ChosenCredential, URL?)] in
            var confirmed: [(ChosenCredential, URL?)] = []
            if state.authentication.confirmedServer, let chosen = state.authentication.server {
                confirmed.append((chosen, state.request?.url))
            }
            if state.authentication.confirmedProxy, let chosen = state.authentication.proxy {
                confirmed.append((chosen, nil))
            }
            state.authentication.confirmedServer = false
            state.authentication.confirmedProxy = false
            return confirmed
        }
        for (chosen, url) in confirmed {
            let space = chosen.space
            if chosen.credential.persistence != .none {
                let scope: AuthenticationScope?
                if space.isProxy() {
                    scope = AuthenticationScope(scheme: "http", host: space.host, port: space.port, isProxy: true, pathPrefixes: [])
                } else if let url {
                    scope = AuthenticationScope.covering(url, port: space.port, offer: chosen.offer, isProxy: false)
                } else {
                    scope = nil
                }
                if let scope {
                    session.preemptiveAuthentication.withLock {
                        $0.remember(scope, realm: chosen.offer.realm, offer: chosen.offer, user: chosen.user, password: chosen.password, nonceCount: chosen.nonceCount)
                    }
                    session.remembersCredentials.store(true, ordering: .releasing)
                }
            }
            if chosen.fromDelegate, chosen.credential.persistence == .forSession || chosen.credential.persistence == .permanent || chosen.credential.persistence == .synchronizable,
               let storage = session.frozenConfiguration.urlCredentialStorage {
                // On the delegate queue: a permanent credential is written to disk, and the
                // storage's change notification reaches observers, never on an event loop.
                let credential = chosen.credential
                enqueue { storage.set(credential, for: space) }
            }
        }
    }

    // MARK: Asking

    /// Puts the next usable challenge of the kept 401/407 to the delegate, or answers it
    /// without asking (a stale Digest nonce), or gives up when none is left. Runs on the
    /// delegate queue: the credential storage may read its file, and its change
    /// notifications reach user code.
    func askForCredential() {
        enum Step {
            case giveUp
            case resend(ChosenCredential, isProxy: Bool)
            case ask(URLProtectionSpace, AuthenticationOffer, isProxy: Bool, failures: Int, failed: URLCredential?, response: HTTPURLResponse?)
        }
        let step = state.withLock { state -> Step in
            guard state.machine.state == .awaitingCredential else { return .giveUp }
            var auth = state.authentication
            defer { state.authentication = auth }
            guard auth.nextOffer < auth.offers.count, let url = state.request?.url else { return .giveUp }
            let offer = auth.offers[auth.nextOffer]
            auth.nextOffer += 1
            let isProxy = auth.challengeIsProxy
            let space: URLProtectionSpace
            if isProxy {
                guard let proxy = state.proxy else { return .giveUp }
                space = URLProtectionSpace(proxyHost: proxy.server.host, port: Int(proxy.server.port), type: proxy.protectionSpaceType, realm: offer.realm, authenticationMethod: Self.method(of: offer))
            } else {
                let scheme = url.scheme?.lowercased() ?? "http"
                var host = url.host(percentEncoded: false) ?? ""
                if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
                space = URLProtectionSpace(host: host, port: url.port ?? AuthenticationScope.defaultPort(scheme), protocol: scheme, realm: offer.realm, authenticationMethod: Self.method(of: offer))
            }
            let sent = isProxy ? auth.sentProxy : auth.sentServer
            let sentHere = sent.flatMap { $0.realm == offer.realm && $0.isDigest == offer.isDigest ? $0 : nil }
            if case .digest(let challenge) = offer, challenge.stale, let sentHere {
                // The credential was right and the nonce old: the same credential again, with
                // the new nonce, without asking anyone (RFC 7616 §3.3, stale).
                let credential = URLCredential(user: sentHere.user, password: sentHere.password, persistence: sentHere.persistence)
                return .resend(ChosenCredential(space: space, offer: offer, credential: credential, user: sentHere.user, password: sentHere.password, fromDelegate: false), isProxy: isProxy)
            }
            var failed: URLCredential?
            if let sentHere {
                auth.failureCounts[space, default: 0] += 1
                failed = URLCredential(user: sentHere.user, password: sentHere.password, persistence: sentHere.persistence)
                if isProxy { auth.proxy = nil } else { auth.server = nil }
            }
            return .ask(space, offer, isProxy: isProxy, failures: auth.failureCounts[space] ?? 0, failed: failed, response: state.response as? HTTPURLResponse)
        }
        switch step {
        case .giveUp:
            giveUpAuthentication()
        case .resend(let chosen, let isProxy):
            logger.debug("stale nonce: the same credential again", metadata: ["task": "\(identifier)", "realm": "\(chosen.offer.realm ?? "")"])
            useCredential(chosen, isProxy: isProxy)
        case .ask(let space, let offer, let isProxy, let failures, let failed, let response):
            if failed != nil {
                // A remembered credential that stopped working is forgotten by the session.
                session.preemptiveAuthentication.withLock {
                    $0.forget(scheme: isProxy ? "http" : space.protocol ?? "http", host: space.host, port: space.port, isProxy: isProxy, realm: space.realm)
                }
            }
            let storage = session.frozenConfiguration.urlCredentialStorage
            let proposed = failed ?? storage?.defaultCredential(for: space)
            logger.debug("authentication challenge", metadata: [
                "task": "\(identifier)", "method": "\(space.authenticationMethod)", "realm": "\(space.realm ?? "")",
                "proxy": "\(isProxy)", "previousFailureCount": "\(failures)",
            ])
            let challengeAnswer: ChallengeRouter.Answer = { [self] disposition, credential in
                answered(disposition, credential, space: space, offer: offer, isProxy: isProxy, failed: failed)
            }
            ChallengeRouter.routeToTask(
                space, session: session, task: task, proposedCredential: proposed, previousFailureCount: failures,
                failureResponse: response, answer: challengeAnswer
            )
        }
    }

    /// The delegate's answer to a 401/407 challenge.
    private func answered(
        _ disposition: URLSession.AuthChallengeDisposition, _ credential: URLCredential?,
        space: URLProtectionSpace, offer: AuthenticationOffer, isProxy: Bool, failed: URLCredential?
    ) {
        switch disposition {
        case .useCredential:
            guard let credential, let user = credential.user, let password = credential.password else {
                // No credential (or one without a password, such as an identity): continue
                // without one, so the 401/407 is the result.
                giveUpAuthentication()
                return
            }
            useCredential(ChosenCredential(space: space, offer: offer, credential: credential, user: user, password: password, fromDelegate: true), isProxy: isProxy)
        case .performDefaultHandling:
            if let credential = defaultCredential(for: space, isProxy: isProxy, failed: failed), let user = credential.user, let password = credential.password {
                useCredential(ChosenCredential(space: space, offer: offer, credential: credential, user: user, password: password, fromDelegate: false), isProxy: isProxy)
            } else {
                giveUpAuthentication()
            }
        case .cancelAuthenticationChallenge:
            let actions = state.withLock { state -> TaskStateMachine.Actions in
                guard state.machine.state == .awaitingCredential else { return TaskStateMachine.Actions() }
                state.failure = .courier(.cancelled, "The authentication challenge was cancelled.", url: currentURL(in: state))
                return state.machine.handle(.cancelRequested)
            }
            run(actions)
        case .rejectProtectionSpace:
            askForCredential()
        }
    }

    /// Default handling: the storage's default credential for the space, then the user and
    /// password of the URL (for a server), each once; nil when none is left.
    private func defaultCredential(for space: URLProtectionSpace, isProxy: Bool, failed: URLCredential?) -> URLCredential? {
        var candidates: [URLCredential] = []
        if let stored = session.frozenConfiguration.urlCredentialStorage?.defaultCredential(for: space) { candidates.append(stored) }
        if !isProxy, let url = state.withLock({ $0.request?.url }), let user = url.user(percentEncoded: false), let password = url.password(percentEncoded: false) {
            candidates.append(URLCredential(user: user, password: password, persistence: .forSession))
        }
        // A proxy configured with a user and password (`http://user:password@proxy` in the
        // environment) answers its own challenge.
        if isProxy, let configured = state.withLock({ $0.proxy?.server.credentials }) {
            candidates.append(URLCredential(user: configured.user, password: configured.password, persistence: .forSession))
        }
        return state.withLock { state in
            Self.firstUntried(candidates, failed: failed, tried: &state.authentication.triedByDefault[space, default: []])
        }
    }

    /// Sends the request again with `chosen` once its body can be sent again. A credential
    /// that cannot be sent at all fails the task with a message saying why.
    private func useCredential(_ chosen: ChosenCredential, isProxy: Bool) {
        let prepared = state.withLock { state -> (request: URLRequest?, source: BodySource)? in
            guard state.machine.state == .awaitingCredential else { return nil }
            if isProxy { state.authentication.proxy = chosen } else { state.authentication.server = chosen }
            return (state.request, state.bodySource)
        }
        hasChosenCredential.store(true, ordering: .releasing)
        // Cancelled while the delegate held the challenge: nothing more to do.
        guard let (request, source) = prepared else { return }
        do throws(AuthenticationCredentialError) {
            switch chosen.offer {
            case .basic:
                _ = try HTTPAuthorization.basic(user: chosen.user, password: chosen.password)
            case .digest(let challenge):
                _ = try HTTPAuthorization.digest(
                    challenge, user: chosen.user, password: chosen.password,
                    request: DigestRequest(method: "GET", uri: "/", body: request.flatMap { Self.bodyBytes(source, $0) }, clientNonce: "", nonceCount: 1)
                )
            }
        } catch {
            failAuthentication(.courier(.userAuthenticationRequired, "The credential cannot be sent: \(error).", url: request?.url ?? originalURL))
            return
        }
        // A refused tunnel read nothing of the body: the same stream goes again.
        let bodyUnread = state.withLock { $0.tunnelRefused }
        guard case .request = source, let request, request.httpBody == nil, request.httpBodyStream != nil, !bodyUnread else {
            retryAuthenticated(with: nil)
            return
        }
        // The stream was read by the last exchange: the delegate must give a new one.
        guard let delegate = taskDelegate, let task else {
            failAuthentication(.courier(.requestBodyStreamExhausted, "The request body stream cannot be sent again with the credential: no delegate gives a new one (urlSession(_:task:needNewBodyStream:)).", url: request.url))
            return
        }
        let session = self.session
        enqueue { [self] in
            delegate.urlSession(session, task: task, needNewBodyStream: { [self] stream in
                guard let stream else {
                    failAuthentication(.courier(.requestBodyStreamExhausted, "The delegate gave no new body stream to send with the credential.", url: request.url))
                    return
                }
                retryAuthenticated(with: stream)
            })
        }
    }

    private func retryAuthenticated(with stream: InputStream?) {
        let actions = state.withLock { state -> TaskStateMachine.Actions in
            guard state.machine.state == .awaitingCredential else { return TaskStateMachine.Actions() }
            if let stream { state.request?.httpBodyStream = stream }
            state.keptBody = Data()
            state.response = nil
            return state.machine.handle(.credentialDecided(retry: true))
        }
        run(actions)
    }

    /// No credential: the kept 401/407 and its body are the result.
    private func giveUpAuthentication() {
        let tunnel = state.withLock { state -> ProxyHop? in
            guard state.tunnelRefused else { return nil }
            // The proxy's 407 stood in for a response to ask with; it is no response of the origin's.
            state.response = nil
            return state.proxy
        }
        if let tunnel {
            failAuthentication(.from(.tunnelRefused(tunnel.server, HTTPResponseHead(version: .http1_1, status: 407), target: tunnel.tunnelTarget, sentAuthorization: nil), url: currentURL))
            return
        }
        logger.debug("authentication given up: the challenge response is the result", metadata: ["task": "\(identifier)"])
        run(state.withLock { $0.machine.handle(.credentialDecided(retry: false)) })
    }

    private func failAuthentication(_ error: URLError) {
        let actions = state.withLock { state -> TaskStateMachine.Actions in
            guard !state.machine.isFinished else { return TaskStateMachine.Actions() }
            state.failure = error
            return state.machine.handle(.cancelRequested)
        }
        run(actions)
    }

    static func method(of offer: AuthenticationOffer) -> String {
        offer.isDigest ? NSURLAuthenticationMethodHTTPDigest : NSURLAuthenticationMethodHTTPBasic
    }
}
