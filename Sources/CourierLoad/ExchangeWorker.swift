import CourierCore
import CourierReactor
import CourierSync
import CourierTransport
import Dispatch

/// One connection's share of the load on Courier's transport: a pool of one connection that
/// keeps `slots` requests going (HTTP/2 streams; one for HTTP/1.1). A completed request starts
/// the next one from the event loop, with no hop in between; with a rate, a request that is not
/// due yet waits for a timer.
final class ExchangeWorker: HTTPExchangeDelegate, LoadWorker, @unchecked Sendable {
    private struct State {
        var stats = LoadStats()
        var running = 0
        var pacer: Pacer
        var timerArmed = false
        /// The plan has no more requests to give.
        var exhausted = false
        var reported = false
        /// Intended starts of the requests in flight, with a rate only (without one, a request's
        /// start is its exchange's `fetchStart`).
        var intended: [ObjectIdentifier: MonotonicInstant] = [:]
    }

    let transport: HTTPTransport
    private let request: TransportRequest
    private let slots: Int
    private let timeout: Duration
    private let plan: Plan
    private let finished: @Sendable () -> Void
    private let paced: Bool
    private let state: Mutex<State>
    private let timerQueue = DispatchQueue(label: "courier-load.pacer")

    init(
        transport: HTTPTransport, request: TransportRequest, slots: Int, timeout: Duration, pacer: Pacer, plan: Plan,
        finished: @escaping @Sendable () -> Void
    ) {
        self.transport = transport
        self.request = request
        self.slots = slots
        self.timeout = timeout
        self.plan = plan
        self.finished = finished
        self.paced = pacer.interval != nil
        self.state = Mutex(State(pacer: pacer))
    }

    func start() { fill() }

    func snapshot() -> LoadStats { state.withLock { $0.stats } }

    /// Starts every request that has a free slot, is due and is granted by the plan; arms the
    /// pacing timer for the next one that is not due yet; reports the end once nothing runs.
    private func fill() {
        var launches: [MonotonicInstant] = []
        var wakeAt: MonotonicInstant?
        let done = state.withLock { state -> Bool in
            while !state.exhausted && state.running < slots {
                let now = MonotonicInstant.now
                guard let intended = state.pacer.take(now: now) else {
                    if !state.timerArmed {
                        state.timerArmed = true
                        wakeAt = state.pacer.next
                    }
                    break
                }
                guard plan.claim() else {
                    state.exhausted = true
                    break
                }
                state.running += 1
                state.stats.started += 1
                launches.append(intended)
            }
            guard state.exhausted, state.running == 0, !state.reported else { return false }
            state.reported = true
            return true
        }
        for intended in launches { launch(intended: intended) }
        if let wakeAt {
            let delay = max(.zero, wakeAt - .now)
            timerQueue.asyncAfter(deadline: .now() + .nanoseconds(delay.nanoseconds)) { [self] in
                state.withLock { $0.timerArmed = false }
                fill()
            }
        }
        if done { finished() }
    }

    private func launch(intended: MonotonicInstant) {
        var request = self.request
        request.deadline = .now + timeout
        let exchange = transport.makeExchange(request, delegate: self)
        if paced { state.withLock { $0.intended[ObjectIdentifier(exchange)] = intended } }
        transport.start(exchange)
    }

    func exchange(_ exchange: HTTPExchange, didSendBodyBytes totalBytesSent: Int64) {}
    func exchange(_ exchange: HTTPExchange, didReceiveBodyBytes bytes: UnsafeRawBufferPointer) {}

    func exchange(_ exchange: HTTPExchange, didReceiveHead head: HTTPResponseHead) {
        state.withLock { $0.stats.recordStatus(head.status) }
    }

    func exchange(_ exchange: HTTPExchange, didCompleteWithTrailers trailers: HTTPFields?, metrics: ExchangeMetrics) {
        finish(exchange, metrics: metrics, error: nil)
    }

    func exchange(_ exchange: HTTPExchange, didFailWith error: TransportError, metrics: ExchangeMetrics) {
        finish(exchange, metrics: metrics, error: error)
    }

    private func finish(_ exchange: HTTPExchange, metrics: ExchangeMetrics, error: TransportError?) {
        let end = MonotonicInstant.now
        state.withLock { state in
            let intended = paced ? state.intended.removeValue(forKey: ObjectIdentifier(exchange)) : nil
            if let error {
                state.stats.errors[LoadStats.kind(error), default: 0] += 1
            } else {
                state.stats.completed += 1
                state.stats.record(latencyFrom: intended ?? metrics.fetchStart ?? end, to: end)
            }
            state.stats.bytes += metrics.responseBodyBytesReceived
            if let port = metrics.localAddress?.port { state.stats.noteLocalPort(port) }
            if let name = metrics.networkProtocolName { state.stats.noteProtocol(name) }
            state.running -= 1
        }
        fill()
    }
}
