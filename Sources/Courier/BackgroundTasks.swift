import Foundation

/// A task whose load runs in the background daemon: resume, suspend and cancel go to it
/// through the session's ``BackgroundLink``.
protocol BackgroundTask: URLSessionTask {}

extension BackgroundTask {
    var link: BackgroundLink? { session.background }
}

/// A background session's download task.
final class BackgroundDownloadTask: URLSessionDownloadTask, BackgroundTask, @unchecked Sendable {
    override func resume() { link?.resume(self) }
    override func suspend() { link?.suspend(self) }
    override func cancel() { link?.cancel(self, producingResumeData: nil) }

    override func cancel(byProducingResumeData completionHandler: @escaping @Sendable (Data?) -> Void) {
        link?.cancel(self, producingResumeData: completionHandler)
    }
}

/// A background session's upload task (from a file).
final class BackgroundUploadTask: URLSessionUploadTask, BackgroundTask, @unchecked Sendable {
    override func resume() { link?.resume(self) }
    override func suspend() { link?.suspend(self) }
    override func cancel() { link?.cancel(self, producingResumeData: nil) }
}

extension URLSession {
    /// The task a background session makes for `request`: a daemon task for downloads and
    /// uploads from files given to the delegate; for anything else Apple does not allow there
    /// (completion handlers and async calls, uploads from memory or a stream, other schemes), a
    /// task that fails when resumed, saying why; nil for the rest (data tasks given to the
    /// delegate, stream and WebSocket tasks), which run here.
    func backgroundTask<T: URLSessionTask>(
        _ kind: T.Type, _ request: URLRequest?, delivery: TaskDriver.Delivery, body: TaskDriver.BodySource, resumeData: Data? = nil
    ) -> T? {
        guard let link = background else { return nil }
        let isDownload = kind == URLSessionDownloadTask.self
        let isUpload = kind == URLSessionUploadTask.self
        var refusal: URLError?
        if case .delegate = delivery {
            // A data task given to the delegate runs here, as in a default session.
            guard isDownload || isUpload else { return nil }
        } else {
            guard isDownload || isUpload || kind == URLSessionDataTask.self else { return nil }
            refusal = .courier(.unknown, "A background session does not take completion handlers or async calls: give the session a delegate", url: request?.url)
        }
        var file: URL?
        if isUpload {
            if case .file(let url) = body {
                file = url
            } else {
                refusal = refusal ?? .courier(.unknown, "A background session uploads only from files: use uploadTask(with:fromFile:)", url: request?.url)
            }
        }
        if refusal == nil, resumeData == nil, let scheme = request?.url?.scheme?.lowercased(), scheme != "http", scheme != "https" {
            refusal = .courier(.unsupportedURL, "A background session loads only http and https URLs", url: request?.url)
        }
        if let refusal {
            let task: T = makeTask(kind, request, delivery: delivery, body: body, inProcess: true)
            task.driver.failWhenStarted(refusal)
            return task
        }
        let identifier = nextTaskIdentifier()
        let task: URLSessionTask = isDownload
            ? BackgroundDownloadTask(session: self, identifier: identifier, request: request, delivery: .delegate, body: .request)
            : BackgroundUploadTask(session: self, identifier: identifier, request: request, delivery: .delegate, body: .request)
        registry.withLock { $0.tasks[identifier] = task }
        let wire = WireTask(
            id: identifier, kind: isDownload ? .download : .upload, request: WireRequest(request ?? URLRequest(url: URL(fileURLWithPath: "/"))),
            file: file.map { $0.standardizedFileURL.path }, resumeData: resumeData
        )
        link.created(wire)
        announceCreated(task)
        return task as? T
    }
}
