/// A command the pool state machine gives its driver. Executing it is the driver's business.
public enum PoolAction<DialError: Error & Sendable & Equatable>: Sendable, Equatable {
    /// Dial a new connection with this identifier; report `connectionEstablished` or
    /// `connectionFailed`.
    case createConnection(PoolConnectionID)
    /// Send the request on the connection.
    case executeRequest(PoolRequestID, on: PoolConnectionID)
    /// Complete the request with this failure.
    /// Boxed: the failure (a dial error) is many times the size of the other cases, and
    /// actions are copied on every request.
    indirect case failRequest(PoolRequestID, PoolFailure<DialError>)
    /// Close the connection; the pool has already forgotten it.
    case closeConnection(PoolConnectionID)
    /// Call `idleTimeoutFired` for the connection after the idle timeout.
    case scheduleIdleTimer(PoolConnectionID, Duration)
    /// Cancel that connection's idle timer.
    case cancelIdleTimer(PoolConnectionID)
    /// Call `backoffElapsed` for the connection slot after this delay.
    case scheduleBackoffTimer(PoolConnectionID, Duration)
    /// Cancel that slot's backoff timer.
    case cancelBackoffTimer(PoolConnectionID)
    /// Shutdown finished: no connection or request remains.
    case shutdownComplete
}
