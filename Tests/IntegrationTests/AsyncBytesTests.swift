import Courier
import Foundation
import Testing
import _CourierTestSupport

/// `URLSession.bytes(for:)`: the body as it arrives, bounded by a slow consumer, with the text
/// views Darwin's Foundation has and Linux's lacks.
@Suite("AsyncBytes")
struct AsyncBytesTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    @Test("every byte of the body, in order, after the response")
    func wholeBody() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let (bytes, response) = try await session.bytes(from: nginx.url("/files/1m.bin"))
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(response.expectedContentLength == 1024 * 1024)
        var received: [UInt8] = []
        received.reserveCapacity(1024 * 1024)
        for try await byte in bytes { received.append(byte) }
        #expect(received == NginxServer.fixtures["1m.bin"])
        #expect(bytes.task.state == .completed)
        #expect(bytes.task.error == nil)
    }

    /// A server whose body stops after its first MiB until the test lets it go (or stops it):
    /// the load is surely still running when the test acts, however slow the machine.
    func heldServer() throws -> ResumableServer {
        let server = try ResumableServer(size: 8 * 1024 * 1024)
        server.pause(at: 1024 * 1024)
        return server
    }

    @Test("the first byte is handed out while the body is still arriving")
    func incremental() async throws {
        let server = try heldServer()
        defer { server.stop() }
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let (bytes, _) = try await session.bytes(from: server.url())
        var iterator = bytes.makeAsyncIterator()
        var received: [UInt8] = []
        while received.count < 64 * 1024, let byte = try await iterator.next() { received.append(byte) }
        #expect(received == Array(server.body.prefix(64 * 1024)))
        #expect(bytes.task.countOfBytesReceived < Int64(server.body.count))
        #expect(bytes.task.state == .running)
        bytes.task.cancel()
    }

    @Test("a consumer that stops reading stops the transfer: what is read ahead stays bounded")
    func backPressure() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let (bytes, _) = try await session.bytes(from: nginx.url("/files/8m.bin"))
        var iterator = bytes.makeAsyncIterator()
        var received: [UInt8] = []
        received.reserveCapacity(8 * 1024 * 1024)
        if let byte = try await iterator.next() { received.append(byte) }
        try await Task.sleep(for: .milliseconds(500))
        // The queue pauses reading at 1 MiB; the kernel's buffers and a read in flight add a
        // little; nowhere near the 8 MiB body.
        let readAhead = bytes.task.countOfBytesReceived
        #expect(readAhead < 4 * 1024 * 1024, "\(readAhead) bytes read ahead of a stopped consumer")
        while let byte = try await iterator.next() { received.append(byte) }
        #expect(received == NginxServer.fixtures["8m.bin"])
    }

    @Test("cancelling the Swift task cancels the load, and the iteration throws")
    func swiftCancellation() async throws {
        let server = try heldServer()
        defer { server.stop() }
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let (bytes, _) = try await session.bytes(from: server.url())
        let reader = Task {
            var count = 0
            for try await _ in bytes { count += 1 }
            return count
        }
        try await Task.sleep(for: .milliseconds(200))
        reader.cancel()
        let outcome = await reader.result
        #expect(throws: (any Error).self) { try outcome.get() }
        let error = try #require(outcome.failureError as? URLError)
        #expect(error.code == .cancelled)
        #expect(bytes.task.state == .completed)
    }

    @Test("an iterator dropped before the end cancels the load")
    func droppedIterator() async throws {
        let server = try heldServer()
        defer { server.stop() }
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let (bytes, _) = try await session.bytes(from: server.url())
        do {
            var iterator = bytes.makeAsyncIterator()
            _ = try await iterator.next()
        }
        #expect(await pollUntil(timeout: .seconds(60)) { bytes.task.state == .completed })
        #expect((bytes.task.error as? URLError)?.code == .cancelled)
    }

    @Test("a failure before the response throws from bytes(for:) itself")
    func failsBeforeResponse() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        let port = closed.port
        await #expect(throws: URLError.self) {
            _ = try await session.bytes(from: URL(string: "http://127.0.0.1:\(port)/")!)
        }
    }

    @Test("lines: LF, CRLF, CR, NEL and U+2028 end a line; empty lines are skipped, as Apple's are")
    func lines() async throws {
        let text = "first\nsecond\r\nthird\rfourth\u{85}fifth\u{2028}\n\nsixth ünïcödé"
        let (bytes, _) = try await URLSession.shared.bytes(from: Self.dataURL(Array(text.utf8)))
        var lines: [String] = []
        for try await line in bytes.lines { lines.append(line) }
        #expect(lines == ["first", "second", "third", "fourth", "fifth", "sixth ünïcödé"])
    }

    @Test("characters and unicode scalars, with ill-formed UTF-8 as U+FFFD")
    func charactersAndScalars() async throws {
        // "e" + combining acute, a flag (two regional indicators), then a lone continuation
        // byte and a truncated three-byte sequence.
        let text = Array("e\u{301}🇫🇷x".utf8) + [0x80, 0x41, 0xE2, 0x82]
        let (charactersBytes, _) = try await URLSession.shared.bytes(from: Self.dataURL(text))
        var characters: [Character] = []
        for try await character in charactersBytes.characters { characters.append(character) }
        #expect(characters == ["e\u{301}", "🇫🇷", "x", "\u{FFFD}", "A", "\u{FFFD}"])
        let (scalarBytes, _) = try await URLSession.shared.bytes(from: Self.dataURL(text))
        var scalars: [Unicode.Scalar] = []
        for try await scalar in scalarBytes.unicodeScalars { scalars.append(scalar) }
        #expect(scalars.map(\.value) == [0x65, 0x301, 0x1F1EB, 0x1F1F7, 0x78, 0xFFFD, 0x41, 0xFFFD])
    }

    /// A `data:` URL carrying `bytes`, percent-encoded.
    static func dataURL(_ bytes: [UInt8]) -> URL {
        let encoded = bytes.map { String(format: "%%%02X", $0) }.joined()
        return URL(string: "data:application/octet-stream,\(encoded)")!
    }
}

extension Result {
    /// The error of a failure; nil for a success.
    var failureError: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
