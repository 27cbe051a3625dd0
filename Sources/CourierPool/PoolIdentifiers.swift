/// A pool's identifier: an integer, handed out in increasing order.
public protocol PoolIdentifier: Hashable, Sendable, Comparable {
    var rawValue: Int { get }
}

/// Identifies a request inside one pool.
public struct PoolRequestID: PoolIdentifier, CustomStringConvertible {
    public let rawValue: Int
    public init(_ rawValue: Int) { self.rawValue = rawValue }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { "R\(rawValue)" }
}

/// Identifies a connection inside one pool.
public struct PoolConnectionID: PoolIdentifier, CustomStringConvertible {
    public let rawValue: Int
    public init(_ rawValue: Int) { self.rawValue = rawValue }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { "C\(rawValue)" }
}

/// The protocol a connection speaks once established.
public enum PoolConnectionProtocol: Sendable, Equatable {
    /// One request at a time.
    case http1
    /// Concurrent streams, up to the server's SETTINGS_MAX_CONCURRENT_STREAMS.
    case http2(maxConcurrentStreams: Int)
}

/// Why the pool failed a request itself (rather than a connection failing it).
public enum PoolFailure<DialError: Error & Sendable & Equatable>: Error, Sendable, Equatable {
    /// No connection could be made; the dial error of the last attempt.
    case dialFailed(DialError)
    /// The request was cancelled while it waited.
    case cancelled
    /// The pool is shutting down.
    case shutDown
}

/// The limits of one pool.
public struct PoolConfiguration: Sendable, Equatable {
    /// Most HTTP/1 connections to the key at once, counting those still being dialed
    /// (`httpMaximumConnectionsPerHost`, 6 by default as on Apple platforms).
    public var maxConnections: Int = 6
    /// Most idle connections kept; beyond it the longest-idle one is closed.
    public var maxIdleConnections: Int = 6
    /// How long a connection may stay idle before it is closed.
    public var idleTimeout: Duration = .seconds(60)
    /// First delay before dialing again after a failed dial; doubles per failure.
    public var initialBackoff: Duration = .milliseconds(100)
    /// Longest backoff delay.
    public var maxBackoff: Duration = .seconds(10)
    /// True when a connection may turn out to speak HTTP/2 (TLS with `h2` offered in ALPN):
    /// while the first connection is still being established, further requests wait for it
    /// instead of dialing more.
    public var mayNegotiateHTTP2: Bool = false

    public init() {}
}
