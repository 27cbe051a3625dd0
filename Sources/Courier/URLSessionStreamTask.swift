import Foundation

/// A TCP connection, with TLS when asked for, read and written as bytes: Apple's
/// `URLSessionStreamTask`, made by `URLSession.streamTask(withHostName:port:)`.
///
/// Reads and writes may be asked for before `resume()`; they are served in the order given once
/// the connection is up. `startSecureConnection()`, `closeWrite()`, `closeRead()` and
/// `captureStreams()` take their turn in that order too: each waits for the writes (and, for
/// capturing, the reads) asked for before it. The task completes once both directions are
/// closed (the peer's end of stream or `closeRead()`, and `closeWrite()`), once the streams are
/// captured, when the connection fails, or when it is cancelled. Completion handlers run on the
/// session's delegate queue.
///
/// The connection goes through the session's SOCKS proxy, or its HTTPS proxy (CONNECT), when
/// the configuration names one.
open class URLSessionStreamTask: URLSessionTask, @unchecked Sendable {
    var streamDriver: StreamTaskDriver!

    open override func resume() {
        if markStarted() { streamDriver.open() }
    }

    /// A stream task cannot be suspended once started; before, it simply waits for `resume()`.
    open override func suspend() {}

    open override func cancel() {
        if markCanceling() { streamDriver.cancel() }
    }

    /// Reads at least `minBytes` (at least one) and at most `maxBytes` bytes. At the end of the
    /// peer's bytes the read completes with what is left, possibly nothing (`nil`), and `atEOF`
    /// true. A `timeout` of 0 never times out; otherwise an unfinished read fails with
    /// `URLError.timedOut` and the task goes on.
    open func readData(
        ofMinLength minBytes: Int, maxLength maxBytes: Int, timeout: TimeInterval,
        completionHandler: @escaping @Sendable (Data?, Bool, (any Error)?) -> Void
    ) {
        let queue = session.delegateQueue
        streamDriver.read(minimum: minBytes, maximum: maxBytes, timeout: timeout) { result in
            queue.addOperation {
                switch result {
                case .success(let (data, atEOF)): completionHandler(data.isEmpty ? nil : data, atEOF, nil)
                case .failure(let error): completionHandler(nil, false, error)
                }
            }
        }
    }

    open func readData(ofMinLength minBytes: Int, maxLength maxBytes: Int, timeout: TimeInterval) async throws -> (Data?, Bool) {
        try await withCheckedThrowingContinuation { continuation in
            streamDriver.read(minimum: minBytes, maximum: maxBytes, timeout: timeout) { result in
                continuation.resume(with: result.map { ($0.0.isEmpty ? nil : $0.0, $0.1) })
            }
        }
    }

    /// Writes `data`; the handler runs once the bytes are handed to the kernel (or TLS), or
    /// with the error that stopped them. A `timeout` of 0 never times out.
    open func write(_ data: Data, timeout: TimeInterval, completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        let queue = session.delegateQueue
        streamDriver.write(data, timeout: timeout) { error in
            queue.addOperation { completionHandler(error) }
        }
    }

    open func write(_ data: Data, timeout: TimeInterval) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            streamDriver.write(data, timeout: timeout) { error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }
        }
    }

    /// Once the reads and writes asked for so far are done, hands the connection over as a pair
    /// of streams: the delegate's `urlSession(_:streamTask:didBecome:outputStream:)` gets them
    /// (unopened), and the task completes. Reading the input stream blocks until bytes arrive
    /// and writing the output stream until its bytes are sent, as a socket's streams do.
    open func captureStreams() {
        streamDriver.enqueue(.capture)
    }

    /// Sends the end of this side's bytes once the writes asked for so far are sent
    /// (close_notify first on TLS, then FIN); reading goes on. Later writes fail with `EPIPE`.
    open func closeWrite() {
        streamDriver.enqueue(.closeWrite)
    }

    /// Stops reading once the reads asked for so far are done; later reads complete at once
    /// with `atEOF` true.
    open func closeRead() {
        streamDriver.enqueue(.closeRead)
    }

    /// Starts TLS with the host the task was made for, once the writes asked for so far are
    /// sent: the session's trust rules and server-trust and client-certificate challenges apply,
    /// and later reads and writes go through TLS. Called before `resume()`, the connection is
    /// TLS from its first byte.
    open func startSecureConnection() {
        streamDriver.enqueue(.startTLS)
    }

    /// Apple deprecated this call, which does nothing there: TLS, once on, stays on.
    @available(*, unavailable, message: "TLS cannot be turned off once it is on")
    open func stopSecureConnection() {}
}

/// The events of a stream task: Apple's `URLSessionStreamDelegate`. Every method is optional;
/// all run on the session's delegate queue.
public protocol URLSessionStreamDelegate: URLSessionTaskDelegate {
    /// The read side closed: the peer's end of stream arrived, or `closeRead()` took effect.
    func urlSession(_ session: URLSession, readClosedFor streamTask: URLSessionStreamTask)
    /// The write side closed: `closeWrite()` sent the end of stream, or the peer stopped taking
    /// bytes.
    func urlSession(_ session: URLSession, writeClosedFor streamTask: URLSessionStreamTask)
    /// A better route to the host was found. Courier has no means of learning this on Linux, so
    /// it never calls it; it is here so that delegates written for Apple's platforms compile.
    func urlSession(_ session: URLSession, betterRouteDiscoveredFor streamTask: URLSessionStreamTask)
    /// `captureStreams()` took effect: the connection is these streams' from now on.
    func urlSession(_ session: URLSession, streamTask: URLSessionStreamTask, didBecome inputStream: InputStream, outputStream: OutputStream)
}

extension URLSessionStreamDelegate {
    public func urlSession(_ session: URLSession, readClosedFor streamTask: URLSessionStreamTask) {
        (forwardingTarget(session, streamTask) as? URLSessionStreamDelegate)?.urlSession(session, readClosedFor: streamTask)
    }

    public func urlSession(_ session: URLSession, writeClosedFor streamTask: URLSessionStreamTask) {
        (forwardingTarget(session, streamTask) as? URLSessionStreamDelegate)?.urlSession(session, writeClosedFor: streamTask)
    }

    public func urlSession(_ session: URLSession, betterRouteDiscoveredFor streamTask: URLSessionStreamTask) {
        (forwardingTarget(session, streamTask) as? URLSessionStreamDelegate)?.urlSession(session, betterRouteDiscoveredFor: streamTask)
    }

    public func urlSession(_ session: URLSession, streamTask: URLSessionStreamTask, didBecome inputStream: InputStream, outputStream: OutputStream) {
        (forwardingTarget(session, streamTask) as? URLSessionStreamDelegate)?
            .urlSession(session, streamTask: streamTask, didBecome: inputStream, outputStream: outputStream)
    }
}

extension URLSession {
    /// A stream task to `hostname`:`port`, started by `resume()`.
    public func streamTask(withHostName hostname: String, port: Int) -> URLSessionStreamTask {
        let task = makeTask(URLSessionStreamTask.self, nil, delivery: .delegate)
        task.streamDriver.target = (hostname, port)
        return task
    }
}
