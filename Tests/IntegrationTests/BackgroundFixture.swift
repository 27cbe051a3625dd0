import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// One test's background identifier (unique: `bg-test-<UUID>`) with the sessions and probes the
/// test made for it. ``close()`` ends the probes, invalidates and cancels the sessions, lets
/// the daemon go, and deletes the identifier's state directory.
final class BackgroundFixture {
    let identifier: String
    /// The identifier's state directory, for the environment its daemon runs in.
    let directory: URL
    private var sessions: [(session: URLSession, recorder: BackgroundRecorder)] = []
    private var probes: [BackgroundProbe] = []

    init(identifier: String = "bg-test-\(UUID().uuidString)", environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.identifier = identifier
        self.directory = BackgroundState.directory(identifier, environment: environment)
    }

    /// A background session with the identifier and `recorder` as its delegate.
    /// A new session's download of `url`, resumed, once its first bytes were written.
    func startDownload(of url: URL, _ recorder: BackgroundRecorder, sourceLocation: SourceLocation = #_sourceLocation) async throws -> (URLSession, URLSessionDownloadTask) {
        let session = makeSession(recorder)
        let task = session.downloadTask(with: url)
        task.resume()
        try #require(await recorder.waitForWrite(of: task.taskIdentifier), "the first bytes came: \(recorder.names())", sourceLocation: sourceLocation)
        return (session, task)
    }

    func makeSession(_ recorder: BackgroundRecorder, configure: (URLSessionConfiguration) -> Void = { _ in }) -> URLSession {
        let configuration = URLSessionConfiguration.background(withIdentifier: identifier)
        configure(configuration)
        let session = URLSession(configuration: configuration, delegate: recorder, delegateQueue: nil)
        sessions.append((session, recorder))
        return session
    }

    /// Starts `courier-background-probe` for the identifier: a download of `url` with
    /// `description`, in another process.
    func startProbe(
        _ url: URL, description: String, ending: BackgroundProbe.Ending, environment: [String: String]? = nil, currentDirectory: URL? = nil
    ) throws -> BackgroundProbe {
        let probe = try BackgroundProbe(
            identifier: identifier, url: url, description: description, ending: ending, environment: environment, currentDirectory: currentDirectory
        )
        probes.append(probe)
        return probe
    }

    func close() {
        for probe in probes { probe.stop() }
        for (session, _) in sessions { session.invalidateAndCancel() }
        for (_, recorder) in sessions { _ = waitBlocking(seconds: 30) { recorder.isInvalidated } }
        BackgroundState.stopDaemon(in: directory)
        try? FileManager.default.removeItem(at: directory)
    }
}
