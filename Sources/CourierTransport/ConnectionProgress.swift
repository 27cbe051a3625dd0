import CourierCore
import CourierReactor
import CourierTLS

/// The steps of opening the connection an exchange waits for, and of sending its request, as
/// they happen: what `curl -v` prints before any response arrives. A dial is reported to the
/// request that has waited longest on its pool when the step happens.
public enum ConnectionProgress: Sendable {
    /// A connect to this address started (the proxy's, through a proxy).
    case trying(SocketAddress)
    /// The connect to this address failed; another may follow.
    case attemptFailed(SocketAddress, SystemError)
    /// TCP is up.
    case connected(remote: SocketAddress, local: SocketAddress?)
    /// The proxy's tunnel (CONNECT or SOCKS5) to the origin is open.
    case tunnelOpened(ProxyServer)
    /// TLS is up.
    case secured(version: TLSVersion?, cipherName: String?, applicationProtocol: String?)
    /// The request head went out on a connection, new or reused.
    case requestSent(reusedConnection: Bool, http2: Bool)
}

extension HTTPExchangeDelegate {
    /// Progress is of no interest by default.
    public func exchange(_ exchange: HTTPExchange, didMakeProgress progress: ConnectionProgress) {}
}
