// The soak: one URLSession, many requests in flight against nginx on loopback, the way a server
// embedding Courier uses it, for as long as asked. It checks that every task completes exactly
// once, and reports per tenth of the run the request rate, the resident memory and the CPU time
// (user and system) a request, then the file descriptors and temporary download files before
// and after. See scripts/soak.sh.
//
//   courier-soak [--requests N] [--concurrency N] [--calm] [--h1] [--cache]
//
// --calm leaves out the cancels, suspends and short timeouts; --h1 leaves out HTTP/2; --cache
// keeps the default configuration's URLCache (left out otherwise, so that every request goes
// to nginx).
import Courier
import CourierSync
import Foundation
import _CourierTestSupport

struct Options {
    var requests = 100_000
    var concurrency = 64
    var chaos = true
    var http2 = true
    var cache = false

    init(_ arguments: [String]) {
        var iterator = arguments.dropFirst().makeIterator()
        while let argument = iterator.next() {
            switch argument {
            case "--requests": requests = iterator.next().flatMap(Int.init) ?? requests
            case "--concurrency": concurrency = iterator.next().flatMap(Int.init) ?? concurrency
            case "--calm": chaos = false
            case "--h1": http2 = false
            case "--cache": cache = true
            default:
                FileHandle.standardError.write(Data("usage: courier-soak [--requests N] [--concurrency N] [--calm] [--h1] [--cache]\n".utf8))
                exit(2)
            }
        }
    }
}

/// Resident memory in MB, from /proc.
func residentMegabytes() -> Double {
    guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = statm.split(separator: " ")
    guard fields.count > 1, let pages = Double(fields[1]) else { return 0 }
    return pages * Double(sysconf(Int32(_SC_PAGESIZE))) / 1_048_576
}

/// The CPU time the process has used, user and system, in seconds.
func processorSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// The open file descriptors, by what they point at.
func openDescriptors() -> [String] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return names.map { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) ?? "?" }
}

/// What `after` holds that `before` did not, kinds counted ("socket" for every socket, ...).
func extra(_ after: [String], over before: [String]) -> [String: Int] {
    var counts: [String: Int] = [:]
    for target in after { counts[kind(target), default: 0] += 1 }
    for target in before { counts[kind(target), default: 0] -= 1 }
    return counts.filter { $0.value != 0 }
}

func kind(_ target: String) -> String {
    if let bracket = target.firstIndex(of: "[") { return String(target[..<bracket]) }
    return target
}

func downloadFiles() -> Int {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: FileManager.default.temporaryDirectory.path)) ?? []
    return names.filter { $0.hasPrefix("CourierDownload_") || $0.hasPrefix("CourierPartial_") }.count
}

/// Counts completions per request index: each must complete exactly once.
final class Ledger: Sendable {
    private let counts: Mutex<[UInt8]>
    let completed = Atomic<Int>(0)

    init(_ count: Int) {
        counts = Mutex([UInt8](repeating: 0, count: count))
    }

    func complete(_ index: Int) {
        counts.withLock { $0[index] &+= 1 }
        completed.add(1, ordering: .relaxed)
    }

    /// Requests that completed other than once.
    var anomalies: (lost: Int, doubled: Int) {
        counts.withLock { counts in (counts.filter { $0 == 0 }.count, counts.filter { $0 > 1 }.count) }
    }
}

let options = Options(CommandLine.arguments)
let nginx = try NginxServer.shared()
let configuration = URLSessionConfiguration.default
if !options.cache { configuration.urlCache = nil }
let session = URLSession(configuration: configuration)
let ledger = Ledger(options.requests)
let descriptorsBefore = openDescriptors()
let filesBefore = downloadFiles()

/// One request of the mix, by its index: async data, completion-handler data and download
/// tasks, over HTTP/1.1 and HTTP/2, some cancelled, suspended for a moment or timed out.
func load(_ index: Int) async {
    let http2 = options.http2 && index % 2 == 1
    let path = index % 5 == 0 ? "/files/64k.bin" : "/files/100.bin"
    var request = URLRequest(url: http2 ? nginx.tlsURL("good", path) : nginx.url(path))
    let chaos = options.chaos ? index % 20 : -1
    if chaos == 3 { request.timeoutInterval = 0.0005 }
    switch index % 3 {
    case 0:
        let task = Task { _ = try? await session.data(for: request) }
        if chaos == 7 { task.cancel() }
        await task.value
        ledger.complete(index)
    case 1:
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let task = session.dataTask(with: request) { _, _, _ in
                ledger.complete(index)
                continuation.resume()
            }
            task.resume()
            if chaos == 7 { task.cancel() }
            if chaos == 11 {
                task.suspend()
                task.resume()
            }
        }
    default:
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let task = session.downloadTask(with: request) { _, _, _ in
                ledger.complete(index)
                continuation.resume()
            }
            task.resume()
            if chaos == 7 { task.cancel() }
        }
    }
}

let start = ContinuousClock.now
let tenth = max(options.requests / 10, 1)
var lastMark = start
var lastCount = 0
var lastCPU = processorSeconds()

/// Prints tenth `number`, which ended with `count` requests completed, from the marks the tenth
/// before it left, and leaves its own.
@MainActor func reportTenth(_ number: Int, _ count: Int) {
    let now = ContinuousClock.now
    let elapsed = now - lastMark
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    let cpu = processorSeconds()
    let requests = Double(count - lastCount)
    print(String(format: "%6d  %8d  %7.0f  %7.1f  %10.1f", number, count, requests / seconds, residentMegabytes(),
                 (cpu - lastCPU) * 1e6 / requests))
    // Shown as it comes, even into a pipe.
    fflush(nil)
    lastMark = now
    lastCount = count
    lastCPU = cpu
}

print("requests: \(options.requests), in flight: \(options.concurrency), chaos: \(options.chaos), http2: \(options.http2), cache: \(options.cache)")
print("decile  requests  req/s    RSS MB  CPU µs/req")
fflush(nil)
await withTaskGroup(of: Void.self) { group in
    var next = 0
    for _ in 0..<min(options.concurrency, options.requests) {
        let index = next
        group.addTask { await load(index) }
        next += 1
    }
    while await group.next() != nil {
        let done = ledger.completed.load(ordering: .relaxed)
        if done - lastCount >= tenth { reportTenth(done / tenth, done) }
        if next < options.requests {
            let index = next
            group.addTask { await load(index) }
            next += 1
        }
    }
}
// The last tenth: its mark drifts by the few requests that complete between two checks, so the
// loop's test can miss it.
let finalCount = ledger.completed.load(ordering: .relaxed)
if finalCount > lastCount { reportTenth(lastCount / tenth + 1, finalCount) }
session.finishTasksAndInvalidate()
try? await Task.sleep(for: .milliseconds(500))
let (lost, doubled) = ledger.anomalies
let descriptorsAfter = openDescriptors()
let filesAfter = downloadFiles()
print("completed exactly once: \(options.requests - lost - doubled) of \(options.requests) (lost \(lost), doubled \(doubled))")
print("file descriptors: \(descriptorsBefore.count) before, \(descriptorsAfter.count) after \(extra(descriptorsAfter, over: descriptorsBefore))")
print("download files left: \(filesAfter - filesBefore)")
exit(lost == 0 && doubled == 0 && filesAfter <= filesBefore ? 0 : 1)
