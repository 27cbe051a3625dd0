import CourierCore
import CourierSync
@testable import CourierTransport
import Foundation
import Testing
import _CourierTestSupport

/// A pool and its open connections hold each other (strong references both ways, so that the
/// pool has no side table to slow every retain of it): the close of a connection, and a pool's
/// shutdown closing them all, must end that, or every shut-down transport would leave them behind.
@Suite struct TransportLifetimeTests {
    /// Notes, weakly, the connection and the pool of the exchange once its head arrives, and
    /// keeps the response's body.
    final class Watcher: HTTPExchangeDelegate, @unchecked Sendable {
        struct Outcome {
            var ended = false
            var failure: TransportError?
            var body: [UInt8] = []
        }
        let outcome = Mutex(Outcome())

        /// Starts a GET of `path` on `origin` through `transport`, watched by a new watcher.
        static func get(_ path: String, from origin: Origin, through transport: HTTPTransport) -> Watcher {
            let watcher = Watcher()
            let head = HTTPRequestHead(method: .get, target: path, authority: origin.authority, scheme: origin.scheme.rawValue, fields: HTTPFields())
            transport.start(transport.makeExchange(TransportRequest(origin: origin, head: head), delegate: watcher))
            return watcher
        }
        /// Written on the loop before the exchange ends (which `outcome` records under its
        /// lock), read after; only compared with nil.
        weak var connection: AnyObject?
        weak var pool: PoolDriver?

        func exchange(_ exchange: HTTPExchange, didSendBodyBytes totalBytesSent: Int64) {}
        func exchange(_ exchange: HTTPExchange, didReceiveHead head: HTTPResponseHead) {
            guard case .executing(let handle) = exchange.state.withLock({ $0.phase }) else { return }
            if let http1 = handle.connection as? HTTP1Connection {
                connection = http1
                pool = http1.pool
            } else if let http2 = handle.connection as? HTTP2Connection {
                connection = http2
                pool = http2.pool
            }
        }
        func exchange(_ exchange: HTTPExchange, didReceiveBodyBytes bytes: UnsafeRawBufferPointer) {
            outcome.withLock { $0.body += bytes }
        }
        func exchange(_ exchange: HTTPExchange, didCompleteWithTrailers trailers: HTTPFields?, metrics: ExchangeMetrics) {
            outcome.withLock { $0.ended = true }
        }
        func exchange(_ exchange: HTTPExchange, didFailWith error: TransportError, metrics: ExchangeMetrics) {
            outcome.withLock { $0.failure = error }
        }
    }

    @Test("a transport shut down frees its pools and their connections, which hold each other while open (HTTP/1.1)")
    func shutDownFreesPoolsAndConnections() async throws {
        let server = try ScriptedServer { connection in
            while connection.readRequest() != nil { connection.respond(body: Array("ok".utf8)) }
        }
        try await expectFreedAfterShutdown(Origin(scheme: .http, host: "127.0.0.1", port: UInt16(server.port)), "/")
    }

    @Test("a connection the server closes is freed while its transport lives on")
    func connectionClosedByServerIsFreed() async throws {
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.respond(headers: [("Connection", "close")], body: Array("ok".utf8))
        }
        let transport = HTTPTransport()
        defer { transport.shutdown() }
        let watcher = Watcher.get("/", from: Origin(scheme: .http, host: "127.0.0.1", port: UInt16(server.port)), through: transport)
        #expect(await pollUntil { watcher.outcome.withLock { $0.ended || $0.failure != nil } })
        #expect(watcher.outcome.withLock { $0.failure == nil })
        let freed = await pollUntil { watcher.connection == nil }
        #expect(freed, "a closed connection outlived its close")
        #expect(watcher.pool != nil, "the transport still holds its pool")
    }

    @Test("the same over HTTP/2 (nginx, ALPN)")
    func shutDownFreesHTTP2PoolsAndConnections() async throws {
        let nginx = try NginxServer.shared()
        _ = try TestCertificates.make()
        let url = nginx.tlsURL("good", "/files/hello.txt")
        try await expectFreedAfterShutdown(Origin(scheme: .https, host: "127.0.0.1", port: UInt16(url.port!)), url.path, http2: true)
    }

    /// Runs one GET of `path` on `origin` with a new transport, shuts the transport down, and
    /// expects the exchange's connection and pool to be freed.
    private func expectFreedAfterShutdown(_ origin: Origin, _ path: String, http2: Bool = false) async throws {
        let watcher: Watcher
        do {
            let transport = HTTPTransport()
            watcher = Watcher.get(path, from: origin, through: transport)
            #expect(await pollUntil { watcher.outcome.withLock { $0.ended || $0.failure != nil } })
            #expect(watcher.outcome.withLock { $0.failure == nil })
            // Idle in its pool: both alive, each holding the other.
            #expect(watcher.pool != nil)
            if http2 {
                #expect(watcher.connection is HTTP2Connection)
            } else {
                #expect(watcher.connection is HTTP1Connection)
            }
            transport.shutdown()
        }
        let freed = await pollUntil { watcher.connection == nil && watcher.pool == nil }
        #expect(freed, "the pool and its connection outlived the transport's shutdown: connection \(watcher.connection == nil ? "freed" : "alive"), pool \(watcher.pool == nil ? "freed" : "alive")")
    }
}
