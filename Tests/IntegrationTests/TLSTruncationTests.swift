import CourierCore
import CourierTLS
import CourierTransport
import Courier
import Foundation
import CourierSync
import Testing
import _CourierTestSupport

/// A TLS server made of OpenSSL (Courier's engine in the server role) over the scripted raw
/// server's socket, for ends of stream nginx does not produce: a close without close_notify.
@Suite("TLS close-delimited bodies")
struct TLSTruncationTests {
    init() throws {
        // Puts the test CA in this process's trust store before any session is made.
        _ = try TestCertificates.make()
    }

    /// Runs a TLS handshake on `connection`, reads a request and writes `response` (after
    /// `delay`), each of `records` as a record of its own in the same write, with `garbage`
    /// after them; then sends close_notify or not (`together`: in that same write).
    static func serve(
        _ connection: ScriptedConnection, response: String, records: [String] = [], delay: TimeInterval = 0,
        garbage: [UInt8] = [], closeNotify: Bool, together: Bool = false
    ) throws {
        let server = try TLSServerEnd(connection)
        guard server.handshake(), server.readRequest() != nil else { return }
        if delay > 0 { Thread.sleep(forTimeInterval: delay) }
        for record in [response] + records {
            try Array(record.utf8).withUnsafeBytes { try server.engine.write($0) }
        }
        if closeNotify && together { server.engine.close() }
        server.flush(then: garbage)
        if closeNotify && !together {
            server.engine.close()
            server.flush()
        }
    }

    @Test("a close-delimited body over TLS that ends with close_notify is complete")
    func cleanClose() async throws {
        let server = try ScriptedServer { connection in
            try? TLSTruncationTests.serve(connection, response: "HTTP/1.0 200 OK\r\n\r\nthe whole body", closeNotify: true)
        }
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let (data, _) = try await session.data(from: URL(string: "https://127.0.0.1:\(server.port)/")!)
        #expect(String(decoding: data, as: UTF8.self) == "the whole body")
    }

    @Test("a close-delimited body over TLS that ends without close_notify is networkConnectionLost")
    func truncatedClose() async throws {
        let server = try ScriptedServer { connection in
            try? TLSTruncationTests.serve(connection, response: "HTTP/1.0 200 OK\r\n\r\nmaybe the whole body", closeNotify: false)
        }
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        do {
            _ = try await session.data(from: URL(string: "https://127.0.0.1:\(server.port)/")!)
            Issue.record("a body cut without close_notify was taken as complete")
        } catch let error as URLError {
            #expect(error.code == .networkConnectionLost)
        }
    }

    @Test("a server silent after the ClientHello: the request times out and the handshake is abandoned")
    func silentHandshake() async throws {
        let abandoned = Mutex<Bool?>(nil)
        let server = try ScriptedServer { connection in
            _ = connection.readAvailable(timeout: 60)
            // The client closes as its connect deadline passes, long before this minute's wait
            // ends, however late a loaded machine fires its timer.
            let closed = PeerLog().awaitClientClose(connection, within: 60)
            abandoned.withLock { $0 = closed }
        }
        let configuration = URLSessionConfiguration.uncached
        configuration.timeoutIntervalForRequest = 0.5
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        do {
            _ = try await session.data(from: URL(string: "https://127.0.0.1:\(server.port)/")!)
            Issue.record("a handshake the server never answered succeeded")
        } catch let error as URLError {
            #expect(error.code == .timedOut)
        }
        while abandoned.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(50)) }
        #expect(abandoned.withLock { $0 } == true, "the client kept the silent handshake open")
    }

    @Test("a forged response in the next TLS record never reaches the request waiting for the connection")
    func forgedRecordWithWaiter() async throws {
        let server = try ScriptedServer { connection in
            guard connection.index == 0 else {
                try? TLSTruncationTests.serve(connection, response: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh", closeNotify: true)
                return
            }
            // The delay lets the second request queue behind the first.
            try? TLSTruncationTests.serve(
                connection, response: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                records: ["HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nforge"], delay: 0.3, closeNotify: false
            )
            _ = connection.readToEOF(timeout: 3)
        }
        let configuration = URLSessionConfiguration.uncached
        configuration.httpMaximumConnectionsPerHost = 1
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        async let first = session.data(from: URL(string: "https://127.0.0.1:\(server.port)/1")!)
        try await Task.sleep(for: .milliseconds(100))
        let (second, _) = try await session.data(from: URL(string: "https://127.0.0.1:\(server.port)/2")!)
        #expect(String(decoding: try await first.0, as: UTF8.self) == "ok")
        #expect(String(decoding: second, as: UTF8.self) == "fresh", "the forged record was never taken as a response")
    }

    /// Pauses the exchange's reading from inside the head's delivery, as a task waiting for
    /// its delegate's disposition does.
    final class PausingReader: HTTPExchangeDelegate, @unchecked Sendable {
        struct Record {
            var body: [UInt8] = []
            var paused = false
            var ended = false
            var failure: TransportError?
        }
        let record = Mutex(Record())

        func exchange(_ exchange: HTTPExchange, didSendBodyBytes totalBytesSent: Int64) {}
        func exchange(_ exchange: HTTPExchange, didReceiveHead head: HTTPResponseHead) {
            exchange.recordPauseWish(true)
            exchange.applyPauseWish()
            record.withLock { $0.paused = true }
        }
        func exchange(_ exchange: HTTPExchange, didReceiveBodyBytes bytes: UnsafeRawBufferPointer) {
            record.withLock { $0.body += bytes }
        }
        func exchange(_ exchange: HTTPExchange, didCompleteWithTrailers trailers: HTTPFields?, metrics: ExchangeMetrics) {
            record.withLock { $0.ended = true }
        }
        func exchange(_ exchange: HTTPExchange, didFailWith error: TransportError, metrics: ExchangeMetrics) {
            record.withLock { $0.failure = error }
        }
    }

    @Test("an end decrypted in the same read as bytes whose reader paused is kept until it reads again",
          arguments: ["close_notify", "broken record"])
    func endWhilePaused(_ end: String) async throws {
        // A whole application-data record whose contents cannot be decrypted.
        let broken: [UInt8] = [0x17, 0x03, 0x03, 0x00, 0x20] + Array(repeating: 0x5A, count: 32)
        let server = try ScriptedServer { connection in
            try? TLSTruncationTests.serve(
                connection, response: "HTTP/1.0 200 OK\r\n\r\nfirst;", records: ["second"],
                garbage: end == "close_notify" ? [] : broken, closeNotify: end == "close_notify", together: true
            )
            _ = connection.readToEOF(timeout: 5)
        }
        defer { server.stop() }
        let transport = HTTPTransport()
        let head = HTTPRequestHead(method: .get, target: "/", authority: "127.0.0.1:\(server.port)", scheme: "https", fields: HTTPFields())
        let origin = Origin(scheme: .https, host: "127.0.0.1", port: UInt16(server.port))
        let reader = PausingReader()
        let exchange = transport.makeExchange(TransportRequest(origin: origin, head: head), delegate: reader)
        transport.start(exchange)
        #expect(await pollUntil { reader.record.withLock { $0.paused } })
        try await Task.sleep(for: .milliseconds(300))
        let waiting = reader.record.withLock { $0 }
        #expect(waiting.body.isEmpty && !waiting.ended && waiting.failure == nil, "something was delivered while paused")
        exchange.recordPauseWish(false)
        exchange.applyPauseWish()
        #expect(await pollUntil(timeout: .seconds(10)) { reader.record.withLock { $0.ended || $0.failure != nil } })
        let record = reader.record.withLock { $0 }
        #expect(String(decoding: record.body, as: UTF8.self) == "first;second")
        if end == "close_notify" {
            #expect(record.ended && record.failure == nil)
        } else {
            #expect(!record.ended && record.failure != nil)
        }
    }

    @Test("a Content-Length body over TLS needs no close_notify")
    func lengthDelimited() async throws {
        let server = try ScriptedServer { connection in
            try? TLSTruncationTests.serve(connection, response: "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbody", closeNotify: false)
        }
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let (data, _) = try await session.data(from: URL(string: "https://127.0.0.1:\(server.port)/")!)
        #expect(String(decoding: data, as: UTF8.self) == "body")
    }
}
