import CourierCore
import CourierReactor
import CourierTLS
import Foundation

/// Makes connections for one ``ConnectionKey`` as a chain of steps, each handing a connected
/// channel to the next: TCP with Happy Eyeballs (to the origin, or to the proxy) → the proxy's
/// tunnel, when the route has one → TLS for an https origin → ALPN's choice of HTTP/1.1 or
/// HTTP/2. The pool asks for a connection and learns only the outcome.
struct Dialer {
    /// A connection ready for requests.
    struct Dialed {
        var stream: TransportStream
        var http2: Bool
        var timings: ConnectTimings
    }

    typealias Completion = (Result<Dialed, DialFailure>) -> Void

    let key: ConnectionKey
    let environment: TransportEnvironment
    /// The request that has waited longest when a step needs one: its `Proxy-Authorization`
    /// opens a CONNECT tunnel, and a TLS challenge is raised on its task.
    let oldestWaitingExchange: @Sendable () -> HTTPExchange?

    /// Dials on `loop` from any thread (at once when already on it); `completion` runs once, on it.
    func start(on loop: EventLoop, completion: @escaping Completion) {
        let begin = { dial(on: loop, completion: completion) }
        if loop.inEventLoop {
            begin()
        } else {
            let bound = LoopBound(begin, loop: loop)
            loop.execute { bound.value() }
        }
    }

    /// Dials on `loop` (which must be the current loop); `completion` runs once, on it.
    func dial(on loop: EventLoop, completion: @escaping Completion) {
        let connectStart = MonotonicInstant.now
        let deadline = connectStart + environment.connectTimeout
        let proxy = key.proxy
        let (host, port) = proxy.map { ($0.host, $0.port) } ?? (key.origin.host, key.origin.port)
        let connector = Connector(target: .host(host, port: port), loop: loop, resolver: environment.resolver)
        let waiting = oldestWaitingExchange
        connector.onAttempt = { event in
            switch event {
            case .started(let address): report(.trying(address), to: waiting)
            case .failed(let address, let error): report(.attemptFailed(address, error), to: waiting)
            }
        }
        connector.start(deadline: deadline) { result in
            switch result {
            case .success(let socket):
                let channel: StreamChannel
                do throws(SystemError) {
                    channel = try StreamChannel(fd: socket.fd, loop: loop)
                } catch {
                    completion(.failure(Self.connectFailure(.connect(error), proxy: proxy)))
                    return
                }
                report(.connected(remote: socket.address, local: channel.localAddress), to: waiting)
                // The connect starts when the name is known (Apple's domainLookupEnd ≤ connectStart).
                let timings = ConnectTimings(
                    resolutionStart: socket.resolutionStart, resolutionEnd: socket.resolutionEnd,
                    start: socket.resolutionEnd ?? connectStart, end: connectStart, proxy: proxy
                )
                openTunnel(channel, timings: timings, deadline: deadline, completion: completion)
            case .failure(let error):
                completion(.failure(Self.connectFailure(error, proxy: proxy)))
            }
        }
    }

    /// Tells the request waiting longest what happened.
    private func report(_ progress: ConnectionProgress, to waiting: @Sendable () -> HTTPExchange?) {
        guard let exchange = waiting() else { return }
        exchange.delegate.exchange(exchange, didMakeProgress: progress)
    }

    /// A failed connect to the proxy names the proxy.
    private static func connectFailure(_ error: ConnectError, proxy: ProxyServer?) -> DialFailure {
        guard let proxy, error != .cancelled else { return .connect(error) }
        return .proxy(error == .timedOut ? .timedOut(proxy) : .unreachable(proxy, error))
    }

    /// Runs the route's tunnel, if any, within the connect deadline.
    private func openTunnel(
        _ channel: StreamChannel, timings: ConnectTimings, deadline: MonotonicInstant, completion: @escaping Completion
    ) {
        let next: (Result<Void, DialFailure>) -> Void = { result in
            switch result {
            case .success:
                if case .tunnel(let proxy) = key.route { report(.tunnelOpened(proxy), to: oldestWaitingExchange) }
                secure(channel, timings: timings, deadline: deadline, completion: completion)
            case .failure(let failure): completion(.failure(failure))
            }
        }
        guard case .tunnel(let proxy) = key.route else {
            next(.success(()))
            return
        }
        switch proxy.kind {
        case .http:
            let authorization = oldestWaitingExchange()?.request.tunnelAuthorization
            ProxyTunnel.connect(
                channel: channel, proxy: proxy, origin: key.origin, authorization: authorization,
                deadline: deadline, completion: next
            )
        case .socks5(.byProxy):
            ProxyTunnel.socks5(
                channel: channel, proxy: proxy, destination: Self.socksDestination(name: key.origin.host),
                port: key.origin.port, deadline: deadline, completion: next
            )
        case .socks5(.locally):
            resolveForSOCKS(key.origin.host, on: channel.loop) { result in
                switch result {
                case .success(let destination):
                    ProxyTunnel.socks5(
                        channel: channel, proxy: proxy, destination: destination, port: key.origin.port,
                        deadline: deadline, completion: next
                    )
                case .failure(let error):
                    channel.close()
                    next(.failure(.connect(.resolution(error))))
                }
            }
        }
    }

    /// The destination of a SOCKS5 request that leaves the name to the proxy: an address
    /// literal goes as an address, anything else as a domain name.
    static func socksDestination(name: String) -> SOCKS5Destination {
        switch SocketAddress(numericHost: name, port: 0) {
        case .v4(let bytes, _): return .ipv4(bytes)
        case .v6(let bytes, _, _): return .ipv6(bytes)
        default: return .domain(name)
        }
    }

    /// Looks the origin's name up here, for a SOCKS5 proxy that is to get an address: IPv4
    /// first, as curl's `socks5://` does, then IPv6.
    private func resolveForSOCKS(
        _ host: String, on loop: EventLoop, completion: @escaping (Result<SOCKS5Destination, ResolutionError>) -> Void
    ) {
        let literal = Self.socksDestination(name: host)
        if case .domain = literal {} else {
            completion(.success(literal))
            return
        }
        let resolver = environment.resolver
        resolver.resolve(host: host, port: 0, family: .inet, on: loop) { first in
            if case .success(let addresses) = first, case .v4(let bytes, _)? = addresses.first {
                completion(.success(.ipv4(bytes)))
                return
            }
            resolver.resolve(host: host, port: 0, family: .inet6, on: loop) { second in
                switch second {
                case .success(let addresses):
                    if case .v6(let bytes, _, _)? = addresses.first {
                        completion(.success(.ipv6(bytes)))
                    } else if case .failure(let error) = first {
                        completion(.failure(error))
                    } else {
                        completion(.failure(.hostNotFound(host)))
                    }
                case .failure(let error):
                    if case .failure(let firstError) = first { completion(.failure(firstError)) } else { completion(.failure(error)) }
                }
            }
        }
    }

    /// Wraps the channel in TLS for an https origin (plain TCP otherwise); the handshake
    /// shares the connect `deadline`.
    private func secure(
        _ channel: StreamChannel, timings: ConnectTimings, deadline: MonotonicInstant, completion: @escaping Completion
    ) {
        var timings = timings
        timings.end = .now
        let origin = key.origin
        guard origin.scheme == .https else {
            // A forwarding proxy gets HTTP/1.1: prior knowledge is about origins.
            let http2: Bool
            if case .forwardingProxy = key.route { http2 = false } else { http2 = environment.http2PriorKnowledge && !key.http1Only }
            completion(.success(Dialed(stream: PlainStream(channel: channel), http2: http2, timings: timings)))
            return
        }
        let engine: TLSEngine
        do throws(TLSError) {
            let session = environment.sessionCache.session(for: TLSStream.sessionKey(origin))
            engine = try TLSEngine(
                context: environment.tlsContext(), role: .client(serverName: origin.host),
                verificationTime: Int64(Date().timeIntervalSince1970), session: session,
                applicationProtocols: key.http1Only ? ["http/1.1"] : nil
            )
        } catch {
            channel.close()
            completion(.failure(.tls(error)))
            return
        }
        let stream = TLSStream(
            channel: channel, engine: engine, origin: origin, sessionCache: environment.sessionCache,
            securityDelegate: environment.securityDelegate, exchangeForChallenge: oldestWaitingExchange
        )
        stream.startHandshake(deadline: deadline) { result in
            switch result {
            case .success:
                let tls = stream.tls
                report(.secured(version: tls?.version, cipherName: tls?.cipherName, applicationProtocol: tls?.applicationProtocol), to: oldestWaitingExchange)
                completion(.success(Dialed(stream: stream, http2: tls?.applicationProtocol == "h2", timings: timings)))
            case .failure(let failure):
                completion(.failure(failure))
            }
        }
    }
}
