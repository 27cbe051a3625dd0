import Foundation

extension URLSession {
    /// Loads a request and returns its body and response. Cancelling the Swift task cancels
    /// the load. `delegate` becomes the task's delegate (redirects, challenges, metrics).
    public func data(for request: URLRequest, delegate: (any URLSessionTaskDelegate)? = nil) async throws -> (Data, URLResponse) {
        try await run(makeTask(URLSessionDataTask.self, request, delivery: .async), delegate: delegate)
    }

    /// Loads a URL and returns its body and response.
    public func data(from url: URL, delegate: (any URLSessionTaskDelegate)? = nil) async throws -> (Data, URLResponse) {
        try await data(for: URLRequest(url: url), delegate: delegate)
    }

    /// Uploads bytes and returns the response body and response.
    public func upload(for request: URLRequest, from bodyData: Data, delegate: (any URLSessionTaskDelegate)? = nil) async throws -> (Data, URLResponse) {
        try await run(makeTask(URLSessionUploadTask.self, request, delivery: .async, body: .data(bodyData)), delegate: delegate)
    }

    /// Uploads a file, streamed from disk, and returns the response body and response.
    public func upload(for request: URLRequest, fromFile fileURL: URL, delegate: (any URLSessionTaskDelegate)? = nil) async throws -> (Data, URLResponse) {
        try await run(makeTask(URLSessionUploadTask.self, request, delivery: .async, body: .file(fileURL)), delegate: delegate)
    }

    /// Downloads a request's body to a temporary file and returns the file and the response.
    /// The file belongs to the caller: move it, or delete it when done.
    public func download(for request: URLRequest, delegate: (any URLSessionTaskDelegate)? = nil) async throws -> (URL, URLResponse) {
        try await runDownload(makeTask(URLSessionDownloadTask.self, request, delivery: .async), delegate: delegate)
    }

    /// Downloads a URL to a temporary file and returns the file and the response.
    public func download(from url: URL, delegate: (any URLSessionTaskDelegate)? = nil) async throws -> (URL, URLResponse) {
        try await download(for: URLRequest(url: url), delegate: delegate)
    }

    /// Goes on with a download from resume data and returns the whole file and the response.
    /// Resume data that is not Courier's, or is damaged, throws `.cannotDecodeRawData`.
    public func download(resumeFrom resumeData: Data, delegate: (any URLSessionTaskDelegate)? = nil) async throws -> (URL, URLResponse) {
        try await runDownload(resumedDownloadTask(resumeData, delivery: .async), delegate: delegate)
    }

    @inline(__always)
    private func runDownload(_ task: URLSessionTask, delegate: (any URLSessionTaskDelegate)?) async throws -> (URL, URLResponse) {
        let (payload, response) = try await load(task, delegate: delegate)
        guard case .file(let location) = payload else { preconditionFailure("a download task returns a file") }
        return (location, response)
    }

    @inline(__always)
    private func run(_ task: URLSessionTask, delegate: (any URLSessionTaskDelegate)?) async throws -> (Data, URLResponse) {
        let (payload, response) = try await load(task, delegate: delegate)
        guard case .data(let data) = payload else { preconditionFailure("a data task returns its body") }
        return (data, response)
    }

    @inline(__always)
    private func load(_ task: URLSessionTask, delegate: (any URLSessionTaskDelegate)?) async throws -> (TaskPayload, URLResponse) {
        // An async task's sink is made to answer it (Delivery.async).
        guard let sink = task.driver.asyncSink else {
            preconditionFailure("an async task has an async sink")
        }
        if let delegate { task.delegate = delegate }
        announceCreated(task)
        defer { sink.settle() }
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { continuation in
                sink.wait(continuation)
                task.resume()
            }
        } onCancel: {
            task.cancel()
        }
    }
}
