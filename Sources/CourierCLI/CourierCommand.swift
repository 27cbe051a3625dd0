import ArgumentParser
import Courier
import CourierSync
import Foundation

/// `courier`: fetch a URL with Courier's URLSession, in the manner of curl.
struct CourierCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "courier",
        abstract: "Fetch a URL with Courier, Apple's URLSession for Linux on its own network stack.",
        discussion: """
        With no URL, courier starts a small HTTP server on 127.0.0.1 and shows a few requests \
        against it: a first request, keep-alive reuse, an upload echoed back, a chunked response \
        and a 404.
        """,
        version: "courier \(Courier.version) (Courier URLSession on its own stack: HTTP/1.1, HTTP/2, TLS 1.2-1.3, gzip, deflate, br, cookies, proxies (HTTP, SOCKS5), WebSocket)"
    )

    @Argument(help: "The URLs to fetch, one after the other. Omit them to run the local demo.")
    var urls: [String] = []

    @Option(name: .shortAndLong, help: "Write the body to this file instead of standard output; repeated, one per URL in order.")
    var output: [String] = []

    @Option(name: .customLong("url"), help: "A URL to fetch, as an argument would be. Repeatable.")
    var urlOptions: [String] = []

    @Flag(name: [.customShort("Z"), .customLong("parallel")], help: "Fetch the URLs at the same time rather than one after the other.")
    var parallel = false

    @Option(name: .customLong("parallel-max"), help: "With -Z: at most this many transfers at once (default 50).")
    var parallelMaximum: Int = 50

    @Flag(name: .shortAndLong, help: "Show the response head before the body.")
    var include = false

    @Option(name: [.customShort("X"), .customLong("request")], help: "The request method.")
    var method: String?

    @Option(name: [.customShort("H"), .customLong("header")], help: "A request header, \"Name: value\". Repeatable.")
    var headers: [String] = []

    @Flag(name: .shortAndLong, help: "Print the request and response heads on standard error.")
    var verbose = false

    @Flag(name: .shortAndLong, help: "Exit with status 22 when the server answers 400 or above.")
    var fail = false

    @Option(name: [.customShort("m"), .customLong("max-time")], help: "Give up after this many seconds.")
    var maxTime: Double?

    @Option(name: .customLong("cacert"), help: "Trust the CA certificates in this PEM file (instead of the system's) for https.")
    var caCertificates: String?

    @Flag(name: [.customShort("k"), .customLong("insecure")], help: "Accept any server certificate (no verification).")
    var insecure = false

    @Option(name: [.customShort("E"), .customLong("cert")], help: "A client certificate for TLS: a PEM file (its key too, unless --key), FILE:PASSPHRASE for an encrypted key.")
    var certificate: String?

    @Option(name: .customLong("key"), help: "The private key of --cert, a PEM file.")
    var key: String?

    @Option(name: .customLong("pass"), help: "The passphrase of --key.")
    var passphrase: String?

    /// The identity of --cert and --key, nil without --cert.
    func clientIdentity() throws -> SecIdentity? {
        guard var path = certificate else {
            if key != nil { throw ValidationError("--key needs --cert") }
            return nil
        }
        var pass = passphrase
        if let colon = path.lastIndex(of: ":"), !FileManager.default.fileExists(atPath: path) {
            pass = String(path[path.index(after: colon)...])
            path = String(path[..<colon])
        }
        guard let chain = FileManager.default.contents(atPath: path) else { throw CLIFailure(message: "could not load the client certificate \(path)", code: 58) }
        let keyPath = key ?? path
        guard let privateKey = FileManager.default.contents(atPath: keyPath) else { throw CLIFailure(message: "could not load the private key \(keyPath)", code: 58) }
        do {
            return try SecIdentity.identity(pemCertificateChain: chain, pemPrivateKey: privateKey, passphrase: pass)
        } catch {
            throw CLIFailure(message: "could not use the client certificate \(path) with the key \(keyPath): \(error)", code: 58)
        }
    }

    @Flag(name: .customLong("ws"), help: "Open a WebSocket to the URL (ws: or wss:): each line of standard input is sent as a text message, each message received is printed.")
    var webSocket = false

    @Flag(name: [.customShort("L"), .customLong("location")], help: "Follow redirects (at most 16, URLSession's limit); without it a redirect is the answer.")
    var location = false

    @Option(name: [.customShort("u"), .customLong("user")], help: "USER:PASSWORD for server authentication (Basic unless --digest or --anyauth); USER alone asks for the password.")
    var user: String?

    @Flag(name: .customLong("basic"), help: "With -u: send Basic credentials with the first request (the default).")
    var basic = false

    @Flag(name: .customLong("digest"), help: "With -u: answer a Digest challenge, nothing else.")
    var digest = false

    @Flag(name: .customLong("anyauth"), help: "With -u: answer the strongest scheme the server offers (Digest over Basic).")
    var anyAuth = false

    @Option(name: [.customShort("b"), .customLong("cookie")], help: "\"NAME=VALUE; …\" sent as the Cookie field, or a cookie file (Netscape format) to start from; turns cookie handling on.")
    var cookie: String?

    @Option(name: [.customShort("c"), .customLong("cookie-jar")], help: "Write every cookie to this file (Netscape format; - for standard output) when done; turns cookie handling on.")
    var cookieJar: String?

    @Flag(name: [.customShort("j"), .customLong("junk-session-cookies")], help: "With -b FILE: leave out the file's session cookies (start a new session).")
    var junkSessionCookies = false

    @OptionGroup var proxyOptions: ProxyOptions

    @OptionGroup var outputOptions: OutputOptions

    @OptionGroup var requestOptions: RequestOptions

    @OptionGroup var reportOptions: ReportOptions

    @OptionGroup var retryOptions: RetryOptions

    /// The cookie storage of -b FILE and -c (nil without them), shared by every URL; -b
    /// NAME=VALUE is a Cookie field instead. As curl: no cookie engine unless -b FILE or -c
    /// asks for one (a cookie set on a redirect is not sent to the next hop otherwise).
    func cookieEngine(field: inout String?) throws -> HTTPCookieStorage? {
        var storage: HTTPCookieStorage?
        if let cookie {
            if cookie.contains("=") {
                field = cookie
            } else {
                storage = URLSessionConfiguration.ephemeral.httpCookieStorage
                // curl: -b with a file that cannot be read only turns the engine on.
                if !cookie.isEmpty, FileManager.default.fileExists(atPath: cookie) {
                    let cookies = try CookieFile.read(cookie, junkSessionCookies: junkSessionCookies)
                    for loaded in cookies { storage?.setCookie(loaded) }
                }
            }
        }
        if cookieJar != nil && storage == nil {
            storage = URLSessionConfiguration.ephemeral.httpCookieStorage
        }
        return storage
    }

    /// The credential of -u and the scheme options; nil without -u.
    func authentication() throws -> Transfer.Authentication? {
        let modes = [basic, digest, anyAuth].filter { $0 }.count
        guard modes <= 1 else { throw ValidationError("--basic, --digest and --anyauth exclude each other") }
        guard let user else {
            if modes > 0 { throw ValidationError("--basic, --digest and --anyauth need -u USER:PASSWORD") }
            return nil
        }
        let mode: Transfer.Authentication.Mode = digest ? .digest : anyAuth ? .any : .basic
        if let colon = user.firstIndex(of: ":") {
            return Transfer.Authentication(user: String(user[..<colon]), password: String(user[user.index(after: colon)...]), mode: mode)
        }
        guard isatty(STDIN_FILENO) == 1, let entered = getpass("Enter host password for user '\(user)':") else {
            throw ValidationError("-u \(user) has no password, and there is no terminal to ask for it: give -u USER:PASSWORD")
        }
        return Transfer.Authentication(user: user, password: String(cString: entered), mode: mode)
    }

    mutating func run() async throws {
        guard !urls.isEmpty || !urlOptions.isEmpty else {
            try await Demo.run()
            return
        }
        // As curl: the URLs go one after the other, each -o (then each -O) to the next URL,
        // the cookies of one seen by the next; the exit status is the last transfer's.
        var cookieField: String?
        let cookieStorage = try cookieEngine(field: &cookieField)
        let all = urls + urlOptions
        let jobs = all.enumerated().map { index, url in
            let output = index < self.output.count ? self.output[index] : nil
            return (url: url, output: output, remoteName: output == nil && index - self.output.count < outputOptions.remoteNameCount)
        }
        var status: Int32 = 0
        let sessions = SessionCache()
        defer { sessions.finish() }
        let narrator = try Narrator.make(verbose: verbose, traceText: reportOptions.traceASCII, traceHex: reportOptions.trace)
        if parallel {
            guard parallelMaximum > 0 else { throw ValidationError("--parallel-max takes 1 or more") }
            // -Z: every transfer at once (up to --parallel-max); the status is the last
            // failure's in URL order, 0 when none failed.
            var statuses = [Int32](repeating: 0, count: jobs.count)
            let command = self
            let cookies = UncheckedCookies(storage: cookieStorage, field: cookieField)
            await withTaskGroup(of: (Int, Int32).self) { group in
                var next = 0
                func add() {
                    let index = next
                    next += 1
                    group.addTask { (index, await command.status(of: jobs[index], cookies: cookies, sessions: sessions, narrator: narrator)) }
                }
                while next < min(jobs.count, parallelMaximum) { add() }
                for await (index, code) in group {
                    statuses[index] = code
                    if next < jobs.count { add() }
                }
            }
            status = statuses.last { $0 != 0 } ?? 0
        } else {
            let cookies = UncheckedCookies(storage: cookieStorage, field: cookieField)
            for job in jobs { status = await self.status(of: job, cookies: cookies, sessions: sessions, narrator: narrator) }
        }
        if let cookieJar, let cookieStorage {
            do {
                try CookieFile.write(cookieStorage.cookies ?? [], to: cookieJar)
            } catch {
                reportOptions.complain("\(error)")
                throw ExitCode(23)
            }
        }
        if status != 0 { throw ExitCode(status) }
    }

    /// One URL's transfer, its failure reported; its exit status.
    private func status(of job: (url: String, output: String?, remoteName: Bool), cookies: UncheckedCookies, sessions: SessionCache, narrator: Narrator?) async -> Int32 {
        do {
            try await transfer(job.url, output: job.output, remoteName: job.remoteName, cookies: (cookies.storage, cookies.field), sessions: sessions, narrator: narrator)
            return 0
        } catch let failure as CLIFailure {
            reportOptions.complain(failure.message)
            return failure.code
        } catch let exit as ExitCode {
            return exit.rawValue
        } catch {
            reportOptions.complain("\(error)")
            return 2
        }
    }

    private func transfer(
        _ url: String, output: String?, remoteName: Bool, cookies: (storage: HTTPCookieStorage?, field: String?), sessions: SessionCache,
        narrator: Narrator?
    ) async throws {
        guard var parsed = URL(string: url), let scheme = parsed.scheme, parsed.host() != nil || scheme == "file" || scheme == "data" else {
            throw CLIFailure(message: "URL using bad/illegal format or missing URL: \(url)", code: 3)
        }
        parsed = outputOptions.uploadURL(parsed)
        var request = URLRequest(url: parsed)
        var omitted: Set<String> = requestOptions.compressed ? [] : ["Accept-Encoding", "Accept-Language"]
        for header in headers {
            // curl's forms: "Name: value"; "Name:" removes the field; "Name;" sends it empty.
            if header.hasSuffix(";"), !header.contains(":") {
                request.addValue("", forHTTPHeaderField: String(header.dropLast()).trimmingCharacters(in: .whitespaces))
                continue
            }
            guard let colon = header.firstIndex(of: ":") else {
                throw ValidationError("a header must look like \"Name: value\", \"Name:\" or \"Name;\": \(header)")
            }
            let name = header[..<colon].trimmingCharacters(in: .whitespaces)
            let value = header[header.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            if value.isEmpty {
                omitted.insert(name)
                request.setValue(nil, forHTTPHeaderField: name)
                continue
            }
            request.addValue(value, forHTTPHeaderField: name)
        }
        var uploadFile: URL?
        if let upload = outputOptions.uploadFile {
            if requestOptions.hasBody { throw ValidationError("-T and -d exclude each other") }
            uploadFile = URL(fileURLWithPath: upload)
            guard FileManager.default.isReadableFile(atPath: upload) else {
                throw CLIFailure(message: "cannot read \(upload)", code: 26)
            }
            request.httpMethod = "PUT"
        }
        try requestOptions.apply(to: &request, explicitMethod: method)
        parsed = request.url ?? parsed
        if let maxTime { request.timeoutInterval = maxTime }
        var trust = TrustPolicy.system
        if insecure {
            trust = .acceptAny
        } else if let caCertificates {
            trust = .anchors(try TrustPolicy.loadPEM(caCertificates))
        }
        if webSocket {
            let status = await WebSocketClient.run(request, trust: trust, verbose: verbose)
            if status != 0 { throw ExitCode(status) }
            return
        }
        var authentication = try authentication()
        authentication?.url = parsed
        if let authentication, authentication.mode == .basic {
            // As curl's --basic: the credential goes with the first request, unasked.
            let token = Data("\(authentication.user):\(authentication.password)".utf8).base64EncodedString()
            request.setValue("Basic \(token)", forHTTPHeaderField: "Authorization")
        }

        try reportOptions.prepareDirectory(for: output)
        if let dumpHeader = reportOptions.dumpHeader { try reportOptions.prepareDirectory(for: dumpHeader) }
        let destination = try outputOptions.destination(
            output: output.map(reportOptions.place), remoteName: remoteName, url: parsed, request: &request, directory: reportOptions.outputDirectory
        )
        var headerDump: OutputSink?
        if let dumpHeader = reportOptions.dumpHeader {
            if dumpHeader == "-" {
                headerDump = OutputSink(handle: .standardOutput)
            } else {
                let path = reportOptions.place(dumpHeader)
                guard let handle = OutputSink.create(path) else {
                    throw CLIFailure(message: "cannot write \(path)", code: 23)
                }
                headerDump = OutputSink(handle: handle)
            }
        }
        let configuration = URLSessionConfiguration.ephemeral
        // As curl: every URL goes to the network (an ephemeral session would cache in memory,
        // and the command's URLs share a session).
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.courierOmittedDefaultFields = omitted
        // As curl: a coded body is decoded with --compressed only; without it, written as sent.
        configuration.courierDecodesContent = requestOptions.compressed
        // As curl: a transfer that fails keeps in its file what it wrote.
        configuration.courierKeepsPartialDownloads = true
        try requestOptions.apply(to: configuration)
        let proxyChoice = try proxyOptions.apply(to: configuration, url: parsed)
        if let proxy = proxyChoice.proxy { narrator?.info("Using proxy \(proxy) (from \(proxyChoice.source))") }
        if let maxTime { configuration.timeoutIntervalForResource = maxTime }
        if let field = cookies.field { request.setValue(field, forHTTPHeaderField: "Cookie") }
        configuration.httpCookieStorage = cookies.storage
        configuration.httpCookieAcceptPolicy = .always
        // As curl: a progress meter on standard error, unless -s or the body goes to a terminal.
        let bodyToStandardOutput = (output == nil || output == "-") && !remoteName
        let showsProgress = !reportOptions.silent && !(bodyToStandardOutput && isatty(STDOUT_FILENO) == 1)
        let identity = try clientIdentity()
        let started = Date()
        var triesLeft = retryOptions.retries
        var attempt = 0
        var outcome: Transfer.Outcome
        var task: URLSessionTask
        var closeFailure: (message: String, code: Int32)?
        while true {
            // Each try writes its file anew (-o, -O); what went to standard output stays.
            let sink = OutputSink(destination)
            let behaviour = Transfer.Behaviour(
                failsWithoutBody: fail && !reportOptions.failWithBody, maximumRedirects: requestOptions.maxRedirects, headerDump: headerDump,
                progress: showsProgress ? ProgressMeter(style: reportOptions.progressBar ? .bar : .table) : nil, clientIdentity: identity
            )
            let transfer = Transfer(
                sink: sink, include: include || requestOptions.head, narrator: narrator, trust: trust, followsRedirects: location,
                authentication: authentication, proxyCredential: proxyChoice.credential, behaviour: behaviour
            )
            // One session per proxy route for the whole command, so that the URLs reuse its
            // connections as curl's do; each transfer is its task's delegate.
            let session = sessions.session(for: proxyChoice.proxy.map { "\($0)" } ?? "", configuration: configuration)
            if let uploadFile {
                task = session.uploadTask(with: request, fromFile: uploadFile)
            } else if sink.takesDownloadedFile && !include && !requestOptions.head && (narrator?.style ?? .verbose) == .verbose {
                // A body for a file goes through a download task, which writes it off the
                // event loop; -i's heads and the traces' data blocks need the bytes as they come.
                task = session.downloadTask(with: request)
            } else {
                task = session.dataTask(with: request)
            }
            task.delegate = transfer
            outcome = await transfer.run(task)
            closeFailure = sink.close()
            guard triesLeft > 0, closeFailure == nil, let reason = retryOptions.reason(for: outcome, failsOnStatus: fail || reportOptions.failWithBody) else { break }
            let delay = retryOptions.delay(before: attempt, response: outcome.response)
            guard retryOptions.allows(elapsed: Date().timeIntervalSince(started), delay: delay) else { break }
            if !reportOptions.silent {
                FileHandle.standardError.write(Data("Warning: Problem : \(reason). Will retry in \(delay) seconds. \(triesLeft) retries left.\n".utf8))
            }
            triesLeft -= 1
            attempt += 1
            try await Task.sleep(for: .seconds(delay))
        }
        _ = headerDump?.close()
        // The first reason wins, as curl reports one.
        var failure: CLIFailure?
        if let output = outcome.outputFailure ?? closeFailure {
            failure = CLIFailure(message: output.message, code: output.code)
        } else if let trustFailure = outcome.trustFailure {
            failure = CLIFailure(message: "SSL certificate problem: the server certificate is not trusted by \(caCertificates ?? "the given CA file"): \(trustFailure)", code: 60)
        } else if outcome.tooManyRedirects {
            failure = CLIFailure(message: "Maximum (\(requestOptions.maxRedirects ?? 0)) redirects followed", code: 47)
        } else if let status = outcome.failedStatus {
            failure = CLIFailure(message: "The requested URL returned error: \(status)", code: 22)
        } else if let error = outcome.error {
            let code = (error as? URLError)?.code.rawValue ?? 0
            failure = CLIFailure(message: "\(error.localizedDescription) (URLError \(code))", code: curlExitCode(for: error, receivedResponse: outcome.response != nil))
        } else if fail || reportOptions.failWithBody, let status = outcome.status, status >= 400 {
            failure = CLIFailure(message: "The requested URL returned error: \(status)", code: 22)
        }
        let report = WriteOutReport(
            response: outcome.response, effectiveURL: outcome.effectiveURL ?? task.currentRequest?.url, metrics: outcome.metrics,
            bytesDownloaded: outcome.bytesDownloaded, redirects: outcome.redirects, exitCode: failure?.code ?? 0, errorMessage: failure?.message ?? ""
        )
        if let text = try reportOptions.writeOutText(report) {
            FileHandle.standardOutput.write(Data(text.utf8))
        }
        if let failure { throw failure }
    }
}

/// The command's sessions, one per proxy route (every other setting is the same for all its
/// URLs), made on first use and invalidated once every transfer is done.
final class SessionCache: @unchecked Sendable {
    private let sessions = Mutex<[String: URLSession]>([:])

    func session(for route: String, configuration: URLSessionConfiguration) -> URLSession {
        sessions.withLock { sessions in
            if let session = sessions[route] { return session }
            let session = URLSession(configuration: configuration, delegate: nil, delegateQueue: nil)
            sessions[route] = session
            return session
        }
    }

    func finish() {
        for session in sessions.withLock({ $0.values }) { session.finishTasksAndInvalidate() }
    }
}

/// The shared cookie storage and -b field, handed to concurrent transfers (HTTPCookieStorage
/// locks itself).
struct UncheckedCookies: @unchecked Sendable {
    var storage: HTTPCookieStorage?
    var field: String?
}
