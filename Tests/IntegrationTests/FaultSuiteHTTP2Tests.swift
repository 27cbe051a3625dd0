import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// HTTP/2 faults from a peer that breaks the protocol on request (``H2FaultServer``, h2c with
/// prior knowledge). Each fault must end its task with the URLError its mapping gives (or
/// succeed, where the fault is harmless) well within the timeout: no crash, no hang, no header
/// list or flood buffered without bound. Then the session must still work: after
/// `reset`, `/ok` on a new connection succeeds, no task is left behind, and the session
/// invalidates clean.
///
/// How the errors arise (`URLError+Transport.swift`, `HTTP2Connection`, `HTTP2ClientSession`):
/// - a connection-level violation (nghttp2 answers with GOAWAY, or `nghttp2_session_mem_recv`
///   fails outright, as for a flood) is `TransportError.remoteProtocol` → `.badServerResponse`;
/// - a stream-level violation nghttp2 resets (or the header list limit) is
///   `HTTP2StreamError.protocolError`/`.headerListTooLarge` → `.remoteProtocol` →
///   `.badServerResponse`;
/// - a stream the server resets (RST_STREAM) is `.reset` → `TransportError.connectionLost` →
///   `.networkConnectionLost`, and so is a connection that ends before the response does.
///
/// Serialized: the floods are CPU-heavy for a small machine, and each test reads the server's
/// log for its own requests (tagged with a query).
@Suite("HTTP/2 fault suite", .serialized, .timeLimit(.minutes(1)))
struct FaultSuiteHTTP2Tests {
    let server: H2FaultServer

    /// The idle timeout of every session here: a fault the client failed to act on would end
    /// as `.timedOut` after this, not with the expected code. Long, so a loaded machine never
    /// times out the loads the server does answer.
    static let requestTimeout: TimeInterval = 30
    /// No fault load may take longer. Below `requestTimeout`, so a load within it ended on the
    /// fault, not the timeout; still generous, for a loaded machine.
    static let hangLimit = Duration.seconds(25)
    static let hello = Data("hello\n".utf8)

    init() throws {
        server = try H2FaultServer.shared()
    }

    func makeSession() -> URLSession {
        let configuration = URLSessionConfiguration.uncached
        configuration.http2PriorKnowledge = true
        configuration.timeoutIntervalForRequest = Self.requestTimeout
        configuration.timeoutIntervalForResource = 30
        return URLSession(configuration: configuration)
    }

    /// A fresh tag for one test's requests (`?t=<tag>`), to find them in the server's log.
    func makeTag() -> String {
        String(UUID().uuidString.prefix(8)).lowercased()
    }

    // MARK: Checks

    /// Loads `path` and expects it to fail with a URLError: `code`, or any code when nil (an
    /// outcome not pinned down). Either way it must fail within ``hangLimit``.
    func expectFault(
        _ session: URLSession, _ path: String, _ code: URLError.Code?, sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        let start = ContinuousClock.now
        // Timed in the completion handler, not when this task resumes: a busy test process can
        // keep an awaiting task waiting for a thread for seconds.
        let (data, response, error, took) = await withCheckedContinuation { (continuation: CheckedContinuation<(Data?, URLResponse?, (any Error)?, Duration), Never>) in
            session.dataTask(with: server.url(path)) { data, response, error in
                continuation.resume(returning: (data, response, error, ContinuousClock.now - start))
            }.resume()
        }
        if let error = error as? URLError {
            if let code {
                #expect(error.code == code, "\(path): \(error.localizedDescription)", sourceLocation: sourceLocation)
            }
            #expect(error.failingURL != nil, sourceLocation: sourceLocation)
        } else if let error {
            Issue.record("expected a URLError for \(path), got \(error)", sourceLocation: sourceLocation)
        } else {
            let status = (response as? HTTPURLResponse)?.statusCode ?? 0
            Issue.record("expected a URLError for \(path), got \(status) with \(data?.count ?? 0) bytes", sourceLocation: sourceLocation)
        }
        #expect(took < Self.hangLimit, "\(path) took \(took)", sourceLocation: sourceLocation)
    }

    /// The connections that carried requests for `path`, as the server logged them; expects at
    /// least one (the request reached the server).
    func connections(for path: String, sourceLocation: SourceLocation = #_sourceLocation) -> [Int] {
        let connections = server.requests(pathContaining: path).map(\.connection)
        #expect(!connections.isEmpty, "the server never saw \(path)", sourceLocation: sourceLocation)
        return connections
    }

    /// Waits (up to 10 s) for the server to log a request for `path`, and returns the first.
    func firstRequest(for path: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> H2FaultServer.LoggedRequest {
        _ = await pollUntil(timeout: .seconds(10)) { !server.requests(pathContaining: path).isEmpty }
        return try #require(server.requests(pathContaining: path).first, "the server never saw \(path)", sourceLocation: sourceLocation)
    }

    /// A load of `/silent` (a head, then nothing) left running, once the server has it: for what
    /// goes on beside a stream that brings no reads.
    func openSilentStream(
        _ session: URLSession, tag: String, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> (Task<(Data, URLResponse), any Error>, H2FaultServer.LoggedRequest) {
        let path = "/silent?t=\(tag)"
        let silent = Task { try await session.data(from: server.url(path)) }
        return (silent, try await firstRequest(for: path, sourceLocation: sourceLocation))
    }

    /// Cancels the silent load, which ends `.cancelled`, then expects the session usable.
    func endSilentStream(
        _ silent: Task<(Data, URLResponse), any Error>, _ request: H2FaultServer.LoggedRequest, _ session: URLSession, tag: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        silent.cancel()
        await expectURLError(.cancelled, { _ = try await silent.value }, sourceLocation: sourceLocation)
        try await expectUsable(session, after: [request.connection], tag: tag, sourceLocation: sourceLocation)
    }

    /// Waits (up to 30 s) for the server to see each connection end: the client dropped the
    /// connection the fault broke, rather than keeping it (and, for a flood, reading forever).
    func expectClosed(_ connections: [Int], sourceLocation: SourceLocation = #_sourceLocation) async {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline, !connections.allSatisfy({ server.hasClosed(connection: $0) }) {
            try? await Task.sleep(for: .milliseconds(20))
        }
        for connection in connections {
            #expect(server.hasClosed(connection: connection), "connection \(connection) is still open", sourceLocation: sourceLocation)
        }
    }

    /// After a fault: `/ok` on a new connection (after `reset`) succeeds, no task is left, and
    /// the session invalidates with none left either.
    func expectUsable(
        _ session: URLSession, after faultConnections: [Int], tag: String, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        await resetConnections(session)
        let (data, response) = try await session.data(from: server.url("/ok?t=\(tag)-after"))
        #expect(data == Self.hello, sourceLocation: sourceLocation)
        #expect((response as? HTTPURLResponse)?.statusCode == 200, sourceLocation: sourceLocation)
        let connection = try #require(faultConnection(response), sourceLocation: sourceLocation)
        #expect(!faultConnections.contains(connection), "reset must make the session use a new connection", sourceLocation: sourceLocation)
        #expect(await remainingTasks(session).isEmpty, sourceLocation: sourceLocation)
        await invalidateAndDrain(session, sourceLocation: sourceLocation)
    }

    /// Invalidates with `invalidateAndCancel` and expects, within 2 s, no task left.
    func invalidateAndDrain(_ session: URLSession, sourceLocation: SourceLocation = #_sourceLocation) async {
        session.invalidateAndCancel()
        let deadline = ContinuousClock.now + .seconds(2)
        var remaining = await remainingTasks(session)
        while !remaining.isEmpty, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
            remaining = await remainingTasks(session)
        }
        #expect(remaining.isEmpty, "tasks left after invalidateAndCancel: \(remaining.map(\.taskIdentifier))", sourceLocation: sourceLocation)
    }

    // MARK: Baseline

    @Test("/ok answers 200 over h2c: the fault server itself is sound")
    func baseline() async throws {
        let session = makeSession()
        let tag = makeTag()
        let path = "/ok?t=\(tag)"
        let (data, response) = try await session.data(from: server.url(path))
        #expect(data == Self.hello)
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 200)
        #expect(http.httpVersion == "HTTP/2")
        #expect(faultConnection(response) == connections(for: path).first)
        await invalidateAndDrain(session)
    }

    // MARK: GOAWAY

    @Test("1000 GOAWAY frames, then a close: networkConnectionLost")
    func goAwayStorm() async throws {
        // Every last-stream-id is odd (client-initiated) and no lower than the request's stream,
        // so nghttp2 takes each one (lowering is allowed, raising is not) and the stream is not
        // refused. The server then closes without answering: the connection is lost mid-exchange
        // (TransportError.connectionLost). It was the connection's first stream, so it is not
        // retried as a stale reused connection would be.
        let session = makeSession()
        let tag = makeTag()
        let path = "/goaway-storm?t=\(tag)"
        await expectFault(session, path, .networkConnectionLost)
        let used = connections(for: path)
        #expect(used.count == 1, "a stream below every GOAWAY's last-stream-id is not retried")
        await expectClosed(used)
        try await expectUsable(session, after: used, tag: tag)
    }

    @Test("a GOAWAY storm that refuses the request: retried a bounded number of times, then networkConnectionLost")
    func goAwayStormRefusing() async throws {
        // The last GOAWAY's last-stream-id is below the request's stream: nghttp2 closes it as
        // REFUSED_STREAM (never processed), and HTTP2Connection sends it again on a new
        // connection, at most maxRefusedRetries (16) times. Every server refuses it the same way,
        // so it ends with the refused stream's error, TransportError.connectionLost.
        let session = makeSession()
        let tag = makeTag()
        let path = "/goaway-storm-refuse?t=\(tag)"
        await expectFault(session, path, .networkConnectionLost)
        let used = connections(for: path)
        #expect(used.count > 1, "a refused stream is safe to retry")
        #expect(used.count <= 17, "retries of a refused stream are bounded (1 + 16)")
        #expect(Set(used).count == used.count, "each retry goes to a new connection")
        await expectClosed(used)
        try await expectUsable(session, after: used, tag: tag)
    }

    // MARK: RST_STREAM

    @Test("RST_STREAM(CANCEL) on the request, then 10,000 on idle streams: networkConnectionLost, connection dropped")
    func rstFlood() async throws {
        // The reset of the request's own stream comes first: HTTP2StreamError.reset(CANCEL) →
        // TransportError.connectionLost. The next RST_STREAM names an idle stream, a connection
        // PROTOCOL_ERROR ("RST_STREAM: stream in idle"): nghttp2 sends GOAWAY, reads no more of
        // the flood, and the connection closes.
        let session = makeSession()
        let tag = makeTag()
        let path = "/rst-flood?t=\(tag)"
        await expectFault(session, path, .networkConnectionLost)
        let used = connections(for: path)
        await expectClosed(used)
        try await expectUsable(session, after: used, tag: tag)
    }

    // MARK: Floods nghttp2 refuses

    @Test("100,000 SETTINGS frames: nghttp2's flood protection drops the connection (badServerResponse)")
    func settingsFlood() async throws {
        // Each SETTINGS queues a SETTINGS ACK. nghttp2 counts queued ACKs (SETTINGS, PING,
        // RST_STREAM) and fails with NGHTTP2_ERR_FLOODED ("Flooding was detected") once 1000
        // (nghttp2_option_set_max_outbound_ack's default) wait unsent. HTTP2Connection feeds up to
        // 64 KiB per read (4,369 of these 15-byte frames) before draining the output, so the
        // flood trips it: nghttp2_session_mem_recv fails, HTTP2ClientSession.receive throws
        // HTTP2Error.protocolViolation → .remoteProtocol. The 200 after the flood is never read.
        let session = makeSession()
        let tag = makeTag()
        let path = "/settings-flood?t=\(tag)"
        await expectFault(session, path, .badServerResponse)
        let used = connections(for: path)
        await expectClosed(used)
        try await expectUsable(session, after: used, tag: tag)
    }

    @Test("100,000 PING frames: nghttp2's flood protection drops the connection (badServerResponse)")
    func pingFlood() async throws {
        // As for SETTINGS: each PING queues a PING ACK; 1000 queued in one read (3,855 17-byte
        // PINGs fit in 64 KiB) is NGHTTP2_ERR_FLOODED → HTTP2Error.protocolViolation.
        let session = makeSession()
        let tag = makeTag()
        let path = "/ping-flood?t=\(tag)"
        await expectFault(session, path, .badServerResponse)
        let used = connections(for: path)
        await expectClosed(used)
        try await expectUsable(session, after: used, tag: tag)
    }

    @Test("endless CONTINUATION frames: the header block is cut off (badServerResponse), the connection dropped")
    func continuationFlood() async throws {
        // libnghttp2 with the CVE-2024-28182 fix (Debian's 1.52.0-1+deb12u2 and later, upstream
        // 1.61) allows 8 CONTINUATION frames per header block, then fails
        // nghttp2_session_mem_recv with NGHTTP2_ERR_TOO_MANY_CONTINUATIONS →
        // HTTP2Error.protocolViolation. Without the fix, the 256 KiB header list limit resets the
        // stream (HTTP2StreamError.headerListTooLarge). Both are .remoteProtocol. The server
        // floods until the client closes, so the connection must end.
        let session = makeSession()
        let tag = makeTag()
        let path = "/continuation-flood?t=\(tag)"
        await expectFault(session, path, .badServerResponse)
        let used = connections(for: path)
        await expectClosed(used)
        try await expectUsable(session, after: used, tag: tag)
    }

    // MARK: Header and flow-control violations

    @Test("an HPACK bomb (40 MB of fields from 14 KB): the header list limit resets the stream (badServerResponse)")
    func hpackBomb() async throws {
        // Each reference to the 4000-byte dynamic entry counts 4038 bytes (name + value + 32,
        // RFC 9113 section 6.5.2) against HTTP2Configuration.maxHeaderListSize (256 KiB): after
        // about 65 of the 10,000 the header callback refuses, nghttp2 resets the stream
        // (INTERNAL_ERROR) and ignores the rest of the block, and the stream closes with
        // HTTP2StreamError.headerListTooLarge → .remoteProtocol. Nothing past the limit is kept.
        let session = makeSession()
        let tag = makeTag()
        let path = "/hpack-bomb?t=\(tag)"
        await expectFault(session, path, .badServerResponse)
        let used = connections(for: path)
        // Only the stream was reset: nghttp2 still decoded the rest of the block, so the
        // connection's HPACK state (the bomb's entry now in its table) stays in step, and the
        // session loads /ok with or without that connection.
        let (data, _) = try await session.data(from: server.url("/ok?t=\(tag)-same"))
        #expect(data == Self.hello)
        try await expectUsable(session, after: used, tag: tag)
    }

    @Test("WINDOW_UPDATE past 2^31 - 1 on the stream and the connection: badServerResponse, connection dropped")
    func windowOverflow() async throws {
        // The stream's overflow is a stream FLOW_CONTROL_ERROR, the connection's a connection
        // FLOW_CONTROL_ERROR (RFC 9113 section 6.9.1): nghttp2 sends GOAWAY(FLOW_CONTROL_ERROR)
        // and drops the stream's RST_STREAM (the session is closing). Courier fails the open
        // streams with the connection failure (HTTP2ClientSession.connectionFailure) →
        // .remoteProtocol; had the RST_STREAM gone out first, the stream would have closed with
        // HTTP2StreamError.protocolError(FLOW_CONTROL_ERROR) → .remoteProtocol all the same.
        // The server sends nothing else and keeps the connection open, so only acting on the
        // WINDOW_UPDATE ends the task before the timeout.
        let session = makeSession()
        let tag = makeTag()
        let path = "/window-overflow?t=\(tag)"
        await expectFault(session, path, .badServerResponse)
        let used = connections(for: path)
        await expectClosed(used)
        try await expectUsable(session, after: used, tag: tag)
    }

    @Test("DATA after END_STREAM: the response is already complete, the extra DATA is ignored")
    func dataAfterEnd() async throws {
        // END_STREAM on the first DATA closes the stream (the request had ended its side) and the
        // task completes at once. nghttp2 forgets a closed stream on the client side, so it
        // ignores later DATA on it (NGHTTP2_ERR_IGN_PAYLOAD) and the connection goes on; even a
        // STREAM_CLOSED connection error afterwards could not touch the finished task.
        let session = makeSession()
        let tag = makeTag()
        let path = "/data-after-end?t=\(tag)"
        let start = ContinuousClock.now
        let (data, response) = try await session.data(from: server.url(path))
        #expect(ContinuousClock.now - start < Self.hangLimit)
        #expect(data == Self.hello, "the bytes after END_STREAM are not part of the body")
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let used = connections(for: path)
        let (again, _) = try await session.data(from: server.url("/ok?t=\(tag)-same"))
        #expect(again == Self.hello)
        try await expectUsable(session, after: used, tag: tag)
    }

    // MARK: One endless stream among others

    /// Loads `path` and returns its error and how long after the call it came.
    func timedFailure(_ session: URLSession, _ path: String) async -> (error: URLError?, took: Duration) {
        let start = ContinuousClock.now
        return await withCheckedContinuation { continuation in
            session.dataTask(with: server.url(path)) { _, _, error in
                continuation.resume(returning: (error as? URLError, ContinuousClock.now - start))
            }.resume()
        }
    }

    @Test("silent streams time out on their own clocks; a busy stream beside them does not")
    func silentStreamsTimeOut() async throws {
        let configuration = URLSessionConfiguration.uncached
        configuration.http2PriorKnowledge = true
        configuration.timeoutIntervalForRequest = 1
        let session = URLSession(configuration: configuration)
        let tag = makeTag()
        // A chunk every 100 ms: never silent for a second, so never timed out.
        let busy = Task { try await session.data(from: server.url("/never-ends?t=\(tag)")) }
        let deadline = ContinuousClock.now + .seconds(10)
        while server.requests(pathContaining: "/never-ends?t=\(tag)").isEmpty, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        // Two silent streams on the same connection, the second started later: each fails as
        // timed out, and neither before a second of its own silence.
        async let first = timedFailure(session, "/silent?t=\(tag)-1")
        try await Task.sleep(for: .milliseconds(600))
        async let second = timedFailure(session, "/silent?t=\(tag)-2")
        for (name, outcome) in await [("first", first), ("second", second)] {
            #expect(outcome.error?.code == .timedOut, "\(name): \(String(describing: outcome.error))")
            #expect(outcome.took >= .seconds(1), "\(name) timed out after \(outcome.took)")
            #expect(outcome.took < Self.hangLimit, "\(name) took \(outcome.took)")
        }
        let connectionsUsed = Set(server.requests(pathContaining: tag).map(\.connection))
        #expect(connectionsUsed.count == 1, "one connection carries all three streams: \(connectionsUsed)")
        // The busy stream outlived both: cancelled now, it fails as cancelled, not timed out.
        busy.cancel()
        await expectURLError(.cancelled) { _ = try await busy.value }
        try await expectUsable(session, after: Array(connectionsUsed), tag: tag)
    }

    @Test("timeoutIntervalForResource ends a stream that is never silent")
    func resourceTimeoutEndsBusyStream() async throws {
        let configuration = URLSessionConfiguration.uncached
        configuration.http2PriorKnowledge = true
        configuration.timeoutIntervalForRequest = 30
        configuration.timeoutIntervalForResource = 1.5
        let session = URLSession(configuration: configuration)
        let tag = makeTag()
        let outcome = await timedFailure(session, "/never-ends?t=\(tag)")
        #expect(outcome.error?.code == .timedOut, "\(String(describing: outcome.error))")
        #expect(outcome.took >= .seconds(1.5), "timed out after \(outcome.took)")
        #expect(outcome.took < Self.hangLimit, "took \(outcome.took)")
        try await expectUsable(session, after: connections(for: "/never-ends?t=\(tag)"), tag: tag)
    }

    @Test("a response that never ends holds only its own stream: /ok beside it completes, cancelling it is .cancelled")
    func neverEnds() async throws {
        let session = makeSession()
        let tag = makeTag()
        let path = "/never-ends?t=\(tag)"
        // A chunk every 100 ms keeps the stream busy, so the idle timeout never fires.
        let endless = Task { try await session.data(from: server.url(path)) }
        // Wait until the server has the request, so /ok finds the connection open.
        let endlessRequest = try await firstRequest(for: path)
        // Let a few chunks arrive before the second request.
        try await Task.sleep(for: .milliseconds(300))

        let start = ContinuousClock.now
        let (data, response) = try await session.data(from: server.url("/ok?t=\(tag)-beside"))
        #expect(ContinuousClock.now - start < Self.hangLimit)
        #expect(data == Self.hello)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(faultConnection(response) == endlessRequest.connection, "/ok shares the endless stream's connection")

        endless.cancel()
        await expectURLError(.cancelled) { _ = try await endless.value }
        // Cancelling resets the stream (RST_STREAM CANCEL); the connection stays for the others.
        let resetDeadline = ContinuousClock.now + .seconds(30)
        while !server.hasSeenReset(connection: endlessRequest.connection, stream: endlessRequest.stream), ContinuousClock.now < resetDeadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(server.hasSeenReset(connection: endlessRequest.connection, stream: endlessRequest.stream))
        try await expectUsable(session, after: [endlessRequest.connection], tag: tag)
    }

    @Test("requests sent from the cooperative pool beside a silent stream go out with no read to carry them")
    func burstBesideSilentStream() async throws {
        let session = makeSession()
        let tag = makeTag()
        let (silent, silentRequest) = try await openSilentStream(session, tag: tag)

        // A task that finds the loop parked submits in its place, with the silent stream open,
        // so its HEADERS wait for the flush queued on the pool: the silent stream brings no read
        // that would send them, and without that flush the load would time out. One at a time
        // first (the loop is parked between them, unless it is still finishing the last one),
        // then a burst from several tasks.
        let start = ContinuousClock.now
        var responses: [(Data, URLResponse)] = []
        for index in 0..<6 {
            responses.append(try await session.data(from: server.url("/ok?t=\(tag)-one-\(index)")))
        }
        responses += try await withThrowingTaskGroup(of: (Data, URLResponse).self) { group in
            for index in 0..<8 {
                group.addTask { try await session.data(from: server.url("/ok?t=\(tag)-burst-\(index)")) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(ContinuousClock.now - start < Self.hangLimit)
        #expect(responses.count == 14)
        for (data, response) in responses {
            #expect(data == Self.hello)
            #expect(faultConnection(response) == silentRequest.connection, "the burst shares the silent stream's connection")
        }

        try await endSilentStream(silent, silentRequest, session, tag: tag)
    }

    @Test("a request whose flush is queued behind a busy cooperative pool still goes out at once: a loop timer bounds the wait")
    func queuedFlushHasALimit() async throws {
        let session = makeSession()
        let tag = makeTag()
        let (silent, silentRequest) = try await openSilentStream(session, tag: tag)

        let took = Mutex<Duration?>(nil)
        // Sixty jobs of 50 ms at low priority, queued before the request's flush task (which has
        // the priority of the task that resumes the request): the pool's threads are busy with
        // them for a second or more, and the flush task waits behind them. The completion handler
        // runs on the delegate queue, not on the pool. Nothing awaits the low task until the
        // end: awaiting it would raise its priority, and the flush task's with it.
        let resuming = Task(priority: .low) { () -> [Task<Void, Never>] in
            let busy = (0..<60).map { _ in Task(priority: .low) { keepBusy(for: .milliseconds(50)) } }
            let start = ContinuousClock.now
            session.dataTask(with: server.url("/ok?t=\(tag)-limited")) { data, _, error in
                #expect(error == nil && data == Self.hello)
                took.withLock { $0 = ContinuousClock.now - start }
            }.resume()
            return busy
        }
        let deadline = ContinuousClock.now + Self.hangLimit
        while took.withLock({ $0 }) == nil, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        let elapsed = try #require(took.withLock { $0 }, "the request never completed")
        #expect(elapsed < .milliseconds(500), "the request waited \(elapsed) for the busy pool")
        for task in await resuming.value { await task.value }

        try await endSilentStream(silent, silentRequest, session, tag: tag)
    }
}

// MARK: Helpers

/// The connection number the fault server put in a response (`x-connection`).
private func faultConnection(_ response: URLResponse?) -> Int? {
    (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Connection").flatMap { Int($0) }
}

/// Every task of `session` not yet completed, as `getAllTasks` reports them.
private func remainingTasks(_ session: URLSession) async -> [URLSessionTask] {
    await withCheckedContinuation { continuation in
        session.getAllTasks { continuation.resume(returning: $0) }
    }
}

/// `reset`: every later request uses a new connection.
private func resetConnections(_ session: URLSession) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        session.reset { continuation.resume() }
    }
}
