import CCourierLinux
import Glibc

/// An IPv4, IPv6 or Unix-domain socket address.
public enum SocketAddress: Sendable, Hashable, CustomStringConvertible {
    case v4(host: [UInt8], port: UInt16)
    case v6(host: [UInt8], port: UInt16, scopeID: UInt32)
    case unix(path: String)

    /// The address family, for Happy Eyeballs ordering.
    public enum Family: Sendable, Hashable { case inet, inet6, unix }

    public var family: Family {
        switch self {
        case .v4: return .inet
        case .v6: return .inet6
        case .unix: return .unix
        }
    }

    /// Parses a numeric IPv4 or IPv6 address (no brackets), or returns nil.
    public init?(numericHost: String, port: UInt16) {
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, numericHost, &v4) == 1 {
            self = .v4(host: withUnsafeBytes(of: v4) { Array($0) }, port: port)
        } else if inet_pton(AF_INET6, numericHost, &v6) == 1 {
            self = .v6(host: withUnsafeBytes(of: v6) { Array($0) }, port: port, scopeID: 0)
        } else {
            return nil
        }
    }

    /// The port, or nil for Unix-domain addresses.
    public var port: UInt16? {
        switch self {
        case .v4(_, let port), .v6(_, let port, _): return port
        case .unix: return nil
        }
    }

    /// The host part as text: dotted IPv4, RFC 5952 IPv6, or the socket path.
    public var hostString: String {
        switch self {
        case .v4(let host, _): return Self.presentation(AF_INET, host)
        case .v6(let host, _, _): return Self.presentation(AF_INET6, host)
        case .unix(let path): return path
        }
    }

    public var description: String {
        switch self {
        case .v4(_, let port): return "\(hostString):\(port)"
        case .v6(_, let port, _): return "[\(hostString)]:\(port)"
        case .unix(let path): return "unix:\(path)"
        }
    }

    private static func presentation(_ family: Int32, _ bytes: [UInt8]) -> String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        _ = bytes.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &buffer, socklen_t(buffer.count)) }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Lends the address as a `sockaddr` for a system call.
    func withSockAddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        switch self {
        case .v4(let host, let port):
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            withUnsafeMutableBytes(of: &address.sin_addr) { $0.copyBytes(from: host) }
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        case .v6(let host, let port, let scopeID):
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = port.bigEndian
            address.sin6_scope_id = scopeID
            withUnsafeMutableBytes(of: &address.sin6_addr) { $0.copyBytes(from: host) }
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        case .unix(let path):
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let capacity = MemoryLayout.size(ofValue: address.sun_path)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                let bytes = Array(path.utf8.prefix(capacity - 1))
                raw.copyBytes(from: bytes)
                raw[bytes.count] = 0
            }
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
        }
    }

    /// Reads an address a system call filled in.
    init?(_ storage: UnsafePointer<sockaddr_storage>) {
        switch Int32(storage.pointee.ss_family) {
        case AF_INET:
            let address = UnsafeRawPointer(storage).load(as: sockaddr_in.self)
            self = .v4(host: withUnsafeBytes(of: address.sin_addr) { Array($0) }, port: UInt16(bigEndian: address.sin_port))
        case AF_INET6:
            let address = UnsafeRawPointer(storage).load(as: sockaddr_in6.self)
            self = .v6(
                host: withUnsafeBytes(of: address.sin6_addr) { Array($0) },
                port: UInt16(bigEndian: address.sin6_port), scopeID: address.sin6_scope_id
            )
        case AF_UNIX:
            let path = UnsafeRawPointer(storage).withMemoryRebound(to: sockaddr_un.self, capacity: 1) { pointer in
                withUnsafeBytes(of: pointer.pointee.sun_path) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
            }
            self = .unix(path: path)
        default:
            return nil
        }
    }

    var posixFamily: Int32 {
        switch self {
        case .v4: return AF_INET
        case .v6: return AF_INET6
        case .unix: return AF_UNIX
        }
    }
}
