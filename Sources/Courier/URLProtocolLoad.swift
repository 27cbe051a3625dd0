import CourierSync
import Foundation

/// One request loaded by a `URLProtocol` subclass, standing in for an exchange, and the
/// protocol's client. Client calls are taken one at a time (from whatever thread the protocol
/// uses) and handed to the task's driver, which treats them as an exchange's events: the
/// response as a final head (no status-driven redirect, retry or authentication — the protocol
/// has its own say on those), the data as the body, the finish or failure as the end.
final class URLProtocolLoad: NSObject, URLProtocolClient, @unchecked Sendable {
    private struct Progress {
        /// The protocol instance, once made on the protocol thread.
        var instance: URLProtocol?
        var started = false
        /// Stopped (or asked to stop before it started): `stopLoading` is called at most once.
        var stopped = false
        /// The protocol finished, failed or was redirected: later client calls are ignored.
        var ended = false
        var responded = false
        /// The cache storage policy the protocol gave with its response.
        var storagePolicy = URLCache.StoragePolicy.notAllowed
        /// The body, kept for the cache while the policy allows it and it stays small.
        var collected: Data?
        /// Challenges put to the delegate and not yet answered or withdrawn.
        var challenges: [ObjectIdentifier: URLAuthenticationChallenge] = [:]
    }

    /// The driver, held until the task ends (the driver drops the load then, which breaks
    /// the cycle).
    private let driver: TaskDriver
    /// The largest body kept for the cache (the cache refuses larger entries anyway).
    private let collectLimit: Int
    private let progress = Mutex(Progress())
    /// Client calls, one at a time; recursive, since a protocol may call its client from
    /// inside another client call's effects.
    private let calls = NSRecursiveLock()

    init(driver: TaskDriver, collectLimit: Int) {
        self.driver = driver
        self.collectLimit = collectLimit
    }

    // MARK: Start and stop (on the protocol thread)

    /// Makes the instance and starts it on the protocol thread, unless the load was stopped
    /// first.
    func start(_ make: @escaping @Sendable (URLProtocolLoad) -> URLProtocol) {
        URLProtocolThread.shared.perform { [self] in
            let proceed = progress.withLock { !$0.stopped }
            guard proceed else { return }
            let instance = make(self)
            progress.withLock {
                $0.instance = instance
                $0.started = true
            }
            instance.startLoading()
        }
    }

    /// Ends the load: no client call counts any more, and the protocol's `stopLoading()` runs
    /// on the protocol thread (once, and only if it started).
    func stop() {
        progress.withLock { $0.ended = true }
        URLProtocolThread.shared.perform { [self] in
            let instance = progress.withLock { progress -> URLProtocol? in
                guard !progress.stopped else { return nil }
                progress.stopped = true
                return progress.started ? progress.instance : nil
            }
            instance?.stopLoading()
        }
    }

    // MARK: URLProtocolClient

    func urlProtocol(_ protocol: URLProtocol, didReceive response: URLResponse, cacheStoragePolicy policy: URLCache.StoragePolicy) {
        serialized {
            let first = progress.withLock { progress -> Bool in
                guard !progress.ended, !progress.responded else { return false }
                progress.responded = true
                progress.storagePolicy = policy
                progress.collected = policy == .notAllowed ? nil : Data()
                return true
            }
            if first { driver.protocolResponded(self, response) }
        }
    }

    func urlProtocol(_ protocol: URLProtocol, didLoad data: Data) {
        serialized {
            guard respondIfNeeded(`protocol`) else { return }
            progress.withLock { progress in
                guard progress.collected != nil else { return }
                if progress.collected!.count + data.count > collectLimit {
                    progress.collected = nil
                } else {
                    progress.collected!.append(data)
                }
            }
            driver.protocolLoaded(self, data)
        }
    }

    func urlProtocolDidFinishLoading(_ protocol: URLProtocol) {
        serialized {
            guard respondIfNeeded(`protocol`) else { return }
            let stored = progress.withLock { progress -> (Data, URLCache.StoragePolicy)? in
                progress.ended = true
                return progress.collected.map { ($0, progress.storagePolicy) }
            }
            driver.protocolFinished(self, cacheable: stored)
        }
    }

    func urlProtocol(_ protocol: URLProtocol, didFailWithError error: any Error) {
        serialized {
            guard takeEnd() else { return }
            driver.protocolFailed(self, error)
        }
    }

    func urlProtocol(_ protocol: URLProtocol, wasRedirectedTo request: URLRequest, redirectResponse: URLResponse) {
        serialized {
            guard takeEnd() else { return }
            driver.protocolRedirected(self, to: request, response: redirectResponse)
        }
    }

    func urlProtocol(_ protocol: URLProtocol, cachedResponseIsValid cachedResponse: CachedURLResponse) {
        serialized {
            let first = progress.withLock { progress -> Bool in
                guard !progress.ended, !progress.responded else { return false }
                progress.responded = true
                progress.ended = true
                return true
            }
            guard first else { return }
            driver.protocolResponded(self, cachedResponse.response)
            if !cachedResponse.data.isEmpty { driver.protocolLoaded(self, cachedResponse.data) }
            driver.protocolFinished(self, cacheable: nil)
        }
    }

    func urlProtocol(_ protocol: URLProtocol, didReceive challenge: URLAuthenticationChallenge) {
        let key = ObjectIdentifier(challenge)
        let live = progress.withLock { progress -> Bool in
            guard !progress.ended else { return false }
            progress.challenges[key] = challenge
            return true
        }
        guard live else { return }
        driver.protocolChallenged(challenge) { [self] disposition, credential in
            let pending = progress.withLock { $0.challenges.removeValue(forKey: key) }
            guard let pending, let sender = pending.sender else { return }
            // The answer reaches the protocol's sender on the protocol's thread, as its
            // other calls do.
            URLProtocolThread.shared.perform {
                switch disposition {
                case .useCredential:
                    if let credential { sender.use(credential, for: pending) } else { sender.continueWithoutCredential(for: pending) }
                case .performDefaultHandling:
                    sender.performDefaultHandling(for: pending)
                case .cancelAuthenticationChallenge:
                    sender.cancel(pending)
                case .rejectProtectionSpace:
                    sender.rejectProtectionSpaceAndContinue(with: pending)
                }
            }
        }
    }

    func urlProtocol(_ protocol: URLProtocol, didCancel challenge: URLAuthenticationChallenge) {
        _ = progress.withLock { $0.challenges.removeValue(forKey: ObjectIdentifier(challenge)) }
    }

    // MARK: Helpers

    private func serialized(_ call: () -> Void) {
        calls.lock()
        defer { calls.unlock() }
        call()
    }

    /// Marks the load ended; false when it already was.
    private func takeEnd() -> Bool {
        progress.withLock { progress in
            guard !progress.ended else { return false }
            progress.ended = true
            return true
        }
    }

    /// Data or a finish before any response: a plain response for the request's URL stands in
    /// (nothing the protocol sent is dropped). False once the load ended.
    private func respondIfNeeded(_ protocol: URLProtocol) -> Bool {
        let needed = progress.withLock { progress -> Bool? in
            guard !progress.ended else { return nil }
            guard !progress.responded else { return false }
            progress.responded = true
            return true
        }
        guard let needed else { return false }
        if needed {
            let response = URLResponse(url: `protocol`.request.url ?? URL(fileURLWithPath: "/"), mimeType: nil, expectedContentLength: -1, textEncodingName: nil)
            driver.protocolResponded(self, response)
        }
        return true
    }
}

/// The thread every `URLProtocol` starts and stops on, running a run loop (as Apple's custom
/// protocol thread does), so a protocol may use `RunLoop.current` for timers and streams.
/// Jobs run in the order they were given.
final class URLProtocolThread: @unchecked Sendable {
    static let shared = URLProtocolThread()

    /// The jobs given and not yet run; a drain on the run loop runs them.
    private let queue = Mutex(SerialCalls())
    private let ready = DispatchSemaphore(value: 0)
    /// Set once by the thread before `ready` is signalled; read only after.
    private nonisolated(unsafe) var runLoop: RunLoop?

    private init() {
        let thread = Thread { [self] in main() }
        thread.name = "courier.urlprotocol"
        thread.start()
        ready.wait()
    }

    private func main() {
        // A timer far away keeps the run loop waiting rather than returning at once.
        let keepAlive = Timer(timeInterval: 1_000_000, repeats: true) { _ in }
        RunLoop.current.add(keepAlive, forMode: .default)
        runLoop = RunLoop.current
        ready.signal()
        while true {
            _ = RunLoop.current.run(mode: .default, before: .distantFuture)
        }
    }

    /// Runs `job` on the protocol thread, after the jobs given before it.
    func perform(_ job: @escaping @Sendable () -> Void) {
        guard queue.withLock({ $0.post(job) }), let runLoop else { return }
        runLoop.add(Timer(timeInterval: 0, repeats: false) { [self] _ in drain() }, forMode: .default)
    }

    private func drain() {
        while true {
            let jobs = queue.withLock { $0.takeAll() }
            if jobs.isEmpty { return }
            for job in jobs { job.run() }
        }
    }
}
