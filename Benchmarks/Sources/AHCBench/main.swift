// The AsyncHTTPClient workload client of the benchmark harness: the same workloads and output
// as courier-bench, written the way AsyncHTTPClient's own documentation uses it (async
// `execute`, body collected or streamed).

import AsyncHTTPClient
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

func emit(_ fields: [String: Any]) {
    let data = (try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])) ?? Data()
    print(String(decoding: data, as: UTF8.self))
}

let arguments = CommandLine.arguments
guard arguments.count >= 4 else {
    FileHandle.standardError.write(Data("usage: \(arguments[0]) w1|w2|w3|w4 URL COUNT|SINK [CONCURRENCY]\n".utf8))
    exit(2)
}
let url = arguments[2]
var configuration = HTTPClient.Configuration()
var tls = TLSConfiguration.makeClientConfiguration()
if let ca = ProcessInfo.processInfo.environment["BENCH_CA_FILE"] {
    tls.trustRoots = .file(ca)
}
configuration.tlsConfiguration = tls
configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 64)
let client = HTTPClient(eventLoopGroupProvider: .shared(MultiThreadedEventLoopGroup.singleton), configuration: configuration)

func fetch() async throws -> Int {
    let response = try await client.execute(HTTPClientRequest(url: url), timeout: .seconds(60))
    var count = 0
    for try await buffer in response.body { count += buffer.readableBytes }
    return count
}

switch arguments[1] {
case "w1", "w4":
    let count = Int(arguments[3]) ?? 1000
    _ = try? await fetch()
    var errors = 0, bytes = 0
    let start = ContinuousClock.now
    for _ in 0..<count {
        do { bytes += try await fetch() } catch { errors += 1 }
    }
    emit(["requests": count - errors, "seconds": seconds(ContinuousClock.now - start), "bytes": bytes, "errors": errors])
case "w2":
    let count = Int(arguments[3]) ?? 1000
    let concurrency = arguments.count > 4 ? Int(arguments[4]) ?? 32 : 32
    _ = try? await fetch()
    let start = ContinuousClock.now
    let (done, errors, bytes) = await withTaskGroup(of: (Int, Int).self) { group -> (Int, Int, Int) in
        var launched = 0, done = 0, errors = 0, bytes = 0
        func launch() {
            launched += 1
            group.addTask {
                do { return (try await fetch(), 0) } catch { return (0, 1) }
            }
        }
        while launched < min(concurrency, count) { launch() }
        for await (size, failed) in group {
            done += 1
            bytes += size
            errors += failed
            if launched < count { launch() }
        }
        return (done, errors, bytes)
    }
    emit(["requests": done - errors, "seconds": seconds(ContinuousClock.now - start), "bytes": bytes, "errors": errors])
case "w3":
    let sink = arguments[3]
    var handle: FileHandle?
    if sink != "discard" {
        FileManager.default.createFile(atPath: sink, contents: nil)
        handle = FileHandle(forWritingAtPath: sink)
    }
    let start = ContinuousClock.now
    var bytes = 0, errors = 0
    do {
        let response = try await client.execute(HTTPClientRequest(url: url), timeout: .seconds(600))
        for try await buffer in response.body {
            bytes += buffer.readableBytes
            if let handle { buffer.withUnsafeReadableBytes { handle.write(Data($0)) } }
        }
    } catch {
        errors = 1
    }
    try? handle?.close()
    emit(["requests": 1 - errors, "seconds": seconds(ContinuousClock.now - start), "bytes": bytes, "errors": errors])
default:
    exit(2)
}
try await client.shutdown()
