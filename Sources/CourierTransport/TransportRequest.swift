import CourierCore
import CourierHTTP1
import CourierReactor
import Foundation

/// Where a request goes: the parts of a URL that pick a connection.
public struct Origin: Hashable, Sendable, CustomStringConvertible {
    public enum Scheme: String, Sendable {
        case http, https
        public var defaultPort: UInt16 { self == .https ? 443 : 80 }
    }

    public let scheme: Scheme
    /// The host, lower-cased; IPv6 literals without brackets.
    public let host: String
    public let port: UInt16
    /// `host[:port]` as the Host field writes it: brackets around IPv6, the port only when it
    /// is not the scheme's default. Made once with the origin: every request writes it.
    public let authority: String

    public init(scheme: Scheme, host: String, port: UInt16? = nil) {
        self.init(scheme: scheme, lowerCasedHost: host.lowercased(), port: port)
    }

    /// An origin whose host the caller knows to be in lower case already.
    public init(scheme: Scheme, lowerCasedHost host: String, port: UInt16? = nil) {
        self.scheme = scheme
        self.host = host
        let port = port ?? scheme.defaultPort
        self.port = port
        self.authority = Self.authority(host: host, port: port == scheme.defaultPort ? nil : port)
    }

    /// `host[:port]`, brackets around an IPv6 literal, written byte by byte into one string:
    /// every request makes its origin, and joining strings cost ten times as much.
    private static func authority(host: String, port: UInt16?) -> String {
        var host = host
        return host.withUTF8 { hostBytes -> String in
            let bracketed = hostBytes.contains(UInt8(ascii: ":"))
            var digits = 0
            if let port {
                digits = 1
                var rest = port / 10
                while rest > 0 {
                    digits += 1
                    rest /= 10
                }
            }
            // The exact length: up to 15 bytes the string is stored inline, with no allocation.
            let capacity = hostBytes.count + (bracketed ? 2 : 0) + (port == nil ? 0 : 1 + digits)
            return String(unsafeUninitializedCapacity: capacity) { buffer -> Int in
                var count = 0
                if bracketed {
                    buffer[count] = UInt8(ascii: "[")
                    count += 1
                }
                for byte in hostBytes {
                    buffer[count] = byte
                    count += 1
                }
                if bracketed {
                    buffer[count] = UInt8(ascii: "]")
                    count += 1
                }
                guard let port else { return count }
                buffer[count] = UInt8(ascii: ":")
                count += 1
                var rest = port
                for index in stride(from: count + digits - 1, through: count, by: -1) {
                    buffer[index] = UInt8(ascii: "0") + UInt8(rest % 10)
                    rest /= 10
                }
                return count + digits
            }
        }
    }

    // The authority follows from the other three: equality and hashing leave it out.
    public static func == (lhs: Origin, rhs: Origin) -> Bool {
        lhs.scheme == rhs.scheme && lhs.port == rhs.port && lhs.host == rhs.host
    }

    public func hash(into hasher: inout Hasher) {
        // The scheme as a flag: hashing the enum would hash its raw string.
        hasher.combine(scheme == .https)
        hasher.combine(host)
        hasher.combine(port)
    }

    /// `host:port` with the port always written (brackets around IPv6): CONNECT's target.
    public var hostAndPort: String {
        "\(bracketedHost(host)):\(port)"
    }

    public var description: String { "\(scheme.rawValue)://\(authority)" }
}

/// Produces a request body whose bytes are not all in memory (a stream, a file). The transport
/// asks for one chunk at a time and never asks again before the answer came.
public protocol RequestBodyProducer: AnyObject, Sendable {
    /// Returns up to `maxLength` bytes; an empty result means the body ended. May block: it is
    /// called on a blocking thread, never on an event loop.
    func readChunk(maxLength: Int) throws -> Data

    /// Hands the next chunk (up to `maxLength` bytes, empty at the end) or the failure to
    /// `completion`, on any thread. The default runs the blocking ``readChunk(maxLength:)`` on
    /// the blocking pool; a producer that can wait for its bytes without a thread (a bound
    /// stream pair) implements this instead, so a slow writer holds no pool thread.
    func readChunk(maxLength: Int, completion: @escaping @Sendable (Result<Data, any Error>) -> Void)

    /// The next chunk (up to `maxLength` bytes, empty at the end) or the failure, when it can
    /// be had at once without blocking (a file's bytes in the page cache); nil when only the
    /// reads above can get it. Called on the event loop, with no other read under way. The
    /// default returns nil.
    func readChunkWithoutBlocking(maxLength: Int) -> Result<Data, any Error>?

    /// The exchange is over: the body was sent, or the exchange failed or was cancelled part
    /// way. Release the source (close the stream or file), once any read under way returned.
    /// Called once, on any thread.
    func finish()
}

extension RequestBodyProducer {
    public func readChunk(maxLength: Int, completion: @escaping @Sendable (Result<Data, any Error>) -> Void) {
        BlockingPool.shared.submit {
            completion(Result { try self.readChunk(maxLength: maxLength) })
        }
    }

    public func readChunkWithoutBlocking(maxLength: Int) -> Result<Data, any Error>? { nil }
}

/// The body of a request.
public enum RequestBody: Sendable {
    /// No body.
    case empty
    /// Bytes in memory: sent with Content-Length.
    case bytes(Data)
    /// Bytes read as they are sent: with Content-Length when `length` is known, chunked when not.
    case stream(RequestBodyProducer, length: Int64?)

    /// True when the same bytes can be sent again (a retry after a stale connection).
    public var isReplayable: Bool {
        switch self {
        case .empty, .bytes: return true
        case .stream: return false
        }
    }
}

/// A request as the transport carries it.
///
/// Its fields live in one shared box (copy on write): the session layer, the exchange and the
/// pool each hold the request, and a copy is one retain instead of one for every string, the
/// field list and the body in it (three such copies and their destroys were some 1,300
/// instructions of a W1 request). Setting a field of a shared request copies the box first,
/// except for the deadline, which is kept beside the box: a load generator that sends one
/// request again and again gives each copy its own deadline, and a box copied for it (an
/// allocation, the fields' retains, then the box's release) was some 1,000 instructions a request.
public struct TransportRequest: Sendable {
    /// The fields. Mutated only through a uniquely held box (``unique()``), so it needs no
    /// lock; and no dynamic exclusivity checks: each access is a field read or one in-place set.
    private final class Storage: @unchecked Sendable {
        @exclusivity(unchecked) var origin: Origin
        @exclusivity(unchecked) var proxy: ProxyServer?
        @exclusivity(unchecked) var tunnelAuthorization: String?
        let head: HTTPRequestHead
        @exclusivity(unchecked) var body: RequestBody
        @exclusivity(unchecked) var idleTimeout: Duration
        @exclusivity(unchecked) var collectsTimings: Bool
        @exclusivity(unchecked) var upgrades: Bool

        init(
            origin: Origin, head: HTTPRequestHead, body: RequestBody, idleTimeout: Duration,
            proxy: ProxyServer?, tunnelAuthorization: String?, upgrades: Bool
        ) {
            self.origin = origin
            self.proxy = proxy
            self.tunnelAuthorization = tunnelAuthorization
            self.head = head
            self.body = body
            self.idleTimeout = idleTimeout
            self.collectsTimings = true
            self.upgrades = upgrades
        }

        init(copying other: Storage, head: HTTPRequestHead) {
            self.head = head
            origin = other.origin
            proxy = other.proxy
            tunnelAuthorization = other.tunnelAuthorization
            body = other.body
            idleTimeout = other.idleTimeout
            collectsTimings = other.collectsTimings
            upgrades = other.upgrades
        }
    }

    private var storage: Storage

    /// The box, copied first when another request shares it.
    private mutating func unique() -> Storage {
        if !isKnownUniquelyReferenced(&storage) { storage = Storage(copying: storage, head: storage.head) }
        return storage
    }

    /// The origin the request is for (a proxy, when there is one, is ``proxy``).
    public var origin: Origin {
        _read { yield storage.origin }
        set { unique().origin = newValue }
    }
    /// The proxy to go through; nil: directly. An `http` request to an HTTP proxy must carry
    /// its target in absolute-form.
    public var proxy: ProxyServer? {
        _read { yield storage.proxy }
        set { unique().proxy = newValue }
    }
    /// `Proxy-Authorization` for the CONNECT that opens a tunnel through an HTTP proxy, when
    /// this request's wait makes the pool dial one.
    public var tunnelAuthorization: String? {
        _read { yield storage.tunnelAuthorization }
        set { unique().tunnelAuthorization = newValue }
    }
    /// The one field the box holds as a constant: the connections read it while they write the
    /// request, and a head that could be set under them would have to be copied for each such
    /// read. Setting it makes a new box (the session layer's cookies, credentials and
    /// validators, before the request reaches the transport).
    public var head: HTTPRequestHead {
        _read { yield storage.head }
        set { storage = Storage(copying: storage, head: newValue) }
    }
    public var body: RequestBody {
        _read { yield storage.body }
        set { unique().body = newValue }
    }
    /// Longest silence (no byte sent or received) before the request fails as timed out.
    public var idleTimeout: Duration {
        get { storage.idleTimeout }
        set { unique().idleTimeout = newValue }
    }
    /// When the whole transfer must be over (the resource timeout); nil for none.
    @PackedInstant public var deadline: MonotonicInstant?
    /// Whether to record the timings of ``ExchangeMetrics`` and the connection's details
    /// (addresses, TLS version and cipher suite, proxy); byte counts, the protocol name and
    /// reuse are always recorded. Off saves a clock read per step and the details' copies
    /// when nobody will look at them.
    public var collectsTimings: Bool {
        get { storage.collectsTimings }
        set { unique().collectsTimings = newValue }
    }
    /// The request asks the server to switch protocols (a WebSocket opening handshake): a 101
    /// hands the connection to the exchange's delegate (``HTTPExchangeDelegate/exchange(_:didUpgradeWith:connection:metrics:)``)
    /// instead of failing the exchange. HTTP/1.1 only.
    public var upgrades: Bool {
        get { storage.upgrades }
        set { unique().upgrades = newValue }
    }

    /// The connections this request may use.
    public var connectionKey: ConnectionKey {
        var key: ConnectionKey
        if upgrades, let proxy {
            // A protocol switch needs the connection end to end: through an HTTP proxy it goes
            // in a CONNECT tunnel even for http, as browsers send ws: through one.
            key = ConnectionKey(origin: origin, route: .tunnel(proxy))
        } else {
            key = ConnectionKey(origin: origin, proxy: proxy)
        }
        key.http1Only = upgrades
        return key
    }

    /// Whether ``connectionKey`` is `key`. A direct request (most of them) is compared in place,
    /// without making its key (a copy of the origin and of the proxy, then its destroy: some
    /// 400 instructions a request in the pool lookup); any other makes it.
    public func hasConnectionKey(_ key: ConnectionKey) -> Bool {
        guard proxy == nil && !upgrades else { return connectionKey == key }
        guard case .direct = key.route, !key.http1Only else { return false }
        return key.origin == origin
    }

    /// How the body is delimited: the one framing rule, used by both HTTP versions and by the
    /// session layer's report of the request as sent. A body of known length (bytes, a file)
    /// has `Content-Length`; a stream of unknown length is chunked; no body has no framing
    /// field, except for methods whose content has a meaning (POST, PUT, PATCH), which say
    /// `Content-Length: 0` (RFC 9110 section 8.6). An empty `Data` body counts as no body.
    public var framing: HTTP1BodyFraming {
        switch body {
        case .empty:
            return head.method.expectsRequestContent ? .contentLength(0) : .none
        case .bytes(let data):
            return data.isEmpty && !head.method.expectsRequestContent ? .none : .contentLength(Int64(data.count))
        case .stream(_, let length):
            return length.map { .contentLength($0) } ?? .chunked
        }
    }

    public init(
        origin: Origin, head: HTTPRequestHead, body: RequestBody = .empty, idleTimeout: Duration = .seconds(60),
        proxy: ProxyServer? = nil, tunnelAuthorization: String? = nil, deadline: MonotonicInstant? = nil, upgrades: Bool = false
    ) {
        storage = Storage(
            origin: origin, head: head, body: body, idleTimeout: idleTimeout,
            proxy: proxy, tunnelAuthorization: tunnelAuthorization, upgrades: upgrades
        )
        self.deadline = deadline
    }
}

/// Why the transport could not complete a request. The `Courier` layer maps these to `URLError`.
public enum TransportError: Error, Sendable, CustomStringConvertible {
    /// No connection could be made ready: dialing, the TLS handshake or trust failed.
    case dial(DialFailure)
    /// Nothing moved for longer than the request's idle timeout.
    case timedOut
    /// The connection closed or failed mid-exchange; nil when the peer simply closed.
    case connectionLost(SystemError?)
    /// The server broke the protocol.
    case remoteProtocol(any RemoteProtocolError)
    /// The request cannot be sent as given.
    case localProtocol(any LocalProtocolError)
    /// Reading the request body failed, or it ended before its declared length.
    case bodyStream(String)
    /// The request was cancelled.
    case cancelled
    /// The session's transport was shut down.
    case shutDown

    public var description: String {
        switch self {
        case .dial(let failure): return failure.description
        case .timedOut: return "the request timed out"
        case .connectionLost(let error): return error.map { "connection lost: \($0)" } ?? "connection closed by the server"
        case .remoteProtocol(let error): return "bad response from the server: \(error)"
        case .localProtocol(let error): return error.description
        case .bodyStream(let why): return "request body stream failed: \(why)"
        case .cancelled: return "cancelled"
        case .shutDown: return "the session was invalidated"
        }
    }
}
