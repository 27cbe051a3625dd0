import Foundation

/// Session-level events: Apple's `URLSessionDelegate`. Every method is optional.
public protocol URLSessionDelegate: NSObjectProtocol, Sendable {
    /// The last call a session makes: it was invalidated, and releases its delegate after this.
    func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?)
    /// A connection-level challenge: server trust or a client certificate. When not
    /// implemented, the task delegate's task-level method is asked, then default handling.
    func urlSession(_ session: URLSession, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void)
    /// A background session that took over tasks an earlier session (of this process or
    /// another) left running has delivered every event of those tasks: each one's
    /// `didCompleteWithError` has been called. Called once per session, never for a session
    /// that took over no task.
    func urlSessionDidFinishEvents(forBackgroundURLSession session: URLSession)
}

extension URLSessionDelegate {
    public func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {}

    public func urlSessionDidFinishEvents(forBackgroundURLSession session: URLSession) {}

    public func urlSession(_ session: URLSession, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        completionHandler(.performDefaultHandling, ChallengeDefaults.unhandled)
    }
}

/// Task-level events: Apple's `URLSessionTaskDelegate`. Every method is optional.
///
/// A task's own `delegate` receives these first; when it is a different object from the
/// session's delegate and does not implement a method, the default implementation passes the
/// call on to the session's delegate.
public protocol URLSessionTaskDelegate: URLSessionDelegate {
    /// A task was made: called synchronously, before the method that made it returns (not on
    /// the delegate queue), so the task can be configured before it is resumed.
    func urlSession(_ session: URLSession, didCreateTask task: URLSessionTask)
    /// An interim (1xx) response arrived ahead of the final one: 103 Early Hints, say. Not for
    /// 101, which no task takes.
    func urlSession(_ session: URLSession, task: URLSessionTask, didReceiveInformationalResponse response: HTTPURLResponse)
    /// Request body bytes were sent.
    func urlSession(_ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64)
    /// The task finished; `error` is nil on success (a 404 is a success).
    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?)
    /// Timings and counts of the task's transactions, delivered before completion.
    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics)
    /// A challenge for this task: server trust and client certificates when the session
    /// delegate leaves them alone.
    func urlSession(_ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void)
    /// The server redirected the task (301, 302, 303, 307, 308). Call `completionHandler` with
    /// `request` to follow it, with another request to load that instead, or with nil to
    /// refuse: the task then completes with the redirect response and its body. When not
    /// implemented, the redirect is followed.
    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void)
    /// The task needs its streamed body: at the start of `uploadTask(withStreamedRequest:)`, and
    /// again when a 307 or 308 redirect or an authentication retry must resend it. Give a new
    /// stream with the same bytes, or nil to fail the task. Implement this or the async
    /// ``urlSession(_:needNewBodyStreamForTask:)``.
    func urlSession(_ session: URLSession, task: URLSessionTask, needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void)
    /// The async form of ``urlSession(_:task:needNewBodyStream:)``, as Apple's SDK has it:
    /// a delegate implementing only this is asked through it.
    func urlSession(_ session: URLSession, needNewBodyStreamForTask task: URLSessionTask) async -> InputStream?
    /// A task resumed before its `earliestBeginDate` is about to begin, now that the date has
    /// come: continue, load another request, or cancel. When not implemented, it continues.
    func urlSession(_ session: URLSession, task: URLSessionTask, willBeginDelayedRequest request: URLRequest, completionHandler: @escaping @Sendable (URLSession.DelayedRequestDisposition, URLRequest?) -> Void)
}

extension URLSessionTaskDelegate {
    public func urlSession(_ session: URLSession, didCreateTask task: URLSessionTask) {
        forwardingTarget(session, task)?.urlSession(session, didCreateTask: task)
    }

    public func urlSession(_ session: URLSession, task: URLSessionTask, didReceiveInformationalResponse response: HTTPURLResponse) {
        forwardingTarget(session, task)?.urlSession(session, task: task, didReceiveInformationalResponse: response)
    }

    public func urlSession(_ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        forwardingTarget(session, task)?.urlSession(session, task: task, didSendBodyData: bytesSent, totalBytesSent: totalBytesSent, totalBytesExpectedToSend: totalBytesExpectedToSend)
    }

    public func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        forwardingTarget(session, task)?.urlSession(session, task: task, didCompleteWithError: error)
    }

    public func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
        forwardingTarget(session, task)?.urlSession(session, task: task, didFinishCollecting: metrics)
    }

    public func urlSession(_ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        if let target = forwardingTarget(session, task) {
            target.urlSession(session, task: task, didReceive: challenge, completionHandler: completionHandler)
        } else {
            completionHandler(.performDefaultHandling, ChallengeDefaults.unhandled)
        }
    }

    public func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void) {
        if let target = forwardingTarget(session, task) {
            target.urlSession(session, task: task, willPerformHTTPRedirection: response, newRequest: request, completionHandler: completionHandler)
        } else {
            completionHandler(request)
        }
    }

    /// Not implemented here: asks the async form (which the delegate may implement instead).
    public func urlSession(_ session: URLSession, task: URLSessionTask, needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void) {
        Task { completionHandler(await self.urlSession(session, needNewBodyStreamForTask: task)) }
    }

    /// Not implemented either: the session's delegate is asked (on the delegate queue), when
    /// this is a task's own delegate; else there is no stream.
    public func urlSession(_ session: URLSession, needNewBodyStreamForTask task: URLSessionTask) async -> InputStream? {
        guard let target = forwardingTarget(session, task) else { return nil }
        let answer = await withCheckedContinuation { (continuation: CheckedContinuation<UncheckedStreamBox, Never>) in
            session.delegateQueue.addOperation {
                target.urlSession(session, task: task, needNewBodyStream: { continuation.resume(returning: UncheckedStreamBox(stream: $0)) })
            }
        }
        return answer.stream
    }

    public func urlSession(_ session: URLSession, task: URLSessionTask, willBeginDelayedRequest request: URLRequest, completionHandler: @escaping @Sendable (URLSession.DelayedRequestDisposition, URLRequest?) -> Void) {
        if let target = forwardingTarget(session, task) {
            target.urlSession(session, task: task, willBeginDelayedRequest: request, completionHandler: completionHandler)
        } else {
            completionHandler(.continueLoading, nil)
        }
    }

    /// The session's delegate, when `self` is the task's own delegate and a different object.
    func forwardingTarget(_ session: URLSession, _ task: URLSessionTask) -> URLSessionTaskDelegate? {
        guard let own = task.delegate, own === self,
              let sessionDelegate = session.delegate as? URLSessionTaskDelegate, sessionDelegate !== self else { return nil }
        return sessionDelegate
    }
}

/// Data-task events: Apple's `URLSessionDataDelegate`. Every method is optional.
public protocol URLSessionDataDelegate: URLSessionTaskDelegate {
    /// The response head arrived. No data is delivered until `completionHandler` is called;
    /// `.allow` continues, `.cancel` cancels the task.
    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void)
    /// Body bytes arrived (zero or more times, in order).
    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data)
    /// The data task became `downloadTask` (the `.becomeDownload` disposition): from now on its
    /// events are the download task's.
    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didBecome downloadTask: URLSessionDownloadTask)
    /// The data task became `streamTask` (the `.becomeStream` disposition): its connection is
    /// the stream task's, and the data task says nothing more.
    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didBecome streamTask: URLSessionStreamTask)
    /// The response is about to be stored in the session's cache (after the last data, before
    /// the metrics and the completion): call `completionHandler` with it, with a replacement,
    /// or with nil to store nothing. Not asked for ephemeral sessions. When not implemented,
    /// the response is stored as proposed.
    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, willCacheResponse proposedResponse: CachedURLResponse, completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void)
}

extension URLSessionDataDelegate {
    public func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        if let target = forwardingTarget(session, dataTask) as? URLSessionDataDelegate {
            target.urlSession(session, dataTask: dataTask, didReceive: response, completionHandler: completionHandler)
        } else {
            completionHandler(.allow)
        }
    }

    public func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didBecome downloadTask: URLSessionDownloadTask) {
        (forwardingTarget(session, dataTask) as? URLSessionDataDelegate)?.urlSession(session, dataTask: dataTask, didBecome: downloadTask)
    }

    public func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didBecome streamTask: URLSessionStreamTask) {
        (forwardingTarget(session, dataTask) as? URLSessionDataDelegate)?.urlSession(session, dataTask: dataTask, didBecome: streamTask)
    }

    public func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        (forwardingTarget(session, dataTask) as? URLSessionDataDelegate)?.urlSession(session, dataTask: dataTask, didReceive: data)
    }

    public func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, willCacheResponse proposedResponse: CachedURLResponse, completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void) {
        if let target = forwardingTarget(session, dataTask) as? URLSessionDataDelegate {
            target.urlSession(session, dataTask: dataTask, willCacheResponse: proposedResponse, completionHandler: completionHandler)
        } else {
            completionHandler(proposedResponse)
        }
    }
}

/// Download-task events: Apple's `URLSessionDownloadDelegate`. Every method is optional.
public protocol URLSessionDownloadDelegate: URLSessionTaskDelegate {
    /// The body is complete in the file at `location`. The file is deleted when this method
    /// returns: move or open it before then.
    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL)
    /// Body bytes were written to the file (progress; calls are coalesced while the delegate
    /// queue is busy). `totalBytesExpectedToWrite` is -1 when the length is unknown.
    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64)
    /// A download made from resume data got its answer, before any `didWriteData`: it goes on
    /// after the first `fileOffset` bytes of the partial file, or from 0 when the server sent
    /// the whole entity again. `expectedTotalBytes` is the entity's length, -1 when unknown.
    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didResumeAtOffset fileOffset: Int64, expectedTotalBytes: Int64)
}

extension URLSessionDownloadDelegate {
    public func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        (forwardingTarget(session, downloadTask) as? URLSessionDownloadDelegate)?.urlSession(session, downloadTask: downloadTask, didFinishDownloadingTo: location)
    }

    public func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        (forwardingTarget(session, downloadTask) as? URLSessionDownloadDelegate)?.urlSession(session, downloadTask: downloadTask, didWriteData: bytesWritten, totalBytesWritten: totalBytesWritten, totalBytesExpectedToWrite: totalBytesExpectedToWrite)
    }

    public func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didResumeAtOffset fileOffset: Int64, expectedTotalBytes: Int64) {
        (forwardingTarget(session, downloadTask) as? URLSessionDownloadDelegate)?.urlSession(session, downloadTask: downloadTask, didResumeAtOffset: fileOffset, expectedTotalBytes: expectedTotalBytes)
    }
}

/// An input stream handed between the delegate's answer and the task. The task reads it only
/// after the delegate has let go of it, as Apple's contract requires.
struct UncheckedStreamBox: @unchecked Sendable {
    var stream: InputStream?
}

