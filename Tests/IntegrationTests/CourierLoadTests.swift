import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// `courier-load` run as its users run it, against nginx and scripted servers on loopback: what
/// it counts (requests, status classes, errors by kind, connections), its pipelining, its pacing,
/// its hard deadline and its exit status.
@Suite(.serialized)
struct CourierLoadTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    /// Runs courier-load with `--json` and returns its exit status and report.
    private func load(_ arguments: [String]) async throws -> (status: Int32, report: [String: Any], stderr: String) {
        let run = try #require(try await runCourier(arguments + ["--json"], program: "courier-load"), "courier-load is not built")
        let object = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any]
        return (run.status, try #require(object, "not JSON: \(run.stdout) \(run.stderr)"), run.stderr)
    }

    private func int(_ report: [String: Any], _ path: String...) -> Int? {
        var value: Any? = report
        for key in path { value = (value as? [String: Any])?[key] }
        return value as? Int
    }

    @Test func countsEveryRequestOverItsConnections() async throws {
        let run = try await load(["-n", "300", "-c", "3", nginx.url("/files/hello.txt").absoluteString])
        #expect(run.status == 0)
        #expect(int(run.report, "requests") == 300)
        #expect(int(run.report, "started") == 300)
        #expect(int(run.report, "failed") == 0)
        #expect(int(run.report, "statusCodes", "2xx") == 300)
        #expect(int(run.report, "connectionsUsed") == 3)
        let hello = try #require(NginxServer.fixtures["hello.txt"])
        #expect(int(run.report, "bytes") == 300 * hello.count)
    }

    @Test func http2StreamsOnOneConnection() async throws {
        let run = try await load(["-n", "200", "-m", "8", "--cacert", nginx.certificates.caPEM, nginx.tlsURL("good", "/files/hello.txt").absoluteString])
        #expect(run.status == 0)
        #expect(int(run.report, "requests") == 200)
        #expect(run.report["protocols"] as? [String] == ["h2"])
        #expect(int(run.report, "connectionsUsed") == 1)
    }

    @Test func statusErrorsAreResponses() async throws {
        let run = try await load(["-n", "5", nginx.url("/status/404").absoluteString])
        #expect(run.status == 0)
        #expect(int(run.report, "requests") == 5)
        #expect(int(run.report, "statusCodes", "4xx") == 5)
        #expect(int(run.report, "errors", "status") == 5)
    }

    /// The server reads all four requests before it answers any: they were pipelined.
    @Test func pipelinesRequests() async throws {
        let heard = Mutex<[String]>([])
        let server = try ScriptedServer { connection in
            var targets: [String] = []
            for _ in 0..<4 {
                guard let request = connection.readRequest() else { return }
                targets.append(request.target)
            }
            heard.withLock { $0 += targets }
            for index in 0..<4 { connection.respond(body: Array("answer \(index)".utf8)) }
            _ = connection.readToEOF()
        }
        defer { server.stop() }
        let run = try await load(["-n", "4", "-P", "4", server.url("/p?x=1").absoluteString])
        #expect(run.status == 0)
        #expect(int(run.report, "requests") == 4)
        #expect(int(run.report, "bytes") == 4 * 8)
        #expect(heard.withLock { $0 } == Array(repeating: "/p?x=1", count: 4))
        #expect(server.connectionCount == 1)
    }

    /// nginx's `keepalive_requests 10` closes every connection after ten answers; the requests
    /// pipelined behind the tenth go again on a new connection, and none is lost or counted twice.
    @Test func pipelinedRequestsOutliveClosedConnections() async throws {
        let url = "http://127.0.0.1:\(nginx.limitedPort)/files/hello.txt"
        let run = try await load(["-n", "100", "-P", "8", url])
        #expect(run.status == 0)
        #expect(int(run.report, "requests") == 100)
        #expect(int(run.report, "started") == 100)
        #expect(int(run.report, "failed") == 0)
        #expect(int(run.report, "statusCodes", "2xx") == 100)
        #expect((int(run.report, "connectionsUsed") ?? 0) >= 10)
    }

    /// A server that answers the first request with `Connection: close` and drops the rest: on
    /// the next connection the unanswered ones are sent again.
    @Test func pipelinedResendAfterConnectionClose() async throws {
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            connection.respond(headers: [("Connection", "close")], body: Array("one".utf8))
            connection.shutdownWrite()
        }
        defer { server.stop() }
        let run = try await load(["-n", "3", "-P", "3", server.url("/").absoluteString])
        #expect(run.status == 0)
        #expect(int(run.report, "requests") == 3)
        #expect(int(run.report, "failed") == 0)
        #expect(server.connectionCount == 3)
    }

    /// `-d` is a hard deadline: a server that never answers does not keep the run going until
    /// the 60-second timeout, the request in flight is reported as unfinished, and a run in
    /// which nothing got a response exits with 1.
    @Test(arguments: [[String](), ["-P", "2"]])
    func deadlineIsHard(extra: [String]) async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readToEOF(timeout: 120)
        }
        defer { server.stop() }
        let started = ContinuousClock.now
        let run = try await load(["-d", "1", "--timeout", "60s", server.url("/").absoluteString] + extra)
        #expect(ContinuousClock.now - started < .seconds(30))
        #expect(run.status == 1)
        #expect(int(run.report, "requests") == 0)
        #expect(int(run.report, "unfinished") == (extra.isEmpty ? 1 : 2))
        #expect(run.stderr.contains("no request got a response"))
    }

    @Test(arguments: [[String](), ["-P", "2"]])
    func timeoutsAreErrors(extra: [String]) async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readToEOF(timeout: 120)
        }
        defer { server.stop() }
        let run = try await load(["-n", "2", "--timeout", "200ms", server.url("/").absoluteString] + extra)
        #expect(run.status == 1)
        #expect(int(run.report, "errors", "timeout") == 2)
        #expect(int(run.report, "requests") == 0)
    }

    @Test(arguments: [[String](), ["-P", "2"]])
    func refusedConnectionsFailTheRun(extra: [String]) async throws {
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        let port = closed.port
        let run = try await load(["-n", "4", "http://127.0.0.1:\(port)/"] + extra)
        #expect(run.status == 1)
        #expect(int(run.report, "errors", "connect") == 4)
        #expect(run.stderr.contains("connect errors 4"))
    }

    /// With `-R`, requests start on a schedule: ten at 20 per second take at least 450 ms
    /// (however slow the machine), and latencies are measured from the schedule.
    @Test(arguments: [[String](), ["-P", "2"], ["-c", "2"]])
    func rateSpacesRequests(extra: [String]) async throws {
        let run = try await load(["-n", "10", "-R", "20", nginx.url("/files/hello.txt").absoluteString] + extra)
        #expect(run.status == 0)
        #expect(int(run.report, "requests") == 10)
        #expect(run.report["latencyCorrected"] as? Bool == true)
        #expect((run.report["seconds"] as? Double ?? 0) >= 0.44)
    }

    @Test func latencyDistributionInText() async throws {
        let run = try #require(try await runCourier(["-n", "50", "--latency", nginx.url("/files/hello.txt").absoluteString], program: "courier-load"))
        #expect(run.status == 0)
        let lines = run.stdout.split(separator: "\n").map(String.init)
        let heading = try #require(lines.firstIndex(of: "  Latency Distribution"))
        let rows = lines[(heading + 1)...].prefix(4).map { $0.split(separator: " ").first.map(String.init) }
        #expect(rows == ["50%", "75%", "90%", "99%"])
        #expect(lines.contains { $0.hasPrefix("  50 requests in ") })
        #expect(lines.contains { $0.hasPrefix("Requests/sec: ") })
    }

    /// A header that could not go on the wire stops the run before any request, with its reason.
    @Test func refusesABadHeaderAtOnce() async throws {
        let run = try #require(try await runCourier(["-n", "3", "-H", "Bad Name: x", nginx.url("/files/hello.txt").absoluteString], program: "courier-load"))
        #expect(run.status == 64)
        #expect(run.stderr.contains("bad header"))
        #expect(run.stderr.contains("Bad Name"))
    }

    @Test func refusesPipeliningOverHTTP2() async throws {
        let run = try #require(try await runCourier(["-P", "2", "--h2c", "http://127.0.0.1:1/"], program: "courier-load"))
        #expect(run.status == 64)
        #expect(run.stderr.contains("-P pipelines HTTP/1.1"))
    }
}
