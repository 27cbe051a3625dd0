import CCourierLinux
import Glibc

/// Why a name could not be resolved.
public enum ResolutionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The name does not exist (EAI_NONAME, EAI_NODATA).
    case hostNotFound(String)
    /// The lookup could not be completed now (EAI_AGAIN, EAI_FAIL, a system error).
    case lookupFailed(String, detail: String)

    public var description: String {
        switch self {
        case .hostNotFound(let host): return "no address found for \(host)"
        case .lookupFailed(let host, let detail): return "lookup of \(host) failed: \(detail)"
        }
    }
}

/// Resolves names with getaddrinfo on blocking threads and answers on the caller's loop.
/// Numeric addresses are answered at once, without a thread.
public struct Resolver: Sendable {
    private let pool: BlockingPool

    public init(pool: BlockingPool = .shared) {
        self.pool = pool
    }

    /// Looks up `host` for one address family and calls `completion` on `loop`.
    public func resolve(
        host: String, port: UInt16, family: SocketAddress.Family, on loop: EventLoop,
        completion: @escaping (Result<[SocketAddress], ResolutionError>) -> Void
    ) {
        let bound = LoopBound(completion, loop: loop)
        pool.submit {
            let result = Self.lookUp(host: host, port: port, family: family)
            loop.execute { bound.value(result) }
        }
    }

    /// A blocking getaddrinfo for one family.
    public static func lookUp(host: String, port: UInt16, family: SocketAddress.Family) -> Result<[SocketAddress], ResolutionError> {
        var hints = addrinfo()
        hints.ai_family = family == .inet6 ? AF_INET6 : AF_INET
        hints.ai_socktype = courier_SOCK_STREAM
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        defer { if let list { freeaddrinfo(list) } }
        guard status == 0 else {
            if status == EAI_NONAME || status == courier_eai_nodata() || status == courier_eai_addrfamily() {
                return .failure(.hostNotFound(host))
            }
            let detail = status == EAI_SYSTEM ? String(cString: strerror(errno)) : String(cString: gai_strerror(status))
            return .failure(.lookupFailed(host, detail: detail))
        }
        var addresses: [SocketAddress] = []
        var node = list
        while let current = node {
            if let address = current.pointee.ai_addr {
                var storage = sockaddr_storage()
                withUnsafeMutableBytes(of: &storage) { raw in
                    raw.copyMemory(from: UnsafeRawBufferPointer(start: address, count: Int(current.pointee.ai_addrlen)))
                }
                if let parsed = withUnsafePointer(to: &storage, { SocketAddress($0) }), !addresses.contains(parsed) {
                    addresses.append(parsed)
                }
            }
            node = current.pointee.ai_next
        }
        return addresses.isEmpty ? .failure(.hostNotFound(host)) : .success(addresses)
    }
}
