import CourierCore
import CourierTLS
import Foundation
import _CourierTestSupport

/// The server's end of a TLS connection in a test: Courier's engine in the server role, with
/// the test PKI's localhost certificate, over a scripted raw server's connection. Keeps every
/// byte the client sent, for tests that look at its records.
final class TLSServerEnd {
    let connection: ScriptedConnection
    let engine: TLSEngine
    /// The ciphertext received so far, handshake included.
    private(set) var wire: [UInt8] = []

    init(_ connection: ScriptedConnection) throws {
        let pki = try TestCertificates.make()
        let identity = try TLSIdentity.pem(certificateChain: pki.bytes("server.pem"), privateKey: pki.bytes("server.key"))
        let context = try TLSContext(role: .server(identity: identity), configuration: TLSContext.Configuration())
        self.connection = connection
        self.engine = try TLSEngine(context: context, role: .server, verificationTime: Int64(Date().timeIntervalSince1970))
    }

    /// Sends what the engine wrote, with `garbage` after it in the same write.
    func flush(then garbage: [UInt8] = []) {
        var out = ByteBuffer()
        engine.drainOutput(into: &out)
        connection.write(out.readableBytesArray() + garbage)
    }

    /// Feeds the engine what arrives within five seconds; false at the end of the stream or
    /// when nothing came.
    private func receive() -> Bool {
        let input = connection.readAvailable(timeout: 5)
        if input.isEmpty { return false }
        wire += input
        input.withUnsafeBytes { engine.feed($0) }
        return true
    }

    /// Runs the handshake; false when it failed or the client went quiet.
    func handshake() -> Bool {
        while true {
            let status = engine.handshake()
            flush()
            if status == .established { return true }
            if case .failed = status { return false }
            if !receive() { return false }
        }
    }

    /// Reads a request's head and its body (as long as its Content-Length says, none without
    /// one, or chunks up to the last); nil when the client stopped sending first.
    func readRequest() -> [UInt8]? {
        var request: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16384)
        while !Self.isComplete(request) {
            // The request may already be inside the engine, fed along with the handshake.
            if case .bytes(let count) = buffer.withUnsafeMutableBytes({ engine.read(into: $0) }) {
                request += buffer[..<count]
                continue
            }
            if !receive() { return nil }
        }
        return request
    }

    /// True when `request` holds a whole request: a head, then the body its fields frame.
    private static func isComplete(_ request: [UInt8]) -> Bool {
        guard let end = request.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound else { return false }
        let lines = String(decoding: request[..<end], as: UTF8.self).lowercased().split(separator: "\r\n")
        func value(_ name: String) -> String? {
            lines.first { $0.hasPrefix(name + ":") }.map { $0.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces) }
        }
        if value("transfer-encoding") == "chunked" {
            return request[end...].firstRange(of: Array("0\r\n\r\n".utf8)) != nil
        }
        return request.count >= end + (value("content-length").flatMap { Int($0) } ?? 0)
    }

    /// The types of the records received so far, in order (their 5-byte headers walked; a
    /// record not yet whole is left out).
    var recordTypes: [UInt8] {
        var types: [UInt8] = []
        var offset = 0
        while offset + 5 <= wire.count {
            let length = Int(wire[offset + 3]) << 8 | Int(wire[offset + 4])
            guard offset + 5 + length <= wire.count else { break }
            types.append(wire[offset])
            offset += 5 + length
        }
        return types
    }
}
