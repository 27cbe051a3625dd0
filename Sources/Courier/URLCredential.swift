import Foundation

/// A credential for an authentication challenge: Apple's `URLCredential` — a user name and
/// password, a server trust to accept, or a client identity.
///
/// Archiving (`NSSecureCoding`) keeps the user, the password and the persistence. A client
/// identity or a server trust is not archived (its private key has no place in an archive):
/// such a credential encodes only its persistence, and decoding it gives nil.
open class URLCredential: NSObject, NSSecureCoding, NSCopying, @unchecked Sendable {
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

    // MARK: Equality

    /// Equal when the user, password and persistence are, and the identity and trust are the
    /// same objects (or both absent).
    open override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? URLCredential else { return false }
        if other === self { return true }
        return user == other.user && password == other.password && persistence == other.persistence
            && identity === other.identity && trust === other.trust
    }

    open override var hash: Int {
        var hasher = Hasher()
        hasher.combine(user)
        hasher.combine(password)
        hasher.combine(persistence)
        hasher.combine(identity.map { ObjectIdentifier($0) })
        hasher.combine(trust.map { ObjectIdentifier($0) })
        return hasher.finalize()
    }

    // MARK: Archiving

    /// Archive keys.
    private enum ArchiveKey {
        static let user = "courier.user"
        static let password = "courier.password"
        static let persistence = "courier.persistence"
    }

    public static var supportsSecureCoding: Bool { true }

    /// Decodes a user-and-password credential; nil for anything else (an archived identity or
    /// trust credential, a keyed archive missing the user or password, an unkeyed coder).
    public required init?(coder: NSCoder) {
        guard coder.allowsKeyedCoding,
            let user = coder.decodeObject(of: NSString.self, forKey: ArchiveKey.user),
            let password = coder.decodeObject(of: NSString.self, forKey: ArchiveKey.password)
        else { return nil }
        let rawPersistence = coder.decodeInt64(forKey: ArchiveKey.persistence)
        // NSString's description is its text.
        self.user = user.description
        self.password = password.description
        self.persistence = rawPersistence >= 0 ? Persistence(rawValue: UInt(rawPersistence)) ?? .forSession : .forSession
        self.identity = nil
        self.certificates = []
        self.trust = nil
        super.init()
    }

    /// Encodes the user, password and persistence; an identity or trust is left out (see the
    /// type's discussion). Only keyed archives are supported; an unkeyed coder gets nothing.
    open func encode(with coder: NSCoder) {
        guard coder.allowsKeyedCoding else { return }
        if let user { coder.encode(NSString(string: user), forKey: ArchiveKey.user) }
        if let password { coder.encode(NSString(string: password), forKey: ArchiveKey.password) }
        coder.encode(Int64(persistence.rawValue), forKey: ArchiveKey.persistence)
    }
}
