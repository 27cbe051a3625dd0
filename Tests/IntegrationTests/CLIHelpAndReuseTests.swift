import Foundation
import Testing
import _CourierTestSupport

/// `courier --help` laid out as curl's, `-v` as the connection happens, and one command's URLs
/// sharing connections.
struct CLIHelpAndReuseTests {
    private func longOptions(_ text: String) throws -> Set<String> {
        let pattern = try NSRegularExpression(pattern: "(?<![A-Za-z0-9-])--([a-z0-9][a-z0-9.-]*[a-z0-9])")
        let range = NSRange(text.startIndex..., in: text)
        return Set(pattern.matches(in: text, range: range).compactMap { Range($0.range(at: 1), in: text).map { String(text[$0]) } })
    }

    /// Every option the parser knows (its full help, `--manual`) has its line in `--help all`,
    /// and `--help all` names nothing the parser does not take, but for the ones courier handles
    /// before parsing (`--manual`, `-K`/`--config`).
    @Test func helpAllListsEveryOption() async throws {
        let all = try #require(try await runCourier(["--help", "all"]))
        let manual = try #require(try await runCourier(["--manual"]))
        #expect(all.status == 0 && manual.status == 0)
        let lines = all.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "Usage: courier [options...] <url>")
        // The option each line is about: its first --word (summaries may name others).
        let listed = Set(lines.dropFirst().compactMap { line in
            line.split(separator: " ").first { $0.hasPrefix("--") }.map { String($0.dropFirst(2)) }
        })
        var parsed = try longOptions(manual.stdout)
        parsed.formUnion(["manual", "config"])
        #expect(listed.count == lines.count - 1)
        #expect(parsed.subtracting(listed).isEmpty, "not in --help all: \(parsed.subtracting(listed).sorted())")
        #expect(listed.subtracting(parsed).isEmpty, "in --help all but not taken: \(listed.subtracting(parsed).sorted())")
    }

    @Test func helpShowsTheEverydayOptionsAndCategories() async throws {
        let help = try #require(try await runCourier(["-h"]))
        #expect(help.status == 0)
        let lines = help.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "Usage: courier [options...] <url>")
        for option in [" -d, --data <data>", " -o, --output <file>", " -v, --verbose", " -V, --version"] {
            #expect(lines.contains { $0.hasPrefix(option) }, "missing \(option)")
        }
        #expect(!lines.contains { $0.contains("--socks5") })
        #expect(help.stdout.contains("\"--help all\""))

        let categories = try #require(try await runCourier(["--help", "category"]))
        #expect(categories.stdout.split(separator: "\n").contains { $0.hasPrefix(" proxy ") })
        let proxy = try #require(try await runCourier(["--help", "proxy"]))
        #expect(proxy.stdout.contains("--socks5-hostname"))
        #expect(!proxy.stdout.contains("--data"))

        let unknown = try #require(try await runCourier(["--help", "nonsense"]))
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("no help category named \"nonsense\""))
    }

    @Test func shortVersionFlag() async throws {
        let run = try #require(try await runCourier(["-V"]))
        #expect(run.status == 0)
        #expect(run.stdout.hasPrefix("courier "))
    }

    /// The URLs of one command go over one connection, as curl's do, and each is fetched: the
    /// shared session keeps no cache.
    @Test func urlsOfOneCommandShareAConnection() async throws {
        let server = try ScriptedServer { connection in
            var count = 0
            while let request = connection.readRequest() {
                count += 1
                connection.respond(headers: [("Cache-Control", "max-age=3600")], body: Array("[\(request.target) \(count)]".utf8))
            }
        }
        defer { server.stop() }
        // The same URL twice, cacheable for an hour: both go to the server, as with curl.
        let urls = [server.url("/one"), server.url("/two"), server.url("/one")].map(\.absoluteString)
        let run = try #require(try await runCourier(["-s"] + urls))
        #expect(run.status == 0)
        #expect(run.stdout == "[/one 1][/two 2][/one 3]")
        #expect(server.connectionCount == 1)
    }

    /// The same over TLS against nginx: the server-trust decision (--cacert) is made once, for the
    /// connection both URLs use, and -w reports the second transfer's connection as reused.
    @Test func tlsURLsShareAConnection() async throws {
        let nginx = try NginxServer.shared()
        let url = nginx.tlsURL("good", "/files/hello.txt").absoluteString
        let run = try #require(
            try await runCourier(["-s", "--cacert", nginx.certificates.caPEM, "-o", "/dev/null", "-o", "/dev/null", "-w", "%{num_connects}\n", url, url])
        )
        #expect(run.status == 0)
        #expect(run.stdout == "1\n0\n")
    }

    /// The lines of `text` that start with one of `prefixes`, in order, each the first after the last.
    private func ordered(_ text: String, _ prefixes: [String]) -> Bool {
        let lines = text.split(separator: "\n").map(String.init)
        var from = 0
        for prefix in prefixes {
            guard let index = lines[from...].firstIndex(where: { $0.hasPrefix(prefix) }) else { return false }
            from = index + 1
        }
        return true
    }

    @Test func verboseShowsTheTLSConnectionAsItHappens() async throws {
        let nginx = try NginxServer.shared()
        let port = try #require(nginx.tlsPorts["good"])
        let run = try #require(try await runCourier(["-sv", "--cacert", nginx.certificates.caPEM, nginx.tlsURL("good", "/files/hello.txt").absoluteString]))
        #expect(run.status == 0)
        let steps = [
            "*   Trying 127.0.0.1:\(port)...", "* Connected to 127.0.0.1 (127.0.0.1) port \(port)", "* TLS connection using TLS 1.3 / TLS_",
            "* ALPN: server accepted h2", "> GET /files/hello.txt HTTP/2", "> Host: 127.0.0.1:\(port)", "< HTTP/2 200",
        ]
        #expect(ordered(run.stderr, steps), "\(run.stderr)")
    }

    @Test func verboseShowsTheFailedConnect() async throws {
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        let port = closed.port
        let run = try #require(try await runCourier(["-sv", "http://127.0.0.1:\(port)/"]))
        #expect(run.status == 7)
        #expect(ordered(run.stderr, ["*   Trying 127.0.0.1:\(port)...", "* connect to 127.0.0.1 port \(port) failed: Connection refused"]), "\(run.stderr)")
    }

    /// The request is shown when it goes out, not when an answer comes: a server that reads it
    /// and closes without answering still has it printed. The server closes rather than stays
    /// silent until a timeout, which on a loaded machine could expire before the request went
    /// out.
    @Test func verboseShowsTheRequestBeforeAnyAnswer() async throws {
        let server = try ScriptedServer { connection in
            // The connection closes, unanswered, once the script returns.
            _ = connection.readRequest(timeout: 60)
        }
        defer { server.stop() }
        let run = try #require(try await runCourier(["-sv", "-m", "60", server.url("/hang").absoluteString]))
        // curl's 52: the server closed with no reply at all.
        #expect(run.status == 52, "\(run.stderr)")
        #expect(ordered(run.stderr, ["* Connected to 127.0.0.1", "> GET /hang HTTP/1.1", ">"]), "\(run.stderr)")
        #expect(!run.stderr.contains("< "))
    }

    /// A second URL on the same connection says so, and its request follows.
    @Test func verboseShowsReuse() async throws {
        let nginx = try NginxServer.shared()
        let url = nginx.url("/files/hello.txt").absoluteString
        let run = try #require(try await runCourier(["-sv", "-o", "/dev/null", "-o", "/dev/null", url, url]))
        #expect(run.status == 0)
        #expect(run.stderr.components(separatedBy: "*   Trying").count == 2)
        #expect(ordered(run.stderr, ["> GET /files/hello.txt HTTP/1.1", "< HTTP/1.1 200", "* Re-using the existing connection to 127.0.0.1", "> GET /files/hello.txt HTTP/1.1"]))
    }
}
