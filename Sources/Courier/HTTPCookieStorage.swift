import CourierPolicies
import CourierSync
import Foundation
import Logging

extension Notification.Name {
    /// Posted (object: the storage) after cookies were added, replaced or removed.
    public static let NSHTTPCookieManagerCookiesChanged = Notification.Name("NSHTTPCookieManagerCookiesChangedNotification")
    /// Posted (object: the storage) after its accept policy changed.
    public static let NSHTTPCookieManagerAcceptPolicyChanged = Notification.Name("NSHTTPCookieManagerAcceptPolicyChangedNotification")
}

extension HTTPCookie {
    /// Which cookies a storage accepts.
    public enum AcceptPolicy: UInt, Sendable {
        /// Every cookie.
        case always = 0
        /// None.
        case never = 1
        /// Only cookies from the main document's domain (a request whose URL is in the
        /// domain of its `mainDocumentURL`, or that has none).
        case onlyFromMainDocumentDomain = 2
    }
}

/// Apple's `HTTPCookieStorage`: a cookie jar by RFC 6265bis (``CookieJar``), shared by the
/// sessions whose configuration names it.
///
/// `shared` keeps persistent cookies in SQLite under the XDG data home
/// (`$XDG_DATA_HOME/courier/cookies.sqlite`, mode 0600, WAL: a crash loses at most the last
/// write and never damages the file); session cookies stay in memory and are never written.
/// An `.ephemeral` configuration gets a jar of its own in memory, gone with it.
///
/// Locking: one lock per storage, around the jar; the file is written, and the change
/// notification posted, on the storage's own serial queue, never under the lock and never on
/// an event loop. Reads see every change at once (the jar is updated before the write is
/// queued).
open class HTTPCookieStorage: NSObject, @unchecked Sendable {
    /// Where a storage keeps its persistent cookies.
    enum Store {
        case memory
        case file(URL)
    }

    /// The file behind a storage, opened on first use.
    enum Backing {
        case memory
        case unopened(URL)
        case open(CookieDatabase)
        /// The file could not be opened or written: memory only from now on.
        case unavailable
    }

    struct State {
        var jar = CookieJar()
        var backing: Backing
        var acceptPolicy = HTTPCookie.AcceptPolicy.always
    }

    private static let sharedStorage = HTTPCookieStorage(store: .file(defaultStoreURL(name: "cookies.sqlite")))
    private static let groupStorages = Mutex<[String: HTTPCookieStorage]>([:])

    private let state: Mutex<State>
    /// Writes to the file and posts notifications, in order.
    private let writer = DispatchQueue(label: "Courier HTTPCookieStorage writer")
    private let logger = Logger(label: "courier")
    let suffixes: any PublicSuffixes = SystemPublicSuffixes.shared

    /// The storage of `URLSessionConfiguration.default`, persisted.
    open class var shared: HTTPCookieStorage { sharedStorage }

    /// A persistent storage of its own for a group identifier
    /// (`$XDG_DATA_HOME/courier/cookies-<identifier>.sqlite`); one object per identifier.
    open class func sharedCookieStorage(forGroupContainerIdentifier identifier: String) -> HTTPCookieStorage {
        groupStorages.withLock { storages in
            if let existing = storages[identifier] { return existing }
            let safe = String(identifier.unicodeScalars.map { scalar -> Character in
                CharacterSet.alphanumerics.contains(scalar) || scalar == "." || scalar == "-" || scalar == "_" ? Character(scalar) : "_"
            })
            let storage = HTTPCookieStorage(store: .file(defaultStoreURL(name: "cookies-\(safe).sqlite")))
            storages[identifier] = storage
            return storage
        }
    }

    init(store: Store) {
        switch store {
        case .memory: state = Mutex(State(backing: .memory))
        case .file(let url): state = Mutex(State(backing: .unopened(url)))
        }
        super.init()
    }

    /// `$XDG_DATA_HOME/courier/<name>`, `~/.local/share/courier/<name>` without it.
    static func defaultStoreURL(name: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        XDGDirectories.data(name, environment: environment)
    }

    // MARK: Apple's API

    /// Every cookie, in no particular order; nil when there are none.
    open var cookies: [HTTPCookie]? {
        let stored = withLoadedState { $0.jar.cookies }
        return stored.isEmpty ? nil : CookieJar.sorted(stored).map(HTTPCookie.init)
    }

    /// The cookies an HTTP request to `url` would carry, in the order they go in its `Cookie`
    /// field; nil when there are none.
    open func cookies(for url: URL) -> [HTTPCookie]? {
        let stored = matching(url, mainDocumentURL: nil)
        return stored.isEmpty ? nil : stored.map(HTTPCookie.init)
    }

    /// Stores a cookie as it is (replacing one with its name, domain and path), unless the
    /// policy is `.never`.
    open func setCookie(_ cookie: HTTPCookie) {
        let change = withLoadedState { state -> CookieJar.Change in
            guard state.acceptPolicy != .never else { return CookieJar.Change() }
            return state.jar.insert(cookie.storedCookie, now: Date())
        }
        commit(change)
    }

    /// Stores cookies set for `url` (from a document at `mainDocumentURL`), as the accept
    /// policy allows. With a URL, a cookie whose domain does not cover its host is refused.
    open func setCookies(_ cookies: [HTTPCookie], for url: URL?, mainDocumentURL: URL?) {
        let host = url.flatMap { CookieContext(url: $0).host }
        let change = withLoadedState { state -> CookieJar.Change in
            guard accepts(url: url, mainDocumentURL: mainDocumentURL, policy: state.acceptPolicy) else { return CookieJar.Change() }
            var change = CookieJar.Change()
            let now = Date()
            for cookie in cookies {
                let stored = cookie.storedCookie
                if let host, stored.hostOnly ? stored.domain != host : !CookieJar.domainMatches(host, stored.domain) { continue }
                let one = state.jar.insert(stored, now: now)
                change.stored += one.stored
                change.removed += one.removed
            }
            return change
        }
        commit(change)
    }

    /// Removes a cookie (by its name, domain and path).
    open func deleteCookie(_ cookie: HTTPCookie) {
        let removed = withLoadedState { $0.jar.remove(cookie.storedCookie.key) }
        commit(CookieJar.Change(removed: removed.map { [$0] } ?? []))
    }

    /// Removes the cookies created at or after `date`.
    open func removeCookies(since date: Date) {
        let removed = withLoadedState { $0.jar.removeAll(createdSince: date) }
        commit(CookieJar.Change(removed: removed))
    }

    /// Every cookie, sorted by the descriptors in turn (key-path descriptors such as
    /// `NSSortDescriptor(keyPath: \HTTPCookie.name, ascending: true)`; Linux's Foundation has
    /// no key-value coding for string keys).
    open func sortedCookies(using sortOrder: [NSSortDescriptor]) -> [HTTPCookie] {
        let all = cookies ?? []
        return all.sorted { lhs, rhs in
            for descriptor in sortOrder {
                let order = descriptor.compare(lhs, to: rhs)
                if order != .orderedSame { return order == .orderedAscending }
            }
            return false
        }
    }

    /// Which cookies the storage accepts from responses and `setCookie`.
    open var cookieAcceptPolicy: HTTPCookie.AcceptPolicy {
        get { state.withLock { $0.acceptPolicy } }
        set {
            let changed = state.withLock { state -> Bool in
                defer { state.acceptPolicy = newValue }
                return state.acceptPolicy != newValue
            }
            if changed {
                writer.async { [self] in NotificationCenter.default.post(name: .NSHTTPCookieManagerAcceptPolicyChanged, object: self) }
            }
        }
    }

    /// Stores cookies for a task's current request (its URL and main document URL).
    open func storeCookies(_ cookies: [HTTPCookie], for task: URLSessionTask) {
        let request = task.currentRequest ?? task.originalRequest
        setCookies(cookies, for: request?.url, mainDocumentURL: request?.mainDocumentURL)
    }

    /// The cookies the task's current request would carry (nil for none), to the handler.
    open func getCookiesFor(_ task: URLSessionTask, completionHandler: @escaping @Sendable ([HTTPCookie]?) -> Void) {
        let request = task.currentRequest ?? task.originalRequest
        guard let url = request?.url else {
            completionHandler(nil)
            return
        }
        let stored = matching(url, mainDocumentURL: request?.mainDocumentURL)
        completionHandler(stored.isEmpty ? nil : stored.map(HTTPCookie.init))
    }

    /// The cookies the task's current request would carry; nil for none.
    open func cookies(for task: URLSessionTask) async -> [HTTPCookie]? {
        await withCheckedContinuation { continuation in
            getCookiesFor(task) { continuation.resume(returning: $0) }
        }
    }

    open override var description: String {
        "<HTTPCookieStorage cookies: \(withLoadedState { $0.jar.count })>"
    }

    // MARK: For the session

    /// The `Cookie` field for a request; nil when no cookie matches.
    func cookieField(for url: URL, mainDocumentURL: URL?) -> String? {
        // An empty jar (the common case for many programs) costs one look under the lock;
        // reading the URL's host and the clock waits until there is something to match.
        guard !withLoadedState({ $0.jar.isEmpty }) else { return nil }
        let now = Date()
        let context = CookieContext(url: url, isHTTP: true, siteForCookies: mainDocumentURL)
        let stored = withLoadedState { $0.jar.cookies(for: context, now: now, suffixes: suffixes) }
        return CookieJar.cookieHeader(stored)
    }

    /// Stores the `Set-Cookie` fields of a response to `url`, as `policy` allows (the
    /// session's `httpCookieAcceptPolicy`). Returns the reasons cookies were refused, for the
    /// session's log.
    @discardableResult
    func storeResponseCookies(_ fields: [String], for url: URL, mainDocumentURL: URL?, policy: HTTPCookie.AcceptPolicy) -> [String] {
        guard !fields.isEmpty, accepts(url: url, mainDocumentURL: mainDocumentURL, policy: policy) else { return [] }
        let now = Date()
        let context = CookieContext(url: url, isHTTP: true, siteForCookies: mainDocumentURL)
        var refusals: [String] = []
        let change = withLoadedState { state -> CookieJar.Change in
            var change = CookieJar.Change()
            for field in fields {
                guard let setCookie = SetCookieParser.parse(field) else {
                    refusals.append("a Set-Cookie field could not be read")
                    continue
                }
                do throws(CookieRejection) {
                    let one = try state.jar.store(setCookie, context: context, now: now, suffixes: suffixes)
                    change.stored += one.stored
                    change.removed += one.removed
                } catch {
                    refusals.append("\(setCookie.name): \(error)")
                }
            }
            return change
        }
        commit(change)
        return refusals
    }

    /// Waits until every change so far is written and notified (tests, and a process about
    /// to exit).
    func flush() {
        writer.sync {}
    }

    // MARK: Internals

    private func accepts(url: URL?, mainDocumentURL: URL?, policy: HTTPCookie.AcceptPolicy) -> Bool {
        switch policy {
        case .always:
            return true
        case .never:
            return false
        case .onlyFromMainDocumentDomain:
            guard let mainDocumentURL, let main = CookieContext(url: mainDocumentURL).host else { return true }
            guard let host = url.flatMap({ CookieContext(url: $0).host }) else { return false }
            // The request's host is the main document's, or in its registrable domain.
            let site = suffixes.registrableDomain(main) ?? main
            return CookieJar.domainMatches(host, site)
        }
    }

    private func matching(_ url: URL, mainDocumentURL: URL?) -> [StoredCookie] {
        let now = Date()
        let context = CookieContext(url: url, isHTTP: true, siteForCookies: mainDocumentURL)
        return withLoadedState { $0.jar.matchingCookies(for: context, now: now, suffixes: suffixes) }
    }

    /// Runs `body` on the state after loading the file on first use.
    private func withLoadedState<T>(_ body: (inout State) -> T) -> T {
        state.withLock { state in
            if case .unopened(let url) = state.backing { load(url, into: &state) }
            return body(&state)
        }
    }

    /// Opens the file and puts its cookies (expired ones purged) in the jar.
    private func load(_ url: URL, into state: inout State) {
        do {
            let database = try CookieDatabase.open(at: url)
            let now = Date()
            for cookie in try database.load(now: now) {
                state.jar.insert(cookie, now: now)
            }
            state.backing = .open(database)
        } catch {
            logger.warning("Cannot use the cookie store \(url.path) (\(error)); cookies are kept in memory.")
            state.backing = .unavailable
        }
    }

    /// Writes a change to the file (its persistent cookies) and posts the notification, on
    /// the writer queue.
    private func commit(_ change: CookieJar.Change) {
        guard !change.isEmpty else { return }
        let database = state.withLock { state -> CookieDatabase? in
            if case .open(let database) = state.backing { return database }
            return nil
        }
        writer.async { [self] in
            if let database {
                do {
                    // Not under the storage's lock (requests would wait on the disk): once it
                    // is loaded, the database is used by this serial queue alone.
                    try database.apply(stored: change.stored, removed: change.removed.map(\.key))
                } catch {
                    logger.warning("Cannot write to the cookie store \(database.url.path) (\(error)); the change is kept in memory only.")
                }
            }
            NotificationCenter.default.post(name: .NSHTTPCookieManagerCookiesChanged, object: self)
        }
    }

}
