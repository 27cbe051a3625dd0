import Courier
import CourierSync
import CourierTLS
import Foundation
import Testing
import _CourierTestSupport

/// How a request's bytes are cut into TLS records: each record costs the client an encryption
/// and the wire 22 bytes, so the parts of one write share records.
@Suite("TLS records of a request")
struct TLSRecordTests {
    init() throws {
        // Puts the test CA in this process's trust store before any session is made.
        _ = try TestCertificates.make()
    }

    /// What the server saw of one request: its plaintext, and how many application-data records
    /// carried it.
    struct Seen {
        var request: [UInt8] = []
        var records = 0
        var version: TLSVersion?
    }

    /// Sends `request` to a TLS server that reads one request and counts the application-data
    /// records it came in (TLS 1.3: every record after the client's Finished).
    static func send(_ request: URLRequest) async throws -> Seen {
        let seen = Mutex<Seen?>(nil)
        let server = try ScriptedServer { connection in
            guard let end = try? TLSServerEnd(connection), end.handshake(), let request = end.readRequest() else { return }
            // Application data, and the client's Finished before it, travel as type 23.
            let encrypted = end.recordTypes.filter { $0 == 23 }.count
            seen.withLock { $0 = Seen(request: request, records: encrypted - 1, version: end.engine.negotiatedVersion) }
            try? Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".utf8).withUnsafeBytes { try end.engine.write($0) }
            end.engine.close()
            end.flush()
        }
        var request = request
        request.url = URL(string: "https://127.0.0.1:\(server.port)/upload")!
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let (data, _) = try await session.data(for: request)
        #expect(String(decoding: data, as: UTF8.self) == "ok")
        let result = try #require(seen.withLock { $0 })
        #expect(result.version == .tls1_3, "the count of records assumes TLS 1.3")
        return result
    }

    @Test("a request's head and body go out in as few records as hold them", arguments: [100, 40_000])
    func headAndBody(bodySize: Int) async throws {
        let body = deterministicBytes(count: bodySize, seed: 21)
        var request = URLRequest(url: URL(string: "https://127.0.0.1/")!)
        request.httpMethod = "POST"
        request.httpBody = Data(body)
        let seen = try await Self.send(request)
        #expect(Array(seen.request.suffix(bodySize)) == body)
        let fewest = (seen.request.count + 16_383) / 16_384
        // One record for the head and as many again for the body, unless they share.
        #expect(seen.records == fewest, "\(seen.request.count) bytes in \(seen.records) records")
    }

    @Test("each chunk of a streamed body goes out in one record: its size line, data and CRLF together")
    func chunk() async throws {
        let body = deterministicBytes(count: 100, seed: 22)
        var request = URLRequest(url: URL(string: "https://127.0.0.1/")!)
        request.httpMethod = "POST"
        request.httpBodyStream = InputStream(data: Data(body))
        let seen = try await Self.send(request)
        #expect(Array(seen.request.suffix(body.count + 7)) == body + Array("\r\n0\r\n\r\n".utf8))
        // The head goes before the stream is read, and the last chunk after its end: three
        // records, where one for each of the chunk's three parts made five.
        #expect(seen.records == 3)
    }
}
