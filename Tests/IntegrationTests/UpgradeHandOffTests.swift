import CourierCore
import CourierSync
import CourierTransport
import Foundation
import Testing
import _CourierTestSupport

/// A 101 to a request that asked for it hands the connection over (the WebSocket task's way in):
/// the bytes after the 101 come first, then the stream carries whatever the two ends say.
@Suite("Upgrade hand-off")
struct UpgradeHandOffTests {
    /// Takes the upgraded connection and records what it reads.
    final class Taker: HTTPExchangeDelegate, UpgradedConnectionHandler, @unchecked Sendable {
        struct Record {
            var head: HTTPResponseHead?
            var received: [UInt8] = []
            var ended = false
            var failure: TransportError?
            var connection: UpgradedConnection?
        }
        let record = Mutex(Record())
        /// Sent once the upgraded connection has been started.
        let greeting: [UInt8]

        init(greeting: [UInt8]) {
            self.greeting = greeting
        }

        func exchange(_ exchange: HTTPExchange, didSendBodyBytes totalBytesSent: Int64) {}
        func exchange(_ exchange: HTTPExchange, didReceiveHead head: HTTPResponseHead) { record.withLock { $0.head = head } }
        func exchange(_ exchange: HTTPExchange, didReceiveBodyBytes bytes: UnsafeRawBufferPointer) {}
        func exchange(_ exchange: HTTPExchange, didCompleteWithTrailers trailers: HTTPFields?, metrics: ExchangeMetrics) {
            record.withLock { $0.ended = true }
        }
        func exchange(_ exchange: HTTPExchange, didFailWith error: TransportError, metrics: ExchangeMetrics) {
            record.withLock { $0.failure = error }
        }
        func exchange(_ exchange: HTTPExchange, didUpgradeWith head: HTTPResponseHead, connection: UpgradedConnection, metrics: ExchangeMetrics) {
            record.withLock {
                $0.head = head
                $0.connection = connection
            }
            connection.start(self)
            greeting.withUnsafeBytes { connection.write($0) }
        }

        func connection(_ connection: UpgradedConnection, didRead bytes: UnsafeRawBufferPointer) {
            record.withLock { $0.received += bytes }
        }
        func connectionDidReadEOF(_ connection: UpgradedConnection, cleanly: Bool) {
            // Closed before the end is recorded: the test, which waits for the end under the
            // record's lock, then reads `isClosed` ordered after the close (ThreadSanitizer saw
            // the other order as a race, and the test could see the end before the close).
            connection.close()
            record.withLock { $0.ended = true }
        }
        func connectionDidDrainWrites(_ connection: UpgradedConnection) {}
        func connection(_ connection: UpgradedConnection, didFail error: TransportError) {
            record.withLock { $0.failure = error }
        }
    }

    private func request(_ server: ScriptedServer, upgrades: Bool) -> TransportRequest {
        var fields = HTTPFields()
        fields.append(name: "Upgrade", value: "courier-test")
        fields.append(name: "Connection", value: "Upgrade")
        let head = HTTPRequestHead(method: .get, target: "/switch", authority: "127.0.0.1:\(server.port)", fields: fields)
        var request = TransportRequest(origin: Origin(scheme: .http, host: "127.0.0.1", port: UInt16(server.port)), head: head)
        request.upgrades = upgrades
        return request
    }

    @Test("the bytes after the 101 come first; then both directions carry the new protocol until the server closes")
    func handOff() async throws {
        let server = try ScriptedServer { connection in
            guard let request = connection.readRequest(), request.header("Upgrade") == "courier-test" else { return }
            // The 101 and the new protocol's first bytes in one write: the client reads them together.
            connection.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: courier-test\r\nConnection: Upgrade\r\n\r\nEARLY;")
            let greeting = connection.readAvailable()
            connection.write(Array("GOT \(String(decoding: greeting, as: UTF8.self));".utf8))
            connection.shutdownWrite()
            connection.readToEOF(timeout: 5)
        }
        defer { server.stop() }
        let transport = HTTPTransport()
        let taker = Taker(greeting: Array("HELLO".utf8))
        transport.start(transport.makeExchange(request(server, upgrades: true), delegate: taker))
        #expect(await pollUntil { taker.record.withLock { $0.ended || $0.failure != nil } })
        let record = taker.record.withLock { $0 }
        #expect(record.failure == nil)
        #expect(record.head?.status == 101)
        #expect(String(decoding: record.received, as: UTF8.self) == "EARLY;GOT HELLO;")
        #expect(record.connection?.isClosed == true)
    }

    @Test("a 101 to a request that did not ask for one still fails the exchange")
    func unaskedUpgrade() async throws {
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: courier-test\r\nConnection: Upgrade\r\n\r\n")
            connection.readToEOF(timeout: 5)
        }
        defer { server.stop() }
        let transport = HTTPTransport()
        let taker = Taker(greeting: [])
        transport.start(transport.makeExchange(request(server, upgrades: false), delegate: taker))
        #expect(await pollUntil { taker.record.withLock { $0.failure != nil || $0.ended } })
        let record = taker.record.withLock { $0 }
        #expect(record.connection == nil)
        guard case .remoteProtocol? = record.failure else {
            Issue.record("expected a protocol failure, got \(String(describing: record.failure))")
            return
        }
    }

    @Test("an upgrade request answered with a plain response completes as any exchange")
    func refusedUpgrade() async throws {
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.respond(status: 426, reason: "Upgrade Required", body: Array("no".utf8))
        }
        defer { server.stop() }
        let transport = HTTPTransport()
        let taker = Taker(greeting: [])
        transport.start(transport.makeExchange(request(server, upgrades: true), delegate: taker))
        #expect(await pollUntil { taker.record.withLock { $0.ended || $0.failure != nil } })
        let record = taker.record.withLock { $0 }
        #expect(record.head?.status == 426 && record.connection == nil && record.failure == nil)
    }

    @Test("an upgrade request over TLS goes on HTTP/1.1 where ALPN would pick HTTP/2; other requests still get HTTP/2")
    func tlsUsesHTTP1() async throws {
        let nginx = try NginxServer.shared()
        let url = nginx.tlsURL("good", "/echo")
        let port = try #require(url.port)
        let transport = HTTPTransport()
        func run(upgrades: Bool) async -> Taker.Record {
            var fields = HTTPFields()
            fields.append(name: "Upgrade", value: "courier-test")
            let head = HTTPRequestHead(method: .get, target: "/echo", authority: "127.0.0.1:\(port)", scheme: "https", fields: fields)
            var request = TransportRequest(origin: Origin(scheme: .https, host: "127.0.0.1", port: UInt16(port)), head: head)
            request.upgrades = upgrades
            let taker = Taker(greeting: [])
            transport.start(transport.makeExchange(request, delegate: taker))
            _ = await pollUntil { taker.record.withLock { $0.failure != nil || $0.ended } }
            return taker.record.withLock { $0 }
        }
        let upgrading = await run(upgrades: true)
        #expect(upgrading.failure == nil && upgrading.connection == nil)
        #expect(upgrading.head?.status == 200, "nginx does not switch for this protocol: a plain answer")
        #expect(upgrading.head?.version == .http1_1)
        let plain = await run(upgrades: false)
        #expect(plain.head?.version == .http2)
    }
}
