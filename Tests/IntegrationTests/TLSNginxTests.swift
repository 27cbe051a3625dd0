import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// A delegate that answers server-trust and client-certificate challenges with a closure and
/// counts them.
final class ChallengeDelegate: NSObject, URLSessionDelegate, @unchecked Sendable {
    typealias Answer = @Sendable (URLAuthenticationChallenge) -> (URLSession.AuthChallengeDisposition, URLCredential?)
    let answer: Answer
    let seen = Mutex<[String]>([])

    init(_ answer: @escaping Answer) {
        self.answer = answer
    }

    func urlSession(_ session: URLSession, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        seen.withLock { $0.append(challenge.protectionSpace.authenticationMethod) }
        let (disposition, credential) = answer(challenge)
        completionHandler(disposition, credential)
    }
}

/// A task's own delegate that answers the server-trust challenge at task level.
final class TaskTrustDelegate: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    let seen = Mutex<[String]>([])

    func urlSession(_ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        seen.withLock { $0.append(challenge.protectionSpace.authenticationMethod) }
        guard challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodServerTrust,
              let trust = challenge.protectionSpace.serverTrust else {
            completionHandler(.performDefaultHandling, nil)
            return
        }
        completionHandler(.useCredential, URLCredential(trust: trust))
    }
}

/// https against nginx with the test PKI. The test CA is part of this process's system trust
/// store (SSL_CERT_FILE, set by the harness), as an administrator would install a private CA.
@Suite("TLS against nginx")
struct TLSNginxTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }


    @Test("https GET succeeds with verification, on 127.0.0.1 and localhost", arguments: ["127.0.0.1", "localhost"])
    func get(_ host: String) async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let (data, response) = try await session.data(from: nginx.tlsURL("good", "/files/hello.txt", host: host))
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 200)
        #expect(Array(data) == NginxServer.fixtures["hello.txt"])
        #expect(http.value(forHTTPHeaderField: "X-SSL-Protocol") == "TLSv1.3")
        #expect(http.value(forHTTPHeaderField: "X-Server-Protocol") == "HTTP/2.0", "ALPN chose h2")
    }

    @Test("certificate failures map to Apple's codes", arguments: [
        ("expired", URLError.Code.serverCertificateHasBadDate),
        ("notyet", .serverCertificateNotYetValid),
        ("wronghost", .serverCertificateUntrusted),
        ("selfsigned", .serverCertificateHasUnknownRoot),
    ])
    func failures(_ entry: (String, URLError.Code)) async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        await expectURLError(entry.1) { _ = try await session.data(from: nginx.tlsURL(entry.0, "/files/hello.txt")) }
    }

    @Test("the system trust store reads SSL_CERT_DIR: a root there and not in the bundle is trusted (courier, a new process)")
    func certificateDirectory() async throws {
        let pki = try TestCertificates.make()
        let url = nginx.tlsURL("good", "/files/hello.txt").absoluteString
        for (names, status) in [(["ca.pem"], Int32(0)), (["otherca.pem"], 60)] {
            let directory = try pki.hashedDirectory(names)
            let environment = ["SSL_CERT_FILE": pki.path("otherca.pem"), "SSL_CERT_DIR": directory.path]
            let run = try #require(try await runCourier(["-s", url], environment: environment))
            #expect(run.status == status, "\(names): \(run.stderr)")
            if status == 0 { #expect(Array(run.stdout.utf8) == NginxServer.fixtures["hello.txt"]) }
        }
    }

    @Test(
        "a setgid courier ignores SSL_CERT_FILE and SSL_CERT_DIR, as OpenSSL does: the caller's environment does not choose its roots",
        .enabled(if: getuid() == 0, "giving a program another group needs root")
    )
    func privilegedProcessIgnoresEnvironment() async throws {
        let pki = try TestCertificates.make()
        let directory = try pki.hashedDirectory(["ca.pem"])
        let home = TestRun.makeDirectory("setgid-courier")
        let program = home.appendingPathComponent("courier")
        // The courier built beside the tests, in group nogroup: run by root (group root), a
        // setgid copy has an effective group that is not its real one, which is what makes
        // the C library's secure_getenv, and OpenSSL's, ignore the environment. Root keeps
        // what a sanitizer's runtime needs in such a process (its /proc files, ptrace).
        let built = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("courier")
        try #require(FileManager.default.isExecutableFile(atPath: built.path), "\(built.path) is built")
        try FileManager.default.copyItem(at: built, to: program)
        defer { try? FileManager.default.removeItem(at: home) }
        try #require(chown(program.path, 0, 65534) == 0, "chown: \(String(cString: strerror(errno)))")
        let url = nginx.tlsURL("good", "/files/hello.txt").absoluteString
        // The test CA is trusted only through the two variables.
        let environment = ["SSL_CERT_FILE": pki.path("otherca.pem"), "SSL_CERT_DIR": directory.path, "HOME": home.path, "TMPDIR": home.path]
        var runs: [(status: Int32, stdout: String, stderr: String)] = []
        for (mode, extra) in [(0o755, [String]()), (0o2755, []), (0o2755, ["-k"])] {
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: program.path)
            runs.append(try #require(try await runCourier(["-s", "-o", "/dev/null"] + extra + [url], environment: environment, program: program.path)))
        }
        #expect(runs[0].status == 0, "an ordinary program reads the variables: \(runs[0].stderr)")
        #expect(runs[1].status == 60, "a setgid one does not, and the test CA is not in the system's roots: \(runs[1].stderr)")
        #expect(runs[2].status == 0, "the setgid program itself works: \(runs[2].stderr)")
    }

    @Test("accepting a self-signed certificate through the trust challenge")
    func acceptSelfSigned() async throws {
        let delegate = ChallengeDelegate { challenge in
            guard challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodServerTrust,
                  let trust = challenge.protectionSpace.serverTrust else { return (.performDefaultHandling, nil) }
            return (.useCredential, URLCredential(trust: trust))
        }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (data, _) = try await session.data(from: nginx.tlsURL("selfsigned", "/files/hello.txt"))
        #expect(Array(data) == NginxServer.fixtures["hello.txt"])
        #expect(delegate.seen.withLock { $0 } == [NSURLAuthenticationMethodServerTrust])
    }

    @Test("a session made without a delegate asks a task's own delegate about the server's trust")
    func taskDelegateOnSessionWithoutDelegate() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let url = nginx.tlsURL("selfsigned", "/files/hello.txt")
        // Without a delegate anywhere, the self-signed certificate is refused.
        await #expect(throws: URLError.self) { _ = try await session.data(from: url) }
        let delegate = TaskTrustDelegate()
        let (data, _) = try await session.data(from: url, delegate: delegate)
        #expect(Array(data) == NginxServer.fixtures["hello.txt"])
        #expect(delegate.seen.withLock { $0 } == [NSURLAuthenticationMethodServerTrust])
    }

    @Test("a private CA as anchor, evaluated with SecTrustEvaluateWithError")
    func anchors() async throws {
        let pki = try TestCertificates.make()
        let caDER = try derOfFirstPEM(pki.caPEM)
        let delegate = ChallengeDelegate { challenge in
            guard let trust = challenge.protectionSpace.serverTrust,
                  let ca = SecCertificateCreateWithData(nil, caDER as CFData) else { return (.cancelAuthenticationChallenge, nil) }
            _ = SecTrustSetAnchorCertificates(trust, [ca] as CFArray)
            var error: CFError?
            return SecTrustEvaluateWithError(trust, &error) ? (.useCredential, URLCredential(trust: trust)) : (.cancelAuthenticationChallenge, nil)
        }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (_, response) = try await session.data(from: nginx.tlsURL("good", "/files/100.bin"))
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        // The same anchors do not save an expired certificate.
        await expectURLError(.cancelled) { _ = try await session.data(from: nginx.tlsURL("expired", "/files/100.bin")) }
    }

    @Test("pinning by certificate hash in a delegate")
    func pinning() async throws {
        let pki = try TestCertificates.make()
        let pinned = SHA256.hex(try derOfFirstPEM(pki.serverPEM))
        let makeDelegate = {
            ChallengeDelegate { challenge in
                guard let trust = challenge.protectionSpace.serverTrust,
                      let chain = SecTrustCopyCertificateChain(trust) as? [SecCertificate], let leaf = chain.first else {
                    return (.cancelAuthenticationChallenge, nil)
                }
                let hash = SHA256.hex(SecCertificateCopyData(leaf) as Data)
                return hash == pinned ? (.useCredential, URLCredential(trust: trust)) : (.cancelAuthenticationChallenge, nil)
            }
        }
        let session = URLSession(configuration: .uncached, delegate: makeDelegate(), delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        _ = try await session.data(from: nginx.tlsURL("good", "/files/100.bin"))
        // The self-signed vhost's certificate has another hash.
        await expectURLError(.cancelled) { _ = try await session.data(from: nginx.tlsURL("selfsigned", "/files/100.bin")) }
    }

    @Test("the trust decision is made once per connection, not per request")
    func challengePerConnection() async throws {
        let delegate = ChallengeDelegate { _ in (.performDefaultHandling, nil) }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        var connections: Set<String> = []
        for _ in 0..<5 {
            let (_, response) = try await session.data(from: nginx.tlsURL("h1", "/files/100.bin"))
            connections.insert(nginxConnection(response) ?? "?")
        }
        #expect(connections.count == 1)
        #expect(delegate.seen.withLock { $0.count } == 1)
        // The first /close/ request still rides the kept-alive connection, which then closes;
        // each later one needs a new connection, and each new connection asks again.
        for _ in 0..<3 { _ = try await session.data(from: nginx.tlsURL("h1", "/close/100.bin")) }
        #expect(delegate.seen.withLock { $0.count } == 3)
    }

    @Test("sessions are resumed on new connections")
    func resumption() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        var reused: [String] = []
        for _ in 0..<3 {
            let (_, response) = try await session.data(from: nginx.tlsURL("h1", "/close/100.bin"))
            reused.append((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-SSL-Session-Reused") ?? "?")
        }
        #expect(reused.first == ".")
        #expect(reused.dropFirst().allSatisfy { $0 == "r" }, "\(reused)")
    }

    @Test("TLS version bounds are honoured")
    func versionBounds() async throws {
        let capped = URLSessionConfiguration.uncached
        capped.tlsMaximumSupportedProtocolVersion = .TLSv12
        let cappedSession = URLSession(configuration: capped)
        defer { cappedSession.finishTasksAndInvalidate() }
        let (_, response) = try await cappedSession.data(from: nginx.tlsURL("good", "/files/100.bin"))
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-SSL-Protocol") == "TLSv1.2")

        let strict = URLSessionConfiguration.uncached
        strict.tlsMinimumSupportedProtocolVersion = .TLSv13
        let strictSession = URLSession(configuration: strict)
        defer { strictSession.finishTasksAndInvalidate() }
        await expectURLError(.secureConnectionFailed) { _ = try await strictSession.data(from: nginx.tlsURL("tls12", "/files/100.bin")) }
    }

    @Test("metrics record the TLS version, cipher suite and handshake")
    func metrics() async throws {
        let recorder = RecordingDelegate()
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        session.dataTask(with: nginx.tlsURL("good", "/files/64k.bin")).resume()
        await recorder.waitForCompletion()
        let transaction = try #require(recorder.record.withLock { $0.metrics?.transactionMetrics.first })
        #expect(transaction.negotiatedTLSProtocolVersion == .TLSv13)
        // nginx takes the client's order: Courier's, AES-128-GCM first where the processor
        // has AES instructions (OpenSSL's own order would give AES-256-GCM).
        let expected: tls_ciphersuite_t = ProcessorFeatures.hasAESInstructions ? .AES_128_GCM_SHA256 : .CHACHA20_POLY1305_SHA256
        #expect(transaction.negotiatedTLSCipherSuite == expected)
        #expect(transaction.secureConnectionStartDate != nil)
        #expect(transaction.secureConnectionEndDate! >= transaction.secureConnectionStartDate!)
        #expect(transaction.networkProtocolName == "h2")
    }

    @Test("a client certificate from PKCS#12 answers the client-certificate challenge")
    func clientCertificate() async throws {
        let pki = try TestCertificates.make()
        let archive = try Data(contentsOf: URL(fileURLWithPath: pki.clientP12))
        var items: CFArray?
        let status = SecPKCS12Import(archive as CFData, [kSecImportExportPassphrase as String: TestCertificates.pkcs12Passphrase] as CFDictionary, &items)
        #expect(status == errSecSuccess)
        let item = try #require((items as? [[String: Any]])?.first)
        let identity = try #require(item[kSecImportItemIdentity as String] as? SecIdentity)
        let delegate = ChallengeDelegate { challenge in
            if challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodClientCertificate {
                return (.useCredential, URLCredential(identity: identity, certificates: nil, persistence: .forSession))
            }
            return (.performDefaultHandling, nil)
        }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (_, response) = try await session.data(from: nginx.tlsURL("clientcert", "/files/100.bin"))
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 200)
        #expect(http.value(forHTTPHeaderField: "X-Client-Subject")?.contains("Courier Test Client") == true)
        #expect(delegate.seen.withLock { $0 }.contains(NSURLAuthenticationMethodClientCertificate))

        // Without a certificate nginx finishes the handshake and answers 400.
        let plain = URLSession(configuration: .uncached)
        defer { plain.finishTasksAndInvalidate() }
        let (_, refused) = try await plain.data(from: nginx.tlsURL("clientcert", "/files/100.bin"))
        #expect((refused as? HTTPURLResponse)?.statusCode == 400)
    }

    @Test("a server that demands a certificate fails the handshake without one: clientCertificateRequired")
    func clientCertificateRequired() async throws {
        let pki = try TestCertificates.make()
        let server = try OpenSSLServer(certificate: pki.serverPEM, key: pki.serverKey, arguments: ["-Verify", "1", "-CAfile", pki.caPEM])
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        await expectURLError(.clientCertificateRequired) { _ = try await session.data(from: server.url()) }
    }

    func derOfFirstPEM(_ path: String) throws -> Data {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let body = text.components(separatedBy: "-----BEGIN CERTIFICATE-----")[1].components(separatedBy: "-----END CERTIFICATE-----")[0]
        return try #require(Data(base64Encoded: body.replacingOccurrences(of: "\n", with: "")))
    }
}
