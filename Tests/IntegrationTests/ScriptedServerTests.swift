import Foundation
import Testing
import _CourierTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// The scripted server's own lifetime: the tests that use it count on it ending when they let
/// it go, leaving no thread waiting in `accept` and no connection open.
@Suite struct ScriptedServerTests {
    /// Makes a server whose script reads until its connection ends, connects to it, waits
    /// until the script runs, and lets the server go; returns the connected socket.
    private func connectThenLetGo() async throws -> Int32 {
        let server = try ScriptedServer { connection in _ = connection.readToEOF(timeout: 60) }
        let client = try #require(connectToLoopback(port: server.port))
        let accepted = await pollUntil { server.connectionCount == 1 }
        #expect(accepted)
        return client
    }

    @Test("a server let go ends its connections: the client reads the end of the stream")
    func serverLetGoEndsItsConnections() async throws {
        let client = try await connectThenLetGo()
        defer { close(client) }
        let ended = await onOwnThread { () -> Bool in
            var timeout = timeval(tv_sec: 30, tv_usec: 0)
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var byte: UInt8 = 0
            return recv(client, &byte, 1, 0) == 0
        }
        #expect(ended, "the connection of a server no one holds any more is shut down")
    }
}
