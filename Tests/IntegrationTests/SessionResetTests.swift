import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// A task handed from the thread that made it to the test.
final class TaskBox: Sendable {
    let task = Mutex<URLSessionDataTask?>(nil)
}

/// `URLSession.flush(completionHandler:)` and `reset(completionHandler:)` against nginx, and a
/// scripted server that holds a response until the test lets it go: what each empties, and that
/// later requests (and those waiting for a connection) get new connections.
@Suite("Session flush and reset")
struct SessionResetTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    /// An ephemeral session of its own stores, with a recorder for challenges and metrics.
    func makeSession(_ recorder: ProxyTaskRecorder, maximumConnections: Int = 6) -> (URLSession, URLSessionConfiguration) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpMaximumConnectionsPerHost = maximumConnections
        configuration.httpCookieAcceptPolicy = .always
        return (URLSession(configuration: configuration, delegate: recorder, delegateQueue: nil), configuration)
    }

    /// A request that never reads the cache: nginx's files are heuristically fresh, and these
    /// tests look at connections.
    func network(_ url: URL) -> URLRequest {
        URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData)
    }

    /// Runs `body` on the session and waits for its completion handler; returns whether the
    /// handler ran on the session's delegate queue.
    func wait(_ session: URLSession, _ body: (URLSession, @escaping @Sendable () -> Void) -> Void) async -> Bool {
        await withCheckedContinuation { continuation in
            let queue = session.delegateQueue
            body(session) {
                continuation.resume(returning: OperationQueue.current === queue)
            }
        }
    }

    @Test("reset empties the cookies, the cache and the credentials, and the next request takes a new connection")
    func resetEmptiesTheStores() async throws {
        let recorder = ProxyTaskRecorder()
        let (session, configuration) = makeSession(recorder)
        defer { session.finishTasksAndInvalidate() }
        let cookies = try #require(configuration.httpCookieStorage)
        let cache = try #require(configuration.urlCache)
        let credentials = try #require(configuration.urlCredentialStorage)

        let setCookie = await loadRecorded(session, recorder, URLRequest(url: nginx.url("/cookie/set")))
        #expect(setCookie.response?.statusCode == 204)
        #expect(!(cookies.cookies ?? []).isEmpty)
        let cacheURL = nginx.url("/cache/max-age/hello.txt")
        let cached = await loadRecorded(session, recorder, URLRequest(url: cacheURL))
        #expect(cached.body.map(Array.init) == NginxServer.fixtures["hello.txt"])
        #expect(cache.cachedResponse(for: URLRequest(url: cacheURL)) != nil)
        let space = URLProtectionSpace(host: "127.0.0.1", port: nginx.port, protocol: NSURLProtectionSpaceHTTP, realm: "Courier nginx", authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
        credentials.set(URLCredential(user: "courier", password: "open sesame", persistence: .forSession), for: space)
        #expect(!credentials.allCredentials.isEmpty)
        // The connection is kept alive before the reset.
        let before = await loadRecorded(session, recorder, network(nginx.url("/files/hello.txt")))
        #expect(before.transactions.last?.isReusedConnection == true)

        let onQueue = await wait(session) { $0.reset(completionHandler: $1) }
        #expect(onQueue)
        #expect((cookies.cookies ?? []).isEmpty)
        #expect(cache.cachedResponse(for: URLRequest(url: cacheURL)) == nil)
        #expect(credentials.allCredentials.isEmpty)
        let after = await loadRecorded(session, recorder, network(nginx.url("/files/hello.txt")))
        #expect(after.body.map(Array.init) == NginxServer.fixtures["hello.txt"])
        #expect(after.transactions.last?.isReusedConnection == false)
    }

    @Test("reset forgets the credential the session sent unasked: the server asks again")
    func resetForgetsRememberedCredentials() async throws {
        let user = NginxServer.basicUsers[0]
        let recorder = ProxyTaskRecorder { _ in (.useCredential, URLCredential(user: user.user, password: user.password, persistence: .forSession)) }
        let (session, _) = makeSession(recorder)
        defer { session.finishTasksAndInvalidate() }
        let url = nginx.url("/basic/hello.txt")
        let first = await loadRecorded(session, recorder, URLRequest(url: url))
        #expect(first.response?.statusCode == 200)
        #expect(recorder.challenges.count == 1)
        let second = await loadRecorded(session, recorder, URLRequest(url: url))
        #expect(second.response?.statusCode == 200)
        #expect(recorder.challenges.count == 1, "the remembered credential goes unasked")

        _ = await wait(session) { $0.reset(completionHandler: $1) }
        let third = await loadRecorded(session, recorder, URLRequest(url: url))
        #expect(third.response?.statusCode == 200)
        #expect(recorder.challenges.count == 2, "after the reset the server asks again")
    }

    @Test("flush keeps the stores, runs its handler on the delegate queue, and the next request takes a new connection")
    func flushRetiresConnections() async throws {
        let recorder = ProxyTaskRecorder()
        let (session, configuration) = makeSession(recorder)
        defer { session.finishTasksAndInvalidate() }
        let cookies = try #require(configuration.httpCookieStorage)
        _ = await loadRecorded(session, recorder, URLRequest(url: nginx.url("/cookie/set")))
        let kept = await loadRecorded(session, recorder, network(nginx.url("/files/hello.txt")))
        #expect(kept.transactions.last?.isReusedConnection == true)

        let onQueue = await wait(session) { $0.flush(completionHandler: $1) }
        #expect(onQueue)
        #expect(!(cookies.cookies ?? []).isEmpty, "flush keeps the cookies")
        let after = await loadRecorded(session, recorder, network(nginx.url("/files/hello.txt")))
        #expect(after.body.map(Array.init) == NginxServer.fixtures["hello.txt"])
        #expect(after.transactions.last?.isReusedConnection == false)
        let again = await loadRecorded(session, recorder, network(nginx.url("/files/hello.txt")))
        #expect(again.transactions.last?.isReusedConnection == true, "the new connection is kept in turn")
    }

    @Test("a flush while a request waits for a connection: the busy exchange finishes, the waiting one goes on a new connection")
    func flushWithWaitingRequest() async throws {
        // The slow response is held by the server until the flush has run: however late the
        // test's own steps run on a loaded machine, the one connection is busy at the flush.
        let release = DispatchSemaphore(value: 0)
        let carried = Mutex<[Int: [String]]>([:])
        let body = (0..<256 * 1024).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let server = try ScriptedServer { connection in
            while let request = connection.readRequest(timeout: 60) {
                carried.withLock { $0[connection.index, default: []].append(request.target) }
                if request.target == "/slow" {
                    connection.write("HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\n\r\n")
                    connection.write(Array(body[..<1024]))
                    _ = release.wait(timeout: .now() + 120)
                    connection.write(Array(body[1024...]))
                } else {
                    connection.respond(body: Array("hello".utf8))
                }
            }
        }
        defer { server.stop() }
        let recorder = ProxyTaskRecorder()
        let (session, _) = makeSession(recorder, maximumConnections: 1)
        defer { session.finishTasksAndInvalidate() }
        let slowTask = TaskBox()
        async let slow = loadRecorded(session, recorder, network(server.url("/slow")), started: { task in slowTask.task.withLock { $0 = task } })
        // Generous: under a sanitizer and the whole suite's load the first bytes can take long.
        #expect(await pollUntil(timeout: .seconds(90)) { (slowTask.task.withLock { $0 }?.countOfBytesReceived ?? 0) > 0 })
        async let waiting = loadRecorded(session, recorder, network(server.url("/waiting")))
        // Time for the second request to queue behind the busy connection. Were it later, it
        // would reach the new pool after the flush: the same outcome, a new connection.
        try await Task.sleep(for: .milliseconds(300))
        _ = await wait(session) { $0.flush(completionHandler: $1) }
        release.signal()
        let (slowLoad, waitingLoad) = await (slow, waiting)
        #expect(slowLoad.error == nil, "\(String(describing: slowLoad.error))")
        #expect(slowLoad.body.map { sameBytes(Array($0), body) } == true)
        #expect(waitingLoad.error == nil, "\(String(describing: waitingLoad.error))")
        #expect(waitingLoad.body.map(Array.init) == Array("hello".utf8))
        // The retired connection carried the slow request only; the waiting one had a new one.
        #expect(carried.withLock { $0 } == [0: ["/slow"], 1: ["/waiting"]])
        let slowPort = slowLoad.transactions.last?.localPort
        let waitingPort = waitingLoad.transactions.last?.localPort
        #expect(slowPort != nil && waitingPort != nil && slowPort != waitingPort)
        #expect(waitingLoad.transactions.last?.isReusedConnection == false)
    }
}

/// Declarations added for parity with FoundationNetworking, checked for what they mean.
@Suite("Parity declarations")
struct ParityDeclarationTests {
    @Test("NSURLSessionTransferSizeUnknown is what a task expects of a chunked body, and a known length is not")
    func transferSizeUnknown() async throws {
        let nginx = try NginxServer.shared()
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        for (path, expected) in [("/chunked/64k.bin", NSURLSessionTransferSizeUnknown), ("/files/64k.bin", Int64(64 * 1024))] {
            let holder = Mutex<URLSessionDataTask?>(nil)
            let (count, expectedLength) = await withCheckedContinuation { (continuation: CheckedContinuation<(Int, Int64), Never>) in
                let task = session.dataTask(with: nginx.url(path)) { data, _, _ in
                    continuation.resume(returning: (data?.count ?? -1, holder.withLock { $0 }?.countOfBytesExpectedToReceive ?? -2))
                }
                holder.withLock { $0 = task }
                task.resume()
            }
            #expect(count == 64 * 1024, "\(path)")
            #expect(expectedLength == expected, "\(path)")
        }
    }

    @Test("the authentication-method names have Apple's values")
    func authenticationMethodNames() {
        #expect(NSURLAuthenticationMethodNTLM == "NSURLAuthenticationMethodNTLM")
        #expect(NSURLAuthenticationMethodHTMLForm == "NSURLAuthenticationMethodHTMLForm")
        #expect(NSURLAuthenticationMethodNegotiate == "NSURLAuthenticationMethodNegotiate")
    }
}
