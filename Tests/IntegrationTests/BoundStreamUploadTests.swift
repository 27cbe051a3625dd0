import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// A bound pair's input stream as a streamed upload's body: written by a thread or by a
/// run-loop delegate, held back when the server stops reading, and closed under a blocked
/// writer when the task is cancelled.
@Suite("Bound stream uploads")
struct BoundStreamUploadTests {
    let nginx: NginxServer
    let payload = Data(deterministicBytes(count: 3 * 1024 * 1024 + 5, seed: 91))

    init() throws {
        nginx = try NginxServer.shared()
    }

    private func makePair(bufferSize: Int = 32 * 1024) throws -> Unchecked<(InputStream, OutputStream)> {
        var input: InputStream?
        var output: OutputStream?
        Stream.getBoundStreams(withBufferSize: bufferSize, inputStream: &input, outputStream: &output)
        return Unchecked((try #require(input), try #require(output)))
    }

    /// Writes `payload` into the pair's output stream from a thread of its own, in pieces of
    /// `piece` bytes, then closes it.
    private func startWriter(_ pair: Unchecked<(InputStream, OutputStream)>, payload: Data, piece: Int = 10_000) -> PairWriter {
        let writer = PairWriter()
        Thread {
            let output = pair.value.1
            output.open()
            var offset = 0
            var last = 0
            while offset < payload.count {
                let end = min(offset + piece, payload.count)
                last = payload[offset..<end].withUnsafeBytes { output.write($0.bindMemory(to: UInt8.self).baseAddress!, maxLength: $0.count) }
                guard last > 0 else { break }
                offset += last
                writer.written.store(offset, ordering: .relaxed)
            }
            output.close()
            writer.result.withLock { $0 = last }
        }.start()
        return writer
    }

    @Test("what a thread writes into the output stream is the body, over h1 (chunked) and h2", arguments: [false, true])
    func fromThread(_ http2: Bool) async throws {
        let pair = try makePair()
        let payload = self.payload
        let delegate = StreamGivingDelegate { pair.value.0 }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let writer = startWriter(pair, payload: payload)
        var request = URLRequest(url: http2 ? nginx.tlsURL("good", "/echo") : nginx.url("/echo"))
        request.httpMethod = "PUT"
        let error = await delegate.run(session.uploadTask(withStreamedRequest: request))
        #expect(error == nil, "\(String(describing: error))")
        #expect(delegate.asked == 1)
        let response = try #require(delegate.response)
        #expect(response.value(forHTTPHeaderField: "X-Body-Length") == "\(payload.count)")
        #expect(response.value(forHTTPHeaderField: "X-Body-SHA256") == payload.sha256Hex)
        #expect(delegate.totalsSent.last == Int64(payload.count))
        #expect(writer.taken == payload.count)
    }

    @Test("a delegate writing on .hasSpaceAvailable in a run loop feeds the upload")
    func fromRunLoopDelegate() async throws {
        let pair = try makePair(bufferSize: 8 * 1024)
        let payload = self.payload
        let writer = RunLoopWriter(payload: [UInt8](payload))
        let thread = RunLoopThread()
        thread.start()
        defer { thread.stop() }
        #expect(await pollUntil { thread.runLoop != nil })
        let streams = Unchecked((pair.value.1, try #require(thread.runLoop)))
        thread.perform {
            let (output, runLoop) = streams.value
            output.delegate = writer
            output.schedule(in: runLoop, forMode: .default)
            output.open()
        }
        let delegate = StreamGivingDelegate { pair.value.0 }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: nginx.url("/echo"))
        request.httpMethod = "POST"
        let error = await delegate.run(session.uploadTask(withStreamedRequest: request))
        #expect(error == nil, "\(String(describing: error))")
        let response = try #require(delegate.response)
        #expect(response.value(forHTTPHeaderField: "X-Body-Length") == "\(payload.count)")
        #expect(response.value(forHTTPHeaderField: "X-Body-SHA256") == payload.sha256Hex)
        #expect(writer.events.first == .openCompleted)
        #expect(writer.threads == [try #require(thread.threadID)], "events come on the run loop's thread")
    }

    /// A server that reads nothing until released, then reads the request and answers with
    /// its body's length and SHA-256.
    private func stalledServer(_ release: DispatchSemaphore) throws -> ScriptedServer {
        try ScriptedServer { connection in
            // Every test signals `release` when it ends (StalledUpload.stop, deferred), so the
            // wait is bounded by the test. A shorter bound failed under ThreadSanitizer in the
            // whole suite: the test's polls (100 ms sleeps on a starved cooperative pool) took
            // over a minute, the server gave up and reset the connection with the body unread.
            guard release.wait(timeout: .now() + 600) == .success else { return connection.close() }
            guard let request = connection.readRequest(timeout: 300) else { return connection.close() }
            connection.respond(headers: [
                ("X-Body-Length", "\(request.body.count)"), ("X-Body-SHA256", Data(request.body).sha256Hex),
            ])
        }
    }

    /// Waits until `value` has stayed the same (and positive) over several polls: the flow it
    /// counts has stopped.
    private func settled(_ value: () -> Int) async -> Int? {
        var last = -1
        var steady = 0
        for _ in 0..<200 {
            try? await Task.sleep(for: .milliseconds(100))
            let now = value()
            steady = now == last && now > 0 ? steady + 1 : 0
            last = now
            if steady >= 5 { return now }
        }
        return nil
    }

    /// A streamed upload of 24 MiB from a bound pair's writer thread to a server that reads
    /// nothing until `release` is signalled: larger than every buffer on the way (the pair's,
    /// the connection's, the kernel's, a few MiB on loopback).
    private struct StalledUpload {
        let release: DispatchSemaphore
        let server: ScriptedServer
        let payload: Data
        let pair: Unchecked<(InputStream, OutputStream)>
        let delegate: StreamGivingDelegate
        let session: URLSession
        let writer: PairWriter
        let task: URLSessionUploadTask

        func stop() {
            release.signal()
            server.stop()
            session.finishTasksAndInvalidate()
        }
    }

    private func stalledUpload(seed: UInt64) throws -> StalledUpload {
        let release = DispatchSemaphore(value: 0)
        let server = try stalledServer(release)
        let payload = Data(deterministicBytes(count: 24 * 1024 * 1024, seed: seed))
        let pair = try makePair()
        let delegate = StreamGivingDelegate { pair.value.0 }
        // The stall lasts as long as the test takes to see it settle: under a sanitizer in the
        // whole suite, longer than the default 60 s of silence a request may have.
        let configuration = URLSessionConfiguration.uncached
        configuration.timeoutIntervalForRequest = 600
        let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        let writer = startWriter(pair, payload: payload, piece: 64 * 1024)
        var request = URLRequest(url: server.url("/upload"))
        request.httpMethod = "PUT"
        let task = session.uploadTask(withStreamedRequest: request)
        return StalledUpload(release: release, server: server, payload: payload, pair: pair, delegate: delegate, session: session, writer: writer, task: task)
    }

    @Test("a server that stops reading holds the writer back; the body arrives whole once it reads")
    func backPressure() async throws {
        let upload = try stalledUpload(seed: 92)
        defer { upload.stop() }
        let (writer, payload) = (upload.writer, upload.payload)
        async let outcome = upload.delegate.run(upload.task)

        let held = await settled { writer.taken }
        let stalledAt = try #require(held, "the writer keeps being let through")
        #expect(stalledAt < payload.count, "the writer is held back (\(stalledAt) bytes taken)")
        #expect(writer.lastWrite == nil, "the writer is still waiting")
        #expect(upload.task.countOfBytesSent <= Int64(stalledAt))

        upload.release.signal()
        let error = await outcome
        #expect(error == nil, "\(String(describing: error))")
        let response = try #require(upload.delegate.response)
        #expect(response.value(forHTTPHeaderField: "X-Body-Length") == "\(payload.count)")
        #expect(response.value(forHTTPHeaderField: "X-Body-SHA256") == payload.sha256Hex)
        #expect(writer.taken == payload.count)
    }

    @Test("cancelling the task closes the input stream: a writer waiting for room fails with EPIPE")
    func cancelWakesWriter() async throws {
        let upload = try stalledUpload(seed: 93)
        defer { upload.stop() }
        let writer = upload.writer
        async let outcome = upload.delegate.run(upload.task)

        _ = try #require(await settled { writer.taken })
        #expect(writer.lastWrite == nil, "the writer is waiting for room")
        upload.task.cancel()
        let error = await outcome
        #expect((error as? URLError)?.code == .cancelled)
        #expect(await pollUntil { writer.lastWrite != nil })
        #expect(writer.lastWrite == -1)
        let streamError = try #require(upload.pair.value.1.streamError as NSError?)
        #expect(streamError.domain == NSPOSIXErrorDomain && streamError.code == Int(EPIPE))
    }
}

/// What a writer thread did: the bytes the output stream took so far, and the last write's
/// return value once the thread ended (-1 when a write failed).
final class PairWriter: Sendable {
    let written = Atomic<Int>(0)
    let result = Mutex<Int?>(nil)
    var taken: Int { written.load(ordering: .relaxed) }
    var lastWrite: Int? { result.withLock { $0 } }
}
