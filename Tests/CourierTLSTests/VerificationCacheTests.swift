import CCourierOpenSSL
import CourierCore
@testable import CourierTLS
import Foundation
import Testing
import _CourierTestSupport

/// Handshakes in memory against the test PKI's server, two or more through one client context:
/// which of them the context's verification cache answers, and with what verdict.
@Suite("TLS verification cache")
struct VerificationCacheTests {
    /// Handshakes a new connection of `client` with a server using `certificate`; its verdict
    /// and the number of certificates in its verified chain.
    static func connect(
        _ client: TLSContext, certificate: String = "server", host: String = "127.0.0.1", time: Int64 = TestTLS.now
    ) throws -> (verdict: Result<Void, CertificateFailure>, verifiedChain: Int) {
        let pair = try TestTLS.pair(server: TestTLS.serverContext(certificate), client: client, host: host, time: time)
        #expect(pair.handshake().client == .established)
        let chain = SSL_get0_verified_chain(pair.client.ssl)
        return (pair.client.verificationResult, chain.map { Int(courier_sk_X509_num($0)) } ?? 0)
    }

    @Test("a second connection that presents the same certificates for the same name is answered from the cache, with the verified chain")
    func sameChain() throws {
        let client = try TestTLS.clientContext()
        let first = try Self.connect(client)
        #expect(throws: Never.self) { try first.verdict.get() }
        #expect(first.verifiedChain == 2, "the leaf and the test CA")
        #expect(client.verificationCache?.hits == 0)
        let second = try Self.connect(client)
        #expect(throws: Never.self) { try second.verdict.get() }
        #expect(second.verifiedChain == 2)
        #expect(client.verificationCache?.hits == 1)
    }

    @Test("another name, another certificate or a time outside the chain's validity is verified again, and fails for its own reason",
          arguments: [
              ("server", "other.invalid", nil, CertificateFailure.hostnameMismatch),
              ("selfsigned", "127.0.0.1", nil, .unknownRoot),
              ("wronghost", "127.0.0.1", nil, .hostnameMismatch),
              ("server", "127.0.0.1", 4_102_444_800 as Int64?, .expired),
          ])
    func notAnswered(_ entry: (certificate: String, host: String, time: Int64?, failure: CertificateFailure)) throws {
        let client = try TestTLS.clientContext()
        #expect(throws: Never.self) { try Self.connect(client).verdict.get() }
        let other = try Self.connect(client, certificate: entry.certificate, host: entry.host, time: entry.time ?? TestTLS.now)
        #expect(throws: entry.failure) { try other.verdict.get() }
        #expect(client.verificationCache?.hits == 0)
    }

    @Test("a verdict is given again only within its lifetime; the new verification replaces it")
    func lifetime() throws {
        let client = try TestTLS.clientContext()
        let start = TestTLS.now
        #expect(throws: Never.self) { try Self.connect(client, time: start).verdict.get() }
        #expect(throws: Never.self) { try Self.connect(client, time: start + VerificationCache.lifetime).verdict.get() }
        #expect(client.verificationCache?.hits == 1)
        let later = start + VerificationCache.lifetime + 1
        #expect(throws: Never.self) { try Self.connect(client, time: later).verdict.get() }
        #expect(client.verificationCache?.hits == 1, "verified again")
        #expect(throws: Never.self) { try Self.connect(client, time: later + 1).verdict.get() }
        #expect(client.verificationCache?.hits == 2, "answered from the new verification")
    }

    @Test("inside a verdict's lifetime, a time at or past the leaf's notAfter is verified again and has expired, as OpenSSL counts it")
    func expiryInsideLifetime() throws {
        let leaf = try #require(try TLSCertificate.pemCertificates(TestTLS.pki.bytes("server.pem")).first)
        let notAfter = try #require(VerificationCache.seconds(X509_get0_notAfter(leaf.x509)))
        let client = try TestTLS.clientContext()
        #expect(throws: Never.self) { try Self.connect(client, time: notAfter - 300).verdict.get() }
        #expect(throws: Never.self) { try Self.connect(client, time: notAfter - 1).verdict.get() }
        #expect(client.verificationCache?.hits == 1, "a second before the end, the verdict stands")
        #expect(throws: CertificateFailure.expired) { try Self.connect(client, time: notAfter).verdict.get() }
        #expect(throws: CertificateFailure.expired) { try Self.connect(client, time: notAfter + 1).verdict.get() }
        #expect(client.verificationCache?.hits == 1)
    }

    @Test("a failure is not kept: the same chain verifies once the time is right")
    func failuresNotKept() throws {
        let client = try TestTLS.clientContext()
        #expect(throws: CertificateFailure.expired) { try Self.connect(client, time: 4_102_444_800).verdict.get() }
        #expect(throws: Never.self) { try Self.connect(client).verdict.get() }
        #expect(client.verificationCache?.hits == 0)
    }

    @Test("each client context has its own cache: another context's roots decide for its connections")
    func perContext() throws {
        #expect(throws: Never.self) { try Self.connect(TestTLS.clientContext()).verdict.get() }
        let strangers = try TestTLS.clientContext(roots: TestTLS.roots("otherca.pem"))
        #expect(throws: CertificateFailure.unknownRoot) { try Self.connect(strangers).verdict.get() }
        #expect(strangers.verificationCache?.hits == 0)
    }

    @Test("names the certificate holds are kept apart: each is verified once, then answered")
    func names() throws {
        let client = try TestTLS.clientContext()
        let names = ["127.0.0.1", "localhost", "[::1]"]
        for host in names {
            #expect(throws: Never.self) { try Self.connect(client, host: host).verdict.get() }
        }
        #expect(client.verificationCache?.count == 3)
        #expect(client.verificationCache?.hits == 0)
        for host in names {
            #expect(throws: Never.self) { try Self.connect(client, host: host).verdict.get() }
        }
        #expect(client.verificationCache?.hits == 3)
        #expect(client.verificationCache?.count == 3)
    }
}
