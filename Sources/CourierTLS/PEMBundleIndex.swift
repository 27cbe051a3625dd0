import CCourierOpenSSL
import CourierSync

/// The certificates of a PEM bundle, kept as DER and found by subject when OpenSSL asks: an
/// `X509_LOOKUP` on a ``TrustStore``.
///
/// Parsing a certificate is the expensive part of OpenSSL 3.0's trust store (each one builds a
/// decoder for its public key): the system bundle's 140 took about 20 ms and 1.5 MB before the
/// first TLS connection of every process. The index reads only each certificate's subject name
/// (a walk over the DER to the field, then OpenSSL's canonical name hash), about 2 ms for the
/// same bundle. When verification looks for an issuer, the certificates whose subject has that
/// hash are parsed and added to the store, which answers every later search for them itself.
final class PEMBundleIndex: Sendable {
    /// The certificates' DER encodings, back to back.
    private let encodings: [UInt8]
    /// Ranges of `encodings` by the subject name's hash (`X509_NAME_hash_ex`).
    private let bySubject: [UInt: [Range<Int>]]
    /// Start offsets of the certificates already parsed into the store. Guarded by its lock,
    /// which is held while they are parsed so that two handshakes do not parse one twice.
    private let parsed = Mutex(Set<Int>())

    /// How many certificates the bundle holds.
    var count: Int { bySubject.values.reduce(0) { $0 + $1.count } }

    /// Indexes the `CERTIFICATE` blocks of PEM text; nil when it has none whose subject can be
    /// read. Other blocks (keys, parameters) and blocks that are not certificates are skipped.
    init?(pem bytes: [UInt8]) {
        var encodings: [UInt8] = []
        var bySubject: [UInt: [Range<Int>]] = [:]
        let read: Void? = try? withMemoryBIO(bytes) { bio throws(TLSError) in
            var name: UnsafeMutablePointer<CChar>?
            var header: UnsafeMutablePointer<CChar>?
            var data: UnsafeMutablePointer<UInt8>?
            var length = 0
            while PEM_read_bio(bio, &name, &header, &data, &length) == 1 {
                defer {
                    courier_OPENSSL_free(name)
                    courier_OPENSSL_free(header)
                    courier_OPENSSL_free(data)
                    name = nil
                    header = nil
                    data = nil
                }
                guard let name, let data, length > 0 else { continue }
                let label = String(cString: name)
                guard label == "CERTIFICATE" || label == "X509 CERTIFICATE" else { continue }
                let der = UnsafeBufferPointer(start: data, count: length)
                guard let hash = Self.subjectHash(der) else { continue }
                let start = encodings.count
                encodings.append(contentsOf: der)
                bySubject[hash, default: []].append(start..<encodings.count)
            }
        }
        OpenSSLErrors.clear()
        guard read != nil, !bySubject.isEmpty else { return nil }
        self.encodings = encodings
        self.bySubject = bySubject
    }

    /// Parses every certificate (for callers that want them all).
    func allCertificates() -> [TLSCertificate] {
        bySubject.values.joined().sorted { $0.lowerBound < $1.lowerBound }.compactMap(parse)
    }

    /// Adds the certificates whose subject hashes like `name`'s to `store`, once each; true
    /// when there were any.
    func load(_ name: OpaquePointer, into store: OpaquePointer) -> Bool {
        var valid: Int32 = 0
        let hash = X509_NAME_hash_ex(name, nil, nil, &valid)
        guard valid == 1, let candidates = bySubject[hash] else {
            OpenSSLErrors.clear()
            return false
        }
        parsed.withLock { parsed in
            for range in candidates where !parsed.contains(range.lowerBound) {
                parsed.insert(range.lowerBound)
                guard let certificate = parse(range) else { continue }
                X509_STORE_add_cert(store, certificate.x509)
            }
        }
        OpenSSLErrors.clear()
        return true
    }

    private func parse(_ range: Range<Int>) -> TLSCertificate? {
        try? TLSCertificate(derBytes: Array(encodings[range]))
    }

    /// `X509_NAME_hash_ex` of a certificate's subject, read from its DER without parsing the
    /// rest; nil when the encoding is not a certificate's.
    static func subjectHash(_ der: UnsafeBufferPointer<UInt8>) -> UInt? {
        guard let subject = subjectRange(der), let base = der.baseAddress else { return nil }
        var pointer: UnsafePointer<UInt8>? = base + subject.lowerBound
        guard let name = d2i_X509_NAME(nil, &pointer, subject.count) else { return nil }
        defer { X509_NAME_free(name) }
        var valid: Int32 = 0
        let hash = X509_NAME_hash_ex(name, nil, nil, &valid)
        return valid == 1 ? hash : nil
    }

    /// Where the subject name (tag and length included) sits in a certificate's DER:
    /// Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL, serialNumber,
    /// signature, issuer, validity, subject, … }, … } (RFC 5280, 4.1).
    static func subjectRange(_ der: UnsafeBufferPointer<UInt8>) -> Range<Int>? {
        guard let certificate = element(der, at: 0, end: der.count), der[0] == 0x30,
              let tbs = element(der, at: certificate.content.lowerBound, end: certificate.content.upperBound),
              der[certificate.content.lowerBound] == 0x30 else { return nil }
        var position = tbs.content.lowerBound
        if position < tbs.content.upperBound, der[position] == 0xA0 {
            guard let version = element(der, at: position, end: tbs.content.upperBound) else { return nil }
            position = version.whole.upperBound
        }
        // serialNumber, signature, issuer, validity: skipped; then the subject.
        for _ in 0..<4 {
            guard let field = element(der, at: position, end: tbs.content.upperBound) else { return nil }
            position = field.whole.upperBound
        }
        guard let subject = element(der, at: position, end: tbs.content.upperBound), der[position] == 0x30 else { return nil }
        return subject.whole
    }

    /// One DER element starting at `start` and ending by `end`: its whole extent and its
    /// content's. Single-byte tags and definite lengths of up to four bytes, as DER has.
    private static func element(_ der: UnsafeBufferPointer<UInt8>, at start: Int, end: Int) -> (whole: Range<Int>, content: Range<Int>)? {
        guard start >= 0, end <= der.count, start + 2 <= end, der[start] & 0x1F != 0x1F else { return nil }
        var length = Int(der[start + 1])
        var contentStart = start + 2
        if length & 0x80 != 0 {
            let bytes = length & 0x7F
            guard (1...4).contains(bytes), contentStart + bytes <= end else { return nil }
            length = 0
            for offset in 0..<bytes { length = length << 8 | Int(der[contentStart + offset]) }
            contentStart += bytes
        }
        guard length <= end - contentStart else { return nil }
        return (start..<contentStart + length, contentStart..<contentStart + length)
    }
}

/// The `X509_LOOKUP_METHOD` that finds a store's certificates in its ``PEMBundleIndex``: the
/// lookup holds a retained reference to the index, given up when OpenSSL frees the lookup
/// (with the store, whoever held the store last).
enum PEMBundleLookup {
    nonisolated(unsafe) static let method: OpaquePointer? = {
        guard let method = X509_LOOKUP_meth_new("Courier PEM bundle index") else { return nil }
        X509_LOOKUP_meth_set_get_by_subject(method) { lookup, type, name, result in
            guard type == X509_LU_X509, let lookup, let name, let result,
                  let data = X509_LOOKUP_get_method_data(lookup), let store = X509_LOOKUP_get_store(lookup) else { return 0 }
            let index = Unmanaged<PEMBundleIndex>.fromOpaque(data).takeUnretainedValue()
            guard index.load(name, into: store) else { return 0 }
            // What the store now holds under that name, as OpenSSL's own store lookup returns
            // it: set1 takes a reference that the caller takes again, so one is given back.
            guard X509_STORE_lock(store) == 1 else { return 0 }
            defer { X509_STORE_unlock(store) }
            guard let object = X509_OBJECT_retrieve_by_subject(X509_STORE_get0_objects(store), X509_LU_X509, name),
                  let certificate = X509_OBJECT_get0_X509(object),
                  X509_OBJECT_set1_X509(result, certificate) == 1 else { return 0 }
            X509_free(certificate)
            return 1
        }
        X509_LOOKUP_meth_set_free(method) { lookup in
            guard let lookup, let data = X509_LOOKUP_get_method_data(lookup) else { return }
            Unmanaged<PEMBundleIndex>.fromOpaque(data).release()
            _ = X509_LOOKUP_set_method_data(lookup, nil)
        }
        return method
    }()

    /// Attaches `index` to `store`; false when OpenSSL could not allocate the lookup.
    static func attach(_ index: PEMBundleIndex, to store: OpaquePointer) -> Bool {
        guard let method, let lookup = X509_STORE_add_lookup(store, method) else { return false }
        _ = X509_LOOKUP_set_method_data(lookup, Unmanaged.passRetained(index).toOpaque())
        return true
    }
}
