import CCourierLinux
import Glibc

/// Why a connection could not be made.
public enum ConnectError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The name did not resolve.
    case resolution(ResolutionError)
    /// Every address refused or could not be reached; the most telling error.
    case connect(SystemError)
    /// The name resolved to no usable address.
    case noAddresses(String)
    /// The deadline passed first.
    case timedOut
    /// The caller gave up.
    case cancelled

    public var description: String {
        switch self {
        case .resolution(let error): return error.description
        case .connect(let error): return error.description
        case .noAddresses(let host): return "no usable address for \(host)"
        case .timedOut: return "connection timed out"
        case .cancelled: return "connection cancelled"
        }
    }
}

/// A socket whose connect completed, not yet wrapped in a channel.
public struct ConnectedSocket: Sendable {
    public var fd: Int32
    public var address: SocketAddress
    /// When the name lookup started and when its first answer came; nil for a numeric host.
    public var resolutionStart: MonotonicInstant?
    public var resolutionEnd: MonotonicInstant?
}

/// One address tried by a ``Connector``, for observers (`courier -v`'s "Trying").
public enum ConnectAttemptEvent: Sendable {
    case started(SocketAddress)
    case failed(SocketAddress, SystemError)
}

/// Dials `host:port` on a loop: resolves without blocking the loop, races addresses with Happy
/// Eyeballs v2 and gives the first socket to connect to `completion`, exactly once.
public final class Connector {
    /// Where to connect.
    public enum Target: Sendable, Equatable {
        case host(String, port: UInt16)
        case unix(path: String)
    }

    public let loop: EventLoop
    private let target: Target
    private let resolver: Resolver
    private var machine = HappyEyeballs()
    private var attempts: [AttemptID: ConnectAttempt] = [:]
    private var raceTimer: TimerID?
    private var deadlineTimer: TimerID?
    private var completion: ((Result<ConnectedSocket, ConnectError>) -> Void)?
    /// When the first lookup was asked for and its first answer arrived (for metrics).
    private var resolutionStart: MonotonicInstant?
    private var resolutionEnd: MonotonicInstant?
    /// Hears each attempt start and fail, on the loop.
    public var onAttempt: ((ConnectAttemptEvent) -> Void)?

    /// Prepares a dial; nothing happens until ``start(deadline:completion:)``.
    public init(target: Target, loop: EventLoop, resolver: Resolver = Resolver()) {
        self.target = target
        self.loop = loop
        self.resolver = resolver
    }

    /// Starts dialing (loop thread only); `completion` runs once on the loop.
    public func start(deadline: MonotonicInstant, completion: @escaping (Result<ConnectedSocket, ConnectError>) -> Void) {
        loop.assertInEventLoop()
        self.completion = completion
        deadlineTimer = loop.scheduleTimer(at: deadline) { [self] in
            deadlineTimer = nil
            finish(.failure(.timedOut))
        }
        let now = MonotonicInstant.now
        switch target {
        case .unix(let path):
            perform(machine.start(addresses: [.unix(path: path)], now: now))
        case .host(let host, let port):
            let literal = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
            if let numeric = SocketAddress(numericHost: literal, port: port) {
                perform(machine.start(addresses: [numeric], now: now))
            } else {
                perform(machine.start(now: now))
            }
        }
    }

    /// Gives up; `completion` gets `.cancelled` unless it already ran.
    public func cancel() {
        finish(.failure(.cancelled))
    }

    private func perform(_ actions: [HappyEyeballs.Action]) {
        for action in actions {
            switch action {
            case .resolve(let family):
                guard case .host(let host, let port) = target else { continue }
                if resolutionStart == nil { resolutionStart = .now }
                resolver.resolve(host: host, port: port, family: family, on: loop) { [self] result in
                    guard completion != nil else { return }
                    if resolutionEnd == nil, case .success = result { resolutionEnd = .now }
                    perform(machine.resolved(family, result, now: .now))
                }
            case .startAttempt(let id, let address):
                startAttempt(id, address)
            case .scheduleTimer(let at):
                if let raceTimer { loop.cancelTimer(raceTimer) }
                raceTimer = loop.scheduleTimer(at: at) { [self] in
                    raceTimer = nil
                    perform(machine.timerFired(now: .now))
                }
            case .cancelTimer:
                if let raceTimer { loop.cancelTimer(raceTimer) }
                raceTimer = nil
            case .cancelAttempts(let ids):
                for id in ids { attempts.removeValue(forKey: id)?.close() }
            case .succeed(let id):
                guard let attempt = attempts.removeValue(forKey: id) else { continue }
                var socket = attempt.takeSocket()
                socket.resolutionStart = resolutionStart
                socket.resolutionEnd = resolutionEnd
                finish(.success(socket))
            case .fail(let failure):
                switch failure {
                case .resolution(let error): finish(.failure(.resolution(error)))
                case .connect(let error): finish(.failure(.connect(error)))
                case .noAddresses:
                    if case .host(let host, _) = target { finish(.failure(.noAddresses(host))) } else { finish(.failure(.noAddresses("?"))) }
                }
            }
        }
    }

    private func startAttempt(_ id: AttemptID, _ address: SocketAddress) {
        let attempt = ConnectAttempt(address: address, loop: loop) { [self] outcome in
            switch outcome {
            case .connected: perform(machine.attemptSucceeded(id))
            case .failed(let error):
                attempts[id] = nil
                onAttempt?(.failed(address, error))
                perform(machine.attemptFailed(id, error, now: .now))
            }
        }
        attempts[id] = attempt
        onAttempt?(.started(address))
        attempt.start()
    }

    private func finish(_ result: Result<ConnectedSocket, ConnectError>) {
        guard let completion else {
            if case .success(let socket) = result { Posix.close(socket.fd) }
            return
        }
        self.completion = nil
        onAttempt = nil
        if case .failure = result {
            perform(machine.cancel())
        }
        for attempt in attempts.values { attempt.close() }
        attempts.removeAll()
        if let raceTimer { loop.cancelTimer(raceTimer) }
        if let deadlineTimer { loop.cancelTimer(deadlineTimer) }
        raceTimer = nil
        deadlineTimer = nil
        completion(result)
    }
}

/// One non-blocking connect to one address.
final class ConnectAttempt: IOEventHandler {
    enum Outcome {
        case connected
        case failed(SystemError)
    }

    let address: SocketAddress
    let loop: EventLoop
    private var fd: Int32 = -1
    private var token: RegistrationToken?
    private var onOutcome: ((Outcome) -> Void)?

    init(address: SocketAddress, loop: EventLoop, onOutcome: @escaping (Outcome) -> Void) {
        self.address = address
        self.loop = loop
        self.onOutcome = onOutcome
    }

    /// Opens the socket and starts connecting; the outcome is reported on a later turn.
    func start() {
        do throws(SystemError) {
            fd = try Posix.socket(family: address.posixFamily)
            if try Posix.connect(fd, to: address) {
                loop.executeSoon { [self] in report(.connected) }
            } else {
                token = try loop.register(fd: fd, interest: .writable, handler: self)
            }
        } catch {
            loop.executeSoon { [self] in report(.failed(error)) }
        }
    }

    func handleIOEvents(_ events: IOEvents) {
        let code = Posix.pendingError(fd)
        if code == 0 && !events.contains(.error) && !events.contains(.hangup) {
            report(.connected)
        } else {
            report(.failed(SystemError("connect", code: code == 0 ? ECONNREFUSED : code)))
        }
    }

    private func report(_ outcome: Outcome) {
        guard let onOutcome else { return }
        if let token { loop.deregister(token) }
        token = nil
        if case .failed = outcome { close() }
        self.onOutcome = nil
        onOutcome(outcome)
    }

    /// Hands over the connected socket; the attempt forgets it.
    func takeSocket() -> ConnectedSocket {
        let socket = ConnectedSocket(fd: fd, address: address)
        fd = -1
        return socket
    }

    func close() {
        if let token { loop.deregister(token) }
        token = nil
        onOutcome = nil
        if fd >= 0 { Posix.close(fd) }
        fd = -1
    }
}
