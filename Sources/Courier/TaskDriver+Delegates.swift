import CourierHTTP1
import CourierTransport
import Foundation

/// The request as sent, the delegates a task talks to, and its delegate queue.
extension TaskDriver {
    // MARK: The request as sent

    /// The current request as it went on the wire, once it was handed to the transport.
    var requestAsSent: URLRequest? {
        state.withLock { state in
            guard let request = state.request, let transportRequest = state.transportRequest else { return nil }
            return Self.wireRequest(request, transportRequest)
        }
    }

    /// `request` with the fields Courier actually sends: Host, the merged caller, configured
    /// and default fields, and the framing field (the transport's one framing rule).
    static func wireRequest(_ request: URLRequest, _ transportRequest: TransportRequest) -> URLRequest {
        var sent = request
        sent.allHTTPHeaderFields = nil
        sent.setValue(transportRequest.head.authority, forHTTPHeaderField: "Host")
        for field in transportRequest.head.fields.fields where !HTTP1RequestEncoder.reservedFieldNames.contains(field.name.lowercased()) {
            sent.addValue(field.value, forHTTPHeaderField: field.name)
        }
        switch transportRequest.framing {
        case .none: break
        case .contentLength(let length): sent.setValue(String(length), forHTTPHeaderField: "Content-Length")
        case .chunked: sent.setValue("chunked", forHTTPHeaderField: "Transfer-Encoding")
        }
        return sent
    }

    // MARK: Delegates and the delegate queue

    /// The delegate for task events: the task's own, else the session's.
    var taskDelegate: (any URLSessionTaskDelegate)? {
        Self.taskDelegate(of: task, in: session)
    }

    /// The task delegate of a task already at hand (one weak load fewer on the hot path).
    static func taskDelegate(of task: URLSessionTask?, in session: URLSession) -> (any URLSessionTaskDelegate)? {
        task?.delegate ?? (session.delegate as? URLSessionTaskDelegate)
    }

    /// The delegate for data events: the task's own when it handles them, else the session's.
    var dataDelegate: (any URLSessionDataDelegate)? {
        (task?.delegate as? URLSessionDataDelegate) ?? (session.delegate as? URLSessionDataDelegate)
    }

    /// The delegate for download events: the task's own when it handles them, else the session's.
    var downloadDelegate: (any URLSessionDownloadDelegate)? {
        (task?.delegate as? URLSessionDownloadDelegate) ?? (session.delegate as? URLSessionDownloadDelegate)
    }

    /// Runs `work` on the session's delegate queue, after everything queued before it.
    func enqueue(_ work: @escaping @Sendable () -> Void) {
        session.delegateQueue.addOperation(work)
    }

    /// Hands metrics to the task delegate (on the delegate queue).
    func reportMetrics(_ metrics: URLSessionTaskMetrics?) {
        guard let metrics, let task, let delegate = Self.taskDelegate(of: task, in: session) else { return }
        delegate.urlSession(session, task: task, didFinishCollecting: metrics)
    }

    /// The task delivered its last callback.
    func taskCompleted() {
        let task = taskSlot.withLock { slot -> URLSessionTask? in
            defer { slot = nil }
            return slot
        }
        guard let task else { return }
        session.taskCompleted(task)
    }
}
