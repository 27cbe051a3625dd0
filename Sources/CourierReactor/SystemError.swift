import CCourierLinux
import Glibc

/// A failed system call: which call, and the `errno` it left.
public struct SystemError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The call that failed, e.g. "connect".
    public var call: String
    /// The `errno` value.
    public var code: Int32

    public init(_ call: String, code: Int32) {
        self.call = call
        self.code = code
    }

    /// The current `errno` for `call`.
    static func last(_ call: String) -> SystemError {
        SystemError(call, code: errno)
    }

    public var description: String {
        "\(call): \(reason) (errno \(code))"
    }

    /// The system's words for the error, e.g. "Connection refused".
    public var reason: String {
        guard let text = strerror(code) else { return "errno \(code)" }
        return String(cString: text)
    }

    public var isConnectionRefused: Bool { code == ECONNREFUSED }
    public var isTimeout: Bool { code == ETIMEDOUT }
    /// The peer reset or abandoned the connection.
    public var isConnectionReset: Bool { code == ECONNRESET || code == EPIPE || code == ECONNABORTED }
    /// No route, unreachable network or host.
    public var isUnreachable: Bool { code == ENETUNREACH || code == EHOSTUNREACH || code == EADDRNOTAVAIL || code == ENETDOWN }
}

/// Calls `body` again while it fails with EINTR.
@inlinable
public func retryingOnInterrupt<T: BinaryInteger>(_ body: () -> T) -> T {
    while true {
        let result = body()
        if result == -1 && errno == EINTR { continue }
        return result
    }
}
