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
    typealias Watcher = TransportLifetimeTests.Watcher

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
        let watcher = Watcher.get("/big.bin", from: Origin(scheme: .http, host: "127.0.0.1", port: UInt16(relay.port)), through: transport)
        #expect(await pollUntil(timeout: .seconds(45)) { watcher.outcome.withLock { $0.ended || $0.failure != nil } })
        let (received, failure) = watcher.outcome.withLock { ($0.body, $0.failure) }
        #expect(failure == nil)
        #expect(received.count == body.count)
        #expect(received == body)

        // The pool keeps the idle connection until the transport shuts down.
        let connection = try #require(watcher.connection as? HTTP2Connection)
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
