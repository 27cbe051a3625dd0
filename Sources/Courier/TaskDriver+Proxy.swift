import CourierCore
import CourierPolicies
import CourierTransport
import Foundation

/// Proxies in the task pipeline: which proxy a request takes (the session's
/// ``ProxySelection``), and what a proxy's 407 to CONNECT means for the exchange it failed
/// (docs/internals/session.md, "Proxies").
extension TaskDriver {
    /// The proxy for a request to `url`, by the session's proxy selection; nil: direct.
    func proxy(for url: URL) throws(URLError) -> ProxyServer? {
        guard session.mayUseProxy else { return nil }
        let origin = try RequestBuilder.origin(of: url)
        do throws(ProxyConfigurationError) {
            return try session.proxySelection.proxy(scheme: origin.scheme.rawValue, host: origin.host, port: origin.port)
        } catch {
            throw .courier(.unsupportedURL, "The configured proxy cannot be used: \(error).", url: url)
        }
    }

    /// What a CONNECT 407 means for this exchange.
    enum TunnelChallenge {
        /// The tunnel carried another request's credential: try again with this one's.
        case notOurs
        /// Ask for a credential with this head (the status and `Proxy-Authenticate` only).
        case ask(HTTPResponseHead)
    }

    /// Reads a proxy's 407 to CONNECT: nil when it is to fail the task (no challenge Courier
    /// can answer, too many challenges already, or the exchange is no longer current).
    func tunnelChallenge(_ head: HTTPResponseHead, sentAuthorization: String?, exchange: HTTPExchange) -> TunnelChallenge? {
        var proxyHead = HTTPResponseHead(version: head.version, status: head.status, reason: head.reason)
        for value in head.fields.values("Proxy-Authenticate") { proxyHead.fields.append(name: "Proxy-Authenticate", value: value) }
        guard !AuthenticationEngine.offers(inFields: proxyHead.fields.values("Proxy-Authenticate")).offers.isEmpty else { return nil }
        return state.withLock { state -> TunnelChallenge? in
            guard state.exchange === exchange, let hop = state.proxy, hop.isTunnel,
                  state.machine.authenticationCount < AuthenticationEngine.maximumChallengesPerTask else { return nil }
            if state.transportRequest?.tunnelAuthorization != sentAuthorization && state.tunnelRequeues < Self.maxTunnelRequeues {
                state.tunnelRequeues += 1
                return .notOurs
            }
            state.tunnelRefused = true
            return .ask(proxyHead)
        }
    }

    /// Most times a request goes again because its tunnel was refused with another request's
    /// credential, before the refusal counts as its own.
    static let maxTunnelRequeues = 3
}
