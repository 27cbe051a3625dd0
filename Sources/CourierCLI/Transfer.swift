import Courier
import CourierSync
import Foundation

/// Streams one task's body to a sink, or puts a download task's file where the body goes, and
/// prints heads as asked; the delegate of its task.
final class Transfer: NSObject, URLSessionDataDelegate, URLSessionDownloadDelegate, CourierConnectionProgressDelegate, @unchecked Sendable {
    struct Outcome {
        var status: Int?
        var error: (any Error)?
        /// Why --cacert evaluation refused the server, for the error message.
        var trustFailure: String?
        /// Why the body could not go where -o, -O, -J or -C said: the message and curl's exit code.
        var outputFailure: (message: String, code: Int32)?
        /// Body bytes received (for -w's size_download).
        var bytesDownloaded: Int64 = 0
        /// Redirects followed, and whether --max-redirs stopped one.
        var redirects = 0
        var tooManyRedirects = false
        /// -f stopped the transfer at a status of 400 or above.
        var failedStatus: Int?
        var metrics: URLSessionTaskMetrics?
        var response: HTTPURLResponse?
        var effectiveURL: URL?
    }

    /// What the transfer does beyond the body: -f (without a body), --max-redirs, -D.
    struct Behaviour {
        var failsWithoutBody = false
        var maximumRedirects: Int?
        var headerDump: OutputSink?
        var progress: ProgressMeter?
        /// --cert/--key: the identity that answers a client-certificate challenge.
        var clientIdentity: SecIdentity?
    }

    private let sink: OutputSink
    private let include: Bool
    /// -v, --trace, --trace-ascii.
    private let narrator: Narrator?
    private let trust: TrustPolicy
    private let followsRedirects: Bool
    private let authentication: Authentication?
    /// The credential of --proxy-user (or of the proxy URL) for an HTTP proxy's 407.
    private let proxyCredential: URLCredential?
    private let behaviour: Behaviour
    private let state = Mutex<(outcome: Outcome, continuation: CheckedContinuation<Outcome, Never>?)>((Outcome(), nil))

    /// The credential of `-u` and how it is offered.
    struct Authentication {
        enum Mode {
            /// Sent with the first request (`--basic`, the default).
            case basic
            /// Only in answer to a Digest challenge (`--digest`).
            case digest
            /// In answer to the strongest scheme offered (`--anyauth`).
            case any
        }

        var user: String
        var password: String
        var mode: Mode
        /// The URL given on the command line: the credential answers its origin only.
        var url: URL? = nil

        /// True when `space` is the server of `url` (scheme, host, port), as curl sends -u
        /// credentials to the first host only: a redirect elsewhere does not get them.
        func answers(_ space: URLProtectionSpace) -> Bool {
            guard !space.isProxy(), let url, let scheme = url.scheme?.lowercased(), var host = url.host(percentEncoded: false) else { return false }
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            let port = url.port ?? (scheme == "https" ? 443 : 80)
            return space.protocol == scheme && space.host.lowercased() == host.lowercased() && space.port == port
        }
    }

    init(
        sink: OutputSink, include: Bool, narrator: Narrator?, trust: TrustPolicy, followsRedirects: Bool, authentication: Authentication?,
        proxyCredential: URLCredential? = nil, behaviour: Behaviour = Behaviour()
    ) {
        self.behaviour = behaviour
        self.authentication = authentication
        self.proxyCredential = proxyCredential
        self.sink = sink
        self.include = include
        self.narrator = narrator
        self.trust = trust
        self.followsRedirects = followsRedirects
    }

    /// As curl: a redirect is the answer unless -L asks to follow it.
    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void) {
        guard followsRedirects else {
            completionHandler(nil)
            return
        }
        dumpHead(of: response)
        let stopped = state.withLock { state -> Bool in
            if let maximum = behaviour.maximumRedirects, state.outcome.redirects >= maximum {
                state.outcome.tooManyRedirects = true
                return true
            }
            state.outcome.redirects += 1
            return false
        }
        if stopped {
            // As curl: past --max-redirs the transfer stops (exit 47), nothing of it written.
            completionHandler(nil)
            task.cancel()
            return
        }
        if let narrator {
            narrator.receivedHead(Self.describe(response))
            narrator.info("Issue another request to this URL: '\(request.url?.absoluteString ?? "")'")
        }
        if include, let failure = sink.write(Data((Self.describe(response).joined(separator: "\r\n") + "\r\n\r\n").utf8)) {
            state.withLock { $0.outcome.outputFailure = failure }
            completionHandler(nil)
            task.cancel()
            return
        }
        completionHandler(request)
    }

    func urlSession(_ session: URLSession, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        if challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodClientCertificate, let identity = behaviour.clientIdentity {
            completionHandler(.useCredential, URLCredential(identity: identity, certificates: nil, persistence: .forSession))
            return
        }
        let (disposition, credential, failure) = trust.answer(challenge)
        if let failure { state.withLock { $0.outcome.trustFailure = failure } }
        completionHandler(disposition, credential)
    }

    /// A 401: answered once with the -u credential, as curl does (a second 401 is the answer).
    /// Without -u, default handling (a `user:password@` in the URL).
    func urlSession(_ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        // As the task's delegate, the connection's TLS challenges come here too.
        let method = challenge.protectionSpace.authenticationMethod
        if method == NSURLAuthenticationMethodServerTrust || method == NSURLAuthenticationMethodClientCertificate {
            urlSession(session, didReceive: challenge, completionHandler: completionHandler)
            return
        }
        if challenge.protectionSpace.isProxy() {
            // A proxy's 407: answered once with --proxy-user, as curl does.
            narrator?.info("Proxy \(challenge.protectionSpace.host):\(challenge.protectionSpace.port) asks for authentication, realm '\(challenge.protectionSpace.realm ?? "")'")
            guard let proxyCredential, challenge.previousFailureCount == 0 else {
                completionHandler(proxyCredential == nil ? .performDefaultHandling : .useCredential, nil)
                return
            }
            completionHandler(.useCredential, proxyCredential)
            return
        }
        guard let authentication else {
            completionHandler(.performDefaultHandling, nil)
            return
        }
        let credential = URLCredential(user: authentication.user, password: authentication.password, persistence: .none)
        narrator?.info("Server asks for \(method == NSURLAuthenticationMethodHTTPDigest ? "Digest" : "Basic") authentication, realm '\(challenge.protectionSpace.realm ?? "")'")
        guard challenge.previousFailureCount == 0, authentication.answers(challenge.protectionSpace) else {
            if challenge.previousFailureCount == 0 { narrator?.info("Not sending the -u credential to another host") }
            completionHandler(.useCredential, nil)
            return
        }
        switch authentication.mode {
        case .basic:
            // The credential already went with the request.
            completionHandler(.useCredential, nil)
        case .digest:
            if method == NSURLAuthenticationMethodHTTPDigest {
                completionHandler(.useCredential, credential)
            } else {
                completionHandler(.rejectProtectionSpace, nil)
            }
        case .any:
            completionHandler(.useCredential, credential)
        }
    }

    /// Runs the task and waits for it to finish.
    func run(_ task: URLSessionTask) async -> Outcome {
        await withCheckedContinuation { continuation in
            state.withLock { $0.continuation = continuation }
            task.resume()
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        // The version the request went with: HTTP/2, or HTTP/1.1 whatever the server answered.
        // A redirect past --max-redirs arrives here as the answer: it is not written.
        if state.withLock({ $0.outcome.tooManyRedirects }) {
            completionHandler(.cancel)
            return
        }
        if let http = response as? HTTPURLResponse {
            dumpHead(of: http)
            state.withLock { state in
                state.outcome.response = http
                state.outcome.effectiveURL = http.url
            }
            if behaviour.failsWithoutBody && http.statusCode >= 400 {
                // As curl's -f: nothing of an error's body is written.
                state.withLock { $0.outcome.failedStatus = http.statusCode }
                completionHandler(.cancel)
                return
            }
        }
        if let failure = sink.prepare(for: response) {
            state.withLock { $0.outcome.outputFailure = failure }
            completionHandler(.cancel)
            return
        }
        if let http = response as? HTTPURLResponse {
            state.withLock { $0.outcome.status = http.statusCode }
            let head = Self.describe(http)
            narrator?.receivedHead(head)
            if include, let failure = sink.write(Data((head.joined(separator: "\r\n") + "\r\n\r\n").utf8)) {
                state.withLock { $0.outcome.outputFailure = failure }
                completionHandler(.cancel)
                return
            }
        }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        narrator?.receivedData(data)
        let total = state.withLock { state -> Int64 in
            state.outcome.bytesDownloaded += Int64(data.count)
            return state.outcome.bytesDownloaded
        }
        behaviour.progress?.downloading(received: total, expected: dataTask.response?.expectedContentLength ?? -1)
        // As curl: a body that cannot be written stops the transfer (exit code 23), rather than
        // reading on into nowhere.
        if let failure = sink.write(data) {
            state.withLock { state in
                if state.outcome.outputFailure == nil { state.outcome.outputFailure = failure }
            }
            dataTask.cancel()
        }
    }

    /// -D: each response head as it came, redirects' too.
    private func dumpHead(of response: HTTPURLResponse) {
        guard let dump = behaviour.headerDump else { return }
        _ = dump.write(Data((Self.describe(response).joined(separator: "\r\n") + "\r\n\r\n").utf8))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
        state.withLock { $0.outcome.metrics = metrics }
    }

    /// -v and the traces: the connection's steps and the request as they happen, in curl's manner.
    func urlSession(_ session: URLSession, task: URLSessionTask, courierConnectionProgress progress: CourierConnectionProgress) {
        guard let narrator else { return }
        switch progress {
        case .trying(let address, let port):
            narrator.info("  Trying \(address.contains(":") ? "[\(address)]" : address):\(port)...")
        case .attemptFailed(let address, let port, let reason):
            narrator.info("connect to \(address) port \(port) failed: \(reason)")
        case .connected(let address, let port, _, _):
            narrator.info("Connected to \(task.currentRequest?.url?.host() ?? address) (\(address)) port \(port)")
        case .tunnelOpened(let host, let port):
            narrator.info("Tunnel through the proxy \(host):\(port) is open")
        case .secured(let version, let cipher, let alpn):
            narrator.info("TLS connection using \(version.map(Self.name) ?? "TLS") / \(cipher ?? "?")")
            narrator.info(alpn.map { "ALPN: server accepted \($0)" } ?? "ALPN: server did not agree on a protocol")
        case .requestSent(let reused, let protocolName):
            if reused { narrator.info("Re-using the existing connection to \(task.currentRequest?.url?.host() ?? "the host")") }
            if let request = task.requestAsSent {
                narrator.sentHead(Self.describe(request, version: protocolName == "h2" ? "HTTP/2" : "HTTP/1.1"))
                if let body = request.httpBody { narrator.sentBody(body) }
            }
        }
    }

    static func name(_ version: tls_protocol_version_t) -> String {
        switch version {
        case .TLSv10: return "TLS 1.0"
        case .TLSv11: return "TLS 1.1"
        case .TLSv12: return "TLS 1.2"
        case .TLSv13: return "TLS 1.3"
        case .DTLSv10, .DTLSv12: return "DTLS"
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        behaviour.progress?.uploading(sent: totalBytesSent, expected: totalBytesExpectedToSend)
    }

    // A download task (-o, -O): its file becomes the output once the body is whole, or when it
    // failed after part of it, what it kept (curl keeps the bytes a failed transfer wrote).

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        guard noteResponse(of: downloadTask) else {
            downloadTask.cancel()
            return
        }
        state.withLock { $0.outcome.bytesDownloaded = totalBytesWritten }
        behaviour.progress?.downloading(received: totalBytesWritten, expected: totalBytesExpectedToWrite)
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        // A body -f refuses is not kept: the file goes with the task.
        guard noteResponse(of: downloadTask) else { return }
        place(location, for: downloadTask.response)
    }

    /// The response of a download task, heard of with its first bytes (or its end): -D, -v,
    /// the status. False when the transfer is not to keep the body: -f and a status of 400 or
    /// more, or a redirect past --max-redirs.
    private func noteResponse(of task: URLSessionTask) -> Bool {
        guard let http = task.response as? HTTPURLResponse else { return true }
        let (first, keeps) = state.withLock { state -> (Bool, Bool) in
            guard !state.outcome.tooManyRedirects else { return (false, false) }
            let first = state.outcome.response == nil
            state.outcome.response = http
            state.outcome.effectiveURL = http.url
            if behaviour.failsWithoutBody && http.statusCode >= 400 {
                state.outcome.failedStatus = http.statusCode
                return (first, false)
            }
            state.outcome.status = http.statusCode
            return (first, true)
        }
        if first {
            dumpHead(of: http)
            narrator?.receivedHead(Self.describe(http))
        }
        return keeps
    }

    /// Moves a downloaded file to the output, counting its bytes.
    private func place(_ file: URL, for response: URLResponse?) {
        let size = (try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? NSNumber)?.int64Value
        let failure = sink.adopt(file, for: response)
        state.withLock { state in
            if let size { state.outcome.bytesDownloaded = size }
            if state.outcome.outputFailure == nil { state.outcome.outputFailure = failure }
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        if task is URLSessionDownloadTask {
            let keeps = noteResponse(of: task) && state.withLock { $0.outcome.outputFailure == nil }
            let urlError = error as? URLError
            if let partial = urlError?.courierPartialDownloadFile {
                if keeps { place(partial, for: task.response) } else { unlink(partial.path) }
            }
            if let urlError, urlError.code == .cannotWriteToFile || urlError.code == .cannotCreateFile {
                // The download's own file (in TMPDIR) could not be written: said as curl says
                // a write error, of the file the user named.
                let failure = (message: "write error on \(sink.describedDestination): \(OutputSink.reason(urlError))", code: Int32(23))
                state.withLock { state in
                    if state.outcome.outputFailure == nil { state.outcome.outputFailure = failure }
                }
            }
        }
        behaviour.progress?.finish()
        let continuation = state.withLock { state -> CheckedContinuation<Outcome, Never>? in
            state.outcome.error = error
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume(returning: state.withLock { $0.outcome })
    }

    /// The request line and fields of a request, Host first, as lines.
    static func describe(_ request: URLRequest, version: String) -> [String] {
        let url = request.url
        var target = url?.path(percentEncoded: true) ?? "/"
        if target.isEmpty { target = "/" }
        if let query = url?.query(percentEncoded: true) { target += "?" + query }
        var lines = ["\(request.httpMethod ?? "GET") \(target) \(version)"]
        let fields = (request.allHTTPHeaderFields ?? [:]).sorted { $0.key == "Host" || ($1.key != "Host" && $0.key < $1.key) }
        for (name, value) in fields { lines.append("\(name): \(value)") }
        return lines
    }

    /// The status line and fields of a response, as lines.
    static func describe(_ response: HTTPURLResponse) -> [String] {
        // HTTP/2 has no reason phrase; the status line shows the code alone, as curl does.
        var lines = [response.httpVersion == "HTTP/2"
            ? "HTTP/2 \(response.statusCode)"
            : "\(response.httpVersion) \(response.statusCode) \(HTTPURLResponse.localizedString(forStatusCode: response.statusCode))"]
        // As sent: in order, repeated fields apart.
        for (name, value) in response.courierOrderedHeaderFields {
            lines.append("\(name): \(value)")
        }
        return lines
    }
}

/// How the CLI decides server trust.
enum TrustPolicy: @unchecked Sendable {
    /// The system's trust store (default handling).
    case system
    /// Only these CA certificates (--cacert).
    case anchors([SecCertificate])
    /// Anything (-k).
    case acceptAny

    /// How to answer a session-level challenge under this policy (default handling for anything
    /// but server trust), and why the server is not trusted when it is not.
    func answer(_ challenge: URLAuthenticationChallenge) -> (URLSession.AuthChallengeDisposition, URLCredential?, failure: String?) {
        guard challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodServerTrust,
              let serverTrust = challenge.protectionSpace.serverTrust else {
            return (.performDefaultHandling, nil, nil)
        }
        switch self {
        case .system:
            return (.performDefaultHandling, nil, nil)
        case .acceptAny:
            return (.useCredential, URLCredential(trust: serverTrust), nil)
        case .anchors(let anchors):
            _ = SecTrustSetAnchorCertificates(serverTrust, anchors as CFArray)
            var error: CFError?
            if SecTrustEvaluateWithError(serverTrust, &error) {
                return (.useCredential, URLCredential(trust: serverTrust), nil)
            }
            return (.cancelAuthenticationChallenge, nil, error?.localizedDescription ?? "not trusted")
        }
    }

    /// The certificates of a PEM file.
    static func loadPEM(_ path: String) throws -> [SecCertificate] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw CLIError(message: "cannot read \(path)")
        }
        var certificates: [SecCertificate] = []
        for block in text.components(separatedBy: "-----BEGIN CERTIFICATE-----").dropFirst() {
            let body = block.components(separatedBy: "-----END CERTIFICATE-----")[0]
                .components(separatedBy: .whitespacesAndNewlines).joined()
            if let der = Data(base64Encoded: body), let certificate = SecCertificateCreateWithData(nil, der as CFData) {
                certificates.append(certificate)
            }
        }
        guard !certificates.isEmpty else { throw CLIError(message: "no certificate found in \(path)") }
        return certificates
    }
}

struct CLIError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
