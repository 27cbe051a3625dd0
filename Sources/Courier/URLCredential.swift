import Foundation

/// A credential for an authentication challenge: Apple's `URLCredential` — a user name and
/// password, a server trust to accept, or a client identity.
open class URLCredential: NSObject, NSCopying, @unchecked Sendable {
    /// How long the credential is kept.
    public enum Persistence: UInt, Sendable {
        case none = 0
        case forSession = 1
        case permanent = 2
        case synchronizable = 3
    }

    public let persistence: Persistence
    public let user: String?
    public let password: String?
    /// The client identity of a client-certificate credential.
    public let identity: SecIdentity?
    /// The intermediates sent with the identity (`SecCertificate` values).
    public let certificates: [Any]
    /// The trust a server-trust credential accepts.
    let trust: SecTrust?

    public init(user: String, password: String, persistence: Persistence) {
        self.user = user
        self.password = password
        self.persistence = persistence
        self.identity = nil
        self.certificates = []
        self.trust = nil
    }

    /// Accepts a server's trust: the answer to a server-trust challenge that trusts it.
    public init(trust: SecTrust) {
        self.user = nil
        self.password = nil
        self.persistence = .forSession
        self.identity = nil
        self.certificates = []
        self.trust = trust
    }

    /// A client identity, with the intermediate certificates to send along.
    public init(identity: SecIdentity, certificates: [Any]?, persistence: Persistence) {
        self.user = nil
        self.password = nil
        self.persistence = persistence
        self.identity = identity
        self.certificates = certificates ?? []
        self.trust = nil
    }

    open var hasPassword: Bool { password != nil }

    open override func copy() -> Any { self }
    open func copy(with zone: NSZone? = nil) -> Any { self }
}
