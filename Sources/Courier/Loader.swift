import CourierCore
import CourierTransport

/// The seam between the session layer and whatever carries exchanges. `URLSession` and its
/// task drivers talk to a `Loader`, never to `HTTPTransport` by name, so another loader (a
/// background session's out-of-process one, say) can stand behind the same calls.
protocol Loader: AnyObject, Sendable {
    /// Makes an exchange without starting it, so the caller can keep it before any callback
    /// can arrive.
    func makeExchange(_ request: TransportRequest, delegate: HTTPExchangeDelegate) -> HTTPExchange
    /// Starts an exchange made by ``makeExchange(_:delegate:)``.
    func start(_ exchange: HTTPExchange)
    /// An executor on which a Swift task starts exchanges and is resumed without thread hops;
    /// nil when there is none.
    var taskExecutor: (any TaskExecutor)? { get }
    /// Stops everything: waiting exchanges fail, connections close.
    func shutdown()
    /// Makes every later exchange, and every one still waiting, use a new connection: idle
    /// connections close now, busy ones after their exchange.
    func retireConnections()
    /// Opens a connection of the caller's own to `host`:`port` (a stream task's), through
    /// `proxy`'s tunnel when given.
    func openConnection(
        host: String, port: UInt16, proxy: ProxyServer?, owner: (any ConnectionOwner)?,
        completion: @escaping @Sendable (Result<UpgradedConnection, TransportError>) -> Void
    )
}

extension HTTPTransport: Loader {}
