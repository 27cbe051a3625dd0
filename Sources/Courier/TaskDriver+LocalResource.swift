import CourierPolicies
import CourierReactor
import CourierSync
import Foundation
import Glibc

/// `data:` and `file:` URLs: loaded by the session, not the transport. The load stands in for
/// an exchange — the machine gets a 200's facts, the sink a plain `URLResponse` (MIME type,
/// length, text encoding) and then the bytes in chunks — so every delivery mode, pausing and
/// cancellation work as for HTTP. Only a task's own URL is loaded so: a redirect to `file:` or
/// `data:` is not followed (a server must not read the user's files).
extension TaskDriver {
    /// Starts loading the `data:` or `file:` URL of the current request, on the blocking pool
    /// (opening a file and decoding a large `data:` URL take time).
    func startLocalLoad(_ url: URL) {
        BlockingPool.shared.submit { [self] in openLocalLoad(url) }
    }

    private func openLocalLoad(_ url: URL) {
        let (redirected, method) = state.withLock { ($0.machine.redirectCount > 0, $0.request?.httpMethod ?? "GET") }
        if redirected {
            fail(.courier(.unsupportedURL, "A redirect to a \(url.scheme ?? "") URL is not followed.", url: url), with: .exchangeFailed)
            return
        }
        let response: URLResponse
        let source: LocalLoad.Source
        switch LocalLoad.open(url, headOnly: method.uppercased() == "HEAD") {
        case .success(let opened): (response, source) = opened
        case .failure(let error):
            fail(error, with: .exchangeFailed)
            return
        }
        let load = LocalLoad(source: source, url: url, driver: self)
        let actions = state.withLock { state -> TaskStateMachine.Actions? in
            guard !state.machine.isFinished, !state.cancelRequested else { return nil }
            state.localLoad = load
            state.exchange = nil
            state.response = response
            state.decoder = nil
            state.decodedBytes = 0
            return state.machine.handle(.responseHeadReceived(.init(status: 200, requestURL: url, method: method)))
        }
        guard let actions else {
            // Cancelled before the load began: reported as an exchange reports it.
            load.cancel()
            fail(.courier(.cancelled, "cancelled", url: url), with: .exchangeFailed)
            return
        }
        run(actions)
        load.readingChanged()
    }

    /// Counts bytes of a local load as received; they are delivered as read (no content
    /// coding), so they count as decoded too.
    func countLocalBytes(_ count: Int) {
        countReceived(count)
        state.withLock { $0.decodedBytes += Int64(count) }
    }
}

/// Reads one `data:` or `file:` resource for a task, a chunk at a time on the blocking pool (a
/// file is never read whole), and stops while the task's reading is paused.
final class LocalLoad: Sendable {
    /// True for a `data:` or `file:` URL, the schemes loaded here. Asked of every request, so
    /// it compares bytes without making a lower-cased copy, and for a URL without a base it reads
    /// the first five bytes of the URL's own string: Foundation's `scheme` costs some 600
    /// instructions a call, a tenth of the rest of this check.
    static func loads(_ url: URL) -> Bool {
        if url.baseURL == nil {
            let string = url.absoluteString
            if let answer = string.utf8.withContiguousStorageIfAvailable({ bytes -> Bool in
                guard bytes.count >= 5, bytes[4] == UInt8(ascii: ":") else { return false }
                return matches(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes)[0..<4]))
            }) {
                return answer
            }
        }
        guard let scheme = url.scheme, scheme.utf8.count == 4 else { return false }
        var copy = scheme
        return copy.withUTF8 { matches(UnsafeRawBufferPointer($0)) }
    }

    /// True when the four bytes are `data` or `file`, in any case.
    private static func matches(_ scheme: UnsafeRawBufferPointer) -> Bool {
        func equals(_ name: StaticString) -> Bool {
            for index in 0..<4 where scheme[index] | 0x20 != name.utf8Start[index] { return false }
            return true
        }
        return equals("data") || equals("file")
    }

    /// Bytes read and delivered at a time.
    static let chunkBytes = 64 * 1024

    /// What is read.
    enum Source: Sendable {
        /// A `data:` URL's decoded bytes.
        case bytes([UInt8])
        /// An open file; closed when the load ends.
        case file(descriptor: Int32)
    }

    private struct Progress {
        var offset = 0
        /// A pump runs on the blocking pool.
        var pumping = false
        /// Reading was asked to go on while the pump ran: it looks again before it stops.
        var wake = false
        var ended = false
    }

    private let source: Source
    private let url: URL
    /// The task's driver; held until the load ends (the driver drops the load when the task
    /// finishes, which breaks the cycle).
    private let driver: TaskDriver
    private let progress = Mutex(Progress())

    init(source: Source, url: URL, driver: TaskDriver) {
        self.source = source
        self.url = url
        self.driver = driver
    }

    /// The response and the source for `url`, or the error Apple gives: `.badURL` for a
    /// malformed `data:` URL; `.fileDoesNotExist`, `.noPermissionsToReadFile`,
    /// `.fileIsDirectory` or `.cannotOpenFile` for a file. Only regular files are read (a pipe
    /// or a device could block or never end). `headOnly` (a HEAD request): the response
    /// without the bytes.
    static func open(_ url: URL, headOnly: Bool) -> Result<(URLResponse, Source), URLError> {
        if url.scheme?.lowercased() == "data" {
            do throws(DataURLError) {
                let parsed = try DataURL.parse(url.absoluteString)
                let response = URLResponse(url: url, mimeType: parsed.mimeType, expectedContentLength: parsed.data.count, textEncodingName: parsed.textEncodingName)
                return .success((response, .bytes(headOnly ? [] : parsed.data)))
            } catch {
                return .failure(.courier(.badURL, "The data: URL is malformed: \(error).", url: url))
            }
        }
        if let host = url.host(percentEncoded: false), !host.isEmpty, host.lowercased() != "localhost" {
            return .failure(.courier(.unsupportedURL, "A file: URL on another host (\(host)) cannot be loaded.", url: url))
        }
        let path = url.path(percentEncoded: false)
        // Non-blocking, so that opening a FIFO cannot hang; refused below as not regular.
        let descriptor = Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        if descriptor < 0 {
            let code = errno
            switch code {
            case ENOENT, ENOTDIR:
                return .failure(.courier(.fileDoesNotExist, "The file \(path) does not exist.", url: url))
            case EACCES, EPERM:
                return .failure(.courier(.noPermissionsToReadFile, "The file \(path) cannot be read: permission denied.", url: url))
            case EISDIR:
                return .failure(.courier(.fileIsDirectory, "\(path) is a directory.", url: url))
            default:
                return .failure(.courier(.cannotOpenFile, "The file \(path) cannot be opened: \(String(cString: strerror(code))).", url: url))
            }
        }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            let reason = String(cString: strerror(errno))
            close(descriptor)
            return .failure(.courier(.cannotOpenFile, "The file \(path) cannot be opened: \(reason).", url: url))
        }
        if (status.st_mode & S_IFMT) == S_IFDIR {
            close(descriptor)
            return .failure(.courier(.fileIsDirectory, "\(path) is a directory.", url: url))
        }
        guard (status.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            return .failure(.courier(.cannotOpenFile, "\(path) is not a regular file (a pipe, socket or device cannot be loaded).", url: url))
        }
        let response = URLResponse(url: url, mimeType: mimeType(forPathExtension: url.pathExtension), expectedContentLength: Int(status.st_size), textEncodingName: nil)
        if headOnly {
            close(descriptor)
            return .success((response, .bytes([])))
        }
        return .success((response, .file(descriptor: descriptor)))
    }

    /// The task's reading may have changed (started, paused, resumed): starts the pump unless
    /// it runs, or tells the running one to look again.
    func readingChanged() {
        let start = progress.withLock { progress -> Bool in
            guard !progress.ended else { return false }
            progress.wake = true
            if progress.pumping { return false }
            progress.pumping = true
            return true
        }
        if start { BlockingPool.shared.submit { [self] in pump() } }
    }

    /// Stops the load; the file closes once no pump uses it.
    func cancel() {
        let closeNow = progress.withLock { progress -> Bool in
            guard !progress.ended else { return false }
            progress.ended = true
            return !progress.pumping
        }
        if closeNow { closeSource() }
    }

    /// Reads and delivers chunks while the task wants them.
    private func pump() {
        while true {
            progress.withLock { $0.wake = false }
            while wantsMore() {
                switch readChunk() {
                case .failure(let error):
                    end()
                    driver.fail(error, with: .exchangeFailed)
                    return
                case .success(let chunk) where chunk.isEmpty:
                    end()
                    driver.run(driver.state.withLock { state in
                        state.localLoad === self ? state.machine.handle(.bodyFinished) : TaskStateMachine.Actions()
                    })
                    return
                case .success(let chunk):
                    driver.countLocalBytes(chunk.count)
                    chunk.withUnsafeBytes { driver.deliverBody($0, from: nil, decoder: nil) }
                }
            }
            enum Next { case again, stop, closeAndStop }
            let next = progress.withLock { progress -> Next in
                if progress.ended {
                    progress.pumping = false
                    return .closeAndStop
                }
                if progress.wake { return .again }
                progress.pumping = false
                return .stop
            }
            switch next {
            case .again: continue
            case .stop: return
            case .closeAndStop:
                closeSource()
                return
            }
        }
    }

    /// True while the load is the task's, its reading is not paused, and it has not ended.
    private func wantsMore() -> Bool {
        guard !progress.withLock({ $0.ended }) else { return false }
        return driver.state.withLock { state in
            state.localLoad === self && !state.readingPaused && !state.machine.isFinished
        }
    }

    private func readChunk() -> Result<[UInt8], URLError> {
        let offset = progress.withLock { $0.offset }
        switch source {
        case .bytes(let bytes):
            let end = min(bytes.count, offset + Self.chunkBytes)
            progress.withLock { $0.offset = end }
            return .success(Array(bytes[offset..<end]))
        case .file(let descriptor):
            var chunk = [UInt8](repeating: 0, count: Self.chunkBytes)
            while true {
                let count = chunk.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, Self.chunkBytes, off_t(offset)) }
                if count >= 0 {
                    chunk.removeLast(Self.chunkBytes - count)
                    progress.withLock { $0.offset += count }
                    return .success(chunk)
                }
                if errno == EINTR { continue }
                let reason = String(cString: strerror(errno))
                return .failure(.courier(.cannotOpenFile, "Reading \(url.path(percentEncoded: false)) failed: \(reason).", url: url))
            }
        }
    }

    /// Marks the load ended after its last delivery; the pump closes the file.
    private func end() {
        progress.withLock {
            $0.ended = true
            $0.pumping = false
        }
        closeSource()
    }

    private func closeSource() {
        if case .file(let descriptor) = source { close(descriptor) }
    }

    /// A MIME type for a file name's extension; `application/octet-stream` when unknown.
    static func mimeType(forPathExtension pathExtension: String) -> String {
        switch pathExtension.lowercased() {
        case "txt", "text": return "text/plain"
        case "html", "htm": return "text/html"
        case "css": return "text/css"
        case "csv": return "text/csv"
        case "xml": return "application/xml"
        case "js", "mjs": return "text/javascript"
        case "json": return "application/json"
        case "pdf": return "application/pdf"
        case "png": return "image/png"
        case "jpg", "jpeg": return "image/jpeg"
        case "gif": return "image/gif"
        case "svg": return "image/svg+xml"
        case "webp": return "image/webp"
        case "zip": return "application/zip"
        case "gz": return "application/gzip"
        case "mp4": return "video/mp4"
        case "mp3": return "audio/mpeg"
        case "wasm": return "application/wasm"
        default: return "application/octet-stream"
        }
    }
}
