import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// `URLSession.ResponseDisposition.becomeStream`: a data task whose delegate answers
/// `didReceive response` with it hands its HTTP/1.1 connection to a new stream task, which
/// reads what the server sends after the head and writes on the same connection.
@Suite("Data tasks that become stream tasks")
struct BecomeStreamTests {
    final class Recorder: NSObject, URLSessionDataDelegate, URLSessionStreamDelegate, @unchecked Sendable {
        struct Record {
            var streamTask: URLSessionStreamTask?
            var becameBeforeStreamEvents = true
            var dataReceived = 0
            var completed: [(task: Int, error: (any Error)?)] = []
            var readClosed = 0
        }
        let record = Mutex(Record())
        var snapshot: Record { record.withLock { $0 } }

        func urlSession(
            _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
            completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
        ) {
            completionHandler(.becomeStream)
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            record.withLock { $0.dataReceived += data.count }
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didBecome streamTask: URLSessionStreamTask) {
            record.withLock { record in
                if record.readClosed > 0 || !record.completed.isEmpty { record.becameBeforeStreamEvents = false }
                record.streamTask = streamTask
            }
        }

        func urlSession(_ session: URLSession, readClosedFor streamTask: URLSessionStreamTask) {
            record.withLock { $0.readClosed += 1 }
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            record.withLock { $0.completed.append((task.taskIdentifier, error)) }
        }
    }

    private func readToEnd(_ task: URLSessionStreamTask) async throws -> String {
        var data = Data()
        while true {
            let (bytes, atEOF) = try await task.readData(ofMinLength: 1, maxLength: 4096, timeout: 10)
            if let bytes { data.append(bytes) }
            if atEOF { return String(decoding: data, as: UTF8.self) }
        }
    }

    @Test("the bytes after the head, sent with it, go to the stream task; writes reach the server on the same connection")
    func becomeStream() async throws {
        let serverSaw = Mutex<[String]>([])
        let server = try ScriptedServer { connection in
            guard let request = connection.readRequest(timeout: 60) else { return }
            serverSaw.withLock { $0.append("\(request.method) \(request.target)") }
            // The head and the first bytes of the new protocol in one write.
            connection.write("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nWELCOME\n")
            // Generous waits: under the whole suite's load the client's next step can take seconds.
            let ping = connection.readAvailable(timeout: 60)
            serverSaw.withLock { $0.append(String(decoding: ping, as: UTF8.self)) }
            connection.write("PONG\n")
            serverSaw.withLock { $0.append(String(decoding: connection.readToEOF(timeout: 60), as: UTF8.self)) }
            connection.write("BYE\n")
            connection.close()
        }
        defer { server.stop() }
        let recorder = Recorder()
        let session = URLSession(configuration: .ephemeral, delegate: recorder, delegateQueue: nil)
        defer { session.invalidateAndCancel() }
        let dataTask = session.dataTask(with: server.url("/chat"))
        dataTask.resume()
        #expect(await pollUntil { recorder.snapshot.streamTask != nil })
        let streamTask = try #require(recorder.snapshot.streamTask)
        #expect(streamTask.state == .running)
        #expect(dataTask.state == .completed)
        let (welcome, _) = try await streamTask.readData(ofMinLength: 8, maxLength: 8, timeout: 10)
        #expect(welcome.map { String(decoding: $0, as: UTF8.self) } == "WELCOME\n")
        try await streamTask.write(Data("PING\n".utf8), timeout: 10)
        let (pong, _) = try await streamTask.readData(ofMinLength: 5, maxLength: 5, timeout: 10)
        #expect(pong.map { String(decoding: $0, as: UTF8.self) } == "PONG\n")
        try await streamTask.write(Data("last words".utf8), timeout: 10)
        streamTask.closeWrite()
        #expect(try await readToEnd(streamTask) == "BYE\n")
        #expect(await pollUntil { recorder.snapshot.completed.count == 1 })
        let record = recorder.snapshot
        #expect(record.becameBeforeStreamEvents)
        #expect(record.dataReceived == 0)
        // Only the stream task completes; the data task says nothing more.
        #expect(record.completed.map(\.task) == [streamTask.taskIdentifier])
        #expect(record.completed.first.map { $0.error == nil } == true)
        #expect(serverSaw.withLock { $0 } == ["GET /chat", "PING\n", "last words"])
        #expect(server.connectionCount == 1)
    }

    @Test("on an HTTP/2 connection the data task fails instead, with a message that says why")
    func refusedOnHTTP2() async throws {
        let nginx = try NginxServer.shared()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.http2PriorKnowledge = true
        let recorder = Recorder()
        let session = URLSession(configuration: configuration, delegate: recorder, delegateQueue: nil)
        defer { session.invalidateAndCancel() }
        let dataTask = session.dataTask(with: URL(string: "http://127.0.0.1:\(nginx.h2cPort)/files/hello.txt")!)
        dataTask.resume()
        #expect(await pollUntil { recorder.snapshot.completed.count == 1 })
        let record = recorder.snapshot
        #expect(record.streamTask == nil)
        let error = try #require(record.completed.first?.error as? URLError)
        #expect(error.localizedDescription.contains("HTTP/2"))
        #expect(record.completed.first?.task == dataTask.taskIdentifier)
    }
}
