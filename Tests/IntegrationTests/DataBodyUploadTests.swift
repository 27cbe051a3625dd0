import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// A request body given as bytes (`httpBody`, `upload(for:from:)`) over HTTP/1.1 goes out from
/// where it lies as the connection drains: the connection never copies more than its high-water
/// mark of it (256 KiB), and `didSendBodyData` follows what the socket took.
@Suite("Bodies given as bytes")
struct DataBodyUploadTests {
    init() throws {
        // Puts the test CA in this process's trust store before any session is made.
        _ = try TestCertificates.make()
    }

    /// The upload's progress as the task delegate hears it.
    final class Progress: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
        let totals = Mutex<[Int64]>([])
        var last: Int64 { totals.withLock { $0.last ?? 0 } }

        func urlSession(_ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
            totals.withLock { $0.append(totalBytesSent) }
        }
    }

    /// The server reads nothing of a 24 MiB body until the client's progress stops moving,
    /// then all of it. Before, the connection copied what the socket did not take at once
    /// into its own buffer (and over TLS the records into a second one) and reported the whole
    /// body sent while the server had read none of it.
    @Test("a long body is written as the server reads it, not copied whole", arguments: [false, true])
    func writtenAsRead(tls: Bool) async throws {
        let size = 24 << 20
        let body = deterministicBytes(count: size, seed: 17)
        let startReading = DispatchSemaphore(value: 0)
        let received = Mutex<[UInt8]?>(nil)
        let server = try ScriptedServer { connection in
            let response = Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".utf8)
            if tls {
                guard let end = try? TLSServerEnd(connection), end.handshake() else { return }
                startReading.wait()
                guard let request = end.readRequest(), let headEnd = request.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound else { return }
                received.withLock { $0 = Array(request[headEnd...]) }
                try? response.withUnsafeBytes { try end.engine.write($0) }
                end.engine.close()
                end.flush()
            } else {
                startReading.wait()
                guard let request = connection.readRequest(timeout: 60) else { return }
                received.withLock { $0 = request.body }
                connection.write(response)
            }
        }
        defer { server.stop() }
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: URL(string: "\(tls ? "https" : "http")://127.0.0.1:\(server.port)/upload")!)
        request.httpMethod = "POST"
        let progress = Progress()
        let upload = Task { [request] in try await session.upload(for: request, from: Data(body), delegate: progress) }

        // The socket's buffers fill, and then the progress stops where they are full.
        var previous: Int64 = -1
        for _ in 0..<100 {
            try await Task.sleep(for: .milliseconds(100))
            let now = progress.last
            if now > 0 && now == previous { break }
            previous = now
        }
        let stalled = progress.last
        startReading.signal()
        let (data, response) = try await upload.value

        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(String(decoding: data, as: UTF8.self) == "ok")
        let arrived = try #require(received.withLock { $0 })
        #expect(arrived.count == size)
        #expect(arrived == body, "the body arrived changed")
        // What the kernel holds on loopback (the send buffer grows to 4 MiB at most here, and an
        // unread receive buffer stays near its initial size), plus the connection's 256 KiB.
        #expect(stalled > 0 && stalled < Int64(size / 2), "\(stalled) of \(size) bytes reported sent while the server read none")
        let totals = progress.totals.withLock { $0 }
        #expect(totals.last == Int64(size))
        #expect(totals.count > 1)
        #expect(zip(totals, totals.dropFirst()).allSatisfy { $0 < $1 }, "the progress went back")
    }
}
