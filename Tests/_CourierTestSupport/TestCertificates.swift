import CourierSync
import Foundation

/// A test PKI made with the openssl command-line tool, once per test process: a CA, server
/// certificates for 127.0.0.1/localhost (good, expired, not yet valid, wrong host, self-signed)
/// and a client certificate (PEM and PKCS#12). Keys are ECDSA P-256, for speed.
public final class TestCertificates: Sendable {
    public let directory: URL
    /// Passphrase of `clientP12`.
    public static let pkcs12Passphrase = "courier-test"

    private static let shared = Mutex<Result<TestCertificates, TestServerError>?>(nil)

    /// The certificates of this test process, made on first use. Making them also makes the
    /// test CA part of the process's system trust store (see ``trustTestCAProcessWide()``).
    public static func make() throws -> TestCertificates {
        try shared.withLock { cached in
            if let cached { return try cached.get() }
            let result = Result { () throws(TestServerError) -> TestCertificates in try TestCertificates() }
            if case .success(let certificates) = result { certificates.trustTestCAProcessWide() }
            cached = result
            return try result.get()
        }
    }

    public func path(_ name: String) -> String { directory.appendingPathComponent(name).path }
    public func bytes(_ name: String) -> [UInt8] { Array((try? Data(contentsOf: directory.appendingPathComponent(name))) ?? Data()) }

    public var caPEM: String { path("ca.pem") }
    public var serverPEM: String { path("server.pem") }
    public var serverKey: String { path("server.key") }
    public var clientPEM: String { path("client.pem") }
    public var clientKey: String { path("client.key") }
    public var clientP12: String { path("client.p12") }
    /// The system's roots plus the test CA.
    public var trustedBundle: String { path("trusted-bundle.pem") }

    /// Makes the test CA part of the system trust store for this process (SSL_CERT_FILE), as an
    /// administrator would; call before any https session is made.
    public func trustTestCAProcessWide() {
        setenv("SSL_CERT_FILE", trustedBundle, 1)
    }

    private init() throws(TestServerError) {
        directory = TestRun.makeDirectory("pki")
        let dir = directory.path
        try? FileManager.default.createDirectory(atPath: "\(dir)/newcerts", withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: "\(dir)/index.txt", contents: Data())
        try write("\(dir)/serial", "1000\n")
        try write("\(dir)/ca.cnf", """
        [ ca ]
        default_ca = test_ca
        [ test_ca ]
        dir = \(dir)
        database = $dir/index.txt
        new_certs_dir = $dir/newcerts
        serial = $dir/serial
        certificate = $dir/ca.pem
        private_key = $dir/ca.key
        default_md = sha256
        policy = policy_any
        unique_subject = no
        copy_extensions = none
        default_days = 365
        [ policy_any ]
        commonName = supplied
        organizationName = optional
        """)
        let curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try run(["req", "-x509"] + curve + ["-keyout", "\(dir)/ca.key", "-out", "\(dir)/ca.pem", "-days", "3650",
                 "-subj", "/CN=Courier Test CA/O=Courier",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        let serverExtensions = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\n"
        try issue("server", subject: "/CN=localhost", extensions: serverExtensions, start: nil, end: nil)
        try issue("expired", subject: "/CN=localhost", extensions: serverExtensions, start: "20200101000000Z", end: "20210101000000Z")
        try issue("notyet", subject: "/CN=localhost", extensions: serverExtensions, start: "20900101000000Z", end: "20910101000000Z")
        try issue("wronghost", subject: "/CN=wrong.invalid",
                  extensions: "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:wrong.invalid\n", start: nil, end: nil)
        try issue("client", subject: "/CN=Courier Test Client", extensions: "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n", start: nil, end: nil)
        try run(["req", "-x509"] + curve + ["-keyout", "\(dir)/selfsigned.key", "-out", "\(dir)/selfsigned.pem", "-days", "365",
                 "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        // A second CA whose client certificate the servers do not trust.
        try run(["req", "-x509"] + curve + ["-keyout", "\(dir)/otherca.key", "-out", "\(dir)/otherca.pem", "-days", "3650",
                 "-subj", "/CN=Courier Other CA", "-addext", "basicConstraints=critical,CA:TRUE"])
        try run(["req"] + curve + ["-keyout", "\(dir)/stranger.key", "-out", "\(dir)/stranger.csr", "-subj", "/CN=Stranger"])
        try write("\(dir)/stranger.ext", "extendedKeyUsage=clientAuth\n")
        try run(["x509", "-req", "-in", "\(dir)/stranger.csr", "-CA", "\(dir)/otherca.pem", "-CAkey", "\(dir)/otherca.key",
                 "-CAcreateserial", "-out", "\(dir)/stranger.pem", "-days", "365", "-extfile", "\(dir)/stranger.ext"])
        // A CA with the test CA's name and a key of its own: a bundle may hold both.
        try run(["req", "-x509"] + curve + ["-keyout", "\(dir)/samenameca.key", "-out", "\(dir)/samenameca.pem", "-days", "3650",
                 "-subj", "/CN=Courier Test CA/O=Courier",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        // The system bundle plus the test CA: what the tests use as "the system trust store".
        let system = (try? Data(contentsOf: URL(fileURLWithPath: "/etc/ssl/certs/ca-certificates.crt"))) ?? Data()
        let testCA = (try? Data(contentsOf: URL(fileURLWithPath: "\(dir)/ca.pem"))) ?? Data()
        _ = FileManager.default.createFile(atPath: "\(dir)/trusted-bundle.pem", contents: system + Data("\n".utf8) + testCA)
        try run(["pkcs12", "-export", "-in", "\(dir)/client.pem", "-inkey", "\(dir)/client.key", "-certfile", "\(dir)/ca.pem",
                 "-out", "\(dir)/client.p12", "-passout", "pass:\(Self.pkcs12Passphrase)", "-name", "Courier Test Client"])
    }

    /// Makes a key and a certificate signed by the test CA, valid from `start` to `end`
    /// (YYYYMMDDHHMMSSZ; now and a year on when nil).
    private func issue(_ name: String, subject: String, extensions: String, start: String?, end: String?) throws(TestServerError) {
        let dir = directory.path
        try write("\(dir)/\(name).ext", extensions)
        try run(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", "\(dir)/\(name).key", "-out", "\(dir)/\(name).csr", "-subj", subject])
        var arguments = ["ca", "-batch", "-notext", "-config", "\(dir)/ca.cnf", "-in", "\(dir)/\(name).csr",
                         "-out", "\(dir)/\(name).pem", "-extfile", "\(dir)/\(name).ext"]
        if let start { arguments += ["-startdate", start] }
        if let end { arguments += ["-enddate", end] }
        try run(arguments)
    }

    /// A new directory holding copies of the named certificates under their subject hashes
    /// (`openssl rehash`): what OpenSSL reads as a certificate directory (`SSL_CERT_DIR`).
    public func hashedDirectory(_ names: [String]) throws(TestServerError) -> URL {
        let hashed = TestRun.makeDirectory("hashed-certificates")
        for name in names {
            do {
                try FileManager.default.copyItem(atPath: path(name), toPath: hashed.appendingPathComponent(name).path)
            } catch {
                throw TestServerError("cannot copy \(name): \(error)")
            }
        }
        try run(["rehash", hashed.path])
        return hashed
    }

    private func write(_ path: String, _ text: String) throws(TestServerError) {
        do {
            try text.write(toFile: path, atomically: true, encoding: .utf8)
        } catch {
            throw TestServerError("cannot write \(path): \(error)")
        }
    }

    private func run(_ arguments: [String]) throws(TestServerError) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            throw TestServerError("cannot run openssl (apt-get install openssl): \(error)")
        }
        let message = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw TestServerError("openssl \(arguments.prefix(2).joined(separator: " ")) failed: \(String(decoding: message, as: UTF8.self))")
        }
    }
}
