import CCourierOpenSSL

/// SHA-256 through OpenSSL's EVP interface, for checking transferred bytes against what a
/// server reports.
public enum SHA256 {
    /// The digest of `bytes` as lower-case hexadecimal.
    public static func hex<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let input = Array(bytes)
        _ = input.withUnsafeBytes { raw in
            EVP_Digest(raw.baseAddress, raw.count, &digest, &length, EVP_sha256(), nil)
        }
        return digest.map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }
}

/// True when two byte sequences are equal. For `#expect` on large bodies: comparing them with
/// `==` inside the macro makes a failure compute a diff of the two, which takes quadratic time
/// (minutes for a few megabytes) before anything is reported.
public func sameBytes<A: Sequence<UInt8>, B: Sequence<UInt8>>(_ a: A, _ b: B) -> Bool {
    a.elementsEqual(b)
}
