import CourierReactor
import Glibc
import Testing

/// Addresses for the pure state machine. They are never contacted; loopback ones with distinct
/// ports keep them recognisable.
private enum Address {
    static let loopback6: [UInt8] = Array(repeating: 0, count: 15) + [1]
    static let a6 = SocketAddress.v6(host: loopback6, port: 1001, scopeID: 0)
    static let b6 = SocketAddress.v6(host: loopback6, port: 1002, scopeID: 0)
    static let a4 = SocketAddress.v4(host: [127, 0, 0, 1], port: 2001)
    static let b4 = SocketAddress.v4(host: [127, 0, 0, 2], port: 2002)
    static let c4 = SocketAddress.v4(host: [127, 0, 0, 3], port: 2003)
    static let socketPath = SocketAddress.unix(path: "/tmp/courier-happy-eyeballs-test.sock")
}

private let refused = SystemError("connect", code: ECONNREFUSED)
private let unreachable = SystemError("connect", code: ENETUNREACH)
private let hostUnreachable = SystemError("connect", code: EHOSTUNREACH)
private let timedOut = SystemError("connect", code: ETIMEDOUT)

/// One race on a manual clock: instants are a fixed base plus whole milliseconds.
private final class Race {
    let base = MonotonicInstant.now
    var machine = HappyEyeballs()

    func at(_ milliseconds: Int) -> MonotonicInstant { base + .milliseconds(milliseconds) }

    func start() -> [HappyEyeballs.Action] { machine.start(now: at(0)) }

    func start(_ addresses: [SocketAddress], _ milliseconds: Int = 0) -> [HappyEyeballs.Action] {
        machine.start(addresses: addresses, now: at(milliseconds))
    }

    func resolved(_ family: SocketAddress.Family, _ addresses: [SocketAddress], _ milliseconds: Int) -> [HappyEyeballs.Action] {
        machine.resolved(family, .success(addresses), now: at(milliseconds))
    }

    func resolutionFailed(_ family: SocketAddress.Family, _ error: ResolutionError, _ milliseconds: Int) -> [HappyEyeballs.Action] {
        machine.resolved(family, .failure(error), now: at(milliseconds))
    }

    func failed(_ id: AttemptID, _ error: SystemError, _ milliseconds: Int) -> [HappyEyeballs.Action] {
        machine.attemptFailed(id, error, now: at(milliseconds))
    }

    func succeeded(_ id: AttemptID) -> [HappyEyeballs.Action] { machine.attemptSucceeded(id) }

    func timer(_ milliseconds: Int) -> [HappyEyeballs.Action] { machine.timerFired(now: at(milliseconds)) }

    func cancel() -> [HappyEyeballs.Action] { machine.cancel() }

    var active: Set<AttemptID> { Set(machine.activeAttempts) }
}

/// The attempts an action list starts, in order.
private func startedIDs(_ actions: [HappyEyeballs.Action]) -> [AttemptID] {
    actions.compactMap { if case .startAttempt(let id, _) = $0 { return id } else { return nil } }
}

private func startedAddresses(_ actions: [HappyEyeballs.Action]) -> [SocketAddress] {
    actions.compactMap { if case .startAttempt(_, let address) = $0 { return address } else { return nil } }
}

/// The one attempt an action list starts.
private func started(_ actions: [HappyEyeballs.Action], sourceLocation: SourceLocation = #_sourceLocation) throws -> AttemptID {
    let ids = startedIDs(actions)
    try #require(ids.count == 1, "expected one started attempt in \(actions)", sourceLocation: sourceLocation)
    return ids[0]
}

@Suite struct HappyEyeballsTests {
    // MARK: Resolution

    @Test func startResolvesBothFamiliesIPv6First() {
        let race = Race()
        #expect(race.start() == [.resolve(.inet6), .resolve(.inet)])
        #expect(race.active.isEmpty)
    }

    @Test func aaaaFirstStartsAnAttemptAtOnce() throws {
        let race = Race()
        _ = race.start()
        let first = race.resolved(.inet6, [Address.a6], 0)
        let id0 = try started(first)
        #expect(first == [.startAttempt(id0, Address.a6)])
        #expect(race.active == [id0])

        // A answers arriving later arm the Connection Attempt Delay from the first start.
        #expect(race.resolved(.inet, [Address.a4], 10) == [.scheduleTimer(at: race.at(250))])
        let second = race.timer(250)
        let id1 = try started(second)
        #expect(second == [.startAttempt(id1, Address.a4)])
        #expect(id0 != id1)
        #expect(race.active == [id0, id1])
    }

    @Test func aFirstWaitsTheResolutionDelayThenAAAAWithinItGoesFirst() throws {
        let race = Race()
        _ = race.start()
        #expect(race.resolved(.inet, [Address.a4], 0) == [.scheduleTimer(at: race.at(50))])
        #expect(race.active.isEmpty)

        let afterAAAA = race.resolved(.inet6, [Address.a6], 20)
        let id0 = try started(afterAAAA)
        #expect(afterAAAA == [.startAttempt(id0, Address.a6), .scheduleTimer(at: race.at(270))])

        let next = race.timer(270)
        let id1 = try started(next)
        #expect(next == [.startAttempt(id1, Address.a4)])
    }

    @Test func aFirstAndAAAANeverArrivingAttemptsIPv4WhenTheDelayEnds() throws {
        let race = Race()
        _ = race.start()
        #expect(race.resolved(.inet, [Address.a4], 0) == [.scheduleTimer(at: race.at(50))])
        // A timer that fires early only re-arms.
        #expect(race.timer(30) == [.scheduleTimer(at: race.at(50))])
        #expect(race.active.isEmpty)

        let fired = race.timer(50)
        let id0 = try started(fired)
        #expect(fired == [.startAttempt(id0, Address.a4)])

        // AAAA answers arriving after the delay join the race behind the running attempt.
        #expect(race.resolved(.inet6, [Address.a6], 100) == [.scheduleTimer(at: race.at(300))])
        let next = race.timer(300)
        let id1 = try started(next)
        #expect(next == [.startAttempt(id1, Address.a6)])
    }

    @Test func aFirstThenAAAAFailingStartsIPv4AtOnce() throws {
        let race = Race()
        _ = race.start()
        #expect(race.resolved(.inet, [Address.a4], 0) == [.scheduleTimer(at: race.at(50))])
        let actions = race.resolutionFailed(.inet6, .hostNotFound("dual.test"), 10)
        let id0 = try started(actions)
        #expect(actions == [.startAttempt(id0, Address.a4), .cancelTimer])
    }

    @Test func aFirstThenEmptyAAAAStartsIPv4AtOnce() throws {
        let race = Race()
        _ = race.start()
        #expect(race.resolved(.inet, [Address.a4], 0) == [.scheduleTimer(at: race.at(50))])
        let actions = race.resolved(.inet6, [], 10)
        let id0 = try started(actions)
        #expect(actions == [.startAttempt(id0, Address.a4), .cancelTimer])
    }

    @Test func answersOfTheWrongFamilyAreIgnored() throws {
        let race = Race()
        _ = race.start()
        // An IPv4 address in the AAAA answer counts as no answer.
        #expect(race.resolved(.inet6, [Address.a4], 0) == [])
        let actions = race.resolved(.inet, [Address.b4], 5)
        let id0 = try started(actions)
        #expect(actions == [.startAttempt(id0, Address.b4)])
        #expect(race.failed(id0, refused, 10) == [.fail(.connect(refused))])
    }

    @Test func aSecondAnswerForTheSameFamilyIsIgnored() throws {
        let race = Race()
        _ = race.start()
        let id0 = try started(race.resolved(.inet6, [Address.a6], 0))
        #expect(race.resolved(.inet6, [Address.b6], 5) == [])
        #expect(race.failed(id0, refused, 10) == [])  // A still pending
        #expect(race.resolutionFailed(.inet, .hostNotFound("dual.test"), 20) == [.fail(.connect(refused))])
    }

    // MARK: Ordering and the Connection Attempt Delay

    @Test func interleavesFamiliesIPv6First() throws {
        let race = Race()
        _ = race.start()
        let first = race.resolved(.inet6, [Address.a6, Address.b6], 0)
        let id0 = try started(first)
        #expect(first == [.startAttempt(id0, Address.a6), .scheduleTimer(at: race.at(250))])
        #expect(race.resolved(.inet, [Address.a4, Address.b4], 5) == [])

        let second = race.timer(250)
        let id1 = try started(second)
        #expect(second == [.startAttempt(id1, Address.a4), .scheduleTimer(at: race.at(500))])
        let third = race.timer(500)
        let id2 = try started(third)
        #expect(third == [.startAttempt(id2, Address.b6), .scheduleTimer(at: race.at(750))])
        let fourth = race.timer(750)
        let id3 = try started(fourth)
        #expect(fourth == [.startAttempt(id3, Address.b4)])
        #expect(Set([id0, id1, id2, id3]).count == 4)
        #expect(race.active == [id0, id1, id2, id3])
    }

    @Test func interleavesAfterTheResolutionDelayToo() throws {
        let race = Race()
        _ = race.start()
        #expect(race.resolved(.inet, [Address.a4, Address.b4], 0) == [.scheduleTimer(at: race.at(50))])
        var order: [SocketAddress] = []
        let first = race.resolved(.inet6, [Address.a6, Address.b6], 10)
        order += startedAddresses(first)
        #expect(first.last == .scheduleTimer(at: race.at(260)))
        order += startedAddresses(race.timer(260))
        order += startedAddresses(race.timer(510))
        order += startedAddresses(race.timer(760))
        #expect(order == [Address.a6, Address.a4, Address.b6, Address.b4])
    }

    @Test func unevenFamiliesFinishWithTheLongerOne() throws {
        let race = Race()
        _ = race.start()
        var order = startedAddresses(race.resolved(.inet6, [Address.a6], 0))
        #expect(race.resolved(.inet, [Address.a4, Address.b4, Address.c4], 5) == [.scheduleTimer(at: race.at(250))])
        let second = race.timer(250)
        #expect(second.last == .scheduleTimer(at: race.at(500)))
        order += startedAddresses(second)
        let third = race.timer(500)
        #expect(third.last == .scheduleTimer(at: race.at(750)))
        order += startedAddresses(third)
        let fourth = race.timer(750)
        #expect(startedAddresses(fourth) == [Address.c4])
        #expect(fourth.count == 1)
        order += startedAddresses(fourth)
        #expect(order == [Address.a6, Address.a4, Address.b4, Address.c4])
    }

    @Test func anEarlyAttemptTimerOnlyReArms() throws {
        let race = Race()
        _ = race.start()
        _ = try started(race.resolved(.inet6, [Address.a6, Address.b6], 0))
        #expect(race.timer(100) == [.scheduleTimer(at: race.at(250))])
        #expect(race.active.count == 1)
        #expect(startedAddresses(race.timer(250)) == [Address.b6])
    }

    @Test func aFailedAttemptStartsTheNextAtOnce() throws {
        let race = Race()
        _ = race.start()
        let id0 = try started(race.resolved(.inet6, [Address.a6, Address.b6], 0))
        #expect(race.resolved(.inet, [Address.a4], 5) == [])

        let afterFirst = race.failed(id0, refused, 100)
        let id1 = try started(afterFirst)
        // The delay restarts from the new attempt.
        #expect(afterFirst == [.startAttempt(id1, Address.a4), .scheduleTimer(at: race.at(350))])

        let afterSecond = race.failed(id1, refused, 150)
        let id2 = try started(afterSecond)
        // Nothing is left to start: the timer goes.
        #expect(afterSecond == [.startAttempt(id2, Address.b6), .cancelTimer])

        #expect(race.failed(id2, refused, 200) == [.fail(.connect(refused))])
        #expect(race.active.isEmpty)
    }

    /// RFC 8305 section 5 and the type's step 4: the next attempt starts "as soon as one
    /// fails". Here the attempt fails while A is still pending; when A answers, nothing is
    /// running, so the IPv4 attempt should start at once rather than wait out the rest of the
    /// 250 ms Connection Attempt Delay of an attempt that is already gone.
    @Test func addressesArrivingAfterEveryAttemptFailedStartAtOnce() throws {
        let race = Race()
        _ = race.start()
        let id0 = try started(race.resolved(.inet6, [Address.a6], 0))
        #expect(race.failed(id0, refused, 10) == [])
        let actions = race.resolved(.inet, [Address.a4], 20)
        #expect(
            startedAddresses(actions) == [Address.a4],
            "with no attempt running, the IPv4 attempt should start at once; got \(actions)"
        )
    }

    // MARK: Outcomes

    @Test func firstSuccessCancelsTheOthersAndTheTimer() throws {
        let race = Race()
        _ = race.start()
        let id0 = try started(race.resolved(.inet6, [Address.a6, Address.b6], 0))
        _ = race.resolved(.inet, [Address.a4], 5)
        let second = race.timer(250)
        let id1 = try started(second)
        #expect(second == [.startAttempt(id1, Address.a4), .scheduleTimer(at: race.at(500))])

        #expect(race.succeeded(id1) == [.cancelAttempts([id0]), .cancelTimer, .succeed(id1)])
        #expect(race.active.isEmpty)

        // The race is over: late news changes nothing.
        #expect(race.failed(id0, refused, 300) == [])
        #expect(race.succeeded(id0) == [])
        #expect(race.timer(500) == [])
        #expect(race.cancel() == [])
    }

    @Test func successCancelsEveryOtherRunningAttempt() throws {
        let race = Race()
        _ = race.start()
        let id0 = try started(race.resolved(.inet6, [Address.a6, Address.b6], 0))
        _ = race.resolved(.inet, [Address.a4, Address.b4], 5)
        let id1 = try started(race.timer(250))
        let id2 = try started(race.timer(500))

        let actions = race.succeeded(id2)
        #expect(actions.count == 3)
        guard case .cancelAttempts(let losers)? = actions.first else {
            Issue.record("expected the losers cancelled first, got \(actions)")
            return
        }
        #expect(Set(losers) == [id0, id1])
        #expect(losers.count == 2)
        #expect(Array(actions.dropFirst()) == [.cancelTimer, .succeed(id2)])
    }

    @Test func loneSuccessNeedsNoCancelling() throws {
        let race = Race()
        let id0 = try started(race.start([Address.a4]))
        #expect(race.succeeded(id0) == [.succeed(id0)])
    }

    @Test func everyAttemptFailingPrefersARefusal() throws {
        // Unreachable, then refused: the refusal wins.
        let race = Race()
        _ = race.start()
        let first = race.resolved(.inet6, [Address.a6], 0)
        let id0 = try started(first)
        #expect(first == [.startAttempt(id0, Address.a6)])
        #expect(race.resolved(.inet, [Address.a4], 5) == [.scheduleTimer(at: race.at(250))])
        let next = race.failed(id0, unreachable, 10)
        let id1 = try started(next)
        #expect(next == [.startAttempt(id1, Address.a4), .cancelTimer])
        #expect(race.failed(id1, refused, 20) == [.fail(.connect(refused))])
    }

    @Test func anEarlierRefusalIsKeptOverALaterError() throws {
        let race = Race()
        let first = race.start([Address.a4, Address.a6])
        let id0 = try started(first)
        #expect(first == [.startAttempt(id0, Address.a4), .scheduleTimer(at: race.at(250))])
        let id1 = try started(race.failed(id0, refused, 10))
        #expect(race.failed(id1, hostUnreachable, 20) == [.fail(.connect(refused))])
    }

    @Test func withoutARefusalTheLatestErrorIsReported() throws {
        let race = Race()
        let id0 = try started(race.start([Address.a6, Address.a4]))
        let id1 = try started(race.failed(id0, unreachable, 10))
        #expect(race.failed(id1, timedOut, 20) == [.fail(.connect(timedOut))])
    }

    @Test func connectErrorsOutrankAResolutionFailure() throws {
        let race = Race()
        _ = race.start()
        #expect(race.resolutionFailed(.inet6, .hostNotFound("dual.test"), 0) == [])
        let actions = race.resolved(.inet, [Address.a4], 5)
        let id0 = try started(actions)
        #expect(actions == [.startAttempt(id0, Address.a4)])
        #expect(race.failed(id0, refused, 10) == [.fail(.connect(refused))])
    }

    @Test func bothResolutionsFailingPreferHostNotFound() {
        let race = Race()
        _ = race.start()
        #expect(race.resolutionFailed(.inet6, .lookupFailed("gone.test", detail: "temporary"), 0) == [])
        #expect(race.active.isEmpty)
        #expect(
            race.resolutionFailed(.inet, .hostNotFound("gone.test"), 5)
                == [.fail(.resolution(.hostNotFound("gone.test")))]
        )
    }

    @Test func hostNotFoundIsKeptOverALaterPassingFailure() {
        let race = Race()
        _ = race.start()
        #expect(race.resolutionFailed(.inet6, .hostNotFound("gone.test"), 0) == [])
        #expect(
            race.resolutionFailed(.inet, .lookupFailed("gone.test", detail: "temporary"), 5)
                == [.fail(.resolution(.hostNotFound("gone.test")))]
        )
    }

    @Test func twoPassingFailuresReportTheFirst() {
        let race = Race()
        _ = race.start()
        #expect(race.resolutionFailed(.inet, .lookupFailed("gone.test", detail: "first"), 0) == [])
        #expect(
            race.resolutionFailed(.inet6, .lookupFailed("gone.test", detail: "second"), 5)
                == [.fail(.resolution(.lookupFailed("gone.test", detail: "first")))]
        )
    }

    @Test func emptyAnswersForBothFamiliesFailWithNoAddresses() {
        let race = Race()
        _ = race.start()
        #expect(race.resolved(.inet6, [], 0) == [])
        #expect(race.resolved(.inet, [], 5) == [.fail(.noAddresses)])
    }

    // MARK: Known addresses

    @Test func numericAddressStartsAtOnce() throws {
        let race = Race()
        let actions = race.start([Address.a4])
        let id0 = try started(actions)
        #expect(actions == [.startAttempt(id0, Address.a4)])
        #expect(race.active == [id0])
        #expect(race.failed(id0, refused, 10) == [.fail(.connect(refused))])
    }

    @Test func numericAddressesKeepTheFirstFamilyFirst() throws {
        let race = Race()
        let first = race.start([Address.a4, Address.a6])
        let id0 = try started(first)
        #expect(first == [.startAttempt(id0, Address.a4), .scheduleTimer(at: race.at(250))])
        let next = race.timer(250)
        let id1 = try started(next)
        #expect(next == [.startAttempt(id1, Address.a6)])
    }

    @Test func unixSocketPathStartsAtOnce() throws {
        let race = Race()
        let actions = race.start([Address.socketPath])
        let id0 = try started(actions)
        #expect(actions == [.startAttempt(id0, Address.socketPath)])
        #expect(race.succeeded(id0) == [.succeed(id0)])
    }

    @Test func unixSocketPathFailureFailsTheRace() throws {
        let race = Race()
        let id0 = try started(race.start([Address.socketPath]))
        let missing = SystemError("connect", code: ENOENT)
        #expect(race.failed(id0, missing, 1) == [.fail(.connect(missing))])
    }

    @Test func noKnownAddressesFailAtOnce() {
        let race = Race()
        #expect(race.start([]) == [.fail(.noAddresses)])
    }

    // MARK: Cancelling and finishing

    @Test func cancelClosesRunningAttemptsAndTheTimer() throws {
        let race = Race()
        _ = race.start()
        let id0 = try started(race.resolved(.inet6, [Address.a6, Address.b6], 0))
        _ = race.resolved(.inet, [Address.a4], 5)
        let id1 = try started(race.timer(250))

        let actions = race.cancel()
        #expect(actions.count == 2)
        guard case .cancelAttempts(let ids)? = actions.first else {
            Issue.record("expected the attempts cancelled first, got \(actions)")
            return
        }
        #expect(Set(ids) == [id0, id1])
        #expect(actions.last == .cancelTimer)
        #expect(race.active.isEmpty)

        #expect(race.cancel() == [])
        #expect(race.timer(500) == [])
        #expect(race.failed(id0, refused, 510) == [])
        #expect(race.succeeded(id1) == [])
    }

    @Test func cancelDuringTheResolutionDelayDropsTheTimer() {
        let race = Race()
        _ = race.start()
        #expect(race.resolved(.inet, [Address.a4], 0) == [.scheduleTimer(at: race.at(50))])
        #expect(race.cancel() == [.cancelTimer])
        #expect(race.timer(50) == [])
        #expect(race.resolved(.inet6, [Address.a6], 60) == [])
        #expect(race.active.isEmpty)
    }

    @Test func cancelBeforeAnyAnswerHasNothingToUndo() {
        let race = Race()
        _ = race.start()
        #expect(race.cancel() == [])
        #expect(race.resolved(.inet6, [Address.a6], 0) == [])
        #expect(race.resolved(.inet, [Address.a4], 0) == [])
        #expect(race.active.isEmpty)
    }

    @Test func eventsAfterAFailureReturnNothing() throws {
        let race = Race()
        let id0 = try started(race.start([Address.a4]))
        #expect(race.failed(id0, refused, 10) == [.fail(.connect(refused))])
        #expect(race.failed(id0, refused, 11) == [])
        #expect(race.succeeded(id0) == [])
        #expect(race.timer(300) == [])
        #expect(race.resolved(.inet, [Address.b4], 20) == [])
        #expect(race.cancel() == [])
    }
}
