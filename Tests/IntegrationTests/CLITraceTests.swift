import Foundation
import Testing
import _CourierTestSupport

/// `--trace-ascii` and `--trace` beside Debian's curl on the same fixed response: the blocks of
/// bytes received (each head line, the body) and the body sent are the same, byte for byte and
/// in curl's layout; the request head is shown as Courier sent it.
struct CLITraceTests {
    /// A response with no date in it, a body with a CR LF and a line longer than 64 bytes.
    static let body = "first line\r\n" + String(repeating: "0123456789", count: 9) + "\n\u{1}end"

    private func server() throws -> ScriptedServer {
        try ScriptedServer { connection in
            while connection.readRequest() != nil {
                connection.respond(headers: [("Content-Type", "text/plain"), ("X-Trace", "yes")], body: Array(Self.body.utf8))
            }
        }
    }

    /// The blocks of a trace, each its title line and dump lines, minus the notes.
    private func blocks(_ trace: String) -> [[String]] {
        var blocks: [[String]] = []
        for line in trace.components(separatedBy: "\n") {
            if line.hasPrefix("=> ") || line.hasPrefix("<= ") {
                blocks.append([line])
            } else if line.hasPrefix("== ") {
                blocks.append([])
            } else if !blocks.isEmpty, line.count >= 5, line.dropFirst(4).hasPrefix(":") {
                blocks[blocks.count - 1].append(line)
            }
        }
        return blocks.filter { !$0.isEmpty }
    }

    @Test("the trace's received and sent-body blocks match curl's", arguments: ["--trace-ascii", "--trace"])
    func matchesCurl(_ option: String) async throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/curl"), "Debian's curl is installed by the test command")
        let server = try server()
        defer { server.stop() }
        let url = server.url("/traced").absoluteString
        let arguments = ["-s", option, "-", "-o", "/dev/null", "-d", "name=value&more", url]
        let ours = try #require(try await runCourier(arguments))
        #expect(ours.status == 0)
        let theirs = try await onOwnThread { try runTool("/usr/bin/curl", arguments) }
        let (mine, curls) = (blocks(ours.stdout), blocks(theirs))
        #expect(mine.filter { !$0[0].hasPrefix("=> Send header") } == curls.filter { !$0[0].hasPrefix("=> Send header") }, "\(ours.stdout)\n---\n\(theirs)")
        // The request head: its request line and its own size.
        let sent = try #require(mine.first { $0[0].hasPrefix("=> Send header") })
        #expect(sent[1].hasPrefix("0000: ") && sent[1].contains("POST /traced HT"))
        #expect(ours.stdout.contains("== Info: Connected to 127.0.0.1 (127.0.0.1) port \(server.port)\n"))
        // Nothing else goes to standard error, and -v's lines are replaced.
        #expect(!ours.stderr.contains("> POST"))
    }

    /// `--trace`'s hex dump of a body past 64 KiB: every byte, sixteen a line, the offsets
    /// growing to five digits as curl's `%04x` does.
    @Test func longBodyInHex() async throws {
        let body = deterministicBytes(count: 70_000, seed: 9)
        let file = TestRun.makeDirectory("trace-body").appendingPathComponent("body.bin").path
        try Data(body).write(to: URL(fileURLWithPath: file))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let server = try server()
        defer { server.stop() }
        let run = try #require(try await runCourier(["-s", "--trace", "-", "-o", "/dev/null", "--data-binary", "@\(file)", server.url("/hex").absoluteString]))
        #expect(run.status == 0)
        let lines = run.stdout.components(separatedBy: "\n")
        let title = try #require(lines.firstIndex { $0.hasPrefix("=> Send data") })
        #expect(lines[title] == "=> Send data, 70000 bytes (0x11170)")
        var dumped: [UInt8] = []
        for (index, line) in lines[(title + 1)...].prefix(while: { !$0.hasPrefix("=> ") && !$0.hasPrefix("<= ") && !$0.hasPrefix("== ") }).enumerated() {
            let offset = String(index * 16, radix: 16)
            #expect(line.hasPrefix(String(repeating: "0", count: max(0, 4 - offset.count)) + offset + ": "), "\(line)")
            let hex = line.split(separator: ":", maxSplits: 1)[1].prefix(49)
            dumped += hex.split(separator: " ").compactMap { UInt8($0, radix: 16) }
        }
        #expect(dumped == body)
    }

    @Test func traceToAFile() async throws {
        let server = try server()
        defer { server.stop() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("courier-trace-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("trace.txt").path
        let run = try #require(try await runCourier(["-s", "-v", "--trace-ascii", file, server.url("/file").absoluteString]))
        #expect(run.status == 0)
        #expect(run.stdout == Self.body)
        #expect(!run.stderr.contains("* Connected"))
        let trace = try String(contentsOfFile: file, encoding: .utf8)
        #expect(trace.contains("=> Send header, "))
        #expect(trace.contains("0000: GET /file HTTP/1.1\n"))
        #expect(trace.contains("<= Recv data, \(Self.body.utf8.count) bytes (0x\(String(Self.body.utf8.count, radix: 16)))\n"))
    }
}
