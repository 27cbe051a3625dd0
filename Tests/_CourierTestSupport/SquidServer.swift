import CourierSync
import Foundation
import Glibc

/// squid (Debian's `squid` 5) as a forward HTTP proxy on 127.0.0.1, run by the test harness
/// with a generated configuration in its own folder of the test run, and stopped by PID.
///
/// One squid process serves two ports: ``openPort`` forwards for anyone on loopback, and
/// ``authPort`` only for requests carrying Basic proxy credentials ``user`` / ``password``
/// (checked by squid's `basic_ncsa_auth` against an htpasswd file written here); without them
/// it answers 407 with `Proxy-Authenticate: Basic realm="Courier squid"` (``realm``). Both
/// forward absolute-form requests (`GET http://127.0.0.1:PORT/path`) and tunnel `CONNECT` to any
/// port. Nothing is cached. Forwarded requests gain `Via: 1.1 courier-squid (squid/VERSION)`
/// and, when they had none, `Cache-Control: max-age=259200` (squid's doing); an
/// `X-Forwarded-For` is removed, not added.
///
/// squid runs in the foreground (`-N`), so the PID started here is the proxy itself; `stop()`
/// kills it outright (squid's own orderly shutdown takes two seconds whatever the
/// configuration) and removes what it leaves behind. Run as root, squid insists on dropping
/// privileges: it runs as `nobody`, and its folder is handed to that user.
public final class SquidServer: Sendable {
    /// The user name the authenticating port accepts.
    public static let user = "proxyuser"
    /// The password of ``user``.
    public static let password = "proxy-secret"
    /// The realm of the 407 challenge on ``authPort``.
    public static let realm = "Courier squid"

    /// Forwards any request from loopback, without authentication.
    public let openPort: Int
    /// Forwards only requests with Basic proxy credentials ``user`` / ``password``.
    public let authPort: Int
    /// squid's folder: `squid.conf`, `htpasswd`, `access.log`, `cache.log`, `squid.out` (its
    /// standard output and error).
    public let directory: URL
    /// The squid process.
    public let pid: Int32
    /// squid's service name (`-n`), unique per instance: it names squid's shared-memory
    /// segments, which would otherwise collide between instances.
    private let serviceName: String

    /// A request the start-up probe sends: refused before any authentication or DNS lookup and
    /// left out of the access log.
    private static let probeHost = "courier-startup-probe"

    private static let sharedServer = Mutex<Result<SquidServer, TestServerError>?>(nil)

    /// The server shared by a test process, started on first use.
    public static func shared() throws -> SquidServer {
        try sharedServer.withLock { cached in
            if let cached { return try cached.get() }
            let result = Result { () throws(TestServerError) -> SquidServer in try SquidServer() }
            cached = result
            return try result.get()
        }
    }

    /// Starts squid; throws when it is not installed or does not answer on both ports.
    public init() throws(TestServerError) {
        guard let binary = ["/usr/sbin/squid", "/usr/bin/squid"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw TestServerError("squid is not installed (scripts/lib/ensure-system.sh test installs it)")
        }
        let helper = "/usr/lib/squid/basic_ncsa_auth"
        guard FileManager.default.isExecutableFile(atPath: helper) else {
            throw TestServerError("squid's \(helper) is missing (apt-get install squid)")
        }
        guard let openssl = ["/usr/bin/openssl", "/usr/local/bin/openssl"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw TestServerError("openssl is not installed (scripts/lib/ensure-system.sh test installs it)")
        }
        // basic_ncsa_auth reads Apache's MD5 ("$apr1$") hashes.
        let hash: String
        do {
            hash = try runTool(openssl, ["passwd", "-apr1", Self.password]).trimmingCharacters(in: .whitespacesAndNewlines)
        } catch {
            throw TestServerError("cannot hash the proxy password with openssl: \(error)")
        }
        guard hash.hasPrefix("$apr1$") else {
            throw TestServerError("openssl passwd -apr1 gave no apr1 hash: \(hash)")
        }

        let directory = TestRun.makeDirectory("squid")
        let path = directory.path
        let openPort = freeLoopbackPort()
        let authPort = freeLoopbackPort()
        let serviceName = "courier" + UUID().uuidString.prefix(8).lowercased()

        // As root, squid refuses to run unless told which user to become; it then opens its
        // logs and PID file as that user, so the folder must be that user's and every folder
        // above it searchable by it.
        var effectiveUser: (name: String, uid: uid_t, gid: gid_t)?
        if geteuid() == 0 {
            guard let entry = getpwnam("nobody") else {
                throw TestServerError("squid cannot run as root, and there is no user nobody to run it as")
            }
            effectiveUser = ("nobody", entry.pointee.pw_uid, entry.pointee.pw_gid)
            try Self.checkSearchable(above: directory, uid: entry.pointee.pw_uid, gid: entry.pointee.pw_gid)
        }

        let configuration = """
        # Written by SquidServer.swift (Courier's test harness) for one test process.
        http_port 127.0.0.1:\(openPort) name=open
        http_port 127.0.0.1:\(authPort) name=auth
        visible_hostname courier-squid
        \(effectiveUser.map { "cache_effective_user \($0.name)" } ?? "# not root: squid runs as the invoking user")
        pid_filename \(path)/squid.pid
        cache_log \(path)/cache.log
        coredump_dir \(path)
        netdb_filename none

        # One line per transaction: time, client, proxy port, method, URL, status, user, result.
        logformat courier %ts.%03tu %>a %lp %rm %ru %>Hs %un %Ss
        acl startup_probe dstdomain \(Self.probeHost)
        access_log stdio:\(path)/access.log logformat=courier !startup_probe
        buffered_logs off
        logfile_rotate 0
        strip_query_terms off

        # A proxy only: no disk cache, nothing kept in memory, no ICMP pinger.
        cache deny all
        cache_mem 8 MB
        memory_pools off
        digest_generation off
        pinger_enable off
        max_filedescriptors 4096
        shutdown_lifetime 0 seconds
        forwarded_for delete

        auth_param basic program \(helper) \(path)/htpasswd
        auth_param basic children 5 startup=1 idle=1
        auth_param basic realm \(Self.realm)

        acl loopback src 127.0.0.1/32
        acl open_port myportname open
        acl auth_port myportname auth
        acl authenticated proxy_auth REQUIRED
        # CONNECT may reach any port (the tests' TLS servers listen on random high ports).
        http_access deny startup_probe
        http_access allow open_port loopback
        http_access allow auth_port loopback authenticated
        http_access deny all

        """
        let configFile = directory.appendingPathComponent("squid.conf")
        let passwordFile = directory.appendingPathComponent("htpasswd")
        guard (try? configuration.write(to: configFile, atomically: true, encoding: .utf8)) != nil,
              (try? "\(Self.user):\(hash)\n".write(to: passwordFile, atomically: true, encoding: .utf8)) != nil else {
            throw TestServerError("cannot write squid's configuration in \(path)")
        }
        if let effectiveUser {
            for file in [path, configFile.path, passwordFile.path] where chown(file, effectiveUser.uid, effectiveUser.gid) != 0 {
                throw TestServerError("cannot hand \(file) to \(effectiveUser.name) for squid: errno \(errno)")
            }
        }

        let arguments = ["-N", "-n", serviceName, "-f", configFile.path]
        let pid = try startServerProcess(binary, arguments, directory: directory, output: directory.appendingPathComponent("squid.out"))
        self.pid = pid
        self.openPort = openPort
        self.authPort = authPort
        self.directory = directory
        self.serviceName = serviceName
        Self.register(pid: pid, serviceName: serviceName, directory: directory)
        // For scripts/test.sh, which removes the shared-memory segments of a squid it had to kill.
        try? serviceName.write(to: directory.appendingPathComponent("shm.name"), atomically: true, encoding: .utf8)

        // squid usually answers within 50 ms; a request for the probe host gets its 403 on
        // each port once that port is served.
        let probe = "http://\(Self.probeHost)/"
        let deadline = Date().addingTimeInterval(20)
        var answered = false
        while Date() < deadline, !Self.hasExited(pid) {
            if waitForHTTPAnswer(port: openPort, path: probe, timeout: 0.25), waitForHTTPAnswer(port: authPort, path: probe, timeout: 0.25) {
                answered = true
                break
            }
        }
        guard answered else {
            let cacheLog = Self.tail(of: directory.appendingPathComponent("cache.log"))
            let output = Self.tail(of: directory.appendingPathComponent("squid.out"))
            stop()
            throw TestServerError("""
                squid did not answer on 127.0.0.1:\(openPort) and 127.0.0.1:\(authPort): try `\(binary) \(arguments.joined(separator: " "))`
                cache.log ends with:
                \(cacheLog)
                squid.out: \(output)
                """)
        }
    }

    /// The contents of squid's access log, one line per finished transaction:
    ///
    ///     TIME CLIENT PORT METHOD URL STATUS USER RESULT
    ///     1795510849.887 127.0.0.1 39102 GET http://127.0.0.1:39200/hello.txt?q=1 200 proxyuser TCP_MISS
    ///     1795510849.916 127.0.0.1 39101 CONNECT 127.0.0.1:39201 200 - TCP_TUNNEL
    ///
    /// TIME is seconds since 1970 with milliseconds; CLIENT the client's address; PORT the proxy
    /// port the request came in on (``openPort`` or ``authPort``; "-" when squid could not parse
    /// the request); URL the absolute URL of a forwarded request, query included, or `host:port`
    /// of a CONNECT; STATUS the status squid sent the client (407 when credentials were missing
    /// or wrong); USER the proxy user name the request presented ("-" when none; present even
    /// when squid rejected it); RESULT squid's result code (`TCP_MISS` forwarded, `TCP_TUNNEL`
    /// a CONNECT tunnel, `TCP_DENIED` refused, `NONE_NONE` unparsable or unreachable).
    ///
    /// squid writes a line when the transaction ends: a CONNECT tunnel appears only once the
    /// tunnel is closed, so wait with ``waitForAccessEntry(timeout:where:)`` or close the
    /// connection first. The harness's start-up probes are not logged.
    public func accessLog() -> String {
        (try? String(contentsOf: directory.appendingPathComponent("access.log"), encoding: .utf8)) ?? ""
    }

    /// The lines of ``accessLog()`` parsed, oldest first.
    public func accessEntries() -> [SquidLogEntry] {
        accessLog().split(separator: "\n").compactMap { SquidLogEntry(line: $0) }
    }

    /// The first access-log entry satisfying `predicate`, waiting up to `timeout` seconds for
    /// squid to write it; nil when none appears in time.
    public func waitForAccessEntry(timeout: TimeInterval = 5, where predicate: (SquidLogEntry) -> Bool) -> SquidLogEntry? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let entry = accessEntries().first(where: predicate) { return entry }
            if Date() >= deadline { return nil }
            usleep(20_000)
        }
    }

    /// Stops squid (SIGKILL) and removes its PID file and shared-memory segments; later calls
    /// do nothing.
    public func stop() {
        guard Self.running.withLock({ $0.removeValue(forKey: pid) }) != nil else { return }
        Self.terminate(pid: pid, serviceName: serviceName, directory: directory)
    }

    // MARK: - Process bookkeeping

    private struct Running: Sendable {
        var serviceName: String
        var directory: URL
    }

    /// Instances not yet stopped, by PID, so that the exit of the test process stops them the
    /// same way `stop()` does.
    private static let running = Mutex<[Int32: Running]>([:])
    private static let exitHookInstalled = Mutex(false)

    private static func register(pid: Int32, serviceName: String, directory: URL) {
        running.withLock { $0[pid] = Running(serviceName: serviceName, directory: directory) }
        // Registered after ChildProcesses' own hook (startServerProcess installs that one
        // first), so it runs before it: squid is killed here rather than sent SIGTERM there.
        let first = exitHookInstalled.withLock { installed -> Bool in
            defer { installed = true }
            return !installed
        }
        if first { atexit { SquidServer.stopAllAtExit() } }
    }

    private static func stopAllAtExit() {
        let all = running.withLock { running -> [Int32: Running] in
            defer { running = [:] }
            return running
        }
        for (pid, entry) in all { terminate(pid: pid, serviceName: entry.serviceName, directory: entry.directory) }
    }

    /// Kills squid and cleans up after it: with SIGKILL it leaves its PID file (which would make
    /// a squid started on the same folder refuse to run) and its segments in /dev/shm. Its
    /// `basic_ncsa_auth` helpers exit by themselves when their input closes.
    private static func terminate(pid: Int32, serviceName: String, directory: URL) {
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        ChildProcesses.forget(pid)
        try? FileManager.default.removeItem(at: directory.appendingPathComponent("squid.pid"))
        let segments = (try? FileManager.default.contentsOfDirectory(atPath: "/dev/shm")) ?? []
        for segment in segments where segment.hasPrefix("\(serviceName)-") {
            try? FileManager.default.removeItem(atPath: "/dev/shm/\(segment)")
        }
    }

    private static func hasExited(_ pid: Int32) -> Bool {
        var status: Int32 = 0
        return waitpid(pid, &status, WNOHANG) == pid || kill(pid, 0) != 0
    }

    /// Throws unless `uid`/`gid` may search every folder above `directory`.
    private static func checkSearchable(above directory: URL, uid: uid_t, gid: gid_t) throws(TestServerError) {
        var folder = (directory.path as NSString).deletingLastPathComponent
        while !folder.isEmpty {
            var info = stat()
            if stat(folder, &info) == 0 {
                let mode = info.st_mode
                let searchable = info.st_uid == uid ? mode & 0o100 != 0 : info.st_gid == gid ? mode & 0o010 != 0 : mode & 0o001 != 0
                guard searchable else {
                    throw TestServerError("squid runs as nobody when started by root, and nobody cannot enter \(folder): make it searchable (chmod o+x) or point COURIER_TEST_RUN_DIR elsewhere")
                }
            }
            if folder == "/" { break }
            folder = (folder as NSString).deletingLastPathComponent
        }
    }

    /// The last lines of a file, or "(none)".
    private static func tail(of file: URL, lines: Int = 20) -> String {
        guard let text = try? String(contentsOf: file, encoding: .utf8), !text.isEmpty else { return "(none)" }
        return text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines).joined(separator: "\n")
    }
}

/// One line of ``SquidServer/accessLog()``.
public struct SquidLogEntry: Sendable, Equatable, CustomStringConvertible {
    /// When squid logged the transaction, in seconds since 1970.
    public var time: Double
    /// The client's address, e.g. "127.0.0.1".
    public var client: String
    /// The proxy port the request came in on; nil when squid could not parse the request.
    public var port: Int?
    /// The request method, e.g. "GET" or "CONNECT".
    public var method: String
    /// The absolute URL of a forwarded request (query included), or `host:port` of a CONNECT.
    public var url: String
    /// The status squid sent the client.
    public var status: Int
    /// The proxy user name the request presented, nil when none.
    public var user: String?
    /// squid's result code, e.g. "TCP_MISS", "TCP_TUNNEL", "TCP_DENIED".
    public var result: String

    /// Parses a line in the format of ``SquidServer/accessLog()``; nil for anything else.
    public init?(line: some StringProtocol) {
        let fields = String(line).split(separator: " ").map(String.init)
        guard fields.count == 8, let time = Double(fields[0]) else { return nil }
        self.time = time
        client = fields[1]
        port = Int(fields[2])
        method = fields[3]
        url = fields[4]
        status = Int(fields[5]) ?? 0
        user = fields[6] == "-" ? nil : fields[6]
        result = fields[7]
    }

    /// The entry as squid wrote it (time aside): "CONNECT 127.0.0.1:PORT 200 - TCP_TUNNEL".
    public var description: String { "\(method) \(url) \(status) \(user ?? "-") \(result)" }
}
