import CourierTransport
import Foundation

/// Courier extension: the steps of opening a task's connection and sending its request, as
/// they happen, for tools that show them live (`courier -v`'s "Trying", "Connected", the TLS
/// lines, the request as it goes out). Apple's URLSession reports these only afterwards, in
/// ``URLSessionTaskMetrics``.
///
/// A new connection is reported to the task that has waited longest for one to its origin;
/// a task served by a connection already open hears only ``requestSent(reusedConnection:networkProtocolName:)``.
public enum CourierConnectionProgress: Sendable, Equatable {
    /// A connect to this address started (the proxy's, through a proxy).
    case trying(address: String, port: Int)
    /// That connect failed; another address may follow.
    case attemptFailed(address: String, port: Int, reason: String)
    /// TCP is up.
    case connected(address: String, port: Int, localAddress: String?, localPort: Int?)
    /// The proxy's tunnel (CONNECT or SOCKS5) to the origin is open.
    case tunnelOpened(proxyHost: String, proxyPort: Int)
    /// TLS is up: its version, the cipher suite's OpenSSL name, and what ALPN chose.
    case secured(protocolVersion: tls_protocol_version_t?, cipherSuite: String?, applicationProtocol: String?)
    /// The request head went out ("http/1.1" or "h2").
    case requestSent(reusedConnection: Bool, networkProtocolName: String)
}

/// Courier extension: a task delegate (the task's own or the session's) that conforms hears
/// each ``CourierConnectionProgress`` on the session's delegate queue, in order with the task's
/// other events.
public protocol CourierConnectionProgressDelegate: URLSessionTaskDelegate {
    func urlSession(_ session: URLSession, task: URLSessionTask, courierConnectionProgress progress: CourierConnectionProgress)
}

extension CourierConnectionProgress {
    init?(_ progress: ConnectionProgress) {
        switch progress {
        case .trying(let address):
            self = .trying(address: address.hostString, port: Int(address.port ?? 0))
        case .attemptFailed(let address, let error):
            self = .attemptFailed(address: address.hostString, port: Int(address.port ?? 0), reason: error.reason)
        case .connected(let remote, let local):
            self = .connected(
                address: remote.hostString, port: Int(remote.port ?? 0), localAddress: local?.hostString, localPort: local?.port.map(Int.init)
            )
        case .tunnelOpened(let proxy):
            self = .tunnelOpened(proxyHost: proxy.host, proxyPort: Int(proxy.port))
        case .secured(let version, let cipher, let alpn):
            self = .secured(
                protocolVersion: version.flatMap { tls_protocol_version_t(rawValue: $0.rawValue) }, cipherSuite: cipher, applicationProtocol: alpn
            )
        case .requestSent(let reused, let http2):
            self = .requestSent(reusedConnection: reused, networkProtocolName: http2 ? "h2" : "http/1.1")
        }
    }
}
