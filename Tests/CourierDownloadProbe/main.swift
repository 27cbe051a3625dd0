// courier-download-probe [--keep-partial] [--off-loop] URL
//
// Used only by the tests (the full-disk download tests), to run a download task in a process
// whose temporary directory is a full file system: it downloads URL with
// `URLSession.download(from:)` into the temporary directory and prints `ok <bytes>`, or
// `error <URLError code> <message>`. `--keep-partial` sets `courierKeepsPartialDownloads` and
// prints `partial <bytes>` on a second line when the error names a partial file, which is left
// in place; `--off-loop` writes every chunk on the download's writer, never on the event loop.
// Exits 0 either way, 64 on a usage error.

@testable import Courier
import Foundation

var arguments = Array(CommandLine.arguments.dropFirst())
let keepsPartial = arguments.first == "--keep-partial"
if keepsPartial { arguments.removeFirst() }
let offLoop = arguments.first == "--off-loop"
if offLoop { arguments.removeFirst() }
guard arguments.count == 1, let url = URL(string: arguments[0]) else {
    FileHandle.standardError.write(Data("usage: courier-download-probe [--keep-partial] [--off-loop] URL\n".utf8))
    exit(64)
}
let done = DispatchSemaphore(value: 0)
Task.detached {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.courierKeepsPartialDownloads = keepsPartial
    let session = URLSession(configuration: configuration)
    if offLoop { session.slowDiskWriteThreshold.withLock { $0 = .zero } }
    do {
        let (file, _) = try await session.download(from: url)
        let size = (try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int) ?? -1
        try? FileManager.default.removeItem(at: file)
        print("ok \(size)")
    } catch let error as URLError {
        print("error \(error.code.rawValue) \(error.localizedDescription)")
        if let partial = error.courierPartialDownloadFile {
            let size = (try? FileManager.default.attributesOfItem(atPath: partial.path)[.size] as? Int) ?? -1
            print("partial \(size)")
        }
    } catch {
        print("error 0 \(error)")
    }
    session.finishTasksAndInvalidate()
    done.signal()
}
done.wait()
exit(0)
