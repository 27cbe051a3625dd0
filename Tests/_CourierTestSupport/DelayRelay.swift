import Foundation

/// A TCP relay on 127.0.0.1 that holds every chunk it forwards, each way, for a fixed delay:
/// a long round trip between a client and a server that both run on loopback, where the kernel
/// offers no netem. It reads without limit and keeps order, so it adds latency and takes none
/// of the bandwidth away (the server's own flow control still applies). A Python asyncio
/// process, stopped by PID.
public final class DelayRelay: Sendable {
    /// Where clients connect.
    public let port: Int
    public let pid: Int32

    /// Starts a relay to 127.0.0.1:`targetPort` that delays each direction by `delay`. With
    /// `serverStartOnly`, it delays only what the server sends within that long of each
    /// connection's start, and nothing the client sends: a round trip that is long at the
    /// start only.
    public init(to targetPort: Int, delay: Duration, serverStartOnly: Duration? = nil) throws {
        let python = try pythonInterpreter(importing: ["asyncio"], missing: "asyncio")
        let directory = TestRun.makeDirectory("delay-relay")
        let script = directory.appendingPathComponent("relay.py")
        try Self.source.write(to: script, atomically: true, encoding: .utf8)
        let port = freeLoopbackPort()
        func seconds(_ duration: Duration) -> Double {
            Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        }
        let arguments = [script.path, String(port), String(targetPort), String(seconds(delay)), String(serverStartOnly.map(seconds) ?? 0)]
        pid = try startServerProcess(python, ["-u"] + arguments, directory: directory)
        self.port = port
        guard waitForListener(port: port) else {
            stop()
            throw TestServerError("the delay relay did not start on port \(port)")
        }
    }

    public func stop() {
        ChildProcesses.stop(pid)
        ChildProcesses.forget(pid)
    }

    deinit { stop() }

    /// Each connection gets one to the target; each direction is read into a queue stamped
    /// with when its bytes may go on, and written from it in order at that time. A window
    /// above 0 delays only the server's bytes read before the connection is that old.
    static let source = """
        import asyncio, sys, time

        listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
        delay, window = float(sys.argv[3]), float(sys.argv[4])

        async def carry(reader, writer, delay, until):
            queue = asyncio.Queue()

            async def send():
                while True:
                    due, data = await queue.get()
                    if data is None:
                        break
                    wait = due - time.monotonic()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    writer.write(data)
                    await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()

            sender = asyncio.ensure_future(send())
            try:
                while True:
                    data = await reader.read(262144)
                    if not data:
                        break
                    now = time.monotonic()
                    queue.put_nowait((now + (delay if until is None or now < until else 0), data))
            finally:
                queue.put_nowait((0, None))
                await sender

        async def relay(client_reader, client_writer):
            try:
                server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
            except OSError:
                client_writer.close()
                return
            if window > 0:
                upstream, downstream = (0, None), (delay, time.monotonic() + window)
            else:
                upstream, downstream = (delay, None), (delay, None)
            await asyncio.gather(
                carry(client_reader, server_writer, *upstream), carry(server_reader, client_writer, *downstream),
                return_exceptions=True
            )
            client_writer.close()
            server_writer.close()

        async def main():
            server = await asyncio.start_server(relay, "127.0.0.1", listen_port)
            async with server:
                await server.serve_forever()

        asyncio.run(main())
        """
}
