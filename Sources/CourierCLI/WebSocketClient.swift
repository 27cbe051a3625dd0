import Courier
import CourierSync
import Foundation

/// `courier --ws URL`, in the manner of websocat: each line of standard input goes out as a
/// text message, each message that arrives is written to standard output (text with a newline,
/// binary as it is). At the end of input courier waits until nothing has arrived for a quarter
/// of a second (so the answers to the last lines are not cut off by the close), closes with
/// 1000 and waits for the server's close; when the server closes first, courier stops.
enum WebSocketClient {
    /// Runs the session; the exit status: 0 after a closing handshake, 1 when the connection
    /// could not open or broke.
    static func run(_ request: URLRequest, trust: TrustPolicy, verbose: Bool) async -> Int32 {
        let delegate = Delegate(trust: trust, verbose: verbose)
        let session = URLSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        defer { session.invalidateAndCancel() }
        let task = session.webSocketTask(with: request)
        task.resume()
        let lines = AsyncStream<String> { continuation in
            // Standard input blocks: it is read on a thread of its own.
            let reader = Thread {
                while let line = readLine(strippingNewline: true) { continuation.yield(line) }
                continuation.finish()
            }
            reader.start()
        }
        enum Ended { case input, connection(any Error) }
        let received = Counter()
        let ended = await withTaskGroup(of: Ended.self) { group -> Ended in
            group.addTask {
                while true {
                    do {
                        switch try await task.receive() {
                        case .string(let text): FileHandle.standardOutput.write(Data((text + "\n").utf8))
                        case .data(let data): FileHandle.standardOutput.write(data)
                        }
                        received.value.add(1, ordering: .relaxed)
                    } catch {
                        return .connection(error)
                    }
                }
            }
            group.addTask {
                for await line in lines {
                    do { try await task.send(.string(line)) } catch { break }
                }
                var seen = -1
                while seen != received.value.load(ordering: .relaxed) {
                    seen = received.value.load(ordering: .relaxed)
                    try? await Task.sleep(for: .milliseconds(250))
                }
                return .input
            }
            let first = await group.next() ?? .input
            if case .input = first {
                // The end of input: close, then wait for the server's close.
                task.cancel(with: .normalClosure, reason: nil)
                let last = await group.next() ?? first
                group.cancelAll()
                return last
            }
            group.cancelAll()
            return first
        }
        if let failure = delegate.trustFailure {
            FileHandle.standardError.write(Data("courier: the server is not trusted: \(failure)\n".utf8))
            return 1
        }
        switch task.closeCode {
        case .normalClosure, .goingAway:
            if verbose { FileHandle.standardError.write(Data("* Closed with \(task.closeCode.rawValue)\n".utf8)) }
            return 0
        default:
            if case .connection(let error) = ended {
                FileHandle.standardError.write(Data("courier: \(error.localizedDescription)\n".utf8))
            }
            return 1
        }
    }

    /// Messages received so far, shared by the receiving and the sending loop.
    final class Counter: Sendable {
        let value = Atomic<Int>(0)
    }

    /// Answers server trust as the rest of courier does and, with -v, tells what happens.
    final class Delegate: NSObject, URLSessionWebSocketDelegate, @unchecked Sendable {
        let trust: TrustPolicy
        let verbose: Bool
        private let failure = Mutex<String?>(nil)
        var trustFailure: String? { failure.withLock { $0 } }

        init(trust: TrustPolicy, verbose: Bool) {
            self.trust = trust
            self.verbose = verbose
        }

        func urlSession(_ session: URLSession, didReceive challenge: URLAuthenticationChallenge, completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
            let (disposition, credential, failure) = trust.answer(challenge)
            if let failure { self.failure.withLock { $0 = failure } }
            completionHandler(disposition, credential)
        }

        func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask, didOpenWithProtocol protocol: String?) {
            guard verbose else { return }
            FileHandle.standardError.write(Data("* WebSocket open\(`protocol`.map { ", subprotocol \($0)" } ?? "")\n".utf8))
        }
    }
}
