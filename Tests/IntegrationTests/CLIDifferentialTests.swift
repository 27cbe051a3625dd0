import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// One command line run twice, by Debian's curl and by courier, against the same local servers:
/// exit status, standard output and the files written must agree. For nginx's `/echo`, which
/// answers with what it received as JSON, "standard output agrees" means the request agrees:
/// method, target, query, body, and the fields the case names (User-Agent and the fields each
/// client adds by itself differ by design).
struct DifferentialCase: CustomTestStringConvertible, Sendable {
    enum Output: Sendable {
        /// Byte for byte.
        case exact
        /// An `/echo` answer: the request's method, target, query, body, and these fields.
        case echo(fields: [String])
        /// The first line only (a status line: the rest of a head differs in Date and order).
        case firstLine
        /// What the scripted server received at `{RAW}/capture`: method, Content-Type and body,
        /// with the multipart boundary (random in both) replaced.
        case captured
        /// Nothing but the exit status: the text is each program's own (help, version).
        case statusOnly
    }

    var name: String
    /// Arguments; `{BASE}` is nginx's `http://127.0.0.1:PORT`, `{RAW}` the scripted server's,
    /// `{CLOSED}` a port nobody listens on (`{CLOSEDHOST}` as HOST:PORT), `{FILE}` a file with two
    /// lines, `{H2C}` nginx's prior-knowledge HTTP/2 port, `{HTTPBIN}` httpbin; `partial.txt`
    /// holds the first 6 bytes of `/files/hello.txt`, `private.txt` is a file of mode 0600 and
    /// `link.txt` a symbolic link to `partial.txt`.
    var arguments: [String]
    var output: Output = .exact
    /// Files written in the working directory, compared by name, kind, mode and bytes (or
    /// first line).
    var filesFirstLineOnly = false
    /// Files are Netscape cookie files, compared by their cookies (``CLIDifferentialTests/cookieLines(_:)``).
    var cookieFile = false
    /// Standard input for both.
    var input: Data?
    /// curl's exit status, checked too: a case whose servers were not reached fails, even
    /// though both clients would agree on it.
    var exit: Int32 = 0

    var testDescription: String { name }

    static let all: [DifferentialCase] = [
        DifferentialCase(name: "a plain GET", arguments: ["{BASE}/files/hello.txt"]),
        DifferentialCase(name: "-o FILE", arguments: ["-o", "out.txt", "{BASE}/files/hello.txt"]),
        DifferentialCase(name: "-o - is standard output", arguments: ["-o", "-", "{BASE}/files/hello.txt"]),
        DifferentialCase(name: "-O", arguments: ["-O", "{BASE}/files/64k.bin"]),
        DifferentialCase(name: "--output-dir with -O", arguments: ["--create-dirs", "--output-dir", "sub", "-O", "{BASE}/files/hello.txt"]),
        DifferentialCase(name: "--create-dirs for -o", arguments: ["--create-dirs", "-o", "a/b/out.txt", "{BASE}/files/hello.txt"]),
        DifferentialCase(name: "-o into a missing directory: 23, no file", arguments: ["-s", "-o", "missing/out.txt", "{BASE}/files/hello.txt"], exit: 23),
        DifferentialCase(name: "-I: HEAD, the head only", arguments: ["-I", "{BASE}/files/hello.txt"], output: .firstLine),
        DifferentialCase(name: "-i: the head, then the body", arguments: ["-i", "{BASE}/status/201"], output: .firstLine),
        DifferentialCase(name: "-f on a 404: 22, nothing written", arguments: ["-s", "-f", "{BASE}/status/404"], exit: 22),
        DifferentialCase(name: "--fail-with-body on a 404: 22, the body written", arguments: ["-s", "--fail-with-body", "{BASE}/status/404"], exit: 22),
        DifferentialCase(name: "without -f a 500 is a success", arguments: ["{BASE}/status/500"]),
        DifferentialCase(name: "-d twice: joined with &, a form POST", arguments: ["-d", "a=1", "-d", "b=two", "{BASE}/echo"], output: .echo(fields: ["Content-Type", "Content-Length"])),
        DifferentialCase(name: "-d @FILE drops line ends", arguments: ["-d", "@{FILE}", "{BASE}/echo"], output: .echo(fields: ["Content-Type"])),
        DifferentialCase(
            name: "-d @FILE, -d and --data-binary @FILE together: joined with &, line ends dropped from -d's file only",
            arguments: ["-d", "@{FILE}", "-d", "x=1", "--data-binary", "@{FILE}", "{BASE}/echo"], output: .echo(fields: ["Content-Type", "Content-Length"])
        ),
        DifferentialCase(name: "--data-binary @FILE keeps them", arguments: ["--data-binary", "@{FILE}", "{BASE}/echo"], output: .echo(fields: ["Content-Type"])),
        DifferentialCase(name: "-d @- reads standard input", arguments: ["-d", "@-", "{BASE}/echo"], output: .echo(fields: []), input: Data("from\nstdin\n".utf8)),
        DifferentialCase(name: "--data-raw keeps a leading @", arguments: ["--data-raw", "@not-a-file", "{BASE}/echo"], output: .echo(fields: [])),
        DifferentialCase(name: "--data-urlencode NAME=CONTENT", arguments: ["--data-urlencode", "q=a b&c/d", "--data-urlencode", "plain text", "{BASE}/echo"], output: .echo(fields: [])),
        DifferentialCase(name: "--data-urlencode NAME@FILE", arguments: ["--data-urlencode", "f@{FILE}", "{BASE}/echo"], output: .echo(fields: [])),
        DifferentialCase(name: "-G puts the data in the query of a GET", arguments: ["-G", "-d", "q=1", "-d", "r=2", "{BASE}/echo?x=0"], output: .echo(fields: [])),
        DifferentialCase(name: "--json: the body, Content-Type and Accept", arguments: ["--json", "{\"a\":1}", "{BASE}/echo"], output: .echo(fields: ["Content-Type", "Accept"])),
        DifferentialCase(name: "-X PUT with -d", arguments: ["-X", "PUT", "-d", "x=1", "{BASE}/echo"], output: .echo(fields: ["Content-Type"])),
        DifferentialCase(name: "-T FILE: a PUT of the file", arguments: ["-T", "{FILE}", "{BASE}/echo"], output: .echo(fields: [])),
        DifferentialCase(name: "-H adds, Name: removes, Name; sends empty", arguments: ["-H", "X-Test: yes", "-H", "Accept:", "-H", "X-Empty;", "{BASE}/echo"], output: .echo(fields: ["X-Test", "Accept", "X-Empty"])),
        DifferentialCase(name: "-A and -e", arguments: ["-A", "agent/1.0", "-e", "http://referrer.invalid/", "{BASE}/echo"], output: .echo(fields: ["User-Agent", "Referer"])),
        DifferentialCase(name: "no Accept-Encoding without --compressed", arguments: ["{BASE}/echo"], output: .echo(fields: ["Accept-Encoding", "Accept"])),
        DifferentialCase(name: "--compressed decodes gzip", arguments: ["--compressed", "{BASE}/static-gz/repeated.txt"]),
        DifferentialCase(name: "a gzip body asked for without --compressed is written as sent", arguments: ["-H", "Accept-Encoding: gzip", "{BASE}/static-gz/repeated.txt"]),
        DifferentialCase(name: "-r: a byte range", arguments: ["-r", "0-4", "{BASE}/files/hello.txt"]),
        DifferentialCase(name: "a redirect without -L is the answer", arguments: ["{BASE}/redirect/302"]),
        DifferentialCase(name: "-L follows redirects", arguments: ["-L", "{BASE}/redirect/hop1"]),
        DifferentialCase(name: "--max-redirs 1 on two hops: 47", arguments: ["-s", "-L", "--max-redirs", "1", "{BASE}/redirect/hop1"], exit: 47),
        DifferentialCase(name: "-w with status, size and redirects", arguments: ["-s", "-o", "body", "-L", "-w", "%{http_code} %{size_download} %{num_redirects} %{content_type}\\n", "{BASE}/redirect/hop1"]),
        DifferentialCase(name: "-w %{url_effective} after redirects", arguments: ["-s", "-o", "body", "-L", "-w", "%{url_effective}|%{response_code}|%%", "{BASE}/redirect/hop1"]),
        DifferentialCase(name: "-D FILE: the response heads", arguments: ["-s", "-D", "heads.txt", "{BASE}/files/hello.txt"], filesFirstLineOnly: true),
        DifferentialCase(name: "-u USER:PASSWORD answers Basic", arguments: ["-u", "{USER}", "{BASE}/basic/hello.txt"]),
        DifferentialCase(name: "--http1.1", arguments: ["--http1.1", "{BASE}/files/hello.txt"]),
        DifferentialCase(name: "a refused connection: 7", arguments: ["-s", "{CLOSED}/"], exit: 7),
        DifferentialCase(name: "a URL with no host: 3", arguments: ["-s", "http://"], exit: 3),
        DifferentialCase(name: "an empty reply: 52", arguments: ["-s", "{RAW}/empty"], exit: 52),
        DifferentialCase(name: "a body cut short: 18", arguments: ["-s", "{RAW}/short"], exit: 18),
        DifferentialCase(name: "-s -S still shows the error but exits the same", arguments: ["-s", "-S", "{CLOSED}/"], exit: 7),
        DifferentialCase(name: "-F: text, a file, a file's text, a type and a file name", arguments: [
            "-F", "name=value", "-F", "upload=@{FILE}", "-F", "text=<{FILE}", "-F", "typed=@{FILE};type=application/x-test;filename=other.bin",
            "{RAW}/capture",
        ], output: .captured),
        DifferentialCase(name: "--retry after a 503: the answer that came next (stdout keeps both bodies)", arguments: ["-s", "--retry", "1", "{RAW}/flaky"]),
        DifferentialCase(name: "--retry with -o: the file holds the last try's body only", arguments: ["-s", "--retry", "1", "-o", "out.txt", "{RAW}/flaky"]),
        DifferentialCase(name: "--retry -f: a 503 then a 200 succeeds", arguments: ["-s", "-f", "--retry", "1", "{RAW}/flaky"]),
        DifferentialCase(name: "a refused connection is not retried without --retry-connrefused", arguments: ["-s", "--retry", "3", "{CLOSED}/"], exit: 7),
        DifferentialCase(name: "two URLs: both bodies, in order", arguments: ["{BASE}/files/hello.txt", "{BASE}/status/201"]),
        DifferentialCase(name: "-o pairs with the URLs in order; a URL left over goes to standard output", arguments: ["-o", "one", "-o", "two", "{BASE}/files/hello.txt", "{BASE}/files/64k.bin", "{BASE}/status/202"]),
        DifferentialCase(name: "-O names the first URL's file; the next goes to standard output", arguments: ["-O", "{BASE}/files/hello.txt", "{BASE}/status/203"]),
        DifferentialCase(name: "the exit status is the last transfer's: a failure, then a success", arguments: ["-s", "{CLOSED}/", "{BASE}/files/hello.txt"]),
        DifferentialCase(name: "the exit status is the last transfer's: a success, then a failure", arguments: ["-s", "{BASE}/files/hello.txt", "{CLOSED}/"], exit: 7),
        DifferentialCase(name: "cookies set by one URL go with the next (-b \"\" starts the engine)", arguments: ["-s", "-b", "", "{BASE}/cookie/set", "{BASE}/echo"], output: .echo(fields: ["Cookie"])),
        DifferentialCase(name: "-K FILE: options and a URL from a config file, quoted values and comments", arguments: ["-K", "{CONFIG}"], output: .echo(fields: ["X-Config", "Content-Type"])),
        DifferentialCase(name: "-K - reads the config from standard input", arguments: ["-K", "-"], output: .echo(fields: ["X-Config"]), input: Data("header = \"X-Config: from stdin\"\nurl = {BASE}/echo\n".utf8)),
        DifferentialCase(name: "https with --cacert", arguments: ["--cacert", "{CA}", "{TLS:good}/files/hello.txt"]),
        DifferentialCase(name: "a self-signed server without -k: 60", arguments: ["-s", "{TLS:selfsigned}/files/hello.txt"], exit: 60),
        DifferentialCase(name: "a self-signed server with -k", arguments: ["-k", "{TLS:selfsigned}/files/hello.txt"]),
        DifferentialCase(name: "a certificate for another host: 60", arguments: ["-s", "--cacert", "{CA}", "{TLS:wronghost}/files/hello.txt"], exit: 60),
        DifferentialCase(name: "--tlsv1.3 against a TLS 1.2 server: 35", arguments: ["-s", "--tlsv1.3", "--cacert", "{CA}", "{TLS:tls12}/files/hello.txt"], exit: 35),
        DifferentialCase(name: "HTTP/2 over TLS by ALPN, told by -w", arguments: ["-s", "-o", "body", "--cacert", "{CA}", "-w", "%{http_version} %{http_code}", "{TLS:good}/files/hello.txt"]),
        DifferentialCase(name: "--http1.1 over TLS, told by -w", arguments: ["-s", "-o", "body", "--http1.1", "--cacert", "{CA}", "-w", "%{http_version}", "{TLS:good}/files/hello.txt"]),
        DifferentialCase(name: "a server that wants a client certificate, given none: its 400", arguments: ["-s", "--cacert", "{CA}", "{TLS:clientcert}/files/hello.txt"]),
        DifferentialCase(name: "--cert and --key answer the client-certificate request", arguments: ["-s", "--cacert", "{CA}", "--cert", "{CLIENT_PEM}", "--key", "{CLIENT_KEY}", "{TLS:clientcert}/files/hello.txt"]),
        DifferentialCase(name: "-Z: the URLs at once, each -o its file", arguments: ["-s", "-Z", "-o", "a", "-o", "b", "-o", "c", "{BASE}/files/hello.txt", "{BASE}/files/64k.bin", "{BASE}/files/1m.bin"]),
        DifferentialCase(name: "-Z: a failure among successes sets the status", arguments: ["-s", "-Z", "-o", "a", "-o", "b", "{CLOSED}/", "{BASE}/files/hello.txt"], exit: 7),
        DifferentialCase(name: "--url, twice", arguments: ["--url", "{BASE}/files/hello.txt", "--url", "{BASE}/status/201"]),
        DifferentialCase(name: "--form-string keeps @ and ;", arguments: ["--form-string", "raw=@not;type=x", "{RAW}/capture"], output: .captured),
        DifferentialCase(name: "--basic with -u", arguments: ["--basic", "-u", "{USER}", "{BASE}/basic/hello.txt"]),
        DifferentialCase(name: "--anyauth with -u: Basic, once asked", arguments: ["--anyauth", "-u", "{USER}", "{BASE}/basic/hello.txt"]),
        DifferentialCase(name: "--digest with -u answers httpbin's Digest challenge", arguments: ["-s", "--digest", "-u", "user:passwd", "{HTTPBIN}/digest-auth/auth/user/passwd"]),
        DifferentialCase(name: "a wrong --digest password: the 401 is the answer", arguments: ["-s", "-o", "body", "-w", "%{http_code}", "--digest", "-u", "user:wrong", "{HTTPBIN}/digest-auth/auth/user/passwd"]),
        DifferentialCase(name: "-c FILE writes the cookies set (its header comment apart)", arguments: ["-s", "-c", "jar.txt", "{BASE}/cookie/set", "{BASE}/cookie/secure"], cookieFile: true),
        DifferentialCase(name: "-j with -b: the cookies of the session still flow", arguments: ["-s", "-j", "-b", "", "{BASE}/cookie/set", "{BASE}/echo"], output: .echo(fields: ["Cookie"])),
        DifferentialCase(name: "--connect-timeout on a reachable server", arguments: ["--connect-timeout", "5", "{BASE}/files/hello.txt"]),
        DifferentialCase(name: "-m on a server that never answers: 28", arguments: ["-s", "-m", "1", "{RAW}/hang"], exit: 28),
        DifferentialCase(name: "-C - resumes partial.txt from its size", arguments: ["-s", "-C", "-", "-o", "partial.txt", "{BASE}/files/hello.txt"]),
        DifferentialCase(name: "-O -J: the name Content-Disposition gives, its directory part dropped", arguments: ["-s", "-O", "-J", "{BASE}/disposition/hello.txt"]),
        DifferentialCase(name: "-x to a closed proxy: 7", arguments: ["-s", "-x", "{CLOSED}", "{BASE}/files/hello.txt"], exit: 7),
        DifferentialCase(name: "--proxy-user with a closed proxy: 7", arguments: ["-s", "-x", "{CLOSED}", "--proxy-user", "a:b", "{BASE}/files/hello.txt"], exit: 7),
        DifferentialCase(name: "--noproxy sends 127.0.0.1 direct despite -x", arguments: ["-s", "-x", "{CLOSED}", "--noproxy", "127.0.0.1", "{BASE}/files/hello.txt"]),
        DifferentialCase(name: "--socks5 to a closed proxy: 7", arguments: ["-s", "--socks5", "{CLOSEDHOST}", "{BASE}/files/hello.txt"], exit: 7),
        DifferentialCase(name: "--socks5-hostname to a closed proxy: 7", arguments: ["-s", "--socks5-hostname", "{CLOSEDHOST}", "{BASE}/files/hello.txt"], exit: 7),
        DifferentialCase(name: "--http2 over TLS, told by -w", arguments: ["-s", "-o", "body", "--http2", "--cacert", "{CA}", "-w", "%{http_version}", "{TLS:good}/files/hello.txt"]),
        DifferentialCase(name: "--http2-prior-knowledge on cleartext", arguments: ["-s", "--http2-prior-knowledge", "-w", "%{http_version}", "{H2C}/files/hello.txt"]),
        DifferentialCase(name: "--tlsv1.2 against a TLS 1.2 server", arguments: ["-s", "--tlsv1.2", "--cacert", "{CA}", "{TLS:tls12}/files/hello.txt"]),
        DifferentialCase(name: "--pass beside an unencrypted --key", arguments: ["-s", "--cacert", "{CA}", "--cert", "{CLIENT_PEM}", "--key", "{CLIENT_KEY}", "--pass", "unused", "{TLS:clientcert}/files/hello.txt"]),
        DifferentialCase(name: "-o with a body cut short: 18, the file keeps the bytes that came", arguments: ["-s", "-o", "out.txt", "{RAW}/short"], exit: 18),
        DifferentialCase(name: "-O with a body cut short: 18, the file keeps the bytes that came", arguments: ["-s", "-O", "{RAW}/short"], exit: 18),
        DifferentialCase(name: "-f -o with a 404: 22, no file", arguments: ["-s", "-f", "-o", "out.txt", "{BASE}/status/404"], exit: 22),
        DifferentialCase(name: "--fail-with-body -o with a 404: 22, the body in the file", arguments: ["-s", "--fail-with-body", "-o", "out.txt", "{BASE}/status/404"], exit: 22),
        DifferentialCase(name: "-o over a file of mode 0600: the body, the mode kept", arguments: ["-s", "-o", "private.txt", "{BASE}/files/64k.bin"]),
        DifferentialCase(name: "-o through a symbolic link writes its target; the link stays", arguments: ["-s", "-o", "link.txt", "{BASE}/files/hello.txt"]),
        DifferentialCase(name: "-o of an empty body: an empty file", arguments: ["-s", "-o", "out.txt", "{BASE}/status/204"]),
        DifferentialCase(name: "-o with a refused connection: 7, no file", arguments: ["-s", "-o", "out.txt", "{CLOSED}/"], exit: 7),
        DifferentialCase(name: "-# with -o: the file, nothing on standard output", arguments: ["-#", "-o", "out.txt", "{BASE}/files/64k.bin"]),
        DifferentialCase(name: "-Z --parallel-max 1", arguments: ["-s", "-Z", "--parallel-max", "1", "-o", "a", "-o", "b", "{BASE}/files/hello.txt", "{BASE}/files/64k.bin"]),
        DifferentialCase(name: "--retry-delay: a 503, a second's wait, then the 200", arguments: ["-s", "--retry", "1", "--retry-delay", "1", "{RAW}/flaky"]),
        DifferentialCase(name: "--retry-connrefused retries a refused connection, then fails: 7", arguments: ["-s", "--retry", "1", "--retry-delay", "1", "--retry-connrefused", "{CLOSED}/"], exit: 7),
        DifferentialCase(name: "--retry-all-errors retries a body cut short, then fails: 18", arguments: ["-s", "--retry", "1", "--retry-delay", "1", "--retry-all-errors", "{RAW}/short"], exit: 18),
        DifferentialCase(name: "--retry-max-time leaves room for the retry", arguments: ["-s", "--retry", "2", "--retry-max-time", "30", "{RAW}/flaky"]),
        DifferentialCase(name: "-v: standard output as without it", arguments: ["-s", "-v", "{BASE}/files/hello.txt"]),
        DifferentialCase(name: "--trace-ascii FILE: standard output as without it", arguments: ["-s", "--trace-ascii", "trace.txt", "{BASE}/files/hello.txt"], filesFirstLineOnly: true),
        DifferentialCase(name: "--trace FILE: standard output as without it", arguments: ["-s", "--trace", "trace.txt", "{BASE}/files/hello.txt"], filesFirstLineOnly: true),
        DifferentialCase(name: "-V", arguments: ["-V"], output: .statusOnly),
        DifferentialCase(name: "--version", arguments: ["--version"], output: .statusOnly),
        DifferentialCase(name: "-h", arguments: ["-h"], output: .statusOnly),
        DifferentialCase(name: "--help all", arguments: ["--help", "all"], output: .statusOnly),
        DifferentialCase(name: "--manual", arguments: ["--manual"], output: .statusOnly),
    ]

    init(
        name: String, arguments: [String], output: Output = .exact, filesFirstLineOnly: Bool = false, cookieFile: Bool = false, input: Data? = nil,
        exit: Int32 = 0
    ) {
        self.cookieFile = cookieFile
        self.exit = exit
        self.name = name
        self.arguments = arguments
        self.output = output
        self.filesFirstLineOnly = filesFirstLineOnly
        self.input = input
    }
}

@Suite("courier against curl")
struct CLIDifferentialTests {
    let nginx: NginxServer
    let httpbin: HttpbinServer

    init() throws {
        nginx = try NginxServer.shared()
        httpbin = try HttpbinServer.shared()
    }

    struct Run {
        var status: Int32
        var stdout: Data
        var stderr: String
        var files: [String: Data]
        /// Each file's kind and permission bits (`st_mode` of lstat), in octal.
        var modes: [String: String]
    }

    /// Runs `executable` in a new directory (holding the case's input file) and collects what
    /// it wrote there.
    /// The `-K` case's file: a comment, a quoted header, `=` and `:` forms, a short option.
    static let config = """
        # options for the differential test
        header = "X-Config: a \\"quoted\\" value"
        data: first=1
        -d second=2
        url = {BASE}/echo
        """

    var base: String { nginx.baseURL.absoluteString.trimmingCharacters(in: CharacterSet(charactersIn: "/")) }

    /// The child runs and is waited for on a thread of its own (``onOwnThread(_:)``).
    func run(_ executable: URL, _ arguments: [String], input: Data?) async throws -> Run {
        let base = self.base
        return try await onOwnThread { try Self.runBlocking(executable, arguments, input: input, base: base) }
    }

    static func runBlocking(_ executable: URL, _ arguments: [String], input: Data?, base: String) throws -> Run {
        let directory = TestRun.makeDirectory("differential")
        defer { try? FileManager.default.removeItem(at: directory) }
        let inputFile = directory.appendingPathComponent("input.txt")
        try Data("line one\r\nline two\n".utf8).write(to: inputFile)
        try Data(NginxServer.fixtures["hello.txt"]!.prefix(6)).write(to: directory.appendingPathComponent("partial.txt"))
        let privateFile = directory.appendingPathComponent("private.txt")
        try Data("private\n".utf8).write(to: privateFile)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: privateFile.path)
        try FileManager.default.createSymbolicLink(atPath: directory.appendingPathComponent("link.txt").path, withDestinationPath: "partial.txt")
        let configFile = directory.appendingPathComponent("config.txt")
        try Data(config.replacingOccurrences(of: "{BASE}", with: base).utf8).write(to: configFile)
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments.map { $0.replacingOccurrences(of: "{FILE}", with: inputFile.path).replacingOccurrences(of: "{CONFIG}", with: configFile.path) }
        process.currentDirectoryURL = directory
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.lowercased().hasSuffix("_proxy") }
        environment["HOME"] = directory.path
        environment["TMPDIR"] = TestRun.childTemporaryDirectory.path
        process.environment = environment
        let out = Pipe()
        let err = Pipe()
        let inputPipe = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = inputPipe
        try process.run()
        inputPipe.fileHandleForWriting.write(input ?? Data())
        try? inputPipe.fileHandleForWriting.close()
        let errors = Mutex(Data())
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) {
            let data = err.fileHandleForReading.readDataToEndOfFile()
            errors.withLock { $0 = data }
        }
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        group.wait()
        process.waitUntilExit()
        var files: [String: Data] = [:]
        var modes: [String: String] = [:]
        if let enumerator = FileManager.default.enumerator(atPath: directory.path) {
            while let name = enumerator.nextObject() as? String {
                let path = directory.appendingPathComponent(name).path
                var isDirectory: ObjCBool = false
                guard name != "input.txt", FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else { continue }
                files[name] = FileManager.default.contents(atPath: path) ?? Data()
                var status = stat()
                modes[name] = lstat(path, &status) == 0 ? String(status.st_mode, radix: 8) : "gone"
            }
        }
        return Run(
            status: process.terminationStatus, stdout: stdout, stderr: String(decoding: errors.withLock { $0 }, as: UTF8.self), files: files, modes: modes
        )
    }

    /// The parts of an `/echo` answer both clients must agree on.
    static func echoSummary(_ data: Data, fields: [String]) -> String {
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            return "not JSON: \(String(decoding: data, as: UTF8.self))"
        }
        let headers = (object["headers"] as? [String: Any]) ?? [:]
        var lines = ["\(object["method"] ?? "") \(object["uri"] ?? "")?\(object["args"] ?? "")", "body \(object["bodyLength"] ?? "") \(object["bodySHA256"] ?? "")"]
        for field in fields {
            let value = headers.first { $0.key.caseInsensitiveCompare(field) == .orderedSame }?.value
            lines.append("\(field): \(value.map { "\($0)" } ?? "(absent)")")
        }
        return lines.joined(separator: "\n")
    }

    /// A captured request with its multipart boundary replaced by `BOUNDARY`.
    static func normalized(_ request: ScriptedRequest?) -> String {
        guard let request else { return "no request" }
        let type = request.header("Content-Type") ?? "(none)"
        var body = String(decoding: request.body, as: UTF8.self)
        var shownType = type
        if let range = type.range(of: "boundary=") {
            let boundary = String(type[range.upperBound...])
            body = body.replacingOccurrences(of: boundary, with: "BOUNDARY")
            shownType = type.replacingOccurrences(of: boundary, with: "BOUNDARY")
        }
        return "\(request.method) \(request.target)\nContent-Type: \(shownType)\n\(body)"
    }

    static func firstLine(_ data: Data) -> String {
        // By bytes: to a String, CR LF is one character, which no "\n" matches.
        var line = data.prefix { $0 != 0x0A }
        if line.last == 0x0D { line = line.dropLast() }
        return String(decoding: line, as: UTF8.self)
    }

    /// A Netscape cookie file's cookies: its comment lines (each program names itself there)
    /// left out, and an expiry time (seconds apart between the two runs) shown as such.
    static func cookieLines(_ data: Data) -> [String] {
        String(decoding: data, as: UTF8.self).split(separator: "\n").filter { !$0.hasPrefix("#") }.map { line in
            var fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            if fields.count == 7, fields[4] != "0" { fields[4] = "EXPIRES" }
            return fields.joined(separator: "\t")
        }
    }

    @Test("courier agrees with curl: exit status, standard output, files written", arguments: DifferentialCase.all)
    func agrees(_ entry: DifferentialCase) async throws {
        let curl = URL(fileURLWithPath: "/usr/bin/curl")
        try #require(FileManager.default.isExecutableFile(atPath: curl.path), "Debian's curl is installed by the test command")
        let courier = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("courier")
        try #require(FileManager.default.isExecutableFile(atPath: courier.path))
        // A raw server for the replies nginx will not give: none at all, and a short body.
        let captured = Mutex<[ScriptedRequest]>([])
        // /flaky answers every odd request with a 503, every even one with a 200.
        let flakyCount = Mutex(0)
        let raw = try ScriptedServer { connection in
            guard let request = connection.readRequest() else { return }
            if request.target == "/short" {
                connection.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
            } else if request.target == "/flaky" {
                let count = flakyCount.withLock { count -> Int in
                    count += 1
                    return count
                }
                if count % 2 == 1 {
                    connection.respond(status: 503, reason: "Service Unavailable", body: Array("busy\n".utf8))
                } else {
                    connection.respond(body: Array("ok\n".utf8))
                }
            } else if request.target == "/hang" {
                _ = connection.readToEOF(timeout: 10)
            } else if request.target == "/capture" {
                captured.withLock { $0.append(request) }
                connection.respond(body: Array("captured\n".utf8))
            }
            connection.close()
        }
        defer { raw.stop() }
        let user = NginxServer.basicUsers[0]
        let pki = try TestCertificates.make()
        // A table and a loop, not a chain of replacingOccurrences: the chain, on an argument of
        // inferred type, took the type checker ten seconds.
        let closed = (ClosedLoopbackPort(), ClosedLoopbackPort())
        defer { withExtendedLifetime(closed) {} }
        let placeholders: [(placeholder: String, value: String)] = [
            ("{BASE}", nginx.baseURL.absoluteString.trimmingCharacters(in: CharacterSet(charactersIn: "/"))),
            ("{RAW}", "http://127.0.0.1:\(raw.port)"),
            ("{CLOSED}", "http://127.0.0.1:\(closed.0.port)"),
            ("{CLOSEDHOST}", "127.0.0.1:\(closed.1.port)"),
            ("{H2C}", "http://127.0.0.1:\(nginx.h2cPort)"),
            ("{HTTPBIN}", httpbin.baseURL.absoluteString.trimmingCharacters(in: CharacterSet(charactersIn: "/"))),
            ("{USER}", "\(user.user):\(user.password)"),
            ("{CA}", pki.caPEM),
            ("{CLIENT_PEM}", pki.clientPEM),
            ("{CLIENT_KEY}", pki.clientKey),
        ]
        let arguments = entry.arguments.map { (argument: String) -> String in
            var argument = argument
            for (placeholder, value) in placeholders {
                argument = argument.replacingOccurrences(of: placeholder, with: value)
            }
            return argument.replacingOccurrences(of: #"\{TLS:([a-z0-9]+)\}"#, with: "https://127.0.0.1:PORT-$1", options: .regularExpression)
        }.map { argument in
            // {TLS:name}: the nginx TLS server of that name.
            guard let range = argument.range(of: #"PORT-[a-z0-9]+"#, options: .regularExpression) else { return argument }
            let name = String(argument[range].dropFirst("PORT-".count))
            return argument.replacingCharacters(in: range, with: String(nginx.tlsPorts[name] ?? 0))
        }
        let input = entry.input.map { Data(String(decoding: $0, as: UTF8.self).replacingOccurrences(of: "{BASE}", with: base).utf8) }
        let expected = try await run(curl, ["-q"] + arguments, input: input)
        let curlRequest = captured.withLock { $0.last }
        let actual = try await run(courier, arguments, input: input)
        let courierRequest = captured.withLock { $0.last }
        let context = "curl: \(expected.status) \(expected.stderr) — courier: \(actual.status) \(actual.stderr)"
        #expect(expected.status == entry.exit, "curl's own status: \(context)")
        #expect(actual.status == expected.status, "\(context)")
        switch entry.output {
        case .exact:
            #expect(actual.stdout == expected.stdout, "curl printed \(String(decoding: expected.stdout.prefix(300), as: UTF8.self)) — courier \(String(decoding: actual.stdout.prefix(300), as: UTF8.self))")
        case .echo(let fields):
            #expect(Self.echoSummary(actual.stdout, fields: fields) == Self.echoSummary(expected.stdout, fields: fields))
        case .firstLine:
            #expect(Self.firstLine(actual.stdout) == Self.firstLine(expected.stdout))
        case .statusOnly:
            break
        case .captured:
            #expect(actual.stdout == expected.stdout)
            #expect(captured.withLock { $0.count } == 2, "each client made one request")
            #expect(Self.normalized(courierRequest) == Self.normalized(curlRequest))
        }
        #expect(actual.files.keys.sorted() == expected.files.keys.sorted(), "files: curl \(expected.files.keys.sorted()), courier \(actual.files.keys.sorted())")
        #expect(actual.modes == expected.modes, "kinds and modes")
        for (name, bytes) in expected.files {
            if entry.cookieFile {
                #expect(actual.files[name].map(Self.cookieLines) == Self.cookieLines(bytes), "\(name)")
            } else if entry.filesFirstLineOnly {
                #expect(actual.files[name].map(Self.firstLine) == Self.firstLine(bytes), "\(name)")
            } else {
                #expect(actual.files[name].map { sameBytes($0, bytes) } == true, "\(name) differs")
            }
        }
    }
}
