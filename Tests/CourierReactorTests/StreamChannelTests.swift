import CourierReactor
import CourierSync
import Glibc
import Testing
import _CourierTestSupport

/// Records what a channel reports, from its loop, for the test to read from its own thread.
final class ChannelRecorder: StreamChannelDelegate, Sendable {
    enum Event: Sendable, Equatable {
        case read(Int)
        case eof
        case drained
        case failed(SystemError)
    }

    private struct State {
        var events: [Event] = []
        var bytes: [UInt8] = []
        /// The test is inside a call into the channel.
        var insideCall = false
        var failedInsideCall = false
    }

    private let state = Mutex(State())
    /// Runs on the loop after each read is recorded (to pause from inside the callback).
    private let afterRead: (@Sendable (StreamChannel) -> Void)?

    init(afterRead: (@Sendable (StreamChannel) -> Void)? = nil) {
        self.afterRead = afterRead
    }

    func channel(_ channel: StreamChannel, didRead bytes: UnsafeRawBufferPointer) {
        state.withLock { state in
            state.events.append(.read(bytes.count))
            state.bytes.append(contentsOf: bytes)
        }
        afterRead?(channel)
    }

    func channelDidReadEOF(_ channel: StreamChannel) {
        state.withLock { $0.events.append(.eof) }
    }

    func channelDidDrainWrites(_ channel: StreamChannel) {
        state.withLock { $0.events.append(.drained) }
    }

    func channel(_ channel: StreamChannel, didFail error: SystemError) {
        state.withLock { state in
            state.events.append(.failed(error))
            if state.insideCall { state.failedInsideCall = true }
        }
    }

    /// Runs a call into the channel (on its loop), noting any failure reported from inside it.
    func call<T>(_ body: () -> T) -> T {
        state.withLock { $0.insideCall = true }
        defer { state.withLock { $0.insideCall = false } }
        return body()
    }

    var events: [Event] { state.withLock { $0.events } }
    var bytes: [UInt8] { state.withLock { $0.bytes } }
    var byteCount: Int { state.withLock { $0.bytes.count } }
    var readCount: Int {
        state.withLock { state in
            state.events.filter { event in
                if case .read = event { return true }
                return false
            }.count
        }
    }
    var eofCount: Int { state.withLock { $0.events.filter { $0 == .eof }.count } }
    var sawEOF: Bool { eofCount > 0 }
    var drainCount: Int { state.withLock { $0.events.filter { $0 == .drained }.count } }
    var failedInsideCall: Bool { state.withLock { $0.failedInsideCall } }
    var failures: [SystemError] {
        state.withLock { state in
            state.events.compactMap { event -> SystemError? in
                if case .failed(let error) = event { return error }
                return nil
            }
        }
    }
}

/// What connects the channel to its peer.
enum Transport: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case unixSocketPair
    case tcpLoopback

    var testDescription: String { rawValue }

    /// A connected pair: the channel's end and the test's end.
    func makePair() throws -> (channel: Int32, peer: Int32) {
        switch self {
        case .unixSocketPair: return try RawSocket.unixPair()
        case .tcpLoopback: return try RawSocket.tcpPair()
        }
    }
}

/// A channel on a loop, its recorder, and the raw socket at the other end.
struct ChannelFixture: Sendable {
    let loop: EventLoop
    let channel: LoopBound<StreamChannel>
    let recorder: ChannelRecorder
    let peer: OwnedSocket

    init(_ transport: Transport, on loop: EventLoop, paused: Bool = false, recorder: ChannelRecorder = ChannelRecorder()) async throws {
        let (mine, theirs) = try transport.makePair()
        let peer = OwnedSocket(theirs)
        do {
            channel = try await onLoop(loop) {
                let channel = try StreamChannel(fd: mine, loop: loop)
                channel.delegate = recorder
                if paused { channel.pauseReading() }
                return LoopBound(channel, loop: loop)
            }
        } catch {
            peer.close()
            throw error
        }
        self.loop = loop
        self.recorder = recorder
        self.peer = peer
    }

    /// Runs `body` with the channel, on its loop.
    @discardableResult
    func run<T: Sendable>(_ body: @escaping @Sendable (StreamChannel) -> T) async throws -> T {
        let channel = self.channel
        let recorder = self.recorder
        return try await onLoop(loop) { recorder.call { body(channel.value) } }
    }

    func write(_ bytes: [UInt8]) async throws {
        try await run { channel in bytes.withUnsafeBytes { channel.write($0) } }
    }

    var isOpen: Bool {
        get async throws { try await run { $0.isOpen } }
    }

    func close() async throws {
        try await run { $0.close() }
    }
}

@Suite struct StreamChannelTests {
    // MARK: Reading

    @Test(arguments: Transport.allCases)
    func readsArriveInOrderAndComplete(_ transport: Transport) async throws {
        let loop = try EventLoop(name: "test-read")
        defer { loop.shutdown() }
        let fixture = try await ChannelFixture(transport, on: loop)
        defer { fixture.peer.close() }

        let addresses = try await fixture.run { [$0.localAddress, $0.remoteAddress] }
        switch transport {
        case .unixSocketPair: #expect(addresses.allSatisfy { $0?.family == .unix })
        case .tcpLoopback: #expect(addresses.allSatisfy { $0?.hostString == "127.0.0.1" })
        }

        let data = pattern(1 << 20, seed: 7)
        let sent = await RawSocket.send(fixture.peer.fd, data)
        #expect(sent == data.count)
        fixture.peer.close()

        let done = await eventually(timeout: .seconds(30)) { fixture.recorder.sawEOF }
        #expect(done)
        #expect(fixture.recorder.byteCount == data.count)
        #expect(sameBytes(fixture.recorder.bytes, data))
        let events = fixture.recorder.events
        #expect(events.last == .eof)
        #expect(fixture.recorder.eofCount == 1)
        let onlyReadsBeforeEOF = events.dropLast().allSatisfy { event in
            if case .read = event { return true }
            return false
        }
        #expect(onlyReadsBeforeEOF)
        try await fixture.close()
    }

    @Test(arguments: Transport.allCases)
    func pausedChannelDeliversNothingUntilResumed(_ transport: Transport) async throws {
        let loop = try EventLoop(name: "test-pause")
        defer { loop.shutdown() }
        let fixture = try await ChannelFixture(transport, on: loop, paused: true)
        defer { fixture.peer.close() }

        let data = pattern(64 * 1024, seed: 9)
        #expect(await RawSocket.send(fixture.peer.fd, data) == data.count)
        // Give a wrong delivery every chance to happen.
        try await Task.sleep(for: .milliseconds(200))
        #expect(fixture.recorder.events.isEmpty, "the channel delivered while paused")

        try await fixture.run { $0.resumeReading() }
        let all = await eventually { fixture.recorder.byteCount == data.count }
        #expect(all)
        #expect(sameBytes(fixture.recorder.bytes, data))
        #expect(!fixture.recorder.sawEOF)
        try await fixture.close()
    }

    @Test(arguments: Transport.allCases)
    func pauseFromInsideDidReadStopsFurtherReads(_ transport: Transport) async throws {
        let loop = try EventLoop(name: "test-pause-inside")
        defer { loop.shutdown() }
        let first = Flag()
        let recorder = ChannelRecorder { channel in
            if first.setFirst() { channel.pauseReading() }
        }
        let fixture = try await ChannelFixture(transport, on: loop, recorder: recorder)
        defer { fixture.peer.close() }

        let data = pattern(96 * 1024, seed: 11)
        #expect(await RawSocket.send(fixture.peer.fd, data) == data.count)
        let readOnce = await eventually { recorder.readCount >= 1 }
        #expect(readOnce)
        try await Task.sleep(for: .milliseconds(200))
        #expect(recorder.readCount == 1, "reads went on after pauseReading inside didRead")

        try await fixture.run { $0.resumeReading() }
        let all = await eventually { recorder.byteCount == data.count }
        #expect(all)
        #expect(sameBytes(recorder.bytes, data))
        try await fixture.close()
    }

    @Test(arguments: Transport.allCases)
    func endOfStreamIsDeliveredAfterTheData(_ transport: Transport) async throws {
        let loop = try EventLoop(name: "test-eof")
        defer { loop.shutdown() }
        let fixture = try await ChannelFixture(transport, on: loop)
        defer { fixture.peer.close() }

        let data = Array("last words".utf8)
        #expect(await RawSocket.send(fixture.peer.fd, data) == data.count)
        fixture.peer.close()
        let ended = await eventually { fixture.recorder.sawEOF }
        #expect(ended)
        #expect(sameBytes(fixture.recorder.bytes, data))
        #expect(fixture.recorder.events.last == .eof)
        #expect(fixture.recorder.failures.isEmpty)
        // End of stream does not close the channel.
        let stillOpen = try await fixture.isOpen
        #expect(stillOpen)
        try await fixture.close()
    }

    @Test(arguments: Transport.allCases)
    func endOfStreamWhilePausedIsDeliveredAfterResume(_ transport: Transport) async throws {
        let loop = try EventLoop(name: "test-eof-paused")
        defer { loop.shutdown() }
        let fixture = try await ChannelFixture(transport, on: loop, paused: true)
        defer { fixture.peer.close() }

        let data = pattern(10 * 1024, seed: 13)
        #expect(await RawSocket.send(fixture.peer.fd, data) == data.count)
        fixture.peer.close()
        try await Task.sleep(for: .milliseconds(200))
        #expect(fixture.recorder.events.isEmpty, "the channel reported while paused")

        try await fixture.run { $0.resumeReading() }
        let ended = await eventually { fixture.recorder.sawEOF }
        #expect(ended, "end of stream that arrived while paused was never delivered")
        #expect(sameBytes(fixture.recorder.bytes, data))
        #expect(fixture.recorder.events.last == .eof)
        #expect(fixture.recorder.eofCount == 1)
        #expect(fixture.recorder.failures.isEmpty)
        try await fixture.close()
    }

    // MARK: Writing

    @Test(arguments: Transport.allCases)
    func largeWritesAreQueuedAndAllDelivered(_ transport: Transport) async throws {
        let loop = try EventLoop(name: "test-large-write")
        defer { loop.shutdown() }
        let fixture = try await ChannelFixture(transport, on: loop)
        defer { fixture.peer.close() }

        let body = pattern(8 << 20, seed: 3)
        let tail = Array("END".utf8)
        let pendingAfterWrite = try await fixture.run { channel -> Int in
            body.withUnsafeBytes { channel.write($0) }
            let pending = channel.pendingWriteBytes
            // Queued behind the rest, not sent ahead of it.
            tail.withUnsafeBytes { channel.write($0) }
            return pending
        }
        #expect(pendingAfterWrite > 0, "8 MiB should not fit in the socket buffers at once")

        let expected = body + tail
        let received = await RawSocket.receive(
            fixture.peer.fd, count: expected.count, chunk: 32 * 1024, pause: .milliseconds(1), timeout: .seconds(60)
        )
        #expect(received.count == expected.count)
        #expect(sameBytes(received, expected))
        let drained = await eventually { fixture.recorder.drainCount >= 1 }
        #expect(drained, "channelDidDrainWrites never came")
        let pendingAtEnd = try await fixture.run { $0.pendingWriteBytes }
        #expect(pendingAtEnd == 0)
        #expect(fixture.recorder.drainCount == 1)
        #expect(fixture.recorder.failures.isEmpty)
        try await fixture.close()
    }

    @Test(arguments: Transport.allCases)
    func vectorWritesKeepTheirOrder(_ transport: Transport) async throws {
        let loop = try EventLoop(name: "test-vector-write")
        defer { loop.shutdown() }
        let fixture = try await ChannelFixture(transport, on: loop)
        defer { fixture.peer.close() }

        // Small enough for one sendmsg.
        let head = Array("HEAD / HTTP/1.1\r\n\r\n".utf8)
        let small = pattern(500, seed: 1)
        try await fixture.run { channel in
            head.withUnsafeBytes { h in small.withUnsafeBytes { s in channel.write([h, s]) } }
        }
        let first = await RawSocket.receive(fixture.peer.fd, count: head.count + small.count, timeout: .seconds(10))
        #expect(first == head + small)

        // Too large for the buffers: part is queued, and a second vector write lands behind it.
        let big = pattern(3 << 20, seed: 2)
        let trailer = pattern(10, seed: 3)
        let more = pattern(1000, seed: 4)
        let last = pattern(5000, seed: 5)
        try await fixture.run { channel in
            head.withUnsafeBytes { h in
                big.withUnsafeBytes { b in trailer.withUnsafeBytes { t in channel.write([h, b, t]) } }
            }
            more.withUnsafeBytes { m in last.withUnsafeBytes { l in channel.write([m, l]) } }
        }
        let expected = head + big + trailer + more + last
        let received = await RawSocket.receive(fixture.peer.fd, count: expected.count, timeout: .seconds(60))
        #expect(received.count == expected.count)
        #expect(sameBytes(received, expected))
        #expect(fixture.recorder.failures.isEmpty)
        try await fixture.close()
    }

    @Test(arguments: Transport.allCases)
    func writesAfterPeerCloseFailWithoutSIGPIPE(_ transport: Transport) async throws {
        let loop = try EventLoop(name: "test-epipe")
        defer { loop.shutdown() }
        let fixture = try await ChannelFixture(transport, on: loop)
        defer { fixture.peer.close() }

        fixture.peer.close()
        let ended = await eventually { fixture.recorder.sawEOF }
        #expect(ended)

        // TCP takes the first write after the peer closed and answers it with a reset; keep
        // writing until the failure shows. A SIGPIPE would end this process here.
        let chunk = pattern(64 * 1024, seed: 17)
        for _ in 0..<500 where fixture.recorder.failures.isEmpty {
            try await fixture.write(chunk)
            try await Task.sleep(for: .milliseconds(10))
        }
        let failures = fixture.recorder.failures
        try #require(failures.count == 1, "expected one failure, got \(fixture.recorder.events)")
        #expect(failures[0].isConnectionReset, "unexpected error \(failures[0])")
        #expect(!fixture.recorder.failedInsideCall, "didFail was called from inside write()")
        let stillOpen = try await fixture.isOpen
        #expect(!stillOpen)

        // Writes to a failed channel are dropped quietly.
        try await fixture.write(chunk)
        try await Task.sleep(for: .milliseconds(50))
        #expect(fixture.recorder.failures.count == 1)
    }

    @Test(arguments: Transport.allCases)
    func shutdownWriteLetsThePeerReadEOFWhileTheChannelStillReads(_ transport: Transport) async throws {
        let loop = try EventLoop(name: "test-shutdown-write")
        defer { loop.shutdown() }
        let fixture = try await ChannelFixture(transport, on: loop)
        defer { fixture.peer.close() }

        let goodbye = Array("goodbye".utf8)
        try await fixture.run { channel in
            goodbye.withUnsafeBytes { channel.write($0) }
            channel.shutdownWrite()
        }
        let (bytes, sawEOF) = await RawSocket.receiveUntilEOF(fixture.peer.fd, timeout: .seconds(10))
        #expect(bytes == goodbye)
        #expect(sawEOF, "the peer never read end of stream after shutdownWrite")

        let reply = pattern(50_000, seed: 19)
        #expect(await RawSocket.send(fixture.peer.fd, reply) == reply.count)
        let all = await eventually { fixture.recorder.byteCount == reply.count }
        #expect(all, "the channel stopped reading after shutdownWrite")
        #expect(sameBytes(fixture.recorder.bytes, reply))
        #expect(!fixture.recorder.sawEOF)

        fixture.peer.close()
        let ended = await eventually { fixture.recorder.sawEOF }
        #expect(ended)
        #expect(fixture.recorder.failures.isEmpty)
        try await fixture.close()
    }

    /// After the peer half-closes, the channel can still write. When the end of stream arrived
    /// while reading was paused, the channel left epoll; its later writes must still drain.
    @Test(arguments: Transport.allCases, [false, true])
    func writesAfterThePeerHalfClosesStillDrain(_ transport: Transport, pausedWhenItArrives: Bool) async throws {
        let loop = try EventLoop(name: "test-half-close")
        defer { loop.shutdown() }
        let fixture = try await ChannelFixture(transport, on: loop, paused: pausedWhenItArrives)
        defer { fixture.peer.close() }

        fixture.peer.shutdownWrite()
        if pausedWhenItArrives {
            try await Task.sleep(for: .milliseconds(200))
            #expect(fixture.recorder.events.isEmpty)
            try await fixture.run { $0.resumeReading() }
        }
        let ended = await eventually { fixture.recorder.sawEOF }
        #expect(ended)

        let body = pattern(4 << 20, seed: 23)
        let pending = try await fixture.run { channel -> Int in
            body.withUnsafeBytes { channel.write($0) }
            return channel.pendingWriteBytes
        }
        // Generous: under a sanitizer and the whole suite's load 4 MiB can take many seconds.
        let received = await RawSocket.receive(fixture.peer.fd, count: body.count, timeout: .seconds(60))
        #expect(
            received.count == body.count,
            "the peer got \(received.count) of \(body.count) bytes; \(pending) were queued after the write"
        )
        #expect(sameBytes(received, body))
        if pending > 0 {
            let drained = await eventually(timeout: .seconds(2)) { fixture.recorder.drainCount == 1 }
            #expect(drained)
        }
        try await fixture.close()
    }

    // MARK: Failures and closing

    @Test(arguments: [false, true])
    func peerResetFailsWithConnectionReset(whilePaused: Bool) async throws {
        let loop = try EventLoop(name: "test-reset")
        defer { loop.shutdown() }
        let fixture = try await ChannelFixture(.tcpLoopback, on: loop, paused: whilePaused)
        defer { fixture.peer.close() }

        fixture.peer.reset()
        let failed = await eventually { !fixture.recorder.failures.isEmpty }
        try #require(failed, "no failure after the peer reset; events: \(fixture.recorder.events)")
        let failures = fixture.recorder.failures
        #expect(failures.count == 1)
        #expect(failures[0].isConnectionReset, "unexpected error \(failures[0])")
        #expect(failures[0].code == ECONNRESET)
        let stillOpen = try await fixture.isOpen
        #expect(!stillOpen)
    }

    @Test(arguments: Transport.allCases)
    func closeReleasesTheSocketAndStopsCallbacks(_ transport: Transport) async throws {
        let loop = try EventLoop(name: "test-close")
        defer { loop.shutdown() }
        let fixture = try await ChannelFixture(transport, on: loop)
        defer { fixture.peer.close() }

        try await fixture.close()
        let stillOpen = try await fixture.isOpen
        #expect(!stillOpen)
        let (bytes, sawEOF) = await RawSocket.receiveUntilEOF(fixture.peer.fd, timeout: .seconds(10))
        #expect(bytes.isEmpty)
        #expect(sawEOF, "closing the channel did not close its socket")

        _ = await RawSocket.send(fixture.peer.fd, Array("too late".utf8), timeout: .seconds(1))
        try await fixture.write(Array("ignored".utf8))
        try await fixture.close()
        try await Task.sleep(for: .milliseconds(100))
        #expect(fixture.recorder.events.isEmpty)
        let pendingAtEnd = try await fixture.run { $0.pendingWriteBytes }
        #expect(pendingAtEnd == 0)
    }

    /// Level-triggered epoll reports a hang-up whatever the interest. A channel that has read
    /// end of stream and sits idle must not make its loop spin on that report. On TCP the
    /// hang-up needs both directions closed, hence the shutdownWrite.
    @Test(arguments: Transport.allCases)
    func anIdleChannelAfterEndOfStreamDoesNotSpinTheLoop(_ transport: Transport) async throws {
        let loop = try EventLoop(name: "test-idle")
        defer { loop.shutdown() }
        let fixture = try await ChannelFixture(transport, on: loop)
        defer { fixture.peer.close() }

        if transport == .tcpLoopback {
            try await fixture.run { $0.shutdownWrite() }
        }
        fixture.peer.close()
        let ended = await eventually { fixture.recorder.sawEOF }
        try #require(ended)

        let clock = try await onLoop(loop) { currentThreadCPUClock() }
        let before = cpuTime(clock)
        try await Task.sleep(for: .seconds(1))
        let used = cpuTime(clock) - before
        #expect(used < .milliseconds(250), "the loop thread burned \(used) of CPU in one idle second after end of stream")
        try await fixture.close()
    }
}
