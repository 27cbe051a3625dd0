import CourierReactor

/// What a pool driver needs of a connection, whatever protocol it speaks. Called on the
/// connection's loop.
protocol PooledConnection: AnyObject {
    var loop: EventLoop { get }
    /// Carries an exchange (HTTP/1: the only one; HTTP/2: one more stream).
    func execute(_ exchange: HTTPExchange)
    /// Cancels an exchange the connection carries.
    func cancel(_ exchange: HTTPExchange)
    /// Pauses or resumes the delivery of an exchange's response.
    func setReadingPaused(_ paused: Bool, for exchange: HTTPExchange)
    /// Closes at once; exchanges still carried fail.
    func close()
    func schedulePoolIdleTimer(_ delay: Duration)
    func cancelPoolIdleTimer()
}

extension HTTP1Connection: PooledConnection {}

extension HTTPExchange {
    /// Claims a retry after the exchange's connection failed before any response byte: a stale
    /// keep-alive connection gets one (`requireIdempotent`: only for a method that may be
    /// repeated, with a body that can be sent again); a stream an HTTP/2 server refused (never
    /// processed, so any method) gets up to `allowed`, since a server that caps the requests of
    /// each connection refuses the retries too until one lands within a cap.
    func claimRetry(requireIdempotent: Bool, allowed: Int = 1) -> Bool {
        if requireIdempotent && !(request.head.method.isIdempotent && request.body.isReplayable) { return false }
        if !requireIdempotent && !request.body.isReplayable { return false }
        return state.withLock { state in
            guard state.retries < allowed else { return false }
            if case .finished = state.phase { return false }
            state.retries += 1
            state.phase = .created
            return true
        }
    }
}
