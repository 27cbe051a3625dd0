@testable import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// Records a data task's `multipart/x-mixed-replace` parts: each `didReceive response` opens a
/// part, the `didReceive data` calls after it fill it. Answers `.cancel` to the response of part
/// `cancelAtPart` (counting from 1), `.allow` to the others.
final class PartRecorder: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    struct Part {
        var response: URLResponse
        var data = Data()

        var http: HTTPURLResponse? { response as? HTTPURLResponse }
        func field(_ name: String) -> String? { http?.value(forHTTPHeaderField: name) }
    }

    struct Record {
        /// Event names in order; consecutive "data" are collapsed.
        var events: [String] = []
        var parts: [Part] = []
        /// Data that came before any part's response.
        var strayData = 0
        var emptyDataCalls = 0
        var completions = 0
        var error: (any Error)?
        var offQueue = 0
    }

    let record = Mutex(Record())
    let cancelAtPart: Int?

    init(cancelAtPart: Int? = nil) {
        self.cancelAtPart = cancelAtPart
    }

    var snapshot: Record { record.withLock { $0 } }

    private func note(_ session: URLSession, _ event: String, _ update: (inout Record) -> Void = { _ in }) {
        record.withLock { record in
            if !(event == "data" && record.events.last == event) { record.events.append(event) }
            if OperationQueue.current !== session.delegateQueue { record.offQueue += 1 }
            update(&record)
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        var number = 0
        note(session, "response") { record in
            record.parts.append(Part(response: response))
            number = record.parts.count
        }
        completionHandler(number == cancelAtPart ? .cancel : .allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        note(session, "data") { record in
            if data.isEmpty { record.emptyDataCalls += 1 }
            guard !record.parts.isEmpty else {
                record.strayData += data.count
                return
            }
            record.parts[record.parts.count - 1].data.append(data)
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        note(session, "complete") { record in
            record.completions += 1
            record.error = error
        }
    }

    /// Waits for didCompleteWithError, then a moment for any call that should not come; false
    /// after `timeout`.
    func waitForCompletion(timeout: Duration = .seconds(20)) async -> Bool {
        guard await pollUntil(timeout: timeout, { self.snapshot.completions > 0 }) else { return false }
        try? await Task.sleep(for: .milliseconds(100))
        return true
    }
}

/// How the scripted server frames the multipart body on the wire.
enum MultipartFraming: String, CaseIterable, Sendable {
    /// No length: the body ends when the server closes.
    case closeDelimited
    case chunked
}

/// Writes a `multipart/x-mixed-replace` response in a framing, piece by piece.
private struct MultipartStreamWriter {
    let connection: ScriptedConnection
    let framing: MultipartFraming

    func head(status: String = "200 OK") {
        var head = "HTTP/1.1 \(status)\r\nContent-Type: multipart/x-mixed-replace; boundary=XYZ\r\nCache-Control: no-store\r\nX-Outer: yes\r\n"
        switch framing {
        case .closeDelimited: head += "Connection: close\r\n"
        case .chunked: head += "Transfer-Encoding: chunked\r\n"
        }
        connection.write(head + "\r\n")
    }

    func send(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        switch framing {
        case .closeDelimited: connection.write(bytes)
        case .chunked: connection.write(Array("\(String(bytes.count, radix: 16))\r\n".utf8) + bytes + Array("\r\n".utf8))
        }
    }

    func send(_ text: String) { send(Array(text.utf8)) }

    /// Ends the body: the last chunk, or end of stream.
    func end() {
        switch framing {
        case .closeDelimited: connection.shutdownWrite()
        case .chunked: connection.write("0\r\n\r\n")
        }
    }
}

/// `multipart/x-mixed-replace` for data tasks with a delegate: every part its own `didReceive
/// response` (the outer status, the part's fields), then exactly its bytes, as the parts stream
/// in from a scripted server.
@Suite("multipart/x-mixed-replace")
struct MultipartReplaceTests {
    /// 200 KiB of binary with CR, LF and boundary prefixes in it, and no `--XYZ`.
    static let binaryBody: [UInt8] = {
        var random = SplitMix64(seed: 0x3D1C_ED)
        let fragments: [[UInt8]] = ["\r\n", "\r", "\n", "\r\n--", "\r\n--X", "\r\n--XY", "--XY"].map { Array($0.utf8) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(200 * 1024 + 8)
        while bytes.count < 200 * 1024 {
            if random.chance(2) {
                bytes += random.pick(fragments)
            } else {
                bytes.append(UInt8(truncatingIfNeeded: random.next()))
            }
        }
        bytes.removeLast(bytes.count - 200 * 1024)
        let dashBoundary = Array("--XYZ".utf8)
        for index in 0...(bytes.count - dashBoundary.count) where bytes[index..<(index + dashBoundary.count)].elementsEqual(dashBoundary) {
            bytes[index + dashBoundary.count - 1] = UInt8(ascii: "Q")
        }
        return bytes
    }()

    /// Loads `url` in a data task of a new session whose delegate is `recorder`, expects the
    /// task's completion, and runs `check` with the task and what the recorder saw then; the
    /// session is invalidated after `check` (the test's server outlives both).
    func load(
        _ url: URL, with recorder: PartRecorder, sourceLocation: SourceLocation = #_sourceLocation,
        check: (URLSessionDataTask, PartRecorder.Record) async throws -> Void
    ) async throws {
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.dataTask(with: url)
        task.resume()
        // A minute: the server may wait that long for a delegate that lags on a loaded machine.
        #expect(await recorder.waitForCompletion(timeout: .seconds(60)), sourceLocation: sourceLocation)
        try await check(task, recorder.snapshot)
    }

    @Test("three parts streamed with pauses, the second 200 KiB of binary: three responses, each part's bytes exactly, then completion", arguments: MultipartFraming.allCases)
    func threeParts(_ framing: MultipartFraming) async throws {
        let recorder = PartRecorder()
        let firstDeliveredEarly = ResumeFlag()
        let big = Self.binaryBody
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            let writer = MultipartStreamWriter(connection: connection, framing: framing)
            writer.head(status: "203 Non-Authoritative Information")
            // Part 1, ended by the start of the next delimiter.
            writer.send("--XYZ\r\nContent-Type: text/plain\r\nX-Frame: 1\r\n\r\nfirst frame\r\n--XYZ")
            // It reaches the delegate before anything more is sent (within a minute: the
            // delegate queue of a loaded machine may lag by seconds).
            if waitBlocking(seconds: 60, { recorder.snapshot.parts.first?.data == Data("first frame".utf8) }) { firstDeliveredEarly.set() }
            writer.send("\r\nContent-Type: application/octet-stream\r\nX-Frame: 2\r\n\r\n")
            var random = SplitMix64(seed: 0x5EED)
            var offset = 0
            while offset < big.count {
                let end = min(big.count, offset + random.inRange(1...40_000))
                writer.send(Array(big[offset..<end]))
                offset = end
                usleep(2000)
            }
            // The delimiter itself split across writes.
            writer.send("\r\n--X")
            usleep(20_000)
            writer.send("YZ\r\nContent-Type: application/json\r\nX-Frame: 3\r\n\r\n{\"frame\": 3}")
            usleep(20_000)
            writer.send("\r\n--XYZ--\r\n")
            writer.end()
            connection.readToEOF(timeout: 2)
        }
        defer { server.stop() }
        let url = server.url("/stream")
        try await load(url, with: recorder) { task, record in
            #expect(record.error == nil, "\(String(describing: record.error))")
            #expect(record.completions == 1)
            #expect(record.events == ["response", "data", "response", "data", "response", "data", "complete"])
            #expect(record.strayData == 0)
            #expect(record.emptyDataCalls == 0)
            #expect(record.offQueue == 0)
            #expect(firstDeliveredEarly.isSet, "the first part reached the delegate before the rest was sent")
            try #require(record.parts.count == 3)

            for (index, part) in record.parts.enumerated() {
                let http = try #require(part.http, "part \(index + 1) has an HTTPURLResponse")
                #expect(http.statusCode == 203, "the outer status")
                #expect(http.url == url)
                #expect(part.field("X-Frame") == "\(index + 1)", "the part's own fields")
                #expect(part.field("X-Outer") == nil, "not the outer response's fields")
            }
            #expect(record.parts[0].field("Content-Type") == "text/plain")
            #expect(record.parts[0].response.mimeType == "text/plain")
            #expect(record.parts[1].field("Content-Type") == "application/octet-stream")
            #expect(record.parts[2].field("Content-Type") == "application/json")

            #expect(record.parts[0].data == Data("first frame".utf8))
            let intact = Array(record.parts[1].data) == big
            #expect(intact, "the 200 KiB part exactly: got \(record.parts[1].data.count) bytes")
            #expect(record.parts[2].data == Data("{\"frame\": 3}".utf8))
            #expect(task.state == .completed)
        }
    }

    @Test("forty small parts in random pieces, some without header lines: forty responses, each followed by only its own bytes", arguments: MultipartFraming.allCases)
    func manyParts(_ framing: MultipartFraming) async throws {
        let count = 40
        var stream = ""
        for index in 1...count {
            stream += index == 1 ? "--XYZ\r\n" : "\r\n--XYZ\r\n"
            if index % 10 != 0 { stream += "Content-Type: text/plain\r\nX-Frame: \(index)\r\n" }
            stream += "\r\nframe \(index)" + String(repeating: "\r\n-", count: index % 4)
        }
        stream += "\r\n--XYZ--\r\n"
        let bytes = Array(stream.utf8)
        let recorder = PartRecorder()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            let writer = MultipartStreamWriter(connection: connection, framing: framing)
            writer.head()
            var random = SplitMix64(seed: 0x40)
            var offset = 0
            while offset < bytes.count {
                let end = min(bytes.count, offset + random.inRange(1...300))
                writer.send(Array(bytes[offset..<end]))
                offset = end
                if random.chance(10) { usleep(1000) }
            }
            writer.end()
            connection.readToEOF(timeout: 2)
        }
        defer { server.stop() }
        try await load(server.url("/frames"), with: recorder) { _, record in
            #expect(record.error == nil, "\(String(describing: record.error))")
            #expect(record.events == Array(repeating: ["response", "data"], count: count).flatMap { $0 } + ["complete"])
            #expect(record.strayData == 0)
            try #require(record.parts.count == count)
            for (offset, part) in record.parts.enumerated() {
                let index = offset + 1
                let body = "frame \(index)" + String(repeating: "\r\n-", count: index % 4)
                #expect(part.data == Data(body.utf8), "part \(index)")
                #expect(part.http?.statusCode == 200)
                if index % 10 == 0 {
                    #expect(part.field("X-Frame") == nil && part.field("Content-Type") == nil, "part \(index) has no fields")
                } else {
                    #expect(part.field("X-Frame") == "\(index)")
                    #expect(part.field("Content-Type") == "text/plain")
                }
            }
        }
    }

    @Test("a stream that ends without the closing delimiter ends its last part there, with every byte, and completes without an error", arguments: MultipartFraming.allCases)
    func missingClosingDelimiter(_ framing: MultipartFraming) async throws {
        let recorder = PartRecorder()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            let writer = MultipartStreamWriter(connection: connection, framing: framing)
            writer.head()
            writer.send("--XYZ\r\nContent-Type: text/plain\r\n\r\nfirst frame\r\n--XYZ\r\n")
            usleep(30_000)
            writer.send("Content-Type: text/plain\r\nX-Frame: last\r\n\r\nlast part, cut short\r\n--XY")
            usleep(30_000)
            // No closing delimiter: the server ends the body.
            writer.end()
            connection.readToEOF(timeout: 2)
        }
        defer { server.stop() }
        try await load(server.url("/cut"), with: recorder) { _, record in
            #expect(record.error == nil, "\(String(describing: record.error))")
            #expect(record.completions == 1)
            #expect(record.events == ["response", "data", "response", "data", "complete"])
            try #require(record.parts.count == 2)
            #expect(record.parts[0].data == Data("first frame".utf8))
            #expect(record.parts[1].field("X-Frame") == "last")
            #expect(record.parts[1].data == Data("last part, cut short\r\n--XY".utf8), "the bytes held back as a possible delimiter end the part")
        }
    }

    @Test("a part head over 16 KiB fails the task with .cannotParseResponse after the parts before it", arguments: MultipartFraming.allCases)
    func headTooLong(_ framing: MultipartFraming) async throws {
        let recorder = PartRecorder()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            let writer = MultipartStreamWriter(connection: connection, framing: framing)
            writer.head()
            writer.send("--XYZ\r\nContent-Type: text/plain\r\n\r\nfirst frame\r\n--XYZ\r\n")
            usleep(50_000)
            writer.send("Content-Type: text/plain\r\nX-Huge: " + String(repeating: "h", count: 17 * 1024) + "\r\n\r\nnever delivered\r\n--XYZ--\r\n")
            // The client gives up; the server does not end the body.
            connection.readToEOF(timeout: 5)
        }
        defer { server.stop() }
        try await load(server.url("/huge"), with: recorder) { task, record in
            #expect(urlErrorCode(record.error) == .cannotParseResponse, "\(String(describing: record.error))")
            #expect((record.error as? URLError)?.failingURL != nil)
            #expect(record.completions == 1)
            #expect(record.parts.count == 1, "the part with the long head never begins")
            #expect(record.parts.first?.data == Data("first frame".utf8))
            #expect(!record.parts.contains { $0.data.range(of: Data("never".utf8)) != nil })
            #expect(task.state == .completed)
        }
    }

    @Test("answering .cancel to a part's response cancels the task: .cancelled, no later part, the connection closed")
    func cancelAtPart() async throws {
        let recorder = PartRecorder(cancelAtPart: 2)
        let closedByClient = ResumeFlag()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            let writer = MultipartStreamWriter(connection: connection, framing: .closeDelimited)
            writer.head()
            writer.send("--XYZ\r\nContent-Type: text/plain\r\n\r\nfirst frame\r\n--XYZ\r\n")
            usleep(30_000)
            writer.send("Content-Type: text/plain\r\nX-Frame: 2\r\n\r\nsecond frame, never ended")
            // Only a cancel closes the connection before this gives up, a minute on.
            if PeerLog().awaitClientClose(connection, within: 60) { closedByClient.set() }
            writer.send("\r\n--XYZ\r\nContent-Type: text/plain\r\nX-Frame: 3\r\n\r\nthird\r\n--XYZ--\r\n")
            writer.end()
        }
        defer { server.stop() }
        try await load(server.url("/cancel"), with: recorder) { task, record in
            #expect(urlErrorCode(record.error) == .cancelled, "\(String(describing: record.error))")
            #expect(record.completions == 1)
            #expect(record.parts.count == 2, "no part after the cancelled one")
            #expect(record.parts.first?.data == Data("first frame".utf8))
            #expect(task.state == .completed)
            #expect(await pollUntil(timeout: .seconds(60)) { closedByClient.isSet }, "the cancel closed the connection")
        }
    }

    @Test("other multipart types are one response and one body, delivered as sent")
    func otherMultipartTypeIsNotSplit() async throws {
        let body = Array("--XYZ\r\nContent-Type: text/plain\r\n\r\none\r\n--XYZ\r\nContent-Type: text/plain\r\n\r\ntwo\r\n--XYZ--\r\n".utf8)
        let recorder = PartRecorder()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.respond(headers: [("Content-Type", "multipart/mixed; boundary=XYZ")], body: body)
            connection.readToEOF(timeout: 2)
        }
        defer { server.stop() }
        try await load(server.url("/mixed"), with: recorder) { _, record in
            #expect(record.error == nil)
            #expect(record.events == ["response", "data", "complete"])
            try #require(record.parts.count == 1)
            #expect(record.parts[0].field("Content-Type") == "multipart/mixed; boundary=XYZ")
            #expect(Array(record.parts[0].data) == body)
        }
    }
}
