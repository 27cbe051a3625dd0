import Foundation

/// The daemon's messages, read on the link's thread and delivered on the delegate queue.
extension BackgroundLink {
    /// Reads until the link closes. When the daemon goes away while the session still wants it
    /// (it was killed), a new daemon is started and takes up the journal; if none answers,
    /// the session's background tasks fail with `.backgroundSessionWasDisconnected`.
    func read(_ first: FrameSocket) {
        var socket = first
        while true {
            while let message = socket.receive(DaemonMessage.self) {
                handle(message)
            }
            socket.close()
            let stillWanted = state.withLock { state -> Bool in
                if case .connected(let current) = state.status, current === socket { return true }
                return false
            }
            guard stillWanted else { return }
            switch reopen() {
            case .success(let replacement):
                socket = replacement
            case .failure(let status):
                state.withLock { $0.status = status }
                failAll()
                return
            }
        }
    }

    private func reopen() -> Result<FrameSocket, Status> {
        switch open() {
        case .success(let (socket, tasks, last)):
            let replaced = state.withLock { state -> Bool in
                guard case .connected = state.status else { return false }
                state.status = .connected(socket)
                return true
            }
            guard replaced else {
                socket.shutdown()
                return .failure(.closed)
            }
            adopt(tasks, lastTaskIdentifier: last)
            return .success(socket)
        case .failure(let status):
            return .failure(status)
        }
    }

    /// Fails every background task still running: the daemon cannot be reached.
    private func failAll() {
        guard let session else { return }
        let tasks = session.registry.withLock { $0.tasks.values.filter { $0 is BackgroundTask } }
        for task in tasks where task.state != .completed {
            let done = task.storage.withLock { storage -> Bool in
                guard storage.state != .completed else { return false }
                storage.state = .canceling
                return true
            }
            if done {
                let message = "The background daemon for \"\(identifier)\" stopped and could not be started again"
                task.reportCompletion(URLError.courier(.backgroundSessionWasDisconnected, message, url: task.originalRequest?.url))
            }
        }
    }

    private func handle(_ message: DaemonMessage) {
        guard let session else { return }
        let queue = session.delegateQueue
        func task(_ id: Int) -> URLSessionTask? {
            session.registry.withLock { $0.tasks[id] }
        }
        switch message {
        case .welcome, .refused:
            break
        case .event(let event):
            let fresh = state.withLock { $0.seenEvents.insert(event.id).inserted }
            guard fresh, let target = task(event.task) else {
                if !fresh || task(event.task) == nil { send(acknowledging: event.id) }
                return
            }
            queue.addOperation { [self] in
                deliver(event, to: target, in: session)
                // Acknowledged before the session hears the task ended: an invalidation that
                // follows closes the link, and must not lose this.
                send(acknowledging: event.id)
                if case .completed = event.kind { ended(target, in: session) }
            }
        case .wrote(let id, let bytes, let total, let expected):
            guard let target = task(id) as? URLSessionDownloadTask else { return }
            target.storage.withLock { storage in
                storage.countOfBytesReceived = total
                storage.countOfBytesExpectedToReceive = expected
            }
            queue.addOperation {
                let delegate = (target.delegate as? URLSessionDownloadDelegate) ?? (session.delegate as? URLSessionDownloadDelegate)
                delegate?.urlSession(session, downloadTask: target, didWriteData: bytes, totalBytesWritten: total, totalBytesExpectedToWrite: expected)
            }
        case .sent(let id, let bytes, let total, let expected):
            guard let target = task(id) else { return }
            target.storage.withLock { storage in
                storage.countOfBytesSent = total
                storage.countOfBytesExpectedToSend = expected
            }
            queue.addOperation {
                let delegate = target.delegate ?? (session.delegate as? URLSessionTaskDelegate)
                delegate?.urlSession(session, task: target, didSendBodyData: bytes, totalBytesSent: total, totalBytesExpectedToSend: expected)
            }
        case .resumedAtOffset(let id, let offset, let expected):
            guard let target = task(id) as? URLSessionDownloadTask else { return }
            queue.addOperation {
                let delegate = (target.delegate as? URLSessionDownloadDelegate) ?? (session.delegate as? URLSessionDownloadDelegate)
                delegate?.urlSession(session, downloadTask: target, didResumeAtOffset: offset, expectedTotalBytes: expected)
            }
        case .response(let id, let response):
            task(id)?.storage.withLock { $0.response = response.httpResponse }
        case .resumeData(let id, let data):
            let waiter = state.withLock { $0.resumeDataWaiters.removeValue(forKey: id) }
            if let waiter { queue.addOperation { waiter(data) } }
        }
    }

    private func send(acknowledging eventID: Int) {
        send(.acknowledge(event: eventID))
    }

    /// Hands one event to the delegate; runs on the delegate queue.
    private func deliver(_ event: WireEvent, to task: URLSessionTask, in session: URLSession) {
        if let response = event.response?.httpResponse {
            task.storage.withLock { $0.response = response }
        }
        switch event.kind {
        case .finishedDownload(let path):
            // Only a file in the daemon's own folder is handed over (and deleted after).
            let files = directory.appendingPathComponent("files", isDirectory: true).standardizedFileURL.path + "/"
            guard URL(fileURLWithPath: path).standardizedFileURL.path.hasPrefix(files) else { return }
            if let download = task as? URLSessionDownloadTask {
                let delegate = (task.delegate as? URLSessionDownloadDelegate) ?? (session.delegate as? URLSessionDownloadDelegate)
                delegate?.urlSession(session, downloadTask: download, didFinishDownloadingTo: URL(fileURLWithPath: path))
            }
            // As on Apple platforms: the file is gone once the delegate returned.
            try? FileManager.default.removeItem(atPath: path)
        case .receivedData(let data):
            if let dataTask = task as? URLSessionDataTask {
                let delegate = (task.delegate as? URLSessionDataDelegate) ?? (session.delegate as? URLSessionDataDelegate)
                delegate?.urlSession(session, dataTask: dataTask, didReceive: data)
            }
        case .completed(let error):
            // A resume-data request still open gets its answer (none) before the completion.
            let waiter = state.withLock { $0.resumeDataWaiters.removeValue(forKey: task.taskIdentifier) }
            waiter?(nil)
            let failure = error?.error
            task.storage.withLock { storage in
                storage.state = .completed
                storage.error = failure
            }
            let delegate = task.delegate ?? (session.delegate as? URLSessionTaskDelegate)
            delegate?.urlSession(session, task: task, didCompleteWithError: failure)
        }
    }

    /// A task's completion was delivered and acknowledged: the session lets it go, and hears
    /// `urlSessionDidFinishEvents` when it was the last inherited task.
    private func ended(_ task: URLSessionTask, in session: URLSession) {
        session.taskCompleted(task)
        let finishedEvents = state.withLock { state -> Bool in
            state.inherited.remove(task.taskIdentifier)
            guard state.hadInherited, state.inherited.isEmpty, !state.toldFinishedEvents else { return false }
            state.toldFinishedEvents = true
            return true
        }
        if finishedEvents { session.delegate?.urlSessionDidFinishEvents(forBackgroundURLSession: session) }
    }
}
