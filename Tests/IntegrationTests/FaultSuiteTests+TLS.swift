import Courier
import CourierCore
import CourierSync
import CourierTLS
import Foundation
import Testing
import _CourierTestSupport

/// A fault suite of TLS handshakes: one broken server (a scripted raw server writing exact
/// bytes, or `openssl s_server` with options no test vhost has), one exact `URLError.Code`,
/// reached within the timeouts, and nothing leaked (``expectNoLeaks(_:_:log:closes:sourceLocation:)``).
///
/// How a failed handshake becomes a code (TLSStream, TLSEngine.classify, URLError+Transport):
/// - an alert, or bytes OpenSSL refuses, fail `SSL_do_handshake`: `TLSError.handshakeFailed`,
///   `secureConnectionFailed`; but the certificate_required alert is `clientCertificateRequired`;
/// - a FIN: the engine is told of the end of input and OpenSSL fails with "unexpected eof
///   while reading" (or, were it still waiting, `DialFailure.closedDuringHandshake`): either
///   way `secureConnectionFailed`;
/// - an RST: the channel fails while the handshake is pending, and TLSStream reports it as a
///   close in the handshake, `DialFailure.closedDuringHandshake`: `secureConnectionFailed`;
/// - silence: the handshake shares the connect deadline, `connectTimeout`, which URLSession
///   sets from `timeoutIntervalForRequest`: `timedOut`;
/// - a chain OpenSSL will not verify: `CertificateFailure`, one of the certificate codes.
///
/// Covered elsewhere, not repeated: a server silent after the ClientHello
/// (TLSTruncationTests.silentHandshake), close_notify and truncation after the handshake
/// (TLSTruncationTests), certificate failures and version bounds against nginx
/// (TLSNginxTests.failures, .versionBounds), a server that demands a client certificate
/// (TLSNginxTests.clientCertificateRequired).
@Suite("TLS fault suite: one broken handshake, one exact outcome, nothing leaked", .timeLimit(.minutes(1)))
struct FaultSuiteTLSTests {
    init() throws {
        // Puts the test CA in this process's trust store before any session is made.
        _ = try TestCertificates.make()
    }

    /// FaultSuiteTests' session: ephemeral, no cache, short timeouts.
    func session(timeout: TimeInterval = 5) -> URLSession {
        FaultSuiteTests().session(timeout: timeout)
    }

    static func url(_ port: Int) -> URL { URL(string: "https://127.0.0.1:\(port)/")! }

    // MARK: Stalls

    @Test("a handshake the server stalls partway is timedOut at the request timeout, which bounds the handshake", arguments: FaultHandshakeStall.allCases)
    func stalledHandshake(_ stall: FaultHandshakeStall) async throws {
        let log = PeerLog()
        // Made before the server starts, not while the client's deadline runs.
        let context = try Self.serverContext(maximumVersion: stall.maximumVersion)
        let server = try ScriptedServer { connection in
            guard let flight = Self.firstServerFlight(connection, context: context) else { return }
            switch stall {
            case .halfFirstFlight:
                connection.write(Array(flight.prefix(flight.count / 2)))
            case .beforeServerFinished:
                connection.write(flight)
                // ClientKeyExchange, ChangeCipherSpec and Finished: the client did its part
                // and now waits for the server's ChangeCipherSpec and Finished.
                if !connection.readAvailable(timeout: 60).isEmpty { log.mark("client flight") }
            }
            log.awaitClientClose(connection)
        }
        // The handshake runs under the dial's deadline: connectTimeout, which URLSession sets
        // from timeoutIntervalForRequest (URLSession.init), not the idle timer of an exchange.
        // 10 s, so a loaded machine still gets the client's second flight out well before it.
        let session = session(timeout: 10)
        let (error, took) = await timedLoad(session, URLRequest(url: Self.url(server.port)))
        #expect(urlErrorCode(error) == .timedOut, "\(String(describing: error))")
        // Not a speed check: at the timeout (never before it), and not at some later one.
        #expect(took >= .milliseconds(9_900) && took < .seconds(45), "timed out after \(took)")
        if stall == .beforeServerFinished {
            #expect(log.has("client flight"), "the client sent its second flight: the stall was past the server's first")
        }
        await expectNoLeaks(session, server, log: log, closes: 1)
    }

    // MARK: Answers that are not a handshake

    @Test("a ClientHello answered with bytes that are not a TLS handshake is secureConnectionFailed at once", arguments: FaultNotTLS.allCases)
    func notTLS(_ answer: FaultNotTLS) async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard !connection.readAvailable(timeout: 5).isEmpty else { return }
            connection.write(answer.bytes)
            log.awaitClientClose(connection)
        }
        let session = session(timeout: 60)
        let (error, took) = await timedLoad(session, URLRequest(url: Self.url(server.port)))
        // OpenSSL fails the record at its header ("wrong version number", "packet length too
        // long"): handshakeFailed, secureConnectionFailed.
        #expect(urlErrorCode(error) == .secureConnectionFailed, "\(String(describing: error))")
        #expect(took < .seconds(30), "refused on the bytes, not at the 60 s timeout: \(took)")
        await expectNoLeaks(session, server, log: log, closes: 1)
    }

    @Test("a TLS alert in answer to the ClientHello, then a FIN: the alert decides the code", arguments: FaultAlert.allCases)
    func alertThenClose(_ alert: FaultAlert) async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard !connection.readAvailable(timeout: 5).isEmpty else { return }
            // An alert record: content type 21, version 3.3, length 2, level, description.
            connection.write([0x15, 0x03, 0x03, 0x00, 0x02, alert.level, alert.rawValue])
            connection.shutdownWrite()
            log.awaitClientClose(connection)
        }
        let session = session()
        await expectURLError(alert.expected, mentioning: alert.detail) { _ = try await session.data(from: Self.url(server.port)) }
        await expectNoLeaks(session, server, log: log, closes: 1)
    }

    @Test("a server that reads the ClientHello and closes (FIN) or resets: secureConnectionFailed, as a close in the handshake", arguments: FaultCut.allCases)
    func closedAfterClientHello(_ cut: FaultCut) async throws {
        let log = PeerLog()
        let server = try ScriptedServer { connection in
            guard !connection.readAvailable(timeout: 5).isEmpty else { return }
            switch cut {
            case .close:
                connection.shutdownWrite()
                log.awaitClientClose(connection)
            case .reset:
                connection.reset()
            }
        }
        let session = session()
        // FIN: TLSStream feeds the end of input and advances the handshake; OpenSSL 3 fails it
        // ("unexpected eof while reading"), and an engine still waiting would be
        // closedDuringHandshake. RST: StreamChannel reports ECONNRESET while the handshake is
        // pending, which TLSStream reports as closedDuringHandshake too (TCP was up: it is no
        // failed connect). Either way secureConnectionFailed, as Apple reports a close in the
        // handshake (errSSLClosedAbort).
        let expected: URLError.Code = .secureConnectionFailed
        await expectURLError(expected) { _ = try await session.data(from: Self.url(server.port)) }
        #expect(server.connectionCount == 1, "a failed handshake is not dialed again")
        await expectNoLeaks(session, server, log: log, closes: cut == .close ? 1 : 0)
    }

    // MARK: Real servers Courier must refuse, or may accept

    @Test("a server that speaks only TLS 1.0 or 1.1 is secureConnectionFailed: Courier offers TLS 1.2 and up", arguments: ["-tls1", "-tls1_1"])
    func legacyVersionOnly(_ version: String) async throws {
        let pki = try TestCertificates.make()
        // OpenSSL 3 enables TLS 1.0 and 1.1 only at security level 0.
        let server = try OpenSSLServer(certificate: pki.serverPEM, key: pki.serverKey, arguments: [version, "-cipher", "DEFAULT:@SECLEVEL=0"])
        let session = session()
        // Courier's ClientHello lists TLS 1.3 and 1.2 in supported_versions (minimumVersion
        // 1.2 by default); the server has none of them and answers with a protocol_version
        // alert. The message names it, so a failure for another reason does not pass.
        await expectURLError(.secureConnectionFailed, mentioning: "protocol version") { _ = try await session.data(from: server.url()) }
        await expectNoLeaks(session, port: server.port)
    }

    @Test("12 and 100 intermediates are trusted; 101 are past OpenSSL's default verify depth of 100, which Courier keeps: serverCertificateUntrusted", arguments: [12, 100, 101])
    func longChain(_ intermediates: Int) async throws {
        let files = try IntermediateChain.make().server(under: intermediates)
        let server = try OpenSSLServer(certificate: files.certificate, key: files.key, arguments: ["-cert_chain", files.chain])
        let session = session()
        // TLSContext sets no verify depth, so the default verify parameters' 100 applies: the
        // intermediates between the leaf and the anchor (the test CA). Past it X509_verify_cert
        // stops with X509_V_ERR_CERT_CHAIN_TOO_LONG, which TrustEvaluation.failure(forVerifyCode:)
        // reads as `.untrusted(code:reason:)`. The chain's size (about 45 KB of DER at 100) is
        // under OpenSSL's 100 KiB limit on a Certificate message.
        if intermediates <= 100 {
            let (_, response) = try await session.data(from: server.url())
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
        } else {
            await expectURLError(.serverCertificateUntrusted, mentioning: "chain too long") { _ = try await session.data(from: server.url()) }
        }
        await expectNoLeaks(session, port: server.port)
    }

    @Test("a Certificate message past OpenSSL's 100 KiB limit (max_cert_list) is secureConnectionFailed before any trust decision")
    func oversizedCertificate() async throws {
        let files = try IntermediateChain.oversizedServerCertificate()
        let server = try OpenSSLServer(certificate: files.certificate, key: files.key, arguments: [])
        // The delegate would be asked about trust once the handshake got that far.
        let delegate = ChallengeDelegate { _ in (.performDefaultHandling, nil) }
        let configuration = URLSessionConfiguration.uncached
        configuration.timeoutIntervalForRequest = 5
        let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        // The leaf chains to the test CA and would be trusted; OpenSSL's reader refuses the
        // message for its size ("excessive message size"): handshakeFailed.
        await expectURLError(.secureConnectionFailed, mentioning: "excessive message size") { _ = try await session.data(from: server.url()) }
        #expect(delegate.seen.withLock { $0 }.isEmpty, "no challenge: the handshake failed before trust")
        await expectNoLeaks(session, port: server.port)
    }

    // MARK: Helpers

    /// A server-role context with the test PKI's server identity, offering at most
    /// `maximumVersion`.
    static func serverContext(maximumVersion: TLSVersion?) throws -> TLSContext {
        let pki = try TestCertificates.make()
        let identity = try TLSIdentity.pem(certificateChain: pki.bytes("server.pem"), privateKey: pki.bytes("server.key"))
        var configuration = TLSContext.Configuration()
        configuration.maximumVersion = maximumVersion
        return try TLSContext(role: .server(identity: identity), configuration: configuration)
    }

    /// Plays the server's side of a handshake up to its first flight (ServerHello onwards)
    /// with Courier's engine in the server role, and returns those bytes unsent; nil when the
    /// client sent nothing a server could answer.
    static func firstServerFlight(_ connection: ScriptedConnection, context: TLSContext) -> [UInt8]? {
        guard let engine = try? TLSEngine(context: context, role: .server, verificationTime: Int64(Date().timeIntervalSince1970)) else { return nil }
        while !engine.hasOutput {
            // Long: a late ClientHello is the loaded machine, not a client that sent nothing.
            let input = connection.readAvailable(timeout: 60)
            guard !input.isEmpty else { return nil }
            input.withUnsafeBytes { engine.feed($0) }
            if case .failed = engine.handshake() { return nil }
        }
        var output = ByteBuffer()
        engine.drainOutput(into: &output)
        return output.readableBytesArray()
    }
}

// MARK: - Scenario tables

/// Where a server stops in the middle of a handshake.
enum FaultHandshakeStall: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// TLS 1.3: the first half of ServerHello…Finished, then nothing; the client waits inside
    /// a record.
    case halfFirstFlight
    /// TLS 1.2: the whole first flight (ServerHello, Certificate, ServerKeyExchange,
    /// ServerHelloDone); the client answers and waits for a ChangeCipherSpec and Finished that
    /// never come.
    case beforeServerFinished

    var maximumVersion: TLSVersion? { self == .beforeServerFinished ? .tls1_2 : nil }

    var testDescription: String { rawValue }
}

/// Bytes that answer a ClientHello and are no TLS handshake.
enum FaultNotTLS: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// A plain HTTP server on the https port: "HTTP" is no record header ("wrong version number").
    case plainHTTP
    /// A handshake record header declaring 65,535 bytes, past the 16 KiB + 2048 a TLS record
    /// may carry, and nothing after it: refused on the header ("packet length too long"),
    /// not waited for.
    case oversizedRecord

    var bytes: [UInt8] {
        switch self {
        case .plainHTTP: Array("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8)
        case .oversizedRecord: [0x16, 0x03, 0x03, 0xFF, 0xFF]
        }
    }

    var testDescription: String { rawValue }
}

/// An alert a server sends instead of a ServerHello (RFC 8446 §6), by its description number.
enum FaultAlert: UInt8, CaseIterable, Sendable, CustomTestStringConvertible {
    case closeNotify = 0
    case handshakeFailure = 40
    case protocolVersion = 70
    /// TLS 1.3's alert for a missing client certificate, sent though none was asked for.
    case certificateRequired = 116

    /// close_notify is a warning; the others are fatal.
    var level: UInt8 { self == .closeNotify ? 1 : 2 }

    /// TLSEngine.classify reads certificate_required alone as clientCertificateRequired,
    /// asked for or not. Any other alert fails the handshake (a close_notify as
    /// SSL_ERROR_ZERO_RETURN): secureConnectionFailed.
    var expected: URLError.Code { self == .certificateRequired ? .clientCertificateRequired : .secureConnectionFailed }

    /// Words of OpenSSL's reason that the message carries (close_notify leaves no reason).
    var detail: String? {
        switch self {
        case .handshakeFailure: "alert handshake failure"
        case .protocolVersion: "alert protocol version"
        case .closeNotify, .certificateRequired: nil
        }
    }

    var testDescription: String { "\(self)" }
}

// MARK: - Certificates made for the suite

/// CA certificates in a line under the test CA, made once per test process with the openssl
/// tool, as TestCertificates makes its PKI: intermediate 1 is issued by the test CA, each next
/// one by the one before; ECDSA P-256 keys. `openssl req -x509 -CA` needs OpenSSL 3.0.
final class IntermediateChain: Sendable {
    /// Intermediates made: one past OpenSSL's default verify depth (100).
    static let count = 101

    let directory: URL
    private static let shared = Mutex<Result<IntermediateChain, TestServerError>?>(nil)

    static func make() throws -> IntermediateChain {
        try shared.withLock { cached in
            if let cached { return try cached.get() }
            let result = Result { () throws(TestServerError) -> IntermediateChain in try IntermediateChain() }
            cached = result
            return try result.get()
        }
    }

    private static let curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    private init() throws(TestServerError) {
        let pki: TestCertificates
        do {
            pki = try TestCertificates.make()
        } catch {
            throw TestServerError("no test PKI: \(error)")
        }
        directory = TestRun.makeDirectory("chain")
        var issuer = (certificate: pki.caPEM, key: pki.path("ca.key"))
        for index in 1...Self.count {
            let name = path("intermediate-\(index)")
            try Self.openssl(["req", "-x509"] + Self.curve + [
                "-keyout", "\(name).key", "-out", "\(name).pem", "-days", "365",
                "-subj", "/CN=Courier Test Intermediate \(index)/O=Courier",
                "-CA", issuer.certificate, "-CAkey", issuer.key,
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            ])
            issuer = (certificate: "\(name).pem", key: "\(name).key")
        }
    }

    func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

    /// A server certificate for 127.0.0.1 and localhost issued by intermediate `count`, its key,
    /// and the chain to send with it: intermediates `count` down to 1, issuer first (the test
    /// CA, the anchor, is not sent).
    func server(under count: Int) throws -> (certificate: String, key: String, chain: String) {
        precondition((1...Self.count).contains(count))
        let leaf = path("leaf-\(count)")
        let issuer = path("intermediate-\(count)")
        try Self.openssl(["req", "-x509"] + Self.curve + [
            "-keyout", "\(leaf).key", "-out", "\(leaf).pem", "-days", "365", "-subj", "/CN=localhost",
            "-CA", "\(issuer).pem", "-CAkey", "\(issuer).key",
            "-addext", "basicConstraints=CA:FALSE", "-addext", "keyUsage=critical,digitalSignature",
            "-addext", "extendedKeyUsage=serverAuth", "-addext", "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost",
        ])
        var chain = Data()
        for index in stride(from: count, through: 1, by: -1) {
            chain += try Data(contentsOf: URL(fileURLWithPath: path("intermediate-\(index).pem")))
        }
        let chainPath = path("chain-\(count).pem")
        guard FileManager.default.createFile(atPath: chainPath, contents: chain) else {
            throw TestServerError("cannot write \(chainPath)")
        }
        return (certificate: "\(leaf).pem", key: "\(leaf).key", chain: chainPath)
    }

    /// A server certificate for 127.0.0.1 issued by the test CA whose DER is some 110 KB, past
    /// OpenSSL's default max_cert_list (100 KiB): a private extension holds 110,000 bytes.
    static func oversizedServerCertificate() throws -> (certificate: String, key: String) {
        let pki = try TestCertificates.make()
        let directory = TestRun.makeDirectory("bigcert").path
        let extensions = """
        basicConstraints=CA:FALSE
        keyUsage=critical,digitalSignature
        extendedKeyUsage=serverAuth
        subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost
        1.3.6.1.4.1.55555.1=ASN1:UTF8String:\(String(repeating: "a", count: 110_000))

        """
        try extensions.write(toFile: "\(directory)/big.ext", atomically: true, encoding: .utf8)
        try openssl(["req"] + curve + ["-keyout", "\(directory)/big.key", "-out", "\(directory)/big.csr", "-subj", "/CN=localhost"])
        // -set_serial: no serial file is written beside the shared test CA.
        try openssl(["x509", "-req", "-in", "\(directory)/big.csr", "-CA", pki.caPEM, "-CAkey", pki.path("ca.key"),
                     "-set_serial", "4242", "-days", "365", "-extfile", "\(directory)/big.ext", "-out", "\(directory)/big.pem"])
        return (certificate: "\(directory)/big.pem", key: "\(directory)/big.key")
    }

    private static func openssl(_ arguments: [String]) throws(TestServerError) {
        do {
            _ = try runTool("/usr/bin/openssl", arguments)
        } catch {
            throw TestServerError("openssl \(arguments.prefix(2).joined(separator: " ")) failed: \(error)")
        }
    }
}

// MARK: - Checks

/// Expects `body` to throw a URLError with `code` whose message contains `detail` (when given):
/// the reason as well as the code, where one code covers many reasons.
func expectURLError(
    _ code: URLError.Code, mentioning detail: String?, _ body: () async throws -> Void,
    sourceLocation: SourceLocation = #_sourceLocation
) async {
    do {
        try await body()
        Issue.record("expected URLError \(code)", sourceLocation: sourceLocation)
    } catch let error as URLError {
        let message = error.userInfo[NSLocalizedDescriptionKey] as? String ?? ""
        #expect(error.code == code, "\(message)", sourceLocation: sourceLocation)
        if let detail {
            #expect(message.contains(detail), "the message does not say \"\(detail)\": \(message)", sourceLocation: sourceLocation)
        }
    } catch {
        Issue.record("expected URLError \(code), got \(error)", sourceLocation: sourceLocation)
    }
}
