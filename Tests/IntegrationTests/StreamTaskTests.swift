import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// `URLSessionStreamTask` against `StreamEchoServer` (a Python TCP/TLS echo on loopback) and the
/// SOCKS5 proxy.
@Suite("Stream tasks")
struct StreamTaskTests {
    let server: StreamEchoServer

    init() throws {
        server = try StreamEchoServer.shared()
    }

    /// Records the stream delegate's calls, the completion, and the captured streams.
    final class Recorder: NSObject, URLSessionStreamDelegate, @unchecked Sendable {
        struct Record {
            var readClosed = 0
            var writeClosed = 0
            var completed: [(any Error)?] = []
            var streams: Unchecked<(InputStream, OutputStream)>?
            var trustChallenges: [String] = []
            var offQueue = 0
        }
        let record = Mutex(Record())
        /// How server-trust challenges are answered; nil leaves them to the session.
        let trustAnswer: URLSession.AuthChallengeDisposition?
        var snapshot: Record { record.withLock { $0 } }

        init(trustAnswer: URLSession.AuthChallengeDisposition? = nil) {
            self.trustAnswer = trustAnswer
        }

        func urlSession(_ session: URLSession, readClosedFor streamTask: URLSessionStreamTask) {
            let onQueue = OperationQueue.current === session.delegateQueue
            record.withLock {
                $0.readClosed += 1
                if !onQueue { $0.offQueue += 1 }
            }
        }

        func urlSession(_ session: URLSession, writeClosedFor streamTask: URLSessionStreamTask) {
            record.withLock { $0.writeClosed += 1 }
        }

        func urlSession(_ session: URLSession, streamTask: URLSessionStreamTask, didBecome inputStream: InputStream, outputStream: OutputStream) {
            let pair = Unchecked((inputStream, outputStream))
            record.withLock { $0.streams = pair }
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            record.withLock { $0.completed.append(error) }
        }

        func urlSession(
            _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
            completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
        ) {
            guard challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodServerTrust, let trustAnswer else {
                completionHandler(.performDefaultHandling, nil)
                return
            }
            record.withLock { $0.trustChallenges.append("\(task is URLSessionStreamTask) \(challenge.protectionSpace.host)") }
            completionHandler(trustAnswer, nil)
        }
    }

    private func started(
        port: Int, recorder: Recorder = Recorder(), configuration: URLSessionConfiguration = .ephemeral,
        prepare: (URLSessionStreamTask) -> Void = { _ in }
    ) -> (URLSession, URLSessionStreamTask, Recorder) {
        let session = URLSession(configuration: configuration, delegate: recorder, delegateQueue: nil)
        let task = session.streamTask(withHostName: "127.0.0.1", port: port)
        prepare(task)
        task.resume()
        return (session, task, recorder)
    }

    /// Reads until `count` bytes or the end of stream.
    private func read(_ task: URLSessionStreamTask, count: Int, chunk: Int = 64 << 10) async throws -> (Data, Bool) {
        var data = Data()
        while data.count < count {
            let (bytes, atEOF) = try await task.readData(ofMinLength: 1, maxLength: min(chunk, count - data.count), timeout: 20)
            if let bytes { data.append(bytes) }
            if atEOF { return (data, true) }
        }
        return (data, false)
    }

    /// Reads everything up to the end of stream.
    private func readToEnd(_ task: URLSessionStreamTask) async throws -> Data {
        var data = Data()
        while true {
            let (bytes, atEOF) = try await task.readData(ofMinLength: 1, maxLength: 1 << 20, timeout: 20)
            if let bytes { data.append(bytes) }
            if atEOF { return data }
        }
    }

    private func randomBytes(_ count: Int, seed: UInt64) -> Data {
        var generator = SplitMix64(seed: seed)
        return Data((0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
    }

    @Test("echo: bytes written come back; closeWrite sends FIN, the server's BYE ends at EOF, and the task completes")
    func echoAndHalfClose() async throws {
        let (session, task, recorder) = started(port: server.echoPort)
        defer { session.invalidateAndCancel() }
        try await task.write(Data("hello stream".utf8), timeout: 10)
        let (echo, _) = try await read(task, count: 12)
        #expect(String(decoding: echo, as: UTF8.self) == "hello stream")
        task.closeWrite()
        let rest = try await readToEnd(task)
        #expect(String(decoding: rest, as: UTF8.self) == "BYE\n")
        #expect(await pollUntil { recorder.snapshot.completed.count == 1 })
        let record = recorder.snapshot
        #expect(record.completed.count == 1)
        #expect(record.completed.first.map { $0 == nil } == true)
        #expect(record.readClosed == 1)
        #expect(record.writeClosed == 1)
        #expect(record.offQueue == 0)
        #expect(task.state == .completed)
        // Once both directions are closed, later calls fail rather than wait.
        await #expect(throws: (any Error).self) { try await task.write(Data("late".utf8), timeout: 1) }
    }

    @Test("reads and writes asked for before resume() are served in order once connected")
    func queuedBeforeResume() async throws {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let task = session.streamTask(withHostName: "127.0.0.1", port: server.echoPort)
        let order = Mutex<[String]>([])
        let done = AsyncStreamBox()
        task.readData(ofMinLength: 6, maxLength: 6, timeout: 10) { data, _, error in
            order.withLock { $0.append("read1 \(data.map { String(decoding: $0, as: UTF8.self) } ?? "nil") \(error == nil)") }
        }
        task.write(Data("first-".utf8), timeout: 10) { error in order.withLock { $0.append("write1 \(error == nil)") } }
        task.write(Data("second".utf8), timeout: 10) { error in order.withLock { $0.append("write2 \(error == nil)") } }
        task.readData(ofMinLength: 6, maxLength: 6, timeout: 10) { data, _, error in
            order.withLock { $0.append("read2 \(data.map { String(decoding: $0, as: UTF8.self) } ?? "nil") \(error == nil)") }
            done.finish()
        }
        task.resume()
        await done.wait()
        let calls = order.withLock { $0 }
        #expect(calls.contains("read1 first- true"))
        #expect(calls.last == "read2 second true")
        #expect(calls.firstIndex(of: "write1 true")! < calls.firstIndex(of: "write2 true")!)
    }

    @Test("TLS from the first byte (startSecureConnection before resume): 4 MiB echoed intact, close_notify then BYE")
    func tlsEcho() async throws {
        let (session, task, recorder) = started(port: server.tlsEchoPort) { $0.startSecureConnection() }
        defer { session.invalidateAndCancel() }
        let payload = randomBytes(4 << 20, seed: 7)
        async let echoed = read(task, count: payload.count)
        try await task.write(payload, timeout: 30)
        let (received, atEOF) = try await echoed
        #expect(!atEOF)
        #expect(sameBytes(received, payload))
        task.closeWrite()
        #expect(String(decoding: try await readToEnd(task), as: UTF8.self) == "BYE\n")
        #expect(await pollUntil { recorder.snapshot.completed.count == 1 })
        #expect(recorder.snapshot.completed.first.map { $0 == nil } == true)
    }

    @Test("STARTTLS: plaintext lines, then startSecureConnection mid-stream, then TLS echo")
    func startTLSMidStream() async throws {
        let (session, task, _) = started(port: server.startTLSPort)
        defer { session.invalidateAndCancel() }
        #expect(String(decoding: try await read(task, count: 6).0, as: UTF8.self) == "HELLO\n")
        try await task.write(Data("PING\n".utf8), timeout: 10)
        #expect(String(decoding: try await read(task, count: 10).0, as: UTF8.self) == "ECHO PING\n")
        try await task.write(Data("STARTTLS\n".utf8), timeout: 10)
        #expect(String(decoding: try await read(task, count: 3).0, as: UTF8.self) == "GO\n")
        task.startSecureConnection()
        let secret = randomBytes(100_000, seed: 11)
        try await task.write(secret, timeout: 20)
        let (echoed, _) = try await read(task, count: secret.count)
        #expect(sameBytes(echoed, secret))
        task.closeWrite()
        #expect(String(decoding: try await readToEnd(task), as: UTF8.self) == "BYE\n")
    }

    @Test("a 24 MiB download in 64 KiB reads arrives whole, with atEOF on the last read")
    func largeSource() async throws {
        let (session, task, recorder) = started(port: server.sourcePort)
        defer { session.invalidateAndCancel() }
        let count = 24 << 20
        try await task.write(Data("SEND \(count)\n".utf8), timeout: 10)
        let received = try await readToEnd(task)
        #expect(received.count == count)
        #expect(sameBytes(received, Data(StreamEchoServer.sourcePattern(count: count))))
        // The peer's close is read-closed; the task waits for closeWrite to complete.
        #expect(await pollUntil { recorder.snapshot.readClosed == 1 })
        #expect(recorder.snapshot.completed.isEmpty)
        task.closeWrite()
        #expect(await pollUntil { recorder.snapshot.completed.count == 1 })
        #expect(recorder.snapshot.completed.first.map { $0 == nil } == true)
        // Reads after the task closed complete at once, at EOF; writes fail with EPIPE.
        let (after, atEOF) = try await task.readData(ofMinLength: 1, maxLength: 10, timeout: 5)
        #expect(after == nil)
        #expect(atEOF)
        await #expect {
            try await task.write(Data("late".utf8), timeout: 1)
        } throws: { ($0 as? POSIXError)?.code == .EPIPE }
    }

    @Test("a read that times out fails with timedOut and the task goes on")
    func readTimeout() async throws {
        let (session, task, _) = started(port: server.echoPort)
        defer { session.invalidateAndCancel() }
        let started = ContinuousClock.now
        await #expect {
            _ = try await task.readData(ofMinLength: 1, maxLength: 10, timeout: 0.3)
        } throws: { ($0 as? URLError)?.code == .timedOut }
        // Not a speed check: the read must not wait for bytes that never come. Under the whole
        // suite's load the failure can take seconds to be delivered.
        #expect(ContinuousClock.now - started < .seconds(60))
        try await task.write(Data("still here".utf8), timeout: 10)
        #expect(String(decoding: try await read(task, count: 10).0, as: UTF8.self) == "still here")
    }

    @Test("writes to a server that reads nothing stop at the back-pressure mark and time out")
    func writeBackPressure() async throws {
        let (session, task, _) = started(port: server.sourcePort)
        defer { session.invalidateAndCancel() }
        try await task.write(Data("STALL\n".utf8), timeout: 10)
        let chunk = Data(count: 1 << 20)
        var written = 0
        var failure: (any Error)?
        for _ in 0..<64 {
            do {
                try await task.write(chunk, timeout: 1)
                written += chunk.count
            } catch {
                failure = error
                break
            }
        }
        #expect((failure as? URLError)?.code == .timedOut)
        #expect(written < 64 << 20)
    }

    @Test("connection refused: reads fail and the task completes with cannotConnectToHost")
    func refused() async throws {
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        let port = closed.port
        let (session, task, recorder) = started(port: port)
        defer { session.invalidateAndCancel() }
        await #expect {
            _ = try await task.readData(ofMinLength: 1, maxLength: 10, timeout: 10)
        } throws: { ($0 as? URLError)?.code == .cannotConnectToHost }
        #expect(await pollUntil { recorder.snapshot.completed.count == 1 })
        #expect((recorder.snapshot.completed.first! as? URLError)?.code == .cannotConnectToHost)
    }

    @Test("a reset by the server fails the pending read and the task")
    func resetByPeer() async throws {
        let (session, task, recorder) = started(port: server.sourcePort)
        defer { session.invalidateAndCancel() }
        try await task.write(Data("RESET\n".utf8), timeout: 10)
        await #expect(throws: URLError.self) {
            while true {
                let (_, atEOF) = try await task.readData(ofMinLength: 1, maxLength: 10, timeout: 10)
                if atEOF { break }
            }
            // A reset read as a plain end of stream would be wrong: make it fail.
            throw CancellationError()
        }
        #expect(await pollUntil { recorder.snapshot.completed.count == 1 })
        #expect(recorder.snapshot.completed.first! is URLError)
    }

    @Test("cancel fails the pending read with cancelled and completes the task with it")
    func cancelPending() async throws {
        let (session, task, recorder) = started(port: server.echoPort)
        defer { session.invalidateAndCancel() }
        let pending = Task { try await task.readData(ofMinLength: 1, maxLength: 10, timeout: 0) }
        try await Task.sleep(for: .milliseconds(200))
        task.cancel()
        await #expect {
            _ = try await pending.value
        } throws: { ($0 as? URLError)?.code == .cancelled }
        #expect(await pollUntil { recorder.snapshot.completed.count == 1 })
        #expect((recorder.snapshot.completed.first! as? URLError)?.code == .cancelled)
    }

    @Test("writes after closeWrite fail with EPIPE; reads go on")
    func writeAfterCloseWrite() async throws {
        let (session, task, _) = started(port: server.echoPort)
        defer { session.invalidateAndCancel() }
        try await task.write(Data("one".utf8), timeout: 10)
        task.closeWrite()
        await #expect {
            try await task.write(Data("two".utf8), timeout: 10)
        } throws: { ($0 as? POSIXError)?.code == .EPIPE }
        #expect(String(decoding: try await readToEnd(task), as: UTF8.self) == "oneBYE\n")
    }

    @Test("captureStreams: the delegate gets streams that carry the connection, and the task completes")
    func capture() async throws {
        let (session, task, recorder) = started(port: server.echoPort)
        defer { session.invalidateAndCancel() }
        try await task.write(Data("before|".utf8), timeout: 10)
        task.captureStreams()
        #expect(await pollUntil { recorder.snapshot.streams != nil && recorder.snapshot.completed.count == 1 })
        #expect(recorder.snapshot.completed.first.map { $0 == nil } == true)
        let streams = recorder.snapshot.streams!
        let transcript = try await Task.detached { () throws -> String in
            let (input, output) = streams.value
            input.open()
            output.open()
            let message = Array("after".utf8)
            #expect(output.write(message, maxLength: message.count) == message.count)
            output.close()
            var collected: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = input.read(&buffer, maxLength: buffer.count)
                if count <= 0 {
                    #expect(count == 0)
                    break
                }
                collected += buffer[0..<count]
            }
            #expect(input.streamStatus == .atEnd)
            input.close()
            return String(decoding: collected, as: UTF8.self)
        }.value
        #expect(transcript == "before|afterBYE\n")
    }

    @Test("TLS challenges of a stream task reach its delegate with the task; rejecting fails the task")
    func trustChallenge() async throws {
        let rejecting = Recorder(trustAnswer: .cancelAuthenticationChallenge)
        let (session, task, _) = started(port: server.tlsEchoPort, recorder: rejecting) { $0.startSecureConnection() }
        defer { session.invalidateAndCancel() }
        await #expect(throws: URLError.self) {
            _ = try await task.readData(ofMinLength: 1, maxLength: 10, timeout: 10)
        }
        #expect(rejecting.snapshot.trustChallenges == ["true 127.0.0.1"])

        let accepting = Recorder(trustAnswer: .performDefaultHandling)
        let (other, echo, _) = started(port: server.tlsEchoPort, recorder: accepting) { $0.startSecureConnection() }
        defer { other.invalidateAndCancel() }
        try await echo.write(Data("trusted".utf8), timeout: 10)
        #expect(String(decoding: try await read(echo, count: 7).0, as: UTF8.self) == "trusted")
        #expect(accepting.snapshot.trustChallenges == ["true 127.0.0.1"])
    }

    @Test("a host name with CR LF through an HTTP proxy: no CONNECT is sent (the proxy reads nothing), and the task fails with badURL")
    func injectedHostNameThroughProxy() async throws {
        let received = Mutex<[UInt8]>([])
        let scriptsEnded = Mutex(0)
        let proxy = try ScriptedServer { connection in
            // Until the client closes (or 10 s): every byte it sent.
            let bytes = connection.readToEOF(timeout: 10)
            received.withLock { $0 += bytes }
            scriptsEnded.withLock { $0 += 1 }
        }
        defer { proxy.stop() }
        let configuration = URLSessionConfiguration.ephemeral
        configuration.connectionProxyDictionary = TestProxies.http(proxy.port)
        let recorder = Recorder()
        let session = URLSession(configuration: configuration, delegate: recorder, delegateQueue: nil)
        defer { session.invalidateAndCancel() }
        let task = session.streamTask(withHostName: "127.0.0.1\r\nX-Injected: yes\r\n", port: 443)
        task.resume()
        await #expect {
            _ = try await task.readData(ofMinLength: 1, maxLength: 10, timeout: 30)
        } throws: { ($0 as? URLError)?.code == .badURL }
        #expect(await pollUntil { recorder.snapshot.completed.count == 1 })
        #expect((recorder.snapshot.completed.first as? URLError)?.code == .badURL)
        #expect(await pollUntil(timeout: .seconds(30)) { scriptsEnded.withLock { $0 } == proxy.connectionCount })
        #expect(received.withLock { $0 }.isEmpty, "the proxy got: \(String(decoding: received.withLock { $0 }, as: UTF8.self))")
    }

    @Test("through the session's SOCKS5 proxy: the proxy connects to the host and the bytes pass")
    func throughSOCKS() async throws {
        let socks = try SOCKSProxyServer.shared()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.connectionProxyDictionary = [
            kCFNetworkProxiesSOCKSEnable: 1, kCFNetworkProxiesSOCKSProxy: "127.0.0.1", kCFNetworkProxiesSOCKSPort: socks.openPort,
        ]
        let (session, task, _) = started(port: server.echoPort, configuration: configuration)
        defer { session.invalidateAndCancel() }
        try await task.write(Data("via socks".utf8), timeout: 10)
        #expect(String(decoding: try await read(task, count: 9).0, as: UTF8.self) == "via socks")
        #expect(socks.destinations().contains { $0.contains("\(server.echoPort)") })
    }
}

/// A one-shot signal for completion handlers.
private final class AsyncStreamBox: Sendable {
    private let stream: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation

    init() {
        (stream, continuation) = AsyncStream<Void>.makeStream()
    }

    func finish() { continuation.finish() }

    func wait() async {
        for await _ in stream {}
    }
}
