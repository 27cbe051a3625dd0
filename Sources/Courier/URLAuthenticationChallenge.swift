import Foundation

/// Protection-space protocols (Apple's values).
public let NSURLProtectionSpaceHTTP = "http"
public let NSURLProtectionSpaceHTTPS = "https"
public let NSURLProtectionSpaceHTTPProxy = "http"
public let NSURLProtectionSpaceHTTPSProxy = "https"
public let NSURLProtectionSpaceFTP = "ftp"
public let NSURLProtectionSpaceFTPProxy = "ftp"
public let NSURLProtectionSpaceSOCKSProxy = "SOCKS"

/// Authentication methods.
public let NSURLAuthenticationMethodDefault = "NSURLAuthenticationMethodDefault"
public let NSURLAuthenticationMethodHTTPBasic = "NSURLAuthenticationMethodHTTPBasic"
public let NSURLAuthenticationMethodHTTPDigest = "NSURLAuthenticationMethodHTTPDigest"
public let NSURLAuthenticationMethodClientCertificate = "NSURLAuthenticationMethodClientCertificate"
public let NSURLAuthenticationMethodServerTrust = "NSURLAuthenticationMethodServerTrust"
/// NTLM, HTML-form and Negotiate (Kerberos) authentication: named for protection spaces as on
/// Apple platforms; Courier answers none of them (their challenges are not raised).
public let NSURLAuthenticationMethodNTLM = "NSURLAuthenticationMethodNTLM"
public let NSURLAuthenticationMethodHTMLForm = "NSURLAuthenticationMethodHTMLForm"
public let NSURLAuthenticationMethodNegotiate = "NSURLAuthenticationMethodNegotiate"

/// A server or proxy that asks for authentication, and how: Apple's `URLProtectionSpace`.
open class URLProtectionSpace: NSObject, NSCopying, @unchecked Sendable {
    public let host: String
    public let port: Int
    public let `protocol`: String?
    public let realm: String?
    public let authenticationMethod: String
    public let proxyType: String?
    /// For server-trust challenges: the server's certificate chain to evaluate.
    public internal(set) var serverTrust: SecTrust?
    /// For client-certificate challenges: the DER distinguished names of the issuers the
    /// server accepts (nil when it named none).
    public internal(set) var distinguishedNames: [Data]?

    public init(host: String, port: Int, protocol: String?, realm: String?, authenticationMethod: String?) {
        self.host = host
        self.port = port
        self.protocol = `protocol`
        self.realm = realm
        self.authenticationMethod = authenticationMethod ?? NSURLAuthenticationMethodDefault
        self.proxyType = nil
    }

    public init(proxyHost host: String, port: Int, type: String?, realm: String?, authenticationMethod: String?) {
        self.host = host
        self.port = port
        self.protocol = nil
        self.realm = realm
        self.authenticationMethod = authenticationMethod ?? NSURLAuthenticationMethodDefault
        self.proxyType = type
    }

    /// Decodes an archived space (NSSecureCoding); nil for an archive that holds none.
    public required convenience init?(coder: NSCoder) {
        guard let fields = URLProtectionSpace.decodedFields(from: coder) else { return nil }
        if let proxyType = fields.proxyType {
            self.init(proxyHost: fields.host, port: fields.port, type: proxyType, realm: fields.realm, authenticationMethod: fields.method)
        } else {
            self.init(host: fields.host, port: fields.port, protocol: fields.scheme, realm: fields.realm, authenticationMethod: fields.method)
        }
    }

    /// True when credentials travel encrypted: https, or a challenge that is not a password.
    open var receivesCredentialSecurely: Bool {
        self.protocol == NSURLProtectionSpaceHTTPS || authenticationMethod == NSURLAuthenticationMethodServerTrust
            || authenticationMethod == NSURLAuthenticationMethodClientCertificate
    }

    open override func isProxy() -> Bool { proxyType != nil }

    open override func copy() -> Any { self }
    open func copy(with zone: NSZone? = nil) -> Any { self }

    open override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? URLProtectionSpace else { return false }
        return host == other.host && port == other.port && self.protocol == other.protocol && realm == other.realm
            && authenticationMethod == other.authenticationMethod && proxyType == other.proxyType
    }

    /// Combines the fields `isEqual` compares, so that spaces differing only in realm or
    /// method (the usual case on one host) do not collide as dictionary keys.
    open override var hash: Int {
        var hasher = Hasher()
        hasher.combine(host)
        hasher.combine(port)
        hasher.combine(self.protocol)
        hasher.combine(realm)
        hasher.combine(authenticationMethod)
        hasher.combine(proxyType)
        return hasher.finalize()
    }

    open override var description: String {
        "<URLProtectionSpace \(self.protocol ?? proxyType ?? "?")://\(host):\(port) \(authenticationMethod)>"
    }
}

/// Answers a challenge the old way; Courier routes these to the same place as the
/// completion handler given to the delegate.
public protocol URLAuthenticationChallengeSender: NSObjectProtocol, Sendable {
    func use(_ credential: URLCredential, for challenge: URLAuthenticationChallenge)
    func continueWithoutCredential(for challenge: URLAuthenticationChallenge)
    func cancel(_ challenge: URLAuthenticationChallenge)
    func performDefaultHandling(for challenge: URLAuthenticationChallenge)
    func rejectProtectionSpaceAndContinue(with challenge: URLAuthenticationChallenge)
}

/// A request for authentication: Apple's `URLAuthenticationChallenge`.
open class URLAuthenticationChallenge: NSObject, @unchecked Sendable {
    public let protectionSpace: URLProtectionSpace
    public let proposedCredential: URLCredential?
    public let previousFailureCount: Int
    public let failureResponse: URLResponse?
    public let error: (any Error)?
    public let sender: (any URLAuthenticationChallengeSender)?

    public init(
        protectionSpace space: URLProtectionSpace, proposedCredential credential: URLCredential?, previousFailureCount: Int,
        failureResponse response: URLResponse?, error: (any Error)?, sender: any URLAuthenticationChallengeSender
    ) {
        self.protectionSpace = space
        self.proposedCredential = credential
        self.previousFailureCount = previousFailureCount
        self.failureResponse = response
        self.error = error
        self.sender = sender
    }

    public convenience init(authenticationChallenge challenge: URLAuthenticationChallenge, sender: any URLAuthenticationChallengeSender) {
        self.init(
            protectionSpace: challenge.protectionSpace, proposedCredential: challenge.proposedCredential,
            previousFailureCount: challenge.previousFailureCount, failureResponse: challenge.failureResponse,
            error: challenge.error, sender: sender
        )
    }
}

extension URLSession {
    /// How a delegate answers an authentication challenge.
    public enum AuthChallengeDisposition: Int, Sendable {
        /// Use the credential given (a trust, an identity, a password).
        case useCredential = 0
        /// Do what the session would do without a delegate.
        case performDefaultHandling = 1
        /// Cancel: the task fails with `URLError(.cancelled)`.
        case cancelAuthenticationChallenge = 2
        /// Refuse this protection space.
        case rejectProtectionSpace = 3
    }
}
