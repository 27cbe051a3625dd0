import CourierCore
@testable import CourierTLS
import Foundation
import _CourierTestSupport

/// A client engine and a server engine joined in memory: bytes pumped from one to the other.
final class TLSPair {
    let client: TLSEngine
    let server: TLSEngine

    init(client: TLSEngine, server: TLSEngine) {
        self.client = client
        self.server = server
    }

    /// Moves pending ciphertext both ways once; returns true when anything moved.
    @discardableResult
    func pump() -> Bool {
        var moved = false
        for (from, to) in [(client, server), (server, client)] where from.hasOutput {
            var buffer = ByteBuffer()
            from.drainOutput(into: &buffer)
            buffer.withReadableBytes { to.feed($0) }
            moved = true
        }
        return moved
    }

    /// Runs both handshakes until neither makes progress; returns their last statuses.
    func handshake() -> (client: TLSEngine.HandshakeStatus, server: TLSEngine.HandshakeStatus) {
        var clientStatus = client.handshake()
        var serverStatus = server.handshake()
        for _ in 0..<50 {
            let moved = pump()
            clientStatus = client.handshake()
            serverStatus = server.handshake()
            if !moved && !client.hasOutput && !server.hasOutput { break }
        }
        return (clientStatus, serverStatus)
    }

    /// Reads what `engine` can decrypt now.
    static func readAll(_ engine: TLSEngine) -> (bytes: [UInt8], outcome: TLSEngine.ReadOutcome) {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            let outcome = buffer.withUnsafeMutableBytes { engine.read(into: $0) }
            if case .bytes(let count) = outcome {
                bytes += buffer[..<count]
                continue
            }
            return (bytes, outcome)
        }
    }
}

/// Contexts and identities built from the test PKI.
enum TestTLS {
    static var pki: TestCertificates { get throws { try TestCertificates.make() } }

    static func identity(_ name: String) throws -> TLSIdentity {
        let pki = try pki
        return try TLSIdentity.pem(certificateChain: pki.bytes("\(name).pem"), privateKey: pki.bytes("\(name).key"))
    }

    static func roots(_ name: String = "ca.pem") throws -> TrustStore {
        try TrustStore(pemBundle: pki.bytes(name))
    }

    static var now: Int64 { Int64(Date().timeIntervalSince1970) }

    static func serverContext(
        _ certificate: String = "server", protocols: [String] = ["http/1.1"],
        maxVersion: TLSVersion? = nil, clientCertificates: TLSContext.ClientCertificatePolicy = .none
    ) throws -> TLSContext {
        var configuration = TLSContext.Configuration()
        configuration.applicationProtocols = protocols
        configuration.maximumVersion = maxVersion
        configuration.clientCertificatePolicy = clientCertificates
        return try TLSContext(role: .server(identity: identity(certificate)), configuration: configuration)
    }

    static func clientContext(
        protocols: [String] = ["http/1.1"], minVersion: TLSVersion = .tls1_2, maxVersion: TLSVersion? = nil, roots: TrustStore? = nil
    ) throws -> TLSContext {
        var configuration = TLSContext.Configuration()
        configuration.applicationProtocols = protocols
        configuration.minimumVersion = minVersion
        configuration.maximumVersion = maxVersion
        configuration.trustRoots = try roots ?? TestTLS.roots()
        return try TLSContext(role: .client, configuration: configuration)
    }

    static func pair(
        server: TLSContext, client: TLSContext, host: String = "127.0.0.1", time: Int64? = nil, session: TLSSession? = nil
    ) throws -> TLSPair {
        TLSPair(
            client: try TLSEngine(context: client, role: .client(serverName: host), verificationTime: time ?? now, session: session),
            server: try TLSEngine(context: server, role: .server, verificationTime: time ?? now)
        )
    }
}
