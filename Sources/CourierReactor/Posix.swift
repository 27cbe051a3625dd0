import CCourierLinux
import Glibc

/// Thin wrappers over the socket calls the reactor makes, turning -1 into `SystemError`.
/// Every socket is non-blocking and close-on-exec; writes never raise SIGPIPE.
enum Posix {
    static func socket(family: Int32) throws(SystemError) -> Int32 {
        let fd = Glibc.socket(family, courier_SOCK_STREAM | courier_SOCK_NONBLOCK | courier_SOCK_CLOEXEC, 0)
        guard fd >= 0 else { throw .last("socket") }
        return fd
    }

    /// Starts a non-blocking connect. Returns true when it completed at once, false when it is
    /// in progress (EINPROGRESS), and throws when it failed.
    static func connect(_ fd: Int32, to address: SocketAddress) throws(SystemError) -> Bool {
        let result = address.withSockAddr { pointer, length in retryingOnInterrupt { Glibc.connect(fd, pointer, length) } }
        if result == 0 { return true }
        // Only EINPROGRESS means "connecting". EAGAIN is a failure: a full Unix-socket backlog,
        // or no local port left for TCP.
        if errno == EINPROGRESS { return false }
        throw .last("connect")
    }

    /// The pending error of a socket (SO_ERROR), 0 when there is none.
    static func pendingError(_ fd: Int32) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) != 0 { return errno }
        return value
    }

    static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    static func setReuseAddress(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    static func bind(_ fd: Int32, to address: SocketAddress) throws(SystemError) {
        let result = address.withSockAddr { Glibc.bind(fd, $0, $1) }
        guard result == 0 else { throw .last("bind") }
    }

    static func listen(_ fd: Int32, backlog: Int32) throws(SystemError) {
        guard Glibc.listen(fd, backlog) == 0 else { throw .last("listen") }
    }

    /// Accepts one connection, or returns nil when none is waiting.
    static func accept(_ fd: Int32) throws(SystemError) -> Int32? {
        let client = retryingOnInterrupt { courier_accept4(fd, courier_SOCK_NONBLOCK | courier_SOCK_CLOEXEC) }
        if client >= 0 { return client }
        if errno == EAGAIN || errno == EWOULDBLOCK { return nil }
        throw .last("accept")
    }

    static func localAddress(_ fd: Int32) -> SocketAddress? {
        address(fd, getsockname)
    }

    static func remoteAddress(_ fd: Int32) -> SocketAddress? {
        address(fd, getpeername)
    }

    private static func address(
        _ fd: Int32, _ call: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32
    ) -> SocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(fd, $0, &length) }
        }
        guard result == 0 else { return nil }
        return withUnsafePointer(to: &storage) { SocketAddress($0) }
    }

    static func close(_ fd: Int32) {
        _ = Glibc.close(fd)
    }
}
