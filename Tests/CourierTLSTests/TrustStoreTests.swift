import CCourierOpenSSL
import CourierCore
@testable import CourierTLS
import Foundation
import Testing
import _CourierTestSupport

@Suite("A trust store from a PEM bundle parses its certificates when they are looked for")
struct TrustStoreTests {
    static func bundle(_ names: [String]) throws -> [UInt8] {
        let pki = try TestTLS.pki
        return names.flatMap { pki.bytes($0) + Array("\n".utf8) }
    }

    static func certificates(_ name: String) throws -> [TLSCertificate] {
        try TLSCertificate.pemCertificates(TestTLS.pki.bytes(name))
    }

    /// Verifies `chain` for `host` against `roots` alone, now.
    static func verify(_ chain: [TLSCertificate], host: String? = "localhost", roots: TrustStore) throws(CertificateFailure) {
        try TrustEvaluation.evaluate(chain: chain, host: host, roots: roots, anchors: nil, anchorsOnly: false, time: TestTLS.now).get()
    }

    @Test("the system bundle plus the test CA: nothing parsed until a chain is verified, then only the issuer")
    func parsesOnDemand() throws {
        let pem = try TestTLS.pki.bytes("trusted-bundle.pem")
        let blocks = String(decoding: pem, as: UTF8.self).components(separatedBy: "-----BEGIN CERTIFICATE-----").count - 1
        let roots = try TrustStore(pemBundle: pem)
        #expect(blocks > 1)
        #expect(roots.count == blocks)
        #expect(roots.parsedCount == 0)
        let server = try Self.certificates("server.pem")
        for _ in 0..<2 {
            #expect(throws: Never.self) {
                try Self.verify(server, roots: roots)
            }
            #expect(roots.parsedCount == 1)
        }
        #expect(throws: CertificateFailure.unknownRoot) {
            try Self.verify(Self.certificates("stranger.pem"), host: nil, roots: roots)
        }
        #expect(roots.parsedCount == 1)
        let all = roots.certificates
        #expect(all.count == blocks)
        #expect(all.last?.commonName == "Courier Test CA")
    }

    @Test("a handshake verifies against a bundle store, the issuer parsed during it")
    func handshake() throws {
        let roots = try TrustStore(pemBundle: TestTLS.pki.bytes("trusted-bundle.pem"))
        let pair = try TestTLS.pair(server: TestTLS.serverContext(), client: TestTLS.clientContext(roots: roots), host: "localhost")
        #expect(roots.parsedCount == 0)
        #expect(pair.handshake().client == .established)
        #expect(throws: Never.self) { try pair.client.verificationResult.get() }
        #expect(roots.parsedCount == 1)
    }

    @Test("two roots with one name: the one whose key signed the chain is found, in either order")
    func sameName() throws {
        let server = try Self.certificates("server.pem")
        for order in [["samenameca.pem", "ca.pem"], ["ca.pem", "samenameca.pem"]] {
            let roots = try TrustStore(pemBundle: Self.bundle(order))
            #expect(roots.count == 2)
            #expect(throws: Never.self) {
                try Self.verify(server, roots: roots)
            }
            #expect(roots.parsedCount == 2)
        }
        let impostor = try TrustStore(pemBundle: Self.bundle(["samenameca.pem"]))
        #expect(throws: CertificateFailure.unknownRoot) {
            try Self.verify(server, roots: impostor)
        }
    }

    @Test("keys, other blocks and a certificate block that is not DER are skipped; no certificate at all is an error")
    func otherBlocks() throws {
        let broken = Array("-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n".utf8)
        let noise = Array("some text before\n".utf8)
        let pem = try noise + Self.bundle(["server.key"]) + broken + Self.bundle(["ca.pem"])
        let roots = try TrustStore(pemBundle: pem)
        #expect(roots.count == 1)
        #expect(throws: Never.self) {
            try Self.verify(Self.certificates("server.pem"), roots: roots)
        }
        #expect(throws: TLSError.self) { try TrustStore(pemBundle: Self.bundle(["server.key"]) + broken) }
        #expect(throws: TLSError.self) { try TrustStore(pemBundle: []) }
    }

    @Test("the subject found in the DER is the one OpenSSL parses; a cut or altered encoding never reads out of bounds")
    func subjectRange() throws {
        for name in ["ca.pem", "server.pem", "client.pem", "stranger.pem"] {
            let certificate = try Self.certificates(name)[0]
            let der = certificate.derBytes
            let subject = certificate.subjectNameDER
            let range = der.withUnsafeBufferPointer { PEMBundleIndex.subjectRange($0) }
            #expect(range.map { Array(der[$0]) } == subject)
            for length in 0..<der.count {
                let prefix = Array(der[..<length])
                let cut = prefix.withUnsafeBufferPointer { PEMBundleIndex.subjectRange($0) }
                if let cut { #expect(cut.upperBound <= length) }
            }
            for offset in 0..<min(der.count, 64) {
                var altered = der
                altered[offset] ^= 0xFF
                let found = altered.withUnsafeBufferPointer { PEMBundleIndex.subjectRange($0) }
                if let found { #expect(found.upperBound <= der.count) }
            }
        }
    }

    @Test("verifications on several threads at once parse the issuer once and all succeed")
    func concurrent() async throws {
        let roots = try TrustStore(pemBundle: TestTLS.pki.bytes("trusted-bundle.pem"))
        let server = try Self.certificates("server.pem")
        let results = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    (try? Self.verify(server, roots: roots)) != nil
                }
            }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(results == Array(repeating: true, count: 8))
        #expect(roots.parsedCount == 1)
    }

    @Test("a root found only in a hashed directory is trusted; a missing directory is no error")
    func hashedDirectory() throws {
        let pki = try TestTLS.pki
        let directory = try pki.hashedDirectory(["ca.pem"])
        let server = try Self.certificates("server.pem")
        let bundleOnly = try TrustStore(pemBundle: Self.bundle(["otherca.pem"]))
        #expect(throws: CertificateFailure.unknownRoot) { try Self.verify(server, roots: bundleOnly) }
        let withDirectory = try TrustStore(pemBundle: Self.bundle(["otherca.pem"]))
        try withDirectory.addHashedDirectories("/nonexistent/courier:" + directory.path)
        #expect(throws: Never.self) { try Self.verify(server, roots: withDirectory) }
        let directoryOnly = try TrustStore(certificates: [])
        try directoryOnly.addHashedDirectories(directory.path)
        #expect(throws: Never.self) { try Self.verify(server, roots: directoryOnly) }
        let elsewhere = try TrustStore(certificates: [])
        try elsewhere.addHashedDirectories(pki.hashedDirectory(["otherca.pem"]).path)
        #expect(throws: CertificateFailure.unknownRoot) { try Self.verify(server, roots: elsewhere) }
    }

    @Test("the variables that choose roots are read from the environment (this process is not setuid)")
    func environment() {
        let name = "COURIER_TEST_TRUST_\(getpid())"
        #expect(TrustStore.environmentValue(name) == nil)
        setenv(name, "/some/dir:/another", 1)
        defer { unsetenv(name) }
        #expect(TrustStore.environmentValue(name) == "/some/dir:/another")
    }

    @Test("OpenSSL's store keeps the index alive after the TrustStore is gone")
    func storeOutlivesTrustStore() throws {
        let leaf = try Self.certificates("server.pem")[0]
        var roots: TrustStore? = try TrustStore(pemBundle: Self.bundle(["ca.pem"]))
        let store = try #require(roots?.store)
        #expect(X509_STORE_up_ref(store) == 1)
        defer { X509_STORE_free(store) }
        roots = nil
        let context = try #require(X509_STORE_CTX_new())
        defer { X509_STORE_CTX_free(context) }
        #expect(X509_STORE_CTX_init(context, store, leaf.x509, nil) == 1)
        #expect(X509_verify_cert(context) == 1)
    }
}
