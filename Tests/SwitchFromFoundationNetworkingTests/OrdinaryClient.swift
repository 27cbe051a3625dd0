// Ordinary URLSession code, as an app or a server SDK writes it against FoundationNetworking.
// Only this import differs: it builds against Courier unchanged.
import Foundation
import Courier
import Synchronization

// MARK: - A JSON API client

/// What can go wrong talking to the API, split the way callers want to react: retry on
/// transport trouble, show the server's message on a bad status, report a bug on decoding.
enum APIError: Error {
    case badStatus(Int, Data)
    case decoding(any Error)
    case transport(URLError)
}

/// A small JSON-over-HTTP client with async/await, the shape most SDKs have.
struct APIClient: Sendable {
    let baseURL: URL
    let session: URLSession

    init(baseURL: URL, session: URLSession = .shared) {
        self.baseURL = baseURL
        self.session = session
    }

    /// One encoder configuration for every body: sorted keys make the bytes of a body
    /// the same every time, which matters once requests are signed or compared.
    static func makeEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }

    static func makeDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }

    func get<T: Decodable>(_ path: String, query: [URLQueryItem] = []) async throws -> T {
        let request = try makeRequest(path, method: "GET", query: query)
        return try await send(request)
    }

    func post<Body: Encodable, T: Decodable>(_ path: String, body: Body, query: [URLQueryItem] = []) async throws -> T {
        var request = try makeRequest(path, method: "POST", query: query)
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try Self.makeEncoder().encode(body)
        return try await send(request)
    }

    private func makeRequest(_ path: String, method: String, query: [URLQueryItem]) throws -> URLRequest {
        guard var components = URLComponents(url: baseURL.appendingPathComponent(path), resolvingAgainstBaseURL: false) else {
            throw URLError(.badURL)
        }
        // An empty list would leave a bare "?" on the URL.
        if !query.isEmpty {
            components.queryItems = query
        }
        guard let url = components.url else {
            throw URLError(.badURL)
        }
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        return request
    }

    private func send<T: Decodable>(_ request: URLRequest) async throws -> T {
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await session.data(for: request)
        } catch let error as URLError {
            throw APIError.transport(error)
        }
        // Anything that is not an HTTP answer counts as a bad status, like a non-2xx one.
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        guard (200..<300).contains(status) else {
            throw APIError.badStatus(status, data)
        }
        do {
            return try Self.makeDecoder().decode(T.self, from: data)
        } catch {
            throw APIError.decoding(error)
        }
    }
}

// MARK: - A download manager on delegate callbacks

/// Downloads files into one directory, reporting progress and completion per task.
/// Delegate callbacks arrive one at a time on the session's serial queue; the lock guards the
/// bookkeeping against the callers that start and cancel tasks from other threads.
final class DownloadManager: NSObject, URLSessionDownloadDelegate, @unchecked Sendable {
    typealias Completion = @Sendable (Result<URL, any Error>) -> Void
    typealias ProgressHandler = @Sendable (TransferProgress) -> Void

    struct TransferProgress: Sendable, Equatable {
        var totalBytesWritten: Int64 = 0
        var totalBytesExpectedToWrite: Int64 = NSURLSessionTransferSizeUnknown
        /// How many progress callbacks arrived.
        var updates = 0
        /// Where a download made from resume data went on, if it was one.
        var resumedAtOffset: Int64?

        var fractionCompleted: Double? {
            guard totalBytesExpectedToWrite > 0 else { return nil }
            return Double(totalBytesWritten) / Double(totalBytesExpectedToWrite)
        }
    }

    enum DownloadError: Error, Equatable {
        /// The server answered, but not with the file.
        case badStatus(Int)
        /// The task ended without error and without handing over a file.
        case noFile
    }

    private let destinationDirectory: URL
    private let delegateQueue: OperationQueue
    // Set once in init: the session needs `self` as its delegate, so it cannot be a `let`.
    private var session: URLSession!

    private let lock = NSLock()
    private var completions: [Int: Completion] = [:]
    private var progressHandlers: [Int: ProgressHandler] = [:]
    private var progressByTask: [Int: TransferProgress] = [:]
    /// What didFinishDownloadingTo made of a task's file, until didCompleteWithError reports it.
    private var outcomes: [Int: Result<URL, any Error>] = [:]

    init(destinationDirectory: URL, configuration: URLSessionConfiguration = .default) {
        self.destinationDirectory = destinationDirectory
        let queue = OperationQueue()
        queue.name = "DownloadManager delegate queue"
        // One callback at a time, in order: progress never overtakes completion.
        queue.maxConcurrentOperationCount = 1
        self.delegateQueue = queue
        super.init()
        session = URLSession(configuration: configuration, delegate: self, delegateQueue: queue)
    }

    /// Lets running downloads finish, then releases the session (which holds its delegate).
    func invalidate() {
        session.finishTasksAndInvalidate()
    }

    @discardableResult
    func download(_ url: URL, progress: ProgressHandler? = nil, completion: @escaping Completion) -> URLSessionDownloadTask {
        download(URLRequest(url: url), progress: progress, completion: completion)
    }

    @discardableResult
    func download(_ request: URLRequest, progress: ProgressHandler? = nil, completion: @escaping Completion) -> URLSessionDownloadTask {
        start(session.downloadTask(with: request), progress: progress, completion: completion)
    }

    /// Stops a download, keeping what arrived: `resumeDataHandler` gets the data to pass to
    /// ``resume(with:progress:completion:)``, or nil when the server does not allow resuming.
    /// The task's own completion then reports the cancellation.
    func cancel(_ task: URLSessionDownloadTask, resumeDataHandler: @escaping @Sendable (Data?) -> Void) {
        task.cancel(byProducingResumeData: resumeDataHandler)
    }

    @discardableResult
    func resume(with data: Data, progress: ProgressHandler? = nil, completion: @escaping Completion) -> URLSessionDownloadTask {
        start(session.downloadTask(withResumeData: data), progress: progress, completion: completion)
    }

    /// The latest progress of a task, kept after it completes.
    func progress(forTask identifier: Int) -> TransferProgress? {
        lock.withLock { progressByTask[identifier] }
    }

    private func start(_ task: URLSessionDownloadTask, progress: ProgressHandler?, completion: @escaping Completion) -> URLSessionDownloadTask {
        // Registered before resume(): the first callback may come at once.
        lock.withLock {
            completions[task.taskIdentifier] = completion
            progressHandlers[task.taskIdentifier] = progress
            progressByTask[task.taskIdentifier] = TransferProgress()
        }
        task.resume()
        return task
    }

    // MARK: URLSessionDownloadDelegate

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        let identifier = downloadTask.taskIdentifier
        let (snapshot, handler) = lock.withLock { () -> (TransferProgress, ProgressHandler?) in
            var entry = progressByTask[identifier] ?? TransferProgress()
            entry.totalBytesWritten = totalBytesWritten
            entry.totalBytesExpectedToWrite = totalBytesExpectedToWrite
            entry.updates += 1
            progressByTask[identifier] = entry
            return (entry, progressHandlers[identifier])
        }
        // Outside the lock: a handler may well call back into the manager (to cancel, say).
        handler?(snapshot)
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didResumeAtOffset fileOffset: Int64, expectedTotalBytes: Int64) {
        let identifier = downloadTask.taskIdentifier
        lock.withLock {
            var entry = progressByTask[identifier] ?? TransferProgress()
            entry.resumedAtOffset = fileOffset
            entry.totalBytesWritten = fileOffset
            entry.totalBytesExpectedToWrite = expectedTotalBytes
            progressByTask[identifier] = entry
        }
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        let identifier = downloadTask.taskIdentifier
        // A 404 page downloads as happily as the file: only a 2xx body is the file.
        if let http = downloadTask.response as? HTTPURLResponse, !(200..<300).contains(http.statusCode) {
            lock.withLock { outcomes[identifier] = .failure(DownloadError.badStatus(http.statusCode)) }
            return
        }
        let name = downloadTask.response?.suggestedFilename ?? location.lastPathComponent
        let destination = destinationDirectory.appendingPathComponent(name)
        // The file at `location` is deleted when this method returns, so it moves now.
        let outcome: Result<URL, any Error>
        do {
            let fileManager = FileManager.default
            try fileManager.createDirectory(at: destinationDirectory, withIntermediateDirectories: true)
            if fileManager.fileExists(atPath: destination.path) {
                try fileManager.removeItem(at: destination)
            }
            try fileManager.moveItem(at: location, to: destination)
            outcome = .success(destination)
        } catch {
            outcome = .failure(error)
        }
        lock.withLock { outcomes[identifier] = outcome }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let identifier = task.taskIdentifier
        let (completion, outcome) = lock.withLock { () -> (Completion?, Result<URL, any Error>?) in
            progressHandlers[identifier] = nil
            return (completions.removeValue(forKey: identifier), outcomes.removeValue(forKey: identifier))
        }
        let result: Result<URL, any Error>
        if let error {
            result = .failure(error)
        } else {
            result = outcome ?? .failure(DownloadError.noFile)
        }
        completion?(result)
    }
}

// MARK: - The classic URLProtocol mock

/// Stands in for the server in unit tests: every request goes to `requestHandler`.
final class MockURLProtocol: URLProtocol, @unchecked Sendable {
    typealias Handler = @Sendable (URLRequest) throws -> (HTTPURLResponse, Data)

    // Shared by every instance, and set from the test while the session's threads read it.
    private static let handler = Mutex<Handler?>(nil)

    static var requestHandler: Handler? {
        get { handler.withLock { $0 } }
        set { handler.withLock { $0 = newValue } }
    }

    /// A session whose every request this class answers.
    static func makeSession() -> URLSession {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.protocolClasses = [MockURLProtocol.self]
        return URLSession(configuration: configuration)
    }

    override class func canInit(with request: URLRequest) -> Bool {
        true
    }

    override class func canonicalRequest(for request: URLRequest) -> URLRequest {
        request
    }

    override func startLoading() {
        guard let handler = MockURLProtocol.requestHandler else {
            // A test that forgot its handler fails its request instead of hanging.
            client?.urlProtocol(self, didFailWithError: URLError(.unsupportedURL))
            return
        }
        do {
            let (response, data) = try handler(request)
            client?.urlProtocol(self, didReceive: response, cacheStoragePolicy: .notAllowed)
            client?.urlProtocol(self, didLoad: data)
            client?.urlProtocolDidFinishLoading(self)
        } catch {
            client?.urlProtocol(self, didFailWithError: error)
        }
    }

    override func stopLoading() {}
}

// MARK: - A session with a disk cache and cookies

/// A session for an app that browses an API: responses cached on disk by their HTTP headers,
/// cookies kept and sent back, a recognisable User-Agent. The cookie storage defaults to the
/// process-wide one, as `URLSessionConfiguration.default` has it.
func makeCachingSession(cacheDirectory: URL, cookieStorage: HTTPCookieStorage = .shared) -> URLSession {
    let configuration = URLSessionConfiguration.default
    configuration.urlCache = URLCache(memoryCapacity: 8 * 1024 * 1024, diskCapacity: 64 * 1024 * 1024, directory: cacheDirectory)
    configuration.requestCachePolicy = .useProtocolCachePolicy
    configuration.httpCookieStorage = cookieStorage
    configuration.httpCookieAcceptPolicy = .always
    configuration.httpShouldSetCookies = true
    configuration.timeoutIntervalForRequest = 30
    configuration.httpAdditionalHeaders = ["User-Agent": "OrdinaryClient/1.0"]
    return URLSession(configuration: configuration)
}
