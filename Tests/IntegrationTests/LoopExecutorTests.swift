import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// `URLSession.courierTaskExecutor`: Swift tasks that prefer the session's event loop send
/// their requests from the loop's thread and are resumed there, and everything the async API
/// does still works from there: HTTP/1.1 and HTTP/2 over TLS, redirects, failures, timeouts,
/// cancellation, uploads, downloads, byte streams, many requests at once.
@Suite("The session's loop executor")
struct LoopExecutorTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    /// True on one of Courier's event loop threads (named `courier-loop-N` for the system).
    static var onLoopThread: Bool {
        ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "").hasPrefix("courier-loop")
    }

    @Test("requests made on the executor run on the loop's thread and are resumed there: h1, h2 over TLS, a redirect chain")
    func resumesOnTheLoop() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        try await withTaskExecutorPreference(session.courierTaskExecutor) {
            #expect(Self.onLoopThread, "the task starts on the loop")
            let (plain, plainResponse) = try await session.data(from: nginx.url("/files/hello.txt"))
            #expect(Self.onLoopThread, "resumed on the loop")
            #expect(Array(plain) == NginxServer.fixtures["hello.txt"])
            #expect((plainResponse as? HTTPURLResponse)?.statusCode == 200)

            let (secure, secureResponse) = try await session.data(from: nginx.tlsURL("good", "/files/64k.bin"))
            #expect(Self.onLoopThread)
            #expect(Array(secure) == NginxServer.fixtures["64k.bin"])
            #expect((secureResponse as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Length") == "65536")

            let (_, redirected) = try await session.data(from: nginx.url("/redirect/hop1"))
            #expect(Self.onLoopThread)
            #expect((redirected as? HTTPURLResponse)?.statusCode == 200)
            #expect(redirected.url?.path == "/files/hello.txt", "the redirects were followed")
        }
    }

    @Test("from the executor: a refused connection, a timeout and a cancel each fail with their URLError, and the loop goes on serving")
    func failuresFromTheLoop() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let silent = try ScriptedServer { connection in
            _ = connection.readRequest(timeout: 60)
            _ = connection.readToEOF(timeout: 60)
        }
        defer { silent.stop() }
        try await withTaskExecutorPreference(session.courierTaskExecutor) {
            await expectURLError(.cannotConnectToHost) {
                let closed = ClosedLoopbackPort()
                defer { withExtendedLifetime(closed) {} }
                _ = try await session.data(from: URL(string: "http://127.0.0.1:\(closed.port)/")!)
            }
            var slow = URLRequest(url: silent.url("/timeout"))
            slow.timeoutInterval = 0.5
            await expectURLError(.timedOut) { _ = try await session.data(for: slow) }

            let waiting = Task(executorPreference: session.courierTaskExecutor) {
                try await session.data(from: silent.url("/cancel"))
            }
            // Cancelled once the server holds the request: the cancel meets a load under way.
            let deadline = ContinuousClock.now + .seconds(30)
            while silent.connectionCount < 2 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
            waiting.cancel()
            await expectURLError(.cancelled) { _ = try await waiting.value }

            let (data, _) = try await session.data(from: nginx.url("/files/hello.txt"))
            #expect(Array(data) == NginxServer.fixtures["hello.txt"], "the loop still serves")
        }
    }

    @Test("from the executor: an upload, a download, a byte stream, and 64 loads at once on HTTP/1.1 and HTTP/2")
    func everyAsyncCall() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        try await withTaskExecutorPreference(session.courierTaskExecutor) {
            var post = URLRequest(url: nginx.url("/echo"))
            post.httpMethod = "POST"
            let body = Data(deterministicBytes(count: 200_000, seed: 7))
            let (echoed, _) = try await session.upload(for: post, from: body)
            let object = try #require(try JSONSerialization.jsonObject(with: echoed) as? [String: Any])
            #expect(object["bodyLength"] as? Int == body.count)

            // Other tests watch the temporary directory's download files (DownloadTests).
            try await DownloadFilesLock.holding {
                let (file, _) = try await session.download(from: nginx.url("/files/1m.bin"))
                defer { try? FileManager.default.removeItem(at: file) }
                #expect(try Array(Data(contentsOf: file)) == NginxServer.fixtures["1m.bin"])
            }

            let (bytes, _) = try await session.bytes(from: nginx.tlsURL("good", "/files/64k.bin"))
            var received: [UInt8] = []
            for try await byte in bytes { received.append(byte) }
            #expect(received == NginxServer.fixtures["64k.bin"])
            #expect(Self.onLoopThread)

            for url in [nginx.url("/files/hello.txt"), nginx.tlsURL("good", "/files/hello.txt")] {
                let sizes = try await withThrowingTaskGroup(of: Int.self) { group in
                    for _ in 0..<64 { group.addTask { try await session.data(from: url).0.count } }
                    return try await group.reduce(into: [Int]()) { $0.append($1) }
                }
                #expect(sizes == Array(repeating: NginxServer.fixtures["hello.txt"]!.count, count: 64), "\(url)")
            }
        }
    }

    @Test("a session whose executor is not used is unchanged: calls from the global executor are not resumed on the loop")
    func otherExecutorsUnchanged() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let onLoop = await Task.detached {
            _ = try? await session.data(from: nginx.url("/files/hello.txt"))
            return Self.onLoopThread
        }.value
        #expect(!onLoop)
    }
}

