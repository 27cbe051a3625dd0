import CourierCore
import CourierHTTP1
import CourierPool
import CourierHTTP2
import CourierReactor
import CourierTLS
import CourierSync

/// What every pool of a transport shares: loops, resolver, TLS context and session cache,
/// and the security delegate.
final class TransportEnvironment: Sendable {
    let group: EventLoopGroup
    let resolver = Resolver()
    let connectTimeout: Duration
    let tlsSettings: TLSSettings
    let securityDelegate: ConnectionSecurityDelegate?
    let sessionCache = TLSSessionCache()
    let http2PriorKnowledge: Bool
    let http2Configuration: HTTP2Configuration
    /// Made on the first https dial; guarded by the mutex.
    private let context = Mutex<Result<TLSContext, TLSError>?>(nil)

    init(configuration: HTTPTransport.Configuration, group: EventLoopGroup) {
        self.group = group
        self.connectTimeout = configuration.connectTimeout
        self.tlsSettings = configuration.tls
        self.securityDelegate = configuration.securityDelegate
        self.http2PriorKnowledge = configuration.http2PriorKnowledge
        self.http2Configuration = configuration.http2
    }

    /// The client TLS context of the transport.
    func tlsContext() throws(TLSError) -> TLSContext {
        let result = context.withLock { cached -> Result<TLSContext, TLSError> in
            if let cached { return cached }
            var configuration = TLSContext.Configuration()
            configuration.minimumVersion = tlsSettings.minimumVersion
            configuration.maximumVersion = tlsSettings.maximumVersion
            configuration.applicationProtocols = tlsSettings.applicationProtocols
            configuration.trustRoots = tlsSettings.trustRoots ?? SystemTrustStore.shared
            let made = Result { () throws(TLSError) -> TLSContext in try TLSContext(role: .client, configuration: configuration) }
            cached = made
            return made
        }
        return try result.get()
    }
}

/// The transport of one session: a pool per origin, and the entry point for requests.
public final class HTTPTransport: Sendable {
    /// Limits shared by every pool of the transport.
    public struct Configuration: Sendable {
        public var pool = PoolConfiguration()
        /// Longest time to establish a connection.
        public var connectTimeout: Duration = .seconds(60)
        public var tls = TLSSettings()
        /// Speak HTTP/2 without negotiation on cleartext connections (h2c with prior knowledge).
        public var http2PriorKnowledge = false
        /// HTTP/2 windows and limits.
        public var http2 = HTTP2Configuration()
        /// Makes the server-trust and client-certificate decisions; nil for default handling.
        public var securityDelegate: ConnectionSecurityDelegate?
        public init() {}
    }

    public let configuration: Configuration
    /// What every pool shares; the failure when the event loops could not be started (no file
    /// descriptor left), which every request then reports.
    private let environment: Result<TransportEnvironment, SystemError>
    /// Pools by connection key; guarded by the mutex.
    private let pools = Mutex(Pools())

    /// The pools, and the one the last request went to: most requests go where the one before
    /// went, and comparing keys costs a tenth of hashing one (two strings and the route
    /// through SipHash) for the dictionary.
    private struct Pools {
        var byKey: [ConnectionKey: PoolDriver] = [:]
        /// Compared by its own key, which no copy of a key or an optional tuple of one makes
        /// cost more than the comparison.
        var last: PoolDriver?

        mutating func removeAll() -> [PoolDriver] {
            defer {
                byKey.removeAll()
                last = nil
            }
            return Array(byKey.values)
        }
    }
    private let isShutDown = Atomic<Bool>(false)

    /// The loop whose executor this transport offers (``taskExecutor``); nil when the loops
    /// could not be started.
    private let executorLoop: EventLoop?

    /// A transport on `group`, or on the process-wide group when nil.
    public init(configuration: Configuration = Configuration(), group: EventLoopGroup? = nil) {
        self.configuration = configuration
        let started = group.map { Result<EventLoopGroup, SystemError>.success($0) }
            ?? Result { () throws(SystemError) -> EventLoopGroup in try EventLoopGroup.shared() }
        self.environment = started.map { TransportEnvironment(configuration: configuration, group: $0) }
        self.executorLoop = try? started.get().next()
    }

    /// An executor on one of the transport's loops: a Swift task that runs on it starts its
    /// exchanges without a thread hop (a connection it dials is on that loop) and is resumed
    /// there. Nil when the loops could not be started.
    public var taskExecutor: (any TaskExecutor)? { executorLoop }

    /// Starts a request. The delegate hears of its progress on a connection's loop; the
    /// returned exchange cancels it or pauses its response.
    @discardableResult
    public func execute(_ request: TransportRequest, delegate: HTTPExchangeDelegate) -> HTTPExchange {
        let exchange = makeExchange(request, delegate: delegate)
        start(exchange)
        return exchange
    }

    /// Makes an exchange without starting it, so the caller can keep it before any callback
    /// can arrive; ``start(_:)`` sends it.
    public func makeExchange(_ request: TransportRequest, delegate: HTTPExchangeDelegate) -> HTTPExchange {
        HTTPExchange(request: request, delegate: delegate)
    }

    /// Starts an exchange made by ``makeExchange(_:delegate:)``.
    ///
    /// - Warning: call it holding no lock that the exchange's delegate takes: when the
    ///   connection's loop is idle, the request is sent from inside this call, and its first
    ///   events (or its failure) reach the delegate before it returns.
    public func start(_ exchange: HTTPExchange) {
        let request = exchange.request
        if exchange.state.withLock({ $0.cancelRequested }) {
            exchange.fail(.cancelled)
            return
        }
        do {
            try HTTP1RequestEncoder.validate(request.head)
        } catch {
            exchange.fail(.localProtocol(error))
            return
        }
        guard !isShutDown.load(ordering: .relaxed) else {
            exchange.fail(.shutDown)
            return
        }
        switch environment {
        case .success(let environment):
            // Callers start exchanges holding no lock: an idle loop may be borrowed.
            pool(for: request, in: environment).submit(exchange, entry: .borrowing)
        case .failure(let error):
            exchange.fail(.dial(.connect(.connect(error))))
        }
    }

    /// Opens a TCP connection to `host`:`port` for its caller's own bytes (a stream task), with
    /// the transport's connect timeout and resolver, through `proxy` when given: a tunnel
    /// (CONNECT to an HTTP proxy, or SOCKS5) to the host. It belongs to no pool. `completion`
    /// runs once, on the connection's loop; the connection is not read until
    /// ``UpgradedConnection/start(_:)``.
    public func openConnection(
        host: String, port: UInt16, proxy: ProxyServer?, owner: (any ConnectionOwner)?,
        completion: @escaping @Sendable (Result<UpgradedConnection, TransportError>) -> Void
    ) {
        guard !isShutDown.load(ordering: .relaxed) else {
            completion(.failure(.shutDown))
            return
        }
        let environment: TransportEnvironment
        switch self.environment {
        case .success(let started): environment = started
        case .failure(let error):
            completion(.failure(.dial(.connect(.connect(error)))))
            return
        }
        let origin = Origin(scheme: .http, host: host, port: port)
        let key = ConnectionKey(origin: origin, route: proxy.map { .tunnel($0) } ?? .direct)
        let dialer = Dialer(key: key, environment: environment) { nil }
        dialer.start(on: environment.group.next()) { result in
            switch result {
            case .success(let dialed):
                let connection = UpgradedConnection(stream: dialed.stream, leftover: [])
                connection.environment = environment
                completion(.success(connection))
            case .failure(let failure):
                completion(.failure(.dial(failure)))
            }
        }
    }

    /// Closes every pool: waiting requests fail, idle connections close.
    public func shutdown() {
        isShutDown.store(true, ordering: .relaxed)
        let drivers = pools.withLock { $0.removeAll() }
        for driver in drivers { driver.shutdown() }
    }

    /// Retires every connection: idle ones close now, busy ones close when their exchanges
    /// end, and requests waiting for a connection, like every later one, get a new one (URLSession's
    /// `flush` and `reset`).
    public func retireConnections() {
        let drivers = pools.withLock { $0.removeAll() }
        for driver in drivers {
            for exchange in driver.retire() { start(exchange) }
        }
    }

    private func pool(for request: TransportRequest, in environment: TransportEnvironment) -> PoolDriver {
        pools.withLock { pools in
            if let last = pools.last, request.hasConnectionKey(last.key) { return last }
            let key = request.connectionKey
            if let existing = pools.byKey[key] {
                pools.last = existing
                return existing
            }
            var poolConfiguration = configuration.pool
            if case .forwardingProxy = key.route {
                poolConfiguration.mayNegotiateHTTP2 = false
            } else if key.http1Only {
                poolConfiguration.mayNegotiateHTTP2 = false
            } else {
                poolConfiguration.mayNegotiateHTTP2 = key.origin.scheme == .https
                    ? configuration.tls.applicationProtocols.contains("h2") : configuration.http2PriorKnowledge
            }
            let driver = PoolDriver(key: key, configuration: poolConfiguration, environment: environment) { [weak self] exchange in
                // This transport is the pool's owner: gone, nothing can carry the exchange.
                guard let self else { return exchange.fail(.shutDown) }
                self.start(exchange)
            }
            pools.byKey[key] = driver
            pools.last = driver
            return driver
        }
    }
}
