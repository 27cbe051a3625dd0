import CourierPolicies
import Foundation

/// What a WebSocket task's handshake knows of authentication: the credential it answers the
/// server's 401 with, and what was tried.
struct WebSocketAuthentication {
    /// Sent with the next handshake.
    var authorization: String?
    /// Credentials sent so far (a wrong one counts as a failure of its space).
    var attempts = 0
    /// The credential last sent and where, to store it once the server switches.
    var sent: (credential: URLCredential, space: URLProtectionSpace)?
    /// Credentials default handling has tried, by user and password.
    var triedByDefault: Set<String> = []
}

/// A WebSocket handshake answered with 401: the challenge goes to the task's delegate (or
/// default handling: the credential storage, then the URL's user and password), and the
/// handshake is sent again with Basic or Digest, as a data task's request would be.
extension WebSocketDriver {
    func refusedHandshake(_ status: Int) -> URLError {
        .courier(.badServerResponse, "The server answered the WebSocket handshake with \(status), not 101.", url: url)
    }

    /// Answers the last 401's strongest challenge; false when there is nothing to answer with
    /// (no challenge Courier speaks, too many attempts), and the 401 stands.
    func authenticate() -> Bool {
        let ask = state.withLock { state -> (AuthenticationOffer, URLProtectionSpace, Int, URLCredential?, HTTPURLResponse?)? in
            guard state.authentication.attempts < AuthenticationEngine.maximumChallengesPerTask,
                  let request = state.handshakeRequest, let httpURL = request.url,
                  let offer = AuthenticationEngine.onePerSpace(AuthenticationEngine.offers(inFields: state.challenges).offers).first
            else { return nil }
            let scheme = httpURL.scheme?.lowercased() ?? "http"
            var host = httpURL.host(percentEncoded: false) ?? ""
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            let space = URLProtectionSpace(
                host: host, port: httpURL.port ?? AuthenticationScope.defaultPort(scheme), protocol: scheme, realm: offer.realm,
                authenticationMethod: offer.isDigest ? NSURLAuthenticationMethodHTTPDigest : NSURLAuthenticationMethodHTTPBasic
            )
            let failed = state.authentication.sent.flatMap { $0.space == space ? $0.credential : nil }
            return (offer, space, state.authentication.attempts, failed, state.refusal)
        }
        guard let (offer, space, failures, failed, response) = ask else { return false }
        let proposed = failed ?? session.frozenConfiguration.urlCredentialStorage?.defaultCredential(for: space)
        ChallengeRouter.routeToTask(
            space, session: session, task: task, proposedCredential: proposed, previousFailureCount: failures,
            failureResponse: response
        ) { [self] disposition, credential in
            switch disposition {
            case .useCredential:
                guard let credential, credential.user != nil, credential.password != nil else {
                    finish(refusedHandshake(401))
                    return
                }
                retry(with: credential, offer: offer, space: space)
            case .performDefaultHandling:
                guard let credential = defaultCredential(for: space, failed: failed) else {
                    finish(refusedHandshake(401))
                    return
                }
                retry(with: credential, offer: offer, space: space)
            case .cancelAuthenticationChallenge:
                finish(.courier(.cancelled, "The authentication challenge was cancelled.", url: url))
            case .rejectProtectionSpace:
                finish(refusedHandshake(401))
            }
        }
        return true
    }

    /// The storage's default credential for the space, then the URL's user and password, each
    /// once and never the one that just failed.
    private func defaultCredential(for space: URLProtectionSpace, failed: URLCredential?) -> URLCredential? {
        var candidates: [URLCredential] = []
        if let stored = session.frozenConfiguration.urlCredentialStorage?.defaultCredential(for: space) { candidates.append(stored) }
        if let url, let user = url.user(percentEncoded: false), let password = url.password(percentEncoded: false) {
            candidates.append(URLCredential(user: user, password: password, persistence: .forSession))
        }
        return state.withLock { state in
            TaskDriver.firstUntried(candidates, failed: failed, tried: &state.authentication.triedByDefault)
        }
    }

    /// Opens the handshake again, carrying `credential` for `offer`.
    private func retry(with credential: URLCredential, offer: AuthenticationOffer, space: URLProtectionSpace) {
        guard let user = credential.user, let password = credential.password else { return }
        let target = state.withLock { $0.handshakeRequest?.url.map { RequestBuilder.target(of: $0) } } ?? "/"
        let header: String
        do throws(AuthenticationCredentialError) {
            // A fresh challenge's nonce: this is its first use.
            header = try TaskDriver.authorization(answering: offer, user: user, password: password, method: "GET", uri: target, body: nil, nonceCount: 1)
        } catch {
            finish(.courier(.userAuthenticationRequired, "The credential cannot be sent: \(error).", url: url))
            return
        }
        let again = state.withLock { state -> Bool in
            guard case .connecting = state.phase else { return false }
            state.phase = .idle
            state.authentication.authorization = header
            state.authentication.attempts += 1
            state.authentication.sent = (credential, space)
            return true
        }
        if again { open() }
    }

    /// The server switched with the credential sent: it is kept as its persistence says.
    func rememberCredential() {
        guard let (credential, space) = state.withLock({ $0.authentication.sent }), credential.persistence != .none else { return }
        session.frozenConfiguration.urlCredentialStorage?.set(credential, for: space)
    }
}
