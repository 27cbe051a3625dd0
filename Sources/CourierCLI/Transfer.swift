import Courier
import Foundation
import Synchronization

/// Where the body goes, written as it arrives.
final class OutputSink: @unchecked Sendable {
    private let handle: FileHandle

    init(handle: FileHandle) {
        self.handle = handle
    }

    func write(_ data: Data) {
        handle.write(data)
    }

    func close() {
        if handle !== FileHandle.standardOutput { try? handle.close() }
    }
}

/// Streams one task's body to a sink and prints heads as asked; the delegate of the CLI's session.
final class Transfer: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    struct Outcome {
        var status: Int?
        var error: (any Error)?
    }

    private let sink: OutputSink
    private let include: Bool
    private let verbose: Bool
    private let state = Mutex<(outcome: Outcome, continuation: CheckedContinuation<Outcome, Never>?)>((Outcome(), nil))

    init(sink: OutputSink, include: Bool, verbose: Bool) {
        self.sink = sink
        self.include = include
        self.verbose = verbose
    }

    /// Runs the task and waits for it to finish.
    func run(_ task: URLSessionTask) async -> Outcome {
        await withCheckedContinuation { continuation in
            state.withLock { $0.continuation = continuation }
            task.resume()
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        if verbose, let request = dataTask.requestAsSent {
            FileHandle.standardError.write(Data(Self.describe(request).map { "> \($0)\n" }.joined().appending(">\n").utf8))
        }
        if let http = response as? HTTPURLResponse {
            state.withLock { $0.outcome.status = http.statusCode }
            let head = Self.describe(http)
            if verbose { FileHandle.standardError.write(Data(head.map { "< \($0)\n" }.joined().appending("<\n").utf8)) }
            if include { sink.write(Data((head.joined(separator: "\r\n") + "\r\n\r\n").utf8)) }
        }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        sink.write(data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let continuation = state.withLock { state -> CheckedContinuation<Outcome, Never>? in
            state.outcome.error = error
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume(returning: state.withLock { $0.outcome })
    }

    /// The request line and fields of a request, Host first, as lines.
    static func describe(_ request: URLRequest) -> [String] {
        let url = request.url
        var target = url?.path(percentEncoded: true) ?? "/"
        if target.isEmpty { target = "/" }
        if let query = url?.query(percentEncoded: true) { target += "?" + query }
        var lines = ["\(request.httpMethod ?? "GET") \(target) HTTP/1.1"]
        let fields = (request.allHTTPHeaderFields ?? [:]).sorted { $0.key == "Host" || ($1.key != "Host" && $0.key < $1.key) }
        for (name, value) in fields { lines.append("\(name): \(value)") }
        return lines
    }

    /// The status line and fields of a response, as lines.
    static func describe(_ response: HTTPURLResponse) -> [String] {
        var lines = ["HTTP/1.1 \(response.statusCode) \(HTTPURLResponse.localizedString(forStatusCode: response.statusCode))"]
        for (name, value) in response.allHeaderFields.sorted(by: { "\($0.key)" < "\($1.key)" }) {
            lines.append("\(name): \(value)")
        }
        return lines
    }
}
