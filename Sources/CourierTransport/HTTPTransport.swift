import CourierCore
import CourierHTTP1
import CourierPool
import CourierReactor
import Synchronization

/// The transport of one session: a pool per origin, and the entry point for requests.
public final class HTTPTransport: Sendable {
    /// Limits shared by every pool of the transport.
    public struct Configuration: Sendable {
        public var pool = PoolConfiguration()
        /// Longest time to establish a connection.
        public var connectTimeout: Duration = .seconds(60)
        public init() {}
    }

    public let configuration: Configuration
    private let group: EventLoopGroup
    /// Pools by origin; guarded by the mutex.
    private let pools = Mutex<[Origin: PoolDriver]>([:])
    private let isShutDown = Atomic<Bool>(false)

    public init(configuration: Configuration = Configuration(), group: EventLoopGroup = .shared) {
        self.configuration = configuration
        self.group = group
    }

    /// Starts a request. The delegate hears of its progress on a connection's loop; the
    /// returned exchange cancels it or pauses its response.
    @discardableResult
    public func execute(_ request: TransportRequest, delegate: HTTPExchangeDelegate) -> HTTPExchange {
        let exchange = HTTPExchange(request: request, delegate: delegate)
        do {
            try HTTP1RequestEncoder.validate(request.head)
        } catch {
            exchange.fail(.localProtocol(error))
            return exchange
        }
        guard !isShutDown.load(ordering: .relaxed) else {
            exchange.fail(.shutDown)
            return exchange
        }
        pool(for: request.origin).submit(exchange)
        return exchange
    }

    /// Closes every pool: waiting requests fail, idle connections close.
    public func shutdown() {
        isShutDown.store(true, ordering: .relaxed)
        let drivers = pools.withLock { pools in
            let all = Array(pools.values)
            pools.removeAll()
            return all
        }
        for driver in drivers { driver.shutdown() }
    }

    private func pool(for origin: Origin) -> PoolDriver {
        pools.withLock { pools in
            if let existing = pools[origin] { return existing }
            let driver = PoolDriver(origin: origin, configuration: configuration.pool, connectTimeout: configuration.connectTimeout, group: group)
            pools[origin] = driver
            return driver
        }
    }
}
