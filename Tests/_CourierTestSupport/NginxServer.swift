import CourierSync
import Foundation
import Glibc

/// nginx on 127.0.0.1, run by the test harness from its own prefix with a generated
/// configuration, and stopped by PID.
///
/// Locations: `/files/…` static files (see ``fixtures``); `/echo` answers with what the request
/// carried (njs); `/status/NNN`; `/chunked/…` the same files sent chunked (SSI); `/dav/…`
/// accepts PUT and DELETE; `/close/…` answers with `Connection: close`. Every response carries
/// `X-Connection` (nginx's connection serial number) and `X-Connection-Requests`.
///
/// Redirects (relative Locations unless said otherwise): `/redirect/301`, `/302`, `/303`,
/// `/307`, `/308` → `/echo`; `/redirect/hop1` → `/redirect/hop2` → `/files/hello.txt`;
/// `/redirect/loop` → itself; `/redirect/absolute` → `http://127.0.0.1:PORT/files/hello.txt`
/// (absolute, same scheme and port); `/redirect/unsupported-scheme` → `ftp2://127.0.0.1/x`.
///
/// Content coding: `/gzip/…` the fixtures, gzip-compressed on the fly (chunked, no
/// Content-Length) when the request's Accept-Encoding allows gzip; `/static-gz/…` (see
/// ``staticGzipFixtures``) served by `gzip_static` from a pre-compressed `NAME.gz` (with
/// Content-Length) when it allows gzip, else the plain file. nginx has no brotli here: httpbin
/// serves `/brotli`.
public final class NginxServer: Sendable {
    public let port: Int
    public let directory: URL
    public let pid: Int32
    /// TLS virtual hosts by name, each on its own port: "good" (server.pem, HTTP/2 and
    /// HTTP/1.1 by ALPN), "h1" (the same, HTTP/1.1 only), "expired", "notyet", "wronghost",
    /// "selfsigned", "clientcert" (requires a client certificate from the test CA), "tls12"
    /// (TLS 1.2 only), "goaway" (HTTP/2, GOAWAY after 10 requests per connection).
    public let tlsPorts: [String: Int]
    /// The test PKI the TLS hosts use.
    public let certificates: TestCertificates
    /// Cleartext HTTP/2 with prior knowledge (h2c).
    public let h2cPort: Int
    /// HTTP/1.1 with `keepalive_requests 10` and `keepalive_timeout 1s`: connections close often.
    public let limitedPort: Int

    /// Static files served under `/files/` and `/chunked/`: name → bytes.
    public static let fixtures: [String: [UInt8]] = [
        "hello.txt": Array("Hello from nginx\n".utf8),
        "100.bin": deterministicBytes(count: 100, seed: 1),
        "64k.bin": deterministicBytes(count: 64 * 1024, seed: 2),
        "1m.bin": deterministicBytes(count: 1024 * 1024, seed: 3),
        "8m.bin": deterministicBytes(count: 8 * 1024 * 1024, seed: 4),
        "empty.txt": [],
    ]

    /// Files under `/static-gz/`, each beside its `NAME.gz` (gzip -9): name → uncompressed bytes.
    /// `repeated.txt` compresses well, so its decoded body is far longer than its Content-Length.
    public static let staticGzipFixtures: [String: [UInt8]] = [
        "hello.txt": Array("Hello from nginx\n".utf8),
        "repeated.txt": Array(String(repeating: "Courier decodes what gzip_static serves.\n", count: 2000).utf8),
    ]

    private static let sharedServer = Mutex<Result<NginxServer, TestServerError>?>(nil)

    /// The server shared by a test process, started on first use.
    public static func shared() throws -> NginxServer {
        try sharedServer.withLock { cached in
            if let cached { return try cached.get() }
            let result = Result { () throws(TestServerError) -> NginxServer in try NginxServer() }
            cached = result
            return try result.get()
        }
    }

    /// The base URL, e.g. `http://127.0.0.1:PORT`.
    public var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// The users and passwords `/basic/` (nginx `auth_basic`, realm "Courier nginx") accepts;
    /// its files are those of `/files/`.
    public static let basicUsers: [(user: String, password: String)] = [("courier", "open sesame"), ("jürgen", "pässwörd")]

    public func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

    /// An https URL on one of the TLS hosts, for `host` (127.0.0.1 or localhost).
    public func tlsURL(_ name: String = "good", _ path: String, host: String = "127.0.0.1") -> URL {
        URL(string: "https://\(host):\(tlsPorts[name]!)\(path)")!
    }

    /// Starts nginx; throws when it is not installed or does not come up.
    public init(extraServerConfiguration: String = "") throws(TestServerError) {
        guard let binary = ["/usr/sbin/nginx", "/usr/bin/nginx"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw TestServerError("nginx is not installed (apt-get install nginx libnginx-mod-http-js)")
        }
        let directory = TestRun.makeDirectory("nginx")
        let port = freeLoopbackPort()
        let www = directory.appendingPathComponent("www")
        for folder in ["www/files", "www/chunked", "www/dav", "www/close", "www/gzip", "www/static-gz", "temp"] {
            try? FileManager.default.createDirectory(at: directory.appendingPathComponent(folder), withIntermediateDirectories: true)
        }
        for (name, bytes) in Self.fixtures {
            for folder in ["files", "chunked", "close", "gzip"] {
                _ = FileManager.default.createFile(atPath: www.appendingPathComponent("\(folder)/\(name)").path, contents: Data(bytes))
            }
        }
        // gzip_static serves NAME.gz, compressed here once (gzip is in every Debian system).
        for (name, bytes) in Self.staticGzipFixtures {
            let plain = www.appendingPathComponent("static-gz/\(name)")
            _ = FileManager.default.createFile(atPath: plain.path, contents: Data(bytes))
            do {
                try runTool("/bin/sh", ["-c", "gzip -c -n -9 '\(plain.path)' > '\(plain.path).gz'"])
            } catch {
                throw TestServerError("cannot gzip the static-gz fixture \(name): \(error)")
            }
        }
        let script = directory.appendingPathComponent("echo.js")
        guard let source = Bundle.module.url(forResource: "echo", withExtension: "js"),
              (try? FileManager.default.copyItem(at: source, to: script)) != nil else {
            throw TestServerError("the njs echo script is missing from the test bundle")
        }
        let jsModule = "/usr/lib/nginx/modules/ngx_http_js_module.so"
        guard FileManager.default.fileExists(atPath: jsModule) else {
            throw TestServerError("nginx's njs module is not installed (apt-get install libnginx-mod-http-js)")
        }
        let path = directory.path
        let h2cPort = freeLoopbackPort()
        let limitedPort = freeLoopbackPort()
        let certificates: TestCertificates
        do {
            certificates = try TestCertificates.make()
        } catch let error as TestServerError {
            throw error
        } catch {
            throw TestServerError("\(error)")
        }
        var tlsPorts: [String: Int] = [:]
        var tlsServers = ""
        let hosts: [(String, String, Bool, String)] = [
            ("good", "server", true, ""), ("h1", "server", false, ""), ("expired", "expired", true, ""),
            ("notyet", "notyet", true, ""), ("wronghost", "wronghost", true, ""), ("selfsigned", "selfsigned", true, ""),
            ("clientcert", "server", false, "ssl_verify_client on; ssl_client_certificate \(certificates.caPEM);"),
            ("tls12", "server", false, "ssl_protocols TLSv1.2;"),
            ("goaway", "server", true, "keepalive_requests 10;"),
        ]
        for (name, certificate, http2, extra) in hosts {
            let tlsPort = freeLoopbackPort()
            tlsPorts[name] = tlsPort
            tlsServers += """
                server {
                    listen 127.0.0.1:\(tlsPort) ssl\(http2 ? " http2" : "");
                    ssl_certificate \(certificates.path("\(certificate).pem"));
                    ssl_certificate_key \(certificates.path("\(certificate).key"));
                    \(extra)
                    include \(path)/locations.conf;
                }

            """
        }
        let locations = """
        root \(www.path);
        location /echo {
            client_max_body_size 0;
            client_body_buffer_size 300m;
            client_body_in_single_buffer on;
            js_content echo.echo;
        }
        location /status/ { js_content echo.status; }
        location /chunked/ { ssi on; ssi_types *; }
        location /dav/ {
            dav_methods PUT DELETE;
            create_full_put_path on;
            client_max_body_size 0;
        }
        location /close/ { keepalive_timeout 0; }
        location /slow/ { alias \(www.path)/files/; limit_rate 1m; }
        location /redirect/ {
            absolute_redirect off;
            location = /redirect/301 { return 301 /echo; }
            location = /redirect/302 { return 302 /echo; }
            location = /redirect/303 { return 303 /echo; }
            location = /redirect/307 { return 307 /echo; }
            location = /redirect/308 { return 308 /echo; }
            location = /redirect/hop1 { return 302 /redirect/hop2; }
            location = /redirect/hop2 { return 302 /files/hello.txt; }
            location = /redirect/loop { return 302 /redirect/loop; }
            location = /redirect/absolute { return 302 $scheme://127.0.0.1:$server_port/files/hello.txt; }
            location = /redirect/unsupported-scheme { return 302 ftp2://127.0.0.1/x; }
            return 404;
        }
        location /gzip/ {
            gzip on;
            gzip_types *;
            gzip_min_length 0;
            gzip_comp_level 6;
            gzip_vary on;
        }
        location /static-gz/ { gzip_static on; }
        location /cache/expires/ { alias \(www.path)/files/; expires 1h; }
        location /cache/max-age/ { alias \(www.path)/files/; add_header Cache-Control "max-age=300"; }
        location /cache/no-cache/ { alias \(www.path)/files/; add_header Cache-Control "no-cache"; etag on; if_modified_since exact; }
        location /cookie/ {
            location = /cookie/set { add_header Set-Cookie "nginx=host-only; Path=/"; add_header Set-Cookie "lasting=1; Max-Age=3600; Path=/cookie"; return 204; }
            location = /cookie/secure { add_header Set-Cookie "guarded=1; Secure; HttpOnly; Path=/"; return 204; }
            location = /cookie/expire { add_header Set-Cookie "nginx=gone; Max-Age=0; Path=/"; return 204; }
            return 404;
        }
        location /disposition/ {
            alias \(www.path)/files/;
            add_header Content-Disposition 'attachment; filename="../named by server.txt"';
        }
        location = /origin-407 {
            add_header Proxy-Authenticate 'Basic realm="origin"' always;
            return 407;
        }
        location /basic/ {
            auth_basic "Courier nginx";
            auth_basic_user_file \(directory.path)/htpasswd;
            alias \(www.path)/files/;
        }
        \(extraServerConfiguration)
        """
        guard (try? locations.write(to: directory.appendingPathComponent("locations.conf"), atomically: true, encoding: .utf8)) != nil else {
            throw TestServerError("cannot write locations.conf")
        }
        // The users of /basic/ (auth_basic): ``basicUsers``, in nginx's plain-text form.
        let htpasswd = Self.basicUsers.map { "\($0.user):{PLAIN}\($0.password)\n" }.joined()
        guard (try? htpasswd.write(to: directory.appendingPathComponent("htpasswd"), atomically: true, encoding: .utf8)) != nil else {
            throw TestServerError("cannot write htpasswd")
        }
        let configuration = """
        daemon off;
        master_process off;
        worker_processes 1;
        pid \(path)/nginx.pid;
        error_log \(path)/error.log warn;
        load_module \(jsModule);
        events { worker_connections 1024; }
        http {
            access_log off;
            default_type application/octet-stream;
            client_body_temp_path \(path)/temp/body;
            proxy_temp_path \(path)/temp/proxy;
            fastcgi_temp_path \(path)/temp/fastcgi;
            uwsgi_temp_path \(path)/temp/uwsgi;
            scgi_temp_path \(path)/temp/scgi;
            js_import echo from \(script.path);
            keepalive_requests 10000;
            keepalive_timeout 65s;
            add_header X-Connection $connection always;
            add_header X-Connection-Requests $connection_requests always;
            add_header X-Server-Protocol $server_protocol always;
            add_header X-SSL-Protocol $ssl_protocol always;
            add_header X-SSL-Session-Reused $ssl_session_reused always;
            add_header X-Client-Subject $ssl_client_s_dn always;
            ssl_protocols TLSv1.2 TLSv1.3;
            ssl_session_cache shared:courier:1m;
            ssl_session_tickets on;
            server {
                listen 127.0.0.1:\(port);
                include \(path)/locations.conf;
            }
            server {
                listen 127.0.0.1:\(h2cPort) http2;
                include \(path)/locations.conf;
            }
            server {
                listen 127.0.0.1:\(limitedPort);
                keepalive_requests 10;
                keepalive_timeout 1s;
                include \(path)/locations.conf;
            }
            \(tlsServers)
        }
        """
        let configFile = directory.appendingPathComponent("nginx.conf")
        guard (try? configuration.write(to: configFile, atomically: true, encoding: .utf8)) != nil else {
            throw TestServerError("cannot write \(configFile.path)")
        }
        self.pid = try startServerProcess(binary, ["-p", path, "-c", configFile.path, "-e", "\(path)/error.log"], directory: directory)
        self.port = port
        self.directory = directory
        self.tlsPorts = tlsPorts
        self.certificates = certificates
        self.h2cPort = h2cPort
        self.limitedPort = limitedPort
        guard waitForListener(port: port), waitForListener(port: h2cPort), waitForListener(port: limitedPort), tlsPorts.values.allSatisfy({ waitForListener(port: $0) }) else {
            let log = (try? String(contentsOf: directory.appendingPathComponent("error.log"), encoding: .utf8)) ?? ""
            stop()
            throw TestServerError("nginx did not start on port \(port): \(log)")
        }
    }

    /// A file of `megabytes` MiB of random bytes under /files/, made on first use, and its
    /// SHA-256; the path is `/files/random-N.bin`.
    public func largeFile(megabytes: Int) throws -> (path: String, sha256: String) {
        let name = "random-\(megabytes).bin"
        let file = directory.appendingPathComponent("www/files/\(name)").path
        if !FileManager.default.fileExists(atPath: file) {
            try runTool("/bin/sh", ["-c", "head -c \(megabytes * 1024 * 1024) /dev/urandom > '\(file).tmp' && mv '\(file).tmp' '\(file)'"])
        }
        let digest = try runTool("/usr/bin/sha256sum", [file]).split(separator: " ").first.map(String.init) ?? ""
        return ("/files/\(name)", digest)
    }

    /// Stops the server.
    public func stop() {
        ChildProcesses.stop(pid)
        ChildProcesses.forget(pid)
    }
}

/// Reproducible pseudo-random bytes (xorshift), so fixtures need no files in the repository.
public func deterministicBytes(count: Int, seed: UInt64) -> [UInt8] {
    var state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
    var bytes = [UInt8](repeating: 0, count: count)
    for index in 0..<count {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        bytes[index] = UInt8(truncatingIfNeeded: state)
    }
    return bytes
}

/// Runs a tool and returns its standard output; throws when it fails.
@discardableResult
public func runTool(_ executable: String, _ arguments: [String]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw TestServerError("\(executable) \(arguments.joined(separator: " ")) exited with \(process.terminationStatus)")
    }
    return String(decoding: data, as: UTF8.self)
}
