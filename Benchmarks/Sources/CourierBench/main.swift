// The URLSession workload client of the benchmark harness. The same file is built twice: as
// courier-bench with Courier, and (run.sh writes the copy) as foundation-bench with
// FoundationNetworking. It uses the public API as users do: async `data(for:)` in a loop (W1,
// W4), in as many tasks as requests in flight (W2; W2T: a task a request), for W3 a download
// task (to a file) or a data task whose delegate drops the body (to the discarding sink), for
// U1 an upload task from a file, and for W3R a download task cancelled for resume data and a
// second one made from that data.
//
//   <client> w1 URL COUNT                sequential GETs on one keep-alive connection
//   <client> w1shared|w1default|w1ephemeral URL COUNT  the same by URLSession.shared, or a
//                                        session of the default configuration (both with the
//                                        shared cache), or of the ephemeral one
//   <client> w2 URL COUNT CONCURRENCY    COUNT GETs, CONCURRENCY in flight
//   <client> w2t URL COUNT CONCURRENCY   the same, each GET in a child task of its own
//   <client> w3 URL SINK                 one download to SINK ("discard" or a file path)
//   <client> w3data URL                  one GET whose body data(for:) returns whole
//   courier-bench w3stream URL                the body read raw by a stream task (HTTP/1.0 by hand)
//   <client> w4 URL COUNT                sequential GETs (the server closes each connection)
//   <client> u1 URL FILE                 one PUT of FILE, streamed from disk (the server
//                                        answers with the number of body bytes it read)
//   <client> u1stream URL FILE           the same PUT, its body an InputStream on FILE
//   <client> w3r URL FILE [CUT]          one download to FILE, cancelled for resume data once
//                                        CUT bytes are written (512 MiB), then resumed
//   courier-bench w3bg URL FILE           one download to FILE by a background session
//   <client> ws-echo URL COUNT           COUNT sequential WebSocket round trips of a 100-byte
//                                        text message (URLSessionWebSocketTask)
//   <client> ws-big URL COUNT            the same with a 1 MiB binary message
//   <client> ws-text URL COUNT           the same with about 1 MiB of text, mostly ASCII
//   courier-bench bytes|lines URL main|task  the body of bytes(for:) read a byte or a line at a
//                                        time, on the main actor or in a detached task
//
// It prints one JSON object: requests, seconds (of the measured part), bytes, errors and, when
// the malloc counter is preloaded, allocations.

import BenchSupport
import Dispatch
import Foundation
import Courier
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Reads the preloaded malloc counter, if there is one.
func allocationCount() -> UInt64? {
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "courier_malloc_count") else { return nil }
    typealias Counter = @convention(c) () -> UInt64
    return unsafeBitCast(symbol, to: Counter.self)()
}

/// Moves a finished download's file to `destination`, replacing what is there.
func moveDownload(_ location: URL, to destination: String) -> (any Error)? {
    try? FileManager.default.removeItem(atPath: destination)
    do {
        try FileManager.default.moveItem(atPath: location.path, toPath: destination)
    } catch {
        return error
    }
    return nil
}

/// The size of the file at `path`, or -1 when there is none.
func fileSize(_ path: String) -> Int {
    guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
          let size = attributes[.size] as? NSNumber else { return -1 }
    return size.intValue
}

/// Counts and drops a data task's body (W3 to the discarding sink), or moves a download task's
/// file to its destination (W3 to a file), and reports completion.
final class SinkDelegate: NSObject, URLSessionDataDelegate, URLSessionDownloadDelegate, @unchecked Sendable {
    let destination: String?
    var bytes = 0
    var error: (any Error)?
    /// Set before the task starts; called once, on the delegate queue, when it completes.
    var done: (@Sendable () -> Void)?

    init(destination: String?) {
        self.destination = destination
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        bytes += data.count
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        guard let destination else { return }
        bytes = Int(downloadTask.countOfBytesReceived)
        if let failure = moveDownload(location, to: destination) { error = failure }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        self.error = error
        done?()
    }
}

/// U1: keeps the server's short answer to the upload (the number of body bytes it read).
final class UploadDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    var answer = Data()
    var error: (any Error)?
    /// Set before the task starts; called once, on the delegate queue, when it completes.
    var done: (@Sendable () -> Void)?

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        answer.append(data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        self.error = error
        done?()
    }
}

/// W3R: cancels the first download task for resume data once `cut` bytes are written, starts
/// a second task from that data, and moves the finished file to its destination. Everything
/// runs on the session's (serial) delegate queue, the resume data handler included.
final class ResumeDelegate: NSObject, URLSessionDownloadDelegate, @unchecked Sendable {
    let destination: String
    let cut: Int64
    /// The session, to make the second task in.
    weak var session: URLSession?
    /// The task that is interrupted; set before it starts.
    var firstTask = -1
    /// Bytes written when the cancel was asked for.
    var cancelledAt: Int64 = -1
    /// What `didResumeAtOffset` told: the offset the second task went on from, and the whole length.
    var resumedAt: Int64 = -1
    var expectedTotal: Int64 = -1
    var resumeDataBytes = 0
    var cancelled: ContinuousClock.Instant?
    var resumed: ContinuousClock.Instant?
    /// Why the run failed; nil when it did not.
    var failure: String?
    /// Set before the first task starts; called once, when the run ends either way.
    var done: (@Sendable () -> Void)?

    init(destination: String, cut: Int64) {
        self.destination = destination
        self.cut = cut
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        guard downloadTask.taskIdentifier == firstTask, cancelled == nil, totalBytesWritten >= cut else { return }
        cancelledAt = totalBytesWritten
        cancelled = .now
        downloadTask.cancel(byProducingResumeData: { data in self.goOn(from: data) })
    }

    /// The first task's resume data arrived: the second part starts from it.
    func goOn(from data: Data?) {
        guard let data, let session else {
            finish("cancel(byProducingResumeData:) gave no resume data")
            return
        }
        resumeDataBytes = data.count
        resumed = .now
        session.downloadTask(withResumeData: data).resume()
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didResumeAtOffset fileOffset: Int64, expectedTotalBytes: Int64) {
        resumedAt = fileOffset
        expectedTotal = expectedTotalBytes
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        if let error = moveDownload(location, to: destination) { failure = failure ?? "moving the file: \(error)" }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        if task.taskIdentifier == firstTask {
            // The interrupted part ends cancelled, as asked; ending otherwise, it never reached the cut.
            guard cancelled == nil else { return }
            finish(error.map { "the first part failed: \($0)" } ?? "the download ended before \(cut) bytes were written")
        } else {
            finish(error.map { "the resumed part failed: \($0)" })
        }
    }

    /// Ends the run, once; `why` is its failure, nil on success.
    func finish(_ why: String?) {
        if failure == nil { failure = why }
        let finished = done
        done = nil
        finished?()
    }
}

let arguments = CommandLine.arguments
guard arguments.count >= 4, let url = URL(string: arguments[2]) else {
    FileHandle.standardError.write(Data("usage: \(arguments[0]) w1|w2|w2t|w3|w4|u1|w3r URL COUNT|SINK|FILE [CONCURRENCY|CUT]\n".utf8))
    exit(2)
}
let configuration = URLSessionConfiguration.ephemeral
configuration.httpMaximumConnectionsPerHost = 64
// The workloads measure the network: no cache answers for it (nginx's files carry validators,
// and a cache would revalidate or answer them). The `hit` workload measures the cache.
configuration.urlCache = nil
let session = URLSession(configuration: configuration)
let request = URLRequest(url: url)
// COURIER_BENCH_EXECUTOR=loop: W1 and W2 run in a task that prefers the session's event loop
// (URLSession.courierTaskExecutor); otherwise on the global executor, as most code does.
// FoundationNetworking has no such executor: its build ignores the variable.
let onLoop = ProcessInfo.processInfo.environment["COURIER_BENCH_EXECUTOR"] == "loop"

/// The executor W1 and W2 prefer: the session's loop for COURIER_BENCH_EXECUTOR=loop, else
/// none (the global executor).
func preferredExecutor(_ session: URLSession) -> (any TaskExecutor)? {
    #if FOUNDATION_BENCH
    return nil
    #else
    return onLoop ? session.courierTaskExecutor : nil
    #endif
}

switch arguments[1] {
#if !FOUNDATION_BENCH
// FoundationNetworking has no bytes(for:).
case "bytes", "lines":
    // The body of bytes(for:) read a byte or a line at a time. Not a run.py workload
    // (docs/internals/session.md, on BytesSink).
    let onMainActor = arguments[3] == "main"
    let readsLines = arguments[1] == "lines"
    // The loop in a main-actor function, as an app's would be (after each await it returns
    // to the main actor), or in a nonisolated one run by a detached task.
    @MainActor func countOnMainActor<Elements: AsyncSequence>(_ elements: Elements) async throws -> Int {
        var count = 0
        for try await _ in elements { count += 1 }
        return count
    }
    @Sendable nonisolated func countInTask<Elements: AsyncSequence>(_ elements: Elements) async throws -> Int {
        var count = 0
        for try await _ in elements { count += 1 }
        return count
    }
    let start = ContinuousClock.now
    let (bytes, _) = try await session.bytes(for: request)
    let count: Int
    switch (onMainActor, readsLines) {
    case (true, true): count = try await countOnMainActor(bytes.lines)
    case (true, false): count = try await countOnMainActor(bytes)
    case (false, true): count = try await Task.detached { try await countInTask(bytes.lines) }.value
    case (false, false): count = try await Task.detached { try await countInTask(bytes) }.value
    }
    emit(["requests": 1, "seconds": seconds(ContinuousClock.now - start), readsLines ? "lines" : "bytes": count])
#endif
case "w1", "w4", "w1shared", "w1default", "w1ephemeral":
    let count = Int(arguments[3]) ?? 1000
    // w1shared: URLSession.shared, as most code calls it, the shared cache included; w1default:
    // a session of the default configuration (the same cache); w1ephemeral: of the ephemeral
    // one (a cache in memory of its own). Not run.py workloads.
    let session = switch arguments[1] {
    case "w1shared": URLSession.shared
    case "w1default": URLSession(configuration: .default)
    case "w1ephemeral": URLSession(configuration: .ephemeral)
    default: session
    }
    // One request outside the measurement, to open the connection.
    _ = try? await session.data(for: request)
    let before = allocationCount()
    // The closures are @Sendable: one written plainly in this top-level code would belong to
    // the main actor, and every request would cross to it and back (four more thread switches
    // a request, measured with perf stat -e context-switches).
    // COURIER_BENCH_DISTINCT=1: each request's URL has a query of its own (?n=N), so that a
    // cache stores every response and answers none.
    let distinct = ProcessInfo.processInfo.environment["COURIER_BENCH_DISTINCT"] == "1"
    let counter = Atomic<Int>(0)
    let tally = await withTaskExecutorPreference(preferredExecutor(session)) {
        await sequentialLoads(count) { @Sendable in
            guard distinct else { return try await session.data(for: request).0.count }
            let n = counter.wrappingAdd(1, ordering: .relaxed).newValue
            return try await session.data(for: URLRequest(url: URL(string: "\(url.absoluteString)?n=\(n)")!)).0.count
        }
    }
    var fields = tally.fields
    if let before, let after = allocationCount() { fields["allocations"] = after - before }
    emit(fields)
case "w2", "w2t":
    let count = Int(arguments[3]) ?? 1000
    let concurrency = arguments.count > 4 ? Int(arguments[4]) ?? 32 : 32
    let loads = arguments[1] == "w2" ? concurrentLoads : loadsInChildTasks
    _ = try? await session.data(for: request)
    let before = allocationCount()
    var fields = await withTaskExecutorPreference(preferredExecutor(session)) {
        await loads(count, concurrency) { try await session.data(for: request).0.count }
    }.fields
    if let before, let after = allocationCount() { fields["allocations"] = after - before }
    emit(fields)
case "w3":
    let sink = arguments[3]
    let delegate = SinkDelegate(destination: sink == "discard" ? nil : sink)
    let streaming = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    let start = ContinuousClock.now
    // No thread blocks while waiting: a semaphore wait on a Dispatch thread would take the
    // only worker a one-CPU process gets, and the delegate queue would starve behind it.
    await withCheckedContinuation { continuation in
        delegate.done = { continuation.resume() }
        if sink == "discard" {
            streaming.dataTask(with: request).resume()
        } else {
            streaming.downloadTask(with: request).resume()
        }
    }
    let elapsed = ContinuousClock.now - start
    emit(["requests": delegate.error == nil ? 1 : 0, "seconds": seconds(elapsed), "bytes": delegate.bytes, "errors": delegate.error == nil ? 0 : 1])
case "u1", "u1stream":
    // One PUT whose body the upload task streams from the file (u1stream: a data task whose
    // httpBodyStream is an InputStream on the file; not a run.py workload). It counts as done
    // only when the server answered 200 with the file's size: it read every byte.
    let path = arguments[3]
    let size = fileSize(path)
    var upload = request
    upload.httpMethod = "PUT"
    let delegate = UploadDelegate()
    let uploading = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    let task: URLSessionTask
    if arguments[1] == "u1stream" {
        upload.httpBodyStream = InputStream(fileAtPath: path)
        upload.setValue(String(size), forHTTPHeaderField: "Content-Length")
        task = uploading.dataTask(with: upload)
    } else {
        task = uploading.uploadTask(with: upload, fromFile: URL(fileURLWithPath: path))
    }
    let start = ContinuousClock.now
    await withCheckedContinuation { continuation in
        delegate.done = { continuation.resume() }
        task.resume()
    }
    let elapsed = ContinuousClock.now - start
    let status = (task.response as? HTTPURLResponse)?.statusCode ?? 0
    let whole = delegate.error == nil && status == 200 && Int(String(decoding: delegate.answer, as: UTF8.self)) == size
    emit(["requests": whole ? 1 : 0, "seconds": seconds(elapsed), "bytes": whole ? size : 0, "sent": Int(task.countOfBytesSent),
          "status": status, "errors": whole ? 0 : 1])
#if !FOUNDATION_BENCH
// FoundationNetworking has no background sessions on Linux.
case "w3bg":
    // The W3 download to a file by a background session: the courier-background daemon
    // ($COURIER_BACKGROUND_DAEMON) downloads, and the file reaches the delegate. Not a run.py
    // workload (docs/internals/session.md, on background sessions).
    let destination = arguments[3]
    let delegate = SinkDelegate(destination: destination)
    let background = URLSessionConfiguration.background(withIdentifier: "courier-bench-\(getpid())")
    let downloading = URLSession(configuration: background, delegate: delegate, delegateQueue: nil)
    let start = ContinuousClock.now
    await withCheckedContinuation { continuation in
        delegate.done = { continuation.resume() }
        downloading.downloadTask(with: request).resume()
    }
    let elapsed = ContinuousClock.now - start
    downloading.finishTasksAndInvalidate()
    let size = fileSize(destination)
    let whole = delegate.error == nil && size > 0
    var fields: [String: Any] = ["requests": whole ? 1 : 0, "seconds": seconds(elapsed), "bytes": whole ? size : 0, "errors": whole ? 0 : 1]
    if let error = delegate.error { fields["failure"] = "\(error)" }
    emit(fields)
#endif
case "w3data":
    // The W3 body as one Data from data(for:). Not a run.py workload.
    let start = ContinuousClock.now
    let (body, _) = try await session.data(for: request)
    emit(["requests": 1, "seconds": seconds(ContinuousClock.now - start), "bytes": body.count])
#if !FOUNDATION_BENCH
// FoundationNetworking's stream task is unimplemented.
case "w3stream":
    // The W3 body read raw by a URLSessionStreamTask (an HTTP/1.0 GET written by hand), a
    // MiB at most a read, to the end. Not a run.py workload.
    let task = session.streamTask(withHostName: url.host ?? "127.0.0.1", port: url.port ?? 80)
    task.resume()
    let start = ContinuousClock.now
    try await task.write(Data("GET \(url.path) HTTP/1.0\r\nHost: \(url.host ?? "")\r\n\r\n".utf8), timeout: 30)
    var received = 0
    var reads = 0
    while true {
        let (data, atEOF) = try await task.readData(ofMinLength: 1, maxLength: 1 << 20, timeout: 30)
        received += data?.count ?? 0
        reads += 1
        if atEOF { break }
    }
    emit(["requests": 1, "seconds": seconds(ContinuousClock.now - start), "bytes": received, "reads": reads])
#endif
case "w3r":
    // The W3 download to a file, cancelled for resume data once CUT bytes are written and
    // finished by a task made from that data; timed over both parts and the pause between.
    let destination = arguments[3]
    let cut = arguments.count > 4 ? Int64(arguments[4]) ?? 512 << 20 : 512 << 20
    let delegate = ResumeDelegate(destination: destination, cut: cut)
    let resuming = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
    delegate.session = resuming
    let first = resuming.downloadTask(with: request)
    delegate.firstTask = first.taskIdentifier
    // A part that never ends (a handler never called) fails the run rather than hanging it.
    DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(300)) {
        FileHandle.standardError.write(Data("w3r: not done after 300 s\n".utf8))
        exit(3)
    }
    let start = ContinuousClock.now
    await withCheckedContinuation { continuation in
        delegate.done = { continuation.resume() }
        first.resume()
    }
    let end = ContinuousClock.now
    let size = fileSize(destination)
    let whole = delegate.failure == nil && size > 0
    var fields: [String: Any] = [
        "requests": whole ? 1 : 0, "seconds": seconds(end - start), "bytes": whole ? size : 0, "errors": whole ? 0 : 1,
        "cancelledAt": Int(delegate.cancelledAt), "resumedAt": Int(delegate.resumedAt),
        "expectedTotal": Int(delegate.expectedTotal), "resumeDataBytes": delegate.resumeDataBytes,
    ]
    if let cancelled = delegate.cancelled, let resumed = delegate.resumed {
        fields["firstSeconds"] = seconds(cancelled - start)
        fields["pauseSeconds"] = seconds(resumed - cancelled)
        fields["secondSeconds"] = seconds(end - resumed)
    }
    if let failure = delegate.failure { fields["failure"] = failure }
    emit(fields)
case "hit":
    // COUNT sequential data(for:) answered from the cache (memory, or disk with a memory
    // capacity of zero), after one load that stores the response.
    let count = Int(arguments[3]) ?? 1000
    let onDisk = arguments.count > 4 && arguments[4] == "disk"
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("courier-bench-cache-\(getpid())")
    defer { try? FileManager.default.removeItem(at: directory) }
    let cached = URLSessionConfiguration.ephemeral
    // The diskPath: form, which FoundationNetworking has too (foundation-bench shares this source).
    cached.urlCache = onDisk
        ? URLCache(memoryCapacity: 0, diskCapacity: 64 * 1024 * 1024, diskPath: directory.path)
        : URLCache(memoryCapacity: 64 * 1024 * 1024, diskCapacity: 0, diskPath: nil)
    let caching = URLSession(configuration: cached)
    var cacheRequest = request
    cacheRequest.cachePolicy = .returnCacheDataElseLoad
    let fromCache = cacheRequest
    _ = try? await caching.data(for: fromCache)
    // Let a disk write land before measuring.
    try? await Task.sleep(for: .milliseconds(200))
    emit(await sequentialLoads(count) { @Sendable in try await caching.data(for: fromCache).0.count }.fields)
case "ws-echo", "ws-big", "ws-text":
    // One WebSocket task; each round trip is a send, then a receive of the echo.
    let count = Int(arguments[3]) ?? 1000
    let big = arguments[1] == "ws-big"
    // ws-text: whole lines up to 1 MiB of text, mostly ASCII with a two- and a three-byte character a line.
    let line = "{\"name\": \"Zoë\", \"id\": 1234567, \"tags\": [\"a\", \"b\"], \"ok\": \"✓\"}\n"
    let text = arguments[1] == "ws-text" ? String(repeating: line, count: (1 << 20) / line.utf8.count) : String(repeating: "x", count: 100)
    let message: URLSessionWebSocketTask.Message = big
        ? .data(Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 2654435761 >> 13) }))
        : .string(text)
    let payload = big ? 1 << 20 : text.utf8.count
    let socket = session.webSocketTask(with: url)
    socket.maximumMessageSize = 4 << 20
    socket.resume()
    var errors = 0
    do {
        try await socket.send(message)
        _ = try await socket.receive()
    } catch {
        FileHandle.standardError.write(Data("ws: \(error)\n".utf8))
        exit(3)
    }
    let start = ContinuousClock.now
    for _ in 0..<count {
        do {
            try await socket.send(message)
            switch try await socket.receive() {
            case .data(let data): if !big || data.count != payload { errors += 1 }
            case .string(let text): if big || text.utf8.count != payload { errors += 1 }
            @unknown default: errors += 1
            }
        } catch {
            errors += 1
            break
        }
    }
    let elapsed = ContinuousClock.now - start
    socket.cancel(with: .normalClosure, reason: nil)
    emit(["requests": count, "seconds": seconds(elapsed), "bytes": count * payload, "errors": errors])
default:
    FileHandle.standardError.write(Data("unknown workload \(arguments[1])\n".utf8))
    exit(2)
}
