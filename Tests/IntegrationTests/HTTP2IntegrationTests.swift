import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// HTTP/2 against real servers: nginx (ALPN over TLS, h2c with prior knowledge, GOAWAY after
/// a request limit) and nghttpd.
@Suite("HTTP/2 against nginx and nghttpd")
struct HTTP2IntegrationTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    func session(priorKnowledge: Bool = false, streamWindow: Int? = nil, delegate: (any URLSessionDelegate)? = nil) -> URLSession {
        let configuration = URLSessionConfiguration.uncached
        configuration.http2PriorKnowledge = priorKnowledge
        configuration.courierHTTP2StreamWindowSize = streamWindow
        return URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    }

    @Test("ALPN negotiates h2; the response looks like an HTTP/1.1 one")
    func alpn() async throws {
        let recorder = RecordingDelegate()
        let session = session(delegate: recorder)
        defer { session.finishTasksAndInvalidate() }
        session.dataTask(with: nginx.tlsURL("good", "/files/hello.txt")).resume()
        await recorder.waitForCompletion()
        let record = recorder.record.withLock { $0 }
        #expect(record.error == nil)
        let intact = Array(record.data) == NginxServer.fixtures["hello.txt"]
        #expect(intact)
        let transaction = try #require(record.metrics?.transactionMetrics.first)
        #expect(transaction.networkProtocolName == "h2")
        let (_, response) = try await session.data(from: nginx.tlsURL("good", "/files/hello.txt"))
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.value(forHTTPHeaderField: "X-Server-Protocol") == "HTTP/2.0")
        #expect(http.httpVersion == "HTTP/2")
        #expect(http.allHeaderFields["Content-Length"] as? String == String(NginxServer.fixtures["hello.txt"]!.count))
        #expect(http.value(forHTTPHeaderField: "content-type") != nil)
        #expect(http.expectedContentLength == Int64(NginxServer.fixtures["hello.txt"]!.count))
    }

    @Test("100 concurrent requests share one connection")
    func concurrency() async throws {
        let session = session()
        defer { session.finishTasksAndInvalidate() }
        // One request first, so the connection exists and everyone multiplexes on it.
        _ = try await session.data(from: nginx.tlsURL("good", "/files/100.bin"))
        let connections = try await withThrowingTaskGroup(of: String.self) { group in
            for index in 0..<100 {
                group.addTask {
                    let path = index % 2 == 0 ? "/files/64k.bin" : "/chunked/100.bin"
                    let (data, response) = try await session.data(from: nginx.tlsURL("good", path))
                    #expect(data.count == (index % 2 == 0 ? 65536 : 100))
                    return nginxConnection(response) ?? "?"
                }
            }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(connections.count == 1)
    }

    @Test("requests made at once before any connection exists still share one")
    func concurrencyFromCold() async throws {
        let session = session()
        defer { session.finishTasksAndInvalidate() }
        let connections = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<20 {
                group.addTask {
                    let (_, response) = try await session.data(from: nginx.tlsURL("good", "/files/100.bin"))
                    return nginxConnection(response) ?? "?"
                }
            }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(connections.count == 1, "the pool waits for the first handshake to learn it is h2")
    }

    @Test("uploads: known length and streamed bodies over h2")
    func uploads() async throws {
        let session = session()
        defer { session.finishTasksAndInvalidate() }
        let body = Data(deterministicBytes(count: 2_000_000, seed: 21))
        var post = URLRequest(url: nginx.tlsURL("good", "/echo"))
        post.httpMethod = "POST"
        let (_, known) = try await session.upload(for: post, from: body)
        #expect((known as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Body-SHA256") == body.sha256Hex)
        var streamed = URLRequest(url: nginx.tlsURL("good", "/echo"))
        streamed.httpMethod = "PUT"
        streamed.httpBodyStream = InputStream(data: body)
        let (_, response) = try await session.data(for: streamed)
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Body-SHA256") == body.sha256Hex)
    }

    @Test("a 256 MiB download and upload over TLS h2 keep their SHA-256")
    func largeTransfers() async throws {
        let session = session()
        defer { session.finishTasksAndInvalidate() }
        let file = try nginx.largeFile(megabytes: 256)
        let (data, _) = try await session.data(from: nginx.tlsURL("good", file.path))
        #expect(data.count == 256 * 1024 * 1024)
        #expect(data.sha256Hex == file.sha256)

        let source = nginx.directory.appendingPathComponent("www\(file.path)")
        let target = "/dav/upload-\(UUID().uuidString).bin"
        var put = URLRequest(url: nginx.tlsURL("good", target))
        put.httpMethod = "PUT"
        let (_, response) = try await session.upload(for: put, fromFile: source)
        #expect((response as? HTTPURLResponse)?.statusCode == 201)
        let stored = nginx.directory.appendingPathComponent("www\(target)").path
        let digest = try runTool("/usr/bin/sha256sum", [stored]).split(separator: " ").first.map(String.init)
        #expect(digest == file.sha256)
    }

    @Test("h2c with prior knowledge")
    func priorKnowledge() async throws {
        let session = session(priorKnowledge: true)
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(from: URL(string: "http://127.0.0.1:\(nginx.h2cPort)/files/hello.txt")!)
        #expect(Array(data) == NginxServer.fixtures["hello.txt"])
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Server-Protocol") == "HTTP/2.0")
    }

    @Test("GOAWAY after the server's request limit: every request still succeeds")
    func goAway() async throws {
        let session = session()
        defer { session.finishTasksAndInvalidate() }
        var connections: Set<String> = []
        for _ in 0..<35 {
            let (data, response) = try await session.data(from: nginx.tlsURL("goaway", "/files/100.bin"))
            #expect(data.count == 100)
            connections.insert(nginxConnection(response) ?? "?")
        }
        #expect(connections.count >= 4, "nginx closes each connection after 10 requests")
        let concurrent = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<40 {
                group.addTask { try await session.data(from: nginx.tlsURL("goaway", "/files/64k.bin")).0.count }
            }
            return try await group.reduce(0, +)
        }
        #expect(concurrent == 40 * 65536)
    }

    @Test("a suspended h2 task stalls only its own stream")
    func suspendOneStream() async throws {
        let paused = Mutex(false)
        let slow = RecordingDelegate(onData: { task in
            let first = paused.withLock { done -> Bool in
                defer { done = true }
                return !done
            }
            if first { task.suspend() }
        })
        let session = session()
        defer { session.finishTasksAndInvalidate() }
        // Sent at 1 MB/s (nginx's limit_rate): the body is still coming when the suspend is
        // made, however late the delegate queue runs the first didReceive(data:).
        let slowTask = session.dataTask(with: nginx.tlsURL("good", "/slow/8m.bin"))
        slowTask.delegate = slow
        slowTask.resume()
        while !paused.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
        // Meanwhile another stream on the same connection completes.
        let (other, _) = try await session.data(from: nginx.tlsURL("good", "/files/1m.bin"))
        #expect(other.count == 1024 * 1024)
        #expect(slowTask.state == .suspended)
        slowTask.resume()
        await slow.waitForCompletion()
        let complete = Array(slow.record.withLock { $0.data }) == NginxServer.fixtures["8m.bin"]
        #expect(complete)
    }

    @Test("a resumed h2 stream hands its stash to a slow delegate a slice at a time, pausing again at the backlog's mark")
    func stashInSlices() async throws {
        let probe = StashProbe()
        // A stream window past the backlog's mark (the default 1 MiB is below it), so that
        // the stash can hold more than the delegate may have ahead of it.
        let session = session(streamWindow: 8 << 20)
        defer { session.finishTasksAndInvalidate() }
        let task = session.dataTask(with: nginx.tlsURL("good", "/files/8m.bin"))
        task.delegate = probe
        task.resume()
        while !probe.state.withLock({ $0.suspended }) { try await Task.sleep(for: .milliseconds(5)) }
        // nginx fills the stream window meanwhile: the body waits in the stash.
        try await Task.sleep(for: .milliseconds(500))
        let takenBeforeResume = probe.state.withLock { $0.data.count }
        #expect(takenBeforeResume <= 1024 * 1024, "most of the body is stashed when the task resumes")
        task.resume()
        await probe.completed.wait()
        let (data, error, mostAhead) = probe.state.withLock { ($0.data, $0.error, $0.mostAhead) }
        #expect(error == nil)
        let complete = Array(data) == NginxServer.fixtures["8m.bin"]
        #expect(complete)
        // Given whole, the stash (about 8 MiB) would all be ahead of the delegate at once; in
        // slices the task pauses again once the backlog passes its 1 MiB mark.
        let backlogMarkAndSlices = 1024 * 1024 + 768 * 1024
        #expect(mostAhead <= backlogMarkAndSlices)
    }

    @Test("cancelling one stream leaves the connection and the other streams alone")
    func cancelOneStream() async throws {
        let session = session()
        defer { session.finishTasksAndInvalidate() }
        _ = try await session.data(from: nginx.tlsURL("good", "/files/100.bin"))
        let doomed = Task { try await session.data(from: nginx.tlsURL("good", "/files/8m.bin")) }
        let kept = Task { try await session.data(from: nginx.tlsURL("good", "/files/1m.bin")) }
        doomed.cancel()
        do {
            _ = try await doomed.value
        } catch let error as URLError {
            #expect(error.code == .cancelled)
        }
        let (data, response) = try await kept.value
        #expect(data.count == 1024 * 1024)
        let (_, after) = try await session.data(from: nginx.tlsURL("good", "/files/100.bin"))
        #expect(nginxConnection(after) == nginxConnection(response))
    }

    @Test("nghttpd over TLS and h2c: GETs and concurrency")
    func nghttpd() async throws {
        let files = ["a.txt": Array("from nghttpd\n".utf8), "b.bin": deterministicBytes(count: 300_000, seed: 31)]
        let tlsServer = try NghttpdServer(files: files)
        defer { tlsServer.stop() }
        let session = session()
        defer { session.finishTasksAndInvalidate() }
        let recorder = RecordingDelegate()
        let task = session.dataTask(with: tlsServer.url("/a.txt"))
        task.delegate = recorder
        task.resume()
        await recorder.waitForCompletion()
        let intact = Array(recorder.record.withLock { $0.data }) == files["a.txt"]
        #expect(intact)
        #expect(recorder.record.withLock { $0.metrics?.transactionMetrics.first?.networkProtocolName } == "h2")
        let total = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<50 { group.addTask { try await session.data(from: tlsServer.url("/b.bin")).0.count } }
            return try await group.reduce(0, +)
        }
        #expect(total == 50 * 300_000)

        let cleartext = try NghttpdServer(files: files, tls: false)
        defer { cleartext.stop() }
        let h2c = self.session(priorKnowledge: true)
        defer { h2c.finishTasksAndInvalidate() }
        let (data, _) = try await h2c.data(from: cleartext.url("/b.bin", scheme: "http"))
        let sameBytes = Array(data) == files["b.bin"]
        #expect(sameBytes)
        let (_, missing) = try await h2c.data(from: cleartext.url("/missing", scheme: "http"))
        #expect((missing as? HTTPURLResponse)?.statusCode == 404)
    }
}

/// For `stashInSlices`: suspends its task when the response comes (before any body is
/// delivered), then takes the body slowly, noting how far the bytes handed to the task ran
/// ahead of those it had taken.
final class StashProbe: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    struct State {
        var suspended = false
        var data = Data()
        var mostAhead = 0
        var error: (any Error)?
    }

    let state = Mutex(State())
    /// Raised by didCompleteWithError.
    let completed = AsyncFlag()

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        dataTask.suspend()
        state.withLock { $0.suspended = true }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let received = Int(dataTask.countOfBytesReceived)
        state.withLock { state in
            state.mostAhead = max(state.mostAhead, received - state.data.count)
            state.data.append(data)
        }
        usleep(10_000)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        state.withLock { $0.error = error }
        completed.raise()
    }
}
