// The AsyncHTTPClient workload client of the benchmark harness: the same workloads and output
// as courier-bench, written the way AsyncHTTPClient's own documentation uses it (async
// `execute`, body collected or streamed).

import AsyncHTTPClient
import BenchSupport
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

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

@Sendable func fetch() async throws -> Int {
    let response = try await client.execute(HTTPClientRequest(url: url), timeout: .seconds(60))
    var count = 0
    for try await buffer in response.body { count += buffer.readableBytes }
    return count
}

switch arguments[1] {
case "w1", "w4":
    let count = Int(arguments[3]) ?? 1000
    _ = try? await fetch()
    emit(await sequentialLoads(count, fetch).fields)
case "w2":
    let count = Int(arguments[3]) ?? 1000
    let concurrency = arguments.count > 4 ? Int(arguments[4]) ?? 32 : 32
    _ = try? await fetch()
    emit(await concurrentLoads(count, concurrency: concurrency) { try await fetch() }.fields)
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
