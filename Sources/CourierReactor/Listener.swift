import CCourierLinux
import Glibc

/// A listening stream socket that hands each accepted connection to a callback, on its loop.
/// Used by the demo server of the command-line client and by tests.
public final class Listener: IOEventHandler {
    public let loop: EventLoop
    public let address: SocketAddress
    private var fd: Int32
    private var token: RegistrationToken?
    private let onAccept: (Int32) -> Void

    /// Binds and listens on `address` (port 0 picks a free one); loop thread only.
    /// `onAccept` receives each accepted non-blocking socket.
    public init(address: SocketAddress, loop: EventLoop, backlog: Int32 = 128, onAccept: @escaping (Int32) -> Void) throws(SystemError) {
        self.loop = loop
        self.onAccept = onAccept
        let fd = try Posix.socket(family: address.posixFamily)
        do throws(SystemError) {
            if case .unix(let path) = address {
                unlink(path)
            } else {
                Posix.setReuseAddress(fd)
            }
            try Posix.bind(fd, to: address)
            try Posix.listen(fd, backlog: backlog)
        } catch {
            Posix.close(fd)
            throw error
        }
        self.fd = fd
        self.address = Posix.localAddress(fd) ?? address
        self.token = try loop.register(fd: fd, interest: .readable, handler: self)
    }

    public func handleIOEvents(_ events: IOEvents) {
        while fd >= 0 {
            guard let client = try? Posix.accept(fd) else { return }
            onAccept(client)
        }
    }

    /// Stops listening.
    public func close() {
        guard fd >= 0 else { return }
        if let token { loop.deregister(token) }
        token = nil
        Posix.close(fd)
        fd = -1
    }
}
