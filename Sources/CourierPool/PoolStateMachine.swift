import DequeModule

/// The connection pool of one key (scheme, host, port, proxy, TLS settings) as a pure state
/// machine: events named as facts go in, actions named as commands come out. It performs no
/// I/O and reads no clock; a driver dials, sends, closes and runs the timers it asks for.
///
/// Rules it enforces:
/// - HTTP/1: at most `maxConnections` connections, counting those still being dialed and
///   failed slots backing off; one request per connection; waiters served first in, first out;
///   a released connection goes straight to the next waiter; idle connections are reused most
///   recent first, expire after `idleTimeout`, and are bounded by `maxIdleConnections`.
/// - HTTP/2: requests multiplex on an established connection up to its stream limit; a new
///   connection is dialed only beyond that; while the first connection that may turn out to
///   speak HTTP/2 is being established, further requests wait for it; GOAWAY drains one.
/// - A failed dial backs off (doubling, bounded) while other connections can still serve the
///   waiters, and fails the waiters with the dial error when none can.
/// - A request retried after a stale connection failed waits for a newly established
///   connection, never an idle one.
///
/// Its members are `@inlinable` so that the driver's module specializes them for its dial
/// error. Called unspecialized across the module boundary, every event looked up the generic
/// metadata of `Connection`, `Waiter`, `PoolAction` and their containers at run time: about
/// 10,000 of the 104,000 instructions a sequential HTTP/1.1 request took through `URLSession`.
public struct PoolStateMachine<DialError: Error & Sendable & Equatable>: Sendable {
    public typealias Action = PoolAction<DialError>

    /// One connection slot.
    ///
    /// - `connecting` → `http1Idle`/`http1Leased`/`http2` (established) or `backingOff`/removed
    /// - `backingOff` → removed (its timer elapsed, or nothing waits any more)
    /// - `http1Idle` ⇄ `http1Leased`; either → removed (closed)
    /// - `http2` → removed once closed, or once draining with no streams left
    @usableFromInline
    enum Connection: Sendable, Equatable {
        case connecting
        case backingOff
        case http1Idle
        case http1Leased(PoolRequestID)
        case http2(activeStreams: Int, maxStreams: Int, draining: Bool)
    }

    @usableFromInline
    struct Waiter: Sendable, Equatable {
        @usableFromInline var id: PoolRequestID
        /// Retried after a stale connection: only a connection established from now on will do.
        @usableFromInline var requiresNewConnection: Bool

        @inlinable
        init(id: PoolRequestID, requiresNewConnection: Bool) {
            self.id = id
            self.requiresNewConnection = requiresNewConnection
        }
    }

    public let configuration: PoolConfiguration
    @usableFromInline var connections = IdentifierMap<PoolConnectionID, Connection>()
    /// Idle connections (HTTP/1 idle, HTTP/2 with no stream), most recently used last.
    @usableFromInline var idleOrder: [PoolConnectionID] = []
    @usableFromInline var waiters = Deque<Waiter>()
    @usableFromInline var nextConnectionID = 0
    /// True once a connection of the pool has spoken HTTP/2: until then a lease skips the
    /// search for one with a free stream (an HTTP/1 pool of 32 connections scanned them all
    /// for every request).
    @usableFromInline var hasSpokenHTTP2 = false
    @usableFromInline var consecutiveDialFailures = 0
    @usableFromInline var shuttingDown = false
    @usableFromInline var shutdownReported = false
    /// The array the events of every request return their actions in (``reusing(_:)``).
    @usableFromInline var reusableActions: [Action] = []

    @inlinable
    public init(configuration: PoolConfiguration = PoolConfiguration()) {
        self.configuration = configuration
    }

    /// Connections in any state, dialing and backing-off slots included.
    @inlinable
    public var connectionCount: Int { connections.count }
    /// Requests waiting for a connection.
    @inlinable
    public var waitingCount: Int { waiters.count }
    /// Idle connections.
    @inlinable
    public var idleCount: Int { idleOrder.count }

    // MARK: Requests

    /// A request wants a connection. `requiresNewConnection` marks the single retry of a
    /// request whose reused connection turned out to be stale.
    @inlinable
    public mutating func requestQueued(_ request: PoolRequestID, requiresNewConnection: Bool = false) -> [Action] {
        if shuttingDown { return [.failRequest(request, .shutDown)] }
        if !requiresNewConnection, let (connection, actions) = leaseAvailable(to: request) {
            _ = connection
            return actions
        }
        waiters.append(Waiter(id: request, requiresNewConnection: requiresNewConnection))
        return dialIfNeeded()
    }

    /// The caller gave up on a request. A waiting request is failed as cancelled; one already
    /// executing is the connection's business, so nothing happens here.
    @inlinable
    public mutating func requestCancelled(_ request: PoolRequestID) -> [Action] {
        guard let index = waiters.firstIndex(where: { $0.id == request }) else { return [] }
        waiters.remove(at: index)
        return [.failRequest(request, .cancelled)] + dropUnneededBackoff()
    }

    // MARK: Connections

    /// A dial succeeded.
    @inlinable
    public mutating func connectionEstablished(_ id: PoolConnectionID, protocol: PoolConnectionProtocol) -> [Action] {
        guard connections[id] == .connecting else { return [] }
        consecutiveDialFailures = 0
        if shuttingDown {
            connections[id] = nil
            return [.closeConnection(id)] + shutdownCompleteIfDone()
        }
        switch `protocol` {
        case .http1:
            if let waiter = waiters.popFirst() {
                connections[id] = .http1Leased(waiter.id)
                // Waiters held back in case this connection spoke HTTP/2 may dial now.
                return [.executeRequest(waiter.id, on: id)] + dialIfNeeded()
            }
            connections[id] = .http1Idle
            return becameIdle(id)
        case .http2(let maxStreams):
            hasSpokenHTTP2 = true
            connections[id] = .http2(activeStreams: 0, maxStreams: max(maxStreams, 0), draining: false)
            var actions = assignWaiters(toHTTP2: id, includingRetries: true)
            if case .http2(0, _, _) = connections[id] { actions += becameIdle(id) }
            return actions + dialIfNeeded()
        }
    }

    /// A dial failed.
    @inlinable
    public mutating func connectionFailed(_ id: PoolConnectionID, error: DialError) -> [Action] {
        guard connections[id] == .connecting else { return [] }
        connections[id] = nil
        consecutiveDialFailures += 1
        if shuttingDown { return shutdownCompleteIfDone() }
        guard !waiters.isEmpty else { return [] }
        if !hasLiveConnection {
            // Nothing else can serve the waiters: fail them with the dial error.
            var actions: [Action] = waiters.map { .failRequest($0.id, .dialFailed(error)) }
            waiters.removeAll()
            actions += dropUnneededBackoff()
            return actions
        }
        connections[id] = .backingOff
        return [.scheduleBackoffTimer(id, backoffDelay())]
    }

    /// A failed dial's backoff elapsed.
    @inlinable
    public mutating func backoffElapsed(_ id: PoolConnectionID) -> [Action] {
        guard connections[id] == .backingOff else { return [] }
        connections[id] = nil
        if shuttingDown { return shutdownCompleteIfDone() }
        return dialIfNeeded()
    }

    /// An HTTP/1 request finished and its connection can carry another.
    @inlinable
    public mutating func connectionReleased(_ id: PoolConnectionID) -> [Action] {
        guard case .http1Leased = connections[id] else { return [] }
        if shuttingDown {
            connections[id] = nil
            return [.closeConnection(id)] + shutdownCompleteIfDone()
        }
        if let index = waiters.firstIndex(where: { !$0.requiresNewConnection }) {
            let waiter = waiters.remove(at: index)
            connections[id] = .http1Leased(waiter.id)
            return [.executeRequest(waiter.id, on: id)]
        }
        connections[id] = .http1Idle
        return becameIdle(id)
    }

    /// An HTTP/2 stream ended.
    @inlinable
    public mutating func streamClosed(_ id: PoolConnectionID) -> [Action] {
        guard case .http2(let active, let maxStreams, let draining) = connections[id], active > 0 else { return [] }
        connections[id] = .http2(activeStreams: active - 1, maxStreams: maxStreams, draining: draining)
        if draining || shuttingDown {
            if active - 1 == 0 {
                connections[id] = nil
                return [.closeConnection(id)] + (shuttingDown ? shutdownCompleteIfDone() : dialIfNeeded())
            }
            return []
        }
        let actions = assignWaiters(toHTTP2: id, includingRetries: false)
        // No stream left means no waiter was given one: the actions so far are none.
        if case .http2(0, _, _) = connections[id] { return becameIdle(id) }
        return actions
    }

    /// The server changed its stream limit.
    @inlinable
    public mutating func http2SettingsReceived(_ id: PoolConnectionID, maxConcurrentStreams: Int) -> [Action] {
        guard case .http2(let active, _, let draining) = connections[id] else { return [] }
        connections[id] = .http2(activeStreams: active, maxStreams: max(maxConcurrentStreams, 0), draining: draining)
        guard !draining, !shuttingDown else { return [] }
        var actions: [Action] = []
        let wasIdle = idleOrder.contains(id)
        actions += assignWaiters(toHTTP2: id, includingRetries: false)
        if wasIdle, case .http2(let nowActive, _, _) = connections[id], nowActive > 0 {
            idleOrder.removeAll { $0 == id }
            actions.insert(.cancelIdleTimer(id), at: 0)
        }
        return actions + dialIfNeeded()
    }

    /// The server sent GOAWAY: no new streams; the connection closes once its streams end.
    /// Streams above the last-stream-id are the driver's to re-queue.
    @inlinable
    public mutating func goAwayReceived(_ id: PoolConnectionID) -> [Action] {
        guard case .http2(let active, let maxStreams, _) = connections[id] else { return [] }
        if active == 0 {
            connections[id] = nil
            let wasIdle = idleOrder.contains(id)
            idleOrder.removeAll { $0 == id }
            return (wasIdle ? [.cancelIdleTimer(id)] : []) + [.closeConnection(id)] + dialIfNeeded()
        }
        connections[id] = .http2(activeStreams: active, maxStreams: maxStreams, draining: true)
        return dialIfNeeded()
    }

    /// A connection closed: the peer closed it, or the driver did after a response that
    /// forbade reuse or after an error. A request it carried is the driver's to finish.
    @inlinable
    public mutating func connectionClosed(_ id: PoolConnectionID) -> [Action] {
        guard let state = connections.removeValue(forKey: id) else { return [] }
        var actions: [Action] = []
        if idleOrder.contains(id) {
            idleOrder.removeAll { $0 == id }
            actions.append(.cancelIdleTimer(id))
        }
        if state == .backingOff { actions.append(.cancelBackoffTimer(id)) }
        if shuttingDown { return actions + shutdownCompleteIfDone() }
        return actions + dialIfNeeded()
    }

    /// An idle connection's timer fired.
    @inlinable
    public mutating func idleTimeoutFired(_ id: PoolConnectionID) -> [Action] {
        guard idleOrder.contains(id) else { return [] }
        idleOrder.removeAll { $0 == id }
        connections[id] = nil
        // The freed slot may be what a waiting retry needs.
        return [.closeConnection(id)] + dialIfNeeded()
    }

    /// Stop: waiting requests fail, idle connections close, busy ones close when done.
    @inlinable
    public mutating func shutdown() -> [Action] {
        guard !shuttingDown else { return [] }
        shuttingDown = true
        var actions: [Action] = waiters.map { .failRequest($0.id, .shutDown) }
        waiters.removeAll()
        for id in idleOrder {
            connections[id] = nil
            actions += [.cancelIdleTimer(id), .closeConnection(id)]
        }
        idleOrder.removeAll()
        for id in backingOffSlots() {
            connections[id] = nil
            actions.append(.cancelBackoffTimer(id))
        }
        return actions + shutdownCompleteIfDone()
    }
}
