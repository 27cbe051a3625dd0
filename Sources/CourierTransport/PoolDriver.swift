import CourierCore
import CourierPool
import CourierReactor
import CourierSync
import CourierTLS
import Foundation

/// Runs one key's ``PoolStateMachine``: feeds it events under a mutex and carries out the
/// actions it returns, outside the mutex, on the right event loops.
final class PoolDriver: Sendable {
    typealias Machine = PoolStateMachine<DialFailure>
    typealias Action = PoolAction<DialFailure>

    struct State {
        var machine: Machine
        var exchanges = IdentifierMap<PoolRequestID, HTTPExchange>()
        var connections = IdentifierMap<PoolConnectionID, ConnectionHandle>()
        var nextRequestID = 0
        /// When each request still waiting for a connection times out.
        var waitDeadlines = IdentifierMap<PoolRequestID, MonotonicInstant>()
        /// The time the current wait timer fires, and its generation: a timer whose
        /// generation is no longer current does nothing.
        var waitTimer: (at: MonotonicInstant, generation: Int)?
        var waitTimerGeneration = 0
        /// The loop's timer for `waitTimer`, once scheduled. Its closure holds the pool until it
        /// fires, so it is cancelled as soon as no request waits: a pool that shut down is then
        /// freed at once, not at the last wait's deadline.
        var scheduledWaitTimer: ScheduledWaitTimer?
        /// ``retire()`` ran: an exchange that reaches this pool now (its caller found the pool
        /// just before the transport let it go) goes to a new pool instead.
        var retired = false

        /// Request `id` waits no more. When it was the last, the wait timer is not wanted any
        /// more: returned, to be cancelled outside the lock.
        mutating func endWait(_ id: PoolRequestID) -> ScheduledWaitTimer? {
            waitDeadlines[id] = nil
            guard waitDeadlines.isEmpty, waitTimer != nil else { return nil }
            waitTimer = nil
            defer { scheduledWaitTimer = nil }
            return scheduledWaitTimer
        }
    }

    /// A wait timer on its loop.
    struct ScheduledWaitTimer {
        let loop: EventLoop
        let id: TimerID

        func cancel() {
            loop.runOrQueue(id) { [loop] id in loop.cancelTimer(id) }
        }
    }

    let key: ConnectionKey
    let environment: TransportEnvironment
    /// The machine and what its identifiers stand for; guarded by the mutex.
    private let state: Mutex<State>
    /// Starts an exchange on the transport's current pool for its key: where one submitted to
    /// this pool after it retired goes.
    private let restart: @Sendable (HTTPExchange) -> Void

    init(
        key: ConnectionKey, configuration: PoolConfiguration, environment: TransportEnvironment,
        restart: @escaping @Sendable (HTTPExchange) -> Void
    ) {
        self.key = key
        self.environment = environment
        self.restart = restart
        self.state = Mutex(State(machine: Machine(configuration: configuration)))
    }

    var group: EventLoopGroup { environment.group }

    /// The request waiting longest, for a challenge raised while dialing on its behalf.
    func oldestWaitingExchange() -> HTTPExchange? {
        state.withLock { state in state.exchanges.min { $0.key < $1.key }?.value }
    }

    // MARK: Events from the transport and its connections

    /// Queues an exchange for a connection. Waiting counts against the request's timeouts, as
    /// URLSession's request timeout covers the wait for a connection: a request still waiting
    /// when its idle timeout or deadline passes fails as timed out.
    func submit(_ exchange: HTTPExchange, requiresNewConnection: Bool = false, entry: LoopEntry = .queued) {
        var waitTimer: (at: MonotonicInstant, generation: Int)?
        var retired = false
        let actions = state.withLock { state -> [Action]? in
            if state.retired {
                retired = true
                return []
            }
            let id = PoolRequestID(state.nextRequestID)
            state.nextRequestID += 1
            let cancelled = exchange.state.withLock { exchangeState -> Bool in
                // A cancel that came while the exchange was between pools or connections
                // (being retried) found no queue to take it out of: honour it here.
                if exchangeState.cancelRequested { return true }
                exchangeState.phase = .queued(self, id)
                return false
            }
            if cancelled { return nil }
            state.exchanges[id] = exchange
            let actions = state.machine.requestQueued(id, requiresNewConnection: requiresNewConnection)
            if !actions.contains(where: { if case .executeRequest(id, _) = $0 { true } else { false } }) {
                var deadline = MonotonicInstant.now + exchange.request.idleTimeout
                if let resourceDeadline = exchange.request.deadline { deadline = min(deadline, resourceDeadline) }
                state.waitDeadlines[id] = deadline
                if state.waitTimer.map({ deadline < $0.at }) ?? true {
                    state.waitTimerGeneration += 1
                    state.waitTimer = (deadline, state.waitTimerGeneration)
                    waitTimer = state.waitTimer
                }
            }
            return actions
        }
        if retired {
            restart(exchange)
            return
        }
        guard let actions else {
            exchange.fail(.cancelled)
            return
        }
        run(actions, entry: entry)
        if let waitTimer { armWaitTimer(waitTimer) }
    }

    func cancel(_ id: PoolRequestID) {
        var unwanted: ScheduledWaitTimer?
        run(state.withLock { state in
            unwanted = state.endWait(id)
            return state.machine.requestCancelled(id)
        })
        unwanted?.cancel()
    }

    private func armWaitTimer(_ timer: (at: MonotonicInstant, generation: Int)) {
        let loop = group.next()
        loop.execute { [self] in
            let id = loop.scheduleTimer(at: timer.at) { [self] in waitTimerFired(generation: timer.generation) }
            let scheduled = ScheduledWaitTimer(loop: loop, id: id)
            // Kept only while it is the current timer; the one it replaces is cancelled.
            let (current, replaced) = state.withLock { state -> (Bool, ScheduledWaitTimer?) in
                guard state.waitTimer?.generation == timer.generation else { return (false, nil) }
                defer { state.scheduledWaitTimer = scheduled }
                return (true, state.scheduledWaitTimer)
            }
            if !current { loop.cancelTimer(id) }
            replaced?.cancel()
        }
    }

    /// Fails the requests whose wait has outlasted their timeout, and arms the timer for the
    /// next one to expire.
    private func waitTimerFired(generation: Int) {
        let now = MonotonicInstant.now
        var expired: [HTTPExchange] = []
        var actions: [Action] = []
        var next: (at: MonotonicInstant, generation: Int)?
        state.withLock { state in
            guard state.waitTimer?.generation == generation else { return }
            state.waitTimer = nil
            state.scheduledWaitTimer = nil
            var earliest: MonotonicInstant?
            for (id, deadline) in state.waitDeadlines {
                if deadline <= now {
                    state.waitDeadlines[id] = nil
                    // Only a request the machine still holds as waiting: one it has just
                    // given a connection is that connection's to time out now.
                    let cancelled = state.machine.requestCancelled(id)
                    if !cancelled.isEmpty {
                        actions += cancelled
                        if let exchange = state.exchanges.removeValue(forKey: id) { expired.append(exchange) }
                    }
                } else {
                    earliest = min(earliest ?? deadline, deadline)
                }
            }
            if let earliest {
                state.waitTimerGeneration += 1
                state.waitTimer = (earliest, state.waitTimerGeneration)
                next = state.waitTimer
            }
        }
        for exchange in expired { exchange.fail(.timedOut) }
        // The machine answers each cancellation with a failRequest for an exchange no longer
        // in the table: nothing more is delivered.
        run(actions)
        if let next { armWaitTimer(next) }
    }

    func connectionReleased(_ id: PoolConnectionID) {
        run(state.withLock { $0.machine.connectionReleased(id) })
    }

    func connectionClosed(_ id: PoolConnectionID) {
        run(state.withLock { state -> [Action] in
            state.connections[id] = nil
            return state.machine.connectionClosed(id)
        })
    }

    func streamClosed(_ id: PoolConnectionID) {
        run(state.withLock { $0.machine.streamClosed(id) })
    }

    func http2SettingsReceived(_ id: PoolConnectionID, maxConcurrentStreams: Int) {
        run(state.withLock { $0.machine.http2SettingsReceived(id, maxConcurrentStreams: maxConcurrentStreams) })
    }

    func goAwayReceived(_ id: PoolConnectionID) {
        run(state.withLock { $0.machine.goAwayReceived(id) })
    }

    func idleTimeoutFired(_ id: PoolConnectionID) {
        run(state.withLock { $0.machine.idleTimeoutFired(id) })
    }

    /// A request failed on a reused connection before any response byte: try once more on a
    /// new connection.
    func requeueAfterStaleConnection(_ exchange: HTTPExchange, closedConnection: PoolConnectionID) {
        submit(exchange, requiresNewConnection: true)
    }

    func shutdown() {
        run(state.withLock { $0.machine.shutdown() })
    }

    /// Shuts the pool down without failing its waiting requests: they are returned, for the
    /// transport to queue on a new pool. Idle connections close; busy ones close after their
    /// exchange.
    func retire() -> [HTTPExchange] {
        var waiting: [HTTPExchange] = []
        var unwanted: ScheduledWaitTimer?
        let actions = state.withLock { state -> [Action] in
            state.retired = true
            waiting = state.exchanges.sorted { $0.key < $1.key }.map(\.value)
            state.exchanges.removeAll()
            state.waitDeadlines.removeAll()
            state.waitTimer = nil
            unwanted = state.scheduledWaitTimer
            state.scheduledWaitTimer = nil
            // The machine fails the waiters it held; their exchanges are no longer in the
            // table, so nothing is delivered for them.
            return state.machine.shutdown()
        }
        unwanted?.cancel()
        run(actions)
        return waiting
    }

    // MARK: Actions

    /// How a request given to a connection reaches the connection's loop from another thread.
    enum LoopEntry {
        /// Queued for the loop's thread.
        case queued
        /// At once in the loop's place when the loop is idle (``EventLoop/runBorrowing(_:)``):
        /// only for a caller that holds no lock.
        case borrowing
    }

    private func run(_ actions: [Action], entry: LoopEntry = .queued) {
        // An idle connection that takes a request is told both in one trip to its loop.
        var cancelsIdleTimerOf: PoolConnectionID?
        for (index, action) in actions.enumerated() {
            switch action {
            case .createConnection(let id):
                dial(id)
            case .executeRequest(let requestID, let connectionID):
                let cancelsIdleTimer = cancelsIdleTimerOf == connectionID
                cancelsIdleTimerOf = nil
                let (exchange, connection, unwanted) = state.withLock { state in
                    let unwanted = state.endWait(requestID)
                    return (state.exchanges.removeValue(forKey: requestID), state.connections[connectionID], unwanted)
                }
                unwanted?.cancel()
                guard let exchange else {
                    if cancelsIdleTimer { connection?.onLoop { $0.cancelPoolIdleTimer() } }
                    continue
                }
                guard let connection else {
                    // The connection went away before it could take the request: queue it again.
                    submit(exchange, requiresNewConnection: true)
                    continue
                }
                // The closure captures nothing: what it needs goes with it as a value, so a
                // request that runs at once allocates nothing here.
                let body: @Sendable (any PooledConnection, (HTTPExchange, Bool)) -> Void = { connection, job in
                    if job.1 { connection.cancelPoolIdleTimer() }
                    connection.execute(job.0)
                }
                switch entry {
                case .queued: connection.onLoop((exchange, cancelsIdleTimer), body)
                case .borrowing: connection.onLoopBorrowing((exchange, cancelsIdleTimer), body)
                }
            case .failRequest(let requestID, let failure):
                let (exchange, unwanted) = state.withLock { state in
                    let unwanted = state.endWait(requestID)
                    return (state.exchanges.removeValue(forKey: requestID), unwanted)
                }
                unwanted?.cancel()
                switch failure {
                case .dialFailed(let error): exchange?.fail(error == .cancelled ? .cancelled : .dial(error))
                case .cancelled: exchange?.fail(.cancelled)
                case .shutDown: exchange?.fail(.shutDown)
                }
            case .closeConnection(let id):
                let connection = state.withLock { $0.connections.removeValue(forKey: id) }
                connection?.onLoop { $0.close() }
            case .scheduleIdleTimer(let id, let delay):
                state.withLock { $0.connections[id] }?.onLoop(delay) { connection, delay in connection.schedulePoolIdleTimer(delay) }
            case .cancelIdleTimer(let id):
                if index + 1 < actions.count, case .executeRequest(_, id) = actions[index + 1] {
                    cancelsIdleTimerOf = id
                    continue
                }
                state.withLock { $0.connections[id] }?.onLoop { $0.cancelPoolIdleTimer() }
            case .scheduleBackoffTimer(let id, let delay):
                // A stale backoff timer is harmless: the machine ignores slots it no longer has.
                let loop = group.next()
                loop.execute { [self] in
                    loop.scheduleTimer(after: delay) { [self] in
                        run(state.withLock { $0.machine.backoffElapsed(id) })
                    }
                }
            case .cancelBackoffTimer:
                break
            case .shutdownComplete:
                break
            }
        }
    }

    /// Dials a connection on the caller's loop when it is one of ours, else the next loop.
    private func dial(_ id: PoolConnectionID) {
        let loop = group.currentOrNext()
        // Strong, like the completion below: the dial ends, and a weak capture would give the
        // pool a side table (see HTTP1Connection.pool).
        let dialer = Dialer(key: key, environment: environment) { [self] in oldestWaitingExchange() }
        dialer.start(on: loop) { [self] result in
            switch result {
            case .success(let dialed): established(id, stream: dialed.stream, http2: dialed.http2, timings: dialed.timings)
            case .failure(let failure): connectionFailed(id, failure)
            }
        }
    }

    /// Hands a ready stream to the pool as an HTTP/1 or an HTTP/2 connection.
    private func established(
        _ id: PoolConnectionID, stream: TransportStream, http2: Bool, timings: ConnectTimings
    ) {
        let connection: any PooledConnection
        let kind: PoolConnectionProtocol
        if http2 {
            do {
                let h2 = try HTTP2Connection(
                    id: id, stream: stream, pool: self, configuration: environment.http2Configuration,
                    timings: timings
                )
                connection = h2
                kind = .http2(maxConcurrentStreams: HTTP2Connection.assumedMaxConcurrentStreams)
            } catch {
                stream.close()
                connectionFailed(id, .http2Setup("\(error)"))
                return
            }
        } else {
            connection = HTTP1Connection(id: id, stream: stream, pool: self, timings: timings)
            kind = .http1
        }
        let actions = state.withLock { state -> [Action] in
            state.connections[id] = ConnectionHandle(connection: connection)
            return state.machine.connectionEstablished(id, protocol: kind)
        }
        run(actions)
    }

    private func connectionFailed(_ id: PoolConnectionID, _ failure: DialFailure) {
        var refused: HTTPExchange?
        var unwanted: ScheduledWaitTimer?
        let actions = state.withLock { state -> [Action] in
            var actions = state.machine.connectionFailed(id, error: failure)
            // A proxy's refusal of a tunnel answers the credential of the request it was dialed
            // for (the oldest waiting). When other connections live, the machine keeps its
            // waiters and dials again, which would send the same credential: that request
            // learns of the refusal now instead.
            guard case .proxy(.tunnelRefused) = failure,
                  !actions.contains(where: { if case .failRequest = $0 { true } else { false } }),
                  let (requestID, exchange) = state.exchanges.min(by: { $0.key < $1.key }) else { return actions }
            state.exchanges[requestID] = nil
            unwanted = state.endWait(requestID)
            actions += state.machine.requestCancelled(requestID)
            refused = exchange
            return actions
        }
        unwanted?.cancel()
        refused?.fail(.dial(failure))
        run(actions)
    }
}
