import Courier
import CourierCore
import CourierReactor
import CourierSync
import CourierTransport
import Foundation
import Testing
import _CourierTestSupport

/// A large HTTP/1 body reaches its reader without a copy: the reader takes the event loop's
/// receive buffer that holds a read, and a spare takes its place in the loop
/// (`HTTPExchange.takeReceiveBuffer`). Over TLS the records in hand are decrypted into one read.
@Suite("Receive buffers taken by a body's reader", .serialized)
struct ReceiveBufferTests {
    /// Takes every receive buffer it may, and records where each body read went.
    final class Taker: HTTPExchangeDelegate, @unchecked Sendable {
        enum Piece: @unchecked Sendable {
            /// Copied during the call: its buffer stayed the loop's.
            case copied([UInt8])
            /// Still where it was read, in a buffer the loop gave up.
            case taken(UnsafeRawBufferPointer)
        }
        struct Record {
            var pieces: [Piece] = []
            var takenBuffers: [Given] = []
            /// Takes granted for a slice that stops short of the read's end, or twice for one read.
            var wrongTakes = 0
            var ended = false
            var failure: TransportError?
        }
        /// A buffer the loop gave up, now the taker's.
        struct Given: @unchecked Sendable {
            let buffer: UnsafeMutableRawPointer
        }
        let record = Mutex(Record())

        deinit {
            record.withLock { record in
                for given in record.takenBuffers { given.buffer.deallocate() }
            }
        }

        /// The body as the pieces hold it now, after every read is over.
        var body: [UInt8] {
            record.withLock { record in
                record.pieces.flatMap { piece -> [UInt8] in
                    switch piece {
                    case .copied(let bytes): return bytes
                    case .taken(let bytes): return Array(bytes)
                    }
                }
            }
        }

        private static func replacement() -> UnsafeMutableRawPointer {
            .allocate(byteCount: EventLoop.readBufferSize, alignment: 16)
        }

        func exchange(_ exchange: HTTPExchange, didSendBodyBytes totalBytesSent: Int64) {}
        func exchange(_ exchange: HTTPExchange, didReceiveHead head: HTTPResponseHead) {}
        func exchange(_ exchange: HTTPExchange, didReceiveBodyBytes bytes: UnsafeRawBufferPointer) {
            var wrong = 0
            if bytes.count > 1 {
                // Bytes after these are still to be parsed: the buffer cannot go.
                let short = UnsafeRawBufferPointer(rebasing: bytes.dropLast())
                if let given = exchange.takeReceiveBuffer(holding: short, replacement: Self.replacement).map(Given.init) {
                    wrong += 1
                    record.withLock { $0.takenBuffers.append(given) }
                }
            }
            let given = exchange.takeReceiveBuffer(holding: bytes, replacement: Self.replacement).map(Given.init)
            if given != nil, let again = exchange.takeReceiveBuffer(holding: bytes, replacement: Self.replacement).map(Given.init) {
                wrong += 1
                record.withLock { $0.takenBuffers.append(again) }
            }
            let piece: Piece = given == nil ? .copied(Array(bytes)) : .taken(bytes)
            record.withLock { record in
                record.wrongTakes += wrong
                if let given { record.takenBuffers.append(given) }
                record.pieces.append(piece)
            }
        }
        func exchange(_ exchange: HTTPExchange, didCompleteWithTrailers trailers: HTTPFields?, metrics: ExchangeMetrics) {
            record.withLock { $0.ended = true }
        }
        func exchange(_ exchange: HTTPExchange, didFailWith error: TransportError, metrics: ExchangeMetrics) {
            record.withLock { $0.failure = error }
        }
    }

    /// Runs a GET of `path` on `origin` with a ``Taker``.
    private func take(_ transport: HTTPTransport, _ origin: Origin, _ path: String) async -> Taker {
        let head = HTTPRequestHead(method: .get, target: path, authority: "127.0.0.1:\(origin.port)",
                                   scheme: origin.scheme == .https ? "https" : "http", fields: HTTPFields())
        let taker = Taker()
        transport.start(transport.makeExchange(TransportRequest(origin: origin, head: head), delegate: taker))
        #expect(await pollUntil { taker.record.withLock { $0.ended || $0.failure != nil } })
        return taker
    }

    /// A server that answers every request with `body`: framed by its length, chunked (in
    /// chunks of 300,000 bytes) or by the end of the connection.
    static func serve(_ body: [UInt8], framing: String) throws -> ScriptedServer {
        try ScriptedServer { connection in
            while connection.readRequest() != nil {
                switch framing {
                case "length":
                    connection.respond(body: body)
                case "chunked":
                    connection.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    var offset = 0
                    while offset < body.count {
                        let size = min(300_000, body.count - offset)
                        connection.write(Array("\(String(size, radix: 16))\r\n".utf8) + body[offset..<(offset + size)] + Array("\r\n".utf8))
                        offset += size
                    }
                    connection.write("0\r\n\r\n")
                default:
                    connection.write("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                    connection.write(body)
                    connection.shutdownWrite()
                    return
                }
            }
        }
    }

    @Test("a 4 MiB body: the reads that end at the body's bytes give their buffers up, and every byte stays where it was read",
          arguments: ["length", "chunked", "close"])
    func takenReadsKeepTheirBytes(_ framing: String) async throws {
        let body = deterministicBytes(count: 4 * 1024 * 1024, seed: 17)
        let server = try Self.serve(body, framing: framing)
        defer { server.stop() }
        let transport = HTTPTransport()
        let taker = await take(transport, Origin(scheme: .http, host: "127.0.0.1", port: UInt16(server.port)), "/")
        let record = taker.record.withLock { $0 }
        #expect(record.failure == nil)
        #expect(record.wrongTakes == 0, "a buffer was given up with bytes still to parse, or twice")
        #expect(record.takenBuffers.count > 0, "no read gave its buffer up")
        #expect(taker.body == body, "a taken buffer was written to after it was given up")

        // The loop reads into the spares it was given: a second body arrives whole as well.
        let again = await take(transport, Origin(scheme: .http, host: "127.0.0.1", port: UInt16(server.port)), "/")
        #expect(again.record.withLock { $0.failure } == nil)
        #expect(again.body == body)
        #expect(taker.body == body, "the first body's buffers were reused")
    }

    /// Runs a GET of an 8 MiB file on nginx's TLS host `host` with a ``Taker``; checks the body.
    private func takeOverTLS(_ host: String) async throws -> Taker.Record {
        let nginx = try NginxServer.shared()
        _ = try TestCertificates.make()
        let file = try nginx.largeFile(megabytes: 8)
        let url = nginx.tlsURL(host, file.path)
        let taker = await take(HTTPTransport(), Origin(scheme: .https, host: "127.0.0.1", port: UInt16(url.port!)), file.path)
        #expect(Data(taker.body).sha256Hex == file.sha256)
        return taker.record.withLock { $0 }
    }

    @Test("over TLS (HTTP/1.1) records are read together, and their buffer is given up too")
    func takenOverTLS() async throws {
        let record = try await takeOverTLS("h1")
        #expect(record.failure == nil)
        #expect(record.wrongTakes == 0)
        #expect(record.takenBuffers.count > 0, "no decrypted read gave its buffer up")
        #expect(record.pieces.contains { piece in
            if case .taken(let bytes) = piece { return bytes.count > 16_384 }
            return false
        }, "no read held more than one TLS record")
    }

    @Test("HTTP/2 never gives its buffer up: DATA lies among other frames")
    func http2Keeps() async throws {
        let record = try await takeOverTLS("good")
        #expect(record.failure == nil)
        #expect(record.takenBuffers.isEmpty && record.wrongTakes == 0)
    }

    @Test("after the exchange is over nothing can be taken")
    func nothingAfterTheEnd() async throws {
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.respond(body: Array(repeating: 7, count: 100_000))
            connection.readToEOF(timeout: 5)
        }
        defer { server.stop() }
        let transport = HTTPTransport()
        let head = HTTPRequestHead(method: .get, target: "/", authority: "127.0.0.1:\(server.port)", fields: HTTPFields())
        let taker = Taker()
        let exchange = transport.makeExchange(TransportRequest(origin: Origin(scheme: .http, host: "127.0.0.1", port: UInt16(server.port)), head: head), delegate: taker)
        transport.start(exchange)
        #expect(await pollUntil { taker.record.withLock { $0.ended || $0.failure != nil } })
        let kept: [UInt8] = Array(repeating: 7, count: 100_000)
        let given = kept.withUnsafeBytes { bytes in
            exchange.takeReceiveBuffer(holding: bytes) { Issue.record("asked for a replacement"); return .allocate(byteCount: 1, alignment: 1) }
        }
        #expect(given == nil)
    }

    /// Keeps every `Data` the delegate is given, to put them together at the end.
    final class Keeper: NSObject, URLSessionDataDelegate, @unchecked Sendable {
        struct Record {
            var reads: [Data] = []
            var finished = false
            var error: (any Error)?
        }
        let record = Mutex(Record())

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            record.withLock { $0.reads.append(data) }
        }
        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            record.withLock {
                $0.error = error
                $0.finished = true
            }
        }
    }

    @Test("a delegate that keeps every Data it is given still has every byte at the end", arguments: ["h1", "chunked", "tls-h1", "tls-h2"])
    func delegateKeepsReads(_ route: String) async throws {
        let nginx = try NginxServer.shared()
        _ = try TestCertificates.make()
        let file = try nginx.largeFile(megabytes: 8)
        // nginx chunks only through a filter (SSI), which may change a random file's bytes.
        let chunked = try Self.serve(deterministicBytes(count: 8 * 1024 * 1024, seed: 5), framing: "chunked")
        defer { chunked.stop() }
        let expected = route == "chunked" ? Data(deterministicBytes(count: 8 * 1024 * 1024, seed: 5)).sha256Hex : file.sha256
        let url: URL
        switch route {
        case "h1":
            url = nginx.url(file.path)
        case "chunked":
            url = URL(string: "http://127.0.0.1:\(chunked.port)/")!
        case "tls-h1":
            url = nginx.tlsURL("h1", file.path)
        default:
            url = nginx.tlsURL("good", file.path)
        }
        let keeper = Keeper()
        let session = URLSession(configuration: .uncached, delegate: keeper, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        session.dataTask(with: url).resume()
        #expect(await pollUntil { keeper.record.withLock { $0.finished } })
        let record = keeper.record.withLock { $0 }
        #expect(record.error == nil)
        let whole = record.reads.reduce(into: Data()) { $0.append($1) }
        #expect(whole.count == 8 * 1024 * 1024)
        #expect(whole.sha256Hex == expected, "a Data changed after it was delivered")
    }
}
