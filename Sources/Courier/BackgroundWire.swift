import CCourierLinux
import Foundation

// What a background session and its daemon (`courier-background`) say to each other over a
// Unix socket: length-prefixed JSON frames. The values here are also what the daemon's journal
// keeps on disk, so a field added later must be optional.

/// A request as the daemon needs it: no body (uploads come from files).
struct WireRequest: Codable, Equatable {
    var url: String
    var method: String
    var headers: [[String]]
    var timeout: Double
    var cachePolicy: UInt
    var handlesCookies: Bool

    init(_ request: URLRequest) {
        url = request.url?.absoluteString ?? ""
        method = request.httpMethod ?? "GET"
        headers = (request.allHTTPHeaderFields ?? [:]).sorted { $0.key < $1.key }.map { [$0.key, $0.value] }
        timeout = request.timeoutInterval
        cachePolicy = request.cachePolicy.rawValue
        handlesCookies = request.httpShouldHandleCookies
    }

    var urlRequest: URLRequest? {
        guard let url = URL(string: url) else { return nil }
        var request = URLRequest(url: url, cachePolicy: URLRequest.CachePolicy(rawValue: cachePolicy) ?? .useProtocolCachePolicy, timeoutInterval: timeout)
        request.httpMethod = method
        for pair in headers where pair.count == 2 { request.addValue(pair[1], forHTTPHeaderField: pair[0]) }
        request.httpShouldHandleCookies = handlesCookies
        return request
    }
}

/// A response head.
struct WireResponse: Codable, Equatable {
    var url: String
    var status: Int
    var version: String
    var headers: [[String]]

    init?(_ response: URLResponse?) {
        guard let response = response as? HTTPURLResponse, let url = response.url else { return nil }
        self.url = url.absoluteString
        status = response.statusCode
        version = "HTTP/1.1"
        headers = response.allHeaderFields.compactMap { key, value in
            guard let name = key as? String, let value = value as? String else { return nil }
            return [name, value]
        }.sorted { $0[0] < $1[0] }
    }

    var httpResponse: HTTPURLResponse? {
        guard let url = URL(string: url) else { return nil }
        var fields: [String: String] = [:]
        for pair in headers where pair.count == 2 { fields[pair[0]] = pair[1] }
        return HTTPURLResponse(url: url, statusCode: status, httpVersion: version, headerFields: fields)
    }
}

/// An error a task completed with: its domain, code, message, failing URL, resume data and
/// the partial file it kept.
struct WireError: Codable, Equatable {
    var domain: String
    var code: Int
    var message: String
    var failingURL: String?
    var resumeData: Data?
    var partialDownload: String?

    init(_ error: any Error) {
        let nsError = error as NSError
        domain = nsError.domain
        code = nsError.code
        message = nsError.localizedDescription
        failingURL = (nsError.userInfo[NSURLErrorFailingURLErrorKey] as? URL)?.absoluteString
            ?? nsError.userInfo["NSErrorFailingURLStringKey"] as? String
        resumeData = nsError.userInfo[URLSessionDownloadTaskResumeData] as? Data
        partialDownload = (nsError.userInfo[CourierPartialDownloadFileKey] as? URL)?.path
    }

    init(code: URLError.Code, message: String, url: String?) {
        domain = NSURLErrorDomain
        self.code = code.rawValue
        self.message = message
        failingURL = url
    }

    var error: any Error {
        var info: [String: Any] = [NSLocalizedDescriptionKey: message]
        if let failingURL {
            info["NSErrorFailingURLStringKey"] = failingURL
            if let url = URL(string: failingURL) { info[NSURLErrorFailingURLErrorKey] = url }
        }
        if let resumeData { info[URLSessionDownloadTaskResumeData] = resumeData }
        if let partialDownload { info[CourierPartialDownloadFileKey] = URL(fileURLWithPath: partialDownload) }
        if domain == NSURLErrorDomain { return URLError(URLError.Code(rawValue: code) ?? .unknown, userInfo: info) }
        return NSError(domain: domain, code: code, userInfo: info)
    }
}

/// The configuration values the daemon's own session takes from a background configuration:
/// timeouts, the connection limit, additional headers (string values), cookie policy, TLS
/// bounds, proxies, Courier's redirect and decoding bounds, whether partial downloads are kept
/// and the HTTP/2 stream window. Stores are the default on-disk ones; delegates, protocol
/// classes and loggers stay in the process.
struct WireSettings: Codable, Equatable {
    var requestTimeout: Double
    var resourceTimeout: Double
    var maximumConnectionsPerHost: Int
    var additionalHeaders: [[String]]
    var setsCookies: Bool
    var cookieAcceptPolicy: UInt
    // Later fields are optional, so a journal written before them still reads.
    var tlsMinimum: UInt16?
    var tlsMaximum: UInt16?
    /// `connectionProxyDictionary` (nil: the environment's proxies).
    var proxies: [String: WireValue]?
    var strippedOnCrossOrigin: [String]?
    var maximumDecodedBytes: Int64?
    var maximumDecodingRatio: Int?
    var decodingRatioThreshold: Int64?
    var keepsPartialDownloads: Bool?
    var http2StreamWindowSize: Int?
    /// Nil from a client before the setting existed: decoded.
    var decodesContent: Bool?

    /// A value of `connectionProxyDictionary`.
    enum WireValue: Codable, Equatable {
        case int(Int)
        case string(String)
        case bool(Bool)
        case strings([String])

        init?(_ value: Any) {
            if let text = value as? String {
                self = .string(text)
            } else if let list = value as? [String] {
                self = .strings(list)
            } else if let flag = value as? Bool {
                self = .bool(flag)
            } else if let number = value as? Int {
                self = .int(number)
            } else {
                return nil
            }
        }

        var value: Any {
            switch self {
            case .int(let number): number
            case .string(let text): text
            case .bool(let flag): flag
            case .strings(let list): list
            }
        }
    }

    init(_ configuration: URLSessionConfiguration) {
        requestTimeout = configuration.timeoutIntervalForRequest
        resourceTimeout = configuration.timeoutIntervalForResource
        maximumConnectionsPerHost = configuration.httpMaximumConnectionsPerHost
        additionalHeaders = (configuration.httpAdditionalHeaders ?? [:]).compactMap { key, value in
            guard let name = key as? String, let value = value as? String else { return nil }
            return [name, value]
        }.sorted { $0[0] < $1[0] }
        setsCookies = configuration.httpShouldSetCookies
        cookieAcceptPolicy = configuration.httpCookieAcceptPolicy.rawValue
        tlsMinimum = configuration.tlsMinimumSupportedProtocolVersion.rawValue
        tlsMaximum = configuration.tlsMaximumSupportedProtocolVersion.rawValue
        proxies = configuration.connectionProxyDictionary.map { dictionary in
            var kept: [String: WireValue] = [:]
            for (key, value) in dictionary {
                if let name = key as? String, let wire = WireValue(value) { kept[name] = wire }
            }
            return kept
        }
        strippedOnCrossOrigin = configuration.courierHeadersStrippedOnCrossOriginRedirect.sorted()
        maximumDecodedBytes = configuration.courierContentDecodingLimits.maximumDecodedBytes
        maximumDecodingRatio = configuration.courierContentDecodingLimits.maximumRatio
        decodingRatioThreshold = configuration.courierContentDecodingLimits.ratioCheckThreshold
        keepsPartialDownloads = configuration.courierKeepsPartialDownloads
        http2StreamWindowSize = configuration.courierHTTP2StreamWindowSize
        decodesContent = configuration.courierDecodesContent
    }

    /// The daemon's session configuration: on-disk stores, as a default session's.
    var configuration: URLSessionConfiguration {
        let configuration = URLSessionConfiguration.default
        configuration.timeoutIntervalForRequest = requestTimeout
        configuration.timeoutIntervalForResource = resourceTimeout
        configuration.httpMaximumConnectionsPerHost = maximumConnectionsPerHost
        var headers: [AnyHashable: Any] = [:]
        for pair in additionalHeaders where pair.count == 2 { headers[pair[0]] = pair[1] }
        configuration.httpAdditionalHeaders = headers.isEmpty ? nil : headers
        configuration.httpShouldSetCookies = setsCookies
        configuration.httpCookieAcceptPolicy = HTTPCookie.AcceptPolicy(rawValue: cookieAcceptPolicy) ?? .onlyFromMainDocumentDomain
        if let minimum = tlsMinimum.flatMap(tls_protocol_version_t.init(rawValue:)) {
            configuration.tlsMinimumSupportedProtocolVersion = minimum
        }
        if let maximum = tlsMaximum.flatMap(tls_protocol_version_t.init(rawValue:)) {
            configuration.tlsMaximumSupportedProtocolVersion = maximum
        }
        if let proxies {
            var dictionary: [AnyHashable: Any] = [:]
            for (key, value) in proxies { dictionary[key] = value.value }
            configuration.connectionProxyDictionary = dictionary
        }
        if let strippedOnCrossOrigin { configuration.courierHeadersStrippedOnCrossOriginRedirect = Set(strippedOnCrossOrigin) }
        var limits = configuration.courierContentDecodingLimits
        if let maximumDecodedBytes { limits.maximumDecodedBytes = maximumDecodedBytes }
        if let maximumDecodingRatio { limits.maximumRatio = maximumDecodingRatio }
        if let decodingRatioThreshold { limits.ratioCheckThreshold = decodingRatioThreshold }
        configuration.courierContentDecodingLimits = limits
        configuration.courierKeepsPartialDownloads = keepsPartialDownloads ?? false
        configuration.courierHTTP2StreamWindowSize = http2StreamWindowSize
        configuration.courierDecodesContent = decodesContent ?? true
        return configuration
    }
}

/// A task as the daemon keeps it, and as a reconnecting session gets it back.
struct WireTask: Codable, Equatable {
    enum Kind: String, Codable { case download, upload }
    enum State: String, Codable { case suspended, running, completed }

    var id: Int
    var kind: Kind
    var request: WireRequest
    /// The file an upload sends.
    var file: String?
    /// The resume data a download goes on from.
    var resumeData: Data?
    var taskDescription: String?
    var state: State = .suspended
    /// Set once the daemon started it: a resume after that continues it.
    var started = false
    var response: WireResponse?
    var bytesReceived: Int64 = 0
    var bytesExpectedToReceive: Int64 = -1
    var bytesSent: Int64 = 0
    var bytesExpectedToSend: Int64 = 0
}

/// An event the daemon keeps until the session acknowledges it, after its delegate returned.
struct WireEvent: Codable, Equatable {
    enum Kind: Codable, Equatable {
        /// The download's file, in the daemon's `files` folder; the session deletes it after
        /// `didFinishDownloadingTo`.
        case finishedDownload(path: String)
        /// An upload's response body, whole.
        case receivedData(Data)
        case completed(error: WireError?)
    }

    var id: Int
    var task: Int
    var response: WireResponse?
    var kind: Kind
}

/// What a session sends its daemon.
enum ClientMessage: Codable {
    /// The first message: the configuration for the daemon's session.
    case hello(settings: WireSettings)
    case create(WireTask)
    case resume(task: Int, taskDescription: String?)
    case suspend(task: Int)
    case cancel(task: Int, producingResumeData: Bool)
    case acknowledge(event: Int)
}

/// What a daemon sends its session.
enum DaemonMessage: Codable {
    /// The answer to `hello`: the tasks it holds, the highest task identifier it ever saw, then
    /// (as `event`s) every event not yet acknowledged.
    case welcome(tasks: [WireTask], lastTaskIdentifier: Int)
    /// Another session holds the identifier.
    case refused(reason: String)
    case event(WireEvent)
    case wrote(task: Int, bytes: Int64, total: Int64, expected: Int64)
    case sent(task: Int, bytes: Int64, total: Int64, expected: Int64)
    case resumedAtOffset(task: Int, offset: Int64, expected: Int64)
    case response(task: Int, WireResponse)
    /// The answer to `cancel(producingResumeData: true)`.
    case resumeData(task: Int, Data?)
}

/// A connected Unix stream socket carrying frames: a 4-byte big-endian length, then JSON.
/// Sends are serialised by a lock; one thread receives.
final class FrameSocket: @unchecked Sendable {
    /// The largest frame either side accepts (an upload's response body travels in one).
    static let maximumFrame = 64 << 20

    private let fd: Int32
    private let sendLock = NSLock()
    private let closeLock = NSLock()
    private var isClosed = false

    init(fd: Int32) {
        self.fd = fd
    }

    /// True when the process at the other end runs as this process's user: a daemon serves
    /// only its own user's sessions, and a session trusts only its own user's daemon (the
    /// abstract socket name has no file permissions to do this).
    var peerIsSameUser: Bool {
        courier_peer_uid(fd) == Int64(getuid())
    }

    deinit {
        close()
    }

    /// Sends one message; false when the peer is gone.
    @discardableResult
    func send<Message: Encodable>(_ message: Message) -> Bool {
        guard let body = try? JSONEncoder().encode(message), body.count <= Self.maximumFrame else { return false }
        var frame = Data(count: 4)
        let length = UInt32(body.count).bigEndian
        withUnsafeBytes(of: length) { frame.replaceSubrange(0..<4, with: $0) }
        frame.append(body)
        sendLock.lock()
        defer { sendLock.unlock() }
        return frame.withUnsafeBytes { bytes -> Bool in
            var offset = 0
            while offset < bytes.count {
                let sent = Glibc.send(fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
                if sent < 0 && errno == EINTR { continue }
                if sent <= 0 { return false }
                offset += sent
            }
            return true
        }
    }

    /// Blocks for the next message; nil on end of stream, an error, or a frame that does not
    /// decode (the peer is then not one to trust).
    func receive<Message: Decodable>(_ type: Message.Type) -> Message? {
        guard let header = read(count: 4) else { return nil }
        let length = header.withUnsafeBytes { Int(UInt32(bigEndian: $0.loadUnaligned(as: UInt32.self))) }
        guard length <= Self.maximumFrame, let body = read(count: length) else { return nil }
        return try? JSONDecoder().decode(type, from: body)
    }

    private func read(count: Int) -> Data? {
        var data = Data(count: count)
        var offset = 0
        let complete = data.withUnsafeMutableBytes { buffer -> Bool in
            while offset < count {
                let received = recv(fd, buffer.baseAddress! + offset, count - offset, 0)
                if received < 0 && errno == EINTR { continue }
                if received <= 0 { return false }
                offset += received
            }
            return true
        }
        return complete ? data : nil
    }

    /// Ends both directions: a receive blocked on the other thread returns nil.
    func shutdown() {
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }

    func close() {
        closeLock.lock()
        defer { closeLock.unlock() }
        guard !isClosed else { return }
        isClosed = true
        _ = Glibc.close(fd)
    }
}

/// Where a background identifier's daemon keeps its state, and the socket it listens on.
enum BackgroundPlace {
    /// `<data>/courier/background/<name>`: `<name>` is the identifier with every byte outside
    /// `[A-Za-z0-9._-]`, and a leading `.`, as `%XX`.
    static func directory(for identifier: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        var name = ""
        for (index, byte) in identifier.utf8.enumerated() {
            let plain = (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == 0x2D || byte == 0x5F || (byte == 0x2E && index > 0)
            name += plain ? String(UnicodeScalar(byte)) : String(format: "%%%02X", byte)
        }
        if name.isEmpty { name = "%00" }
        if name.utf8.count > 200 { name = String(name.prefix(150)) + "-" + String(fnv1a(name), radix: 16) }
        return XDGDirectories.data("background", environment: environment).appendingPathComponent(name, isDirectory: true)
    }

    /// The daemon's socket: in the abstract namespace (no file to go stale, no path-length
    /// limit), named after the state directory.
    static func socketAddress(for directory: URL) -> (sockaddr_un, socklen_t) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let name = Array("courier-background-\(String(fnv1a(directory.standardizedFileURL.path), radix: 16))".utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { path in
            path[0] = 0
            for (index, byte) in name.enumerated() { path[index + 1] = byte }
        }
        let length = MemoryLayout<sa_family_t>.size + 1 + name.count
        return (address, socklen_t(length))
    }

    /// Connects to the daemon of `directory`; nil when none listens.
    static func connect(to directory: URL) -> FrameSocket? {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        var (address, length) = socketAddress(for: directory)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, length) }
        }
        guard connected == 0 else {
            Glibc.close(fd)
            return nil
        }
        let socket = FrameSocket(fd: fd)
        // Another user's process holding the name gets nothing from this session.
        guard socket.peerIsSameUser else { return nil }
        return socket
    }

    /// A 64-bit FNV-1a hash: a short, stable name, not a secret.
    static func fnv1a(_ text: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return hash
    }
}
