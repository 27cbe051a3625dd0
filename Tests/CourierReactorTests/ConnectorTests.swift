import CourierReactor
import CourierSync
import Foundation
import Glibc
import Testing
import _CourierTestSupport

private typealias Outcome = Result<ConnectedSocket, ConnectError>

/// A dial's outcomes (there must be exactly one) and when each arrived.
private struct Completion: Sendable {
    var outcome: Outcome
    var at: MonotonicInstant
    var onLoop: Bool
}

private let loopback4: [UInt8] = [127, 0, 0, 1]
private let loopback6: [UInt8] = Array(repeating: 0, count: 15) + [1]

/// A fresh Unix socket path in /tmp, short enough for sun_path.
private func temporarySocketPath(_ name: String) -> String {
    "/tmp/courier-\(name)-\(getpid())-\(UUID().uuidString.prefix(8)).sock"
}

/// A `Listener` on the loop that accepts and counts connections, closing each at once.
private struct TestListener: Sendable {
    let listener: LoopBound<Listener>
    let address: SocketAddress
    let accepted: Recorder<Bool>

    private struct Started: Sendable {
        var listener: LoopBound<Listener>
        var address: SocketAddress
    }

    init(_ address: SocketAddress, on loop: EventLoop) async throws {
        let accepted = Recorder<Bool>()
        let started = try await onLoop(loop) {
            let listener = try Listener(address: address, loop: loop) { fd in
                accepted.record(true)
                _ = Glibc.close(fd)
            }
            return Started(listener: LoopBound(listener, loop: loop), address: listener.address)
        }
        self.listener = started.listener
        self.address = started.address
        self.accepted = accepted
    }

    var port: UInt16 { address.port ?? 0 }

    func close() async throws {
        let listener = self.listener
        try await onLoop(listener.loop) { listener.value.close() }
        if case .unix(let path) = address { unlink(path) }
    }
}

/// Starts a `Connector` on the loop; returns it (for cancelling) and the recorder of outcomes.
private func startDial(
    _ target: Connector.Target, on loop: EventLoop, deadline: MonotonicInstant
) async throws -> (LoopBound<Connector>, Recorder<Completion>) {
    let completions = Recorder<Completion>()
    let connector = try await onLoop(loop) {
        let connector = Connector(target: target, loop: loop)
        connector.start(deadline: deadline) { outcome in
            completions.record(Completion(outcome: outcome, at: .now, onLoop: loop.inEventLoop))
        }
        return LoopBound(connector, loop: loop)
    }
    return (connector, completions)
}

/// Dials and waits for the one outcome.
private func dial(
    _ target: Connector.Target, on loop: EventLoop, within timeout: Duration = .seconds(10)
) async throws -> Completion {
    let (_, completions) = try await startDial(target, on: loop, deadline: .now + timeout)
    let all = await completions.wait(for: 1, timeout: timeout + .seconds(10))
    let completion = try #require(all.first, "the connector never completed")
    #expect(completion.onLoop, "completion ran off the loop")
    return completion
}

/// The connected socket of a successful outcome; records an issue otherwise.
private func connectedSocket(_ completion: Completion, sourceLocation: SourceLocation = #_sourceLocation) -> ConnectedSocket? {
    switch completion.outcome {
    case .success(let socket): return socket
    case .failure(let error):
        Issue.record("expected a connection, got \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

/// The error of a failed outcome; records an issue (and closes the socket) otherwise.
private func connectError(_ completion: Completion, sourceLocation: SourceLocation = #_sourceLocation) -> ConnectError? {
    switch completion.outcome {
    case .success(let socket):
        Issue.record("expected a failure, connected to \(socket.address)", sourceLocation: sourceLocation)
        Glibc.close(socket.fd)
        return nil
    case .failure(let error): return error
    }
}

/// Wraps a connected socket in a channel to read its peer, then closes it.
private func remoteAddress(of socket: ConnectedSocket, on loop: EventLoop) async throws -> SocketAddress? {
    try await onLoop(loop) {
        let channel = try StreamChannel(fd: socket.fd, loop: loop)
        defer { channel.close() }
        return channel.remoteAddress
    }
}

@Suite struct ConnectorTests {
    // MARK: Connecting

    @Test func connectsToANumericIPv4Address() async throws {
        let loop = try EventLoop(name: "test-connect-v4")
        defer { loop.shutdown() }
        let server = try await TestListener(.v4(host: loopback4, port: 0), on: loop)
        let port = server.port
        #expect(port != 0)

        let completion = try await dial(.host("127.0.0.1", port: port), on: loop)
        if let socket = connectedSocket(completion) {
            #expect(socket.address == .v4(host: loopback4, port: port))
            let remote = try await remoteAddress(of: socket, on: loop)
            #expect(remote == server.address)
        }
        let accepted = await server.accepted.wait(for: 1)
        #expect(accepted.count == 1)
        try await server.close()
    }

    @Test func connectsToABracketedIPv6Literal() async throws {
        let loop = try EventLoop(name: "test-connect-v6")
        defer { loop.shutdown() }
        let server: TestListener
        do {
            server = try await TestListener(.v6(host: loopback6, port: 0, scopeID: 0), on: loop)
        } catch {
            try Test.cancel("no IPv6 loopback here: \(error)")
        }
        let completion = try await dial(.host("[::1]", port: server.port), on: loop)
        if let socket = connectedSocket(completion) {
            #expect(socket.address == .v6(host: loopback6, port: server.port, scopeID: 0))
            Glibc.close(socket.fd)
        }
        try await server.close()
    }

    /// "localhost" goes through getaddrinfo for both families and Happy Eyeballs. The listener
    /// is IPv4 only, so an IPv6 attempt to ::1 is refused and the race must still connect.
    /// Runs only where /etc/hosts answers both lookups, so that nothing reaches DNS.
    @Test(.enabled(if: LocalNames.localhostBothFamiliesFromHostsFile, "/etc/hosts must map localhost for IPv4 and IPv6"))
    func connectsToLocalhostThroughHappyEyeballs() async throws {
        let loop = try EventLoop(name: "test-connect-localhost")
        defer { loop.shutdown() }
        let server = try await TestListener(.v4(host: loopback4, port: 0), on: loop)
        let completion = try await dial(.host("localhost", port: server.port), on: loop)
        if let socket = connectedSocket(completion) {
            #expect(socket.address.port == server.port)
            #expect(socket.address == .v4(host: loopback4, port: server.port))
            Glibc.close(socket.fd)
        }
        try await server.close()
    }

    @Test func connectsToAUnixSocketPath() async throws {
        let loop = try EventLoop(name: "test-connect-unix")
        defer { loop.shutdown() }
        let path = temporarySocketPath("connector")
        let server = try await TestListener(.unix(path: path), on: loop)
        let completion = try await dial(.unix(path: path), on: loop)
        if let socket = connectedSocket(completion) {
            #expect(socket.address == .unix(path: path))
            let remote = try await remoteAddress(of: socket, on: loop)
            #expect(remote == .unix(path: path))
        }
        let accepted = await server.accepted.wait(for: 1)
        #expect(accepted.count == 1)
        try await server.close()
    }

    // MARK: Failing

    @Test func refusedPortFailsWithConnectionRefused() async throws {
        let loop = try EventLoop(name: "test-refused")
        defer { loop.shutdown() }
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        let port = UInt16(closed.port)
        let completion = try await dial(.host("127.0.0.1", port: port), on: loop)
        guard let error = connectError(completion) else { return }
        guard case .connect(let systemError) = error else {
            Issue.record("expected .connect, got \(error)")
            return
        }
        #expect(systemError.isConnectionRefused, "unexpected \(systemError)")
    }

    @Test func missingUnixSocketPathFailsToConnect() async throws {
        let loop = try EventLoop(name: "test-missing-path")
        defer { loop.shutdown() }
        let path = temporarySocketPath("missing")
        let completion = try await dial(.unix(path: path), on: loop)
        guard let error = connectError(completion) else { return }
        guard case .connect(let systemError) = error else {
            Issue.record("expected .connect, got \(error)")
            return
        }
        #expect(systemError.code == ENOENT, "unexpected \(systemError)")
    }

    /// A listener whose accept queue is full drops new handshakes, so a connect to it neither
    /// succeeds nor fails: the Connector's deadline must end it.
    @Test func deadlinePassingFailsWithTimedOut() async throws {
        let loop = try EventLoop(name: "test-timeout")
        defer { loop.shutdown() }
        let (listener, port) = try RawSocket.tcpListener(backlog: 0)
        var fillers: [Int32] = []
        defer {
            for fd in fillers { Glibc.close(fd) }
            Glibc.close(listener)
        }
        for _ in 0..<4 { fillers.append(RawSocket.startConnect(port: port)) }
        try await Task.sleep(for: .milliseconds(100))

        // Probe: if the kernel still completes handshakes, a connect cannot be made to hang.
        let probe = RawSocket.startConnect(port: port)
        fillers.append(probe)
        var poll = pollfd(fd: probe, events: Int16(POLLOUT), revents: 0)
        if Glibc.poll(&poll, 1, 300) > 0 && RawSocket.pendingError(probe) == 0 {
            try Test.cancel("the kernel completed a handshake past a full backlog (SYN cookies?); cannot make a connect hang")
        }

        let deadline = MonotonicInstant.now + .milliseconds(300)
        let (_, completions) = try await startDial(.host("127.0.0.1", port: port), on: loop, deadline: deadline)
        // A loaded machine may run the loop seconds late: only a minute's lateness is a fault.
        let all = await completions.wait(for: 1, timeout: .seconds(90))
        let completion = try #require(all.first, "the connector never completed")
        guard let error = connectError(completion) else { return }
        #expect(error == .timedOut)
        #expect(completion.at >= deadline, "timed out before the deadline")
        #expect(completion.at - deadline < .seconds(60))
        try await Task.sleep(for: .milliseconds(100))
        #expect(completions.count == 1)
    }

    /// A Unix listener with a full backlog makes a non-blocking connect fail with EAGAIN; the
    /// socket is left unconnected. The Connector must not hand that socket out as connected.
    @Test func fullUnixBacklogIsNotReportedAsConnected() async throws {
        let loop = try EventLoop(name: "test-unix-backlog")
        defer { loop.shutdown() }
        let path = temporarySocketPath("backlog")
        let listener = try RawSocket.unixListener(path: path, backlog: 0)
        var fillers: [Int32] = []
        defer {
            for fd in fillers { Glibc.close(fd) }
            Glibc.close(listener)
            unlink(path)
        }
        var full = false
        for _ in 0..<64 where !full {
            let (fd, error) = RawSocket.startUnixConnect(path: path)
            fillers.append(fd)
            full = error == EAGAIN
        }
        if !full { try Test.cancel("the Unix listener's backlog never filled") }

        let completion = try await dial(.unix(path: path), on: loop, within: .milliseconds(300))
        switch completion.outcome {
        case .success(let socket):
            let connected = RawSocket.isConnected(socket.fd)
            Glibc.close(socket.fd)
            Issue.record("a connect that failed with EAGAIN was reported as connected (getpeername succeeds: \(connected))")
        case .failure(let error):
            // Waiting out the deadline or reporting the EAGAIN are both fair.
            switch error {
            case .timedOut, .connect: break
            default: Issue.record("unexpected \(error)")
            }
        }
    }

    // MARK: Cancelling

    @Test func cancelCompletesWithCancelledExactlyOnce() async throws {
        let loop = try EventLoop(name: "test-cancel")
        defer { loop.shutdown() }
        let server = try await TestListener(.v4(host: loopback4, port: 0), on: loop)
        let completions = Recorder<Completion>()
        let port = server.port
        let deadline = MonotonicInstant.now + .milliseconds(200)
        try await onLoop(loop) {
            let connector = Connector(target: .host("127.0.0.1", port: port), loop: loop)
            connector.start(deadline: deadline) { outcome in
                completions.record(Completion(outcome: outcome, at: .now, onLoop: loop.inEventLoop))
            }
            // The attempt is in flight: the connect has not completed yet.
            connector.cancel()
            connector.cancel()
        }
        // Outlive the deadline, so a stray timer would have its chance to complete again.
        try await Task.sleep(for: .milliseconds(500))
        let all = completions.all
        #expect(all.count == 1)
        if let first = all.first {
            guard let error = connectError(first) else { return }
            #expect(error == .cancelled)
        }
        try await server.close()
    }

    @Test func cancelAfterSuccessChangesNothing() async throws {
        let loop = try EventLoop(name: "test-cancel-late")
        defer { loop.shutdown() }
        let server = try await TestListener(.v4(host: loopback4, port: 0), on: loop)
        let (connector, completions) = try await startDial(
            .host("127.0.0.1", port: server.port), on: loop, deadline: .now + .seconds(10)
        )
        let first = await completions.wait(for: 1)
        let completion = try #require(first.first)
        guard let socket = connectedSocket(completion) else { return }
        try await onLoop(loop) { connector.value.cancel() }
        try await Task.sleep(for: .milliseconds(100))
        #expect(completions.count == 1)
        // The socket handed out is still ours and open.
        #expect(fcntl(socket.fd, F_GETFD) != -1)
        Glibc.close(socket.fd)
        try await server.close()
    }

    // MARK: Resolver

    @Test func resolverLooksUpANumericIPv4Host() {
        let result = Resolver.lookUp(host: "127.0.0.1", port: 8080, family: .inet)
        #expect(result == .success([.v4(host: loopback4, port: 8080)]))
    }

    @Test func resolverLooksUpANumericIPv6Host() {
        let result = Resolver.lookUp(host: "::1", port: 443, family: .inet6)
        #expect(result == .success([.v6(host: loopback6, port: 443, scopeID: 0)]))
    }

    @Test func resolverRejectsAnIPv4LiteralForIPv6() {
        // glibc answers EAI_ADDRFAMILY without consulting any name service.
        let result = Resolver.lookUp(host: "127.0.0.1", port: 80, family: .inet6)
        #expect(result == .failure(.hostNotFound("127.0.0.1")))
    }

    @Test(.enabled(if: LocalNames.localhostIPv4FromHostsFile, "/etc/hosts must map localhost for IPv4"))
    func resolverLooksUpLocalhostFromTheHostsFile() throws {
        let result = Resolver.lookUp(host: "localhost", port: 8080, family: .inet)
        let addresses = try result.get()
        #expect(!addresses.isEmpty)
        #expect(addresses.contains(.v4(host: loopback4, port: 8080)))
        for address in addresses {
            guard case .v4(let host, let port) = address else {
                Issue.record("not an IPv4 address: \(address)")
                continue
            }
            #expect(host.first == 127, "\(address) is not a loopback address")
            #expect(port == 8080)
        }
    }

    @Test(.enabled(if: LocalNames.localhostBothFamiliesFromHostsFile, "/etc/hosts must map localhost for IPv6"))
    func resolverLooksUpLocalhostForIPv6FromTheHostsFile() throws {
        let addresses = try Resolver.lookUp(host: "localhost", port: 8080, family: .inet6).get()
        #expect(addresses.contains(.v6(host: loopback6, port: 8080, scopeID: 0)))
    }

    @Test func resolveAnswersOnTheLoop() async throws {
        let loop = try EventLoop(name: "test-resolve")
        defer { loop.shutdown() }
        let answers = Recorder<Result<[SocketAddress], ResolutionError>>()
        let onLoopFlags = Recorder<Bool>()
        try await onLoop(loop) {
            Resolver().resolve(host: "127.0.0.1", port: 99, family: .inet, on: loop) { result in
                onLoopFlags.record(loop.inEventLoop)
                answers.record(result)
            }
        }
        let all = await answers.wait(for: 1)
        #expect(all == [.success([.v4(host: loopback4, port: 99)])])
        #expect(onLoopFlags.all == [true])
    }
}

extension RawSocket {
    /// The pending error of a socket (SO_ERROR).
    static func pendingError(_ fd: Int32) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        return getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) == 0 ? value : errno
    }

    /// True when the socket has a peer.
    static func isConnected(_ fd: Int32) -> Bool {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        return withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) }
        } == 0
    }

    static func withUnixAddress<R>(_ path: String, _ body: (UnsafeMutablePointer<sockaddr>, socklen_t) -> R) -> R {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8.prefix(raw.count - 1))
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// A listening Unix socket at `path` that never accepts.
    static func unixListener(path: String, backlog: Int32) throws -> Int32 {
        unlink(path)
        let fd = socket(AF_UNIX, streamType, 0)
        guard fd >= 0 else { throw SocketFailure("socket") }
        guard withUnixAddress(path, { bind(fd, $0, $1) }) == 0, listen(fd, backlog) == 0 else {
            let failure = SocketFailure("bind/listen")
            Glibc.close(fd)
            throw failure
        }
        return fd
    }

    /// A non-blocking connect to a Unix socket path; the socket and the errno of the connect
    /// (0 when it connected at once).
    static func startUnixConnect(path: String) -> (fd: Int32, error: Int32) {
        let fd = socket(AF_UNIX, streamType, 0)
        setNonBlocking(fd)
        let result = withUnixAddress(path) { connect(fd, $0, $1) }
        return (fd, result == 0 ? 0 : errno)
    }
}
