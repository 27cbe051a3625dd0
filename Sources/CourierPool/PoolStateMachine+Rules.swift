import DequeModule

/// The shared rules: leasing, dialing, idling and backoff.
extension PoolStateMachine {
    /// Leases an available connection to `request`: an HTTP/2 connection with a free stream
    /// first, else the most recently used idle HTTP/1 connection.
    @inlinable
    mutating func leaseAvailable(to request: PoolRequestID) -> (PoolConnectionID, [Action])? {
        // The lowest-numbered HTTP/2 connection with a free stream (a scan, not a sort: this
        // runs for every request).
        var chosen: (id: PoolConnectionID, active: Int, maxStreams: Int)?
        if hasSpokenHTTP2 {
            for (id, state) in connections {
                guard case .http2(let active, let maxStreams, let draining) = state, !draining, active < maxStreams else { continue }
                if chosen == nil || id < chosen!.id { chosen = (id, active, maxStreams) }
            }
        }
        if let (id, active, maxStreams) = chosen {
            connections[id] = .http2(activeStreams: active + 1, maxStreams: maxStreams, draining: false)
            if active == 0, idleOrder.contains(id) {
                idleOrder.removeAll { $0 == id }
                return (id, reusing(.cancelIdleTimer(id), .executeRequest(request, on: id)))
            }
            return (id, reusing(.executeRequest(request, on: id)))
        }
        if let index = idleOrder.lastIndex(where: { connections[$0] == .http1Idle }) {
            let id = idleOrder.remove(at: index)
            connections[id] = .http1Leased(request)
            return (id, reusing(.cancelIdleTimer(id), .executeRequest(request, on: id)))
        }
        return nil
    }

    /// Gives waiting requests to an HTTP/2 connection's free streams.
    @inlinable
    mutating func assignWaiters(toHTTP2 id: PoolConnectionID, includingRetries: Bool) -> [Action] {
        var actions: [Action] = []
        while case .http2(let active, let maxStreams, false) = connections[id], active < maxStreams,
              let index = waiters.firstIndex(where: { includingRetries || !$0.requiresNewConnection }) {
            let waiter = waiters.remove(at: index)
            connections[id] = .http2(activeStreams: active + 1, maxStreams: maxStreams, draining: false)
            actions.append(.executeRequest(waiter.id, on: id))
        }
        return actions
    }

    /// True when some connection can still serve the waiters: one being dialed, an HTTP/1
    /// connection carrying a request (it will be released), or an HTTP/2 connection that is
    /// not draining. Idle connections do not count: a waiter they could serve would have them.
    @inlinable
    var hasLiveConnection: Bool {
        connections.values.contains { state in
            switch state {
            case .connecting, .http1Leased: return true
            case .http2(_, _, let draining): return !draining
            case .http1Idle, .backingOff: return false
            }
        }
    }

    /// Dials as many connections as the waiters need, within the limit.
    @inlinable
    mutating func dialIfNeeded() -> [Action] {
        guard !shuttingDown, !waiters.isEmpty else { return [] }
        let pending = connections.values.filter { $0 == .connecting || $0 == .backingOff }.count
        // HTTP/2 may be negotiated: one connection in its handshake could serve everyone.
        if configuration.mayNegotiateHTTP2 && pending > 0 && !connections.values.contains(where: \.isEstablished) {
            return []
        }
        // An HTTP/2 connection with no free stream left counts as no capacity.
        var needed = waiters.count - pending
        var actions: [Action] = []
        while needed > 0 && connections.count < configuration.maxConnections {
            let id = PoolConnectionID(nextConnectionID)
            nextConnectionID += 1
            connections[id] = .connecting
            actions.append(.createConnection(id))
            needed -= 1
        }
        return actions
    }

    /// A connection has nothing to do: start its idle timer and keep the idle set bounded.
    @inlinable
    mutating func becameIdle(_ id: PoolConnectionID) -> [Action] {
        idleOrder.append(id)
        guard idleOrder.count > configuration.maxIdleConnections || !waiters.isEmpty else {
            return reusing(.scheduleIdleTimer(id, configuration.idleTimeout))
        }
        var actions: [Action] = [.scheduleIdleTimer(id, configuration.idleTimeout)]
        while idleOrder.count > configuration.maxIdleConnections {
            let oldest = idleOrder.removeFirst()
            connections[oldest] = nil
            actions += [.cancelIdleTimer(oldest), .closeConnection(oldest)]
        }
        // Waiters left now need a new connection (a retry); a closed slot may allow it.
        return actions + dialIfNeeded()
    }

    /// `action` in the machine's reusable array, emptied first.
    ///
    /// Design note: the events every request causes (a lease, a connection going idle) give
    /// one or two actions, and an array made for them cost an allocation each time. The
    /// machine keeps one array and hands it out: by the next event the driver has run and
    /// dropped it, so emptying it keeps its storage. If a caller still holds it, emptying
    /// copies first, as any array does, and nothing the caller holds changes.
    @inlinable
    mutating func reusing(_ action: Action) -> [Action] {
        keepReusableActions(1)
        if reusableActions.isEmpty { reusableActions.append(action) } else { reusableActions[0] = action }
        return reusableActions
    }

    /// `first` and `second` in the machine's reusable array (``reusing(_:)``).
    @inlinable
    mutating func reusing(_ first: Action, _ second: Action) -> [Action] {
        keepReusableActions(2)
        if reusableActions.isEmpty { reusableActions.append(first) } else { reusableActions[0] = first }
        if reusableActions.count < 2 { reusableActions.append(second) } else { reusableActions[1] = second }
        return reusableActions
    }

    /// Drops the reusable array's actions beyond the first `count`, keeping its storage (one
    /// by one from the end: cheaper for one or two than a general removal).
    @inlinable
    mutating func keepReusableActions(_ count: Int) {
        while reusableActions.count > count { reusableActions.removeLast() }
    }

    /// With nobody waiting, slots backing off are no longer needed.
    @inlinable
    mutating func dropUnneededBackoff() -> [Action] {
        guard waiters.isEmpty else { return [] }
        var actions: [Action] = []
        for id in backingOffSlots() {
            connections[id] = nil
            actions.append(.cancelBackoffTimer(id))
        }
        return actions
    }

    /// The slots backing off, in identifier order (usually none: the filter runs first, so
    /// the common case sorts nothing).
    @inlinable
    func backingOffSlots() -> [PoolConnectionID] {
        connections.compactMap { $0.value == .backingOff ? $0.key : nil }.sorted()
    }

    /// Bounded exponential backoff: initial × 2^(failures − 1), at most `maxBackoff`.
    @inlinable
    func backoffDelay() -> Duration {
        var delay = configuration.initialBackoff
        var failures = consecutiveDialFailures
        while failures > 1 && delay < configuration.maxBackoff {
            delay *= 2
            failures -= 1
        }
        return min(delay, configuration.maxBackoff)
    }

    @inlinable
    mutating func shutdownCompleteIfDone() -> [Action] {
        guard shuttingDown, connections.isEmpty, waiters.isEmpty, !shutdownReported else { return [] }
        shutdownReported = true
        return [.shutdownComplete]
    }
}

extension PoolStateMachine.Connection {
    @inlinable
    var isEstablished: Bool {
        switch self {
        case .http1Idle, .http1Leased, .http2: return true
        case .connecting, .backingOff: return false
        }
    }
}
