import Foundation
import Testing
import _CourierTestSupport

/// `courier --help` laid out as curl's, and one command's URLs sharing connections.
struct CLIHelpAndReuseTests {
    private func longOptions(_ text: String) -> Set<String> {
        let pattern = try! NSRegularExpression(pattern: "(?<![A-Za-z0-9-])--([a-z0-9][a-z0-9.-]*[a-z0-9])")
        let range = NSRange(text.startIndex..., in: text)
        return Set(pattern.matches(in: text, range: range).compactMap { Range($0.range(at: 1), in: text).map { String(text[$0]) } })
    }

    /// Every option the parser knows (its full help, `--manual`) has its line in `--help all`,
    /// and `--help all` names nothing the parser does not take, but for the ones courier handles
    /// before parsing (`--manual`, `-K`/`--config`).
    @Test func helpAllListsEveryOption() throws {
        let all = try #require(try runCourier(["--help", "all"]))
        let manual = try #require(try runCourier(["--manual"]))
        #expect(all.status == 0 && manual.status == 0)
        let lines = all.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "Usage: courier [options...] <url>")
        // The option each line is about: its first --word (summaries may name others).
        let listed = Set(lines.dropFirst().compactMap { line in
            line.split(separator: " ").first { $0.hasPrefix("--") }.map { String($0.dropFirst(2)) }
        })
        var parsed = longOptions(manual.stdout)
        parsed.formUnion(["manual", "config"])
        #expect(listed.count == lines.count - 1)
        #expect(parsed.subtracting(listed).isEmpty, "not in --help all: \(parsed.subtracting(listed).sorted())")
        #expect(listed.subtracting(parsed).isEmpty, "in --help all but not taken: \(listed.subtracting(parsed).sorted())")
    }

    @Test func helpShowsTheEverydayOptionsAndCategories() throws {
        let help = try #require(try runCourier(["-h"]))
        #expect(help.status == 0)
        let lines = help.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "Usage: courier [options...] <url>")
        for option in [" -d, --data <data>", " -o, --output <file>", " -v, --verbose", " -V, --version"] {
            #expect(lines.contains { $0.hasPrefix(option) }, "missing \(option)")
        }
        #expect(!lines.contains { $0.contains("--socks5") })
        #expect(help.stdout.contains("\"--help all\""))

        let categories = try #require(try runCourier(["--help", "category"]))
        #expect(categories.stdout.split(separator: "\n").contains { $0.hasPrefix(" proxy ") })
        let proxy = try #require(try runCourier(["--help", "proxy"]))
        #expect(proxy.stdout.contains("--socks5-hostname"))
        #expect(!proxy.stdout.contains("--data"))

        let unknown = try #require(try runCourier(["--help", "nonsense"]))
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("no help category named \"nonsense\""))
    }

    @Test func shortVersionFlag() throws {
        let run = try #require(try runCourier(["-V"]))
        #expect(run.status == 0)
        #expect(run.stdout.hasPrefix("courier "))
    }

    /// Two URLs on the same server go over one connection, as curl's do; the second request
    /// is the next one read on it.
    @Test func urlsOfOneCommandShareAConnection() throws {
        let server = try ScriptedServer { connection in
            while let request = connection.readRequest() {
                connection.respond(body: Array("[\(request.target)]".utf8))
            }
        }
        defer { server.stop() }
        let run = try #require(try runCourier(["-s", server.url("/one").absoluteString, server.url("/two").absoluteString]))
        #expect(run.status == 0)
        #expect(run.stdout == "[/one][/two]")
        #expect(server.connectionCount == 1)
    }

    /// The same over TLS against nginx: the server-trust decision (--cacert) is made once, for the
    /// connection both URLs use, and -w reports the second transfer's connection as reused.
    @Test func tlsURLsShareAConnection() throws {
        let nginx = try NginxServer.shared()
        let url = nginx.tlsURL("good", "/files/hello.txt").absoluteString
        let run = try #require(
            try runCourier(["-s", "--cacert", nginx.certificates.caPEM, "-o", "/dev/null", "-o", "/dev/null", "-w", "%{num_connects}\n", url, url])
        )
        #expect(run.status == 0)
        #expect(run.stdout == "1\n0\n")
    }
}
