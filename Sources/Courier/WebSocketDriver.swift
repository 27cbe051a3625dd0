import CourierCore
import CourierPolicies
import CourierSync
import CourierTransport
import CourierWebSocket
import Foundation

/// Carries one WebSocket task: the opening handshake as an HTTP/1.1 exchange that asks for an
/// upgrade, then the connection the 101 hands over, read and written with CourierWebSocket's
/// codec. Callers' calls come from any thread (state under `state`); the codec and the
/// connection are touched only on the connection's loop. Callbacks go to the delegate queue.
final class WebSocketDriver: HTTPExchangeDelegate, UpgradedConnectionHandler, @unchecked Sendable {
    typealias Message = URLSessionWebSocketTask.Message
    typealias Receiver = @Sendable (Result<Message, any Error>) -> Void
    typealias Completion = @Sendable ((any Error)?) -> Void

    enum Phase {
        case idle
        case connecting(HTTPExchange)
        case open(UpgradedConnection)
        case closed
    }

    struct State {
        var phase = Phase.idle
        var maximumMessageSize = 1 << 20
        var protocols: [String] = []
        var handshake: WebSocketHandshake?
        /// The handshake's request, with its http(s) URL: what cookies are stored for.
        var handshakeRequest: URLRequest?
        /// The answer of a server that did not switch.
        var refusal: HTTPURLResponse?
        var closeCode = URLSessionWebSocketTask.CloseCode.invalid
        var closeReason: Data?
        /// Frames asked for before the connection opened, with their completions.
        var waitingFrames: [(WebSocketFrame, Completion?)] = []
        var received: [Message] = []
        var receivedBytes = 0
        var receivers: [Receiver] = []
        var pongHandlers: [Completion] = []
        /// Why receives fail from now on: the connection closed or failed.
        var ended: (any Error)?
        var sentClose = false
        var readingPaused = false
        /// A 401's challenges, kept until the handshake completes.
        var challenges: [String] = []
        var authentication = WebSocketAuthentication()
    }

    /// Unread messages above which the socket is not read (back-pressure), and below which
    /// reading resumes.
    static let backlogHigh = 64
    static let backlogLow = 16
    /// How long a close this end began waits for the server's before the connection is cut.
    static let closeGrace: Duration = .seconds(5)

    weak var task: URLSessionWebSocketTask?
    let session: URLSession
    let url: URL?
    let state = Mutex(State())
    // Loop-confined: the codec.
    private var parser = WebSocketFrameParser(role: .client)
    private var reader = WebSocketMessageReader()
    /// permessage-deflate's contexts, when the server took it.
    private var deflate: WebSocketDeflate?

    init(task: URLSessionWebSocketTask, session: URLSession) {
        self.task = task
        self.session = session
        self.url = task.originalRequest?.url
    }

    var maximumMessageSize: Int {
        get { state.withLock { $0.maximumMessageSize } }
        set { state.withLock { $0.maximumMessageSize = max(newValue, 0) } }
    }

    var protocols: [String] {
        get { state.withLock { $0.protocols } }
        set { state.withLock { $0.protocols = newValue } }
    }

    var closeCode: URLSessionWebSocketTask.CloseCode { state.withLock { $0.closeCode } }
    var closeReason: Data? { state.withLock { $0.closeReason } }

    // MARK: Opening

    func open() {
        let (protocols, limit) = state.withLock { ($0.protocols, $0.maximumMessageSize) }
        let transportRequest: TransportRequest
        let handshake = WebSocketHandshake(protocols: protocols, offersDeflate: true)
        var handshakeRequest: URLRequest?
        do throws(URLError) {
            guard let task, var request = task.originalRequest, let url = request.url else {
                throw .courier(.unsupportedURL, "The WebSocket task has no URL.", url: nil)
            }
            var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
            switch url.scheme?.lowercased() {
            case "ws", "http": components?.scheme = "http"
            case "wss", "https": components?.scheme = "https"
            default: throw .courier(.unsupportedURL, "A WebSocket URL is ws: or wss:, not \(url.scheme ?? "(none)"):.", url: url)
            }
            if let invalid = protocols.first(where: { !WebSocketHandshake.isValidProtocolName($0) }) {
                throw .courier(.badURL, "\"\(invalid)\" cannot be a WebSocket subprotocol name.", url: url)
            }
            request.url = components?.url ?? url
            request.httpMethod = "GET"
            request.httpBody = nil
            handshakeRequest = request
            // The session's proxy for the http(s) URL; an HTTP proxy is tunnelled through.
            var proxy: ProxyServer?
            if session.mayUseProxy, let httpURL = request.url {
                let origin = try RequestBuilder.origin(of: httpURL)
                do throws(ProxyConfigurationError) {
                    proxy = try session.proxySelection.proxy(scheme: origin.scheme.rawValue, host: origin.host, port: origin.port)
                } catch {
                    throw .courier(.unsupportedURL, "The configured proxy cannot be used: \(error).", url: url)
                }
            }
            var made = try RequestBuilder.make(request, configuration: session.frozenConfiguration, body: .request, proxy: proxy, upgrade: true)
            // Cookies go as for the http(s) URL of the same origin, as on Apple platforms.
            session.addCookies(to: &made, request: request)
            // A handshake carries no body to decode.
            made.head.fields.removeAll(named: "Accept-Encoding")
            // The answer to the server's last challenge, when there was one.
            if let authorization = state.withLock({ $0.authentication.authorization }) {
                made.head.fields.removeAll(named: "Authorization")
                made.head.fields.append(name: "Authorization", value: authorization)
            }
            for field in handshake.requestFields {
                made.head.fields.removeAll(named: field.name)
                made.head.fields.append(name: field.name, value: field.value)
            }
            transportRequest = made
        } catch {
            finish(error)
            return
        }
        let exchange = session.loader.makeExchange(transportRequest, delegate: self)
        let proceed = state.withLock { state -> Bool in
            guard case .idle = state.phase else { return false }
            state.phase = .connecting(exchange)
            state.handshake = handshake
            state.handshakeRequest = handshakeRequest
            return true
        }
        guard proceed else { return }
        parser = WebSocketFrameParser(role: .client, maximumFramePayload: max(limit, 125))
        reader = WebSocketMessageReader(maximumMessageSize: limit)
        session.loader.start(exchange)
    }

    func exchange(_ exchange: HTTPExchange, didSendBodyBytes totalBytesSent: Int64) {}

    func exchange(_ exchange: HTTPExchange, didReceiveHead head: HTTPResponseHead) {
        storeCookies(from: head)
        guard let url = task?.currentRequest?.url ?? url else { return }
        let response = HTTPURLResponse(url: url, head: head)
        state.withLock { state in
            state.refusal = response
            state.challenges = head.status == 401 ? head.fields.values("WWW-Authenticate") : []
        }
        task?.storage.withLock { $0.response = response }
    }

    func exchange(_ exchange: HTTPExchange, didReceiveBodyBytes bytes: UnsafeRawBufferPointer) {}

    func exchange(_ exchange: HTTPExchange, didCompleteWithTrailers trailers: HTTPFields?, metrics: ExchangeMetrics) {
        let status = state.withLock { $0.refusal?.statusCode } ?? 0
        if status == 401, authenticate() { return }
        finish(refusedHandshake(status))
    }

    func exchange(_ exchange: HTTPExchange, didFailWith error: TransportError, metrics: ExchangeMetrics) {
        finish(URLError.from(error, url: url))
    }

    func exchange(_ exchange: HTTPExchange, didUpgradeWith head: HTTPResponseHead, connection: UpgradedConnection, metrics: ExchangeMetrics) {
        guard let handshake = state.withLock({ $0.handshake }) else {
            connection.close()
            return
        }
        let agreement: WebSocketHandshake.Agreement
        do throws(WebSocketHandshakeError) {
            agreement = try handshake.check(status: Int(head.status)) { name in
                head.fields.values(name).flatMap { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }
            }
        } catch {
            connection.close()
            finish(URLError.courier(.badServerResponse, "The WebSocket handshake failed: \(error).", url: url))
            return
        }
        storeCookies(from: head)
        rememberCredential()
        if let url { task?.storage.withLock { $0.response = HTTPURLResponse(url: url, head: head) } }
        let waiting = state.withLock { state -> [(WebSocketFrame, Completion?)]? in
            guard case .connecting = state.phase else { return nil }
            state.phase = .open(connection)
            defer { state.waitingFrames = [] }
            return state.waitingFrames
        }
        guard let waiting else {
            // Cancelled while the handshake was under way.
            connection.close()
            return
        }
        if let parameters = agreement.deflate {
            guard let contexts = WebSocketDeflate(parameters) else {
                connection.close()
                finish(URLError.courier(.cannotDecodeContentData, "zlib could not start for permessage-deflate.", url: url))
                return
            }
            deflate = contexts
            parser.allowsRSV1 = true
        }
        connection.start(self)
        notifyOpen(agreement.subprotocol)
        for (frame, completion) in waiting { write(frame, on: connection, completion: completion) }
    }

    /// Keeps what the handshake's answer sets (a 101 may set cookies too).
    private func storeCookies(from head: HTTPResponseHead) {
        guard let request = state.withLock({ $0.handshakeRequest }), let url = request.url else { return }
        session.storeCookies(from: head, url: url, request: request)
    }

    // MARK: Sending

    func send(_ message: Message, completion: @escaping Completion) {
        switch message {
        case .string(let text): enqueue(WebSocketFrame(opcode: .text, payload: Array(text.utf8)), completion: completion)
        case .data(let data): enqueue(WebSocketFrame(opcode: .binary, payload: Array(data)), completion: completion)
        }
    }

    func ping(_ handler: @escaping Completion) {
        let accepted = state.withLock { state -> Bool in
            guard state.ended == nil, !state.sentClose else { return false }
            state.pongHandlers.append(handler)
            return true
        }
        guard accepted else {
            deliver(handler, notConnected())
            return
        }
        enqueue(WebSocketFrame(opcode: .ping), completion: nil)
    }

    /// Begins the closing handshake with `code` and `reason`.
    func close(code: URLSessionWebSocketTask.CloseCode, reason: Data?) {
        let text = reason.flatMap { String(validating: $0, as: UTF8.self) } ?? ""
        let payload = WebSocketFrameEncoder.closePayload(code: UInt16(clamping: code.rawValue), reason: text)
        let connection = state.withLock { state -> UpgradedConnection? in
            guard case .open(let connection) = state.phase, !state.sentClose else { return nil }
            state.sentClose = true
            return connection
        }
        guard let connection else {
            abort()
            return
        }
        connection.loop.execute { [self] in
            write(WebSocketFrame(opcode: .close, payload: payload), on: connection, completion: nil)
            _ = connection.loop.scheduleTimer(after: Self.closeGrace) { [self] in
                // The server never answered the close: the connection is cut.
                guard !connection.isClosed else { return }
                connection.close()
                finish(nil)
            }
        }
    }

    /// Ends the task at once: `.cancelled`.
    func abort() {
        let phase = state.withLock { $0.phase }
        switch phase {
        case .connecting(let exchange): exchange.cancel()
        case .open(let connection): connection.loop.execute { connection.close() }
        case .idle, .closed: break
        }
        finish(URLError.courier(.cancelled, "cancelled", url: url))
    }

    private func enqueue(_ frame: WebSocketFrame, completion: Completion?) {
        enum Route { case wait, write(UpgradedConnection), refuse }
        let route = state.withLock { state -> Route in
            if state.ended != nil || (state.sentClose && frame.opcode != .close) { return .refuse }
            switch state.phase {
            case .idle, .connecting:
                state.waitingFrames.append((frame, completion))
                return .wait
            case .open(let connection): return .write(connection)
            case .closed: return .refuse
            }
        }
        switch route {
        case .wait: break
        case .refuse: if let completion { deliver(completion, notConnected()) }
        case .write(let connection):
            connection.loop.execute { [self] in write(frame, on: connection, completion: completion) }
        }
    }

    /// Writes one frame, masked (and a message compressed when permessage-deflate is on), on
    /// the connection's loop.
    private func write(_ frame: WebSocketFrame, on connection: UpgradedConnection, completion: Completion?) {
        var frame = frame
        if let deflate, !frame.opcode.isControl {
            frame.payload = deflate.deflate(frame.payload)
            frame.rsv1 = true
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(frame.payload.count + 14)
        WebSocketFrameEncoder.encode(frame, maskingKey: WebSocketFrameEncoder.makeMaskingKey(), into: &bytes)
        let closed = connection.isClosed
        if !closed { bytes.withUnsafeBytes { connection.write($0) } }
        if let completion { deliver(completion, closed ? notConnected() : nil) }
    }

    // MARK: Receiving

    func receive(_ receiver: @escaping Receiver) {
        enum Answer { case message(Message), failure(any Error), wait }
        var resume: UpgradedConnection?
        let answer = state.withLock { state -> Answer in
            if !state.received.isEmpty {
                let message = state.received.removeFirst()
                if state.readingPaused, state.received.count <= Self.backlogLow, case .open(let connection) = state.phase {
                    state.readingPaused = false
                    resume = connection
                }
                return .message(message)
            }
            if let ended = state.ended { return .failure(ended) }
            state.receivers.append(receiver)
            return .wait
        }
        if let resume { resume.loop.execute { resume.resumeReading() } }
        switch answer {
        case .message(let message): session.delegateQueue.addOperation { receiver(.success(message)) }
        case .failure(let error): session.delegateQueue.addOperation { receiver(.failure(error)) }
        case .wait: break
        }
    }

    func connection(_ connection: UpgradedConnection, didRead bytes: UnsafeRawBufferPointer) {
        var offset = 0
        while offset < bytes.count, !connection.isClosed {
            do throws(WebSocketError) {
                let step = try parser.next(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
                offset += step.consumed
                guard let frame = step.frame else { break }
                if let message = try reader.read(frame) { handle(message, on: connection) }
            } catch {
                failProtocol(error, on: connection)
                return
            }
        }
    }

    private func handle(_ message: WebSocketMessage, on connection: UpgradedConnection) {
        switch message {
        case .text(let text): arrived(.string(text), on: connection)
        case .binary(let bytes): arrived(.data(Data(bytes)), on: connection)
        case .compressed(let text, let payload):
            do throws(WebSocketError) {
                guard let deflate else { throw .reservedBitsSet }
                let bytes = try deflate.inflate(payload, limit: reader.maximumMessageSize)
                if text {
                    arrived(.string(try WebSocketMessageReader.utf8String(bytes)), on: connection)
                } else {
                    arrived(.data(Data(bytes)), on: connection)
                }
            } catch {
                failProtocol(error, on: connection)
            }
        case .ping(let payload): write(WebSocketFrame(opcode: .pong, payload: payload), on: connection, completion: nil)
        case .pong:
            let handler = state.withLock { state -> Completion? in state.pongHandlers.isEmpty ? nil : state.pongHandlers.removeFirst() }
            if let handler { deliver(handler, nil) }
        case .close(let code, let reason):
            let closeCode = code.map { URLSessionWebSocketTask.CloseCode(rawValue: Int($0)) ?? .invalid } ?? .noStatusReceived
            let answer = state.withLock { state -> Bool in
                state.closeCode = closeCode
                state.closeReason = reason.isEmpty ? nil : Data(reason.utf8)
                defer { state.sentClose = true }
                return !state.sentClose
            }
            // The close is answered with the same code (RFC 6455 section 5.5.1), then the
            // connection ends.
            if answer {
                let payload = code.map { WebSocketFrameEncoder.closePayload(code: $0, reason: "") } ?? []
                write(WebSocketFrame(opcode: .close, payload: payload), on: connection, completion: nil)
            }
            connection.close()
            notifyClose(closeCode, reason: reason.isEmpty ? nil : Data(reason.utf8))
            finish(nil)
        }
    }

    private func arrived(_ message: Message, on connection: UpgradedConnection) {
        let receiver = state.withLock { state -> Receiver? in
            if !state.receivers.isEmpty { return state.receivers.removeFirst() }
            state.received.append(message)
            if state.received.count >= Self.backlogHigh, !state.readingPaused {
                state.readingPaused = true
                connection.pauseReading()
            }
            return nil
        }
        if let receiver { session.delegateQueue.addOperation { receiver(.success(message)) } }
    }

    /// The server broke the protocol: the close code for it goes out, then the connection ends.
    private func failProtocol(_ error: WebSocketError, on connection: UpgradedConnection) {
        let payload = WebSocketFrameEncoder.closePayload(code: error.closeCode, reason: "")
        write(WebSocketFrame(opcode: .close, payload: payload), on: connection, completion: nil)
        state.withLock {
            $0.sentClose = true
            $0.closeCode = URLSessionWebSocketTask.CloseCode(rawValue: Int(error.closeCode)) ?? .protocolError
        }
        connection.close()
        finish(URLError.courier(.badServerResponse, "The WebSocket server broke the protocol: \(error).", url: url))
    }

    func connectionDidReadEOF(_ connection: UpgradedConnection, cleanly: Bool) {
        connection.close()
        state.withLock { if $0.closeCode == .invalid { $0.closeCode = .abnormalClosure } }
        finish(URLError.courier(.networkConnectionLost, "The WebSocket connection closed without a closing handshake.", url: url))
    }

    func connectionDidDrainWrites(_ connection: UpgradedConnection) {}

    func connection(_ connection: UpgradedConnection, didFail error: TransportError) {
        state.withLock { if $0.closeCode == .invalid { $0.closeCode = .abnormalClosure } }
        finish(URLError.from(error, url: url))
    }

    // MARK: Ending

    private func notConnected() -> URLError {
        .courier(.networkConnectionLost, "The WebSocket is not open.", url: url)
    }

    /// Ends the task once: what waits fails, the task completes with `error` (nil after a clean
    /// close).
    func finish(_ error: URLError?) {
        let ending = error ?? notConnected()
        let leftovers = state.withLock { state -> (receivers: [Receiver], pongs: [Completion], frames: [Completion])? in
            guard state.ended == nil else { return nil }
            state.ended = ending
            state.phase = .closed
            defer {
                state.receivers = []
                state.pongHandlers = []
                state.waitingFrames = []
            }
            return (state.receivers, state.pongHandlers, state.waitingFrames.compactMap(\.1))
        }
        guard let leftovers, let task else { return }
        for receiver in leftovers.receivers { session.delegateQueue.addOperation { receiver(.failure(ending)) } }
        for handler in leftovers.pongs + leftovers.frames { deliver(handler, ending) }
        task.reportCompletion(error)
    }

    private func deliver(_ completion: @escaping Completion, _ error: (any Error)?) {
        session.delegateQueue.addOperation { completion(error) }
    }

    private var webSocketDelegate: URLSessionWebSocketDelegate? {
        (task?.delegate as? URLSessionWebSocketDelegate) ?? (session.delegate as? URLSessionWebSocketDelegate)
    }

    private func notifyOpen(_ subprotocol: String?) {
        guard let task, let delegate = webSocketDelegate else { return }
        let session = self.session
        session.delegateQueue.addOperation { delegate.urlSession(session, webSocketTask: task, didOpenWithProtocol: subprotocol) }
    }

    private func notifyClose(_ code: URLSessionWebSocketTask.CloseCode, reason: Data?) {
        guard let task, let delegate = webSocketDelegate else { return }
        let session = self.session
        session.delegateQueue.addOperation { delegate.urlSession(session, webSocketTask: task, didCloseWith: code, reason: reason) }
    }
}
