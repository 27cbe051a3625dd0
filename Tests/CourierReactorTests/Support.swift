import CourierReactor
import CourierSync
import Foundation
import Glibc
import Testing

// Shared helpers for the reactor tests: recorders that any thread may write, waiting with a
// deadline, running work on a loop, and raw sockets on loopback for the far end of a test.

/// Collects values from any thread; tests read or wait on it from theirs.
final class Recorder<Value: Sendable>: Sendable {
    private let values = Mutex<[Value]>([])

    init() {}

    func record(_ value: Value) {
        values.withLock { $0.append(value) }
    }

    var all: [Value] { values.withLock { $0 } }
    var count: Int { values.withLock { $0.count } }

    /// Waits until at least `count` values are recorded or `timeout` passes; returns what is there.
    @discardableResult
    func wait(for count: Int = 1, timeout: Duration = .seconds(10)) async -> [Value] {
        _ = await eventually(timeout: timeout) { self.count >= count }
        return all
    }
}

/// A flag any thread may set and read.
final class Flag: Sendable {
    private let value = Mutex(false)
    init() {}
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
    /// Sets the flag; true only for the first caller.
    func setFirst() -> Bool {
        value.withLock { value in
            defer { value = true }
            return !value
        }
    }
}

/// Polls `condition` until it holds or `timeout` passes; never sleeps long, so it adds no
/// latency worth mentioning, and never asserts a lower bound.
func eventually(timeout: Duration = .seconds(10), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while true {
        if condition() { return true }
        if ContinuousClock.now >= deadline || Task.isCancelled { return condition() }
        try? await Task.sleep(for: .milliseconds(2))
    }
}

/// Runs `body` on `loop` and returns its result to the caller.
@discardableResult
func onLoop<T: Sendable>(_ loop: EventLoop, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        loop.execute {
            continuation.resume(with: Result { try body() })
        }
    }
}

/// The CPU clock of the calling thread, readable from other threads.
func currentThreadCPUClock() -> clockid_t {
    var clock = clockid_t()
    _ = pthread_getcpuclockid(pthread_self(), &clock)
    return clock
}

/// CPU time consumed so far on `clock`.
func cpuTime(_ clock: clockid_t) -> Duration {
    var time = timespec()
    _ = clock_gettime(clock, &time)
    return .seconds(time.tv_sec) + .nanoseconds(time.tv_nsec)
}

/// Deterministic bytes for checking order and completeness.
func pattern(_ count: Int, seed: Int = 0) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: count)
    bytes.withUnsafeMutableBufferPointer { buffer in
        for index in 0..<count { buffer[index] = UInt8(truncatingIfNeeded: (index &+ seed) % 251) }
    }
    return bytes
}

struct SocketFailure: Error, CustomStringConvertible {
    var description: String
    init(_ call: String) { description = "\(call): \(String(cString: strerror(errno))) (errno \(errno))" }
}

/// Raw sockets on loopback: the far end of the channel under test.
enum RawSocket {
    static let streamType = Int32(SOCK_STREAM.rawValue)

    static func setNonBlocking(_ fd: Int32) {
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
    }

    /// A connected pair from socketpair(AF_UNIX, SOCK_STREAM), both non-blocking.
    static func unixPair() throws -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, streamType, 0, &fds) == 0 else { throw SocketFailure("socketpair") }
        setNonBlocking(fds[0])
        setNonBlocking(fds[1])
        return (fds[0], fds[1])
    }

    static func loopbackV4(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        return address
    }

    static func withSockAddr<R>(_ address: inout sockaddr_in, _ body: (UnsafeMutablePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    /// A listening TCP socket on 127.0.0.1 with a kernel-chosen port; it never accepts unless
    /// asked to.
    static func tcpListener(backlog: Int32) throws -> (fd: Int32, port: UInt16) {
        let fd = socket(AF_INET, streamType, 0)
        guard fd >= 0 else { throw SocketFailure("socket") }
        var address = loopbackV4(port: 0)
        guard withSockAddr(&address, { bind(fd, $0, $1) }) == 0 else {
            let failure = SocketFailure("bind")
            Glibc.close(fd)
            throw failure
        }
        guard listen(fd, backlog) == 0 else {
            let failure = SocketFailure("listen")
            Glibc.close(fd)
            throw failure
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return (fd, UInt16(bigEndian: address.sin_port))
    }

    /// A connected TCP pair over 127.0.0.1 (client, accepted server side), both non-blocking.
    static func tcpPair() throws -> (Int32, Int32) {
        let (listener, port) = try tcpListener(backlog: 4)
        defer { Glibc.close(listener) }
        let client = socket(AF_INET, streamType, 0)
        guard client >= 0 else { throw SocketFailure("socket") }
        var address = loopbackV4(port: port)
        guard withSockAddr(&address, { connect(client, $0, $1) }) == 0 else {
            let failure = SocketFailure("connect")
            Glibc.close(client)
            throw failure
        }
        let server = accept(listener, nil, nil)
        guard server >= 0 else {
            let failure = SocketFailure("accept")
            Glibc.close(client)
            throw failure
        }
        setNonBlocking(client)
        setNonBlocking(server)
        return (client, server)
    }

    /// Starts a non-blocking connect to 127.0.0.1:`port`; returns the socket.
    static func startConnect(port: UInt16) -> Int32 {
        let fd = socket(AF_INET, streamType, 0)
        setNonBlocking(fd)
        var address = loopbackV4(port: port)
        _ = withSockAddr(&address) { connect(fd, $0, $1) }
        return fd
    }

    /// Sets SO_LINGER 0 so that closing sends a reset.
    static func setLingerZero(_ fd: Int32) {
        var option = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
    }

    /// Sends all of `bytes` on a non-blocking socket, never raising SIGPIPE; returns the count
    /// sent (less than asked when the socket failed or `timeout` passed).
    @discardableResult
    static func send(_ fd: Int32, _ bytes: [UInt8], timeout: Duration = .seconds(30)) async -> Int {
        let deadline = ContinuousClock.now + timeout
        var offset = 0
        while offset < bytes.count, ContinuousClock.now < deadline {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent > 0 {
                offset += sent
            } else if sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                try? await Task.sleep(for: .milliseconds(1))
            } else {
                break
            }
        }
        return offset
    }

    /// Receives until `count` bytes, end of stream, an error or `timeout`; with `pause`, sleeps
    /// after each read to play a slow reader.
    static func receive(
        _ fd: Int32, count: Int, chunk: Int = 64 * 1024, pause: Duration? = nil, timeout: Duration = .seconds(30)
    ) async -> [UInt8] {
        await receiveUntilEOF(fd, limit: count, chunk: chunk, pause: pause, timeout: timeout).bytes
    }

    /// Receives until end of stream (or `limit` bytes, an error, `timeout`); tells whether the
    /// end of stream was seen. The reading runs on a thread of its own, waiting in poll(2) and
    /// pausing in a plain sleep: on the cooperative pool, which the suite's blocking tests hold
    /// at times, every wait could last far longer than asked, and a slow reader of 8 MiB ran
    /// out of time under ThreadSanitizer.
    static func receiveUntilEOF(
        _ fd: Int32, limit: Int = .max, chunk: Int = 64 * 1024, pause: Duration? = nil, timeout: Duration = .seconds(30)
    ) async -> (bytes: [UInt8], sawEOF: Bool) {
        await withCheckedContinuation { continuation in
            let reader = Thread {
                continuation.resume(returning: receiveBlocking(fd, limit: limit, chunk: chunk, pause: pause, timeout: timeout))
            }
            reader.name = "test-receive"
            reader.start()
        }
    }

    private static func receiveBlocking(
        _ fd: Int32, limit: Int, chunk: Int, pause: Duration?, timeout: Duration
    ) -> (bytes: [UInt8], sawEOF: Bool) {
        let deadline = ContinuousClock.now + timeout
        let pauseSeconds = pause.map { Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18 }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: chunk)
        while received.count < limit {
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero else { break }
            let wanted = min(chunk, limit - received.count)
            let count = buffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, wanted, 0) }
            if count > 0 {
                received += buffer[0..<count]
                if let pauseSeconds { Thread.sleep(forTimeInterval: pauseSeconds) }
            } else if count == 0 {
                return (received, true)
            } else if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR {
                var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let left = remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000
                let milliseconds = Int32(clamping: min(100, max(1, left)))
                _ = poll(&descriptor, 1, milliseconds)
            } else {
                break
            }
        }
        return (received, false)
    }
}

/// A raw socket a test owns; closed once, however many times asked.
final class OwnedSocket: Sendable {
    private let state: Mutex<Int32>

    init(_ fd: Int32) { state = Mutex(fd) }

    /// The descriptor, or -1 once closed.
    var fd: Int32 { state.withLock { $0 } }

    func close() {
        let fd = state.withLock { fd -> Int32 in
            defer { fd = -1 }
            return fd
        }
        if fd >= 0 { Glibc.close(fd) }
    }

    /// Closes with SO_LINGER 0: the peer gets a reset.
    func reset() {
        let fd = self.fd
        if fd >= 0 { RawSocket.setLingerZero(fd) }
        close()
    }

    /// Half-closes: the peer reads end of stream, this side can still read.
    func shutdownWrite() {
        let fd = self.fd
        if fd >= 0 { _ = Glibc.shutdown(fd, Int32(SHUT_WR)) }
    }
}

/// Where the names of /etc/hosts come from, to keep tests from asking DNS anything.
enum LocalNames {
    /// True when getaddrinfo consults /etc/hosts before DNS.
    static let filesComeFirst: Bool = {
        guard let text = try? String(contentsOfFile: "/etc/nsswitch.conf", encoding: .utf8) else { return false }
        for line in text.split(separator: "\n") {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            if fields.first == "hosts:" { return fields.dropFirst().first == "files" }
        }
        return false
    }()

    /// Address families /etc/hosts gives "localhost" (true: IPv6).
    static let localhostFamilies: Set<Bool> = {
        guard let text = try? String(contentsOfFile: "/etc/hosts", encoding: .utf8) else { return [] }
        var families: Set<Bool> = []
        for line in text.split(separator: "\n") {
            let content = line.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let fields = content.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard fields.count >= 2, fields.dropFirst().contains("localhost") else { continue }
            families.insert(fields[0].contains(":"))
        }
        return families
    }()

    /// "localhost" resolves for IPv4 from /etc/hosts alone.
    static var localhostIPv4FromHostsFile: Bool { filesComeFirst && localhostFamilies.contains(false) }

    /// "localhost" resolves for both families from /etc/hosts alone, so a two-family lookup
    /// never reaches DNS.
    static var localhostBothFamiliesFromHostsFile: Bool {
        filesComeFirst && localhostFamilies.contains(false) && localhostFamilies.contains(true)
    }
}
