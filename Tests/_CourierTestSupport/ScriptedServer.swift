import CourierSync
import Foundation
import Glibc

/// A request as the scripted server read it.
public struct ScriptedRequest: Sendable {
    public var method: String
    public var target: String
    public var version: String
    /// Header fields in order, names as sent.
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// The request head exactly as received.
    public var rawHead: String

    /// The first value of a header, ignoring case.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// Every header with this name, ignoring case.
    public func headers(named name: String) -> [String] {
        headers.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
    }
}

/// One accepted connection of a ``ScriptedServer``: blocking reads and writes of exact bytes.
public final class ScriptedConnection: @unchecked Sendable {
    public let index: Int
    private let fd: Int32
    private var buffer: [UInt8] = []
    private let closed = Mutex(false)

    init(fd: Int32, index: Int) {
        self.fd = fd
        self.index = index
    }

    /// Reads one request (head and body framed by Content-Length or chunked); nil on EOF or
    /// after `timeout` seconds without a complete request.
    public func readRequest(timeout: TimeInterval = 10) -> ScriptedRequest? {
        let deadline = Date().addingTimeInterval(timeout)
        guard let headEnd = readUntil(Array("\r\n\r\n".utf8), deadline: deadline) else { return nil }
        let headBytes = Array(buffer[..<headEnd])
        buffer.removeFirst(headEnd + 4)
        let rawHead = String(decoding: headBytes, as: UTF8.self)
        var lines = rawHead.components(separatedBy: "\r\n")
        let requestLine = lines.removeFirst().split(separator: " ", maxSplits: 2).map(String.init)
        guard requestLine.count == 3 else { return nil }
        var headers: [(String, String)] = []
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        var request = ScriptedRequest(method: requestLine[0], target: requestLine[1], version: requestLine[2], headers: headers, body: [], rawHead: rawHead)
        if request.header("Transfer-Encoding")?.lowercased() == "chunked" {
            while true {
                guard let lineEnd = readUntil(Array("\r\n".utf8), deadline: deadline) else { return nil }
                let sizeLine = String(decoding: buffer[..<lineEnd], as: UTF8.self)
                buffer.removeFirst(lineEnd + 2)
                guard let size = Int(sizeLine.split(separator: ";")[0], radix: 16) else { return nil }
                guard readCount(size + 2, deadline: deadline) else { return nil }
                if size == 0 {
                    buffer.removeFirst(2)
                    break
                }
                request.body += buffer[..<size]
                buffer.removeFirst(size + 2)
            }
        } else if let length = request.header("Content-Length").flatMap(Int.init), length > 0 {
            guard readCount(length, deadline: deadline) else { return nil }
            request.body = Array(buffer[..<length])
            buffer.removeFirst(length)
        }
        return request
    }

    /// Returns what is buffered or arrives within `timeout` (empty on EOF or timeout).
    public func readAvailable(timeout: TimeInterval = 10) -> [UInt8] {
        if buffer.isEmpty { _ = fill(deadline: Date().addingTimeInterval(timeout)) }
        defer { buffer.removeAll() }
        return buffer
    }

    /// Writes bytes as given.
    public func write(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent < 0 && errno == EINTR { continue }
            if sent <= 0 { return }
            offset += sent
        }
    }

    /// Writes a string's UTF-8 bytes as given (write "\r\n" yourself).
    public func write(_ text: String) {
        write(Array(text.utf8))
    }

    /// Sends a complete response with Content-Length.
    public func respond(status: Int = 200, reason: String = "OK", headers: [(String, String)] = [], body: [UInt8] = []) {
        var head = "HTTP/1.1 \(status) \(reason)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !headers.contains(where: { $0.0.lowercased() == "content-length" || $0.0.lowercased() == "transfer-encoding" }) {
            head += "Content-Length: \(body.count)\r\n"
        }
        write(Array((head + "\r\n").utf8) + body)
    }

    /// Half-closes: the client reads end of stream.
    public func shutdownWrite() {
        shutdown(fd, Int32(SHUT_WR))
    }

    /// Shuts both directions down, unless already closed: the peer and a blocked read see end
    /// of stream.
    func shutdownBoth() {
        closed.withLock { done in
            if !done { shutdown(fd, Int32(SHUT_RDWR)) }
        }
    }

    /// Closes the socket.
    public func close() {
        let first = closed.withLock { done -> Bool in
            defer { done = true }
            return !done
        }
        if first { Glibc.close(fd) }
    }

    /// Closes with a TCP reset (SO_LINGER 0).
    public func reset() {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close()
    }

    /// Reads until the peer closes (or `timeout`); returns what arrived.
    @discardableResult
    public func readToEOF(timeout: TimeInterval = 10) -> [UInt8] {
        let deadline = Date().addingTimeInterval(timeout)
        while fill(deadline: deadline) {}
        defer { buffer.removeAll() }
        return buffer
    }

    private func readUntil(_ marker: [UInt8], deadline: Date) -> Int? {
        while true {
            if let index = find(marker) { return index }
            guard fill(deadline: deadline) else { return nil }
        }
    }

    private func readCount(_ count: Int, deadline: Date) -> Bool {
        while buffer.count < count {
            guard fill(deadline: deadline) else { return false }
        }
        return true
    }

    private func find(_ marker: [UInt8]) -> Int? {
        guard buffer.count >= marker.count else { return nil }
        for start in 0...(buffer.count - marker.count) where buffer[start..<(start + marker.count)].elementsEqual(marker) {
            return start
        }
        return nil
    }

    /// Reads what is available; false on EOF, error or deadline. A signal that interrupts the
    /// wait (SIGCHLD, when a test's child process exits) is not an end: the wait goes on.
    /// Taking EINTR for one made a script stop answering a kept-alive connection mid-test.
    private func fill(deadline: Date) -> Bool {
        while true {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { return false }
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Int32(max(1, remaining * 1000)))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { return false }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return false }
            buffer += chunk[..<count]
            return true
        }
    }
}

/// A raw-socket HTTP server on 127.0.0.1 that runs a script per connection, for the faults no
/// real server produces on demand: truncated bodies, bad framing, stalls, stale connections.
///
/// It stops when ``stop()`` is called or when the last reference to it goes: its accepting
/// thread holds only the listener's state (``Acceptor``), not the server, so a test that lets
/// its server go leaves no thread blocked in `accept` behind.
public final class ScriptedServer: @unchecked Sendable {
    public let port: Int
    private let acceptor: Acceptor

    /// Connections accepted so far.
    public var connectionCount: Int { acceptor.accepted.load(ordering: .relaxed) }

    /// Starts listening; `script` runs on its own thread for every connection, which is closed
    /// when the script returns.
    public init(_ script: @escaping @Sendable (ScriptedConnection) -> Void) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            Glibc.close(fd)
            throw TestServerError("scripted server cannot listen: errno \(errno)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        self.port = Int(UInt16(bigEndian: address.sin_port))
        let acceptor = Acceptor(listener: fd)
        self.acceptor = acceptor
        let thread = Thread { acceptor.run(script) }
        thread.name = "scripted-server-\(port)"
        thread.start()
    }

    deinit { acceptor.stop() }

    public var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }

    public func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

    /// Stops accepting and ends every connection. A connection is shut down, not closed: its
    /// script sees end of stream and returns, and its own thread closes the descriptor, so a
    /// script still reading never reads from a descriptor number the process has reused.
    public func stop() { acceptor.stop() }

    /// The listening socket and the connections it accepted: all the accepting thread holds.
    private final class Acceptor: @unchecked Sendable {
        let listener: Int32
        let accepted = Atomic<Int>(0)
        private let stopped = Atomic<Bool>(false)
        private let connections = Mutex<[ScriptedConnection]>([])

        init(listener: Int32) {
            self.listener = listener
        }

        /// Shuts the listener down, which ends a wait in `accept`; the accepting thread closes
        /// it on its way out, so no `accept` can meet the descriptor's number reused.
        func stop() {
            guard !stopped.exchange(true, ordering: .relaxed) else { return }
            shutdown(listener, Int32(SHUT_RDWR))
            for connection in connections.withLock({ $0 }) { connection.shutdownBoth() }
        }

        func run(_ script: @escaping @Sendable (ScriptedConnection) -> Void) {
            defer { Glibc.close(listener) }
            while !stopped.load(ordering: .relaxed) {
                let client = accept(listener, nil, nil)
                guard client >= 0 else {
                    if errno == EINTR { continue }
                    return
                }
                let index = accepted.add(1, ordering: .relaxed).oldValue
                let connection = ScriptedConnection(fd: client, index: index)
                connections.withLock { $0.append(connection) }
                // Accepted as the server stopped: stop() may have missed it.
                if stopped.load(ordering: .relaxed) { connection.shutdownBoth() }
                let thread = Thread {
                    script(connection)
                    connection.close()
                }
                thread.start()
            }
        }
    }
}
