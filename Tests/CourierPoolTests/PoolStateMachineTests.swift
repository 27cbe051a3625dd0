import CourierPool
import Testing

// Event-sequence tests: every event's returned actions are compared with the exact expected array.

private let minute = Duration.seconds(60)
private let e1 = DialError(code: 1)
private let e2 = DialError(code: 2)

@Suite("HTTP/1 connection limit and dialing")
struct HTTP1LimitTests {
    @Test func limitCountsConnectionsStillBeingDialed() {
        var pool = makePool(maxConnections: 2)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
        #expect(pool.requestQueued(R(2)) == [])
        #expect(pool.connectionCount == 2)
        #expect(pool.waitingCount == 3)
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionEstablished(C(1), protocol: .http1) == [.executeRequest(R(1), on: C(1))])
        #expect(pool.waitingCount == 1)
        #expect(pool.connectionReleased(C(0)) == [.executeRequest(R(2), on: C(0))])
        #expect(pool.waitingCount == 0)
        #expect(pool.connectionCount == 2)
    }

    @Test func slotsBackingOffCountTowardTheLimit() {
        var pool = makePool(maxConnections: 2)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionFailed(C(1), error: e1) == [.scheduleBackoffTimer(C(1), .milliseconds(100))])
        #expect(pool.connectionCount == 2)
        #expect(pool.requestQueued(R(2)) == [])
        #expect(pool.backoffElapsed(C(1)) == [.createConnection(C(2))])
        #expect(pool.connectionCount == 2)
        #expect(pool.waitingCount == 2)
    }

    @Test func dialsNoMoreConnectionsThanWaiters() {
        var pool = makePool()
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
        #expect(pool.requestCancelled(R(1)) == [.failRequest(R(1), .cancelled)])
        // Two dials in flight, two waiters: nothing more to dial.
        #expect(pool.requestQueued(R(2)) == [])
        #expect(pool.connectionCount == 2)
        #expect(pool.waitingCount == 2)
        #expect(pool.connectionEstablished(C(1), protocol: .http1) == [.executeRequest(R(0), on: C(1))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(2), on: C(0))])
    }

    @Test func connectionEstablishedWithNobodyWaitingGoesIdle() {
        var pool = makePool()
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestCancelled(R(0)) == [.failRequest(R(0), .cancelled)])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.idleCount == 1)
        #expect(pool.requestQueued(R(1)) == [.cancelIdleTimer(C(0)), .executeRequest(R(1), on: C(0))])
    }
}

@Suite("Assignment order")
struct AssignmentOrderTests {
    @Test func establishedConnectionsServeWaitersFirstInFirstOut() {
        var pool = makePool()
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
        #expect(pool.requestQueued(R(2)) == [.createConnection(C(2))])
        #expect(pool.connectionEstablished(C(2), protocol: .http1) == [.executeRequest(R(0), on: C(2))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(1), on: C(0))])
        #expect(pool.connectionEstablished(C(1), protocol: .http1) == [.executeRequest(R(2), on: C(1))])
    }

    @Test func releasedConnectionGoesStraightToTheNextWaiterInOrder() {
        var pool = makePool(maxConnections: 1)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [])
        #expect(pool.requestQueued(R(2)) == [])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionReleased(C(0)) == [.executeRequest(R(1), on: C(0))])
        #expect(pool.connectionReleased(C(0)) == [.executeRequest(R(2), on: C(0))])
        #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.idleCount == 1)
    }

    @Test func mostRecentlyUsedIdleConnectionIsReusedFirst() {
        var pool = makePool()
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionEstablished(C(1), protocol: .http1) == [.executeRequest(R(1), on: C(1))])
        #expect(pool.connectionReleased(C(1)) == [.scheduleIdleTimer(C(1), minute)])
        #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.requestQueued(R(2)) == [.cancelIdleTimer(C(0)), .executeRequest(R(2), on: C(0))])
        #expect(pool.requestQueued(R(3)) == [.cancelIdleTimer(C(1)), .executeRequest(R(3), on: C(1))])
        #expect(pool.requestQueued(R(4)) == [.createConnection(C(2))])
        #expect(pool.idleCount == 0)
    }

    @Test func actionsKeptByTheCallerDoNotChangeWithLaterEvents() {
        // Leases and idling hand out one reused array: what a caller still holds must not
        // change when the next event reuses it.
        var pool = makePool()
        _ = pool.requestQueued(R(0))
        let established = pool.connectionEstablished(C(0), protocol: .http1)
        let idle = pool.connectionReleased(C(0))
        let lease = pool.requestQueued(R(1))
        let idleAgain = pool.connectionReleased(C(0))
        let secondLease = pool.requestQueued(R(2))
        #expect(established == [.executeRequest(R(0), on: C(0))])
        #expect(idle == [.scheduleIdleTimer(C(0), minute)])
        #expect(lease == [.cancelIdleTimer(C(0)), .executeRequest(R(1), on: C(0))])
        #expect(idleAgain == [.scheduleIdleTimer(C(0), minute)])
        #expect(secondLease == [.cancelIdleTimer(C(0)), .executeRequest(R(2), on: C(0))])
        // Dropped between events, as the driver does: the same values come out.
        for n in 3..<8 {
            #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), minute)])
            #expect(pool.requestQueued(R(n)) == [.cancelIdleTimer(C(0)), .executeRequest(R(n), on: C(0))])
        }
    }
}

@Suite("Idle connections")
struct IdleTests {
    @Test func idleTimerUsesTheConfiguredTimeoutAndIsCancelledOnReuse() {
        var pool = makePool(idleTimeout: .seconds(5))
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), .seconds(5))])
        #expect(pool.requestQueued(R(1)) == [.cancelIdleTimer(C(0)), .executeRequest(R(1), on: C(0))])
        #expect(pool.idleCount == 0)
        #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), .seconds(5))])
    }

    @Test func idleTimeoutClosesTheConnection() {
        var pool = makePool()
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.idleTimeoutFired(C(0)) == [.closeConnection(C(0))])
        #expect(pool.connectionCount == 0)
        #expect(pool.idleCount == 0)
        #expect(pool.idleTimeoutFired(C(0)) == [])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
    }

    @Test func maxIdleConnectionsClosesTheLongestIdle() {
        var pool = makePool(maxIdleConnections: 2)
        for n in 0..<3 { #expect(pool.requestQueued(R(n)) == [.createConnection(C(n))]) }
        for n in 0..<3 {
            #expect(pool.connectionEstablished(C(n), protocol: .http1) == [.executeRequest(R(n), on: C(n))])
        }
        #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.connectionReleased(C(1)) == [.scheduleIdleTimer(C(1), minute)])
        #expect(pool.connectionReleased(C(2)) == [.scheduleIdleTimer(C(2), minute), .cancelIdleTimer(C(0)), .closeConnection(C(0))])
        #expect(pool.connectionCount == 2)
        #expect(pool.idleCount == 2)
        #expect(pool.requestQueued(R(3)) == [.cancelIdleTimer(C(2)), .executeRequest(R(3), on: C(2))])
    }

    @Test func closingAnIdleConnectionCancelsItsTimer() {
        var pool = makePool()
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.connectionClosed(C(0)) == [.cancelIdleTimer(C(0))])
        #expect(pool.connectionCount == 0)
        #expect(pool.idleCount == 0)
    }

    @Test func closingAnIdleConnectionRedialsForAWaitingRetry() {
        var pool = makePool(maxConnections: 1)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.requestQueued(R(1), requiresNewConnection: true) == [])
        #expect(pool.connectionClosed(C(0)) == [.cancelIdleTimer(C(0)), .createConnection(C(1))])
        #expect(pool.connectionEstablished(C(1), protocol: .http1) == [.executeRequest(R(1), on: C(1))])
    }

    @Test func closingABusyConnectionRedialsForWaiters() {
        var pool = makePool(maxConnections: 1)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionClosed(C(0)) == [.createConnection(C(1))])
        #expect(pool.connectionEstablished(C(1), protocol: .http1) == [.executeRequest(R(1), on: C(1))])
    }

    /// Documented: a retry waits for a newly established connection. The pool closed the idle
    /// connection that held the only slot, so it must dial, as `connectionClosed` does; otherwise
    /// the retry waits forever.
    @Test func idleTimeoutFreesTheSlotForAWaitingRetry() throws {
        var pool = makePool(maxConnections: 1)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.requestQueued(R(1), requiresNewConnection: true) == [])
        try #require(pool.idleTimeoutFired(C(0)) == [.closeConnection(C(0)), .createConnection(C(1))])
        #expect(pool.connectionEstablished(C(1), protocol: .http1) == [.executeRequest(R(1), on: C(1))])
    }
}

@Suite("Failed dials and backoff")
struct DialFailureTests {
    @Test func failedDialWithNoOtherConnectionFailsAllWaiters() {
        var pool = makePool(maxConnections: 1)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [])
        #expect(pool.requestQueued(R(2)) == [])
        let error = DialError(code: 7)
        #expect(pool.connectionFailed(C(0), error: error) == [
            .failRequest(R(0), .dialFailed(error)), .failRequest(R(1), .dialFailed(error)),
            .failRequest(R(2), .dialFailed(error)),
        ])
        #expect(pool.connectionCount == 0)
        #expect(pool.waitingCount == 0)
        #expect(pool.requestQueued(R(3)) == [.createConnection(C(1))])
    }

    @Test func lastFailedDialFailsWaitersWithItsErrorAndDropsBackoffSlots() {
        var pool = makePool()
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
        // C1 is still being dialed, so C0's failure backs off.
        #expect(pool.connectionFailed(C(0), error: e1) == [.scheduleBackoffTimer(C(0), .milliseconds(100))])
        #expect(pool.connectionCount == 2)
        #expect(pool.connectionFailed(C(1), error: e2) == [
            .failRequest(R(0), .dialFailed(e2)), .failRequest(R(1), .dialFailed(e2)), .cancelBackoffTimer(C(0)),
        ])
        #expect(pool.connectionCount == 0)
        #expect(pool.waitingCount == 0)
        #expect(pool.backoffElapsed(C(0)) == [])
    }

    @Test func failedDialWithNobodyWaitingForgetsTheSlot() {
        var pool = makePool()
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
        #expect(pool.requestCancelled(R(0)) == [.failRequest(R(0), .cancelled)])
        #expect(pool.requestCancelled(R(1)) == [.failRequest(R(1), .cancelled)])
        #expect(pool.connectionFailed(C(0), error: e1) == [])
        #expect(pool.connectionCount == 1)
        #expect(pool.connectionEstablished(C(1), protocol: .http1) == [.scheduleIdleTimer(C(1), minute)])
    }

    @Test func failedDialsWhileAnotherConnectionLivesBackOffDoublingUpToTheCap() {
        var pool = makePool(maxConnections: 2, initialBackoff: .milliseconds(100), maxBackoff: .milliseconds(500))
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        let delays: [Duration] = [
            .milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(500), .milliseconds(500),
        ]
        for (index, delay) in delays.enumerated() {
            let slot = C(1 + index)
            #expect(pool.connectionFailed(slot, error: DialError(code: index)) == [.scheduleBackoffTimer(slot, delay)])
            #expect(pool.connectionCount == 2)
            #expect(pool.waitingCount == 1)
            #expect(pool.backoffElapsed(slot) == [.createConnection(C(2 + index))])
        }
        // A success resets the backoff.
        #expect(pool.connectionEstablished(C(6), protocol: .http1) == [.executeRequest(R(1), on: C(6))])
        #expect(pool.requestQueued(R(2)) == [])
        #expect(pool.connectionClosed(C(0)) == [.createConnection(C(7))])
        #expect(pool.connectionFailed(C(7), error: e1) == [.scheduleBackoffTimer(C(7), .milliseconds(100))])
    }
}

@Suite("Cancellation")
struct CancellationTests {
    @Test func cancellingAWaiterFailsItAsCancelled() {
        var pool = makePool(maxConnections: 1)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [])
        #expect(pool.requestCancelled(R(1)) == [.failRequest(R(1), .cancelled)])
        #expect(pool.waitingCount == 1)
        #expect(pool.requestCancelled(R(1)) == [])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), minute)])
    }

    @Test func cancellingAnExecutingOrUnknownRequestDoesNothing() {
        var pool = makePool()
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.requestCancelled(R(0)) == [])
        #expect(pool.requestCancelled(R(99)) == [])
        #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), minute)])
    }

    @Test func cancellingTheLastWaiterDropsBackoffSlots() {
        var pool = makePool(maxConnections: 2)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionFailed(C(1), error: e1) == [.scheduleBackoffTimer(C(1), .milliseconds(100))])
        #expect(pool.requestCancelled(R(1)) == [.failRequest(R(1), .cancelled), .cancelBackoffTimer(C(1))])
        #expect(pool.connectionCount == 1)
        #expect(pool.backoffElapsed(C(1)) == [])
    }
}

@Suite("Retries after a stale connection")
struct RetryTests {
    @Test func retryIsNeverGivenAnIdleConnection() {
        var pool = makePool()
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.requestQueued(R(1), requiresNewConnection: true) == [.createConnection(C(1))])
        #expect(pool.idleCount == 1)
        #expect(pool.connectionEstablished(C(1), protocol: .http1) == [.executeRequest(R(1), on: C(1))])
        #expect(pool.idleCount == 1)
    }

    @Test func retryIsNeverGivenAReleasedConnection() {
        var pool = makePool(maxConnections: 1)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.requestQueued(R(1), requiresNewConnection: true) == [])
        #expect(pool.requestQueued(R(2)) == [])
        // The released connection skips the retry and serves the next ordinary waiter.
        #expect(pool.connectionReleased(C(0)) == [.executeRequest(R(2), on: C(0))])
        #expect(pool.connectionReleased(C(0)) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.waitingCount == 1)
        #expect(pool.connectionClosed(C(0)) == [.cancelIdleTimer(C(0)), .createConnection(C(1))])
        #expect(pool.connectionEstablished(C(1), protocol: .http1) == [.executeRequest(R(1), on: C(1))])
    }

    @Test func retryIsNeverGivenAFreeStreamOfAnExistingHTTP2Connection() {
        var pool = makePool(mayNegotiateHTTP2: true)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.connectionEstablished(C(0), protocol: .h2(10)) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.requestQueued(R(1), requiresNewConnection: true) == [.createConnection(C(1))])
        #expect(pool.requestQueued(R(2)) == [.executeRequest(R(2), on: C(0))])
        #expect(pool.streamClosed(C(0)) == [])
        #expect(pool.streamClosed(C(0)) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.connectionEstablished(C(1), protocol: .h2(10)) == [.executeRequest(R(1), on: C(1))])
    }
}

@Suite("HTTP/2")
struct HTTP2Tests {
    @Test func requestsWaitForTheFirstConnectionThatMaySpeakHTTP2() {
        var pool = makePool(mayNegotiateHTTP2: true)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [])
        #expect(pool.requestQueued(R(2)) == [])
        #expect(pool.connectionCount == 1)
        #expect(pool.waitingCount == 3)
        #expect(pool.connectionEstablished(C(0), protocol: .h2(100)) == [
            .executeRequest(R(0), on: C(0)), .executeRequest(R(1), on: C(0)), .executeRequest(R(2), on: C(0)),
        ])
        #expect(pool.waitingCount == 0)
    }

    @Test func streamLimitBoundsAssignmentAndStreamClosedServesTheNextWaiter() {
        var pool = makePool(mayNegotiateHTTP2: true)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [])
        #expect(pool.requestQueued(R(2)) == [])
        #expect(pool.connectionEstablished(C(0), protocol: .h2(2)) == [
            .executeRequest(R(0), on: C(0)), .executeRequest(R(1), on: C(0)), .createConnection(C(1)),
        ])
        #expect(pool.streamClosed(C(0)) == [.executeRequest(R(2), on: C(0))])
        #expect(pool.waitingCount == 0)
        #expect(pool.connectionEstablished(C(1), protocol: .h2(2)) == [.scheduleIdleTimer(C(1), minute)])
    }

    @Test func requestBeyondAFullConnectionDials() {
        var pool = makePool(mayNegotiateHTTP2: true)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.connectionEstablished(C(0), protocol: .h2(1)) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
        #expect(pool.connectionEstablished(C(1), protocol: .h2(1)) == [.executeRequest(R(1), on: C(1))])
    }

    @Test func lastStreamEndingLeavesTheConnectionIdle() {
        var pool = makePool(mayNegotiateHTTP2: true)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [])
        #expect(pool.connectionEstablished(C(0), protocol: .h2(5)) == [.executeRequest(R(0), on: C(0)), .executeRequest(R(1), on: C(0))])
        #expect(pool.streamClosed(C(0)) == [])
        #expect(pool.streamClosed(C(0)) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.idleCount == 1)
        #expect(pool.streamClosed(C(0)) == [])
        #expect(pool.requestQueued(R(2)) == [.cancelIdleTimer(C(0)), .executeRequest(R(2), on: C(0))])
        #expect(pool.idleCount == 0)
    }

    @Test func settingsChangesMoveTheStreamLimit() {
        var pool = makePool(maxConnections: 1, mayNegotiateHTTP2: true)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [])
        #expect(pool.requestQueued(R(2)) == [])
        #expect(pool.connectionEstablished(C(0), protocol: .h2(1)) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.http2SettingsReceived(C(0), maxConcurrentStreams: 3) == [
            .executeRequest(R(1), on: C(0)), .executeRequest(R(2), on: C(0)),
        ])
        // Lowered below the streams in flight: nothing new until the count drops under it.
        #expect(pool.http2SettingsReceived(C(0), maxConcurrentStreams: 1) == [])
        #expect(pool.requestQueued(R(3)) == [])
        #expect(pool.streamClosed(C(0)) == [])
        #expect(pool.streamClosed(C(0)) == [])
        #expect(pool.streamClosed(C(0)) == [.executeRequest(R(3), on: C(0))])
    }

    @Test func raisedStreamLimitOnAnIdleConnectionCancelsItsTimer() {
        var pool = makePool(maxConnections: 1, mayNegotiateHTTP2: true)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [])
        #expect(pool.connectionEstablished(C(0), protocol: .h2(0)) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.http2SettingsReceived(C(0), maxConcurrentStreams: 5) == [
            .cancelIdleTimer(C(0)), .executeRequest(R(0), on: C(0)), .executeRequest(R(1), on: C(0)),
        ])
        #expect(pool.idleCount == 0)
    }

    @Test func goAwayDrainsThenClosesAndRedials() {
        var pool = makePool(maxConnections: 1, mayNegotiateHTTP2: true)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [])
        #expect(pool.connectionEstablished(C(0), protocol: .h2(10)) == [.executeRequest(R(0), on: C(0)), .executeRequest(R(1), on: C(0))])
        #expect(pool.goAwayReceived(C(0)) == [])
        // No new stream on a draining connection, though it has room.
        #expect(pool.requestQueued(R(2)) == [])
        #expect(pool.http2SettingsReceived(C(0), maxConcurrentStreams: 20) == [])
        #expect(pool.streamClosed(C(0)) == [])
        #expect(pool.streamClosed(C(0)) == [.closeConnection(C(0)), .createConnection(C(1))])
        #expect(pool.connectionEstablished(C(1), protocol: .h2(10)) == [.executeRequest(R(2), on: C(1))])
    }

    @Test func goAwayWhileOthersWaitDialsBesideTheDrainingConnection() {
        var pool = makePool(mayNegotiateHTTP2: true)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.connectionEstablished(C(0), protocol: .h2(10)) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.goAwayReceived(C(0)) == [])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
        #expect(pool.streamClosed(C(0)) == [.closeConnection(C(0))])
        #expect(pool.connectionEstablished(C(1), protocol: .h2(10)) == [.executeRequest(R(1), on: C(1))])
    }

    @Test func goAwayOnAnIdleConnectionClosesAtOnce() {
        var pool = makePool(mayNegotiateHTTP2: true)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.connectionEstablished(C(0), protocol: .h2(10)) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.streamClosed(C(0)) == [.scheduleIdleTimer(C(0), minute)])
        #expect(pool.goAwayReceived(C(0)) == [.cancelIdleTimer(C(0)), .closeConnection(C(0))])
        #expect(pool.connectionCount == 0)
        #expect(pool.idleCount == 0)
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
    }

    @Test func withoutTheHTTP2ExpectationEachWaiterDials() {
        var pool = makePool()
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
        #expect(pool.connectionEstablished(C(0), protocol: .h2(10)) == [.executeRequest(R(0), on: C(0)), .executeRequest(R(1), on: C(0))])
        #expect(pool.connectionEstablished(C(1), protocol: .h2(10)) == [.scheduleIdleTimer(C(1), minute)])
        #expect(pool.requestQueued(R(2)) == [.executeRequest(R(2), on: C(0))])
    }

    /// Documented: requests wait only *while* the first connection that may speak HTTP/2 is being
    /// established. Once it turns out to speak HTTP/1, the other waiters get connections of their own.
    @Test func connectionThatNegotiatedHTTP1LetsTheOtherWaitersDial() throws {
        var pool = makePool(mayNegotiateHTTP2: true)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [])
        #expect(pool.requestQueued(R(2)) == [])
        try #require(pool.connectionEstablished(C(0), protocol: .http1) == [
            .executeRequest(R(0), on: C(0)), .createConnection(C(1)), .createConnection(C(2)),
        ])
        #expect(pool.connectionEstablished(C(1), protocol: .http1) == [.executeRequest(R(1), on: C(1))])
        #expect(pool.connectionEstablished(C(2), protocol: .http1) == [.executeRequest(R(2), on: C(2))])
    }
}

@Suite("Shutdown")
struct ShutdownTests {
    @Test func shutdownClosesIdleAndReleasedConnectionsAndCompletesOnce() {
        var pool = makePool()
        for n in 0..<3 { #expect(pool.requestQueued(R(n)) == [.createConnection(C(n))]) }
        #expect(pool.requestCancelled(R(2)) == [.failRequest(R(2), .cancelled)])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionEstablished(C(1), protocol: .http1) == [.executeRequest(R(1), on: C(1))])
        #expect(pool.connectionReleased(C(1)) == [.scheduleIdleTimer(C(1), minute)])
        // C0 leased, C1 idle, C2 still dialing.
        #expect(pool.shutdown() == [.cancelIdleTimer(C(1)), .closeConnection(C(1))])
        #expect(pool.requestQueued(R(3)) == [.failRequest(R(3), .shutDown)])
        #expect(pool.connectionReleased(C(0)) == [.closeConnection(C(0))])
        #expect(pool.connectionEstablished(C(2), protocol: .http1) == [.closeConnection(C(2)), .shutdownComplete])
        #expect(pool.connectionCount == 0)
        #expect(pool.waitingCount == 0)
        #expect(pool.idleCount == 0)
        #expect(pool.shutdown() == [])
        #expect(pool.requestQueued(R(4)) == [.failRequest(R(4), .shutDown)])
        #expect(pool.connectionClosed(C(0)) == [])
    }

    @Test func shutdownFailsWaitersAndCancelsBackoff() {
        var pool = makePool(maxConnections: 2)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [.createConnection(C(1))])
        #expect(pool.requestQueued(R(2)) == [])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        #expect(pool.connectionFailed(C(1), error: e1) == [.scheduleBackoffTimer(C(1), .milliseconds(100))])
        #expect(pool.shutdown() == [.failRequest(R(1), .shutDown), .failRequest(R(2), .shutDown), .cancelBackoffTimer(C(1))])
        #expect(pool.waitingCount == 0)
        #expect(pool.connectionCount == 1)
        #expect(pool.backoffElapsed(C(1)) == [])
        #expect(pool.requestCancelled(R(1)) == [])
        #expect(pool.connectionClosed(C(0)) == [.shutdownComplete])
        #expect(pool.connectionClosed(C(0)) == [])
    }

    @Test func shutdownOfAnEmptyPoolCompletesAtOnce() {
        var pool = makePool()
        #expect(pool.shutdown() == [.shutdownComplete])
        #expect(pool.shutdown() == [])
        #expect(pool.requestQueued(R(0)) == [.failRequest(R(0), .shutDown)])
    }

    @Test func shutdownWaitsForHTTP2StreamsToEnd() {
        var pool = makePool(mayNegotiateHTTP2: true)
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.requestQueued(R(1)) == [])
        #expect(pool.connectionEstablished(C(0), protocol: .h2(10)) == [.executeRequest(R(0), on: C(0)), .executeRequest(R(1), on: C(0))])
        #expect(pool.shutdown() == [])
        #expect(pool.requestQueued(R(2)) == [.failRequest(R(2), .shutDown)])
        #expect(pool.http2SettingsReceived(C(0), maxConcurrentStreams: 20) == [])
        #expect(pool.streamClosed(C(0)) == [])
        #expect(pool.streamClosed(C(0)) == [.closeConnection(C(0)), .shutdownComplete])
    }

    @Test func shutdownWaitsForDialsInFlight() {
        var pool = makePool()
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.shutdown() == [.failRequest(R(0), .shutDown)])
        #expect(pool.connectionCount == 1)
        #expect(pool.connectionFailed(C(0), error: e1) == [.shutdownComplete])
        #expect(pool.connectionCount == 0)
    }
}

@Suite("Ignored events")
struct IgnoredEventTests {
    /// Every connection event but `connectionClosed` (which is valid in any state).
    static func connectionEvents(_ c: PoolConnectionID) -> [PoolEvent] {
        [
            .established(c, .http1), .established(c, .h2(4)), .failed(c, e1), .backoffElapsed(c), .released(c),
            .streamClosed(c), .settings(c, 8), .goAway(c), .idleTimeoutFired(c),
        ]
    }

    static func expectIgnored(
        _ pool: inout Machine, _ events: [PoolEvent], _ label: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let counts = (pool.connectionCount, pool.waitingCount, pool.idleCount)
        for event in events {
            let actions = pool.handle(event)
            #expect(actions == [], "\(label): \(event)", sourceLocation: sourceLocation)
        }
        let unchanged = counts == (pool.connectionCount, pool.waitingCount, pool.idleCount)
        #expect(unchanged, "\(label): counts changed", sourceLocation: sourceLocation)
    }

    @Test func eventsForUnknownConnectionsAndRequestsAreIgnored() {
        var pool = makePool()
        Self.expectIgnored(&pool, Self.connectionEvents(C(42)) + [.closed(C(42)), .cancelled(R(42))], "empty pool")
        #expect(pool.requestQueued(R(0)) == [.createConnection(C(0))])
        #expect(pool.connectionEstablished(C(0), protocol: .http1) == [.executeRequest(R(0), on: C(0))])
        Self.expectIgnored(&pool, Self.connectionEvents(C(42)) + [.closed(C(42)), .cancelled(R(42))], "busy pool")
        #expect(pool.connectionCount == 1)
    }

    @Test func eventsForConnectionsInTheWrongStateAreIgnored() {
        var pool = makePool(maxConnections: 2)
        let c0 = C(0), c1 = C(1)
        #expect(pool.requestQueued(R(0)) == [.createConnection(c0)])
        Self.expectIgnored(&pool, Array(Self.connectionEvents(c0).dropFirst(3)), "dialing")
        #expect(pool.connectionEstablished(c0, protocol: .http1) == [.executeRequest(R(0), on: c0)])
        Self.expectIgnored(&pool, Self.connectionEvents(c0).filter { $0 != .released(c0) }, "HTTP/1 leased")
        #expect(pool.connectionReleased(c0) == [.scheduleIdleTimer(c0, minute)])
        Self.expectIgnored(&pool, Self.connectionEvents(c0).filter { $0 != .idleTimeoutFired(c0) }, "HTTP/1 idle")
        #expect(pool.requestQueued(R(1)) == [.cancelIdleTimer(c0), .executeRequest(R(1), on: c0)])
        #expect(pool.requestQueued(R(2)) == [.createConnection(c1)])
        #expect(pool.connectionFailed(c1, error: e1) == [.scheduleBackoffTimer(c1, .milliseconds(100))])
        Self.expectIgnored(&pool, Self.connectionEvents(c1).filter { $0 != .backoffElapsed(c1) }, "backing off")
        #expect(pool.connectionCount == 2)
        #expect(pool.waitingCount == 1)
    }

    @Test func eventsForHTTP2ConnectionsInTheWrongStateAreIgnored() {
        var pool = makePool(mayNegotiateHTTP2: true)
        let c0 = C(0)
        #expect(pool.requestQueued(R(0)) == [.createConnection(c0)])
        #expect(pool.connectionEstablished(c0, protocol: .h2(4)) == [.executeRequest(R(0), on: c0)])
        Self.expectIgnored(&pool, Array(Self.connectionEvents(c0).prefix(5)) + [.idleTimeoutFired(c0)], "HTTP/2 busy")
        #expect(pool.streamClosed(c0) == [.scheduleIdleTimer(c0, minute)])
        Self.expectIgnored(&pool, Array(Self.connectionEvents(c0).prefix(6)), "HTTP/2 idle")
        #expect(pool.idleCount == 1)
    }
}
