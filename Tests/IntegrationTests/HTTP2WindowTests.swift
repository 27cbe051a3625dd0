import CourierCore
import CourierReactor
import CourierSync
@testable import CourierTransport
import Foundation
import Testing
import _CourierTestSupport

/// An HTTP/2 stream's receive window starts small and grows while the round trip, not its
/// reader, holds the stream back (`StreamWindow`): seen from inside the connection, on a path
/// made long by a relay that delays both directions.
@Suite("HTTP/2 stream windows on a long round trip", .serialized, .timeLimit(.minutes(1)))
struct HTTP2WindowTests {
    /// Keeps a response's body, and the connection that carried it.
    final class BodyReader: HTTPExchangeDelegate, @unchecked Sendable {
        struct State {
            var body: [UInt8] = []
            var ended = false
            var failure: TransportError?
        }
        let state = Mutex(State())
        /// Written on the loop once the head arrives, read after the exchange ended.
        var connection: HTTP2Connection?

        func exchange(_ exchange: HTTPExchange, didSendBodyBytes totalBytesSent: Int64) {}
        func exchange(_ exchange: HTTPExchange, didReceiveHead head: HTTPResponseHead) {
            guard case .executing(let handle) = exchange.state.withLock({ $0.phase }) else { return }
            connection = handle.connection as? HTTP2Connection
        }
        func exchange(_ exchange: HTTPExchange, didReceiveBodyBytes bytes: UnsafeRawBufferPointer) {
            state.withLock { $0.body += bytes }
        }
        func exchange(_ exchange: HTTPExchange, didCompleteWithTrailers trailers: HTTPFields?, metrics: ExchangeMetrics) {
            state.withLock { $0.ended = true }
        }
        func exchange(_ exchange: HTTPExchange, didFailWith error: TransportError, metrics: ExchangeMetrics) {
            state.withLock { $0.failure = error }
        }
    }

    @Test("over a 50 ms round trip a stream whose reader keeps up doubles its window, and the body arrives whole")
    func growsOverALongRoundTrip() async throws {
        let body = deterministicBytes(count: 24 << 20, seed: 0x5EED)
        let server = try NghttpdServer(files: ["big.bin": body], tls: false)
        defer { server.stop() }
        let relay = try DelayRelay(to: server.port, delay: .milliseconds(25))
        defer { relay.stop() }
        let group = try EventLoopGroup(loopCount: 1, name: "window-test")
        var configuration = HTTPTransport.Configuration()
        configuration.http2PriorKnowledge = true
        let transport = HTTPTransport(configuration: configuration, group: group)
        defer {
            transport.shutdown()
            group.shutdown()
        }
        let reader = BodyReader()
        let origin = Origin(scheme: .http, host: "127.0.0.1", port: UInt16(relay.port))
        let head = HTTPRequestHead(method: .get, target: "/big.bin", authority: origin.authority, scheme: "http", fields: HTTPFields())
        transport.start(transport.makeExchange(TransportRequest(origin: origin, head: head), delegate: reader))
        #expect(await pollUntil(timeout: .seconds(45)) { reader.state.withLock { $0.ended || $0.failure != nil } })
        let (received, failure) = reader.state.withLock { ($0.body, $0.failure) }
        #expect(failure == nil)
        #expect(received.count == body.count)
        #expect(received == body)

        let connection = try #require(reader.connection)
        let bound = LoopBound(connection, loop: connection.loop)
        let (growths, roundTrip, initial, maximum) = await withCheckedContinuation { continuation in
            bound.loop.execute {
                let connection = bound.value
                continuation.resume(returning: (
                    connection.streamWindowGrowths, connection.roundTrip, connection.streamWindow.size, connection.streamWindow.maximum
                ))
            }
        }
        #expect((roundTrip ?? 0) >= 50_000_000, "the round trip is measured through the relay, end to end")
        #expect(initial == 1 << 20)
        #expect(maximum == 8 << 20)
        // 1 MiB → 2 → 4 → 8 when each half window is read within two round trips, as it is
        // unless the machine is slow enough to read under 20 MB/s; at least the first doubling.
        #expect((1...3).contains(growths))
    }
}
