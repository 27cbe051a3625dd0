/// Identifies one connection attempt of a ``HappyEyeballs`` race.
public struct AttemptID: Hashable, Sendable, CustomStringConvertible {
    let rawValue: Int
    public var description: String { "attempt \(rawValue)" }
}

/// The Happy Eyeballs v2 algorithm (RFC 8305) as a pure state machine: fed resolution results,
/// attempt outcomes and timer firings, with the current instant; answers with actions for a
/// driver to carry out.
///
/// 1. Ask for AAAA and A records at once (section 3).
/// 2. When A records arrive first, wait up to the Resolution Delay (50 ms) for AAAA ones;
///    when AAAA records arrive first, start at once (section 3).
/// 3. Order addresses alternating families, IPv6 first (section 4).
/// 4. Start one attempt, then the next after the Connection Attempt Delay (250 ms) or as soon
///    as one fails, whichever comes first (section 5).
/// 5. The first attempt to connect wins; the others are cancelled.
/// 6. When no attempt is left, no address is left and no answer is pending, fail with the
///    most telling error seen.
public struct HappyEyeballs: Sendable {
    /// What the driver must do.
    public enum Action: Sendable, Equatable {
        /// Look up `family` records.
        case resolve(SocketAddress.Family)
        /// Open a socket and connect to `address`.
        case startAttempt(AttemptID, SocketAddress)
        /// Call ``timerFired(now:)`` at this instant; replaces any earlier timer.
        case scheduleTimer(at: MonotonicInstant)
        /// No timer is needed any more.
        case cancelTimer
        /// Close these attempts' sockets.
        case cancelAttempts([AttemptID])
        /// This attempt connected: hand its socket to the caller.
        case succeed(AttemptID)
        /// Nothing can connect.
        case fail(Failure)
    }

    /// Why the race was lost.
    public enum Failure: Sendable, Equatable {
        case resolution(ResolutionError)
        case connect(SystemError)
        case noAddresses
    }

    /// RFC 8305 section 3: how long to wait for AAAA answers after A answers.
    public static let resolutionDelay = Duration.milliseconds(50)
    /// RFC 8305 section 5: how long an attempt runs before the next one starts beside it.
    public static let connectionAttemptDelay = Duration.milliseconds(250)

    private var pendingFamilies: Set<SocketAddress.Family> = []
    private var queues: [SocketAddress.Family: [SocketAddress]] = [.inet6: [], .inet: []]
    private var nextFamily = SocketAddress.Family.inet6
    private var active: [AttemptID: SocketAddress] = [:]
    private var attemptsStarted = 0
    private var waitForAAAAUntil: MonotonicInstant?
    private var nextAttemptAt: MonotonicInstant?
    private var scheduledTimer: MonotonicInstant?
    private var resolutionError: ResolutionError?
    private var connectError: SystemError?
    private var finished = false

    public init() {}

    /// Attempts under way.
    public var activeAttempts: [AttemptID] { Array(active.keys) }

    /// Begins by resolving both families.
    public mutating func start(now: MonotonicInstant) -> [Action] {
        pendingFamilies = [.inet6, .inet]
        return [.resolve(.inet6), .resolve(.inet)]
    }

    /// Begins with addresses already known (a numeric host or a Unix socket path).
    public mutating func start(addresses: [SocketAddress], now: MonotonicInstant) -> [Action] {
        for address in addresses { queues[address.family, default: []].append(address) }
        if let first = addresses.first { nextFamily = first.family }
        return startNext(now: now)
    }

    /// Answers for one family arrived.
    public mutating func resolved(
        _ family: SocketAddress.Family, _ result: Result<[SocketAddress], ResolutionError>, now: MonotonicInstant
    ) -> [Action] {
        guard !finished, pendingFamilies.remove(family) != nil else { return [] }
        switch result {
        case .success(let addresses):
            queues[family, default: []] += addresses.filter { $0.family == family }
        case .failure(let error):
            // A missing name is the more telling error: keep it over a passing failure.
            if case .hostNotFound = error { resolutionError = error } else if resolutionError == nil { resolutionError = error }
        }
        if attemptsStarted == 0 {
            let haveV6 = !(queues[.inet6] ?? []).isEmpty, haveV4 = !(queues[.inet] ?? []).isEmpty
            if family == .inet && haveV4 && !haveV6 && pendingFamilies.contains(.inet6) {
                // Step 2: A first; give AAAA the Resolution Delay.
                waitForAAAAUntil = now + Self.resolutionDelay
                return timerActions()
            }
            if haveV6 || haveV4 {
                nextFamily = haveV6 ? .inet6 : .inet
                waitForAAAAUntil = nil
                return startNext(now: now)
            }
        } else if active.isEmpty && hasQueuedAddresses {
            // Step 4: every attempt so far failed; new addresses start at once.
            return startNext(now: now)
        }
        return checkExhausted()
    }

    /// An attempt connected.
    public mutating func attemptSucceeded(_ id: AttemptID) -> [Action] {
        guard !finished, active[id] != nil else { return [] }
        finished = true
        active[id] = nil
        let losers = Array(active.keys)
        active.removeAll()
        var actions: [Action] = []
        if !losers.isEmpty { actions.append(.cancelAttempts(losers)) }
        if scheduledTimer != nil { actions.append(.cancelTimer) }
        actions.append(.succeed(id))
        return actions
    }

    /// An attempt failed.
    public mutating func attemptFailed(_ id: AttemptID, _ error: SystemError, now: MonotonicInstant) -> [Action] {
        guard !finished, active.removeValue(forKey: id) != nil else { return [] }
        // Refusal says more than unreachability: keep the first refusal, else the latest error.
        if connectError?.isConnectionRefused != true { connectError = error }
        if hasQueuedAddresses { return startNext(now: now) }
        return checkExhausted()
    }

    /// The timer asked for by the last `.scheduleTimer` fired.
    public mutating func timerFired(now: MonotonicInstant) -> [Action] {
        guard !finished else { return [] }
        scheduledTimer = nil
        if let until = waitForAAAAUntil {
            if now >= until {
                waitForAAAAUntil = nil
                return startNext(now: now)
            }
            return timerActions()
        }
        if let at = nextAttemptAt, now >= at, hasQueuedAddresses {
            return startNext(now: now)
        }
        return timerActions()
    }

    /// Gives up: every attempt is to be cancelled.
    public mutating func cancel() -> [Action] {
        guard !finished else { return [] }
        finished = true
        let attempts = Array(active.keys)
        active.removeAll()
        var actions: [Action] = []
        if !attempts.isEmpty { actions.append(.cancelAttempts(attempts)) }
        if scheduledTimer != nil { actions.append(.cancelTimer) }
        scheduledTimer = nil
        return actions
    }

    private var hasQueuedAddresses: Bool {
        queues.values.contains { !$0.isEmpty }
    }

    /// Step 3 and 4: start the next address in alternating-family order.
    private mutating func startNext(now: MonotonicInstant) -> [Action] {
        let other: SocketAddress.Family = nextFamily == .inet6 ? .inet : .inet6
        let family: SocketAddress.Family
        if !(queues[nextFamily] ?? []).isEmpty {
            family = nextFamily
        } else if !(queues[other] ?? []).isEmpty {
            family = other
        } else if let unixAddress = queues[.unix]?.first {
            queues[.unix]!.removeFirst()
            return launch(unixAddress, now: now)
        } else {
            return checkExhausted()
        }
        let address = queues[family]!.removeFirst()
        nextFamily = family == .inet6 ? .inet : .inet6
        return launch(address, now: now)
    }

    private mutating func launch(_ address: SocketAddress, now: MonotonicInstant) -> [Action] {
        let id = AttemptID(rawValue: attemptsStarted)
        attemptsStarted += 1
        active[id] = address
        nextAttemptAt = now + Self.connectionAttemptDelay
        return [.startAttempt(id, address)] + timerActions()
    }

    /// Step 6.
    private mutating func checkExhausted() -> [Action] {
        guard !finished, active.isEmpty, pendingFamilies.isEmpty, !hasQueuedAddresses, waitForAAAAUntil == nil else {
            return timerActions()
        }
        finished = true
        var actions: [Action] = scheduledTimer != nil ? [.cancelTimer] : []
        scheduledTimer = nil
        if let connectError {
            actions.append(.fail(.connect(connectError)))
        } else if let resolutionError {
            actions.append(.fail(.resolution(resolutionError)))
        } else {
            actions.append(.fail(.noAddresses))
        }
        return actions
    }

    /// The timer the machine needs next, as an action when it changed.
    private mutating func timerActions() -> [Action] {
        var wanted: MonotonicInstant?
        if let until = waitForAAAAUntil {
            wanted = until
        } else if let at = nextAttemptAt, hasQueuedAddresses, !finished {
            wanted = at
        }
        guard wanted != scheduledTimer else { return [] }
        scheduledTimer = wanted
        if let wanted { return [.scheduleTimer(at: wanted)] }
        return [.cancelTimer]
    }
}
