import Courier
import CourierSync
import Foundation
import Glibc

/// The local demo `courier` runs when given no URL: a small HTTP/1.1 server on 127.0.0.1 and a
/// handful of requests against it through URLSession.
enum Demo {
    static func run() async throws {
        let server = try DemoServer()
        defer { server.stop() }
        let base = "http://127.0.0.1:\(server.port)"
        print("courier demo: a local HTTP/1.1 server is listening on \(base)\n")
        let session = URLSession(configuration: .ephemeral)
        defer { session.finishTasksAndInvalidate() }

        let (hello, first) = try await session.data(from: URL(string: "\(base)/hello")!)
        report("GET /hello", first, hello)
        print("   " + String(decoding: hello, as: UTF8.self).trimmingCharacters(in: .newlines))

        let (_, second) = try await session.data(from: URL(string: "\(base)/hello")!)
        let sameConnection = (first as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Demo-Connection")
            == (second as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Demo-Connection")
        report("GET /hello", second, hello, note: sameConnection ? "the keep-alive connection was reused" : "a new connection")

        var upload = URLRequest(url: URL(string: "\(base)/echo")!)
        upload.httpMethod = "POST"
        let payload = Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let (echoed, third) = try await session.upload(for: upload, from: payload)
        report("POST /echo", third, echoed, note: echoed == payload ? "4096 bytes echoed back intact" : "echo mismatch")

        let (chunked, fourth) = try await session.data(from: URL(string: "\(base)/chunked")!)
        report("GET /chunked", fourth, chunked, note: "sent in 10 chunks, no Content-Length")

        let (missing, fifth) = try await session.data(from: URL(string: "\(base)/missing")!)
        report("GET /missing", fifth, missing, note: "a 404 is a response, not an error")

        do {
            var slow = URLRequest(url: URL(string: "\(base)/slow")!)
            slow.timeoutInterval = 0.5
            _ = try await session.data(for: slow)
        } catch let error as URLError {
            print("GET /slow → URLError(\(error.code.rawValue)): \(error.localizedDescription)")
        }
        print("\nFetch any http:// URL yourself, with the request and response heads shown:\n  courier -v http://127.0.0.1:8080/")
    }

    private static func report(_ label: String, _ response: URLResponse, _ body: Data, note: String? = nil) {
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let suffix = note.map { " — \($0)" } ?? ""
        print("\(label) → \(status) \(HTTPURLResponse.localizedString(forStatusCode: status)), \(body.count) bytes\(suffix)")
    }
}

/// A deliberately small HTTP/1.1 server for the demo: blocking sockets, one thread per
/// connection, keep-alive, a handful of fixed routes.
final class DemoServer: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let connectionCount = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            close(fd)
            throw DemoError(message: "the demo server cannot listen on 127.0.0.1 (errno \(errno))")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        listener = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread { [self] in acceptLoop() }.start()
    }

    func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func acceptLoop() {
        while !stopped.load(ordering: .relaxed) {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            let number = connectionCount.add(1, ordering: .relaxed).newValue
            Thread { [self] in serve(client, number: number) }.start()
        }
    }

    private func serve(_ fd: Int32, number: Int) {
        defer { close(fd) }
        var buffer: [UInt8] = []
        while let (method, path, body) = readRequest(fd, &buffer) {
            var headers = [("X-Demo-Connection", String(number)), ("Content-Type", "text/plain; charset=utf-8")]
            switch path {
            case "/hello", "/":
                respond(fd, 200, "OK", headers, Array("Hello from the Courier demo server!\n".utf8), head: method == "HEAD")
            case "/echo":
                headers[1] = ("Content-Type", "application/octet-stream")
                respond(fd, 200, "OK", headers, body)
            case "/chunked":
                var wire = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Demo-Connection: \(number)\r\n\r\n"
                for index in 0..<10 {
                    let chunk = String(repeating: String(index), count: 100)
                    wire += String(chunk.utf8.count, radix: 16) + "\r\n" + chunk + "\r\n"
                }
                wire += "0\r\n\r\n"
                send(fd, Array(wire.utf8))
            case "/slow":
                sleep(2)
                return
            default:
                respond(fd, 404, "Not Found", headers, Array("nothing here\n".utf8))
            }
        }
    }

    private func respond(_ fd: Int32, _ status: Int, _ reason: String, _ headers: [(String, String)], _ body: [UInt8], head: Bool = false) {
        var wire = "HTTP/1.1 \(status) \(reason)\r\nContent-Length: \(body.count)\r\n"
        for (name, value) in headers { wire += "\(name): \(value)\r\n" }
        send(fd, Array((wire + "\r\n").utf8) + (head ? [] : body))
    }

    private func send(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent <= 0 { return }
            offset += sent
        }
    }

    /// Reads one request with a Content-Length body (the demo's client never sends chunked).
    private func readRequest(_ fd: Int32, _ buffer: inout [UInt8]) -> (String, String, [UInt8])? {
        let marker: [UInt8] = [13, 10, 13, 10]
        func headEnd() -> Int? {
            guard buffer.count >= 4 else { return nil }
            return (0...(buffer.count - 4)).first { buffer[$0..<($0 + 4)].elementsEqual(marker) }
        }
        while headEnd() == nil {
            guard fill(fd, &buffer) else { return nil }
        }
        let end = headEnd()!
        let head = String(decoding: buffer[..<end], as: UTF8.self)
        buffer.removeFirst(end + 4)
        let lines = head.components(separatedBy: "\r\n")
        let parts = lines[0].split(separator: " ")
        guard parts.count == 3 else { return nil }
        let length = lines.dropFirst().compactMap { line -> Int? in
            let pair = line.split(separator: ":", maxSplits: 1)
            return pair.count == 2 && pair[0].lowercased() == "content-length" ? Int(pair[1].trimmingCharacters(in: .whitespaces)) : nil
        }.first ?? 0
        while buffer.count < length {
            guard fill(fd, &buffer) else { return nil }
        }
        let body = Array(buffer[..<length])
        buffer.removeFirst(length)
        return (String(parts[0]), String(parts[1]), body)
    }

    private func fill(_ fd: Int32, _ buffer: inout [UInt8]) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 16384)
        let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return false }
        buffer += chunk[..<count]
        return true
    }
}

struct DemoError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
