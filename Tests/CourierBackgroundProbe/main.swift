// courier-background-probe IDENTIFIER URL [--description TEXT] [--exit|--kill|--hold|--kill-in-finish]
//
// Used only by the tests (BackgroundSessionTests), to hold a background session in a process
// other than the test's. It makes `URLSessionConfiguration.background(withIdentifier:)`'s
// session with a delegate, a download task for URL with TEXT as its taskDescription, resumes
// it, and waits (up to 60 s) for the first didWriteData, inside which it prints
// `started <taskIdentifier>` on stdout (unbuffered: FileHandle writes straight to the
// descriptor). Then:
//
// - `--exit` (the default): exit(0), the transfer still running in the daemon.
// - `--kill`: SIGKILL to itself, inside that first didWriteData: the callback never returns.
// - `--hold`: keeps the session connected until stdin reaches end of file, then exit(0).
// - `--kill-in-finish`: goes on to didFinishDownloadingTo, prints `finishing` there and sends
//   itself SIGKILL before the callback returns, so the event is never acknowledged.
//
// Exits 1 (with a line on stderr) when the task ends before its first bytes or nothing comes
// within the time allowed, 64 on a usage error.

import Courier
import CourierSync
import Foundation

#if canImport(Glibc)
import Glibc
#endif

enum Ending: String {
    case exit = "--exit"
    case kill = "--kill"
    case hold = "--hold"
    case killInFinish = "--kill-in-finish"
}

func fail(_ message: String, status: Int32 = 1) -> Never {
    FileHandle.standardError.write(Data("courier-background-probe: \(message)\n".utf8))
    exit(status)
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data("\(line)\n".utf8))
}

final class ProbeDelegate: NSObject, URLSessionDownloadDelegate, @unchecked Sendable {
    let ending: Ending
    /// Signalled once `started` was printed.
    let started = DispatchSemaphore(value: 0)
    private let reported = Mutex(false)

    init(ending: Ending) {
        self.ending = ending
    }

    /// Prints `started N` the first time; true then.
    private func reportStart(_ task: URLSessionTask) -> Bool {
        let first = reported.withLock { reported in
            defer { reported = true }
            return !reported
        }
        if first { say("started \(task.taskIdentifier)") }
        return first
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        guard reportStart(downloadTask) else { return }
        if ending == .kill { kill(getpid(), SIGKILL) }
        started.signal()
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        // A transfer too quick for any progress still says which task it was.
        if reportStart(downloadTask) { started.signal() }
        if ending == .killInFinish {
            say("finishing")
            kill(getpid(), SIGKILL)
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        if !reported.withLock({ $0 }) { fail("the task ended before its first bytes: \(String(describing: error))") }
    }
}

var arguments = Array(CommandLine.arguments.dropFirst())
let usage = "usage: courier-background-probe IDENTIFIER URL [--description TEXT] [--exit|--kill|--hold|--kill-in-finish]"
guard arguments.count >= 2, let url = URL(string: arguments[1]) else { fail(usage, status: 64) }
let identifier = arguments[0]
arguments.removeFirst(2)
var taskText: String?
var ending = Ending.exit
while let argument = arguments.first {
    arguments.removeFirst()
    if argument == "--description", let text = arguments.first {
        taskText = text
        arguments.removeFirst()
    } else if let chosen = Ending(rawValue: argument) {
        ending = chosen
    } else {
        fail(usage, status: 64)
    }
}

let delegate = ProbeDelegate(ending: ending)
let session = URLSession(configuration: .background(withIdentifier: identifier), delegate: delegate, delegateQueue: nil)
let task = session.downloadTask(with: url)
task.taskDescription = taskText
task.resume()
guard delegate.started.wait(timeout: .now() + 60) == .success else { fail("no didWriteData within 60 s") }

switch ending {
case .exit, .kill:
    exit(0)
case .hold:
    _ = FileHandle.standardInput.readDataToEndOfFile()
    exit(0)
case .killInFinish:
    // didFinishDownloadingTo kills the process; this is only reached when it never comes.
    sleep(120)
    fail("no didFinishDownloadingTo within 120 s")
}
