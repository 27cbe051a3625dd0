// The client half of the Autobahn WebSocket conformance suite, written on Courier's public
// `URLSessionWebSocketTask` as a user would write it. It plays the part every Autobahn testee
// client plays against `wstest -m fuzzingserver`: it asks the server how many cases there are
// (/getCaseCount), then for each case opens /runCase and sends back every message that arrives,
// as it arrived (text as text, binary as binary), until the server ends the connection; at the
// end /updateReports makes the server write its reports. The verdicts are the server's, in
// those reports: scripts/autobahn.sh starts the server, runs this client and reads them.
//
//   courier-autobahn ws://127.0.0.1:PORT [--cases N-M] [--timeout SECONDS]
//
// --cases runs only the cases numbered N to M (1-based, in the server's order; "N" alone is
// one case); --timeout gives up on a case after that many seconds (120 by default): its task is
// cancelled and the next case starts. The server ends a case that goes wrong by its own limits
// (100 s for a message in group 9, up to 480 s for the slowest compression cases, which take
// under 30 s here), so the client's limit is there for a hang only. One line is printed per
// case. The exit status is 0 when every case ran and the server wrote its reports, even if
// some cases failed (the server judges), 1 when it gave no case count or did not close
// /updateReports, 2 for a bad command line.
import Courier
import CourierSync
import Foundation

/// The command line.
struct Options: Sendable {
    /// The server's WebSocket URL, without a trailing slash: ws://127.0.0.1:PORT.
    var server: String
    /// The first and last case to run, 1-based; nil `last`: up to the server's count.
    var first = 1
    var last: Int?
    /// How long one case (or one of the bookkeeping connections) may take before it is cancelled.
    var timeout: Duration = .seconds(120)

    static let usage = "usage: courier-autobahn ws://127.0.0.1:PORT [--cases N-M] [--timeout SECONDS]\n"

    /// The options in `arguments` (the program's name first); nil when they do not parse.
    init?(_ arguments: [String]) {
        var address: String?
        var iterator = arguments.dropFirst().makeIterator()
        while let argument = iterator.next() {
            switch argument {
            case "--cases":
                guard let range = iterator.next() else { return nil }
                let bounds = range.split(separator: "-", omittingEmptySubsequences: false).map { Int($0) }
                switch bounds.count {
                case 1:
                    guard let only = bounds[0], only >= 1 else { return nil }
                    first = only
                    last = only
                case 2:
                    guard let low = bounds[0], let high = bounds[1], low >= 1, high >= low else { return nil }
                    first = low
                    last = high
                default:
                    return nil
                }
            case "--timeout":
                guard let text = iterator.next(), let seconds = Double(text), seconds > 0 else { return nil }
                timeout = .seconds(seconds)
            default:
                guard address == nil, argument.hasPrefix("ws://") || argument.hasPrefix("wss://") else { return nil }
                address = argument
            }
        }
        guard var address else { return nil }
        while address.hasSuffix("/") { address.removeLast() }
        server = address
    }
}

/// How one connection to the fuzzing server went, seen from this end.
struct Outcome: Sendable {
    /// The messages received, in order (kept only where asked for).
    var messages: [URLSessionWebSocketTask.Message] = []
    /// How many messages were kept, or for a case sent back.
    var count = 0
    /// The close code the connection ended with: the server's, or the one this end sent when
    /// it failed the connection; 1006 for a connection that broke, 0 for a code that Apple's
    /// `CloseCode` has no case for (Autobahn's 7.7 cases send 3000 and 4999).
    var closeCode = 0
    /// The server's close frame arrived (the bookkeeping endpoints close without a code: 1005).
    var serverClosed = false
    /// The watchdog cancelled the task.
    var timedOut = false
    /// Why the receive that ended the connection failed, unless the end was the server's close.
    var failure: String?
    /// From `resume()` to the end.
    var elapsed: Duration = .zero
}

/// Notes the server's close frame on one task. The driver tells the delegate before it fails
/// the waiting receive (both go through the session's serial delegate queue), so when that
/// receive throws, `serverClosed` already says whether the end was the server's close.
final class CloseWatcher: NSObject, URLSessionWebSocketDelegate, @unchecked Sendable {
    /// Set when the close frame arrived.
    private let closed = Mutex(false)

    var serverClosed: Bool { closed.withLock { $0 } }

    func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask, didCloseWith closeCode: URLSessionWebSocketTask.CloseCode, reason: Data?) {
        closed.withLock { $0 = true }
    }
}

/// The Autobahn client protocol: case count, cases, reports.
enum AutobahnClient {
    /// The agent name the reports are filed under (scripts/autobahn.sh reads it back).
    static let agent = "Courier"

    /// The largest message a case may send. The biggest Autobahn sends are 16 MiB (cases 9.1.6
    /// and 9.2.6, and their fragmented and compressed variants); four times that leaves room
    /// without taking away the limit.
    static let maximumMessageBytes = 64 << 20

    /// Runs the cases the options ask for; the exit status.
    static func run(_ options: Options) async -> Int32 {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }

        guard let countURL = url(options, "/getCaseCount") else {
            fail("courier-autobahn: \(options.server) does not make a URL")
            return 2
        }
        let counted = await connect(countURL, session: session, timeout: options.timeout, keep: true)
        guard let first = counted.messages.first, let total = Int(text(of: first).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            fail("courier-autobahn: no case count from \(countURL.absoluteString): \(counted.failure ?? "closed with \(counted.closeCode)")")
            return 1
        }
        let last = min(options.last ?? total, total)
        print("\(total) cases on the server; running \(options.first) to \(last)")
        fflush(nil)

        var timedOut: [String] = []
        if options.first <= last {
            for index in options.first...last {
                let name = await caseName(index, options: options, session: session)
                guard let caseURL = url(options, "/runCase?case=\(index)&agent=\(agent)") else { continue }
                let outcome = await connect(caseURL, session: session, timeout: options.timeout, keep: false)
                if outcome.timedOut { timedOut.append(name) }
                report(index: index, of: total, name: name, outcome)
            }
        }

        guard let reportsURL = url(options, "/updateReports?agent=\(agent)") else { return 2 }
        let updated = await connect(reportsURL, session: session, timeout: options.timeout, keep: false)
        if !timedOut.isEmpty { print("timed out: \(timedOut.joined(separator: " "))") }
        // The server writes the reports, then closes.
        let reported = updated.serverClosed && !updated.timedOut
        if reported {
            print("reports: updated")
        } else {
            print("reports: /updateReports ended without the server's close (\(updated.timedOut ? "timed out" : updated.failure ?? "close \(updated.closeCode)"))")
        }
        fflush(nil)
        return reported ? 0 : 1
    }

    /// The case's id ("1.1.1") from /getCaseInfo; "#index" when the server does not say.
    static func caseName(_ index: Int, options: Options, session: URLSession) async -> String {
        guard let infoURL = url(options, "/getCaseInfo?case=\(index)") else { return "#\(index)" }
        let info = await connect(infoURL, session: session, timeout: options.timeout, keep: true)
        guard let first = info.messages.first,
              let object = try? JSONSerialization.jsonObject(with: Data(text(of: first).utf8)) as? [String: Any],
              let id = object["id"] as? String
        else { return "#\(index)" }
        return id
    }

    /// Opens `url` and, until the connection ends, sends each message that arrives straight
    /// back (when `keep` is false: a case) or keeps it (when `keep` is true: the bookkeeping
    /// endpoints, which send one message and close). After `timeout` the task is cancelled.
    /// Only a failed receive ends the loop: the task has completed by then.
    static func connect(_ url: URL, session: URLSession, timeout: Duration, keep: Bool) async -> Outcome {
        let start = ContinuousClock.now
        let task = session.webSocketTask(with: url)
        let watcher = CloseWatcher()
        task.delegate = watcher
        task.maximumMessageSize = maximumMessageBytes
        task.resume()
        // Cancelling the task makes the pending receive throw, which ends the loop below.
        let watchdog = Task { () -> Bool in
            do { try await Task.sleep(for: timeout) } catch { return false }
            task.cancel()
            return true
        }
        var outcome = Outcome()
        while true {
            let message: URLSessionWebSocketTask.Message
            do {
                message = try await task.receive()
            } catch {
                outcome.failure = error.localizedDescription
                break
            }
            if keep {
                outcome.messages.append(message)
                outcome.count += 1
                continue
            }
            do {
                try await task.send(message)
                outcome.count += 1
            } catch {
                // The connection ended under the send: the next receive throws with the reason.
                continue
            }
        }
        watchdog.cancel()
        outcome.timedOut = await watchdog.value
        outcome.closeCode = task.closeCode.rawValue
        // After the server's close the receive fails only because the connection is over.
        outcome.serverClosed = watcher.serverClosed
        if outcome.serverClosed, !outcome.timedOut { outcome.failure = nil }
        outcome.elapsed = ContinuousClock.now - start
        return outcome
    }

    /// One line for a case: its number, id, messages echoed, close code, time, and why it
    /// ended when that was not a closing handshake.
    static func report(index: Int, of total: Int, name: String, _ outcome: Outcome) {
        let width = String(total).count
        let number = String(repeating: " ", count: max(width - String(index).count, 0)) + String(index)
        let padded = name.count < 10 ? name + String(repeating: " ", count: 10 - name.count) : name
        var line = "[\(number)/\(total)] \(padded) echoed \(outcome.count), close \(outcome.closeCode), \(String(format: "%.2f", seconds(outcome.elapsed))) s"
        if outcome.timedOut { line += ", TIMED OUT" }
        if let failure = outcome.failure { line += " (\(failure))" }
        print(line)
        fflush(nil)
    }

    /// `path` (with its query) on the server.
    static func url(_ options: Options, _ path: String) -> URL? {
        URL(string: options.server + path)
    }

    /// A message's text (binary as UTF-8, for the bookkeeping endpoints' answers).
    static func text(of message: URLSessionWebSocketTask.Message) -> String {
        switch message {
        case .string(let text): text
        case .data(let data): String(decoding: data, as: UTF8.self)
        }
    }

    /// `duration` in seconds.
    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// Writes `message` to standard error.
    static func fail(_ message: String) {
        FileHandle.standardError.write(Data((message + "\n").utf8))
    }
}

guard let options = Options(CommandLine.arguments) else {
    FileHandle.standardError.write(Data(Options.usage.utf8))
    exit(2)
}
exit(await AutobahnClient.run(options))
