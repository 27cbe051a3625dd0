import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// Records delegate callbacks in order, with the thread facts the tests check.
final class RecordingDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    struct Record {
        var events: [String] = []
        var data = Data()
        var error: (any Error)?
        var metrics: URLSessionTaskMetrics?
        var offQueue = 0
        var concurrent = 0
        var inside = 0
    }

    let record = Mutex(Record())
    let disposition: URLSession.ResponseDisposition
    private let done = Mutex<CheckedContinuation<Void, Never>?>(nil)
    private let finished = Mutex(false)
    /// Called inside didReceive data, on the delegate queue.
    let onData: (@Sendable (URLSessionDataTask) -> Void)?

    init(disposition: URLSession.ResponseDisposition = .allow, onData: (@Sendable (URLSessionDataTask) -> Void)? = nil) {
        self.disposition = disposition
        self.onData = onData
    }

    private func enter(_ session: URLSession, _ event: String) {
        record.withLock { record in
            record.events.append(event)
            if OperationQueue.current !== session.delegateQueue { record.offQueue += 1 }
            record.inside += 1
            if record.inside > 1 { record.concurrent += 1 }
        }
    }

    private func leave() {
        record.withLock { $0.inside -= 1 }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        enter(session, "response")
        // Let any wrongly scheduled data callback overlap, if the session allowed it.
        usleep(2000)
        leave()
        completionHandler(disposition)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        enter(session, "data")
        record.withLock { $0.data.append(data) }
        onData?(dataTask)
        leave()
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
        enter(session, "metrics")
        record.withLock { $0.metrics = metrics }
        leave()
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        enter(session, "complete")
        record.withLock { $0.error = error }
        leave()
        finished.withLock { $0 = true }
        done.withLock { $0?.resume(); $0 = nil }
    }

    /// Waits for didCompleteWithError.
    func waitForCompletion() async {
        await withCheckedContinuation { continuation in
            let already = finished.withLock { $0 }
            if already {
                continuation.resume()
            } else {
                done.withLock { $0 = continuation }
                if finished.withLock({ $0 }) { done.withLock { $0?.resume(); $0 = nil } }
            }
        }
    }

    /// Events with consecutive "data" collapsed into one.
    var collapsedEvents: [String] {
        record.withLock { $0.events }.reduce(into: [String]()) { result, event in
            if event == "data" && result.last == "data" { return }
            result.append(event)
        }
    }
}

/// The URLError code of an error, or nil.
func urlErrorCode(_ error: (any Error)?) -> URLError.Code? {
    (error as? URLError)?.code
}

/// Runs a completion-handler data task and waits for it.
func loadWithCompletionHandler(_ session: URLSession, _ request: URLRequest) async -> (Data?, URLResponse?, (any Error)?) {
    await withCheckedContinuation { continuation in
        session.dataTask(with: request) { data, response, error in
            continuation.resume(returning: (data, response, error))
        }.resume()
    }
}

extension Data {
    var sha256Hex: String { SHA256.hex(self) }
}

/// The X-Connection header nginx adds to every response.
func nginxConnection(_ response: URLResponse?) -> String? {
    (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Connection")
}

/// Expects `body` to throw a URLError with `code` and a failing URL.
func expectURLError(_ code: URLError.Code, _ body: () async throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) async {
    do {
        try await body()
        Issue.record("expected URLError \(code)", sourceLocation: sourceLocation)
    } catch let error as URLError {
        #expect(error.code == code, "\(error.localizedDescription)", sourceLocation: sourceLocation)
        #expect(error.failingURL != nil, sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected URLError \(code), got \(error)", sourceLocation: sourceLocation)
    }
}

/// Loads `request` with a completion handler and returns its error and how long the load took,
/// timed where the completion is delivered (the delegate queue), not where the awaiting test
/// resumes: a busy test process can keep an awaiting task waiting for a thread for seconds.
func timedLoad(_ session: URLSession, _ request: URLRequest) async -> (error: (any Error)?, took: Duration) {
    let start = ContinuousClock.now
    return await withCheckedContinuation { continuation in
        session.dataTask(with: request) { _, _, error in
            continuation.resume(returning: (error, ContinuousClock.now - start))
        }.resume()
    }
}

extension URLSessionConfiguration {
    /// An ephemeral configuration without a cache, for the suites that test the transport: a
    /// repeated request for one of nginx's files (which carry Last-Modified, so they are
    /// heuristically fresh for a moment) must reach the server, not the session's cache.
    static var uncached: URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        return configuration
    }
}

/// What a killed store writer (`courier-store-writer`) reported before it died.
struct KilledWriter {
    /// The indexes it printed as `committed <index>`: durable before the kill.
    var reported: Set<Int>
    var killed: Bool
    var terminationReason: Process.TerminationReason
    var stderr: String
}

/// Starts `courier-store-writer` with `arguments`, reads its `committed <index>` lines, and
/// kills it with SIGKILL once it reported `threshold` of them (after `delay` microseconds);
/// the lines already in the pipe then are read too.
func runAndKillStoreWriter(_ writer: URL, arguments: [String], threshold: Int, delay: UInt32) throws -> KilledWriter {
    let process = Process()
    process.executableURL = writer
    process.arguments = arguments
    let output = Pipe()
    let errors = Pipe()
    process.standardOutput = output
    process.standardError = errors
    process.standardInput = FileHandle.nullDevice
    try process.run()
    var reported = Set<Int>()
    var pending = Data()
    var killed = false
    let reader = output.fileHandleForReading
    while true {
        let chunk = reader.availableData
        if chunk.isEmpty { break }
        pending.append(chunk)
        while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
            let line = String(decoding: pending[pending.startIndex..<newline], as: UTF8.self)
            pending.removeSubrange(pending.startIndex...newline)
            if line.hasPrefix("committed "), let index = Int(line.dropFirst("committed ".count)) {
                reported.insert(index)
            }
        }
        if !killed, reported.count >= threshold {
            if delay > 0 { usleep(delay) }
            killed = kill(process.processIdentifier, SIGKILL) == 0
        }
    }
    process.waitUntilExit()
    let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    return KilledWriter(reported: reported, killed: killed, terminationReason: process.terminationReason, stderr: stderr)
}

/// Keeps the calling thread busy for `duration`, without a suspension point: a job that holds a
/// thread of the cooperative pool, for tests of what waits behind it.
func keepBusy(for duration: Duration) {
    let end = ContinuousClock.now + duration
    while ContinuousClock.now < end {}
}

/// Polls `condition` every 10 ms, blocking the thread; false when it still fails after
/// `seconds`. For clean-ups, which run in `defer`, and for server threads that wait on a client.
func waitBlocking(seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while !condition() {
        if Date() >= deadline { return false }
        usleep(10_000)
    }
    return true
}
