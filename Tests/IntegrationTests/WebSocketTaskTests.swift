import Courier
import CourierSync
import CourierWebSocket
import Foundation
import Testing
import _CourierTestSupport

/// `URLSessionWebSocketTask` against the `websockets` server (PyPI) on loopback, plain and TLS.
@Suite("WebSocket tasks")
struct WebSocketTaskTests {
    let server: WebSocketEchoServer

    init() throws {
        server = try WebSocketEchoServer.shared()
    }

    /// Records the WebSocket delegate calls and the completion.
    final class Recorder: NSObject, URLSessionWebSocketDelegate, @unchecked Sendable {
        struct Record {
            var opened: [String?] = []
            var closed: [(URLSessionWebSocketTask.CloseCode, Data?)] = []
            var completed: [(any Error)?] = []
            var offQueue = 0
        }
        let record = Mutex(Record())
        var snapshot: Record { record.withLock { $0 } }

        func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask, didOpenWithProtocol protocol: String?) {
            let onQueue = OperationQueue.current === session.delegateQueue
            record.withLock {
                $0.opened.append(`protocol`)
                if !onQueue { $0.offQueue += 1 }
            }
        }

        func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask, didCloseWith closeCode: URLSessionWebSocketTask.CloseCode, reason: Data?) {
            record.withLock { $0.closed.append((closeCode, reason)) }
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            record.withLock { $0.completed.append(error) }
        }
    }

    private func session(_ recorder: Recorder? = nil) -> URLSession {
        URLSession(configuration: .ephemeral, delegate: recorder, delegateQueue: nil)
    }

    /// A resumed task for `path` on a new session whose delegate is a new recorder; `prepare`
    /// runs before `resume()`. The caller invalidates the session.
    private func started(_ path: String, prepare: (URLSessionWebSocketTask) -> Void = { _ in }) -> (URLSession, URLSessionWebSocketTask, Recorder) {
        let recorder = Recorder()
        let session = session(recorder)
        let task = session.webSocketTask(with: server.url(path))
        prepare(task)
        task.resume()
        return (session, task, recorder)
    }

    enum Route: String, CaseIterable, Sendable { case plain, tls, uncompressed }

    @Test("text and binary messages echo back in order: ws: and wss: with permessage-deflate, ws: without", arguments: Route.allCases)
    func echo(_ route: Route) async throws {
        let recorder = Recorder()
        let session = session(recorder)
        defer { session.invalidateAndCancel() }
        let url: URL
        switch route {
        case .plain: url = server.url("/echo")
        case .tls: url = server.tlsURL("/echo")
        case .uncompressed: url = server.uncompressedURL("/echo")
        }
        let task = session.webSocketTask(with: url)
        task.resume()
        try await task.send(.string("hello"))
        let binary = Data(deterministicBytes(count: 300_000, seed: 5))
        try await task.send(.data(binary))
        guard case .string(let text) = try await task.receive() else {
            Issue.record("the first message is not text")
            return
        }
        #expect(text == "hello")
        guard case .data(let data) = try await task.receive() else {
            Issue.record("the second message is not binary")
            return
        }
        #expect(sameBytes(data, binary))
        let response = try #require(task.response as? HTTPURLResponse)
        #expect(response.statusCode == 101)
        let extensions = response.value(forHTTPHeaderField: "Sec-WebSocket-Extensions") ?? ""
        #expect(extensions.hasPrefix("permessage-deflate") == (route != .uncompressed), "\(extensions)")
        #expect(recorder.snapshot.opened.count == 1 && recorder.snapshot.opened.first! == nil)
        #expect(recorder.snapshot.offQueue == 0)
        #expect(task.closeCode == .invalid)
    }

    @Test("completion handlers: send, then receive, on the delegate queue")
    func completionHandlers() async throws {
        let (session, task, _) = started("/echo")
        defer { session.invalidateAndCancel() }
        let sent: (any Error)? = await withCheckedContinuation { continuation in
            task.send(.string("ping me")) { continuation.resume(returning: $0) }
        }
        #expect(sent == nil)
        let result: Result<URLSessionWebSocketTask.Message, any Error> = await withCheckedContinuation { continuation in
            task.receive { continuation.resume(returning: $0) }
        }
        guard case .success(.string(let text)) = result else {
            Issue.record("no text came back: \(result)")
            return
        }
        #expect(text == "ping me")
    }

    @Test("the server's choice among the offered subprotocols reaches the delegate and the response")
    func subprotocols() async throws {
        let recorder = Recorder()
        let session = session(recorder)
        defer { session.invalidateAndCancel() }
        let task = session.webSocketTask(with: server.url("/echo"), protocols: ["superchat", "chat"])
        task.resume()
        try await task.sendPing()
        let chosen = try #require(recorder.snapshot.opened.first ?? nil)
        #expect(["superchat", "chat"].contains(chosen))
        #expect((task.response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Sec-WebSocket-Protocol") == chosen)
    }

    @Test("a ping gets its pong")
    func ping() async throws {
        let (session, task, _) = started("/echo")
        defer { session.invalidateAndCancel() }
        for _ in 0..<3 { try await task.sendPing() }
    }

    @Test("the server's close: didCloseWith its code and reason, receive fails, the task completes")
    func serverCloses() async throws {
        let (session, task, recorder) = started("/close")
        defer { session.invalidateAndCancel() }
        await #expect(throws: URLError.self) { _ = try await task.receive() }
        #expect(await pollUntil { !recorder.snapshot.completed.isEmpty })
        let record = recorder.snapshot
        #expect(record.closed.count == 1)
        #expect(record.closed.first?.0 == .goingAway)
        #expect(record.closed.first?.1 == Data("going now".utf8))
        #expect(task.closeCode == .goingAway)
        #expect(task.closeReason == Data("going now".utf8))
        #expect(record.completed.count == 1 && record.completed.first! == nil)
        #expect(task.state == .completed)
        await #expect(throws: URLError.self) { try await task.send(.string("late")) }
    }

    @Test("cancel(with:reason:) closes with a handshake: the server echoes the code, the task completes")
    func clientCloses() async throws {
        let (session, task, recorder) = started("/echo")
        defer { session.invalidateAndCancel() }
        try await task.sendPing()
        task.cancel(with: .normalClosure, reason: Data("done".utf8))
        #expect(await pollUntil { !recorder.snapshot.completed.isEmpty })
        #expect(task.closeCode == .normalClosure)
        #expect(recorder.snapshot.completed.first! == nil)
    }

    @Test("cancel() ends the task with .cancelled")
    func cancel() async throws {
        let (session, task, recorder) = started("/echo")
        defer { session.invalidateAndCancel() }
        try await task.sendPing()
        task.cancel()
        #expect(await pollUntil { !recorder.snapshot.completed.isEmpty })
        #expect((recorder.snapshot.completed.first! as? URLError)?.code == .cancelled)
        await #expect(throws: URLError.self) { _ = try await task.receive() }
    }

    @Test("a message over maximumMessageSize closes the connection with 1009 and fails the task")
    func messageTooBig() async throws {
        let (session, task, recorder) = started("/echo") { $0.maximumMessageSize = 1000 }
        defer { session.invalidateAndCancel() }
        try await task.send(.data(Data(count: 2000)))
        await #expect(throws: URLError.self) { _ = try await task.receive() }
        #expect(task.closeCode == .messageTooBig)
        #expect(await pollUntil { !recorder.snapshot.completed.isEmpty })
        #expect(recorder.snapshot.completed.first! != nil)
    }

    @Test("messages that nobody receives yet wait, in order, and all arrive")
    func backlog() async throws {
        let (session, task, _) = started("/burst")
        defer { session.invalidateAndCancel() }
        // Nothing is received for a moment: the messages pile up, and reading stops at 64.
        try await Task.sleep(for: .milliseconds(300))
        for index in 0..<200 {
            guard case .string(let text) = try await task.receive() else {
                Issue.record("message \(index) is not text")
                return
            }
            #expect(text == "message \(index)")
        }
    }

    @Test("a server that does not switch, or breaks the protocol, fails the task with .badServerResponse")
    func failures() async throws {
        let nginx = try NginxServer.shared()
        let session = session()
        defer { session.invalidateAndCancel() }
        let refused = session.webSocketTask(with: URL(string: "ws://127.0.0.1:\(nginx.port)/echo")!)
        refused.resume()
        do {
            _ = try await refused.receive()
            Issue.record("a receive on a refused handshake succeeded")
        } catch {
            #expect((error as? URLError)?.code == .badServerResponse)
        }
        #expect((refused.response as? HTTPURLResponse)?.statusCode == 200)

        let broken = session.webSocketTask(with: server.url("/garbage"))
        broken.resume()
        do {
            _ = try await broken.receive()
            Issue.record("a masked frame from the server was accepted")
        } catch {
            #expect((error as? URLError)?.code == .badServerResponse)
        }
        #expect(broken.closeCode == .protocolError)

        let wrongScheme = session.webSocketTask(with: URL(string: "ftp://127.0.0.1/")!)
        wrongScheme.resume()
        await #expect(throws: URLError.self) { _ = try await wrongScheme.receive() }
        #expect((wrongScheme.error as? URLError)?.code == .unsupportedURL)
    }

    @Test("courier --ws sends each input line and prints what comes back, then closes cleanly")
    func commandLine() async throws {
        let run = try #require(try await runCourier(["--ws", server.url("/echo").absoluteString, "-v"], input: Data("hello\nsecond line\n".utf8)))
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "hello\nsecond line\n")
        #expect(run.stderr.contains("* WebSocket open"))
        let secure = try #require(try await runCourier(["--ws", server.tlsURL("/echo").absoluteString, "--cacert", TestCertificates.make().caPEM], input: Data("over tls\n".utf8)))
        #expect(secure.status == 0, "\(secure.stderr)")
        #expect(secure.stdout == "over tls\n")
        let refused = try #require(try await runCourier(["--ws", "ws://127.0.0.1:1/"], input: Data()))
        #expect(refused.status == 1)
        #expect(refused.stderr.hasPrefix("courier: "))
    }

    @Test("the handshake carries the session's cookies for the origin, and a cookie the 101 sets is kept")
    func cookies() async throws {
        let seen = Mutex<[String]>([])
        let scripted = try ScriptedServer { connection in
            guard let request = connection.readRequest(), let key = request.header("Sec-WebSocket-Key") else { return }
            seen.withLock { $0.append(request.header("Cookie") ?? "") }
            connection.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + "Sec-WebSocket-Accept: \(WebSocketHandshake.accept(forKey: key))\r\nSet-Cookie: socket=\(seen.withLock { $0.count }); Path=/\r\n\r\n")
            // A close frame, 1000, unmasked as a server sends it; then the end.
            connection.write([0x88, 0x02, 0x03, 0xE8])
            connection.readToEOF(timeout: 5)
        }
        defer { scripted.stop() }
        let configuration = URLSessionConfiguration.ephemeral
        let storage = try #require(configuration.httpCookieStorage)
        storage.setCookie(try #require(HTTPCookie(properties: [.name: "given", .value: "1", .domain: "127.0.0.1", .path: "/"])))
        let session = URLSession(configuration: configuration)
        defer { session.invalidateAndCancel() }
        for _ in 0..<2 {
            let task = session.webSocketTask(with: URL(string: "ws://127.0.0.1:\(scripted.port)/chat")!)
            task.resume()
            await #expect(throws: URLError.self) { _ = try await task.receive() }
            #expect(task.closeCode == .normalClosure)
        }
        let cookies = seen.withLock { $0 }
        #expect(cookies.count == 2)
        #expect(cookies.first == "given=1")
        #expect(cookies.last?.contains("socket=1") == true && cookies.last?.contains("given=1") == true)
    }

    enum ProxyKind: String, CaseIterable, Sendable { case squid, socks }

    @Test("ws: and wss: through the session's proxy: an HTTP proxy by a CONNECT tunnel (never forwarded), SOCKS5", arguments: ProxyKind.allCases)
    func throughProxy(_ kind: ProxyKind) async throws {
        let squid = try SquidServer.shared()
        let socks = try SOCKSProxyServer.shared()
        let dictionary: [AnyHashable: Any] = kind == .squid
            ? TestProxies.http(squid.openPort)
            : TestProxies.socks(socks.openPort)
        let session = URLSession(configuration: .proxied(dictionary), delegate: nil, delegateQueue: nil)
        defer { session.invalidateAndCancel() }
        for url in [server.url("/echo"), server.tlsURL("/echo")] {
            let task = session.webSocketTask(with: url)
            task.resume()
            try await task.send(.string("via \(kind)"))
            guard case .string(let echoed) = try await task.receive() else {
                Issue.record("a text message was expected")
                return
            }
            #expect(echoed == "via \(kind)")
            task.cancel(with: .normalClosure, reason: nil)
            let port = url.port!
            switch kind {
            case .squid:
                let tunnel = squid.waitForAccessEntry(timeout: 10) { $0.method == "CONNECT" && $0.url == "127.0.0.1:\(port)" }
                #expect(tunnel?.status == 200, "squid's log: \(squid.accessLog())")
            case .socks:
                #expect(socks.destinations().contains { $0.contains(":\(port)") }, "\(socks.destinations())")
            }
        }
        // Never forwarded: squid saw no GET for the WebSocket server.
        #expect(!squid.accessEntries().contains { $0.method == "GET" && $0.url.contains(":\(server.port)/") })
    }

    /// Answers 401 challenges from a list, one credential (or disposition) per challenge, and
    /// records what each challenge said.
    final class ChallengeAnswerer: NSObject, URLSessionWebSocketDelegate, @unchecked Sendable {
        let answers: Mutex<[(URLSession.AuthChallengeDisposition, URLCredential?)]>
        let seen = Mutex<[(realm: String?, failures: Int, proposedUser: String?, onTask: Bool)]>([])

        init(_ answers: [(URLSession.AuthChallengeDisposition, URLCredential?)]) {
            self.answers = Mutex(answers)
        }

        func urlSession(
            _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
            completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
        ) {
            guard challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodHTTPBasic else {
                completionHandler(.performDefaultHandling, nil)
                return
            }
            seen.withLock {
                $0.append((challenge.protectionSpace.realm, challenge.previousFailureCount, challenge.proposedCredential?.user, task is URLSessionWebSocketTask))
            }
            let answer = answers.withLock { $0.isEmpty ? (.cancelAuthenticationChallenge, nil) : $0.removeFirst() }
            completionHandler(answer.0, answer.1)
        }
    }

    private func echo(_ task: URLSessionWebSocketTask, _ text: String) async throws -> String? {
        try await task.send(.string(text))
        guard case .string(let echoed) = try await task.receive() else { return nil }
        return echoed
    }

    @Test("a 401 to the handshake goes to the task's delegate; a wrong password is asked about again; the right one opens and is kept for the session")
    func handshakeAuthentication() async throws {
        let storage = URLCredentialStorage()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCredentialStorage = storage
        let answerer = ChallengeAnswerer([
            (.useCredential, URLCredential(user: WebSocketEchoServer.user, password: "wrong", persistence: .none)),
            (.useCredential, URLCredential(user: WebSocketEchoServer.user, password: WebSocketEchoServer.password, persistence: .forSession)),
        ])
        let session = URLSession(configuration: configuration, delegate: answerer, delegateQueue: nil)
        defer { session.invalidateAndCancel() }
        let task = session.webSocketTask(with: server.url("/auth"))
        task.resume()
        #expect(try await echo(task, "let me in") == "let me in")
        let seen = answerer.seen.withLock { $0 }
        #expect(seen.map(\.realm) == ["ws echo", "ws echo"])
        #expect(seen.map(\.failures) == [0, 1])
        #expect(seen.map(\.proposedUser) == [nil, WebSocketEchoServer.user])
        #expect(seen.allSatisfy { $0.onTask })
        task.cancel(with: .normalClosure, reason: nil)

        // Kept for the session: default handling finds it in the storage.
        let space = URLProtectionSpace(host: "127.0.0.1", port: server.port, protocol: "http", realm: "ws echo", authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
        #expect(storage.defaultCredential(for: space)?.password == WebSocketEchoServer.password)
        let plain = URLSession(configuration: configuration)
        defer { plain.invalidateAndCancel() }
        let again = plain.webSocketTask(with: server.url("/auth"))
        again.resume()
        #expect(try await echo(again, "again") == "again")
        again.cancel(with: .normalClosure, reason: nil)
    }

    @Test("the URL's user and password answer by default (and are kept for the session); with none, or a cancelled challenge, the handshake fails")
    func handshakeAuthenticationDefaults() async throws {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        var components = URLComponents(url: server.url("/auth"), resolvingAgainstBaseURL: false)!
        components.user = WebSocketEchoServer.user
        components.password = WebSocketEchoServer.password
        let withUser = session.webSocketTask(with: components.url!)
        withUser.resume()
        #expect(try await echo(withUser, "from the URL") == "from the URL")
        withUser.cancel(with: .normalClosure, reason: nil)

        // A new session: the first kept the URL's credential in its storage.
        let fresh = URLSession(configuration: .ephemeral)
        defer { fresh.invalidateAndCancel() }
        let without = fresh.webSocketTask(with: server.url("/auth"))
        without.resume()
        await #expect(throws: URLError.self) { _ = try await echo(without, "no") }
        #expect((without.response as? HTTPURLResponse)?.statusCode == 401)

        let cancelling = ChallengeAnswerer([(.cancelAuthenticationChallenge, nil)])
        let asking = URLSession(configuration: .ephemeral, delegate: cancelling, delegateQueue: nil)
        defer { asking.invalidateAndCancel() }
        let cancelled = asking.webSocketTask(with: server.url("/auth"))
        cancelled.resume()
        // The send fails with the task's error when it waits for the handshake, or as not
        // connected when the handshake already ended: the task's own error is what counts.
        await #expect(throws: URLError.self) { _ = try await echo(cancelled, "no") }
        #expect(await pollUntil { cancelled.state == .completed })
        #expect((cancelled.error as? URLError)?.code == .cancelled)
    }

    /// Records server-trust challenges and leaves them to default handling.
    final class TrustRecorder: NSObject, URLSessionWebSocketDelegate, @unchecked Sendable {
        let seen = Mutex<[String]>([])

        func urlSession(
            _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
            completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
        ) {
            if challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodServerTrust {
                seen.withLock { $0.append("\(task is URLSessionWebSocketTask) \(challenge.protectionSpace.host)") }
            }
            completionHandler(.performDefaultHandling, nil)
        }
    }

    @Test("wss: the server-trust challenge is raised on the WebSocket task, for its delegate")
    func trustChallengeOnTask() async throws {
        let recorder = TrustRecorder()
        let session = URLSession(configuration: .ephemeral, delegate: recorder, delegateQueue: nil)
        defer { session.invalidateAndCancel() }
        let task = session.webSocketTask(with: server.tlsURL("/echo"))
        task.resume()
        try await task.send(.string("trust"))
        _ = try await task.receive()
        #expect(recorder.seen.withLock { $0 } == ["true 127.0.0.1"])
        task.cancel(with: .normalClosure, reason: nil)
    }
}
