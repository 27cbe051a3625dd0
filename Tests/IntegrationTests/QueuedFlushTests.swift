import CourierCore
import CourierReactor
import CourierSync
@testable import CourierTransport
import Foundation
import Testing
import _CourierTestSupport

/// The flush an HTTP/2 connection queues on the cooperative pool when a task submits beside
/// other open streams (`HTTP2Connection.requestFlushAfterCallersPeers`), seen from inside: the
/// connection counts the flushes it queued and which path sent each, the task or the 1 ms loop
/// timer. The fault suite's `burstBesideSilentStream` and `queuedFlushHasALimit` check the same
/// through URLSession, by what arrives; these check that the path they are about was taken.
@Suite("HTTP/2 flushes queued on the cooperative pool", .serialized, .timeLimit(.minutes(1)))
struct QueuedFlushTests {
    typealias Watcher = TransportLifetimeTests.Watcher

    let server: H2FaultServer
    /// A loop of the test's own: one that other tests keep busy is not borrowed, and a request
    /// submitted while it is busy is sent at the end of its turn, not by a queued flush.
    let group: EventLoopGroup
    let transport: HTTPTransport

    /// A transport whose queued flushes wait at most `limit` for the pool.
    init(limit: Duration) throws {
        server = try H2FaultServer.shared()
        group = try EventLoopGroup(loopCount: 1, name: "queued-flush-test")
        var configuration = HTTPTransport.Configuration()
        configuration.http2PriorKnowledge = true
        configuration.http2.queuedFlushDelayLimit = limit
        transport = HTTPTransport(configuration: configuration, group: group)
    }

    /// Shuts the transport down, then its loop.
    func finish() {
        transport.shutdown()
        group.shutdown()
    }

    /// Starts a GET of `path` from the calling task, which borrows the loop when it is parked.
    func start(_ path: String) -> Watcher {
        Watcher.get(path, from: Origin(scheme: .http, host: "127.0.0.1", port: UInt16(server.port)), through: transport)
    }

    func ended(_ watcher: Watcher) async -> Bool {
        await pollUntil { watcher.outcome.withLock { $0.ended || $0.failure != nil } } && watcher.outcome.withLock { $0.failure == nil }
    }

    /// A stream that stays open and silent, and the connection that carries it.
    func openSilentStream(tag: String) async throws -> (Watcher, HTTP2Connection) {
        let silent = start("/silent?t=\(tag)")
        #expect(await pollUntil { silent.connection != nil }, "the silent stream's head never came")
        let connection = try #require(silent.connection as? HTTP2Connection)
        return (silent, connection)
    }

    /// The connection's counts, read on its loop.
    func counts(_ connection: HTTP2Connection) async -> HTTP2Connection.QueuedFlushCounts {
        let bound = LoopBound(connection, loop: connection.loop)
        return await withCheckedContinuation { continuation in
            bound.loop.execute { continuation.resume(returning: bound.value.queuedFlushCounts) }
        }
    }

    @Test("requests from a task beside an open stream queue their flush, and the task sends it")
    static func taskSendsQueuedFlush() async throws {
        // A limit no load reaches, so that only the task (or a read, which the silent stream
        // never brings) can send: under the whole suite's load the 1 ms timer often goes first.
        let test = try QueuedFlushTests(limit: .seconds(60))
        defer { test.finish() }
        let tag = String(UUID().uuidString.prefix(8)).lowercased()
        let (_, connection) = try await test.openSilentStream(tag: tag)
        // One at a time: the loop is parked between them, so each submission borrows it.
        for index in 0..<6 {
            #expect(await test.ended(test.start("/ok?t=\(tag)-\(index)")))
        }
        let counts = await test.counts(connection)
        #expect(counts.queued > 0, "no submission queued its flush: \(counts)")
        #expect(counts.sentByTask == counts.queued && counts.sentByTimer == 0, "a queued flush was lost or timed: \(counts)")
    }

    @Test("a queued flush that the pool cannot run in time is sent by the loop's timer")
    static func timerSendsQueuedFlush() async throws {
        let test = try QueuedFlushTests(limit: .milliseconds(1))
        try await test.busyPoolLeavesFlushToTimer()
    }

    func busyPoolLeavesFlushToTimer() async throws {
        defer { finish() }
        let tag = String(UUID().uuidString.prefix(8)).lowercased()
        let (_, connection) = try await openSilentStream(tag: tag)
        // Sixty jobs of 50 ms at low priority, queued before the flush task, which has the low
        // priority of the task that submits. Nothing awaits that task until it is done with:
        // awaiting it would raise its priority, and the flush task's with it.
        let submitting = Task(priority: .low) { () -> (Watcher, [Task<Void, Never>]) in
            let busy = (0..<60).map { _ in Task(priority: .low) { keepBusy(for: .milliseconds(50)) } }
            return (start("/ok?t=\(tag)-limited"), busy)
        }
        #expect(await pollUntil { server.requests(pathContaining: "\(tag)-limited").count == 1 }, "the request never reached the server")
        let counts = await counts(connection)
        let (watcher, busy) = await submitting.value
        for task in busy { await task.value }
        #expect(await ended(watcher))
        #expect(counts.sentByTimer > 0, "the busy pool's flush task went first: \(counts)")
    }
}
