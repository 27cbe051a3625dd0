import CCourierOpenSSL
import CourierCore
@testable import CourierTLS
import Foundation
import Testing
import _CourierTestSupport

@Suite("TLS engine, client against server in memory")
struct TLSEngineTests {
    @Test("handshake, ALPN, version and verification")
    func handshake() throws {
        let pair = try TestTLS.pair(server: TestTLS.serverContext(protocols: ["h2", "http/1.1"]), client: TestTLS.clientContext(protocols: ["h2", "http/1.1"]))
        let status = pair.handshake()
        #expect(status.client == .established)
        #expect(status.server == .established)
        #expect(pair.client.negotiatedApplicationProtocol == "h2")
        #expect(pair.client.negotiatedVersion == .tls1_3)
        #expect(pair.client.negotiatedCipherSuite != nil)
        #expect(throws: Never.self) { try pair.client.verificationResult.get() }
        #expect(pair.client.peerCertificateChain.first?.commonName == "localhost")
    }

    @Test("TLS 1.3's suites in Apple's and Go's order: AES-128-GCM where the processor has AES instructions, else ChaCha20-Poly1305, and OpenSSL's server takes the first")
    func cipherSuiteOrder() throws {
        let pair = try TestTLS.pair(server: TestTLS.serverContext(), client: TestTLS.clientContext())
        #expect(pair.handshake().client == .established)
        #expect(pair.client.negotiatedVersion == .tls1_3)
        let expected: UInt16 = ProcessorFeatures.hasAESInstructions ? 0x1301 : 0x1303
        #expect(pair.client.negotiatedCipherSuite == expected)
        #expect(TLSContext.tls13CipherSuites(aesHardware: false).hasPrefix("TLS_CHACHA20_POLY1305_SHA256:"))
    }

    @Test("ALPN picks the server's first protocol the client also offers")
    func alpnFallback() throws {
        let pair = try TestTLS.pair(server: TestTLS.serverContext(protocols: ["http/1.1"]), client: TestTLS.clientContext(protocols: ["h2", "http/1.1"]))
        #expect(pair.handshake().client == .established)
        #expect(pair.client.negotiatedApplicationProtocol == "http/1.1")
    }

    @Test("application data flows both ways and close_notify closes cleanly")
    func dataAndClose() throws {
        let pair = try TestTLS.pair(server: TestTLS.serverContext(), client: TestTLS.clientContext())
        _ = pair.handshake()
        let request = Array("GET / HTTP/1.1\r\n\r\n".utf8)
        try request.withUnsafeBytes { try pair.client.write($0) }
        pair.pump()
        #expect(TLSPair.readAll(pair.server).bytes == request)
        let response = deterministicBytes(count: 100_000, seed: 5)
        try response.withUnsafeBytes { try pair.server.write($0) }
        pair.pump()
        #expect(TLSPair.readAll(pair.client).bytes == response)
        pair.server.close()
        pair.pump()
        #expect(TLSPair.readAll(pair.client).outcome == .closed(clean: true))
    }

    @Test("ciphertext read into the engine's receive space, in pieces that split records, mixed with bytes fed from elsewhere, decrypts whole")
    func receiveSpace() throws {
        let pair = try TestTLS.pair(server: TestTLS.serverContext(), client: TestTLS.clientContext())
        _ = pair.handshake()
        let response = deterministicBytes(count: 300_000, seed: 9)
        try response.withUnsafeBytes { try pair.server.write($0) }
        var ciphertext = ByteBuffer()
        pair.server.drainOutput(into: &ciphertext)
        let records = ciphertext.withReadableBytes { Array($0) }
        var received: [UInt8] = []
        var offset = 0
        var piece = 0
        while offset < records.count {
            // Pieces of 5,000 to 70,000 bytes: records are cut anywhere, and some pieces are
            // bigger than the space the engine has, so it must move or grow what it holds.
            let count = min([5_000, 70_000, 13_000][piece % 3], records.count - offset)
            let bytes = records[offset..<(offset + count)]
            if piece % 4 == 3 {
                bytes.withUnsafeBytes { pair.client.feed($0) }
            } else {
                let minimum = piece % 2 == 0 ? count : 1
                let space = try #require(pair.client.receiveSpace(minimum: minimum))
                #expect(space.count >= minimum)
                let taken = min(count, space.count)
                bytes.prefix(taken).withUnsafeBytes { space.copyMemory(from: $0) }
                pair.client.feed(UnsafeRawBufferPointer(rebasing: space[0..<taken]))
                offset += taken - count
            }
            offset += count
            piece += 1
            let read = TLSPair.readAll(pair.client)
            #expect(read.outcome == .needsMoreInput)
            received += read.bytes
        }
        #expect(received == response)
        #expect(pair.client.receiveSpace(minimum: 0) == nil, "no room is asked for")
    }

    @Test("ciphertext is handed over where it lies and only once; what the engine writes while it is handed over waits, in order, for the next time")
    func takeOutput() throws {
        let pair = try TestTLS.pair(server: TestTLS.serverContext(), client: TestTLS.clientContext())
        _ = pair.handshake()
        #expect(!pair.client.hasOutput)
        var calls = 0
        pair.client.takeOutput { _ in calls += 1 }
        #expect(calls == 0, "nothing waits, so nothing is handed over")
        // Larger than the output's first buffer (4 KiB), so it grows; then a second write made
        // from inside the hand-over, after its bytes were copied, as a sender that writes again
        // when the socket takes everything would.
        let first = deterministicBytes(count: 50_000, seed: 11)
        let second = Array("and after it".utf8)
        try first.withUnsafeBytes { try pair.client.write($0) }
        var sent: [UInt8] = []
        try pair.client.takeOutput { bytes in
            calls += 1
            sent += bytes
            try second.withUnsafeBytes { try pair.client.write($0) }
        }
        #expect(calls == 1)
        #expect(pair.client.hasOutput, "the record written during the hand-over waits")
        pair.client.takeOutput { bytes in
            calls += 1
            sent += bytes
        }
        #expect(calls == 2)
        #expect(!pair.client.hasOutput)
        sent.withUnsafeBytes { pair.server.feed($0) }
        #expect(TLSPair.readAll(pair.server).bytes == first + second)
    }

    @Test("an end of input without close_notify is an unclean close")
    func truncation() throws {
        let pair = try TestTLS.pair(server: TestTLS.serverContext(), client: TestTLS.clientContext())
        _ = pair.handshake()
        try Array("partial".utf8).withUnsafeBytes { try pair.server.write($0) }
        pair.pump()
        pair.client.feedEndOfInput()
        let result = TLSPair.readAll(pair.client)
        #expect(result.bytes == Array("partial".utf8))
        #expect(result.outcome == .closed(clean: false))
    }

    @Test("certificate failures are kept, not fatal to the handshake", arguments: [
        ("expired", "127.0.0.1", CertificateFailure.expired),
        ("notyet", "127.0.0.1", .notYetValid),
        ("selfsigned", "127.0.0.1", .unknownRoot),
        ("wronghost", "127.0.0.1", .hostnameMismatch),
        ("server", "other.invalid", .hostnameMismatch),
    ])
    func verificationFailures(_ entry: (String, String, CertificateFailure)) throws {
        let pair = try TestTLS.pair(server: TestTLS.serverContext(entry.0), client: TestTLS.clientContext(), host: entry.1)
        #expect(pair.handshake().client == .established)
        #expect(throws: entry.2) { try pair.client.verificationResult.get() }
    }

    @Test("localhost and 127.0.0.1 both match the server certificate", arguments: ["localhost", "127.0.0.1"])
    func hostNames(_ host: String) throws {
        let pair = try TestTLS.pair(server: TestTLS.serverContext(), client: TestTLS.clientContext(), host: host)
        _ = pair.handshake()
        #expect(throws: Never.self) { try pair.client.verificationResult.get() }
    }

    @Test("the verification time is an argument, not the clock")
    func verificationTime() throws {
        let year2100: Int64 = 4_102_444_800
        let pair = try TestTLS.pair(server: TestTLS.serverContext(), client: TestTLS.clientContext(), time: year2100)
        _ = pair.handshake()
        #expect(throws: CertificateFailure.expired) { try pair.client.verificationResult.get() }
    }

    @Test("version bounds: a TLS 1.2 cap is honoured, and no common version fails")
    func versions() throws {
        let capped = try TestTLS.pair(server: TestTLS.serverContext(), client: TestTLS.clientContext(maxVersion: .tls1_2))
        #expect(capped.handshake().client == .established)
        #expect(capped.client.negotiatedVersion == .tls1_2)
        let impossible = try TestTLS.pair(server: TestTLS.serverContext(maxVersion: .tls1_2), client: TestTLS.clientContext(minVersion: .tls1_3))
        guard case .failed(.handshakeFailed) = impossible.handshake().client else {
            Issue.record("expected a handshake failure")
            return
        }
    }

    @Test("garbage from the peer fails the handshake")
    func garbage() throws {
        let client = try TLSEngine(context: TestTLS.clientContext(), role: .client(serverName: "127.0.0.1"), verificationTime: TestTLS.now)
        _ = client.handshake()
        Array("HTTP/1.1 400 Bad Request\r\n\r\nthis is not TLS at all".utf8).withUnsafeBytes { client.feed($0) }
        guard case .failed(.handshakeFailed) = client.handshake() else {
            Issue.record("expected a handshake failure")
            return
        }
    }

    @Test("sessions resume with the ticket the server issued")
    func resumption() throws {
        let server = try TestTLS.serverContext()
        let client = try TestTLS.clientContext()
        let first = try TestTLS.pair(server: server, client: client)
        _ = first.handshake()
        // TLS 1.3 tickets arrive after the handshake; reading processes them.
        try Array("x".utf8).withUnsafeBytes { try first.server.write($0) }
        first.pump()
        _ = TLSPair.readAll(first.client)
        let session = try #require(first.client.takeNewSession())
        #expect(first.client.isSessionResumed == false)
        let second = try TestTLS.pair(server: server, client: client, session: session)
        #expect(second.handshake().client == .established)
        #expect(second.client.isSessionResumed)
        #expect(second.client.peerCertificateChain.isEmpty == false, "a resumed session still knows the server's certificate")
    }

    @Test("renegotiation requested by a TLS 1.2 server is refused")
    func renegotiation() throws {
        let pair = try TestTLS.pair(server: TestTLS.serverContext(maxVersion: .tls1_2), client: TestTLS.clientContext())
        #expect(pair.handshake().client == .established)
        // Courier's contexts refuse renegotiation on both sides; let this server try it.
        SSL_clear_options(pair.server.ssl, courier_SSL_OP_NO_RENEGOTIATION())
        #expect(SSL_renegotiate(pair.server.ssl) == 1)
        _ = SSL_do_handshake(pair.server.ssl)
        for _ in 0..<5 {
            pair.pump()
            _ = TLSPair.readAll(pair.client)
            _ = SSL_do_handshake(pair.server.ssl)
        }
        // The client never took part: the server's renegotiation is still pending or failed.
        let serverOutcome = TLSPair.readAll(pair.server).outcome
        var serverFailed = false
        if case .failed = serverOutcome { serverFailed = true }
        #expect(SSL_renegotiate_pending(pair.server.ssl) == 1 || serverFailed)
        ERR_clear_error()
    }

    @Test("a required client certificate is asked for, with the acceptable issuers")
    func clientCertificate() throws {
        let ca = try TLSCertificate.pemCertificates(TestTLS.pki.bytes("ca.pem"))
        let server = try TestTLS.serverContext(clientCertificates: .require(trustedIssuers: ca))
        let pair = try TestTLS.pair(server: server, client: TestTLS.clientContext())
        guard case .needsClientIdentity(let issuers) = pair.handshake().client else {
            Issue.record("the client was not asked for a certificate")
            return
        }
        #expect(issuers == [ca[0].subjectNameDER])
        pair.client.provideClientIdentity(try TestTLS.identity("client"))
        let status = pair.handshake()
        #expect(status.client == .established)
        #expect(status.server == .established)
        #expect(SSL_get0_peer_certificate(pair.server.ssl) != nil)
    }

    @Test("declining a required client certificate fails with clientCertificateRequired")
    func clientCertificateDeclined() throws {
        let ca = try TLSCertificate.pemCertificates(TestTLS.pki.bytes("ca.pem"))
        let pair = try TestTLS.pair(server: TestTLS.serverContext(clientCertificates: .require(trustedIssuers: ca)), client: TestTLS.clientContext())
        _ = pair.handshake()
        pair.client.provideClientIdentity(nil)
        let status = pair.handshake()
        // TLS 1.3 clients learn of the refusal only when they read.
        let failure: TLSError?
        if case .failed(let error) = status.client {
            failure = error
        } else if case .failed(let error) = TLSPair.readAll(pair.client).outcome {
            failure = error
        } else {
            failure = nil
        }
        #expect(failure == .clientCertificateRequired)
    }

    @Test("a client certificate from an untrusted issuer is rejected")
    func clientCertificateRejected() throws {
        let ca = try TLSCertificate.pemCertificates(TestTLS.pki.bytes("ca.pem"))
        let pair = try TestTLS.pair(server: TestTLS.serverContext(clientCertificates: .require(trustedIssuers: ca)), client: TestTLS.clientContext())
        _ = pair.handshake()
        pair.client.provideClientIdentity(try TestTLS.identity("stranger"))
        let status = pair.handshake()
        var rejected = false
        if case .failed(.clientCertificateRejected) = status.client { rejected = true }
        if case .failed(.clientCertificateRejected) = TLSPair.readAll(pair.client).outcome { rejected = true }
        #expect(rejected)
    }
}

@Suite("TLS identities and trust evaluation")
struct TLSIdentityTests {
    @Test("PKCS#12 opens with the right passphrase only")
    func pkcs12() throws {
        let archive = try TestTLS.pki.bytes("client.p12")
        let identity = try TLSIdentity.pkcs12(archive, passphrase: TestCertificates.pkcs12Passphrase)
        #expect(identity.certificate.commonName == "Courier Test Client")
        #expect(identity.intermediates.first?.commonName == "Courier Test CA")
        #expect(throws: TLSError.self) { try TLSIdentity.pkcs12(archive, passphrase: "wrong") }
        #expect(throws: TLSError.self) { try TLSIdentity.pkcs12([1, 2, 3], passphrase: "x") }
    }

    @Test("a key that does not belong to the certificate is refused")
    func mismatchedKey() throws {
        let pki = try TestTLS.pki
        #expect(throws: TLSError.self) {
            try TLSIdentity.pem(certificateChain: pki.bytes("client.pem"), privateKey: pki.bytes("server.key"))
        }
    }

    @Test("trust evaluation: system roots, anchors only, anchors with system roots")
    func anchors() throws {
        let pki = try TestTLS.pki
        let server = try TLSCertificate.pemCertificates(pki.bytes("server.pem"))
        let selfSigned = try TLSCertificate.pemCertificates(pki.bytes("selfsigned.pem"))
        let ca = try TLSCertificate.pemCertificates(pki.bytes("ca.pem"))
        let roots = try TestTLS.roots()
        let now = TestTLS.now
        #expect(throws: Never.self) { try TrustEvaluation.evaluate(chain: server, host: "127.0.0.1", roots: roots, anchors: nil, anchorsOnly: true, time: now).get() }
        #expect(throws: CertificateFailure.unknownRoot) {
            try TrustEvaluation.evaluate(chain: selfSigned, host: "127.0.0.1", roots: roots, anchors: nil, anchorsOnly: true, time: now).get()
        }
        #expect(throws: Never.self) {
            try TrustEvaluation.evaluate(chain: selfSigned, host: "localhost", roots: roots, anchors: selfSigned, anchorsOnly: true, time: now).get()
        }
        #expect(throws: CertificateFailure.unknownRoot) {
            try TrustEvaluation.evaluate(chain: server, host: "127.0.0.1", roots: roots, anchors: selfSigned, anchorsOnly: true, time: now).get()
        }
        #expect(throws: Never.self) {
            try TrustEvaluation.evaluate(chain: server, host: "127.0.0.1", roots: roots, anchors: selfSigned, anchorsOnly: false, time: now).get()
        }
        #expect(throws: CertificateFailure.hostnameMismatch) {
            try TrustEvaluation.evaluate(chain: server, host: "wrong.invalid", roots: roots, anchors: ca, anchorsOnly: true, time: now).get()
        }
    }
}

extension TLSCertificate {
    /// The DER of the subject name (the tests compare it with the issuers a server accepts).
    var subjectNameDER: [UInt8] { TLSCertificate.encode(X509_get_subject_name(x509)) }
}
