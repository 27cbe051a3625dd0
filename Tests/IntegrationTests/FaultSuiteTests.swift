import Courier
import CourierSync
import Foundation
import Glibc
import Testing
import _CourierTestSupport

/// A fault suite of HTTP/1.1 scenarios: each is one broken peer (a scripted raw server), one
/// expected outcome (an exact `URLError.Code`, or a normal completion with exact bytes), reached
/// within the configured timeouts, and nothing leaked: the session lists no task once it
/// completed, and after `invalidateAndCancel()` no socket of this process to the server is open
/// (``openClientSockets(toPort:)``). Where the server keeps its end open, its script also watches
/// the client close its socket (``PeerLog``).
///
/// The faults HTTP1FaultTests already covers (a Content-Length or chunked body cut by a close,
/// malformed framing, a stalled server, a trickled Content-Length body against the resource
/// timeout, a stale connection closed as the next request arrives, bytes in the same segment
/// after a response) are not repeated here.
@Suite("HTTP/1.1 fault suite: one broken peer, one exact outcome, nothing leaked", .timeLimit(.minutes(1)))
struct FaultSuiteTests {
    /// An ephemeral session without a cache, with short timeouts so a missed fault fails fast.
    func session(timeout: TimeInterval = 5, resourceTimeout: TimeInterval? = nil) -> URLSession {
        let configuration = URLSessionConfiguration.uncached
        configuration.timeoutIntervalForRequest = timeout
        if let resourceTimeout { configuration.timeoutIntervalForResource = resourceTimeout }
        return URLSession(configuration: configuration)
    }

    // MARK: Connections cut at every phase

    @Test("a connection cut (FIN or RST) anywhere before the response ends is networkConnectionLost", arguments: FaultInterruption.all)
    func interrupted(_ interruption: FaultInterruption) async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            if interruption.phase != .afterAccept {
                guard connection.readRequest() != nil else { return }
                connection.write(interruption.phase.bytes)
            }
            switch interruption.cut {
            case .close:
                // FIN: the client reads end of stream. Reading on, the script sees the client
                // close its socket after the failure.
                connection.shutdownWrite()
                log.awaitClientClose(connection)
            case .reset:
                // After accept: once the request's first bytes arrive, so the client has surely
                // finished connecting and the RST hits an exchange before any response (an RST
                // that beats the client's connect completion is a failed connect,
                // cannotConnectToHost); a sleep was not enough when the client was descheduled.
                // After bytes: long enough for the client to have read them, so the RST hits a
                // response under way.
                if interruption.phase == .afterAccept {
                    _ = connection.readAvailable(timeout: 60)
                } else {
                    Thread.sleep(forTimeInterval: 0.1)
                }
                connection.reset()
            }
        }
        let session = session()
        // A fresh connection is never retried, so every cut is the exchange's failure. The
        // parser reports an end of stream inside a head (truncatedHead) or before the end of a
        // body, a chunk-size line or the trailer section (truncatedBody) as a truncation, which
        // URLError+Transport maps to networkConnectionLost; a reset is connectionLost at once.
        // A chunked body missing only its final CRLF is cut too: the message end never came.
        await expectURLError(.networkConnectionLost) { _ = try await session.data(from: server.url("/phase")) }
        await expectNoLeaks(session, server, log: log, closes: interruption.cut == .close ? 1 : 0)
    }

    @Test("a keep-alive connection the server drops between requests: the next GET goes on a new connection, transparently", arguments: FaultIdleBreak.allCases)
    func droppedBetweenRequests(_ fault: FaultIdleBreak) async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            guard connection.index == 0 else {
                connection.respond(body: Array("fresh".utf8))
                log.awaitClientClose(connection)
                return
            }
            connection.respond(body: Array("first".utf8))
            switch fault {
            case .closeWhileIdle:
                connection.shutdownWrite()
                log.awaitClientClose(connection)
            case .resetWhileIdle:
                Thread.sleep(forTimeInterval: 0.1)
                connection.reset()
            case .resetOnNextRequest:
                // Long, so a slow test process never meets a connection the script gave up on.
                _ = connection.readRequest(timeout: 60)
                connection.reset()
            }
        }
        let session = session()
        let (first, _) = try await session.data(from: server.url("/one"))
        #expect(String(decoding: first, as: UTF8.self) == "first")
        if fault != .resetOnNextRequest {
            let noticed = await pollUntil(timeout: .seconds(30)) { openClientSockets(toPort: server.port) == 0 }
            #expect(noticed, "the client closed the idle connection the server dropped")
        }
        // Dropped while idle, the connection left the pool; dropped under the GET before any
        // response byte, on a reused connection, the GET is retried once on a new one.
        let (second, _) = try await session.data(from: server.url("/two"))
        #expect(String(decoding: second, as: UTF8.self) == "fresh")
        #expect(server.connectionCount == 2)
        await expectNoLeaks(session, server, log: log, closes: fault == .closeWhileIdle ? 2 : 1)
    }

    @Test("a POST on a keep-alive connection reset as it arrives is not sent again: networkConnectionLost")
    func resetUnderPost() async throws {
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.respond(body: Array("first".utf8))
            _ = connection.readRequest(timeout: 60)
            connection.reset()
        }
        let session = session()
        _ = try await session.data(from: server.url("/one"))
        var post = URLRequest(url: server.url("/two"))
        post.httpMethod = "POST"
        post.httpBody = Data("payload".utf8)
        await expectURLError(.networkConnectionLost) { _ = try await session.data(for: post) }
        #expect(server.connectionCount == 1, "a POST is never sent twice")
        await expectNoLeaks(session, server)
    }

    // MARK: Slow peers

    @Test("a head trickled one byte per 1.5 s against a 1 s request timeout is timedOut")
    func slowHeadPastIdleTimeout() async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            for byte in Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".utf8) {
                connection.write([byte])
                if log.awaitClientClose(connection, within: 1.5) { return }
            }
        }
        let session = session(timeout: 1)
        await expectURLError(.timedOut) { _ = try await session.data(from: server.url("/slow")) }
        await expectNoLeaks(session, server, log: log, closes: 1)
    }

    @Test("a head trickled one byte per 750 ms loads although it takes longer than the 10 s request timeout: that timeout is an idle one")
    func slowHeadWithinIdleTimeout() async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            // 16 bytes, 12 s in all. A status line without a reason phrase is valid (RFC 9112 §4).
            // Each gap is far under the timeout, so a script descheduled for several seconds
            // still never lets the idle timeout fire.
            for byte in Array("HTTP/1.1 204\r\n\r\n".utf8) {
                connection.write([byte])
                Thread.sleep(forTimeInterval: 0.75)
            }
            log.awaitClientClose(connection)
        }
        let session = session(timeout: 10)
        let (data, response) = try await session.data(from: server.url("/slow"))
        #expect((response as? HTTPURLResponse)?.statusCode == 204)
        #expect(data.isEmpty)
        await expectNoLeaks(session, server, log: log, closes: 1)
    }

    @Test("a response trickled faster than the request timeout but past the resource timeout is timedOut", arguments: FaultTrickle.allCases)
    func trickledPastResourceTimeout(_ trickle: FaultTrickle) async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            let pieces: [[UInt8]]
            switch trickle {
            case .head:
                // One byte at a time: some 250 bytes, 50 s to send whole.
                let head = "HTTP/1.1 200 OK\r\nX-Pad: \(String(repeating: "a", count: 200))\r\nContent-Length: 2\r\n\r\nok"
                pieces = Array(head.utf8).map { [$0] }
            case .chunkedBody:
                connection.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                pieces = Array(repeating: Array("1\r\nx\r\n".utf8), count: 250) + [Array("0\r\n\r\n".utf8)]
            }
            for piece in pieces {
                connection.write(piece)
                if log.awaitClientClose(connection, within: 0.2) { return }
            }
        }
        // A byte every 200 ms never lets the 1 s idle timeout fire: only the resource timeout can.
        let session = session(timeout: 1, resourceTimeout: 1.5)
        await expectURLError(.timedOut) { _ = try await session.data(from: server.url("/trickle")) }
        await expectNoLeaks(session, server, log: log, closes: 1)
    }

    // MARK: Header floods

    @Test("header floods past the parser's limits (1000 fields, 256 KiB), endless heads included, are badServerResponse", arguments: FaultFlood.allCases)
    func headerFlood(_ flood: FaultFlood) async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            switch flood {
            case .manyFields:
                let fields = (0..<5000).map { "X-Field-\($0): v\r\n" }.joined()
                connection.write("HTTP/1.1 200 OK\r\n\(fields)Content-Length: 0\r\n\r\n")
            case .giantLine:
                connection.write("HTTP/1.1 200 OK\r\nX-Giant: \(String(repeating: "a", count: 300 * 1024))\r\nContent-Length: 0\r\n\r\n")
            case .endlessLine, .endlessFields:
                // Up to 45 MiB, far more than the client may hold: it must stop at its limit and
                // close, after which these writes fail at once.
                connection.write(flood == .endlessLine ? "HTTP/1.1 200 OK\r\nX-Endless: " : "HTTP/1.1 200 OK\r\n")
                let block = flood == .endlessLine ? String(repeating: "a", count: 11 * 1024) : String(repeating: "X-More: v\r\n", count: 1024)
                let bytes = Array(block.utf8)
                for _ in 0..<4096 { connection.write(bytes) }
            }
            log.awaitClientClose(connection)
        }
        let session = session()
        // HTTP1ResponseParser throws tooManyHeaderFields past HTTP1ParserOptions'
        // defaultMaxHeaderFieldCount (1000) and headerSectionTooLarge past
        // defaultMaxHeaderSectionBytes (256 KiB), counted as the bytes arrive: neither is a
        // truncation, so URLError+Transport maps both to badServerResponse.
        await expectURLError(.badServerResponse) { _ = try await session.data(from: server.url("/flood")) }
        await expectNoLeaks(session, server, log: log, closes: 1)
    }

    @Test("a head of exactly 1000 fields, the parser's limit, is accepted")
    func fieldsAtTheLimit() async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            // 999 fields and Content-Length.
            let fields = (0..<999).map { "X-Field-\($0): v\r\n" }.joined()
            connection.write("HTTP/1.1 200 OK\r\n\(fields)Content-Length: 2\r\n\r\nok")
            log.awaitClientClose(connection)
        }
        let session = session()
        let (data, response) = try await session.data(from: server.url("/fields"))
        #expect(String(decoding: data, as: UTF8.self) == "ok")
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Field-998") == "v")
        await expectNoLeaks(session, server, log: log, closes: 1)
    }
}

// MARK: - Scenario tables

/// Where in an exchange the scripted server breaks off.
enum FaultPhase: String, CaseIterable, Sendable {
    /// Right after accepting, before reading the request.
    case afterAccept
    /// After reading the request, before writing any byte.
    case afterRequest
    case midStatusLine
    case midHeaders
    /// After a head with Content-Length: 10, before any body byte.
    case afterHead
    /// Five of the ten Content-Length bytes.
    case midBody
    /// A whole chunk, then nothing: the next chunk-size line never comes.
    case betweenChunks
    /// The last chunk `0\r\n`, without the CRLF that ends the (empty) trailer section.
    case beforeFinalCRLF

    /// What the server writes before breaking off.
    var bytes: String {
        switch self {
        case .afterAccept, .afterRequest: ""
        case .midStatusLine: "HTTP/1.1 20"
        case .midHeaders: "HTTP/1.1 200 OK\r\nContent-Type: text/pl"
        case .afterHead: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"
        case .midBody: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello"
        case .betweenChunks: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
        case .beforeFinalCRLF: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
        }
    }
}

/// How the server breaks off.
enum FaultCut: String, CaseIterable, Sendable {
    /// FIN: the server shuts its sending side down, the client reads end of stream.
    case close
    /// RST (SO_LINGER 0).
    case reset
}

/// One phase and one cut.
struct FaultInterruption: Sendable, CustomTestStringConvertible {
    var phase: FaultPhase
    var cut: FaultCut

    var testDescription: String { "\(cut.rawValue) \(phase.rawValue)" }

    /// Every phase with both cuts, but a close mid-body (HTTP1FaultTests.truncatedBody).
    static let all: [FaultInterruption] = FaultPhase.allCases.flatMap { phase in
        FaultCut.allCases.compactMap { cut -> FaultInterruption? in
            phase == .midBody && cut == .close ? nil : FaultInterruption(phase: phase, cut: cut)
        }
    }
}

/// How a server drops a keep-alive connection after answering its first request.
enum FaultIdleBreak: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// FIN while the connection is idle in the pool.
    case closeWhileIdle
    /// RST while the connection is idle in the pool.
    case resetWhileIdle
    /// RST once the next request arrived (HTTP1FaultTests.staleRetry does this with a close).
    case resetOnNextRequest

    var testDescription: String { rawValue }
}

/// What is trickled past the resource timeout.
enum FaultTrickle: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// The head, a byte at a time.
    case head
    /// A chunked body, a one-byte chunk at a time (HTTP1FaultTests.resourceTimeout trickles a
    /// Content-Length body).
    case chunkedBody

    var testDescription: String { rawValue }
}

/// A head that floods the parser.
enum FaultFlood: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// 5000 short fields, about 90 KB: over the field count, under the size limit.
    case manyFields
    /// One 300 KiB field line, then a proper end.
    case giantLine
    /// One field line that never ends.
    case endlessLine
    /// Field lines that keep coming, never the empty line.
    case endlessFields

    var testDescription: String { rawValue }
}

// MARK: - Leak checks

/// What a script saw of the client, for the test to check: how many connections the client
/// closed while the script watched, and marks the script left.
final class PeerLog: Sendable {
    private struct State {
        var closes = 0
        var marks: Set<String> = []
    }

    private let state = Mutex(State())

    /// Connections on which the script saw the client close its socket.
    var closes: Int { state.withLock { $0.closes } }

    func mark(_ name: String) {
        state.withLock { _ = $0.marks.insert(name) }
    }

    func has(_ name: String) -> Bool {
        state.withLock { $0.marks.contains(name) }
    }

    /// Reads (and drops) what the client sends until it closes the connection or `seconds`
    /// pass; true, and counted, when it closed. The client sends nothing after its request, so
    /// a read that ends before its deadline ended at end of stream or at a reset.
    @discardableResult
    func awaitClientClose(_ connection: ScriptedConnection, within seconds: TimeInterval = 60) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        connection.readToEOF(timeout: seconds)
        guard Date() < deadline.addingTimeInterval(-0.05) else { return false }
        state.withLock { $0.closes += 1 }
        return true
    }
}

/// The tasks `session` lists as not completed.
func liveTaskCount(_ session: URLSession) async -> Int {
    await withCheckedContinuation { continuation in
        session.getAllTasks { continuation.resume(returning: $0.count) }
    }
}

/// The checks every scenario ends with: the session lists no task (Courier has no `allTasks`;
/// `getAllTasks` is the same list), no socket of this process to `server` is open once the
/// session is invalidated, and the script saw the client close `closes` connections. `server`
/// is an argument so that it lives, and its scripts keep watching, until the checks are done:
/// stopping it would end the scripts' reads as a client close does.
func expectNoLeaks(
    _ session: URLSession, _ server: ScriptedServer, log: PeerLog? = nil, closes: Int = 0,
    sourceLocation: SourceLocation = #_sourceLocation
) async {
    await expectNoLeaks(session, port: server.port, sourceLocation: sourceLocation)
    guard let log else { return }
    _ = await pollUntil(timeout: .seconds(30)) { log.closes >= closes }
    #expect(log.closes == closes, "the server saw the client close \(log.closes) connection(s)", sourceLocation: sourceLocation)
}

/// The checks every scenario ends with, for any server (a scripted one, or `openssl s_server`):
/// the session lists no task, and once it is invalidated no socket of this process to `port`
/// is open.
func expectNoLeaks(_ session: URLSession, port: Int, sourceLocation: SourceLocation = #_sourceLocation) async {
    var live = -1
    for _ in 0..<100 {
        live = await liveTaskCount(session)
        if live == 0 { break }
        try? await Task.sleep(for: .milliseconds(20))
    }
    #expect(live == 0, "the session still lists \(live) task(s) after they completed", sourceLocation: sourceLocation)
    session.invalidateAndCancel()
    let closed = await pollUntil(timeout: .seconds(30)) { openClientSockets(toPort: port) == 0 }
    #expect(closed, "\(openClientSockets(toPort: port)) socket(s) to the server still open after invalidateAndCancel", sourceLocation: sourceLocation)
}

/// Sockets this process holds open to 127.0.0.1:`port`: the TCP table entries whose remote end
/// is that port and whose inode is one of this process's descriptors. A socket the process has
/// closed leaves the table or lingers (FIN_WAIT, TIME_WAIT) with no inode, so other tests
/// running meanwhile, and closed sockets, are not counted.
func openClientSockets(toPort port: Int) -> Int {
    let inodes = processSocketInodes()
    var count = 0
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode …
        for line in readProcFile(table).split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            guard fields.count > 9, let colon = fields[2].lastIndex(of: ":"),
                  Int(fields[2][fields[2].index(after: colon)...], radix: 16) == port else { continue }
            if inodes.contains(String(fields[9])) { count += 1 }
        }
    }
    return count
}

/// The inodes of this process's open sockets, from /proc/self/fd.
private func processSocketInodes() -> Set<String> {
    var inodes = Set<String>()
    let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    for name in names {
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)"),
              target.hasPrefix("socket:["), target.hasSuffix("]") else { continue }
        inodes.insert(String(target.dropFirst("socket:[".count).dropLast()))
    }
    return inodes
}

/// A /proc file read to its end (they report a size of 0, so it is read until EOF).
private func readProcFile(_ path: String) -> String {
    guard let file = fopen(path, "r") else { return "" }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 64 * 1024)
    while true {
        let count = chunk.withUnsafeMutableBytes { fread($0.baseAddress, 1, $0.count, file) }
        if count <= 0 { break }
        bytes += chunk[..<count]
    }
    return String(decoding: bytes, as: UTF8.self)
}
