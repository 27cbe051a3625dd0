import CourierCore
import CourierReactor
import CourierTLS
import Foundation

/// TLS over a stream channel: drives a ``TLSEngine`` with the channel's bytes, runs the
/// handshake with the trust and client-certificate decisions, then carries plaintext.
///
/// Phases: handshaking → (awaiting client identity → handshaking) → awaiting trust →
/// established → closed. Nothing is written for the application before trust is decided.
final class TLSStream: TransportStream, StreamChannelDelegate {
    enum Phase {
        case handshaking
        case awaitingClientIdentity
        case awaitingTrust
        case established
        case closed
    }

    typealias HandshakeCompletion = (Result<Void, DialFailure>) -> Void

    let channel: StreamChannel
    let engine: TLSEngine
    let origin: Origin
    @exclusivity(unchecked) weak var delegate: TransportStreamDelegate?
    @exclusivity(unchecked) private(set) var tls: TLSDetails?
    @exclusivity(unchecked) private var phase = Phase.handshaking
    @exclusivity(unchecked) private var completion: HandshakeCompletion?
    @exclusivity(unchecked) private var handshakeTimer: TimerID?
    /// Small parts of one write of several, gathered into a record.
    @exclusivity(unchecked) private var gathered = ByteBuffer()
    @exclusivity(unchecked) private var readingPaused = false
    /// The end of the plaintext or a failure, found by ``readPlaintext()`` behind bytes whose
    /// reader then paused: dealt with when it reads again.
    @exclusivity(unchecked) private var heldOutcome: TLSEngine.ReadOutcome?
    @exclusivity(unchecked) private var sawEOF = false
    /// The least room the next read gets in the engine's input (``channelReadSpace(_:)``):
    /// 16 KiB, doubled whenever a read brings that much, up to the loop's receive buffer size.
    /// A big body is read as much at a time as over plain TCP; a quiet connection keeps a
    /// small buffer.
    @exclusivity(unchecked) private var readSpaceSize = 16 * 1024
    /// close_notify was sent (``finishWriting()``): nothing more is written.
    @exclusivity(unchecked) private var writeFinished = false
    private let sessionCache: TLSSessionCache
    @exclusivity(unchecked) private var trusted = false
    private let handshakeStart = MonotonicInstant.now
    private let securityDelegate: ConnectionSecurityDelegate?
    /// Finds the request a challenge is for (the oldest one waiting), at the time it is raised.
    private let exchangeForChallenge: () -> HTTPExchange?
    /// Named in the challenges of a connection that serves no exchange.
    private let owner: (any ConnectionOwner)?

    init(
        channel: StreamChannel, engine: TLSEngine, origin: Origin, sessionCache: TLSSessionCache,
        securityDelegate: ConnectionSecurityDelegate?, exchangeForChallenge: @escaping () -> HTTPExchange?,
        owner: (any ConnectionOwner)? = nil
    ) {
        self.owner = owner
        self.channel = channel
        self.engine = engine
        self.origin = origin
        self.sessionCache = sessionCache
        self.securityDelegate = securityDelegate
        self.exchangeForChallenge = exchangeForChallenge
        channel.delegate = self
    }

    var loop: EventLoop { channel.loop }
    var pendingWriteBytes: Int { channel.pendingWriteBytes }
    var localAddress: SocketAddress? { channel.localAddress }
    var remoteAddress: SocketAddress? { channel.remoteAddress }

    static func sessionKey(_ origin: Origin) -> String { "\(origin.host):\(origin.port)" }

    // MARK: Handshake

    /// Starts the handshake; `completion` runs once on the loop. The handshake, the delegate's
    /// decisions included, must be over by `deadline`, or it fails as timed out.
    func startHandshake(deadline: MonotonicInstant, _ completion: @escaping HandshakeCompletion) {
        self.completion = completion
        handshakeTimer = loop.scheduleTimer(at: deadline) { [weak self] in
            guard let self else { return }
            handshakeTimer = nil
            finishHandshake(.failure(.connect(.timedOut)))
        }
        advanceHandshake()
    }

    private func advanceHandshake() {
        guard phase == .handshaking else { return }
        let status = engine.handshake()
        flushOutgoing()
        switch status {
        case .inProgress:
            if sawEOF { finishHandshake(.failure(.closedDuringHandshake)) }
        case .needsClientIdentity(let issuers):
            phase = .awaitingClientIdentity
            guard let securityDelegate else {
                answerClientIdentity(.none)
                return
            }
            let request = ClientIdentityRequest(origin: origin, acceptableIssuers: issuers, exchange: exchangeForChallenge(), owner: owner)
            let bound = LoopBound(self, loop: loop)
            let loop = self.loop
            securityDelegate.chooseClientIdentity(request) { decision in
                loop.execute { bound.value.answerClientIdentity(decision) }
            }
        case .established:
            phase = .awaitingTrust
            evaluateTrust()
        case .failed(let error):
            finishHandshake(.failure(.tls(error)))
        }
    }

    private func answerClientIdentity(_ decision: ClientIdentityDecision) {
        guard phase == .awaitingClientIdentity else { return }
        switch decision {
        case .identity(let identity): engine.provideClientIdentity(identity)
        case .none: engine.provideClientIdentity(nil)
        case .cancel:
            finishHandshake(.failure(.cancelled))
            return
        }
        phase = .handshaking
        advanceHandshake()
    }

    private func evaluateTrust() {
        let verdict = engine.verificationResult
        guard let securityDelegate else {
            switch verdict {
            case .success: decideTrust(.accept)
            case .failure(let failure): decideTrust(.reject(failure))
            }
            return
        }
        let request = ServerTrustRequest(origin: origin, chain: engine.peerCertificateChain, verdict: verdict, exchange: exchangeForChallenge(), owner: owner)
        let bound = LoopBound(self, loop: loop)
        let loop = self.loop
        securityDelegate.evaluateServerTrust(request) { decision in
            loop.execute { bound.value.decideTrust(decision) }
        }
    }

    private func decideTrust(_ decision: ServerTrustDecision) {
        guard phase == .awaitingTrust else { return }
        switch decision {
        case .accept:
            trusted = true
            phase = .established
            tls = TLSDetails(
                version: engine.negotiatedVersion, cipherSuite: engine.negotiatedCipherSuite, cipherName: engine.negotiatedCipherName,
                applicationProtocol: engine.negotiatedApplicationProtocol, isSessionResumed: engine.isSessionResumed,
                handshakeStart: handshakeStart, handshakeEnd: .now
            )
            keepNewSession()
            finishHandshake(.success(()))
            // Records that came with the last handshake flight or during the decision (an h2
            // server's SETTINGS, say) sit in the engine; no read event will announce them.
            loop.executeSoon { [weak self] in self?.readPlaintext() }
        case .reject(let failure):
            sessionCache.remove(Self.sessionKey(origin))
            finishHandshake(.failure(.untrusted(failure)))
        case .cancel:
            finishHandshake(.failure(.cancelled))
        }
    }

    private func finishHandshake(_ result: Result<Void, DialFailure>) {
        guard let completion else { return }
        self.completion = nil
        if let handshakeTimer { loop.cancelTimer(handshakeTimer) }
        handshakeTimer = nil
        if case .failure = result {
            phase = .closed
            channel.close()
        }
        completion(result)
    }

    // MARK: TransportStream

    /// Each `SSL_write` ends at least one record, and a record costs OpenSSL several thousand
    /// instructions and the wire 22 bytes whatever it holds. The parts are therefore gathered
    /// into records as full as they can be: a request head with its small body, or a chunk's
    /// size line, data and CRLF, go out as one record, not one each. Whole records' worth of a
    /// long part is encrypted from where it lies; at most a record's worth a part is copied.
    func write(_ parts: [UnsafeRawBufferPointer]) {
        encrypt { () throws(TLSError) in
            let record = Self.maxRecordPlaintext
            func sendGathered() throws(TLSError) {
                try gathered.withReadableBytes { bytes throws(TLSError) in try engine.write(bytes) }
                gathered.clear()
            }
            gathered.clear()
            for part in parts {
                var rest = part
                while !rest.isEmpty {
                    if gathered.isEmpty && rest.count >= record {
                        let whole = rest.count - rest.count % record
                        try engine.write(UnsafeRawBufferPointer(rebasing: rest[..<whole]))
                        rest = UnsafeRawBufferPointer(rebasing: rest[whole...])
                        continue
                    }
                    let taken = min(rest.count, record - gathered.readableBytes)
                    gathered.write(UnsafeRawBufferPointer(rebasing: rest[..<taken]))
                    rest = UnsafeRawBufferPointer(rebasing: rest[taken...])
                    if gathered.readableBytes == record { try sendGathered() }
                }
            }
            if !gathered.isEmpty { try sendGathered() }
        }
    }

    /// The most plaintext OpenSSL puts in one record (TLS's limit, 2^14 bytes, which Courier
    /// does not lower).
    static var maxRecordPlaintext: Int { 16 * 1024 }

    func write(_ bytes: UnsafeRawBufferPointer) {
        encrypt { () throws(TLSError) in
            if bytes.count > 0 { try engine.write(bytes) }
        }
    }

    /// Hands plaintext to the engine through `feed`, then sends the records it made.
    private func encrypt(_ feed: () throws(TLSError) -> Void) {
        guard phase == .established, !writeFinished else { return }
        do {
            try feed()
        } catch {
            fail(.remoteProtocol(error))
            return
        }
        flushOutgoing()
    }

    var isUnfitForReuse: Bool {
        phase != .established || engine.hasBufferedInput || channel.peekPendingInput() != .nothing
    }

    func pauseReading() {
        readingPaused = true
        channel.pauseReading()
    }

    func resumeReading() {
        guard readingPaused else { return }
        readingPaused = false
        channel.resumeReading()
        // Plaintext already decrypted inside the engine is delivered without waiting for bytes.
        loop.executeSoon { [weak self] in self?.readPlaintext() }
    }

    func finishWriting() {
        guard phase == .established, !writeFinished else { return }
        writeFinished = true
        engine.close()
        flushOutgoing()
    }

    func shutdownWrite() { channel.shutdownWrite() }

    func close() {
        guard phase != .closed else { return }
        keepNewSession()
        if phase == .established, !writeFinished {
            engine.close()
            flushOutgoing()
        }
        phase = .closed
        delegate = nil
        channel.close()
    }

    // MARK: StreamChannelDelegate

    /// Ciphertext is read straight into the engine's input, which keeps it until it is
    /// decrypted: received into the loop's buffer, each byte was copied there once more.
    func channelReadSpace(_ channel: StreamChannel) -> UnsafeMutableRawBufferPointer? {
        guard phase != .closed else { return nil }
        return engine.receiveSpace(minimum: readSpaceSize)
    }

    func channel(_ channel: StreamChannel, didRead bytes: UnsafeRawBufferPointer) {
        if bytes.count >= readSpaceSize && readSpaceSize < EventLoop.readBufferSize { readSpaceSize *= 2 }
        // In place when the read went to the space given above.
        engine.feed(bytes)
        switch phase {
        case .handshaking: advanceHandshake()
        case .established: readPlaintext()
        case .awaitingClientIdentity, .awaitingTrust, .closed: break
        }
    }

    func channelDidReadEOF(_ channel: StreamChannel) {
        sawEOF = true
        engine.feedEndOfInput()
        switch phase {
        case .handshaking: advanceHandshake()
        case .awaitingClientIdentity, .awaitingTrust: finishHandshake(.failure(.closedDuringHandshake))
        case .established: readPlaintext()
        case .closed: break
        }
    }

    func channelDidDrainWrites(_ channel: StreamChannel) {
        delegate?.streamDidDrainWrites()
    }

    func channel(_ channel: StreamChannel, didFail error: SystemError) {
        if completion != nil {
            // TCP was up: a reset now ends the TLS handshake, not the connect (Apple reports a
            // close in the handshake as secureConnectionFailed too).
            finishHandshake(.failure(.closedDuringHandshake))
            return
        }
        phase = .closed
        let delegate = self.delegate
        self.delegate = nil
        delegate?.streamDidFail(.connectionLost(error))
    }

    /// Delivers decrypted bytes until the engine needs more input or reading pauses.
    ///
    /// The records in hand are decrypted one after the other into the receive buffer and
    /// delivered as one read: a big body's 16 KiB records make one parse and one delivery for
    /// as many as have arrived, not one each. How decrypting stopped is dealt with after the
    /// bytes before it; an end or a failure waits in ``heldOutcome`` while the reader pauses.
    private func readPlaintext() {
        while phase == .established && !readingPaused {
            let buffer = loop.readBuffer
            var filled = 0
            var outcome: TLSEngine.ReadOutcome
            if let held = heldOutcome {
                heldOutcome = nil
                outcome = held
            } else {
                repeat {
                    outcome = engine.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[filled...]))
                    guard case .bytes(let count) = outcome else { break }
                    filled += count
                    // With nothing left inside the engine, another SSL_read would only say it
                    // needs more input, at the cost of the call.
                    if !engine.hasBufferedInput {
                        outcome = .needsMoreInput
                        break
                    }
                } while filled < buffer.count
            }
            if filled > 0 {
                // TLS 1.3 tickets arrive after the handshake, ahead of the first response bytes.
                keepNewSession()
                delegate?.streamDidRead(UnsafeRawBufferPointer(rebasing: buffer[0..<filled]))
                guard phase == .established && !readingPaused else {
                    switch outcome {
                    case .closed, .failed: heldOutcome = outcome
                    case .bytes, .needsMoreInput: break
                    }
                    return
                }
            }
            switch outcome {
            case .bytes:
                continue
            case .needsMoreInput:
                flushOutgoing()
                keepNewSession()
                return
            case .closed(let clean):
                flushOutgoing()
                let delegate = self.delegate
                delegate?.streamDidReadEOF(cleanly: clean)
                return
            case .failed(let error):
                fail(.remoteProtocol(error))
                return
            }
        }
    }

    private func keepNewSession() {
        guard trusted, let session = engine.takeNewSession() else { return }
        sessionCache.store(session, for: Self.sessionKey(origin))
    }

    /// Sends the ciphertext the engine holds, if any, from where it lies: the channel keeps
    /// what the socket does not take at once.
    private func flushOutgoing() {
        guard channel.isOpen else { return }
        engine.takeOutput { channel.write($0) }
    }

    private func fail(_ error: TransportError) {
        guard phase != .closed else { return }
        phase = .closed
        let delegate = self.delegate
        self.delegate = nil
        channel.close()
        delegate?.streamDidFail(error)
    }
}
