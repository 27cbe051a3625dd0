import CourierCore
import CourierReactor

/// The state of the exchange an HTTP/1.1 connection is carrying.
extension HTTP1Connection {
    /// The request being carried. A class, so that updating it in place costs no copies.
    /// Confined to the connection's loop, like the connection: no access needs a run-time
    /// exclusivity check.
    final class Active {
        let exchange: HTTPExchange
        @exclusivity(unchecked) var metrics: ExchangeMetrics
        /// True once any response byte arrived (a stale connection fails before that).
        @exclusivity(unchecked) var receivedResponseBytes = false
        @exclusivity(unchecked) var headDelivered = false
        @exclusivity(unchecked) var body: BodyProgress
        @exclusivity(unchecked) var bodyBytesSent: Int64 = 0
        @exclusivity(unchecked) var readingPaused = false
        @exclusivity(unchecked) var lastActivity: ContinuousClock.Instant

        init(exchange: HTTPExchange, metrics: ExchangeMetrics, body: BodyProgress, lastActivity: ContinuousClock.Instant) {
            self.exchange = exchange
            self.metrics = metrics
            self.body = body
            self.lastActivity = lastActivity
        }
    }

    /// How far the request body has gone.
    enum BodyProgress {
        case complete
        /// Streaming from a producer; `reading` while a chunk is being fetched off the loop.
        case streaming(RequestBodyProducer, length: Int64?, reading: Bool)
    }
}
