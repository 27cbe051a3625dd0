import Foundation
import Testing
import _CourierTestSupport

/// Runs the `courier` executable built next to the test bundle; nil when it is not there.
/// With `environment`, the child gets the parent's environment less every `*_proxy`/`*_PROXY`
/// variable, plus these (the test process never changes its own: tests run in parallel in it).
/// Either way its `TMPDIR` is ``TestRun/childTemporaryDirectory`` unless `environment` names one.
/// `input` is the child's standard input (empty when nil). `program` is an executable built
/// next to the test bundle, or an absolute path.
/// The child runs and is waited for on a thread of its own (``onOwnThread(_:)``).
func runCourier(_ arguments: [String], environment: [String: String]? = nil, directory workingDirectory: URL? = nil, input: Data? = nil, program: String = "courier") async throws -> (status: Int32, stdout: String, stderr: String)? {
    try await onOwnThread {
        try runCourierBlocking(arguments, environment: environment, directory: workingDirectory, input: input, program: program)
    }
}

private func runCourierBlocking(_ arguments: [String], environment: [String: String]?, directory workingDirectory: URL?, input: Data?, program: String) throws -> (status: Int32, stdout: String, stderr: String)? {
    let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    let executable = program.hasPrefix("/") ? URL(fileURLWithPath: program) : directory.appendingPathComponent(program)
    guard FileManager.default.isExecutableFile(atPath: executable.path) else { return nil }
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    if let workingDirectory { process.currentDirectoryURL = workingDirectory }
    var variables = ProcessInfo.processInfo.environment
    if environment != nil {
        variables = variables.filter { !$0.key.lowercased().hasSuffix("_proxy") }
    }
    variables["TMPDIR"] = TestRun.childTemporaryDirectory.path
    variables.merge(environment ?? [:]) { _, given in given }
    process.environment = variables
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    let inputPipe = input.map { _ in Pipe() }
    process.standardInput = inputPipe ?? FileHandle.nullDevice
    try process.run()
    if let inputPipe, let input {
        inputPipe.fileHandleForWriting.write(input)
        try? inputPipe.fileHandleForWriting.close()
    }
    // Both pipes are read to the end at once, so neither can fill and block the child.
    let errorOutput = LockedData()
    let group = DispatchGroup()
    DispatchQueue.global().async(group: group) { errorOutput.set(err.fileHandleForReading.readDataToEndOfFile()) }
    let stdout = out.fileHandleForReading.readDataToEndOfFile()
    group.wait()
    let stderr = errorOutput.get()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
}

/// Bytes handed from one thread to another.
final class LockedData: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    func set(_ value: Data) { lock.withLock { data = value } }
    func get() -> Data { lock.withLock { data } }
}

/// `courier -u` with `--basic`, `--digest` and `--anyauth`, as curl users know them, against
/// httpbin and nginx.
@Suite("CLIAuthenticationTests")
struct CLIAuthenticationTests {
    let httpbin: HttpbinServer
    let nginx: NginxServer

    init() throws {
        httpbin = try HttpbinServer.shared()
        nginx = try NginxServer.shared()
    }

    func courier(_ arguments: String...) async throws -> (status: Int32, stdout: String, stderr: String) {
        try #require(try await runCourier(arguments), "the courier executable is built with the tests")
    }

    @Test("-u sends Basic with the first request (httpbin's hidden-basic-auth answers 404 to anyone who waits to be asked)")
    func basicFirst() async throws {
        let run = try await courier("-u", "ann:secret", httpbin.url("/hidden-basic-auth/ann/secret").absoluteString)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("\"authenticated\": true"))
    }

    @Test("--digest answers httpbin's Digest challenge", arguments: ["MD5", "SHA-256", "SHA-512"])
    func digest(_ algorithm: String) async throws {
        let run = try await courier("--digest", "-u", "ben:p4ss", httpbin.url("/digest-auth/auth/ben/p4ss/\(algorithm)").absoluteString)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("\"authenticated\": true"))
    }

    @Test("--digest does not answer a Basic challenge; --anyauth does")
    func anyAuth() async throws {
        let url = nginx.url("/basic/hello.txt").absoluteString
        let digestOnly = try await courier("-f", "--digest", "-u", "courier:open sesame", url)
        #expect(digestOnly.status == 22)
        let any = try await courier("--anyauth", "-u", "courier:open sesame", url)
        #expect(any.status == 0, "\(any.stderr)")
        #expect(any.stdout == "Hello from nginx\n")
    }

    @Test("a wrong password: the 401 is the answer, and -f exits 22")
    func wrongPassword() async throws {
        let url = httpbin.url("/basic-auth/cat/right").absoluteString
        let plain = try await courier("-i", "-u", "cat:wrong", url)
        #expect(plain.status == 0)
        #expect(plain.stdout.hasPrefix("HTTP/1.1 401"))
        let failing = try await courier("-f", "--anyauth", "-u", "cat:wrong", url)
        #expect(failing.status == 22)
    }

    @Test("after -L to another host, the -u credential is not sent there", arguments: ["--anyauth", "--digest"])
    func notToAnotherHost(_ mode: String) async throws {
        let target = httpbin.url(mode == "--digest" ? "/digest-auth/auth/eve/pw/MD5" : "/basic-auth/eve/pw").absoluteString
            .replacingOccurrences(of: "127.0.0.1", with: "localhost")
        var components = URLComponents(url: httpbin.url("/redirect-to"), resolvingAgainstBaseURL: false)!
        components.queryItems = [URLQueryItem(name: "url", value: target)]
        let run = try await courier("-f", "-L", mode, "-u", "eve:pw", components.url!.absoluteString)
        #expect(run.status == 22, "\(run.stdout) \(run.stderr)")
        // The same redirect within the host keeps the credential.
        components.queryItems = [URLQueryItem(name: "url", value: target.replacingOccurrences(of: "localhost", with: "127.0.0.1"))]
        let same = try await courier("-f", "-L", mode, "-u", "eve:pw", components.url!.absoluteString)
        #expect(same.status == 0, "\(same.stderr)")
    }

    @Test("-u without a password and no terminal is refused with a message")
    func noPassword() async throws {
        let run = try await courier("-u", "dan", httpbin.url("/basic-auth/dan/x").absoluteString)
        #expect(run.status != 0)
        #expect(run.stderr.contains("no password"))
    }
}
