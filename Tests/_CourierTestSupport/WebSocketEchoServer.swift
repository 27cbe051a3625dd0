import CourierSync
import Foundation

/// A WebSocket server on 127.0.0.1 (PyPI `websockets`), plain and TLS (the test CA's server
/// certificate), both taking permessage-deflate when offered, and a plain one that never does;
/// run by the test harness and stopped by PID.
///
/// Paths: any path echoes each message back as it came (text as text, binary as binary);
/// `/close` closes at once with 1001 "going now"; `/burst` sends 200 numbered text messages and
/// then echoes; `/garbage` answers the handshake, then sends bytes that break RFC 6455 (a masked
/// frame). Offered subprotocols `chat` and `superchat` are accepted (the first the client
/// lists).
public final class WebSocketEchoServer: Sendable {
    public let port: Int
    public let tlsPort: Int
    /// A third server, plain, that never agrees to permessage-deflate.
    public let uncompressedPort: Int
    public let pid: Int32

    private static let sharedServer = Mutex<Result<WebSocketEchoServer, TestServerError>?>(nil)

    /// The server shared by a test process, started on first use.
    public static func shared() throws -> WebSocketEchoServer {
        try sharedServer.withLock { cached in
            if let cached { return try cached.get() }
            let result = Result { () throws(TestServerError) -> WebSocketEchoServer in try WebSocketEchoServer() }
            cached = result
            return try result.get()
        }
    }

    public func url(_ path: String) -> URL { URL(string: "ws://127.0.0.1:\(port)\(path)")! }
    /// The user and password `/auth` wants (Basic, realm "ws echo").
    public static let user = "wsuser"
    public static let password = "ws-secret"
    public func tlsURL(_ path: String) -> URL { URL(string: "wss://127.0.0.1:\(tlsPort)\(path)")! }
    public func uncompressedURL(_ path: String) -> URL { URL(string: "ws://127.0.0.1:\(uncompressedPort)\(path)")! }

    private static let program = """
    import asyncio, base64, ssl, sys
    from http import HTTPStatus
    from websockets.asyncio.server import serve

    # /auth wants Basic wsuser:ws-secret: without it, a 401 with a challenge.
    EXPECTED = "Basic " + base64.b64encode(b"wsuser:ws-secret").decode()
    def check(connection, request):
        if request.path == "/auth" and request.headers.get("Authorization") != EXPECTED:
            response = connection.respond(HTTPStatus.UNAUTHORIZED, "credentials, please\\n")
            response.headers["WWW-Authenticate"] = 'Basic realm="ws echo"'
            return response
        return None

    async def handler(ws):
        path = ws.request.path
        if path == "/close":
            await ws.close(1001, "going now")
            return
        if path == "/burst":
            for index in range(200):
                await ws.send("message %d" % index)
        if path == "/garbage":
            ws.transport.write(b"\\x81\\x85\\x01\\x02\\x03\\x04abcde")
            await asyncio.sleep(5)
            return
        async for message in ws:
            await ws.send(message)

    async def main():
        port, tls_port, plain_port, cert, key = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        def choose(connection, offered):
            return next((name for name in offered if name in ("chat", "superchat")), None)
        options = dict(select_subprotocol=choose, max_size=2 ** 24, process_request=check)
        async with serve(handler, "127.0.0.1", port, **options), serve(handler, "127.0.0.1", tls_port, ssl=context, **options), \\
                serve(handler, "127.0.0.1", plain_port, compression=None, **options):
            await asyncio.get_running_loop().create_future()

    asyncio.run(main())
    """

    /// Starts the server; throws when `websockets` is not installed or it does not come up.
    public init() throws(TestServerError) {
        let python = try pythonInterpreter(importing: ["websockets"], missing: "websockets")
        let certificates: TestCertificates
        do {
            certificates = try TestCertificates.make()
        } catch {
            throw TestServerError("the test certificates cannot be made: \(error)")
        }
        let directory = TestRun.makeDirectory("websockets")
        let port = freeLoopbackPort()
        let tlsPort = freeLoopbackPort()
        let uncompressedPort = freeLoopbackPort()
        let arguments = ["-c", Self.program, "\(port)", "\(tlsPort)", "\(uncompressedPort)", certificates.serverPEM, certificates.serverKey]
        self.pid = try startServerProcess(python, arguments, directory: directory, output: directory.appendingPathComponent("server.log"))
        self.port = port
        self.tlsPort = tlsPort
        self.uncompressedPort = uncompressedPort
        // The server answers a plain GET (no upgrade) with an HTTP error: it is up.
        guard waitForHTTPAnswer(port: port, path: "/", timeout: 30) else {
            stop()
            throw TestServerError("the websockets server did not answer on port \(port): see \(directory.path)/server.log")
        }
    }

    public func stop() {
        ChildProcesses.stop(pid)
        ChildProcesses.forget(pid)
    }
}
