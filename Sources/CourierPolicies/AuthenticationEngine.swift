import Foundation

/// A challenge Courier can answer: Basic or a Digest it supports.
public enum AuthenticationOffer: Sendable, Equatable {
    case basic(realm: String?)
    case digest(DigestChallenge)

    public var realm: String? {
        switch self {
        case .basic(let realm): return realm
        case .digest(let challenge): return challenge.realm
        }
    }

    public var isDigest: Bool {
        if case .digest = self { return true }
        return false
    }

    /// Higher is stronger: Digest by its hash, above Basic.
    public var strength: Int {
        switch self {
        case .basic: return 0
        case .digest(let challenge): return 10 + challenge.algorithm.strength
        }
    }
}

/// The authentication decisions that need no I/O: which challenges of a 401/407 to answer, in
/// which order, and which requests carry a credential before being asked (preemptively).
///
/// The driver (Courier's `TaskDriver`) asks the delegate, keeps the credentials and sends the
/// requests; this type only reads challenges and remembers what worked.
public enum AuthenticationEngine {
    /// Most challenges answered in one task. A delegate that keeps giving a wrong password
    /// would otherwise loop for ever; past this the 401/407 is the task's result. Apple sets no
    /// such bound; 16 is the redirect limit, and far more attempts than a person makes.
    public static let maximumChallengesPerTask = 16

    /// The offers in the challenge fields of a response, strongest first (Digest SHA-512-256,
    /// SHA-512, SHA-256, MD5, then Basic; equal strength keeps the server's order). Schemes
    /// Courier does not speak (Bearer, Negotiate …) and Digest challenges it cannot answer are
    /// left out; `malformed` lists the fields that were refused.
    public static func offers(inFields values: [String]) -> (offers: [AuthenticationOffer], malformed: [AuthenticationChallengeError]) {
        let (challenges, malformed) = AuthenticationChallengeParser.parse(fields: values)
        return (offers(in: challenges), malformed)
    }

    /// The offers with one per protection space (realm and scheme): the strongest of several
    /// Digest algorithms for one realm is what the delegate hears of, once, so a rejected
    /// password counts once and a rejected space is not asked about again.
    public static func onePerSpace(_ offers: [AuthenticationOffer]) -> [AuthenticationOffer] {
        var seen: [(realm: String?, isDigest: Bool)] = []
        return offers.filter { offer in
            if seen.contains(where: { $0.realm == offer.realm && $0.isDigest == offer.isDigest }) { return false }
            seen.append((offer.realm, offer.isDigest))
            return true
        }
    }

    public static func offers(in challenges: [AuthenticationChallenge]) -> [AuthenticationOffer] {
        var offers: [AuthenticationOffer] = []
        for challenge in challenges {
            switch challenge.normalizedScheme {
            case "basic" where challenge.token68 == nil:
                offers.append(.basic(realm: challenge[parameter: "realm"]))
            case "digest":
                // An algorithm this OpenSSL cannot compute (MD5 under a FIPS policy) is skipped.
                if let digest = DigestChallenge(challenge), digest.algorithm.isAvailable { offers.append(.digest(digest)) }
            default:
                continue
            }
        }
        // A stable sort: strongest first, the server's order among equals.
        return offers.enumerated().sorted { lhs, rhs in
            lhs.element.strength != rhs.element.strength ? lhs.element.strength > rhs.element.strength : lhs.offset < rhs.offset
        }.map(\.element)
    }
}

/// Where a remembered credential is sent without a challenge: an origin (or a proxy), and the
/// paths under it.
public struct AuthenticationScope: Sendable, Equatable, Hashable {
    public var scheme: String
    public var host: String
    public var port: Int
    public var isProxy: Bool
    /// Path prefixes covered; empty: every path of the origin.
    public var pathPrefixes: [String]

    public init(scheme: String, host: String, port: Int, isProxy: Bool, pathPrefixes: [String]) {
        self.scheme = scheme.lowercased()
        self.host = host.lowercased()
        self.port = port
        self.isProxy = isProxy
        self.pathPrefixes = pathPrefixes
    }

    /// The scope a credential that worked for `url` covers. Basic: the directory of the
    /// request's path (RFC 7617 §2.2: everything at or below it). Digest: the challenge's
    /// `domain` URIs on the same origin, else the whole origin (RFC 7616 §3.3).
    public static func covering(_ url: URL, port: Int, offer: AuthenticationOffer, isProxy: Bool) -> AuthenticationScope? {
        guard let scheme = url.scheme, var host = url.host(percentEncoded: false) else { return nil }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if isProxy {
            return AuthenticationScope(scheme: scheme, host: host, port: port, isProxy: true, pathPrefixes: [])
        }
        switch offer {
        case .basic:
            var path = url.path(percentEncoded: true)
            if path.isEmpty { path = "/" }
            let directory = path.hasSuffix("/") ? path : String(path[...path.lastIndex(of: "/")!])
            return AuthenticationScope(scheme: scheme, host: host, port: port, isProxy: false, pathPrefixes: [directory])
        case .digest(let challenge):
            var prefixes: [String] = []
            for uri in challenge.domain {
                guard let resolved = URL(string: uri, relativeTo: url)?.absoluteURL,
                      resolved.scheme?.lowercased() == scheme.lowercased(),
                      resolved.host(percentEncoded: false)?.trimmingCharacters(in: CharacterSet(charactersIn: "[]")).lowercased() == host.lowercased(),
                      (resolved.port ?? Self.defaultPort(scheme)) == port else { continue }
                let path = resolved.path(percentEncoded: true)
                prefixes.append(path.isEmpty ? "/" : path)
            }
            // A domain naming only other origins leaves nothing preemptive.
            if !challenge.domain.isEmpty && prefixes.isEmpty { return nil }
            return AuthenticationScope(scheme: scheme, host: host, port: port, isProxy: false, pathPrefixes: prefixes)
        }
    }

    public static func defaultPort(_ scheme: String) -> Int {
        scheme.lowercased() == "https" ? 443 : 80
    }

    /// How well a request path matches: the matching prefix's length (0 for the whole origin),
    /// nil when it does not.
    func match(scheme: String, host: String, port: Int, isProxy: Bool, path: String) -> Int? {
        guard self.isProxy == isProxy, self.port == port, self.scheme == scheme.lowercased(), self.host == host.lowercased() else { return nil }
        if pathPrefixes.isEmpty { return 0 }
        return pathPrefixes.filter { path.hasPrefix($0) }.map(\.count).max()
    }
}

/// Credentials that worked, per scope, sent again before the server asks (a session's memory;
/// Courier's `URLSession` holds one behind its lock).
public struct PreemptiveAuthentication: Sendable {
    /// What a remembered credential answers.
    public enum Method: Sendable, Equatable {
        case basic
        /// A Digest challenge and how many requests used its nonce so far.
        case digest(DigestChallenge, nonceCount: UInt32)
    }

    public struct Entry: Sendable, Equatable {
        public var scope: AuthenticationScope
        public var realm: String?
        public var method: Method
        public var user: String
        public var password: String
    }

    /// Most scopes remembered; the oldest is forgotten first.
    public static let maximumEntries = 64

    public private(set) var entries: [Entry] = []
    /// Uses of each Digest nonce so far, by origin, realm and nonce: one count per nonce for
    /// the whole session, whether a task's own credential or a remembered one uses it, so no
    /// `nc` is ever sent twice with one nonce (a server that checks them would see a replay).
    private var nonceUses: [String: UInt32] = [:]
    /// The order nonces were first used in, to forget the oldest.
    private var nonceOrder: [String] = []
    /// Most nonces counted; the oldest is forgotten first.
    public static let maximumNonces = 256

    public init() {}

    /// The next `nc` for a nonce (1 for the first use), counted.
    public mutating func nextNonceCount(scheme: String, host: String, port: Int, isProxy: Bool, realm: String?, nonce: String) -> UInt32 {
        let key = Self.nonceKey(AuthenticationScope(scheme: scheme, host: host, port: port, isProxy: isProxy, pathPrefixes: []), realm: realm, nonce: nonce)
        return countUse(key)
    }

    private mutating func countUse(_ key: String) -> UInt32 {
        if let count = nonceUses[key] {
            let next = count &+ 1
            nonceUses[key] = next
            return next
        }
        nonceUses[key] = 1
        nonceOrder.append(key)
        if nonceOrder.count > Self.maximumNonces {
            nonceUses[nonceOrder.removeFirst()] = nil
        }
        return 1
    }

    private static func nonceKey(_ scope: AuthenticationScope, realm: String?, nonce: String) -> String {
        "\(scope.hostKey)\u{0}\(realm ?? "")\u{0}\(nonce)"
    }

    public var isEmpty: Bool { entries.isEmpty }

    /// Remembers a credential that worked; it replaces one for the same scope and realm.
    public mutating func remember(_ scope: AuthenticationScope, realm: String?, offer: AuthenticationOffer, user: String, password: String, nonceCount: UInt32) {
        var scope = scope
        if let existing = entries.first(where: { $0.scope.hostKey == scope.hostKey && $0.realm == realm }),
           existing.user == user, existing.password == password, !existing.scope.pathPrefixes.isEmpty, !scope.pathPrefixes.isEmpty {
            // The same credential working in another directory of the realm covers both.
            scope.pathPrefixes = Array(Set(existing.scope.pathPrefixes + scope.pathPrefixes)).sorted()
        }
        entries.removeAll { $0.scope.hostKey == scope.hostKey && $0.realm == realm }
        let method: Method
        switch offer {
        case .basic: method = .basic
        case .digest(let challenge):
            // The session's count of the nonce wins over a smaller one reported by a task.
            let key = Self.nonceKey(scope, realm: realm, nonce: challenge.nonce)
            let counted = nonceUses[key] ?? 0
            if nonceCount > counted {
                if nonceUses[key] == nil { nonceOrder.append(key) }
                nonceUses[key] = nonceCount
            }
            method = .digest(challenge, nonceCount: max(counted, nonceCount))
        }
        entries.append(Entry(scope: scope, realm: realm, method: method, user: user, password: password))
        if entries.count > Self.maximumEntries { entries.removeFirst(entries.count - Self.maximumEntries) }
    }

    /// Forgets the credentials of a realm on an origin (they were refused).
    public mutating func forget(scheme: String, host: String, port: Int, isProxy: Bool, realm: String?) {
        entries.removeAll { entry in
            entry.scope.isProxy == isProxy && entry.scope.port == port && entry.scope.scheme == scheme.lowercased()
                && entry.scope.host == host.lowercased() && entry.realm == realm
        }
    }

    /// The field value to send with a request, from the best-matching entry (longest path
    /// prefix); a Digest entry counts the use. Nil when nothing matches or the entry cannot
    /// answer this request (an `auth-int` server and a streamed body).
    public mutating func authorization(
        scheme: String, host: String, port: Int, isProxy: Bool, path: String,
        method: String, uri: String, body: [UInt8]?, clientNonce: String
    ) -> (value: String, entry: Entry)? {
        var best: (index: Int, length: Int)?
        for (index, entry) in entries.enumerated() {
            guard let length = entry.scope.match(scheme: scheme, host: host, port: port, isProxy: isProxy, path: path) else { continue }
            if best == nil || length > best!.length { best = (index, length) }
        }
        guard let index = best?.index else { return nil }
        var entry = entries[index]
        switch entry.method {
        case .basic:
            guard let value = try? HTTPAuthorization.basic(user: entry.user, password: entry.password) else { return nil }
            return (value, entry)
        case .digest(let challenge, _):
            // Counted only once the value could be made (an auth-int entry and a stream cannot).
            let key = Self.nonceKey(entry.scope, realm: entry.realm, nonce: challenge.nonce)
            let next = (nonceUses[key] ?? 0) &+ 1
            let request = DigestRequest(method: method, uri: uri, body: body, clientNonce: clientNonce, nonceCount: next)
            guard let value = try? HTTPAuthorization.digest(challenge, user: entry.user, password: entry.password, request: request) else { return nil }
            _ = countUse(key)
            entry.method = .digest(challenge, nonceCount: next)
            entries[index] = entry
            return (value, entry)
        }
    }
}

extension AuthenticationScope {
    /// The scope without its paths: what one entry per realm is keyed by.
    var hostKey: String { "\(isProxy ? "proxy:" : "")\(scheme)://\(host):\(port)" }
}
