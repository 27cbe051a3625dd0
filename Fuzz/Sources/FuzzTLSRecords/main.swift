// The TLS engine fed garbage records. Byte 0 picks the phase: below 128 the input answers the
// client's ClientHello directly; otherwise the client first completes a real handshake with an
// in-memory server (a throwaway self-signed certificate), and the input arrives as records
// after it. Only TLSError may come out; nothing may trap.
import CourierCore
import CourierTLS

/// A throwaway self-signed identity for the in-memory server; it protects nothing.
enum FuzzIdentity {
    static let certificate = """
-----BEGIN CERTIFICATE-----
MIIBhDCCASugAwIBAgIUC9hinEMNls6rtszChszkL3Ni4hgwCgYIKoZIzj0EAwIw
FzEVMBMGA1UEAwwMZnV6ei5pbnZhbGlkMCAXDTI2MTEyMjAxNDc0NFoYDzIxMjYx
MDI5MDE0NzQ0WjAXMRUwEwYDVQQDDAxmdXp6LmludmFsaWQwWTATBgcqhkjOPQIB
BggqhkjOPQMBBwNCAAQrHciRymuVqV6pHkMHZ+Iy6hUk7fBytvyIETIl6GaLXk5B
4wmcRkz+PRpwYcuX9lmwCRak2HAsSmQIkNGjmTCuo1MwUTAdBgNVHQ4EFgQUs1s1
vfRJQZwdcOxwyjvuIGFWGbwwHwYDVR0jBBgwFoAUs1s1vfRJQZwdcOxwyjvuIGFW
GbwwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNHADBEAiA5tUTtcUeKzFFM
bYfUwrsOw3hP6u4mw20KIsh5PczYbwIgbF0BSUtC0CD4uSWTo5P1kxcf52u5wfuA
dnoF5KN//WM=
-----END CERTIFICATE-----
"""
    static let key = """
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgAkWtDEfT8edIpri2
ZEeJV2GbIjVQ6bgP1OhgjGRdsEShRANCAAQrHciRymuVqV6pHkMHZ+Iy6hUk7fBy
tvyIETIl6GaLXk5B4wmcRkz+PRpwYcuX9lmwCRak2HAsSmQIkNGjmTCu
-----END PRIVATE KEY-----
"""
}

/// The contexts, made once: a client with no roots (verification fails, which the engine only
/// records) and, when the embedded identity loads, a server.
let clientContext = try! TLSContext(role: .client, configuration: {
    var configuration = TLSContext.Configuration()
    configuration.applicationProtocols = ["h2", "http/1.1"]
    return configuration
}())
let serverContext: TLSContext? = {
    guard let identity = try? TLSIdentity.pem(certificateChain: Array(FuzzIdentity.certificate.utf8), privateKey: Array(FuzzIdentity.key.utf8)) else { return nil }
    return try? TLSContext(role: .server(identity: identity), configuration: TLSContext.Configuration())
}()

func pump(_ from: TLSEngine, _ to: TLSEngine) {
    var buffer = ByteBuffer()
    from.drainOutput(into: &buffer)
    buffer.withReadableBytes { to.feed($0) }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTLSRecords(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 1, let client = try? TLSEngine(context: clientContext, role: .client(serverName: "fuzz.invalid"), verificationTime: 1_800_000_000) else { return 0 }
    var scratch = [UInt8](repeating: 0, count: 16384)
    if data[0] >= 128, let serverContext, let server = try? TLSEngine(context: serverContext, role: .server, verificationTime: 1_800_000_000) {
        for _ in 0..<8 {
            _ = client.handshake()
            pump(client, server)
            _ = server.handshake()
            pump(server, client)
        }
    } else {
        _ = client.handshake()
    }
    var out = ByteBuffer()
    client.drainOutput(into: &out)
    client.feed(UnsafeRawBufferPointer(start: data + 1, count: size - 1))
    if case .established = client.handshake() {
        for _ in 0..<4 {
            let outcome = scratch.withUnsafeMutableBytes { client.read(into: $0) }
            if case .bytes = outcome { continue }
            break
        }
        _ = try? [UInt8](repeating: 0x41, count: 10).withUnsafeBytes { try client.write($0) }
    }
    client.feedEndOfInput()
    _ = scratch.withUnsafeMutableBytes { client.read(into: $0) }
    client.drainOutput(into: &out)
    return 0
}
