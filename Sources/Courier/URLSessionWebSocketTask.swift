import Foundation

/// A WebSocket (RFC 6455) over an HTTP/1.1 upgrade: Apple's `URLSessionWebSocketTask`. Made by
/// `URLSession.webSocketTask(with:)`; `resume()` opens it, then messages go both ways until
/// either end closes.
///
/// Messages sent before the connection opens wait for it. Received messages wait (in order)
/// for `receive`; while 64 wait unread, the socket is not read, so a fast sender is held back
/// (and a pong behind them waits too). A message over `maximumMessageSize` closes the
/// connection with 1009 (measured after inflating, for a compressed one). Pings from the server
/// are answered. The opening handshake carries the request's header fields, the configuration's
/// additional ones and the session's cookies, and offers permessage-deflate (RFC 7692, through
/// zlib); it goes over a connection of its own, HTTP/1.1, directly (not through a proxy).
open class URLSessionWebSocketTask: URLSessionTask, @unchecked Sendable {
    /// A message: text or binary.
    public enum Message: Sendable {
        case data(Data)
        case string(String)
    }

    /// The close codes of RFC 6455 section 7.4.1, as Apple names them.
    public enum CloseCode: Int, Sendable {
        case invalid = 0
        case normalClosure = 1000
        case goingAway = 1001
        case protocolError = 1002
        case unsupportedData = 1003
        case noStatusReceived = 1005
        case abnormalClosure = 1006
        case invalidFramePayloadData = 1007
        case policyViolation = 1008
        case messageTooBig = 1009
        case mandatoryExtensionMissing = 1010
        case internalServerError = 1011
        case tlsHandshakeFailure = 1015
    }

    /// Carries the connection; made with the task.
    var socket: WebSocketDriver!

    /// The longest message `receive` accepts, in bytes (Apple's default: 1 MiB). Set it before
    /// `resume()`.
    open var maximumMessageSize: Int {
        get { socket.maximumMessageSize }
        set { socket.maximumMessageSize = newValue }
    }

    /// The code the connection was closed with; `.invalid` while it is open.
    open var closeCode: CloseCode { socket.closeCode }

    /// The reason the closing end gave, as UTF-8; nil when it gave none.
    open var closeReason: Data? { socket.closeReason }

    open override var error: (any Error)? { super.error }

    /// Opens the connection (the first call); a WebSocket task cannot be suspended.
    open override func resume() {
        if markStarted() { socket.open() }
    }

    /// Suspending a WebSocket task does nothing, as on Apple platforms: its messages are
    /// already held back when nobody receives.
    open override func suspend() {}

    /// Closes the connection without a closing handshake; the task completes with `.cancelled`.
    open override func cancel() {
        if markCanceling() { socket.abort() }
    }

    /// Closes the connection with `closeCode` and `reason` (at most 123 bytes are sent), then
    /// waits for the server's close; the task completes when the connection is closed.
    open func cancel(with closeCode: CloseCode, reason: Data?) {
        if markCanceling() { socket.close(code: closeCode, reason: reason) }
    }

    /// Sends `message`; `completionHandler` gets nil once it is queued on the connection, or
    /// the error that stopped it.
    open func send(_ message: Message, completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        socket.send(message, completion: completionHandler)
    }

    /// Sends `message` once the connection takes it.
    open func send(_ message: Message) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            socket.send(message) { error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }
        }
    }

    /// The next message, in order; an error once the connection closed or failed.
    open func receive(completionHandler: @escaping @Sendable (Result<Message, any Error>) -> Void) {
        socket.receive(completionHandler)
    }

    /// The next message, in order.
    open func receive() async throws -> Message {
        try await withCheckedThrowingContinuation { continuation in
            socket.receive { continuation.resume(with: $0) }
        }
    }

    /// Sends a ping; `pongReceiveHandler` gets nil when the pong comes back, or the error that
    /// ended the connection first.
    open func sendPing(pongReceiveHandler: @escaping @Sendable ((any Error)?) -> Void) {
        socket.ping(pongReceiveHandler)
    }

    /// Sends a ping and returns when its pong came back.
    open func sendPing() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            socket.ping { error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }
        }
    }
}

/// The events of a WebSocket task: Apple's `URLSessionWebSocketDelegate`. Every method is
/// optional; both are called on the session's delegate queue.
public protocol URLSessionWebSocketDelegate: URLSessionTaskDelegate {
    /// The opening handshake succeeded; `protocol` is the subprotocol the server chose.
    func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask, didOpenWithProtocol protocol: String?)
    /// The server's close frame arrived, with its code and reason.
    func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask, didCloseWith closeCode: URLSessionWebSocketTask.CloseCode, reason: Data?)
}

extension URLSessionWebSocketDelegate {
    public func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask, didOpenWithProtocol protocol: String?) {
        guard let target = forwardingTarget(session, webSocketTask) as? URLSessionWebSocketDelegate else { return }
        target.urlSession(session, webSocketTask: webSocketTask, didOpenWithProtocol: `protocol`)
    }

    public func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask, didCloseWith closeCode: URLSessionWebSocketTask.CloseCode, reason: Data?) {
        guard let target = forwardingTarget(session, webSocketTask) as? URLSessionWebSocketDelegate else { return }
        target.urlSession(session, webSocketTask: webSocketTask, didCloseWith: closeCode, reason: reason)
    }
}

extension URLSession {
    /// A WebSocket task for a `ws:` or `wss:` URL (`http:` and `https:` are taken too).
    public func webSocketTask(with url: URL) -> URLSessionWebSocketTask {
        webSocketTask(with: URLRequest(url: url))
    }

    /// A WebSocket task that offers `protocols` (Sec-WebSocket-Protocol), in preference order.
    public func webSocketTask(with url: URL, protocols: [String]) -> URLSessionWebSocketTask {
        let task = webSocketTask(with: URLRequest(url: url))
        task.socket.protocols = protocols
        return task
    }

    /// A WebSocket task for `request`: its header fields go with the opening handshake.
    public func webSocketTask(with request: URLRequest) -> URLSessionWebSocketTask {
        let task = makeTask(URLSessionWebSocketTask.self, request, delivery: .delegate)
        return task
    }
}
