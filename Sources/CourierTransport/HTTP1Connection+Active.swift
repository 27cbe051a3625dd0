import CourierCore
import CourierReactor
import Foundation

/// The state of the exchange an HTTP/1.1 connection is carrying.
extension HTTP1Connection {
    /// The request being carried. A class, so that updating it in place costs no copies; the
    /// connection keeps the last one as a spare for the next request (`spareActive`).
    /// Confined to the connection's loop, like the connection: no access needs a run-time
    /// exclusivity check.
    final class Active {
        /// Nil only while the object waits, as the connection's spare, for the next exchange.
        @exclusivity(unchecked) private var exchangeSlot: HTTPExchange?
        @exclusivity(unchecked) var metrics: ExchangeMetrics
        /// True once any response byte arrived (a stale connection fails before that).
        @exclusivity(unchecked) var receivedResponseBytes = false
        @exclusivity(unchecked) var headDelivered = false
        @exclusivity(unchecked) var body: BodyProgress
        @exclusivity(unchecked) var bodyBytesSent: Int64 = 0
        @exclusivity(unchecked) var readingPaused = false
        @exclusivity(unchecked) var lastActivity: MonotonicInstant

        init(exchange: HTTPExchange, metrics: ExchangeMetrics, body: BodyProgress, lastActivity: MonotonicInstant) {
            self.exchangeSlot = exchange
            self.metrics = metrics
            self.body = body
            self.lastActivity = lastActivity
        }

        var exchange: HTTPExchange { exchangeSlot! }

        /// Lets go of the finished exchange and what its body came from, to be kept as a spare.
        func clear() {
            exchangeSlot = nil
            body = .complete
        }

        /// Starts over for another exchange, as a new object would.
        func restart(exchange: HTTPExchange, metrics: ExchangeMetrics, body: BodyProgress, lastActivity: MonotonicInstant) {
            exchangeSlot = exchange
            self.metrics = metrics
            receivedResponseBytes = false
            headDelivered = false
            self.body = body
            bodyBytesSent = 0
            readingPaused = false
            self.lastActivity = lastActivity
        }
    }

    /// A successful exchange on its way out.
    struct Completion {
        let exchange: HTTPExchange
        let trailers: HTTPFields?
        let metrics: ExchangeMetrics
        /// The connection may carry another request.
        var reusable: Bool
    }

    /// How far the request body has gone.
    enum BodyProgress {
        case complete
        /// A body given as bytes, longer than what goes out with the head: the rest is written
        /// from `sent` on as the channel has room (``HTTP1Connection/pumpBody()``).
        case bytes(Data, sent: Int)
        /// Streaming from a producer; `reading` while a chunk is being fetched off the loop.
        case streaming(RequestBodyProducer, length: Int64?, reading: Bool)
    }
}
