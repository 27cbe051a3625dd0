import CCourierOpenSSL

/// An X.509 certificate (an OpenSSL `X509`), compared by its DER bytes.
public final class TLSCertificate: @unchecked Sendable, Hashable, CustomStringConvertible {
    /// The `X509*`, owned (one reference) by this object.
    let x509: OpaquePointer

    /// Adopts one reference to `x509`.
    init(taking x509: OpaquePointer) {
        self.x509 = x509
    }

    /// Takes an extra reference to `x509`, which the caller keeps.
    init(retaining x509: OpaquePointer) {
        X509_up_ref(x509)
        self.x509 = x509
    }

    deinit {
        X509_free(x509)
    }

    /// Parses a DER-encoded certificate.
    public convenience init(derBytes: [UInt8]) throws(TLSError) {
        let parsed = derBytes.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var pointer: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_X509(nil, &pointer, buffer.count)
        }
        guard let parsed else {
            OpenSSLErrors.clear()
            throw .invalidConfiguration("not a DER-encoded X.509 certificate")
        }
        self.init(taking: parsed)
    }

    /// Every certificate in PEM text, in order.
    public static func pemCertificates(_ bytes: [UInt8]) throws(TLSError) -> [TLSCertificate] {
        var certificates: [TLSCertificate] = []
        try withMemoryBIO(bytes) { bio throws(TLSError) in
            while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) {
                certificates.append(TLSCertificate(taking: certificate))
            }
        }
        OpenSSLErrors.clear()
        if certificates.isEmpty { throw .invalidConfiguration("no PEM certificate found") }
        return certificates
    }

    /// The DER encoding.
    public var derBytes: [UInt8] { Self.der(x509) ?? [] }

    /// The DER encoding of an OpenSSL certificate; nil when it cannot be encoded.
    static func der(_ x509: OpaquePointer) -> [UInt8]? {
        let length = Int(i2d_X509(x509, nil))
        guard length > 0 else { return nil }
        var written: Int32 = 0
        let bytes = [UInt8](unsafeUninitializedCapacity: length) { buffer, count in
            var cursor = buffer.baseAddress
            written = i2d_X509(x509, &cursor)
            count = written == length ? length : 0
        }
        return written == length ? bytes : nil
    }

    /// The subject's common name, when it has one.
    public var commonName: String? {
        guard let name = X509_get_subject_name(x509) else { return nil }
        var buffer = [CChar](repeating: 0, count: 256)
        let length = X509_NAME_get_text_by_NID(name, NID_commonName, &buffer, Int32(buffer.count))
        guard length > 0 else { return nil }
        return String(decoding: buffer.prefix(Int(length)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A short human-readable summary: the common name, else the first DNS name.
    public var subjectSummary: String? {
        commonName ?? dnsNames.first
    }

    /// The DNS names of the subjectAltName extension.
    public var dnsNames: [String] {
        guard let raw = X509_get_ext_d2i(x509, NID_subject_alt_name, nil, nil) else { return [] }
        let names = OpaquePointer(raw)
        defer { courier_GENERAL_NAMES_free(names) }
        var result: [String] = []
        for index in 0..<courier_sk_GENERAL_NAME_num(names) {
            guard let name = courier_sk_GENERAL_NAME_value(names, index), name.pointee.type == GEN_DNS,
                  let string = name.pointee.d.dNSName, let data = ASN1_STRING_get0_data(string) else { continue }
            let length = Int(ASN1_STRING_length(string))
            result.append(String(decoding: UnsafeBufferPointer(start: data, count: length), as: UTF8.self))
        }
        return result
    }

    /// The DER encoding of the issuer's distinguished name.
    public var issuerNameDER: [UInt8] {
        guard let name = X509_get_issuer_name(x509) else { return [] }
        return Self.encode(name)
    }

    /// The DER encoding of a distinguished name.
    static func encode(_ name: OpaquePointer) -> [UInt8] {
        let length = i2d_X509_NAME(name, nil)
        guard length > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: Int(length))
        bytes.withUnsafeMutableBufferPointer { buffer in
            var pointer: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            _ = i2d_X509_NAME(name, &pointer)
        }
        return bytes
    }

    public static func == (lhs: TLSCertificate, rhs: TLSCertificate) -> Bool {
        lhs === rhs || X509_cmp(lhs.x509, rhs.x509) == 0
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(derBytes)
    }

    public var description: String { "TLSCertificate(\(subjectSummary ?? "?"))" }
}

/// A private key (an OpenSSL `EVP_PKEY`).
public final class TLSPrivateKey: @unchecked Sendable {
    let key: OpaquePointer

    init(taking key: OpaquePointer) {
        self.key = key
    }

    deinit {
        EVP_PKEY_free(key)
    }

    /// Parses a PEM private key (PKCS#8 or traditional), decrypting it with `passphrase` if needed.
    public convenience init(pemBytes: [UInt8], passphrase: String? = nil) throws(TLSError) {
        let key = try withMemoryBIO(pemBytes) { bio throws(TLSError) -> OpaquePointer in
            let parsed: OpaquePointer?
            if let passphrase {
                parsed = passphrase.withCString { PEM_read_bio_PrivateKey(bio, nil, nil, UnsafeMutableRawPointer(mutating: $0)) }
            } else {
                parsed = PEM_read_bio_PrivateKey(bio, nil, nil, nil)
            }
            guard let parsed else {
                throw .invalidConfiguration("cannot read the private key: \(OpenSSLErrors.drain().text)")
            }
            return parsed
        }
        self.init(taking: key)
    }
}

/// A certificate with its private key and the intermediates to send with it.
public struct TLSIdentity: Sendable {
    public var certificate: TLSCertificate
    public var intermediates: [TLSCertificate]
    public var privateKey: TLSPrivateKey

    /// Pairs a certificate with its key; throws when the key does not belong to it.
    public init(certificate: TLSCertificate, intermediates: [TLSCertificate] = [], privateKey: TLSPrivateKey) throws(TLSError) {
        guard X509_check_private_key(certificate.x509, privateKey.key) == 1 else {
            OpenSSLErrors.clear()
            throw .invalidConfiguration("the private key does not match the certificate")
        }
        self.certificate = certificate
        self.intermediates = intermediates
        self.privateKey = privateKey
    }

    /// An identity from PEM files' contents: the certificate chain (leaf first) and the key.
    public static func pem(certificateChain: [UInt8], privateKey: [UInt8], passphrase: String? = nil) throws(TLSError) -> TLSIdentity {
        let certificates = try TLSCertificate.pemCertificates(certificateChain)
        let key = try TLSPrivateKey(pemBytes: privateKey, passphrase: passphrase)
        return try TLSIdentity(certificate: certificates[0], intermediates: Array(certificates.dropFirst()), privateKey: key)
    }

    /// An identity from a PKCS#12 archive.
    public static func pkcs12(_ archive: [UInt8], passphrase: String) throws(TLSError) -> TLSIdentity {
        let parsed = archive.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var pointer: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PKCS12(nil, &pointer, buffer.count)
        }
        guard let pkcs12 = parsed else {
            OpenSSLErrors.clear()
            throw .invalidConfiguration("not a PKCS#12 archive")
        }
        defer { PKCS12_free(pkcs12) }
        var key: OpaquePointer?
        var certificate: OpaquePointer?
        var chain: OpaquePointer?
        let ok = passphrase.withCString { PKCS12_parse(pkcs12, $0, &key, &certificate, &chain) }
        guard ok == 1, let key, let certificate else {
            if let key { EVP_PKEY_free(key) }
            if let certificate { X509_free(certificate) }
            if let chain { courier_sk_X509_pop_free(chain) }
            throw .invalidConfiguration("cannot open the PKCS#12 archive (wrong passphrase?): \(OpenSSLErrors.drain().text)")
        }
        var intermediates: [TLSCertificate] = []
        if let chain {
            for index in 0..<courier_sk_X509_num(chain) {
                if let element = courier_sk_X509_value(chain, index) { intermediates.append(TLSCertificate(retaining: element)) }
            }
            courier_sk_X509_pop_free(chain)
        }
        return try TLSIdentity(certificate: TLSCertificate(taking: certificate), intermediates: intermediates, privateKey: TLSPrivateKey(taking: key))
    }
}

/// Lends a read-only memory BIO over `bytes`.
/// The BIO reads `bytes` in place, so it lives only inside the borrow.
func withMemoryBIO<R>(_ bytes: [UInt8], _ body: (OpaquePointer) throws(TLSError) -> R) throws(TLSError) -> R {
    guard !bytes.isEmpty else { throw .invalidConfiguration("the certificate or key data is empty") }
    guard bytes.count <= Int(Int32.max) else { throw .invalidConfiguration("the certificate or key data is too large") }
    let result = bytes.withUnsafeBytes { raw -> Result<R, TLSError> in
        guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return .failure(.invalidConfiguration("out of memory")) }
        defer { BIO_free(bio) }
        do throws(TLSError) {
            return .success(try body(bio))
        } catch {
            return .failure(error)
        }
    }
    return try result.get()
}
