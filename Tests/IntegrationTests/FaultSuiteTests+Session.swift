import Courier
import CourierPolicies
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// A fault suite of the session layer: peers that abuse redirects and cookies, each with an
/// exact outcome, bounded work, and nothing leaked (``expectNoLeaks(_:_:log:closes:sourceLocation:)``).
///
/// Covered elsewhere, not repeated: the hop limit and a same-origin loop
/// (RedirectTests.hopLimit, .loop), a refused redirect's 3xx as the result (RedirectTests.refuse),
/// a delegate that keeps answering 401s with a wrong password (AuthenticationTests.attemptLimit),
/// a decompression bomb (ContentDecodingTests.bombStopped), damaged resume data
/// (ResumeDataTests.damaged), damaged cache body files (URLCacheStoreTests.damagedBodyFiles), a
/// damaged cookie database (CookieDatabaseTests.corruptFile).
@Suite("Session fault suite: redirect and cookie abuse, bounded, nothing leaked", .timeLimit(.minutes(1)))
struct FaultSuiteSessionTests {
    /// FaultSuiteTests' session: ephemeral (a cookie jar of its own in memory), no cache.
    func session(timeout: TimeInterval = 5) -> URLSession {
        FaultSuiteTests().session(timeout: timeout)
    }

    // MARK: Redirects

    @Test("two origins that redirect to each other: httpTooManyRedirects after 16 followed hops, 9 requests to one and 8 to the other")
    func redirectLoopAcrossOrigins() async throws {
        let secondPort = LatePort()
        let first = try AnsweringServer { request, _ in .redirect(302, to: "http://127.0.0.1:\(secondPort.value)\(request.target)") }
        let firstPort = first.port
        let second = try AnsweringServer { request, _ in .redirect(302, to: "http://127.0.0.1:\(firstPort)\(request.target)") }
        secondPort.set(second.port)
        let session = session()
        await expectURLError(.httpTooManyRedirects) { _ = try await session.data(from: first.url("/loop")) }
        // The first request and 16 followed redirects (RedirectPolicy's limit, as Apple's):
        // 17 requests, the odd ones to the first origin; the 17th redirect is not followed.
        #expect(first.requests.count == 9)
        #expect(second.requests.count == 8)
        #expect((first.requests + second.requests).allSatisfy { $0.target == "/loop" })
        await expectNoLeaks(session, first.server)
        let closed = await pollUntil(timeout: .seconds(30)) { openClientSockets(toPort: second.port) == 0 }
        #expect(closed, "a socket to the second origin is still open after invalidateAndCancel")
    }

    @Test("a redirect to another origin that the delegate refuses: the 302 is the result, and no connection is made to the target")
    func refusedCrossOriginRedirect() async throws {
        let target = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.respond(body: Array("followed".utf8))
        }
        let targetURL = target.url("/elsewhere")
        let origin = try AnsweringServer { _, _ in .redirect(302, to: targetURL.absoluteString) }
        let recorder = RedirectRecorder { _, _ in nil }
        let session = session()
        let (data, response) = try await session.data(for: URLRequest(url: origin.url("/start")), delegate: recorder)
        #expect((response as? HTTPURLResponse)?.statusCode == 302)
        #expect(String(decoding: data, as: UTF8.self) == "redirect 302\n", "the redirect's own body")
        #expect(recorder.snapshot.hops.map { $0.proposedURL?.absoluteString } == [targetURL.absoluteString])
        #expect(origin.requests.count == 1)
        // Nothing is dialed before the delegate decides, and nothing after it refuses.
        #expect(target.connectionCount == 0, "a connection was made to the refused target")
        await expectNoLeaks(session, origin.server)
    }

    // MARK: Cookie floods

    @Test("5,000 Set-Cookie fields in one head: past the parser's 1,000 fields, badServerResponse, and not one cookie stored")
    func setCookieFloodPastFieldLimit() async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            let fields = (0..<5000).map { "Set-Cookie: c\($0)=v; Path=/\r\n" }.joined()
            connection.write("HTTP/1.1 200 OK\r\n\(fields)Content-Length: 2\r\n\r\nok")
            log.awaitClientClose(connection)
        }
        let session = session()
        let storage = try #require(session.configuration.httpCookieStorage)
        // HTTP1ResponseParser refuses the head at field 1,001 (tooManyHeaderFields): no head
        // reaches the session, so no Set-Cookie field is read.
        await expectURLError(.badServerResponse) { _ = try await session.data(from: server.url("/cookies")) }
        #expect(storage.cookies == nil, "\(storage.cookies?.count ?? 0) cookie(s) stored from a refused head")
        await expectNoLeaks(session, server, log: log, closes: 1)
    }

    @Test("999 Set-Cookie fields in one head (with Content-Length, the parser's limit): the response completes, the jar keeps its per-domain limit, the last cookie among them")
    func setCookieFloodAtFieldLimit() async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            let fields = (0..<999).map { "Set-Cookie: c\($0)=v; Path=/\r\n" }.joined()
            connection.write("HTTP/1.1 200 OK\r\n\(fields)Content-Length: 2\r\n\r\nok")
            log.awaitClientClose(connection)
        }
        let session = session()
        let storage = try #require(session.configuration.httpCookieStorage)
        let (data, response) = try await session.data(from: server.url("/cookies"))
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(String(decoding: data, as: UTF8.self) == "ok")
        // CookieJar.Limits: 180 per domain (3,000 in all). The fields are stored in order with
        // one `now`, so past the limit the evicted ones are any but the cookie just stored.
        let perDomain = CookieJar.Limits().perDomain
        #expect(perDomain < 999)
        let kept = storage.cookies ?? []
        #expect(kept.count == perDomain)
        #expect(Set(kept.map(\.domain)) == ["127.0.0.1"])
        #expect(kept.contains { $0.name == "c998" }, "the cookie stored last was evicted")
        #expect(storage.cookies(for: server.url("/"))?.count == perDomain)
        await expectNoLeaks(session, server, log: log, closes: 1)
    }

    @Test("250 responses each setting a new cookie: each request carries the newest ones up to the per-domain limit, and the jar ends with the last 180")
    func setCookieAcrossResponses() async throws {
        let server = try AnsweringServer { request, _ in
            let index = request.target.split(separator: "/").last.map(String.init) ?? "?"
            return AnsweringServer.Answer(headers: [("Set-Cookie", "n\(index)=v; Path=/")], body: Array("ok".utf8))
        }
        let session = session()
        let storage = try #require(session.configuration.httpCookieStorage)
        // Past the limit by 70, so eviction runs 70 times; more only made the test slow (a
        // minute and more under AddressSanitizer), not stricter.
        let total = 250
        #expect(total > CookieJar.Limits().perDomain)
        let bodies = await SequentialLoads.run(session, (0..<total).map { server.url("/set/\($0)") })
        #expect(bodies == Array(repeating: "ok", count: total))
        // Each response stores with its own `now`, and a lookup within a minute leaves
        // lastAccess as it was (CookieJar.lastAccessResolution): past the limit the least
        // recently used is the oldest, so request i carries cookies max(0, i - 180) ..< i.
        let perDomain = CookieJar.Limits().perDomain
        let requests = server.requests
        try #require(requests.count == total)
        var mismatches: [Int] = []
        for (index, request) in requests.enumerated() {
            let sent = (request.header("Cookie") ?? "").split(separator: ";").compactMap { pair in
                pair.split(separator: "=").first.map { $0.trimmingCharacters(in: .whitespaces) }
            }
            let expected = (max(0, index - perDomain)..<index).map { "n\($0)" }
            if Set(sent) != Set(expected) || sent.count != expected.count { mismatches.append(index) }
        }
        #expect(mismatches.isEmpty, "requests carrying other cookies than the newest \(perDomain): \(mismatches.prefix(10))…")
        #expect(Set((storage.cookies ?? []).map(\.name)) == Set((total - perDomain..<total).map { "n\($0)" }))
        await expectNoLeaks(session, server.server)
    }
}

/// Loads URLs one after another, each started from the completion handler of the one before
/// (on the session's delegate queue), and returns each body as text or the error it failed
/// with. When each of the cookie flood's 250 loads awaited `data(from:)`, the flood took 53 s
/// in the whole suite and 150 s under ThreadSanitizer (0.5 s alone): each resumption waits for
/// a turn on the cooperative pool (two threads here), which the suite's tests that block a
/// thread while a program runs share. A flood that slow also outlives
/// `CookieJar.lastAccessResolution`, which the test relies on.
private final class SequentialLoads: @unchecked Sendable {
    private let session: URLSession
    private let urls: [URL]
    /// Touched by one completion handler at a time: each load starts from the one before.
    private var bodies: [String] = []
    private let continuation: CheckedContinuation<[String], Never>

    private init(_ session: URLSession, _ urls: [URL], _ continuation: CheckedContinuation<[String], Never>) {
        self.session = session
        self.urls = urls
        self.continuation = continuation
    }

    static func run(_ session: URLSession, _ urls: [URL]) async -> [String] {
        await withCheckedContinuation { continuation in
            SequentialLoads(session, urls, continuation).load(0)
        }
    }

    private func load(_ index: Int) {
        guard index < urls.count else {
            continuation.resume(returning: bodies)
            return
        }
        session.dataTask(with: urls[index]) { data, _, error in
            self.bodies.append(error.map { "error: \($0)" } ?? String(decoding: data ?? Data(), as: UTF8.self))
            self.load(index + 1)
        }.resume()
    }
}

/// A port known only after a closure that names it was made: two servers that redirect to
/// each other.
private final class LatePort: Sendable {
    private let port = Mutex(0)

    var value: Int { port.withLock { $0 } }

    func set(_ value: Int) { port.withLock { $0 = value } }
}
