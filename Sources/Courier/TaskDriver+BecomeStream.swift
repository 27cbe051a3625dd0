import CourierTransport
import Foundation

/// A data task that becomes a stream task (`.becomeStream`).
extension TaskDriver {
    /// `.becomeStream`: takes the current exchange's HTTP/1.1 connection from the transport for
    /// a new stream task to the same host and port. `announce` runs before the stream task
    /// starts reading (so the data delegate hears of it first); `failed` when the connection
    /// cannot be taken.
    func becomeStreamTask(
        announce: @escaping @Sendable (URLSessionStreamTask) -> Void, failed: @escaping @Sendable (URLError) -> Void
    ) {
        let (exchange, url) = state.withLock { ($0.exchange, $0.request?.url) }
        guard let exchange, let dataTask = task as? URLSessionDataTask, let url, let host = url.host, !host.isEmpty else {
            failed(.courier(.unknown, "Only a data task waiting on an HTTP response can become a stream task.", url: currentURL))
            return
        }
        let port = url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
        exchange.detachConnection { [self] connection in
            guard let connection else {
                failed(.courier(.unknown, "The connection cannot become a stream task: HTTP/2 shares it among requests.", url: url))
                return
            }
            let claimed = state.withLock { state -> Bool in
                guard state.exchange === exchange, !state.machine.isFinished else { return false }
                state.exchange = nil
                state.machine.handOver()
                return true
            }
            guard claimed else {
                connection.close()
                return
            }
            let streamTask = session.adoptAsStream(dataTask)
            // The data task is over: its driver lets go of it, as after a last callback.
            task = nil
            announce(streamTask)
            streamTask.streamDriver.adopt(connection, host: host, port: port)
        }
    }
}
