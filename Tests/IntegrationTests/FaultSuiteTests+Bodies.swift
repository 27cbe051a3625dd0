import Courier
import Foundation
import Testing
import _CourierTestSupport

/// Faults in what follows the head: lying lengths, bytes nobody asked for, a response before
/// its request, and downloads and uploads broken off.
extension FaultSuiteTests {
    // MARK: Content-Length lies

    @Test("Content-Length values: invalid or conflicting ones are badServerResponse, equal repeats are one length", arguments: FaultLengthCase.all)
    func contentLengthValues(_ entry: FaultLengthCase) async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.write("HTTP/1.1 200 OK\r\n\(entry.fields)\r\nhello")
            log.awaitClientClose(connection)
        }
        let session = session()
        if let code = entry.failure {
            await expectURLError(code) { _ = try await session.data(from: server.url("/length")) }
        } else {
            let (data, _) = try await session.data(from: server.url("/length"))
            #expect(String(decoding: data, as: UTF8.self) == "hello")
        }
        // A refused response closes the connection at once; an accepted one is closed when the
        // session is invalidated.
        await expectNoLeaks(session, server, log: log, closes: 1)
    }

    @Test("bytes past the declared end of a response: it completes with the declared bytes, and the connection is retired, not reused", arguments: FaultLateBytes.allCases)
    func bytesPastTheEnd(_ late: FaultLateBytes) async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            guard connection.index == 0 else {
                connection.respond(body: Array("fresh".utf8))
                log.awaitClientClose(connection)
                return
            }
            let response = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
            switch late {
            case .extraBodyInSameWrite:
                connection.write(response + "EXTRA")
            case .garbageWhileIdle, .forgedResponseWhileIdle:
                connection.write(response)
                Thread.sleep(forTimeInterval: 0.2)
                connection.write(late == .garbageWhileIdle ? "\u{1}garbage\r\n\r\n" : "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nforge")
            }
            log.awaitClientClose(connection)
        }
        let session = session()
        let (first, _) = try await session.data(from: server.url("/one"))
        #expect(String(decoding: first, as: UTF8.self) == "hello", "the declared 5 bytes, no more")
        // Bytes the client did not ask for could be taken for the next response: it closes the
        // connection on its own, whether they came with the response or while it was idle.
        let retired = await pollUntil(timeout: .seconds(30)) { log.closes == 1 }
        #expect(retired, "the client closed the connection that carried the extra bytes")
        let (second, _) = try await session.data(from: server.url("/two"))
        #expect(String(decoding: second, as: UTF8.self) == "fresh", "the extra bytes were never taken as a response")
        #expect(server.connectionCount == 2)
        await expectNoLeaks(session, server, log: log, closes: 2)
    }

    @Test("a response written before the request was read is taken as the answer; the request is still sent whole")
    func responseBeforeRequest() async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            connection.write("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly")
            if let request = connection.readRequest() { log.mark("\(request.method) \(request.target)") }
            log.awaitClientClose(connection)
        }
        let session = session()
        // TCP does not order the two directions: bytes that arrive after the request went out
        // cannot be told from a prompt answer (curl and Apple's URLSession read them so too).
        // Courier sends the request as soon as the connection is up, before it reads, so the
        // early response always meets an exchange and is parsed as its response.
        let (data, response) = try await session.data(from: server.url("/early"))
        #expect(String(decoding: data, as: UTF8.self) == "early")
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let sent = await pollUntil(timeout: .seconds(30)) { log.has("GET /early") }
        #expect(sent, "the server read the request after its early response")
        #expect(server.connectionCount == 1)
        await expectNoLeaks(session, server, log: log, closes: 1)
    }

    // MARK: Uploads broken off (the download is FaultSuiteDownloadTests)

    @Test("a 1 MiB upload answered 413 before its body was read, then a lingering close (FIN, body drained): the task completes with the 413")
    func uploadRefusedWithLingeringClose() async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard readHead(connection) else { return }
            connection.write("HTTP/1.1 413 Content Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large")
            connection.shutdownWrite()
            log.awaitClientClose(connection)
        }
        var request = URLRequest(url: server.url("/upload"))
        request.httpMethod = "POST"
        let session = session()
        // HTTP1Connection sends a Data body from where it lies as the socket drains, so the
        // response is read while body bytes are still to go: a complete 413 completes the
        // exchange, Connection: close retires the connection, and the unsent rest is dropped.
        let (data, response) = try await session.upload(for: request, from: Data(count: 1 << 20))
        #expect((response as? HTTPURLResponse)?.statusCode == 413)
        #expect(String(decoding: data, as: UTF8.self) == "too large")
        await expectNoLeaks(session, server, log: log, closes: 1)
    }

    @Test("a 1 MiB upload answered 413 and closed at once with the body unread (RST): the 413 arrives, as with curl")
    func uploadRefusedAndReset() async throws {
        let server = try ScriptedServer { connection in
            guard readHead(connection) else { return }
            connection.write("HTTP/1.1 413 Content Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large")
            // Unread body bytes in the receive queue: the kernel answers the close with an RST.
            connection.close()
        }
        var request = URLRequest(url: server.url("/upload"))
        request.httpMethod = "POST"
        let session = session()
        // The RST follows the 413 within microseconds; the socket still holds the 413, and
        // StreamChannel reads what arrived before it reports the reset.
        let (data, response) = try await session.upload(for: request, from: Data(count: 1 << 20))
        #expect((response as? HTTPURLResponse)?.statusCode == 413)
        #expect(String(decoding: data, as: UTF8.self) == "too large")
        await expectNoLeaks(session, server)
    }
}

/// Reads a request head (not its body): true once the blank line arrived, false at end of
/// stream or after `timeout`.
func readHead(_ connection: ScriptedConnection, timeout: TimeInterval = 5) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    let end = Array("\r\n\r\n".utf8)
    var received: [UInt8] = []
    while deadline.timeIntervalSinceNow > 0 {
        let chunk = connection.readAvailable(timeout: deadline.timeIntervalSinceNow)
        if chunk.isEmpty { return false }
        received += chunk
        if received.count >= end.count,
           (0...(received.count - end.count)).contains(where: { received[$0..<($0 + end.count)].elementsEqual(end) }) {
            return true
        }
    }
    return false
}

/// A Content-Length field (or two) and what the client makes of it, the body being "hello".
struct FaultLengthCase: Sendable, CustomTestStringConvertible {
    var name: String
    /// Field lines, each ending in CRLF.
    var fields: String
    /// The error expected; nil when the response loads with the body "hello".
    var failure: URLError.Code?

    var testDescription: String { name }

    // The parser's rules (HTTP1ResponseParser+Framing.contentLength): every element of every
    // Content-Length field must be 1 to 18 decimal digits, and all must be equal (RFC 9110
    // §8.6); else invalidContentLength or conflictingContentLength, both badServerResponse.
    // Two different Content-Length fields are HTTP1FaultTests.badFraming's.
    static let all: [FaultLengthCase] = [
        FaultLengthCase(name: "negative", fields: "Content-Length: -1\r\n", failure: .badServerResponse),
        FaultLengthCase(name: "not a number", fields: "Content-Length: abc\r\n", failure: .badServerResponse),
        FaultLengthCase(name: "digits then letters", fields: "Content-Length: 5x\r\n", failure: .badServerResponse),
        FaultLengthCase(name: "plus sign", fields: "Content-Length: +5\r\n", failure: .badServerResponse),
        FaultLengthCase(name: "empty", fields: "Content-Length: \r\n", failure: .badServerResponse),
        FaultLengthCase(name: "past 63 bits", fields: "Content-Length: 99999999999999999999\r\n", failure: .badServerResponse),
        FaultLengthCase(name: "a list of different values", fields: "Content-Length: 5, 6\r\n", failure: .badServerResponse),
        FaultLengthCase(name: "a list of equal values", fields: "Content-Length: 5, 5\r\n", failure: nil),
        FaultLengthCase(name: "two equal fields", fields: "Content-Length: 5\r\nContent-Length: 5\r\n", failure: nil),
        FaultLengthCase(name: "leading zeros", fields: "Content-Length: 0005\r\n", failure: nil),
    ]
}

/// Bytes a server sends past the end of a Content-Length response on a keep-alive connection.
enum FaultLateBytes: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// A body longer than declared, in the same write.
    case extraBodyInSameWrite
    /// Garbage, 200 ms later, while the connection is idle.
    case garbageWhileIdle
    /// A whole forged response, 200 ms later, while the connection is idle (HTTP1FaultTests
    /// .strayBytes sends one in the same segment).
    case forgedResponseWhileIdle

    var testDescription: String { rawValue }
}

/// The fault suite's download broken off, in a suite of its own: it holds the download-files
/// lock, and the fault suite's one-minute `.timeLimit` would count its wait for the lock (other
/// tests' downloads, long under a sanitizer). Its minute starts once it has the lock.
@Suite("HTTP/1.1 fault suite: a download broken off")
struct FaultSuiteDownloadTests {
    @Test("a download reset mid-body is networkConnectionLost; resume data and a partial file of the bytes received only when the response can be resumed; no download file left", .exclusiveDownloadFiles(timeLimit: .seconds(60)), arguments: FaultValidator.allCases)
    func downloadResetMidBody(_ validator: FaultValidator) async throws {
        let body = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let sent = 40_000
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            var head = "HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\nAccept-Ranges: bytes\r\n"
            switch validator {
            case .strongETag: head += "ETag: \"v1\"\r\n"
            case .lastModified: head += "Last-Modified: Wed, 21 Oct 2015 07:28:00 GMT\r\n"
            case .absent: break
            }
            connection.write(head + "\r\n")
            connection.write(Array(body[..<sent]))
            // The bytes reach the client before the reset (as ResumableServer's cuts do).
            Thread.sleep(forTimeInterval: 0.2)
            connection.reset()
        }
        let downloads = downloadFilesPresent()
        let partials = partialFilesPresent()
        defer { removePartialFiles(except: partials) }
        let session = FaultSuiteTests().session()
        do {
            let (location, _) = try await session.download(from: server.url("/file.bin"))
            try? FileManager.default.removeItem(at: location)
            Issue.record("expected URLError networkConnectionLost, got a whole download")
        } catch let error as URLError {
            #expect(error.code == .networkConnectionLost)
            let kept = partialFilesPresent().subtracting(partials)
            if validator == .absent {
                // TaskDriver.recipe: no strong ETag or Last-Modified, nothing If-Range can carry.
                #expect(error.downloadTaskResumeData == nil)
                #expect(!error.userInfo.keys.contains(URLSessionDownloadTaskResumeData))
                #expect(kept.isEmpty, "no partial file without resume data")
            } else {
                let resumeData = error.userInfo[URLSessionDownloadTaskResumeData] as? Data
                #expect(resumeData != nil, "a 200 with Accept-Ranges and a validator can be resumed")
                #expect(error.downloadTaskResumeData == resumeData)
                #expect(kept.count == 1, "the partial file is kept for the resume data: \(kept)")
                if let name = kept.first {
                    let path = FileManager.default.temporaryDirectory.appendingPathComponent(name).path
                    let contents = Array(FileManager.default.contents(atPath: path) ?? Data())
                    #expect(!contents.isEmpty && contents.count <= sent, "\(contents.count) bytes kept of \(sent) sent")
                    #expect(contents == Array(body[..<min(contents.count, sent)]), "the partial file holds the body's first bytes")
                }
            }
        } catch {
            Issue.record("expected URLError networkConnectionLost, got \(error)")
        }
        let left = await downloadFilesLeft(besides: downloads)
        #expect(left.isEmpty, "no CourierDownload_ file is left: \(left)")
        await expectNoLeaks(session, server)
    }
}

/// The validator a download's response carries.
enum FaultValidator: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case strongETag, lastModified, absent

    var testDescription: String { rawValue }
}

/// Framing the parser reads as RFC 9112 says, end to end through a session. Apart from the fault
/// suite's one-minute limit: success is the outcome, and a loaded machine (a sanitizer run) must
/// not turn a slow pass into a failure.
@Suite("HTTP/1.1 framing through a session: close-delimited transfer codings, a stray CRLF")
struct FramingThroughSessionTests {
    /// An uncached session whose requests wait a minute for a byte.
    static func session() -> URLSession {
        let configuration = URLSessionConfiguration.uncached
        configuration.timeoutIntervalForRequest = 60
        return URLSession(configuration: configuration)
    }

    @Test("a Transfer-Encoding whose last coding is not chunked: the body runs until the server closes, its bytes as sent, and the next request takes a new connection", arguments: ["gzip", "chunked, gzip", "identity"])
    func closeDelimitingTransferEncoding(_ codings: String) async throws {
        let log = PeerLog()
        let body: [UInt8] = [0x1F, 0x8B, 0x08, 0x00] + Array("3\r\nnot chunk framing\r\n0\r\n\r\n".utf8)
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            if connection.index == 0 {
                connection.write(Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: \(codings)\r\n\r\n".utf8) + body)
                connection.shutdownWrite()
            } else {
                connection.respond(body: Array("fresh".utf8))
            }
            log.awaitClientClose(connection)
        }
        let session = Self.session()
        let (data, response) = try await session.data(from: server.url("/coded"))
        #expect(sameBytes(Array(data), body), "every byte up to the close, as sent")
        #expect(response.expectedContentLength == -1)
        let (second, _) = try await session.data(from: server.url("/next"))
        #expect(String(decoding: second, as: UTF8.self) == "fresh")
        #expect(server.connectionCount == 2, "a close-delimited response leaves no connection to reuse")
        await expectNoLeaks(session, server, log: log, closes: 2)
    }

    @Test("one stray CRLF before a status line is skipped, on a new connection and before a kept-alive connection's next response")
    func strayLineBeforeStatusLine() async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            while connection.readRequest(timeout: 60) != nil {
                connection.write("\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            }
            log.awaitClientClose(connection)
        }
        let session = Self.session()
        for _ in 0..<2 {
            let (data, response) = try await session.data(from: server.url("/stray"))
            #expect(String(decoding: data, as: UTF8.self) == "hello")
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
        }
        await expectNoLeaks(session, server, log: log, closes: server.connectionCount)
    }

}
