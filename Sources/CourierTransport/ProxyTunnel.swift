import CourierCore
import CourierHTTP1
import CourierReactor

/// Opens a tunnel through a proxy on a freshly connected channel: HTTP CONNECT (RFC 9110
/// section 9.3.6) or SOCKS5 (RFC 1928, with RFC 1929's username/password). It is the channel's
/// delegate only until the tunnel is open or has failed; then it hands the channel back.
///
/// Phases: awaiting the reply (SOCKS5: method selection, authentication, then the connect
/// reply) → open or failed. The origin speaks only after the client (TLS's ClientHello, or an
/// HTTP request), so any byte after the proxy's last reply is a protocol violation.
final class ProxyTunnel: StreamChannelDelegate {
    /// The proxy protocol in progress.
    enum Handshake {
        case connect(HTTP1ResponseParser, target: String, authorization: String?)
        case socks(SOCKS5Handshake)
    }

    typealias Completion = (Result<Void, DialFailure>) -> Void

    /// Longest CONNECT reply head accepted.
    static let maxConnectReplyHeadBytes = 64 * 1024

    let channel: StreamChannel
    let proxy: ProxyServer
    private var handshake: Handshake
    private var completion: Completion?
    private var timer: TimerID?

    private init(channel: StreamChannel, proxy: ProxyServer, handshake: Handshake) {
        self.channel = channel
        self.proxy = proxy
        self.handshake = handshake
    }

    /// Opens a CONNECT tunnel to `origin`, sending `authorization` as `Proxy-Authorization`.
    static func connect(
        channel: StreamChannel, proxy: ProxyServer, origin: Origin, authorization: String?,
        deadline: MonotonicInstant, completion: @escaping Completion
    ) {
        let target = origin.hostAndPort
        // Both go on the request as they are: a CR or LF in either would add lines to it.
        if !HTTPFieldValidation.isValidTarget(target.utf8) || authorization.map({ !HTTPFieldValidation.isValidFieldValue($0.utf8) }) == true {
            channel.close()
            let why = HTTPFieldValidation.isValidTarget(target.utf8)
                ? "the Proxy-Authorization value holds a control character"
                : "the host holds a space or a control character"
            completion(.failure(.proxy(.invalidTunnelRequest(proxy, why))))
            return
        }
        var options = HTTP1ParserOptions()
        options.maxHeaderSectionBytes = min(options.maxHeaderSectionBytes, maxConnectReplyHeadBytes)
        var parser = HTTP1ResponseParser(options: options)
        parser.expectResponse(to: .connect)
        var request = "CONNECT \(target) HTTP/1.1\r\nHost: \(target)\r\n"
        if let authorization { request += "Proxy-Authorization: \(authorization)\r\n" }
        request += "\r\n"
        let tunnel = ProxyTunnel(channel: channel, proxy: proxy, handshake: .connect(parser, target: target, authorization: authorization))
        tunnel.start(sending: Array(request.utf8), deadline: deadline, completion: completion)
    }

    /// Opens a SOCKS5 tunnel to `destination:port`.
    static func socks5(
        channel: StreamChannel, proxy: ProxyServer, destination: SOCKS5Destination, port: UInt16,
        deadline: MonotonicInstant, completion: @escaping Completion
    ) {
        let handshake: SOCKS5Handshake
        do throws(SOCKS5Error) {
            handshake = try SOCKS5Handshake(destination: destination, port: port, credentials: proxy.credentials)
        } catch {
            channel.close()
            completion(.failure(.proxy(.socks(proxy, error))))
            return
        }
        let tunnel = ProxyTunnel(channel: channel, proxy: proxy, handshake: .socks(handshake))
        tunnel.start(sending: handshake.greeting(), deadline: deadline, completion: completion)
    }

    private func start(sending bytes: [UInt8], deadline: MonotonicInstant, completion: @escaping Completion) {
        self.completion = completion
        channel.delegate = self
        // The tunnel holds itself through the timer and the channel until it ends.
        timer = channel.loop.scheduleTimer(at: deadline) { [self] in
            timer = nil
            finish(.failure(.proxy(.timedOut(proxy))))
        }
        send(bytes)
    }

    private func send(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { channel.write($0) }
    }

    private func finish(_ result: Result<Void, DialFailure>) {
        guard let completion else { return }
        self.completion = nil
        if let timer { channel.loop.cancelTimer(timer) }
        timer = nil
        channel.delegate = nil
        if case .failure = result { channel.close() }
        completion(result)
    }

    // MARK: StreamChannelDelegate

    func channel(_ channel: StreamChannel, didRead bytes: UnsafeRawBufferPointer) {
        guard completion != nil else { return }
        switch handshake {
        case .connect(var parser, let target, let authorization):
            readConnectReply(bytes, parser: &parser, target: target, authorization: authorization)
        case .socks(var socks):
            readSOCKSReply(bytes, handshake: &socks)
        }
    }

    private func readConnectReply(_ bytes: UnsafeRawBufferPointer, parser: inout HTTP1ResponseParser, target: String, authorization: String?) {
        var offset = 0
        var found: HTTPResponseHead?
        while found == nil {
            let step: HTTP1ParseStep
            do throws(HTTP1ResponseError) {
                step = try parser.next(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            } catch {
                finish(.failure(.proxy(.malformedReply(proxy, error.description))))
                return
            }
            offset += step.consumed
            if case .head(let head) = step.event {
                found = head
            } else if step.event == nil && (step.consumed == 0 || offset == bytes.count) {
                break
            }
        }
        handshake = .connect(parser, target: target, authorization: authorization)
        guard let head = found else { return }
        guard (200..<300).contains(head.status) else {
            finish(.failure(.proxy(.tunnelRefused(proxy, head, target: target, sentAuthorization: authorization))))
            return
        }
        if offset < bytes.count {
            finish(.failure(.proxy(.malformedReply(proxy, "\(bytes.count - offset) bytes followed the reply before the tunnel was used"))))
            return
        }
        finish(.success(()))
    }

    private func readSOCKSReply(_ bytes: UnsafeRawBufferPointer, handshake socks: inout SOCKS5Handshake) {
        var offset = 0
        while true {
            let outcome: (step: SOCKS5Handshake.Step, consumed: Int)
            do throws(SOCKS5Error) {
                outcome = try socks.receive(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            } catch {
                finish(.failure(.proxy(.socks(proxy, error))))
                return
            }
            offset += outcome.consumed
            handshake = .socks(socks)
            switch outcome.step {
            case .needMore:
                return
            case .send(let reply):
                send(reply)
            case .established:
                if offset < bytes.count {
                    finish(.failure(.proxy(.socks(proxy, .malformedReply("\(bytes.count - offset) bytes followed the connect reply before the tunnel was used")))))
                } else {
                    finish(.success(()))
                }
                return
            }
        }
    }

    func channelDidReadEOF(_ channel: StreamChannel) {
        finish(.failure(closedFailure(nil)))
    }

    /// The proxy closed the connection (or reset it) mid-handshake: a SOCKS5 proxy that closes
    /// instead of answering the greeting or the credentials refused them.
    private func closedFailure(_ error: SystemError?) -> DialFailure {
        if case .socks(let socks) = handshake, let refusal = socks.closedByProxy {
            return .proxy(.socks(proxy, refusal))
        }
        return .proxy(.closed(proxy, error))
    }

    func channelDidDrainWrites(_ channel: StreamChannel) {}

    func channel(_ channel: StreamChannel, didFail error: SystemError) {
        finish(.failure(closedFailure(error)))
    }
}
