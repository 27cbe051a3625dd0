import CourierCore

/// Why a certificate chain was not trusted.
public enum CertificateFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// A certificate has expired.
    case expired
    /// A certificate is not valid yet.
    case notYetValid
    /// The chain does not lead to a trusted root (self-signed, private CA, missing issuer).
    case unknownRoot
    /// The certificate does not name the host or IP address that was dialed.
    case hostnameMismatch
    /// No certificate was presented.
    case noCertificate
    /// Any other verification failure: OpenSSL's X509_V_ERR code and its words.
    case untrusted(code: Int32, reason: String)

    public var description: String {
        switch self {
        case .expired: return "the certificate has expired"
        case .notYetValid: return "the certificate is not yet valid"
        case .unknownRoot: return "the certificate chain does not lead to a trusted root"
        case .hostnameMismatch: return "the certificate does not match the host name"
        case .noCertificate: return "the server presented no certificate"
        case .untrusted(_, let reason): return "the certificate is not trusted: \(reason)"
        }
    }
}

/// A TLS failure. Peer failures are remote protocol errors; configuration mistakes are local.
public enum TLSError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The handshake failed (alert from the peer, no common protocol version or cipher, …).
    case handshakeFailed(String)
    /// The server asked for a client certificate and none was given.
    case clientCertificateRequired
    /// The server refused the client certificate that was sent.
    case clientCertificateRejected(String)
    /// The peer sent bytes that are not TLS, or broke the protocol after the handshake.
    case protocolViolation(String)
    /// The connection ended without close_notify where the end mattered.
    case unexpectedEOF
    /// The peer tried to renegotiate; Courier refuses renegotiation.
    case renegotiationRefused
    /// Certificates, keys or settings given to Courier could not be used.
    case invalidConfiguration(String)

    public var description: String {
        switch self {
        case .handshakeFailed(let why): return "TLS handshake failed: \(why)"
        case .clientCertificateRequired: return "the server requires a client certificate"
        case .clientCertificateRejected(let why): return "the server rejected the client certificate: \(why)"
        case .protocolViolation(let why): return "TLS protocol violation: \(why)"
        case .unexpectedEOF: return "the TLS connection ended without close_notify"
        case .renegotiationRefused: return "the server tried to renegotiate TLS, which Courier refuses"
        case .invalidConfiguration(let why): return "invalid TLS configuration: \(why)"
        }
    }
}

extension TLSError: RemoteProtocolError {}

/// A TLS protocol version.
public enum TLSVersion: UInt16, Sendable, Comparable, CustomStringConvertible {
    case tls1_0 = 0x0301
    case tls1_1 = 0x0302
    case tls1_2 = 0x0303
    case tls1_3 = 0x0304

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String {
        switch self {
        case .tls1_0: return "TLSv1.0"
        case .tls1_1: return "TLSv1.1"
        case .tls1_2: return "TLSv1.2"
        case .tls1_3: return "TLSv1.3"
        }
    }
}
