import CourierPool

// Shared by the pool tests.

/// The dial error the tests report.
struct DialError: Error, Sendable, Equatable {
    var code: Int
}

typealias Machine = PoolStateMachine<DialError>
typealias Action = PoolAction<DialError>

extension PoolConnectionProtocol {
    static func h2(_ maxConcurrentStreams: Int) -> Self { .http2(maxConcurrentStreams: maxConcurrentStreams) }
}

func C(_ n: Int) -> PoolConnectionID { PoolConnectionID(n) }
func R(_ n: Int) -> PoolRequestID { PoolRequestID(n) }

func poolConfiguration(
    maxConnections: Int = 6,
    maxIdleConnections: Int = 6,
    idleTimeout: Duration = .seconds(60),
    initialBackoff: Duration = .milliseconds(100),
    maxBackoff: Duration = .seconds(10),
    mayNegotiateHTTP2: Bool = false
) -> PoolConfiguration {
    var configuration = PoolConfiguration()
    configuration.maxConnections = maxConnections
    configuration.maxIdleConnections = maxIdleConnections
    configuration.idleTimeout = idleTimeout
    configuration.initialBackoff = initialBackoff
    configuration.maxBackoff = maxBackoff
    configuration.mayNegotiateHTTP2 = mayNegotiateHTTP2
    return configuration
}

func makePool(
    maxConnections: Int = 6,
    maxIdleConnections: Int = 6,
    idleTimeout: Duration = .seconds(60),
    initialBackoff: Duration = .milliseconds(100),
    maxBackoff: Duration = .seconds(10),
    mayNegotiateHTTP2: Bool = false
) -> Machine {
    Machine(configuration: poolConfiguration(
        maxConnections: maxConnections, maxIdleConnections: maxIdleConnections, idleTimeout: idleTimeout,
        initialBackoff: initialBackoff, maxBackoff: maxBackoff, mayNegotiateHTTP2: mayNegotiateHTTP2
    ))
}

/// An event the driver reports to the pool.
enum PoolEvent: Equatable {
    case queued(PoolRequestID, retry: Bool)
    case cancelled(PoolRequestID)
    case established(PoolConnectionID, PoolConnectionProtocol)
    case failed(PoolConnectionID, DialError)
    case backoffElapsed(PoolConnectionID)
    case released(PoolConnectionID)
    case streamClosed(PoolConnectionID)
    case settings(PoolConnectionID, Int)
    case goAway(PoolConnectionID)
    case closed(PoolConnectionID)
    case idleTimeoutFired(PoolConnectionID)
    case shutdown
    /// An event the pool must ignore: unknown id, or the wrong state for it.
    indirect case ignored(PoolEvent)
}

extension Machine {
    mutating func handle(_ event: PoolEvent) -> [Action] {
        switch event {
        case .queued(let r, let retry): return requestQueued(r, requiresNewConnection: retry)
        case .cancelled(let r): return requestCancelled(r)
        case .established(let c, let proto): return connectionEstablished(c, protocol: proto)
        case .failed(let c, let error): return connectionFailed(c, error: error)
        case .backoffElapsed(let c): return backoffElapsed(c)
        case .released(let c): return connectionReleased(c)
        case .streamClosed(let c): return streamClosed(c)
        case .settings(let c, let n): return http2SettingsReceived(c, maxConcurrentStreams: n)
        case .goAway(let c): return goAwayReceived(c)
        case .closed(let c): return connectionClosed(c)
        case .idleTimeoutFired(let c): return idleTimeoutFired(c)
        case .shutdown: return shutdown()
        case .ignored(let inner): return handle(inner)
        }
    }
}
