import CCourierLinux
import CourierCore
import CourierHTTP1
import CourierReactor
import CourierSync
import CourierTransport
import Foundation

/// Turns a `URLRequest` and the session's configuration into what the transport carries:
/// the origin, the request head with default, configured and caller fields merged, the body
/// and the timeouts.
enum RequestBuilder {
    /// Default `User-Agent`: the process name and Courier's version.
    static let userAgent = "\(ProcessInfo.processInfo.processName) Courier/\(Courier.version) (Linux)"

    /// Default `Accept-Language`, from the POSIX locale (LC_ALL, LC_MESSAGES, LANG):
    /// "de_CH.UTF-8" gives "de-CH, de;q=0.9"; no locale, "C" or "POSIX" gives "en".
    static let acceptLanguage: String = {
        let environment = ProcessInfo.processInfo.environment
        let locale = [environment["LC_ALL"], environment["LC_MESSAGES"], environment["LANG"]]
            .compactMap { $0 }.first { !$0.isEmpty } ?? ""
        let name = locale.split(separator: ".").first.map(String.init) ?? ""
        let parts = name.split(separator: "_").map(String.init)
        guard let language = parts.first, language.count >= 2, language.count <= 3,
              language.allSatisfy({ $0.isLetter && $0.isASCII }) else { return "en" }
        if parts.count > 1, parts[1].allSatisfy({ $0.isLetter && $0.isASCII }) {
            return "\(language)-\(parts[1]), \(language);q=0.9"
        }
        return language
    }()

    /// Default `Accept-Encoding`: the content codings the session decodes (ContentDecoder).
    static let acceptEncoding = "gzip, deflate, br"

    /// The fields of a request that sets none and whose configuration adds or omits none, in
    /// the order the general path appends them, checked once (so not per request); nil when
    /// they fail the check (a process name with a control character), and then every such
    /// request takes the general path and fails there.
    static let defaultFields = try? HTTPFields([
        ("User-Agent", userAgent), ("Accept", "*/*"), ("Accept-Language", acceptLanguage), ("Accept-Encoding", acceptEncoding),
    ]).validated()

    /// - Parameter proxy: the proxy to go through. An `http` request to an HTTP proxy carries
    ///   the absolute URL in its request line (RFC 9112 section 3.2.2); through a tunnel, the
    ///   request is as the origin would get it directly.
    /// - Parameter upgrade: the request asks to switch protocols (``TransportRequest/upgrades``),
    ///   so it goes through any proxy in a tunnel.
    /// - Parameter origins: the session's last origin, reused when the URL names it again.
    static func make(
        _ request: URLRequest, configuration: URLSessionConfiguration, body source: TaskDriver.BodySource, proxy: ProxyServer? = nil,
        upgrade: Bool = false, origins: OriginMemo? = nil
    ) throws(URLError) -> TransportRequest {
        guard let url = request.url else {
            throw .courier(.unsupportedURL, "The request has no URL.", url: nil)
        }
        let origin: Origin
        let originTarget: String
        if let parts = plainParts(of: url, origins: origins) {
            (origin, originTarget) = parts
        } else {
            origin = try self.origin(of: url)
            originTarget = target(of: url)
        }
        let forwarded = origin.scheme == .http && proxy?.kind == .http && !upgrade
        let method = HTTPMethod(request.httpMethod ?? "GET")

        let callerFields = request.orderedHeaderFields
        let omitted = configuration.courierOmittedDefaultFields
        let body = try makeBody(request, source: source, url: url)
        // As Apple does: a form is assumed when a POST body says nothing of its type.
        let formAssumed: Bool
        if case .empty = body { formAssumed = false } else { formAssumed = method == .post }
        var fields: HTTPFields
        // With no field from the caller or the configuration (most requests), none of the
        // defaults is there yet and neither is a Proxy-Authorization: no lookup is needed.
        let noneSet = callerFields.isEmpty && configuration.httpAdditionalHeaders?.isEmpty != false
        if noneSet && omitted.isEmpty && !formAssumed, let defaultFields {
            // Exactly the defaults: one value made once and shared (no allocation, no copy).
            fields = defaultFields
        } else {
            fields = HTTPFields()
            // Room for the caller's fields and the few added below (User-Agent, Accept, Accept-Language,
            // Accept-Encoding, Content-Type, Host and their values come to about 200 bytes): one
            // allocation each for the bytes and the index instead of a growth at every doubling.
            fields.reserveCapacity(
                fields: callerFields.count + 8,
                bytes: callerFields.reduce(256) { $0 + $1.name.utf8.count + $1.value.utf8.count }
            )
            func callerHas(_ name: String) -> Bool {
                callerFields.contains { $0.name.caseInsensitiveCompare(name) == .orderedSame }
            }
            // Request beats configuration, configuration beats defaults.
            for (name, value) in callerFields { fields.append(name: name, value: value) }
            for (name, value) in configuration.additionalHeaderFields where !callerHas(name) && !fields.contains(name) {
                fields.append(name: name, value: value)
            }
            // No local function here: one capturing `fields` would make every use of it in this
            // function check exclusivity at run time.
            let nothingYet = fields.isEmpty
            if defaultAdded("User-Agent", to: fields, nothingYet, omitted: omitted) { fields.append(name: "User-Agent", value: userAgent) }
            if defaultAdded("Accept", to: fields, nothingYet, omitted: omitted) { fields.append(name: "Accept", value: "*/*") }
            if defaultAdded("Accept-Language", to: fields, nothingYet, omitted: omitted) { fields.append(name: "Accept-Language", value: acceptLanguage) }
            if defaultAdded("Accept-Encoding", to: fields, nothingYet, omitted: omitted) { fields.append(name: "Accept-Encoding", value: acceptEncoding) }
            if formAssumed && defaultAdded("Content-Type", to: fields, nothingYet, omitted: omitted) {
                fields.append(name: "Content-Type", value: "application/x-www-form-urlencoded")
            }
        }

        // A caller's Proxy-Authorization is for an HTTP proxy only: on a forwarded request, or
        // on the CONNECT of a tunnel; it never reaches an origin.
        var tunnelAuthorization: String?
        if !noneSet, let callerProxyAuthorization = fields.first("Proxy-Authorization"), !forwarded {
            fields.removeAll(named: "Proxy-Authorization")
            if proxy?.kind == .http { tunnelAuthorization = callerProxyAuthorization }
        }

        // The head is validated once, by the transport, before it reaches a pool.
        let requestTarget = forwarded ? "\(origin.scheme.rawValue)://\(origin.authority)\(originTarget)" : originTarget
        let head = HTTPRequestHead(method: method, target: requestTarget, authority: origin.authority, scheme: origin.scheme.rawValue, fields: fields)
        let timeout = request.isTimeoutIntervalSet ? request.timeoutInterval : configuration.timeoutIntervalForRequest
        // Every field given to the initializer: each set afterwards would check that the
        // request's box (TransportRequest's storage) is not shared.
        return TransportRequest(
            origin: origin, head: head, body: body, idleTimeout: duration(timeout), proxy: proxy,
            tunnelAuthorization: tunnelAuthorization, deadline: .now + duration(configuration.timeoutIntervalForResource), upgrades: upgrade
        )
    }

    /// True when the default field `name` goes into `fields`: neither the caller nor the
    /// configuration set it (`nothingYet`: no field is set at all, so the lookup is skipped),
    /// and the configuration does not omit it.
    private static func defaultAdded(_ name: String, to fields: HTTPFields, _ nothingYet: Bool, omitted: Set<String>) -> Bool {
        (nothingYet || !fields.contains(name)) && (omitted.isEmpty || !omitted.contains { $0.caseInsensitiveCompare(name) == .orderedSame })
    }

    /// The origin of an http(s) URL; other schemes are unsupported, a URL without host is bad.
    static func origin(of url: URL) throws(URLError) -> Origin {
        guard let schemeText = url.scheme?.lowercased(), let scheme = Origin.Scheme(rawValue: schemeText) else {
            throw .courier(.unsupportedURL, "The URL scheme \(url.scheme.map { "\"\($0)\"" } ?? "(none)") is not supported.", url: url)
        }
        guard var host = url.host(percentEncoded: false), !host.isEmpty else {
            throw .courier(.badURL, "The URL has no host.", url: url)
        }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        var port: UInt16?
        if let number = url.port {
            guard let valid = UInt16(exactly: number), valid > 0 else {
                throw .courier(.badURL, "The URL's port \(number) is out of range.", url: url)
            }
            port = valid
        }
        return Origin(scheme: scheme, host: host, port: port)
    }

    /// The origin and origin-form target of a plain absolute URL, read from its string in one
    /// pass: `http` or `https` in lower case, a host of lower-case letters, digits, dots and
    /// hyphens, an optional port from 1 to 65535, then a path and query of visible ASCII.
    /// Nil for anything else (user info, an IPv6 literal, percent-encoding or upper case in the
    /// host, a base URL, an empty query), which ``origin(of:)`` and ``target(of:)`` read through
    /// Foundation; for the URLs this accepts, the two give the same parts (a unit test and the
    /// url-request fuzz target compare them).
    static func plainParts(of url: URL, origins: OriginMemo? = nil) -> (origin: Origin, target: String)? {
        guard url.baseURL == nil else { return nil }
        let string = url.absoluteString
        let parts = string.utf8.withContiguousStorageIfAvailable { bytes -> (Origin, String)? in
            let count = bytes.count
            var index: Int
            let scheme: Origin.Scheme
            func hasPrefix(_ prefix: StaticString) -> Bool {
                let length = prefix.utf8CodeUnitCount
                guard count >= length else { return false }
                for offset in 0..<length where bytes[offset] != prefix.utf8Start[offset] { return false }
                return true
            }
            if hasPrefix("http://") {
                scheme = .http
                index = 7
            } else if hasPrefix("https://") {
                scheme = .https
                index = 8
            } else {
                return nil
            }
            let hostStart = index
            while index < count {
                let byte = bytes[index]
                let allowed = (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                    || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
                guard allowed else { break }
                index += 1
            }
            let hostEnd = index
            guard hostEnd > hostStart else { return nil }
            var port: UInt16?
            if index < count, bytes[index] == UInt8(ascii: ":") {
                index += 1
                var value = 0
                var digits = 0
                while index < count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9"), digits < 6 {
                    value = value * 10 + Int(bytes[index] - UInt8(ascii: "0"))
                    digits += 1
                    index += 1
                }
                guard digits > 0, value > 0, value <= Int(UInt16.max) else { return nil }
                port = UInt16(value)
            }
            // The target runs to the fragment, if any.
            let targetStart = index
            var targetEnd = index
            while targetEnd < count, bytes[targetEnd] != UInt8(ascii: "#") {
                let byte = bytes[targetEnd]
                guard byte > 0x20, byte < 0x7F else { return nil }
                targetEnd += 1
            }
            if targetStart < count {
                let first = bytes[targetStart]
                guard first == UInt8(ascii: "/") || first == UInt8(ascii: "?") || first == UInt8(ascii: "#") else { return nil }
            }
            // An empty query ("/p?") is left to Foundation, which may or may not keep the "?".
            if targetEnd > targetStart, bytes[targetEnd - 1] == UInt8(ascii: "?") { return nil }
            let host = UnsafeBufferPointer(rebasing: bytes[hostStart..<hostEnd])
            var target = String(decoding: UnsafeBufferPointer(rebasing: bytes[targetStart..<targetEnd]), as: UTF8.self)
            if targetStart == targetEnd || bytes[targetStart] == UInt8(ascii: "?") { target = "/" + target }
            let origin = origins?.origin(scheme: scheme, host: host, port: port)
                ?? Origin(scheme: scheme, lowerCasedHost: String(decoding: host, as: UTF8.self), port: port)
            return (origin, target)
        }
        return parts ?? nil
    }

    /// The origin-form request target: the path (at least "/") and the query, as encoded in the URL.
    static func target(of url: URL) -> String {
        var path = url.path(percentEncoded: true)
        if path.isEmpty { path = "/" }
        if let query = url.query(percentEncoded: true) { path += "?" + query }
        return path
    }

    private static func makeBody(_ request: URLRequest, source: TaskDriver.BodySource, url: URL) throws(URLError) -> RequestBody {
        switch source {
        case .data(let data):
            return .bytes(data)
        case .file(let fileURL):
            let path = fileURL.path
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
                  (attributes[.type] as? FileAttributeType) == .typeRegular,
                  let size = (attributes[.size] as? NSNumber)?.int64Value,
                  let handle = FileHandle(forReadingAtPath: path) else {
                throw .courier(.fileDoesNotExist, "The file to upload cannot be read: \(path).", url: url)
            }
            return .stream(FileBodyProducer(handle: handle), length: size)
        case .request:
            if let data = request.httpBody { return .bytes(data) }
            // Content-Length is the stack's (SPEC section 3): a stream is always chunked.
            if let stream = request.httpBodyStream { return .stream(InputStreamBodyProducer(stream: stream), length: nil) }
            return .empty
        case .delegateStream:
            throw .courier(.requestBodyStreamExhausted, "The streamed upload has no body stream yet.", url: url)
        }
    }

    /// Seconds as a `Duration`; non-positive and absurd values fall back to Apple's defaults.
    static func duration(_ seconds: TimeInterval) -> Duration {
        guard seconds.isFinite, seconds > 0 else { return .seconds(60) }
        return .milliseconds(Int64(min(seconds, 100 * 365 * 24 * 3600) * 1000))
    }
}

/// Reads a request body from an `InputStream`: the end of a bound pair without holding a
/// thread while its writer is slow, any other stream on a blocking thread.
final class InputStreamBodyProducer: RequestBodyProducer, @unchecked Sendable {
    private let stream: InputStream
    private let gate = SourceGate()

    init(stream: InputStream) {
        self.stream = stream
    }

    func readChunk(maxLength: Int) throws -> Data {
        guard gate.beginRead(open: stream.open) else { throw BodyReadError(message: "the body stream was closed") }
        defer { gate.endRead(close: stream.close) }
        guard let data = readIntoNewData(maxLength, with: { stream.read($0.assumingMemoryBound(to: UInt8.self), maxLength: $1) }) else {
            throw BodyReadError(message: stream.streamError.map { "\($0)" } ?? "the stream reported an error")
        }
        return data
    }

    func readChunk(maxLength: Int, completion: @escaping @Sendable (Result<Data, any Error>) -> Void) {
        guard let bound = stream as? BoundInputStream else {
            BlockingPool.shared.submit { completion(Result { try self.readChunk(maxLength: maxLength) }) }
            return
        }
        // The pipe is thread-safe and never blocks here: no read is "under way" to wait for.
        guard gate.beginRead(open: bound.open) else {
            completion(.failure(BodyReadError(message: "the body stream was closed")))
            return
        }
        gate.endRead(close: bound.close)
        bound.read(maxLength: maxLength) { result in
            completion(result.mapError { BodyReadError(message: "\($0)") })
        }
    }

    func finish() {
        if let bound = stream as? BoundInputStream {
            // Closed at once, opened or not, even with a read pending: that is what tells the
            // writer, blocked or not, that nothing more will be read.
            gate.finish(closingAtOnce: bound.close)
        } else {
            gate.finish(close: stream.close)
        }
    }
}

/// Reads a request body from a file, a chunk at a time: on the event loop while its bytes are
/// in the page cache, on the blocking pool when they must come from the disk.
///
/// Design note: a read on the blocking pool is two thread hops a chunk (to the pool and back
/// to the loop), and `FileHandle.read(upToCount:)` made a 64 KiB chunk in sixteen `read` calls.
/// A 1 GiB upload of a cached file took about 100,000 context switches and 270,000 reads that
/// way, and 1.05–1.37 s of CPU against curl's 0.46–0.77 s. `preadv2` with `RWF_NOWAIT` reads
/// what the page cache holds and fails with `EAGAIN` rather than wait for the disk: the loop
/// reads at once when it can (0.61–0.72 s of CPU, 41,000 context switches, level with curl in
/// time), and hands the read to the pool, one `read` a chunk, only when it cannot.
final class FileBodyProducer: RequestBodyProducer, @unchecked Sendable {
    private let handle: FileHandle
    private let gate = SourceGate()
    /// False once the file system turned a non-blocking read down as unsupported: every read
    /// then goes to the blocking pool.
    let readsWithoutBlocking = Atomic<Bool>(true)

    init(handle: FileHandle) {
        self.handle = handle
    }

    func readChunk(maxLength: Int) throws -> Data {
        guard gate.beginRead(open: {}) else { throw BodyReadError(message: "the file was closed") }
        defer { gate.endRead(close: { try? self.handle.close() }) }
        switch read(maxLength, with: { Glibc.read($0, $1, $2) }) {
        case .bytes(let data): return data
        case .failed(let code): throw BodyReadError(message: "the file could not be read: \(String(cString: strerror(code)))")
        }
    }

    func readChunkWithoutBlocking(maxLength: Int) -> Result<Data, any Error>? {
        guard readsWithoutBlocking.load(ordering: .relaxed) else { return nil }
        guard gate.beginRead(open: {}) else { return .failure(BodyReadError(message: "the file was closed")) }
        defer { gate.endRead(close: { try? self.handle.close() }) }
        switch read(maxLength, with: courier_read_cached) {
        case .bytes(let data):
            return .success(data)
        case .failed(let code):
            // EAGAIN: not all in the page cache. Anything else is left for the blocking read to
            // meet and report; a file system that cannot read this way is not asked again.
            if code == EOPNOTSUPP || code == EINVAL { readsWithoutBlocking.store(false, ordering: .relaxed) }
            return nil
        }
    }

    /// What one read of the file gave.
    private enum ReadOutcome {
        /// Up to the length asked for; empty at the end of the file.
        case bytes(Data)
        /// The errno of a failed read.
        case failed(Int32)
    }

    /// Up to `maxLength` bytes from the file's position (which the read moves on) by one call
    /// of `read` (made again when a signal interrupts it), into memory of their own.
    private func read(_ maxLength: Int, with read: (Int32, UnsafeMutableRawPointer, Int) -> Int) -> ReadOutcome {
        var code: Int32 = 0
        let data = readIntoNewData(maxLength) { buffer, length in
            let count = retryingOnInterrupt { read(handle.fileDescriptor, buffer, length) }
            if count < 0 { code = errno }
            return count
        }
        return data.map { .bytes($0) } ?? .failed(code)
    }

    func finish() {
        gate.finish(close: { try? self.handle.close() })
    }
}

/// Up to `maxLength` bytes that `read` (given memory and its length, returning the count it
/// filled, 0 at the end, negative on failure) puts in memory of their own; nil on failure.
/// Not `Data(count:)`, which zeroes the bytes the read is about to replace: a 64 MiB body read
/// from an `InputStream` spent 67 M instructions in memset.
func readIntoNewData(_ maxLength: Int, with read: (UnsafeMutableRawPointer, Int) -> Int) -> Data? {
    guard maxLength > 0 else { return Data() }
    let buffer = UnsafeMutableRawPointer.allocate(byteCount: maxLength, alignment: 16)
    let count = read(buffer, maxLength)
    guard count > 0 else {
        buffer.deallocate()
        return count == 0 ? Data() : nil
    }
    return Data(bytesNoCopy: buffer, count: count, deallocator: .custom { pointer, _ in pointer.deallocate() })
}

/// Opens a body's source on the first read and closes it once: when the exchange finishes,
/// or, if a read is under way then, when that read returns (a stream or file must not be
/// closed under a read on another thread).
final class SourceGate: @unchecked Sendable {
    private let lock = NSLock()
    // Guarded by `lock`.
    private var opened = false
    private var reading = false
    private var finished = false
    private var closed = false

    /// Marks a read under way, opening the source first if needed; false once finished.
    func beginRead(open: () -> Void) -> Bool {
        let (allowed, needsOpen) = lock.withLock { () -> (Bool, Bool) in
            guard !finished else { return (false, false) }
            reading = true
            defer { opened = true }
            return (true, !opened)
        }
        if needsOpen { open() }
        return allowed
    }

    /// Ends a read; closes the source if the exchange finished meanwhile.
    func endRead(close: () -> Void) {
        let closeNow = lock.withLock { () -> Bool in
            reading = false
            return finished && takeClose()
        }
        if closeNow { close() }
    }

    /// The exchange is over: closes the source now, or when the read under way returns.
    func finish(close: () -> Void) {
        let closeNow = lock.withLock { () -> Bool in
            finished = true
            return !reading && takeClose()
        }
        if closeNow { close() }
    }

    /// Closes now, even unopened or with a read under way (for a source whose close is
    /// thread-safe and means something before it is opened).
    func finish(closingAtOnce close: () -> Void) {
        let closeNow = lock.withLock { () -> Bool in
            finished = true
            opened = true
            return takeClose()
        }
        if closeNow { close() }
    }

    /// True the one time the source should be closed: it was opened and is not yet closed.
    private func takeClose() -> Bool {
        guard opened, !closed else { return false }
        closed = true
        return true
    }
}

struct BodyReadError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

/// Courier's identity.
public enum Courier {
    /// The library version, sent in the default User-Agent.
    public static let version = "0.1.0"
}

/// The origin a session last sent a request to, so that the next request for the same one
/// takes its strings (host, authority) as they are instead of making them again: most
/// requests of a session go to the origin of the one before. A request for another origin
/// makes its own, as without the memo, and leaves it here.
final class OriginMemo: Sendable {
    private let last = Mutex<Origin?>(nil)

    /// The origin of `scheme`, `host` (lower-case bytes) and `port` (nil: the scheme's default).
    func origin(scheme: Origin.Scheme, host: UnsafeBufferPointer<UInt8>, port: UInt16?) -> Origin {
        if let kept = last.withLock({ $0 }), kept.scheme == scheme, kept.port == port ?? scheme.defaultPort,
           !host.isEmpty,
           kept.host.utf8.withContiguousStorageIfAvailable({ $0.count == host.count && memcmp($0.baseAddress!, host.baseAddress!, host.count) == 0 }) == true {
            return kept
        }
        let made = Origin(scheme: scheme, lowerCasedHost: String(decoding: host, as: UTF8.self), port: port)
        last.withLock { $0 = made }
        return made
    }
}
