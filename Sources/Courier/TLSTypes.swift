import CourierTLS

/// TLS protocol versions, with Apple's names and wire values.
public enum tls_protocol_version_t: UInt16, Sendable {
    case TLSv10 = 0x0301
    case TLSv11 = 0x0302
    case TLSv12 = 0x0303
    case TLSv13 = 0x0304
    case DTLSv10 = 0xFEFF
    case DTLSv12 = 0xFEFD

    /// The TLS version Courier speaks for this value; nil for DTLS.
    var tlsVersion: TLSVersion? { TLSVersion(rawValue: rawValue) }
}

/// TLS cipher suites, with Apple's names and IANA numbers.
public enum tls_ciphersuite_t: UInt16, Sendable {
    case AES_128_GCM_SHA256 = 0x1301
    case AES_256_GCM_SHA384 = 0x1302
    case CHACHA20_POLY1305_SHA256 = 0x1303
    case ECDHE_ECDSA_WITH_3DES_EDE_CBC_SHA = 0xC008
    case ECDHE_ECDSA_WITH_AES_128_CBC_SHA = 0xC009
    case ECDHE_ECDSA_WITH_AES_128_CBC_SHA256 = 0xC023
    case ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 = 0xC02B
    case ECDHE_ECDSA_WITH_AES_256_CBC_SHA = 0xC00A
    case ECDHE_ECDSA_WITH_AES_256_CBC_SHA384 = 0xC024
    case ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 = 0xC02C
    case ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 = 0xCCA9
    case ECDHE_RSA_WITH_3DES_EDE_CBC_SHA = 0xC012
    case ECDHE_RSA_WITH_AES_128_CBC_SHA = 0xC013
    case ECDHE_RSA_WITH_AES_128_CBC_SHA256 = 0xC027
    case ECDHE_RSA_WITH_AES_128_GCM_SHA256 = 0xC02F
    case ECDHE_RSA_WITH_AES_256_CBC_SHA = 0xC014
    case ECDHE_RSA_WITH_AES_256_CBC_SHA384 = 0xC028
    case ECDHE_RSA_WITH_AES_256_GCM_SHA384 = 0xC030
    case ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 = 0xCCA8
    case RSA_WITH_3DES_EDE_CBC_SHA = 0x000A
    case RSA_WITH_AES_128_CBC_SHA = 0x002F
    case RSA_WITH_AES_128_CBC_SHA256 = 0x003C
    case RSA_WITH_AES_128_GCM_SHA256 = 0x009C
    case RSA_WITH_AES_256_CBC_SHA = 0x0035
    case RSA_WITH_AES_256_CBC_SHA256 = 0x003D
    case RSA_WITH_AES_256_GCM_SHA384 = 0x009D
}
