// courier-download-probe URL
//
// Used only by the tests (the full-disk download test), to run a download task in a process
// whose temporary directory is a full file system: it downloads URL with
// `URLSession.download(from:)` into the temporary directory and prints `ok <bytes>`, or
// `error <URLError code> <message>`. Exits 0 either way, 64 on a usage error.

import Courier
import Foundation

guard CommandLine.arguments.count == 2, let url = URL(string: CommandLine.arguments[1]) else {
    FileHandle.standardError.write(Data("usage: courier-download-probe URL\n".utf8))
    exit(64)
}
let done = DispatchSemaphore(value: 0)
Task.detached {
    let session = URLSession(configuration: .ephemeral)
    do {
        let (file, _) = try await session.download(from: url)
        let size = (try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int) ?? -1
        try? FileManager.default.removeItem(at: file)
        print("ok \(size)")
    } catch let error as URLError {
        print("error \(error.code.rawValue) \(error.localizedDescription)")
    } catch {
        print("error 0 \(error)")
    }
    session.finishTasksAndInvalidate()
    done.signal()
}
done.wait()
exit(0)
