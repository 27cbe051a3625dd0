import CourierCore

/// The address a SOCKS5 proxy is asked to connect to: one of RFC 1928 section 5's three
/// address types.
public enum SOCKS5Destination: Sendable, Equatable {
    /// A host name for the proxy to resolve (curl's `socks5h://`): 1 to 255 bytes of UTF-8,
    /// sent unchanged. An internationalized name must already be in its ASCII (A-label) form,
    /// and an IP literal belongs in ``ipv4(_:)`` or ``ipv6(_:)``, not here.
    case domain(String)
    /// An IPv4 address: exactly 4 bytes, most significant first.
    case ipv4([UInt8])
    /// An IPv6 address: exactly 16 bytes, most significant first.
    case ipv6([UInt8])
}

/// Why a SOCKS5 handshake cannot start or did not succeed.
///
/// ``invalidDestination(_:)`` and ``invalidCredentials(_:)`` are the caller's mistakes, thrown
/// only by ``SOCKS5Handshake/init(destination:port:credentials:)`` before any byte is sent; every
/// other case is the proxy's answer, thrown by ``SOCKS5Handshake/receive(_:)``. No case carries
/// a user name or password.
public enum SOCKS5Error: Error, Sendable, Equatable, CustomStringConvertible {
    /// The proxy's reply does not start with version 5: not a SOCKS5 proxy (an HTTP proxy
    /// answers with `H`, 0x48; a SOCKS4 proxy with 0 or 4).
    case notSOCKS5(version: UInt8)
    /// The proxy refused every method offered (method 0xFF) although a user name and password
    /// were offered too.
    case noAcceptableMethod
    /// The proxy chose an authentication method that was not offered.
    case unexpectedMethod(UInt8)
    /// The proxy refused every method offered (0xFF) when only "no authentication" was
    /// offered: it wants credentials, and none are configured.
    case credentialsRequired
    /// The proxy rejected the user name and password (RFC 1929 status other than 0).
    case authenticationFailed(status: UInt8)
    /// The proxy answered the user name and password with a sub-negotiation version other
    /// than 1.
    case badAuthenticationVersion(UInt8)
    /// The proxy could not open the connection to the destination (REP other than 0).
    case connectFailed(SOCKS5ReplyCode)
    /// The CONNECT reply breaks RFC 1928's format; the text says how.
    case malformedReply(String)
    /// The destination cannot be put in a CONNECT request; the text says why.
    case invalidDestination(String)
    /// The credentials cannot be put in an RFC 1929 request; the text says why, without the
    /// credentials themselves.
    case invalidCredentials(String)
    /// The proxy closed the connection instead of choosing a method: some proxies answer a
    /// greeting without an acceptable method so, rather than with 0xFF.
    case closedDuringMethodSelection(offeredCredentials: Bool)
    /// The proxy closed the connection instead of answering the user name and password: some
    /// proxies refuse credentials so, rather than with a status.
    case closedDuringAuthentication

    /// A sentence for the user that names what went wrong and, where it helps, what to change.
    public var description: String {
        switch self {
        case .notSOCKS5(let version):
            return "the proxy did not answer as a SOCKS5 proxy (version byte \(hexByte(version))): check the proxy's address and type"
        case .noAcceptableMethod:
            return "the SOCKS5 proxy accepts neither anonymous access nor a user name and password"
        case .unexpectedMethod(let method):
            return "the SOCKS5 proxy chose authentication method \(hexByte(method)), which was not offered"
        case .credentialsRequired:
            return "the SOCKS5 proxy requires a user name and password: configure them with the proxy"
        case .authenticationFailed(let status):
            return "the SOCKS5 proxy rejected the user name and password (status \(hexByte(status)))"
        case .badAuthenticationVersion(let version):
            return "the SOCKS5 proxy answered the user name and password with version \(hexByte(version)) instead of 0x01"
        case .connectFailed(let code):
            return "the SOCKS5 proxy could not connect: \(code)"
        case .malformedReply(let why):
            return "malformed SOCKS5 reply: \(why)"
        case .invalidDestination(let why):
            return "cannot ask a SOCKS5 proxy for this destination: \(why)"
        case .invalidCredentials(let why):
            return "cannot send these SOCKS5 proxy credentials: \(why)"
        case .closedDuringMethodSelection(let offeredCredentials):
            return offeredCredentials
                ? "the SOCKS5 proxy closed the connection without choosing an authentication method"
                : "the SOCKS5 proxy closed the connection without choosing an authentication method: it may require a user name and password"
        case .closedDuringAuthentication:
            return "the SOCKS5 proxy closed the connection instead of accepting the user name and password: they were refused"
        }
    }
}

/// The REP field of a SOCKS5 reply (RFC 1928 section 6): 0 is success, anything else says why
/// the proxy could not reach the destination. Codes past 8 are unassigned and kept as they came.
public struct SOCKS5ReplyCode: RawRepresentable, Sendable, Equatable, CustomStringConvertible {
    /// The byte as the proxy sent it.
    public var rawValue: UInt8

    /// Wraps a REP byte; every value is accepted.
    public init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    /// 0x01: the proxy failed for a reason of its own.
    public static let generalFailure = SOCKS5ReplyCode(rawValue: 0x01)
    /// 0x02: the proxy's rules forbid this connection.
    public static let notAllowedByRuleset = SOCKS5ReplyCode(rawValue: 0x02)
    /// 0x03: the proxy has no route to the destination's network.
    public static let networkUnreachable = SOCKS5ReplyCode(rawValue: 0x03)
    /// 0x04: the destination host did not answer the proxy.
    public static let hostUnreachable = SOCKS5ReplyCode(rawValue: 0x04)
    /// 0x05: the destination refused the proxy's connection.
    public static let connectionRefused = SOCKS5ReplyCode(rawValue: 0x05)
    /// 0x06: the proxy's connection attempt timed out.
    public static let ttlExpired = SOCKS5ReplyCode(rawValue: 0x06)
    /// 0x07: the proxy does not support the CONNECT command.
    public static let commandNotSupported = SOCKS5ReplyCode(rawValue: 0x07)
    /// 0x08: the proxy does not support the destination's address type (often: it will not
    /// resolve host names, so the name must be resolved locally).
    public static let addressTypeNotSupported = SOCKS5ReplyCode(rawValue: 0x08)

    /// The code in words, as RFC 1928 names it; an unassigned code as `reply code 0xNN`.
    public var description: String {
        switch rawValue {
        case 0x00: return "succeeded"
        case 0x01: return "general SOCKS server failure"
        case 0x02: return "connection not allowed by ruleset"
        case 0x03: return "network unreachable"
        case 0x04: return "host unreachable"
        case 0x05: return "connection refused"
        case 0x06: return "TTL expired"
        case 0x07: return "command not supported"
        case 0x08: return "address type not supported"
        default: return "reply code \(hexByte(rawValue))"
        }
    }
}

/// The client side of a SOCKS5 handshake (RFC 1928) with optional username/password
/// sub-negotiation (RFC 1929), as a value fed the proxy's bytes. It opens no socket: the
/// caller writes ``greeting()`` and every ``Step/send(_:)``, and hands over what it reads.
///
/// Design note: the exchange is three request/reply rounds, the middle one optional:
///
/// 1. method selection: `05 n methods…` → `05 method` (RFC 1928 section 3);
/// 2. when the proxy picks method 2: `01 ulen user plen password` → `01 status` (RFC 1929
///    section 2);
/// 3. CONNECT: `05 01 00 atyp address port` → `05 rep rsv atyp address port` (RFC 1928
///    sections 4 and 6), whose bound address is 4, 16 or 1 + n bytes by its type.
///
/// A reply may arrive in any slices; the handshake copies the bytes of the reply it awaits into
/// a small buffer (at most ``maxReplyBytes``) and never reads past that reply's end, so bytes the
/// proxy sends after the CONNECT reply stay with the caller: they are the tunnel's. Each byte
/// is checked as soon as it arrives (a wrong version byte or a failure code fails at once,
/// without waiting for the rest of the reply). The reserved byte of the CONNECT reply is not
/// checked, and the bound address is read only to find where the reply ends.
///
/// States and their legal successors:
/// - awaiting the method selection → awaiting the authentication reply (method 2), awaiting
///   the CONNECT reply (method 0), failed
/// - awaiting the authentication reply → awaiting the CONNECT reply (status 0), failed
/// - awaiting the CONNECT reply → established (REP 0), failed
/// - established: terminal; nothing more is read
/// - failed: terminal; every call rethrows the error
public struct SOCKS5Handshake: Sendable {
    /// What one call to ``receive(_:)`` reached.
    public enum Step: Sendable, Equatable {
        /// The reply awaited is not complete: every byte given was taken, and more are needed.
        case needMore
        /// A reply is complete and these bytes must be written to the proxy next (the
        /// username/password request or the CONNECT request).
        case send([UInt8])
        /// The CONNECT reply is complete: the connection is now a tunnel to the destination.
        case established
    }

    /// The reply the handshake waits for.
    enum Reply: Sendable, Equatable {
        /// The method selection: `VER METHOD`, 2 bytes.
        case methodSelection
        /// The RFC 1929 status: `VER STATUS`, 2 bytes.
        case authentication
        /// The CONNECT reply: `VER REP RSV ATYP BND.ADDR BND.PORT`, 7 to 262 bytes.
        case connect
    }

    /// Where the handshake stands.
    enum Phase: Sendable, Equatable {
        /// Waiting for (the rest of) a reply. The method selection leads to the authentication
        /// reply or the CONNECT reply, the authentication reply to the CONNECT reply, the CONNECT
        /// reply to `established`; any of them to `failed`.
        case awaiting(Reply)
        /// The tunnel is open. Terminal: nothing more is read.
        case established
        /// The proxy broke the protocol or refused. Terminal: every call rethrows the error.
        case failed(SOCKS5Error)
    }

    /// The longest legal reply, in bytes: a CONNECT reply with a 255-byte host name
    /// (4 header bytes, a length byte, the name, 2 port bytes).
    public static let maxReplyBytes = 4 + 1 + 255 + 2

    /// The protocol version of every SOCKS5 message (RFC 1928 section 3).
    static let socksVersion: UInt8 = 0x05
    /// The version of the username/password sub-negotiation (RFC 1929 section 2).
    static let userPasswordVersion: UInt8 = 0x01
    /// The CONNECT command (RFC 1928 section 4).
    static let connectCommand: UInt8 = 0x01
    /// Longest user name, password or host name: each is sent behind a one-byte length.
    static let maxFieldBytes = 255

    /// Authentication method numbers (RFC 1928 section 3).
    enum Method {
        /// No authentication required.
        static let noAuthentication: UInt8 = 0x00
        /// Username/password (RFC 1929).
        static let userPassword: UInt8 = 0x02
        /// No acceptable method: the proxy refuses every method offered.
        static let noneAcceptable: UInt8 = 0xFF
    }

    /// Address types (RFC 1928 section 5).
    enum AddressType {
        /// Four bytes of IPv4 address.
        static let ipv4: UInt8 = 0x01
        /// A length byte and that many bytes of host name.
        static let domain: UInt8 = 0x03
        /// Sixteen bytes of IPv6 address.
        static let ipv6: UInt8 = 0x04
    }

    var phase: Phase = .awaiting(.methodSelection)
    /// Whether credentials are configured, so method 2 is offered.
    let offersUserPassword: Bool
    /// The RFC 1929 request; emptied once handed over, so the password is not kept longer
    /// than needed.
    var authenticationRequest: [UInt8]
    /// The CONNECT request for the destination.
    let connectRequest: [UInt8]
    /// The bytes of the awaited reply received so far; never more than ``maxReplyBytes``.
    var reply: [UInt8] = []

    /// Prepares a handshake that asks the proxy to connect to `destination` on `port`,
    /// offering a user name and password when `credentials` is set.
    ///
    /// Throws ``SOCKS5Error/invalidDestination(_:)`` for an empty host name, one longer than
    /// 255 bytes of UTF-8, or an address of the wrong length, and
    /// ``SOCKS5Error/invalidCredentials(_:)`` for an empty user name or a user name or password
    /// longer than 255 bytes. RFC 1929 asks for a password of at least one byte, but an empty
    /// password is allowed and sent with length 0, as curl does: a proxy that refuses it says
    /// so with a failure status.
    public init(destination: SOCKS5Destination, port: UInt16, credentials: ProxyServer.Credentials?) throws(SOCKS5Error) {
        var request: [UInt8] = [Self.socksVersion, Self.connectCommand, 0x00]
        switch destination {
        case .domain(let name):
            let bytes = Array(name.utf8)
            guard !bytes.isEmpty else { throw .invalidDestination("the host name is empty") }
            guard bytes.count <= Self.maxFieldBytes else {
                throw .invalidDestination("the host name is \(bytes.count) bytes long, more than SOCKS5's 255")
            }
            request.append(AddressType.domain)
            request.append(UInt8(truncatingIfNeeded: bytes.count))
            request += bytes
        case .ipv4(let address):
            guard address.count == 4 else { throw .invalidDestination("an IPv4 address is 4 bytes, not \(address.count)") }
            request.append(AddressType.ipv4)
            request += address
        case .ipv6(let address):
            guard address.count == 16 else { throw .invalidDestination("an IPv6 address is 16 bytes, not \(address.count)") }
            request.append(AddressType.ipv6)
            request += address
        }
        request.append(UInt8(truncatingIfNeeded: port >> 8))
        request.append(UInt8(truncatingIfNeeded: port))
        connectRequest = request

        if let credentials {
            let user = Array(credentials.user.utf8)
            let password = Array(credentials.password.utf8)
            guard !user.isEmpty else { throw .invalidCredentials("the user name is empty") }
            guard user.count <= Self.maxFieldBytes else { throw .invalidCredentials("the user name is longer than 255 bytes") }
            guard password.count <= Self.maxFieldBytes else { throw .invalidCredentials("the password is longer than 255 bytes") }
            var authentication: [UInt8] = [Self.userPasswordVersion, UInt8(truncatingIfNeeded: user.count)]
            authentication += user
            authentication.append(UInt8(truncatingIfNeeded: password.count))
            authentication += password
            authenticationRequest = authentication
            offersUserPassword = true
        } else {
            authenticationRequest = []
            offersUserPassword = false
        }
        reply.reserveCapacity(Self.maxReplyBytes)
    }

    /// The first message to write to the proxy: version 5 and the methods offered, "no
    /// authentication" (0x00) always and "username/password" (0x02) after it when credentials
    /// are configured, so a proxy that needs none is never sent them.
    public func greeting() -> [UInt8] {
        offersUserPassword
            ? [Self.socksVersion, 2, Method.noAuthentication, Method.userPassword]
            : [Self.socksVersion, 1, Method.noAuthentication]
    }

    /// What the proxy closing the connection now means: an error when it closed before the
    /// method selection or the authentication reply (a refusal some proxies express so), nil
    /// when it closed while connecting, after the handshake ended, or when failed already.
    public var closedByProxy: SOCKS5Error? {
        switch phase {
        case .awaiting(.methodSelection): return .closedDuringMethodSelection(offeredCredentials: offersUserPassword)
        case .awaiting(.authentication): return .closedDuringAuthentication
        default: return nil
        }
    }

    /// True once the CONNECT reply has been read and the connection is a tunnel.
    public var isEstablished: Bool {
        phase == .established
    }

    /// Reads the proxy's bytes, in any slices, and returns the first step reached with how
    /// many bytes of `input` it used.
    ///
    /// - `.needMore`: all of `input` was taken; call again when more arrives.
    /// - `.send(bytes)`: a reply is complete; write `bytes` to the proxy, then call again with
    ///   the rest of `input` (normally none: a proxy waits for the request).
    /// - `.established`: the CONNECT reply, bound address included, is complete; the bytes of
    ///   `input` after `consumed` belong to the tunnel.
    ///
    /// Once established, the handshake reads nothing more: every call returns `.established`
    /// with 0 consumed. Once a call has thrown, every later call throws the same error.
    public mutating func receive(_ input: UnsafeRawBufferPointer) throws(SOCKS5Error) -> (step: Step, consumed: Int) {
        do {
            return try advance(input)
        } catch {
            phase = .failed(error)
            reply = []
            authenticationRequest = []
            throw error
        }
    }

    private mutating func advance(_ input: UnsafeRawBufferPointer) throws(SOCKS5Error) -> (step: Step, consumed: Int) {
        var offset = 0
        while true {
            switch phase {
            case .failed(let error):
                throw error
            case .established:
                return (.established, offset)
            case .awaiting(let expected):
                // Checks the bytes gathered so far and learns how long the reply is.
                let length = try replyLength(expected)
                if reply.count == length {
                    let step = try finish(expected)
                    return (step, offset)
                }
                guard offset < input.count else { return (.needMore, offset) }
                let take = Swift.min(length - reply.count, input.count - offset)
                reply.append(contentsOf: input[offset..<(offset + take)])
                offset += take
            }
        }
    }

    /// Validates the bytes of the awaited reply gathered so far and returns the reply's whole
    /// length as far as they tell it (a CONNECT reply's length is known only from its address
    /// type and, for a host name, its length byte). Never more than ``maxReplyBytes``.
    private func replyLength(_ expected: Reply) throws(SOCKS5Error) -> Int {
        switch expected {
        case .methodSelection:
            if reply.count >= 1, reply[0] != Self.socksVersion { throw .notSOCKS5(version: reply[0]) }
            return 2
        case .authentication:
            if reply.count >= 1, reply[0] != Self.userPasswordVersion { throw .badAuthenticationVersion(reply[0]) }
            return 2
        case .connect:
            if reply.count >= 1, reply[0] != Self.socksVersion { throw .notSOCKS5(version: reply[0]) }
            // A failure fails at once: the bound address of a refusal is of no use, and some
            // proxies close the connection without sending it.
            if reply.count >= 2, reply[1] != 0 { throw .connectFailed(SOCKS5ReplyCode(rawValue: reply[1])) }
            // reply[2] is RSV: ignored.
            guard reply.count >= 4 else { return 4 }
            switch reply[3] {
            case AddressType.ipv4:
                return 4 + 4 + 2
            case AddressType.ipv6:
                return 4 + 16 + 2
            case AddressType.domain:
                // An empty bound name (length 0) is accepted: only its end matters here.
                guard reply.count >= 5 else { return 5 }
                return 4 + 1 + Int(reply[4]) + 2
            default:
                throw .malformedReply("unknown address type \(hexByte(reply[3])) in the CONNECT reply")
            }
        }
    }

    /// Acts on a complete reply: moves to the next phase and returns what to send, or throws.
    private mutating func finish(_ expected: Reply) throws(SOCKS5Error) -> Step {
        let answer = reply[1]
        reply.removeAll(keepingCapacity: true)
        switch expected {
        case .methodSelection:
            switch answer {
            case Method.noAuthentication:
                phase = .awaiting(.connect)
                authenticationRequest = []
                return .send(connectRequest)
            case Method.userPassword where offersUserPassword:
                phase = .awaiting(.authentication)
                let request = authenticationRequest
                authenticationRequest = []
                return .send(request)
            case Method.noneAcceptable:
                throw offersUserPassword ? SOCKS5Error.noAcceptableMethod : SOCKS5Error.credentialsRequired
            default:
                throw .unexpectedMethod(answer)
            }
        case .authentication:
            guard answer == 0 else { throw .authenticationFailed(status: answer) }
            phase = .awaiting(.connect)
            return .send(connectRequest)
        case .connect:
            // REP was checked as it arrived: this reply is a success.
            phase = .established
            return .established
        }
    }
}

/// `0xNN`, upper-case, two digits.
private func hexByte(_ byte: UInt8) -> String {
    let digits = String(byte, radix: 16, uppercase: true)
    return byte < 0x10 ? "0x0" + digits : "0x" + digits
}
