import CCourierOpenSSL
import Foundation

/// The hash algorithms of Digest authentication (RFC 7616 §3.3), plus SHA-512, which some
/// servers (httpbin among them) offer under that name although the RFC registers only
/// SHA-512-256. A `-sess` variant hashes the client nonce into the first secret.
public enum DigestAlgorithm: String, Sendable, Equatable, CaseIterable {
    case md5 = "MD5"
    case md5Session = "MD5-sess"
    case sha256 = "SHA-256"
    case sha256Session = "SHA-256-sess"
    case sha512_256 = "SHA-512-256"
    case sha512_256Session = "SHA-512-256-sess"
    case sha512 = "SHA-512"
    case sha512Session = "SHA-512-sess"

    /// The algorithm named in a challenge (case-insensitive); nil for one Courier lacks.
    public init?(token: String) {
        guard let match = Self.allCases.first(where: { $0.rawValue.caseInsensitiveCompare(token) == .orderedSame }) else { return nil }
        self = match
    }

    public var isSession: Bool {
        switch self {
        case .md5Session, .sha256Session, .sha512_256Session, .sha512Session: return true
        default: return false
        }
    }

    /// Higher is stronger: which of several offered challenges is answered.
    public var strength: Int {
        switch self {
        case .sha512_256, .sha512_256Session: return 4
        case .sha512, .sha512Session: return 3
        case .sha256, .sha256Session: return 2
        case .md5, .md5Session: return 1
        }
    }

    /// The lowercase hex digest of `bytes`, through OpenSSL.
    public func hex(_ bytes: some Collection<UInt8>) -> String {
        let md: OpaquePointer?
        switch self {
        case .md5, .md5Session: md = EVP_md5()
        case .sha256, .sha256Session: md = EVP_sha256()
        case .sha512_256, .sha512_256Session: md = EVP_sha512_256()
        case .sha512, .sha512Session: md = EVP_sha512()
        }
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let input = Array(bytes)
        let ok = input.withUnsafeBytes { raw in
            EVP_Digest(raw.baseAddress, raw.count, &digest, &length, md, nil)
        }
        // Only algorithms that passed `isAvailable` are offered, so this does not fail; if it
        // did, an empty response is refused by the server rather than the process stopping.
        guard ok == 1 else { return "" }
        return Self.hexString(digest[0..<Int(length)])
    }

    /// True when this OpenSSL computes the hash (a FIPS policy can withhold MD5).
    public var isAvailable: Bool {
        Self.available.contains(self)
    }

    private static let available: Set<DigestAlgorithm> = Set(allCases.filter { algorithm in
        !algorithm.hex([UInt8]()).isEmpty
    })

    public func hex(_ text: String) -> String { hex(Array(text.utf8)) }

    static func hexString(_ bytes: some Collection<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Digest's quality of protection (RFC 7616 §3.3): `auth` covers the method and URI,
/// `auth-int` the body too.
public enum DigestProtection: String, Sendable, Equatable {
    case auth
    case authInt = "auth-int"
}

/// A Digest challenge Courier can answer: the parameters of RFC 7616 §3.3, checked.
public struct DigestChallenge: Sendable, Equatable {
    public var realm: String
    public var nonce: String
    public var opaque: String?
    public var algorithm: DigestAlgorithm
    /// The protections offered; empty for an RFC 2069 server that names none.
    public var protections: [DigestProtection]
    /// The previous nonce was merely stale: the credential was right, ask nobody again.
    public var stale: Bool
    /// The server wants the user name hashed (`userhash=true`).
    public var userhash: Bool
    /// The URIs the protection space covers (`domain`), as written; empty: the whole server.
    public var domain: [String]

    /// The Digest challenge in `challenge`, or nil when it is not Digest or cannot be answered
    /// (no realm or nonce, an unknown algorithm, only unknown protections, a session
    /// algorithm without a protection).
    public init?(_ challenge: AuthenticationChallenge) {
        guard challenge.normalizedScheme == "digest", challenge.token68 == nil,
              let realm = challenge[parameter: "realm"], let nonce = challenge[parameter: "nonce"], !nonce.isEmpty else { return nil }
        let algorithm: DigestAlgorithm
        if let token = challenge[parameter: "algorithm"] {
            guard let known = DigestAlgorithm(token: token) else { return nil }
            algorithm = known
        } else {
            algorithm = .md5
        }
        var protections: [DigestProtection] = []
        if let qop = challenge[parameter: "qop"] {
            for option in qop.split(separator: ",") {
                let name = option.trimmingCharacters(in: .whitespaces).lowercased()
                if let protection = DigestProtection(rawValue: name), !protections.contains(protection) { protections.append(protection) }
            }
            guard !protections.isEmpty else { return nil }
        } else if algorithm.isSession {
            return nil
        }
        self.realm = realm
        self.nonce = nonce
        self.opaque = challenge[parameter: "opaque"]
        self.algorithm = algorithm
        self.protections = protections
        self.stale = challenge[parameter: "stale"]?.lowercased() == "true"
        self.userhash = challenge[parameter: "userhash"]?.lowercased() == "true"
        self.domain = challenge[parameter: "domain"].map { $0.split(separator: " ").map(String.init) } ?? []
    }

    /// The protection to use: `auth` when offered; `auth-int` when it is the only one and the
    /// body is known; nil for an RFC 2069 server. Throws when only `auth-int` is offered and
    /// the body is a stream.
    public func protection(bodyIsKnown: Bool) throws(AuthenticationCredentialError) -> DigestProtection? {
        if protections.isEmpty { return nil }
        if protections.contains(.auth) { return .auth }
        guard bodyIsKnown else { throw .bodyNotAvailableForIntegrity }
        return .authInt
    }
}

/// What one Digest answer covers besides the challenge.
public struct DigestRequest: Sendable, Equatable {
    public var method: String
    /// The request target as sent (`/path?query`).
    public var uri: String
    /// The request body, for `auth-int`; nil when it is a stream whose bytes are not at hand.
    public var body: [UInt8]?
    /// The client nonce (random, chosen by the caller: this target has no entropy source).
    public var clientNonce: String
    /// How many requests used this nonce, this one included (`nc`).
    public var nonceCount: UInt32

    public init(method: String, uri: String, body: [UInt8]?, clientNonce: String, nonceCount: UInt32) {
        self.method = method
        self.uri = uri
        self.body = body
        self.clientNonce = clientNonce
        self.nonceCount = nonceCount
    }
}

/// Why a credential cannot answer a challenge.
public enum AuthenticationCredentialError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Control characters cannot be sent in a user name or password.
    case controlCharacter
    /// The server offers only `auth-int` and the body is a stream.
    case bodyNotAvailableForIntegrity

    public var description: String {
        switch self {
        case .controlCharacter: return "the user name or password contains a control character"
        case .bodyNotAvailableForIntegrity: return "the server asks for auth-int and the body is a stream"
        }
    }
}

/// The `Authorization` (or `Proxy-Authorization`) values of Basic and Digest.
public enum HTTPAuthorization {
    /// Basic (RFC 7617): `user:password` in UTF-8, base64. UTF-8 is what `charset="UTF-8"`
    /// asks for, and what Courier sends without it too (a Swift string has no other faithful
    /// encoding; ISO-8859-1 would lose characters).
    ///
    /// A user name with a colon is sent as it is, as curl and Apple do: RFC 7617 forbids it,
    /// and the server will split at the colon, but refusing it would only hide the problem.
    public static func basic(user: String, password: String) throws(AuthenticationCredentialError) -> String {
        guard !hasControlCharacter(user), !hasControlCharacter(password) else { throw .controlCharacter }
        return "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    /// Digest (RFC 7616 §3.4): the response over the challenge, credential and request.
    public static func digest(
        _ challenge: DigestChallenge, user: String, password: String, request: DigestRequest
    ) throws(AuthenticationCredentialError) -> String {
        guard !hasControlCharacter(user), !hasControlCharacter(password) else { throw .controlCharacter }
        let protection = try challenge.protection(bodyIsKnown: request.body != nil)
        let algorithm = challenge.algorithm
        let nc = nonceCountText(request.nonceCount)
        var secret = algorithm.hex("\(user):\(challenge.realm):\(password)")
        if algorithm.isSession {
            secret = algorithm.hex("\(secret):\(challenge.nonce):\(request.clientNonce)")
        }
        var a2 = "\(request.method):\(request.uri)"
        if protection == .authInt {
            a2 += ":" + algorithm.hex(request.body ?? [])
        }
        let ha2 = algorithm.hex(a2)
        let response: String
        if let protection {
            response = algorithm.hex("\(secret):\(challenge.nonce):\(nc):\(request.clientNonce):\(protection.rawValue):\(ha2)")
        } else {
            response = algorithm.hex("\(secret):\(challenge.nonce):\(ha2)")
        }

        var parts: [String] = []
        if challenge.userhash {
            parts.append("username=\(quoted(algorithm.hex("\(user):\(challenge.realm)")))")
        } else if user.utf8.allSatisfy({ $0 < 0x80 }) {
            parts.append("username=\(quoted(user))")
        } else {
            // A name that is not ASCII goes in the extended form (RFC 7616 §3.4.4, RFC 8187).
            parts.append("username*=UTF-8''\(extendedValue(user))")
        }
        parts.append("realm=\(quoted(challenge.realm))")
        parts.append("uri=\(quoted(request.uri))")
        parts.append("algorithm=\(algorithm.rawValue)")
        parts.append("nonce=\(quoted(challenge.nonce))")
        if let protection {
            parts.append("nc=\(nc)")
            parts.append("cnonce=\(quoted(request.clientNonce))")
            parts.append("qop=\(protection.rawValue)")
        }
        parts.append("response=\(quoted(response))")
        if let opaque = challenge.opaque { parts.append("opaque=\(quoted(opaque))") }
        if challenge.userhash { parts.append("userhash=true") }
        return "Digest " + parts.joined(separator: ", ")
    }

    /// `nc`: eight hex digits.
    static func nonceCountText(_ count: UInt32) -> String {
        let hex = String(count, radix: 16)
        return String(repeating: "0", count: max(0, 8 - hex.count)) + hex
    }

    /// A quoted-string with `"` and `\` escaped.
    static func quoted(_ value: String) -> String {
        // By scalar, not Character: a quote followed by a combining mark is one Character
        // that equals neither '"' nor '\\', and would go out unescaped.
        var out = String.UnicodeScalarView()
        out.append("\"")
        for scalar in value.unicodeScalars {
            if scalar == "\"" || scalar == "\\" { out.append("\\") }
            out.append(scalar)
        }
        out.append("\"")
        return String(out)
    }

    /// RFC 8187's value-chars: attr-char kept, every other byte percent-encoded.
    static func extendedValue(_ value: String) -> String {
        var out = ""
        for byte in value.utf8 {
            let isAttrChar = (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || "!#$&+-.^_`|~".utf8.contains(byte)
            if isAttrChar {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out += "%" + DigestAlgorithm.hexString([byte]).uppercased()
            }
        }
        return out
    }

    static func hasControlCharacter(_ text: String) -> Bool {
        // C0, DEL and C1 (RFC 7617 §2.1 forbids every Unicode control character).
        text.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }
    }
}
