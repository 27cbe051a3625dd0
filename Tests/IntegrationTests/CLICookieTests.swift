import Foundation
import Testing
import _CourierTestSupport

/// `courier -b`, `-c` and `-j` as curl users know them, against httpbin.
@Suite("CLICookieTests")
struct CLICookieTests {
    let httpbin: HttpbinServer

    init() throws {
        httpbin = try HttpbinServer.shared()
    }

    func courier(_ arguments: String...) async throws -> (status: Int32, stdout: String, stderr: String) {
        try #require(try await runCourier(arguments), "the courier executable is built with the tests")
    }

    func cookies(in output: String) throws -> [String: String] {
        let object = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any]
        return object?["cookies"] as? [String: String] ?? [:]
    }

    func temporaryFile() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("courier-jar-\(UUID().uuidString)").path
    }

    @Test("without -b or -c there is no cookie engine: a cookie set on a redirect is not sent on")
    func noEngine() async throws {
        let run = try await courier("-L", httpbin.url("/cookies/set?k=v").absoluteString)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try cookies(in: run.stdout).isEmpty)
    }

    @Test("-b NAME=VALUE is sent as the Cookie field")
    func cookieString() async throws {
        let run = try await courier("-b", "one=1; two=2", httpbin.url("/cookies").absoluteString)
        #expect(try cookies(in: run.stdout) == ["one": "1", "two": "2"])
    }

    @Test("-c writes the jar in the Netscape format; -b reads it back; -j leaves session cookies out")
    func jarRoundTrip() async throws {
        let jar = temporaryFile()
        defer { try? FileManager.default.removeItem(atPath: jar) }
        let set = try await courier("-L", "-c", jar, httpbin.url("/cookies/set?session=s").absoluteString)
        #expect(set.status == 0, "\(set.stderr)")
        #expect(try cookies(in: set.stdout) == ["session": "s"], "-c turns the engine on: the redirect carries the cookie")
        let text = try String(contentsOfFile: jar, encoding: .utf8)
        #expect(text.hasPrefix("# Netscape HTTP Cookie File"))
        #expect(text.contains("127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\ts"))

        // A persistent cookie added by hand, as curl would have written it.
        let far = Int(Date().timeIntervalSince1970) + 3600
        try (text + "127.0.0.1\tFALSE\t/\tFALSE\t\(far)\tlasting\tl\n").write(toFile: jar, atomically: true, encoding: .utf8)
        let both = try await courier("-b", jar, httpbin.url("/cookies").absoluteString)
        #expect(try cookies(in: both.stdout) == ["session": "s", "lasting": "l"])
        let junked = try await courier("-j", "-b", jar, httpbin.url("/cookies").absoluteString)
        #expect(try cookies(in: junked.stdout) == ["lasting": "l"])
    }

    @Test("-c - writes the jar to standard output after the body")
    func jarToStdout() async throws {
        let run = try await courier("-c", "-", httpbin.url("/cookies/set?to=out").absoluteString)
        #expect(run.stdout.contains("# Netscape HTTP Cookie File"))
        #expect(run.stdout.contains("\tto\tout"))
    }

    @Test("-c into a directory that does not exist fails with exit 23 and a message")
    func unwritableJar() async throws {
        let run = try await courier("-c", "/nonexistent-dir/jar.txt", httpbin.url("/cookies").absoluteString)
        #expect(run.status == 23)
        #expect(run.stderr.contains("cannot write the cookie jar"))
    }
}
