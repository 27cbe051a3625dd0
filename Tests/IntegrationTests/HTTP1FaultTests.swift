import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// Faults no real server makes on demand, from a scripted raw-socket server.
@Suite("HTTP/1.1 faults from a scripted server")
struct HTTP1FaultTests {
    func session(timeout: TimeInterval = 10, resourceTimeout: TimeInterval? = nil) -> URLSession {
        let configuration = URLSessionConfiguration.uncached
        configuration.timeoutIntervalForRequest = timeout
        if let resourceTimeout { configuration.timeoutIntervalForResource = resourceTimeout }
        return URLSession(configuration: configuration)
    }


    @Test("a body shorter than its Content-Length is networkConnectionLost")
    func truncatedBody() async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            connection.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly fifty bytes of the hundred that were promised!")
        }
        await expectURLError(.networkConnectionLost) { _ = try await session().data(from: server.url("/")) }
    }

    @Test("a chunked body cut short is networkConnectionLost")
    func truncatedChunked() async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            connection.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n10\r\nshort")
        }
        await expectURLError(.networkConnectionLost) { _ = try await session().data(from: server.url("/")) }
    }

    @Test("malformed framing is badServerResponse", arguments: [
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        "HTTP/1.1 200 OK\r\nX-A: a\r\n  folded\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\nContent-Length: 0\n\n",
        "HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-A: a\0b\r\nContent-Length: 0\r\n\r\n",
        "HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        "SMTP ready\r\n\r\n",
    ])
    func badFraming(_ response: String) async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            connection.write(response)
            connection.readToEOF(timeout: 2)
        }
        await expectURLError(.badServerResponse) { _ = try await session().data(from: server.url("/")) }
    }

    @Test("a stalled server times out after timeoutIntervalForRequest")
    func stall() async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            connection.write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
            // Long, so the server's end of stream never beats a timer that fires late.
            connection.readToEOF(timeout: 60)
        }
        let (error, took) = await timedLoad(session(timeout: 0.5), URLRequest(url: server.url("/")))
        #expect(urlErrorCode(error) == .timedOut)
        // Far below any default (60 s): the configured timeout was the one that fired.
        #expect(took < .seconds(20))
    }

    @Test("a trickling server is stopped by timeoutIntervalForResource")
    func resourceTimeout() async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            connection.write("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            for _ in 0..<100 {
                connection.write("x")
                usleep(100_000)
            }
        }
        let (error, took) = await timedLoad(session(timeout: 60, resourceTimeout: 1), URLRequest(url: server.url("/")))
        #expect(urlErrorCode(error) == .timedOut)
        // The server trickles for 10 s and the idle timeout is 60 s: only the resource timeout fits.
        #expect(took < .seconds(9))
    }

    @Test("an explicit request timeout wins over the session's")
    func requestTimeout() async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            // Long, so the server's end of stream never beats a timer that fires late.
            connection.readToEOF(timeout: 60)
        }
        var request = URLRequest(url: server.url("/"))
        request.timeoutInterval = 0.3
        let (error, took) = await timedLoad(session(timeout: 60), request)
        #expect(urlErrorCode(error) == .timedOut)
        // Far below the session's 60 s: the request's own timeout was the one that fired.
        #expect(took < .seconds(20))
    }

    @Test("cancelling the Swift task cancels the load")
    func swiftCancellation() async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            // Long, so the server's end of stream never beats a cancel that comes late.
            connection.readToEOF(timeout: 60)
        }
        // Nor does the request timeout, however late the sleep below ends.
        let session = session(timeout: 60)
        let load = Task { try await session.data(from: server.url("/")) }
        try await Task.sleep(for: .milliseconds(200))
        load.cancel()
        await expectURLError(.cancelled) { _ = try await load.value }
    }

    @Test("a connection refused is cannotConnectToHost")
    func refused() async throws {
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        let port = closed.port
        await expectURLError(.cannotConnectToHost) { _ = try await session().data(from: URL(string: "http://127.0.0.1:\(port)/")!) }
    }

    @Test("a name that does not resolve is cannotFindHost")
    func cannotFindHost() async throws {
        // A 64-octet label is not a valid DNS name: glibc answers from /etc/hosts and refuses
        // it without sending a query, so nothing leaves this machine.
        let host = String(repeating: "a", count: 64) + ".invalid"
        await expectURLError(.cannotFindHost) { _ = try await session().data(from: URL(string: "http://\(host)/")!) }
    }

    @Test("header injection fails before any byte is sent", arguments: [
        ("X-Test", "ok\r\nX-Injected: 1"), ("X-Test", "nul\0byte"), ("Bad Name", "v"), ("X-Test", "line\nfeed"), ("", "v"),
    ])
    func headerInjection(_ field: (String, String)) async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            connection.respond()
        }
        var request = URLRequest(url: server.url("/"))
        request.setValue(field.1, forHTTPHeaderField: field.0)
        await expectURLError(.badURL) { _ = try await session().data(for: request) }
        try await Task.sleep(for: .milliseconds(50))
        #expect(server.connectionCount == 0)
    }

    @Test("unsupported and malformed URLs fail clearly", arguments: [
        ("ftp://127.0.0.1/file", URLError.Code.unsupportedURL), ("mailto:someone@example.invalid", .unsupportedURL),
        ("http:///path", .badURL), ("http://127.0.0.1:0/", .badURL),
    ])
    func badURLs(_ entry: (String, URLError.Code)) async throws {
        await expectURLError(entry.1) { _ = try await session().data(from: URL(string: entry.0)!) }
    }

    @Test("a reused connection that turns out stale is retried once for GET")
    func staleRetry() async throws {
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            if connection.index == 0 {
                connection.respond(body: Array("first".utf8))
                // Read the next request on this connection, then close without answering:
                // the server timed the connection out just as the request arrived.
                _ = connection.readRequest()
                return
            }
            connection.respond(body: Array("fresh".utf8))
        }
        let session = session()
        let (first, _) = try await session.data(from: server.url("/one"))
        #expect(String(decoding: first, as: UTF8.self) == "first")
        let (second, _) = try await session.data(from: server.url("/two"))
        #expect(String(decoding: second, as: UTF8.self) == "fresh")
        #expect(server.connectionCount == 2)
    }

    @Test("a POST on a stale connection is not retried")
    func staleNoRetryForPost() async throws {
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.respond(body: Array("first".utf8))
            // Long enough that a test process slow to resume does not find this connection
            // closed by the script instead of by the stale read.
            _ = connection.readRequest(timeout: 60)
        }
        let session = session()
        _ = try await session.data(from: server.url("/one"))
        var post = URLRequest(url: server.url("/two"))
        post.httpMethod = "POST"
        post.httpBody = Data("payload".utf8)
        await expectURLError(.networkConnectionLost) { _ = try await session.data(for: post) }
        #expect(server.connectionCount == 1)
    }

    @Test("interim 1xx responses are skipped")
    func interimResponses() async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            connection.write("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n")
            connection.respond(status: 201, reason: "Created", body: Array("done".utf8))
        }
        let (data, response) = try await session().data(from: server.url("/"))
        #expect((response as? HTTPURLResponse)?.statusCode == 201)
        #expect(String(decoding: data, as: UTF8.self) == "done")
    }

    @Test("bytes after a response retire the connection")
    func strayBytes() async throws {
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nforge")
            connection.readToEOF(timeout: 2)
        }
        let session = session()
        let (first, _) = try await session.data(from: server.url("/1"))
        #expect(String(decoding: first, as: UTF8.self) == "ok")
        let (second, _) = try await session.data(from: server.url("/2"))
        #expect(String(decoding: second, as: UTF8.self) == "ok", "the forged bytes were never taken as a response")
        #expect(server.connectionCount == 2)
    }

    @Test("bytes after a response never reach the request waiting for that connection")
    func strayBytesWithWaiter() async throws {
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            guard connection.index == 0 else {
                connection.respond(body: Array("fresh".utf8))
                return
            }
            // Long enough for the second request to queue behind the first.
            Thread.sleep(forTimeInterval: 0.3)
            connection.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nforge")
            connection.readToEOF(timeout: 2)
        }
        let configuration = URLSessionConfiguration.uncached
        configuration.httpMaximumConnectionsPerHost = 1
        let session = URLSession(configuration: configuration)
        async let first = session.data(from: server.url("/1"))
        try await Task.sleep(for: .milliseconds(100))
        let (second, _) = try await session.data(from: server.url("/2"))
        #expect(String(decoding: try await first.0, as: UTF8.self) == "ok")
        #expect(String(decoding: second, as: UTF8.self) == "fresh", "the forged bytes were never taken as a response")
        #expect(server.connectionCount == 2)
    }

    @Test("a request waiting for a busy connection times out after its request timeout")
    func waitingRequestTimesOut() async throws {
        // The server holds /slow until the test has seen /waiting time out, so however late
        // the timer fires, the one connection is still busy when it does.
        let targets = Mutex<[String]>([])
        let release = DispatchSemaphore(value: 0)
        let server = try ScriptedServer { connection in
            guard let request = connection.readRequest() else { return }
            targets.withLock { $0.append(request.target) }
            if request.target == "/slow" { _ = release.wait(timeout: .now() + 60) }
            connection.respond(body: Array("slow".utf8))
        }
        let configuration = URLSessionConfiguration.uncached
        configuration.httpMaximumConnectionsPerHost = 1
        let session = URLSession(configuration: configuration)
        var slow = URLRequest(url: server.url("/slow"))
        slow.timeoutInterval = 60
        async let first = session.data(for: slow)
        let deadline = ContinuousClock.now + .seconds(30)
        while !targets.withLock({ $0.contains("/slow") }) && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        var waiting = URLRequest(url: server.url("/waiting"))
        waiting.timeoutInterval = 0.5
        await expectURLError(.timedOut) { _ = try await session.data(for: waiting) }
        release.signal()
        #expect(String(decoding: try await first.0, as: UTF8.self) == "slow")
        #expect(targets.withLock { $0 } == ["/slow"], "the timed-out request was never sent")
    }

    @Test("a body whose last bytes arrive as the delegate falls behind completes once it catches up")
    func pausedAfterTheLastBytes() async throws {
        // Below the 4 MiB delivery backlog at which reading pauses, then over it with the last
        // bytes, which arrive on their own: the pause falls between the body's end and its
        // end event.
        let first = 4 * 1024 * 1024 - 512
        let last = 1024
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.write("HTTP/1.1 200 OK\r\nContent-Length: \(first + last)\r\n\r\n")
            connection.write([UInt8](repeating: 0x61, count: first))
            Thread.sleep(forTimeInterval: 0.5)
            connection.write([UInt8](repeating: 0x62, count: last))
            _ = connection.readToEOF(timeout: 10)
        }
        let holdFirst = Mutex(true)
        let delegate = RecordingDelegate { _ in
            // The first delivery holds the delegate queue; the rest queues up behind it.
            if holdFirst.withLock({ state in defer { state = false }; return state }) { Thread.sleep(forTimeInterval: 1) }
        }
        let configuration = URLSessionConfiguration.uncached
        // Long: on a loaded machine the held delegate and the server's pause may last seconds,
        // and a timeout is not what this test looks at.
        configuration.timeoutIntervalForRequest = 60
        let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        session.dataTask(with: server.url("/")).resume()
        await delegate.waitForCompletion()
        let record = delegate.record.withLock { ($0.error.map { "\($0)" }, $0.data.count) }
        #expect(record.0 == nil)
        #expect(record.1 == first + last)
    }

    @Test("an HTTP/1.0 close-delimited body is read to the end and the connection is not reused")
    func http10() async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            connection.write("HTTP/1.0 200 OK\r\nContent-Type: text/plain; charset=ISO-8859-1\r\n\r\nuntil the end")
        }
        let session = session()
        for _ in 0..<2 {
            let (data, response) = try await session.data(from: server.url("/"))
            #expect(String(decoding: data, as: UTF8.self) == "until the end")
            #expect(response.mimeType == "text/plain")
            #expect(response.textEncodingName == "iso-8859-1")
            #expect(response.expectedContentLength == -1)
        }
        #expect(server.connectionCount == 2)
    }

    @Test("the request head on the wire: request line, Host first, no reserved caller fields")
    func requestOnTheWire() async throws {
        let captured = Mutex<ScriptedRequest?>(nil)
        let server = try ScriptedServer { connection in
            let request = connection.readRequest()
            captured.withLock { $0 = request }
            connection.respond()
        }
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(server.port)/a%20b/c?q=1&r=%2F#fragment")!)
        request.setValue("keep-alive, Upgrade", forHTTPHeaderField: "Connection")
        request.setValue("chunked", forHTTPHeaderField: "Transfer-Encoding")
        request.setValue("Bearer secret", forHTTPHeaderField: "Authorization")
        _ = try await session().data(for: request)
        let seen = try #require(captured.withLock { $0 })
        #expect(seen.method == "GET")
        #expect(seen.target == "/a%20b/c?q=1&r=%2F")
        #expect(seen.version == "HTTP/1.1")
        #expect(seen.headers.first?.name == "Host")
        #expect(seen.header("Host") == "127.0.0.1:\(server.port)")
        #expect(seen.header("Connection") == nil)
        #expect(seen.header("Transfer-Encoding") == nil)
        #expect(seen.header("Content-Length") == nil, "a GET without body carries no framing field")
        #expect(seen.header("Authorization") == "Bearer secret", "a caller's Authorization is sent as given")
    }

    @Test("localhost is reached through Happy Eyeballs whichever family listens")
    func localhost() async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            connection.respond(body: Array("v4".utf8))
        }
        let (data, _) = try await session().data(from: URL(string: "http://localhost:\(server.port)/")!)
        #expect(String(decoding: data, as: UTF8.self) == "v4")
    }
}
