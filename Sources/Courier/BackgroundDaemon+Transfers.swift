import Foundation

/// The daemon's own session: it carries the wire tasks and turns its delegate's calls into
/// journal events and progress messages.
extension BackgroundDaemon: URLSessionDownloadDelegate, URLSessionDataDelegate {
    /// The session for new transfers, made from the settings the last `hello` brought. When a
    /// session came with other settings, a new one is made; the old one finishes its transfers.
    private func transferSession(_ state: inout State) -> URLSession {
        let settings = state.journal.settings ?? WireSettings(URLSessionConfiguration.default)
        if let session = state.session, state.sessionSettings == settings { return session }
        state.session?.finishTasksAndInvalidate()
        let session = URLSession(configuration: settings.configuration, delegate: self, delegateQueue: sessionQueue)
        let registry = downloading
        session.makeDownloadFile.withLock { maker in
            maker.make = { try registry.make() }
        }
        state.session = session
        state.sessionSettings = settings
        return session
    }

    /// Starts a wire task on the daemon's session (from its start: a resume after a daemon
    /// restart begins again, or goes on from the resume data it was made with).
    func start(_ id: Int) {
        enum Start {
            case task(URLSessionTask)
            case refuse(WireError)
            case none
        }
        let decision = state.withLock { state -> Start in
            guard let index = state.journal.tasks.firstIndex(where: { $0.id == id }),
                  state.journal.tasks[index].state == .running, state.inFlight[id] == nil else { return .none }
            let wire = state.journal.tasks[index]
            guard let request = wire.request.urlRequest, let scheme = request.url?.scheme?.lowercased(),
                  scheme == "http" || scheme == "https" else {
                return .refuse(WireError(code: .unsupportedURL, message: "Background sessions load only http and https URLs", url: wire.request.url))
            }
            let session = transferSession(&state)
            let task: URLSessionTask
            switch wire.kind {
            case .download:
                if let resumeData = wire.resumeData {
                    task = session.downloadTask(withResumeData: resumeData)
                } else {
                    task = session.downloadTask(with: request)
                }
            case .upload:
                task = session.uploadTask(with: request, fromFile: URL(fileURLWithPath: wire.file ?? ""))
            }
            state.journal.tasks[index].started = true
            state.journal.tasks[index].bytesReceived = 0
            state.journal.tasks[index].bytesSent = 0
            state.inFlight[id] = task
            state.wireIDs[ObjectIdentifier(task)] = id
            state.responseSent.remove(id)
            state.progress[id] = nil
            persist(state.journal)
            return .task(task)
        }
        switch decision {
        case .task(let task): task.resume()
        case .refuse(let error): complete(id, error: error)
        case .none: break
        }
    }

    private func wireID(of task: URLSessionTask) -> Int? {
        state.withLock { $0.wireIDs[ObjectIdentifier(task)] }
    }

    /// Records the task's response once, and tells the session of it.
    private func noteResponse(of task: URLSessionTask, id: Int) {
        guard let response = WireResponse(task.response) else { return }
        let isNew = state.withLock { state -> Bool in
            guard let index = state.journal.tasks.firstIndex(where: { $0.id == id }) else { return false }
            state.journal.tasks[index].response = response
            return state.responseSent.insert(id).inserted
        }
        if isNew { send(.response(task: id, response)) }
    }

    // MARK: Delegate

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        guard let id = wireID(of: downloadTask) else { return }
        noteResponse(of: downloadTask, id: id)
        state.withLock { state in
            guard let index = state.journal.tasks.firstIndex(where: { $0.id == id }) else { return }
            state.journal.tasks[index].bytesReceived = totalBytesWritten
            state.journal.tasks[index].bytesExpectedToReceive = totalBytesExpectedToWrite
        }
        sendProgress(.wrote(task: id, bytes: bytesWritten, total: totalBytesWritten, expected: totalBytesExpectedToWrite), task: id)
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didResumeAtOffset fileOffset: Int64, expectedTotalBytes: Int64) {
        guard let id = wireID(of: downloadTask) else { return }
        send(.resumedAtOffset(task: id, offset: fileOffset, expected: expectedTotalBytes))
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        guard let id = wireID(of: downloadTask) else { return }
        noteResponse(of: downloadTask, id: id)
        // The file must outlive this call: it moves into the state directory, where it waits
        // for the session's `didFinishDownloadingTo`.
        let kept = files.appendingPathComponent("\(id)-\(UUID().uuidString).download")
        do {
            try FileManager.default.moveItem(at: location, to: kept)
        } catch {
            state.withLock { $0.inFlight[id] = nil }
            downloadTask.cancel()
            let failure = WireError(code: .cannotMoveFile, message: "The download could not be kept: \(error.localizedDescription)", url: downloadTask.currentRequest?.url?.absoluteString)
            complete(id, error: failure)
            return
        }
        state.withLock { state in
            record(.finishedDownload(path: kept.path), task: id, in: &state)
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        guard let id = wireID(of: task) else { return }
        state.withLock { state in
            guard let index = state.journal.tasks.firstIndex(where: { $0.id == id }) else { return }
            state.journal.tasks[index].bytesSent = totalBytesSent
            state.journal.tasks[index].bytesExpectedToSend = totalBytesExpectedToSend
        }
        sendProgress(.sent(task: id, bytes: bytesSent, total: totalBytesSent, expected: totalBytesExpectedToSend), task: id)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        if let id = wireID(of: dataTask) { noteResponse(of: dataTask, id: id) }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        guard let id = wireID(of: dataTask) else { return }
        state.withLock { state in
            let kept = state.uploadBodies[id]?.count ?? 0
            let room = max(0, Self.maximumUploadResponse - kept)
            state.uploadBodies[id, default: Data()].append(data.prefix(room))
            if let index = state.journal.tasks.firstIndex(where: { $0.id == id }) {
                state.journal.tasks[index].bytesReceived += Int64(data.count)
            }
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let id = state.withLock { state -> Int? in
            guard let id = state.wireIDs.removeValue(forKey: ObjectIdentifier(task)) else { return nil }
            if state.inFlight[id] === task { state.inFlight[id] = nil }
            return id
        }
        guard let id else { return }
        noteResponse(of: task, id: id)
        complete(id, error: error.map(WireError.init))
    }
}
