// The URLSession workload client of the benchmark harness. The same file is built twice: as
// courier-bench with Courier, and (run.sh writes the copy) as foundation-bench with
// FoundationNetworking. It uses the public API as users do: async `data(for:)` in a loop (W1,
// W4), a task group (W2), and for W3 a download task (to a file) or a data task whose delegate
// drops the body (to the discarding sink).
//
//   <client> w1 URL COUNT                sequential GETs on one keep-alive connection
//   <client> w2 URL COUNT CONCURRENCY    COUNT GETs, CONCURRENCY in flight
//   <client> w3 URL SINK                 one download to SINK ("discard" or a file path)
//   <client> w4 URL COUNT                sequential GETs (the server closes each connection)
//
// It prints one JSON object: requests, seconds (of the measured part), bytes, errors and, when
// the malloc counter is preloaded, allocations.

import BenchSupport
import Foundation
import Courier

#if canImport(Glibc)
import Glibc
#endif

/// Reads the preloaded malloc counter, if there is one.
func allocationCount() -> UInt64? {
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "courier_malloc_count") else { return nil }
    typealias Counter = @convention(c) () -> UInt64
    return unsafeBitCast(symbol, to: Counter.self)()
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
        try? FileManager.default.removeItem(atPath: destination)
        do {
            try FileManager.default.moveItem(atPath: location.path, toPath: destination)
        } catch {
            self.error = error
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        self.error = error
        done?()
    }
}

let arguments = CommandLine.arguments
guard arguments.count >= 4, let url = URL(string: arguments[2]) else {
    FileHandle.standardError.write(Data("usage: \(arguments[0]) w1|w2|w3|w4 URL COUNT|SINK [CONCURRENCY]\n".utf8))
    exit(2)
}
let configuration = URLSessionConfiguration.ephemeral
configuration.httpMaximumConnectionsPerHost = 64
// The workloads measure the network: no cache answers for it (nginx's files carry validators,
// and a cache would revalidate or answer them). The `hit` workload measures the cache.
configuration.urlCache = nil
let session = URLSession(configuration: configuration)
let request = URLRequest(url: url)

switch arguments[1] {
case "w1", "w4":
    let count = Int(arguments[3]) ?? 1000
    // One request outside the measurement, to open the connection.
    _ = try? await session.data(for: request)
    let before = allocationCount()
    let tally = await sequentialLoads(count) { try await session.data(for: request).0.count }
    var fields = tally.fields
    if let before, let after = allocationCount() { fields["allocations"] = after - before }
    emit(fields)
case "w2":
    let count = Int(arguments[3]) ?? 1000
    let concurrency = arguments.count > 4 ? Int(arguments[4]) ?? 32 : 32
    _ = try? await session.data(for: request)
    emit(await concurrentLoads(count, concurrency: concurrency) { try await session.data(for: request).0.count }.fields)
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
    var fromCache = request
    fromCache.cachePolicy = .returnCacheDataElseLoad
    _ = try? await caching.data(for: fromCache)
    // Let a disk write land before measuring.
    try? await Task.sleep(for: .milliseconds(200))
    emit(await sequentialLoads(count) { try await caching.data(for: fromCache).0.count }.fields)
default:
    FileHandle.standardError.write(Data("unknown workload \(arguments[1])\n".utf8))
    exit(2)
}
