import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// Courier's `CourierConnectionProgress`: a task delegate that conforms hears the steps of its
/// connection as they happen, on the delegate queue.
struct ConnectionProgressTests {
    final class Recorder: NSObject, CourierConnectionProgressDelegate, @unchecked Sendable {
        let events = Mutex<[String]>([])

        func urlSession(_ session: URLSession, task: URLSessionTask, courierConnectionProgress progress: CourierConnectionProgress) {
            let text: String
            switch progress {
            case .trying(let address, let port): text = "trying \(address):\(port)"
            case .attemptFailed(let address, let port, let reason): text = "failed \(address):\(port) \(reason)"
            case .connected(let address, let port, let local, let localPort):
                text = "connected \(address):\(port) from \(local ?? "?"):\(localPort.map(String.init) ?? "?")"
            case .tunnelOpened(let host, let port): text = "tunnel \(host):\(port)"
            case .secured(let version, let cipher, let alpn): text = "secured \(version == .TLSv13) \(cipher?.isEmpty == false) \(alpn ?? "-")"
            case .requestSent(let reused, let name): text = "sent \(reused) \(name)"
            }
            events.withLock { $0.append("\(task.taskIdentifier) \(text)") }
        }
    }

    /// Waits until the progress already queued for the delegate has been delivered. An async
    /// load returns without waiting for its delegate queue: under load the "failed" step of a
    /// refused connect was still queued when `data(from:)` threw.
    static func drain(_ queue: OperationQueue) async {
        await withCheckedContinuation { continuation in queue.addOperation { continuation.resume() } }
    }

    @Test func newThenReusedTLSConnection() async throws {
        let nginx = try NginxServer.shared()
        let port = try #require(nginx.tlsPorts["good"])
        let recorder = Recorder()
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        _ = try await session.data(for: URLRequest(url: nginx.tlsURL("good", "/files/hello.txt")))
        await Self.drain(session.delegateQueue)
        let events = recorder.events.withLock { $0 }
        // The async call's task: its own identifier, whatever it is.
        // In two steps: as one expression inside #require it took the type checker 3.6 s.
        let firstWord: String? = events.first?.split(separator: " ").first.map(String.init)
        let id = try #require(firstWord)
        let mine = events.filter { $0.hasPrefix("\(id) ") }.map { String($0.dropFirst(id.count + 1)) }
        #expect(mine.count == 4, "\(events)")
        #expect(mine.first == "trying 127.0.0.1:\(port)")
        #expect(mine.dropFirst().first?.hasPrefix("connected 127.0.0.1:\(port) from 127.0.0.1:") == true)
        #expect(Array(mine.dropFirst(2)) == ["secured true true h2", "sent false h2"])

        _ = try await session.data(for: URLRequest(url: nginx.tlsURL("good", "/files/100.bin")))
        await Self.drain(session.delegateQueue)
        let second = recorder.events.withLock { $0 }.dropFirst(events.count).map { $0.split(separator: " ").dropFirst().joined(separator: " ") }
        #expect(second == ["sent true h2"])
    }

    @Test func refusedAttempt() async throws {
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        let port = closed.port
        let recorder = Recorder()
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        await #expect(throws: URLError.self) { _ = try await session.data(from: URL(string: "http://127.0.0.1:\(port)/")!) }
        await Self.drain(session.delegateQueue)
        let events = recorder.events.withLock { $0 }.map { $0.split(separator: " ").dropFirst().joined(separator: " ") }
        #expect(events == ["trying 127.0.0.1:\(port)", "failed 127.0.0.1:\(port) \(String(cString: strerror(ECONNREFUSED)))"])
    }
}
