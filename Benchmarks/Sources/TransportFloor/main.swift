// transport-floor: W1 (sequential GETs on one connection) through Courier's own transport with
// the least a URLSession-shaped API could put on top of it, to measure how close any session
// layer built on this transport could come to wrk.
//
// hop-floor measures the shape of `data(for:)` with no HTTP library; courier-load measures the
// transport with no await. This is the two together: each request is an `await` in a Swift
// task, with a cancellation handler, as `data(for:)` must be, and goes through `HTTPTransport`
// exactly as a URLSession task's exchange does (the pool, the event loop, the HTTP/1.1 codec or
// nghttp2, TLS). On top of that it does only what no `data(for:)` can skip: one object for the
// load, which is the exchange's delegate and holds the continuation, and a `Data` of the body.
// It does not do what a URLSession task also does (a task object and its registry, a request
// built from a `URLRequest`, a response object, cookies, the delegate checks): its request is a
// copy of one made up front, as courier-load's is.
//
//   hop   the task runs on the global executor: resumed from the loop's thread, it continues on
//         a thread of the cooperative pool (Courier's W1 shape).
//   loop  the task prefers the transport's loop executor (Courier-loop's shape).
//
// Usage: transport-floor hop|loop http[s]://HOST:PORT/PATH COUNT. An https URL is verified
// against SSL_CERT_FILE (the transport's default trust). Prints one JSON line like the other
// clients (requests, seconds, bytes, errors).

import BenchSupport
import CourierCore
import CourierTransport
import Foundation
import Synchronization

/// Fails the run with a message on standard error.
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("transport-floor: \(message)\n".utf8))
    exit(1)
}

/// What a load ended with, kept until its continuation is known.
enum Ending {
    case body(Data)
    case failure(any Error)
}

/// One request: the exchange's delegate, its body gathered in a `Data`, its caller's
/// continuation resumed with the body's size when the exchange ends.
final class Load: HTTPExchangeDelegate, @unchecked Sendable {
    struct State {
        var continuation: UnsafeContinuation<Int, any Error>?
        var body = Data()
        var status = 0
        var ending: Ending?
    }

    let state = Mutex(State())

    /// Stores the continuation; resumes it at once when the load ended first.
    func wait(_ continuation: UnsafeContinuation<Int, any Error>) {
        let ending = state.withLock { state -> Ending? in
            if let ending = state.ending { return ending }
            state.continuation = continuation
            return nil
        }
        if let ending { Self.resume(continuation, ending) }
    }

    func end(_ ending: Ending) {
        let continuation = state.withLock { state -> UnsafeContinuation<Int, any Error>? in
            guard let continuation = state.continuation else {
                state.ending = ending
                return nil
            }
            state.continuation = nil
            return continuation
        }
        if let continuation { Self.resume(continuation, ending) }
    }

    static func resume(_ continuation: UnsafeContinuation<Int, any Error>, _ ending: Ending) {
        switch ending {
        case .body(let body): continuation.resume(returning: body.count)
        case .failure(let error): continuation.resume(throwing: error)
        }
    }

    func exchange(_ exchange: HTTPExchange, didSendBodyBytes totalBytesSent: Int64) {}

    func exchange(_ exchange: HTTPExchange, didReceiveHead head: HTTPResponseHead) {
        state.withLock { $0.status = head.status }
    }

    func exchange(_ exchange: HTTPExchange, didReceiveBodyBytes bytes: UnsafeRawBufferPointer) {
        state.withLock { $0.body.append(contentsOf: bytes) }
    }

    func exchange(_ exchange: HTTPExchange, didCompleteWithTrailers trailers: HTTPFields?, metrics: ExchangeMetrics) {
        let (status, body) = state.withLock { state in
            defer { state.body = Data() }
            return (state.status, state.body)
        }
        end(status == 200 ? .body(body) : .failure(StatusError(status: status)))
    }

    func exchange(_ exchange: HTTPExchange, didFailWith error: TransportError, metrics: ExchangeMetrics) {
        end(.failure(error))
    }
}

struct StatusError: Error {
    let status: Int
}

let arguments = CommandLine.arguments
guard arguments.count == 4, ["hop", "loop"].contains(arguments[1]), let url = URL(string: arguments[2]),
      let scheme = url.scheme.flatMap(Origin.Scheme.init(rawValue:)), let host = url.host(),
      let count = Int(arguments[3]), count > 0 else {
    fail("usage: transport-floor hop|loop http[s]://HOST:PORT/PATH COUNT")
}
let origin = Origin(scheme: scheme, host: host, port: url.port.flatMap(UInt16.init(exactly:)))
var target = url.path(percentEncoded: true)
if target.isEmpty { target = "/" }
// The fields a URLSession request carries by default, checked once, as courier-load does.
let fields: HTTPFields
do {
    fields = try HTTPFields([
        ("User-Agent", "transport-floor"), ("Accept", "*/*"), ("Accept-Language", "en-US,en;q=0.9"),
        ("Accept-Encoding", "gzip, deflate, br"),
    ]).validated()
} catch {
    fail("bad field: \(error)")
}
let head = HTTPRequestHead(method: HTTPMethod("GET"), target: target, authority: origin.authority, scheme: scheme.rawValue, fields: fields)
let template = TransportRequest(origin: origin, head: head, body: .empty, idleTimeout: .seconds(60))

var configuration = HTTPTransport.Configuration()
configuration.pool.maxConnections = 1
configuration.pool.maxIdleConnections = 1
let transport = HTTPTransport(configuration: configuration)

/// One load: the request sent from the caller's thread (the transport borrows the loop when it
/// is parked), the caller resumed by the loop when the response is in. No deadline of its own:
/// the idle timeout stands for one.
@Sendable func fetch() async throws -> Int {
    let load = Load()
    let exchange = transport.makeExchange(template, delegate: load)
    return try await withTaskCancellationHandler {
        try await withUnsafeThrowingContinuation { continuation in
            load.wait(continuation)
            transport.start(exchange)
        }
    } onCancel: {
        exchange.cancel()
    }
}

// One load first, as every client's connection is made before its timing starts.
do { _ = try await fetch() } catch { fail("the first request failed: \(error)") }
let executor: (any TaskExecutor)? = arguments[1] == "loop" ? transport.taskExecutor : nil
if arguments[1] == "loop" && executor == nil { fail("the transport offers no loop executor") }
// As courier-bench does: a @Sendable closure, so that the loads do not run on the main actor.
let tally = await withTaskExecutorPreference(executor) {
    await sequentialLoads(count) { @Sendable in try await fetch() }
}
transport.shutdown()
emit(tally.fields)
