import CourierSync
import CourierTLS
import CourierTransport
import Foundation

// The part of Apple's Security framework that server-trust and client-certificate code uses,
// with Apple's names, so that code compiles unchanged on Linux. Core Foundation types are
// typealiases of the Foundation types Linux bridges to (`data as CFData`, `array as CFArray`
// and `dictionary as CFDictionary` all compile). A file that also imports CoreFoundation
// directly must qualify these names with `Courier.`.

public typealias CFData = Data
public typealias CFArray = NSArray
public typealias CFDictionary = NSDictionary
public typealias CFString = String
public typealias CFError = NSError
public typealias CFIndex = Int
public typealias CFTypeRef = AnyObject
public typealias OSStatus = Int32

/// Stands for Core Foundation's allocator; only nil (the default) is meaningful.
public final class CFAllocator: Sendable {}

/// The default allocator: nil.
public let kCFAllocatorDefault: CFAllocator? = nil

public let errSecSuccess: OSStatus = 0
public let errSecParam: OSStatus = -50
public let errSecAuthFailed: OSStatus = -25293
public let errSecDecode: OSStatus = -26275
public let errSecUnimplemented: OSStatus = -4

/// Options and result keys of `SecPKCS12Import`.
public let kSecImportExportPassphrase: CFString = "passphrase"
public let kSecImportItemIdentity: CFString = "identity"
public let kSecImportItemCertChain: CFString = "chain"
public let kSecImportItemTrust: CFString = "trust"
public let kSecImportItemLabel: CFString = "label"

/// An X.509 certificate: Apple's `SecCertificate`.
public final class SecCertificate: Hashable, @unchecked Sendable, CustomStringConvertible {
    let certificate: TLSCertificate

    init(_ certificate: TLSCertificate) {
        self.certificate = certificate
    }

    public static func == (lhs: SecCertificate, rhs: SecCertificate) -> Bool { lhs.certificate == rhs.certificate }
    public func hash(into hasher: inout Hasher) { hasher.combine(certificate) }
    public var description: String { "<SecCertificate \(certificate.subjectSummary ?? "?")>" }
}

/// A certificate with its private key: Apple's `SecIdentity`.
public final class SecIdentity: @unchecked Sendable {
    let identity: TLSIdentity

    init(_ identity: TLSIdentity) {
        self.identity = identity
    }

    /// Courier extension: an identity from PEM data, the certificate chain (leaf first) and the
    /// private key (decrypted with `passphrase` when it is encrypted). Throws a `URLError`
    /// (`.cannotDecodeRawData`) that says what could not be read or why the key does not fit.
    public static func identity(pemCertificateChain: Data, pemPrivateKey: Data, passphrase: String? = nil) throws -> SecIdentity {
        do {
            return SecIdentity(try TLSIdentity.pem(certificateChain: Array(pemCertificateChain), privateKey: Array(pemPrivateKey), passphrase: passphrase))
        } catch {
            throw URLError.courier(.cannotDecodeRawData, "\(error)", url: nil)
        }
    }
}

/// An evaluation policy: Apple's `SecPolicy`. Courier knows the SSL server policy only.
public final class SecPolicy: @unchecked Sendable {
    let hostname: String?

    init(hostname: String?) {
        self.hostname = hostname
    }
}

/// A certificate chain to evaluate for a host: Apple's `SecTrust`.
///
/// Evaluation is OpenSSL's chain verification with host checking, against the system's roots
/// unless anchors are set (then only the anchors, unless `SecTrustSetAnchorCertificatesOnly`
/// says false).
public final class SecTrust: @unchecked Sendable, CustomStringConvertible {
    struct Settings {
        var anchors: [TLSCertificate]?
        var anchorsOnly = true
    }

    let chain: [TLSCertificate]
    let host: String?
    /// Anchor settings; guarded by the mutex.
    let settings = Mutex(Settings())

    init(chain: [TLSCertificate], host: String?) {
        self.chain = chain
        self.host = host
    }

    /// Evaluates now; nil on success, the failure otherwise.
    func evaluate() -> CertificateFailure? {
        let current = settings.withLock { $0 }
        let result = TrustEvaluation.evaluate(
            chain: chain, host: host, roots: SecTrust.systemRoots, anchors: current.anchors,
            anchorsOnly: current.anchorsOnly, time: Int64(Date().timeIntervalSince1970)
        )
        if case .failure(let failure) = result { return failure }
        return nil
    }

    static var systemRoots: TrustStore? { SystemTrustStore.shared }

    public var description: String { "<SecTrust \(host ?? "?"), \(chain.count) certificates>" }
}

/// Evaluates `trust`; on failure, `error` receives an NSError describing why.
public func SecTrustEvaluateWithError(_ trust: SecTrust, _ error: UnsafeMutablePointer<CFError?>?) -> Bool {
    guard let failure = trust.evaluate() else {
        error?.pointee = nil
        return true
    }
    error?.pointee = NSError(domain: "NSOSStatusErrorDomain", code: Int(errSecAuthFailed), userInfo: [NSLocalizedDescriptionKey: failure.description])
    return false
}

/// The chain as the server sent it, leaf first, as an array of `SecCertificate`.
public func SecTrustCopyCertificateChain(_ trust: SecTrust) -> CFArray? {
    trust.chain.map(SecCertificate.init) as NSArray
}

public func SecTrustGetCertificateCount(_ trust: SecTrust) -> CFIndex {
    trust.chain.count
}

@available(*, deprecated, renamed: "SecTrustCopyCertificateChain")
public func SecTrustGetCertificateAtIndex(_ trust: SecTrust, _ ix: CFIndex) -> SecCertificate? {
    trust.chain.indices.contains(ix) ? SecCertificate(trust.chain[ix]) : nil
}

/// Replaces the roots evaluation trusts with `anchorCertificates` (an array of `SecCertificate`).
public func SecTrustSetAnchorCertificates(_ trust: SecTrust, _ anchorCertificates: CFArray) -> OSStatus {
    guard let certificates = anchorCertificates as? [SecCertificate] else { return errSecParam }
    trust.settings.withLock { $0.anchors = certificates.map(\.certificate) }
    return errSecSuccess
}

/// With false, evaluation trusts the system's roots as well as the anchors.
public func SecTrustSetAnchorCertificatesOnly(_ trust: SecTrust, _ anchorCertificatesOnly: Bool) -> OSStatus {
    trust.settings.withLock { $0.anchorsOnly = anchorCertificatesOnly }
    return errSecSuccess
}

/// A trust for `certificates` (one `SecCertificate` or an array, leaf first) under `policies`
/// (a `SecPolicy` or an array; the SSL policy's host name is what matters).
public func SecTrustCreateWithCertificates(_ certificates: CFTypeRef, _ policies: CFTypeRef?, _ trust: UnsafeMutablePointer<SecTrust?>) -> OSStatus {
    let chain: [SecCertificate]
    if let single = certificates as? SecCertificate {
        chain = [single]
    } else if let many = certificates as? [SecCertificate], !many.isEmpty {
        chain = many
    } else {
        return errSecParam
    }
    let policy = (policies as? SecPolicy) ?? (policies as? [SecPolicy])?.first
    trust.pointee = SecTrust(chain: chain.map(\.certificate), host: policy?.hostname)
    return errSecSuccess
}

/// The SSL policy: `hostname` is checked against the server certificate.
public func SecPolicyCreateSSL(_ server: Bool, _ hostname: CFString?) -> SecPolicy {
    SecPolicy(hostname: hostname)
}

/// The DER encoding of a certificate.
public func SecCertificateCopyData(_ certificate: SecCertificate) -> CFData {
    Data(certificate.certificate.derBytes)
}

/// A certificate from its DER encoding; nil when the data is not one.
public func SecCertificateCreateWithData(_ allocator: CFAllocator?, _ data: CFData) -> SecCertificate? {
    (try? TLSCertificate(derBytes: Array(data))).map(SecCertificate.init)
}

/// A short description of the subject: its common name, else its first DNS name.
public func SecCertificateCopySubjectSummary(_ certificate: SecCertificate) -> CFString? {
    certificate.certificate.subjectSummary
}

/// The certificate of an identity.
public func SecIdentityCopyCertificate(_ identityRef: SecIdentity, _ certificateRef: UnsafeMutablePointer<SecCertificate?>) -> OSStatus {
    certificateRef.pointee = SecCertificate(identityRef.identity.certificate)
    return errSecSuccess
}

/// Opens a PKCS#12 archive: `items` receives one dictionary with the identity
/// (`kSecImportItemIdentity`), the chain (`kSecImportItemCertChain`) and a trust
/// (`kSecImportItemTrust`). The passphrase comes from `options[kSecImportExportPassphrase]`.
public func SecPKCS12Import(_ pkcs12_data: CFData, _ options: CFDictionary, _ items: UnsafeMutablePointer<CFArray?>) -> OSStatus {
    let passphrase = options[kSecImportExportPassphrase] as? String ?? ""
    let identity: TLSIdentity
    do {
        identity = try TLSIdentity.pkcs12(Array(pkcs12_data), passphrase: passphrase)
    } catch TLSError.invalidConfiguration(let why) where why.contains("passphrase") {
        return errSecAuthFailed
    } catch {
        return errSecDecode
    }
    let chain = ([identity.certificate] + identity.intermediates).map(SecCertificate.init)
    let item: [String: Any] = [
        kSecImportItemIdentity: SecIdentity(identity),
        kSecImportItemCertChain: chain,
        kSecImportItemTrust: SecTrust(chain: [identity.certificate] + identity.intermediates, host: nil),
        kSecImportItemLabel: identity.certificate.subjectSummary ?? "",
    ]
    items.pointee = [item] as NSArray
    return errSecSuccess
}
