import CourierSync
import Foundation

/// What a `URLProtocol` tells the loading system as its load goes: Apple's `URLProtocolClient`.
/// The session gives each protocol instance its client; every method may be called from any
/// thread, one at a time.
public protocol URLProtocolClient: NSObjectProtocol, Sendable {
    /// The load was redirected: the session asks the task delegate
    /// (`willPerformHTTPRedirection`), then stops this protocol and loads the request chosen.
    func urlProtocol(_ protocol: URLProtocol, wasRedirectedTo request: URLRequest, redirectResponse: URLResponse)
    /// The protocol's `cachedResponse` is valid: it is delivered as the response and body.
    func urlProtocol(_ protocol: URLProtocol, cachedResponseIsValid cachedResponse: CachedURLResponse)
    /// The response arrived; `policy` says whether the session's `URLCache` may store it.
    func urlProtocol(_ protocol: URLProtocol, didReceive response: URLResponse, cacheStoragePolicy policy: URLCache.StoragePolicy)
    /// Body bytes arrived.
    func urlProtocol(_ protocol: URLProtocol, didLoad data: Data)
    /// The load completed.
    func urlProtocolDidFinishLoading(_ protocol: URLProtocol)
    /// The load failed; the task completes with `error` as given.
    func urlProtocol(_ protocol: URLProtocol, didFailWithError error: any Error)
    /// The protocol needs a credential: the delegate is asked and its answer goes to the
    /// challenge's `sender`.
    func urlProtocol(_ protocol: URLProtocol, didReceive challenge: URLAuthenticationChallenge)
    /// The protocol withdrew `challenge`: the delegate's answer, if it comes, is dropped.
    func urlProtocol(_ protocol: URLProtocol, didCancel challenge: URLAuthenticationChallenge)
}

/// A loader for requests the built-in stack does not serve, or serves differently: Apple's
/// `URLProtocol`. Subclass it, answer `canInit(with:)`, load in `startLoading()` and report
/// through `client`; then list the class in a configuration's `protocolClasses` (consulted
/// first, in order, before HTTP, `data:` and `file:`) or register it with `registerClass(_:)`
/// for `URLSession.shared`. This is the usual way to stand in for a server in tests.
///
/// The session makes one instance per request it loads (a redirect makes another), calls
/// `startLoading()` and later `stopLoading()` once — when the load completes, fails, is
/// redirected elsewhere or is cancelled — both on one thread that runs a run loop, as Apple
/// does, so a protocol may schedule timers or streams in `RunLoop.current`.
open class URLProtocol: NSObject, @unchecked Sendable {
    private let lock = NSLock()
    /// Guarded by `lock`.
    private var storedClient: (any URLProtocolClient)?
    /// Guarded by `lock`.
    private weak var storedTask: URLSessionTask?
    private let storedRequest: URLRequest
    private let storedCachedResponse: CachedURLResponse?

    /// A protocol instance for `request`. The session calls this (through
    /// `init(task:cachedResponse:client:)`) with the canonical request, the response the
    /// session's cache holds for it, and its client.
    public required init(request: URLRequest, cachedResponse: CachedURLResponse?, client: (any URLProtocolClient)?) {
        storedRequest = request
        storedCachedResponse = cachedResponse
        storedClient = client
        super.init()
    }

    /// A protocol instance for `task`'s current request.
    public required convenience init(task: URLSessionTask, cachedResponse: CachedURLResponse?, client: (any URLProtocolClient)?) {
        let request = task.currentRequest ?? task.originalRequest ?? URLRequest(url: URL(fileURLWithPath: "/"))
        self.init(request: request, cachedResponse: cachedResponse, client: client)
        self.task = task
    }

    /// Who hears about the load.
    open var client: (any URLProtocolClient)? {
        get { lock.withLock { storedClient } }
        set { lock.withLock { storedClient = newValue } }
    }

    /// The request to load.
    open var request: URLRequest { storedRequest }

    /// The response the session's cache holds for the request, if any; report
    /// `cachedResponseIsValid` to have it delivered.
    open var cachedResponse: CachedURLResponse? { storedCachedResponse }

    /// The task being loaded, when the instance was made for one.
    open var task: URLSessionTask? {
        get { lock.withLock { storedTask } }
        set { lock.withLock { storedTask = newValue } }
    }

    /// Whether this class loads `request`. The base class loads nothing.
    open class func canInit(with request: URLRequest) -> Bool {
        false
    }

    /// Whether this class loads `task`: by default, whether it loads the task's current request.
    open class func canInit(with task: URLSessionTask) -> Bool {
        guard let request = task.currentRequest else { return false }
        return canInit(with: request)
    }

    /// The request as this class wants it loaded (say, with a field normalised); the task's
    /// `currentRequest` becomes it. By default the request itself.
    open class func canonicalRequest(for request: URLRequest) -> URLRequest {
        request
    }

    /// Whether two requests share a cached response: by default, whether their canonical
    /// requests name the same URL.
    open class func requestIsCacheEquivalent(_ a: URLRequest, to b: URLRequest) -> Bool {
        canonicalRequest(for: a).url == canonicalRequest(for: b).url
    }

    /// Starts the load. Subclasses override this and report through `client`; the base class
    /// fails the load with `.unsupportedURL`, so a subclass that forgot it never hangs a task.
    open func startLoading() {
        let url = request.url
        client?.urlProtocol(self, didFailWithError: URLError.courier(.unsupportedURL, "\(type(of: self)) does not override startLoading().", url: url))
    }

    /// Stops the load; called once for every started load, however it ended.
    open func stopLoading() {}

    /// The value a protocol stored in `request` under `key`
    /// (``setProperty(_:forKey:in:)``), carried by the request and its copies.
    open class func property(forKey key: String, in request: URLRequest) -> Any? {
        request.protocolProperties[key]
    }

    /// Stores `value` under `key` in `request` (a protocol marks requests it has handled, say).
    open class func setProperty(_ value: Any, forKey key: String, in request: NSMutableURLRequest) {
        request.updateRequest { $0.protocolProperties[key] = value }
    }

    /// Removes the value stored under `key` in `request`.
    open class func removeProperty(forKey key: String, in request: NSMutableURLRequest) {
        request.updateRequest { $0.protocolProperties[key] = nil }
    }

    /// Makes `protocolClass` (a `URLProtocol` subclass) a loader for `URLSession.shared`,
    /// consulted before the classes registered earlier; false for any other class.
    open class func registerClass(_ protocolClass: AnyClass) -> Bool {
        guard let type = protocolClass as? URLProtocol.Type else { return false }
        URLProtocolRegistry.shared.register(type)
        return true
    }

    /// Stops `URLSession.shared` from consulting `protocolClass`.
    open class func unregisterClass(_ protocolClass: AnyClass) {
        guard let type = protocolClass as? URLProtocol.Type else { return }
        URLProtocolRegistry.shared.unregister(type)
    }
}

/// The classes registered with `URLProtocol.registerClass`, the latest first.
final class URLProtocolRegistry: Sendable {
    static let shared = URLProtocolRegistry()

    private struct Entry: @unchecked Sendable {
        let type: URLProtocol.Type
    }

    private let entries = Mutex<[Entry]>([])

    func register(_ type: URLProtocol.Type) {
        entries.withLock { entries in
            entries.removeAll { $0.type == type }
            entries.insert(Entry(type: type), at: 0)
        }
    }

    func unregister(_ type: URLProtocol.Type) {
        entries.withLock { $0.removeAll { $0.type == type } }
    }

    var classes: [URLProtocol.Type] {
        entries.withLock { $0.map(\.type) }
    }
}

extension URLSession {
    /// The protocol class that loads `task`'s current request, if one does: the configuration's
    /// `protocolClasses` in order (the shared session's registered classes before them), the
    /// first whose `canInit(with:)` says yes. Nil: the built-in stack loads it.
    func protocolClass(for task: URLSessionTask) -> URLProtocol.Type? {
        let candidates = isShared ? URLProtocolRegistry.shared.classes + configuredProtocolClasses : configuredProtocolClasses
        return candidates.first { $0.canInit(with: task) }
    }
}
