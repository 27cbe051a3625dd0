import Courier
import CourierSync
import Foundation
import Glibc
import Testing
import _CourierTestSupport

// Issue 21: `data:` and `file:` URLs, loaded by the session itself (TaskDriver+LocalResource).
// The response of such a load is a plain `URLResponse`, which `load(_:via:)` in
// DeliveryModes.swift casts away (its `Loaded.response` is an `HTTPURLResponse?`), so the four
// delivery modes are run here by `loadLocal(_:via:)`, which keeps the `URLResponse`.
//
// `URLSession.bytes(for:)` does not exist in Courier yet: no test of it here.

/// The body of the large file tests: deterministic, so a hash names it exactly.
private let fiveMiB = deterministicBytes(count: 5 * 1024 * 1024, seed: 21)
/// Larger than the delegate sink's backlog high mark (1 MiB), so reading must pause before the
/// end of the file while a delegate holds the first delivery.
private let tenMiB = deterministicBytes(count: 10 * 1024 * 1024, seed: 2121)
/// `LocalLoad.chunkBytes`: at most one read is under way when reading is paused.
private let localChunkBytes = 64 * 1024

/// What one load of a `data:` or `file:` URL produced, the response kept as it came.
struct LocalLoaded: @unchecked Sendable {
    var body: Data?
    var response: URLResponse?
    var error: (any Error)?
    /// What reached `didReceive data` (delegate mode only), whatever the outcome.
    var delegateBytes = Data()
}

/// Fires once; awaited with a deadline, so a task that never completes fails its test instead
/// of hanging the run.
final class LocalCompletionSignal: @unchecked Sendable {
    private struct State {
        var fired = false
        var waiter: CheckedContinuation<Bool, Never>?
    }

    private let state = Mutex(State())

    func fire() {
        state.withLock { state -> CheckedContinuation<Bool, Never>? in
            state.fired = true
            defer { state.waiter = nil }
            return state.waiter
        }?.resume(returning: true)
    }

    /// True when fired, false after `seconds` without.
    func wait(seconds: Double) async -> Bool {
        await withCheckedContinuation { continuation in
            let fired = state.withLock { state -> Bool in
                if state.fired { return true }
                state.waiter = continuation
                return false
            }
            if fired {
                continuation.resume(returning: true)
                return
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [self] in
                state.withLock { state -> CheckedContinuation<Bool, Never>? in
                    defer { state.waiter = nil }
                    return state.waiter
                }?.resume(returning: false)
            }
        }
    }
}

/// A data delegate that records the response, the bytes and every completion, and runs
/// `onFirstData` inside the first `didReceive data` (on the delegate queue).
final class LocalDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    struct Record: @unchecked Sendable {
        var response: URLResponse?
        var data = Data()
        var error: (any Error)?
        var completions = 0
    }

    private let record = Mutex(Record())
    let completed = LocalCompletionSignal()
    private let onFirstData: (@Sendable (URLSessionDataTask) -> Void)?

    init(onFirstData: (@Sendable (URLSessionDataTask) -> Void)? = nil) {
        self.onFirstData = onFirstData
    }

    var snapshot: Record { record.withLock { $0 } }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse, completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        record.withLock { $0.response = response }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let first = record.withLock { record -> Bool in
            defer { record.data.append(data) }
            return record.data.isEmpty
        }
        if first { onFirstData?(dataTask) }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        record.withLock { record in
            record.error = error
            record.completions += 1
        }
        completed.fire()
    }
}

/// What the back-pressure test saw around its suspension.
final class LocalSuspendProbe: @unchecked Sendable {
    struct Values {
        /// `countOfBytesReceived` right after `suspend()`, and right before `resume()`.
        var atSuspend: Int64 = -1
        var beforeResume: Int64 = -1
        var stateWhileSuspended: URLSessionTask.State?
    }

    let values = Mutex(Values())
}

/// The task did not complete in time (delegate mode).
struct LocalLoadTimedOut: Error {}

/// Loads `url` through `delivery` on a fresh ephemeral session.
func loadLocal(_ url: URL, via delivery: Delivery) async -> LocalLoaded {
    let request = URLRequest(url: url)
    switch delivery {
    case .completionHandler:
        let session = URLSession(configuration: .ephemeral)
        defer { session.finishTasksAndInvalidate() }
        let (data, response, error) = await loadWithCompletionHandler(session, request)
        return LocalLoaded(body: data, response: response, error: error)
    case .delegate:
        let delegate = LocalDelegate()
        let session = URLSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.dataTask(with: request)
        task.resume()
        guard await delegate.completed.wait(seconds: 60) else {
            task.cancel()
            return LocalLoaded(error: LocalLoadTimedOut(), delegateBytes: delegate.snapshot.data)
        }
        let record = delegate.snapshot
        return LocalLoaded(body: record.error == nil ? record.data : nil, response: record.response ?? task.response, error: record.error, delegateBytes: record.data)
    case .asyncData:
        let session = URLSession(configuration: .ephemeral)
        defer { session.finishTasksAndInvalidate() }
        do {
            let (data, response) = try await session.data(for: request)
            return LocalLoaded(body: data, response: response)
        } catch {
            return LocalLoaded(error: error)
        }
    case .download:
        let session = URLSession(configuration: .ephemeral)
        defer { session.finishTasksAndInvalidate() }
        do {
            // Other tests watch the temporary directory's download files (DownloadTests).
            return try await DownloadFilesLock.holding {
                let (location, response) = try await session.download(for: request)
                defer { try? FileManager.default.removeItem(at: location) }
                return LocalLoaded(body: FileManager.default.contents(atPath: location.path), response: response)
            }
        } catch {
            return LocalLoaded(error: error)
        }
    }
}

/// One `data:` URL and what it must give.
struct LocalDataCase: Sendable, CustomTestStringConvertible {
    var name: String
    var url: String
    var bytes: [UInt8]
    var mimeType: String
    var textEncodingName: String?

    var testDescription: String { name }

    static let all: [LocalDataCase] = [
        LocalDataCase(name: "no media type, percent-encoded", url: "data:,Hello%2C%20World%21", bytes: Array("Hello, World!".utf8), mimeType: "text/plain", textEncodingName: "US-ASCII"),
        LocalDataCase(name: "no media type, base64", url: "data:;base64,SGk=", bytes: Array("Hi".utf8), mimeType: "text/plain", textEncodingName: "US-ASCII"),
        LocalDataCase(name: "text/plain, base64", url: "data:text/plain;base64,SGVsbG8sIFdvcmxkIQ==", bytes: Array("Hello, World!".utf8), mimeType: "text/plain", textEncodingName: nil),
        LocalDataCase(name: "application/json with charset", url: "data:application/json;charset=utf-8,%7B%22a%22%3A1%7D", bytes: Array(#"{"a":1}"#.utf8), mimeType: "application/json", textEncodingName: "utf-8"),
        LocalDataCase(
            name: "binary, base64", url: "data:application/octet-stream;base64," + Data(Array(UInt8.min...UInt8.max)).base64EncodedString(),
            bytes: Array(UInt8.min...UInt8.max), mimeType: "application/octet-stream", textEncodingName: nil
        ),
    ]
}

/// A fresh folder for one test's files (the caller removes it).
private func makeLocalFolder() -> URL {
    TestRun.makeDirectory("local-resource")
}

/// Writes `bytes` to `name` in `folder` and returns the file's URL.
private func writeFile(_ bytes: [UInt8], named name: String, in folder: URL) throws -> URL {
    let file = folder.appendingPathComponent(name)
    try Data(bytes).write(to: file)
    return file
}

@Suite("data: and file: URLs")
struct LocalResourceTests {
    // MARK: data:

    @Test("data: URLs give their exact bytes, MIME type, charset and length", arguments: Delivery.allCases, LocalDataCase.all)
    func dataURL(delivery: Delivery, item: LocalDataCase) async throws {
        let url = try #require(URL(string: item.url))
        let loaded = await loadLocal(url, via: delivery)
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.body == Data(item.bytes))
        let response = try #require(loaded.response)
        #expect(!(response is HTTPURLResponse), "a data: load answers with a plain URLResponse")
        #expect(response.url == url)
        #expect(response.mimeType == item.mimeType)
        #expect(response.textEncodingName == item.textEncodingName)
        #expect(response.expectedContentLength == Int64(item.bytes.count))
    }

    @Test("a malformed data: URL fails with badURL", arguments: Delivery.allCases, ["data:text/plain;base64,@@@", "data:nocomma"])
    func malformedDataURL(delivery: Delivery, text: String) async throws {
        let url = try #require(URL(string: text))
        let loaded = await loadLocal(url, via: delivery)
        #expect(urlErrorCode(loaded.error) == .badURL, "\(String(describing: loaded.error))")
        #expect((loaded.error as? URLError)?.failingURL == url)
        #expect(loaded.body == nil)
        #expect(loaded.delegateBytes.isEmpty)
    }

    // MARK: file:

    @Test("file: a 5 MiB file and a small JSON file arrive whole, with length and MIME type", arguments: Delivery.allCases)
    func fileThroughEveryMode(delivery: Delivery) async throws {
        let folder = makeLocalFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let big = try writeFile(fiveMiB, named: "five.bin", in: folder)
        let loaded = await loadLocal(big, via: delivery)
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.body?.count == fiveMiB.count)
        #expect(loaded.body?.sha256Hex == SHA256.hex(fiveMiB))
        let response = try #require(loaded.response)
        #expect(!(response is HTTPURLResponse), "a file: load answers with a plain URLResponse")
        #expect(response.url == big)
        #expect(response.expectedContentLength == Int64(fiveMiB.count))
        #expect(response.mimeType == "application/octet-stream")

        let json = Array(#"{"issue":21,"schemes":["data","file"]}"#.utf8) + [0x0A]
        let small = try writeFile(json, named: "small.json", in: folder)
        let loadedJSON = await loadLocal(small, via: delivery)
        #expect(loadedJSON.error == nil, "\(String(describing: loadedJSON.error))")
        #expect(loadedJSON.body == Data(json))
        #expect(loadedJSON.response?.mimeType == "application/json")
        #expect(loadedJSON.response?.expectedContentLength == Int64(json.count))
    }

    @Test("file: MIME types come from the extension", arguments: [
        ("notes.txt", "text/plain"), ("page.HTML", "text/html"), ("data.json", "application/json"),
        ("image.png", "image/png"), ("archive.unknownext", "application/octet-stream"), ("noextension", "application/octet-stream"),
    ])
    func fileMIMETypes(_ item: (String, String)) async throws {
        let (name, mimeType) = item
        let folder = makeLocalFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let bytes = Array("content of \(name)\n".utf8)
        let file = try writeFile(bytes, named: name, in: folder)
        let loaded = await loadLocal(file, via: .completionHandler)
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.body == Data(bytes))
        #expect(loaded.response?.mimeType == mimeType)
        #expect(loaded.response?.textEncodingName == nil)
    }

    @Test("file: file://localhost/… and a percent-encoded path load the same file", arguments: Delivery.allCases)
    func fileURLForms(delivery: Delivery) async throws {
        let folder = makeLocalFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let bytes = deterministicBytes(count: 200_000, seed: 7)
        let file = try writeFile(bytes, named: "with space %.bin", in: folder)
        #expect(file.absoluteString.contains("with%20space%20%25.bin"))
        var components = try #require(URLComponents(url: file, resolvingAgainstBaseURL: false))
        components.host = "localhost"
        let viaLocalhost = try #require(components.url)
        for url in [file, viaLocalhost] {
            let loaded = await loadLocal(url, via: delivery)
            #expect(loaded.error == nil, "\(url): \(String(describing: loaded.error))")
            #expect(loaded.body?.sha256Hex == SHA256.hex(bytes), "\(url)")
            #expect(loaded.response?.expectedContentLength == Int64(bytes.count), "\(url)")
        }
    }

    @Test("file: a suspended task stops reading; after resume every byte arrives once, in order")
    func fileStreamingWithBackPressure() async throws {
        let folder = makeLocalFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = try writeFile(tenMiB, named: "stream.bin", in: folder)
        let probes = LocalSuspendProbe()
        let delegate = LocalDelegate { task in
            task.suspend()
            let atSuspend = task.countOfBytesReceived
            probes.values.withLock { $0.atSuspend = atSuspend }
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(200)) {
                let beforeResume = task.countOfBytesReceived
                let state = task.state
                probes.values.withLock {
                    $0.beforeResume = beforeResume
                    $0.stateWhileSuspended = state
                }
                task.resume()
            }
        }
        let session = URLSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.dataTask(with: file)
        task.resume()
        let completed = await delegate.completed.wait(seconds: 60)
        try #require(completed, "the task never completed after its resume")

        let record = delegate.snapshot
        let probe = probes.values.withLock { $0 }
        #expect(record.error == nil, "\(String(describing: record.error))")
        #expect(record.completions == 1)
        #expect(record.data.count == tenMiB.count)
        #expect(record.data.sha256Hex == SHA256.hex(tenMiB))
        #expect(record.response?.expectedContentLength == Int64(tenMiB.count))
        #expect(task.countOfBytesReceived == Int64(tenMiB.count))
        #expect(task.countOfBytesExpectedToReceive == Int64(tenMiB.count))
        // While suspended, nothing beyond the read already under way was read.
        #expect(probe.stateWhileSuspended == .suspended)
        #expect(probe.atSuspend >= 0 && probe.beforeResume >= probe.atSuspend)
        #expect(probe.beforeResume - probe.atSuspend <= Int64(localChunkBytes))
        #expect(probe.beforeResume < Int64(tenMiB.count), "the whole file was read while the task was suspended")
    }

    @Test("file: cancelling after the first chunk completes once, with cancelled")
    func fileCancelMidway() async throws {
        let folder = makeLocalFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = try writeFile(tenMiB, named: "cancel.bin", in: folder)
        let delegate = LocalDelegate { task in task.cancel() }
        let session = URLSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.dataTask(with: file)
        task.resume()
        let completed = await delegate.completed.wait(seconds: 30)
        try #require(completed, "the cancelled task never completed")
        // A second completion would come soon after the first.
        try await Task.sleep(for: .milliseconds(300))

        let record = delegate.snapshot
        #expect(urlErrorCode(record.error) == .cancelled, "\(String(describing: record.error))")
        #expect(record.completions == 1)
        #expect(task.state == .completed)
        // Reading stopped early: what arrived is a strict prefix of the file.
        #expect(!record.data.isEmpty)
        #expect(record.data.count < tenMiB.count)
        #expect(record.data.sha256Hex == SHA256.hex(tenMiB.prefix(record.data.count)))
        #expect(task.countOfBytesReceived < Int64(tenMiB.count))
    }

    @Test("file: a missing file, a directory and another host fail with Apple's codes", arguments: Delivery.allCases)
    func fileErrors(delivery: Delivery) async throws {
        let folder = makeLocalFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let plain = try writeFile(Array("x".utf8), named: "plain.txt", in: folder)
        let subfolder = folder.appendingPathComponent("sub", isDirectory: true)
        try FileManager.default.createDirectory(at: subfolder, withIntermediateDirectories: true)

        let otherHost = try #require(URL(string: "file://otherhost/x"))
        var onOtherHost = URLComponents()
        onOtherHost.scheme = "file"
        onOtherHost.host = "otherhost"
        onOtherHost.path = plain.path
        let existingPathOnOtherHost = try #require(onOtherHost.url)
        let cases: [(URL, URLError.Code)] = [
            (folder.appendingPathComponent("missing.txt"), .fileDoesNotExist),
            // A path through a regular file (ENOTDIR) does not exist either.
            (plain.appendingPathComponent("below"), .fileDoesNotExist),
            (subfolder, .fileIsDirectory),
            (URL(fileURLWithPath: subfolder.path, isDirectory: false), .fileIsDirectory),
            // Another host is refused before any local path is looked at.
            (otherHost, .unsupportedURL),
            (existingPathOnOtherHost, .unsupportedURL),
        ]
        for (url, code) in cases {
            let loaded = await loadLocal(url, via: delivery)
            #expect(urlErrorCode(loaded.error) == code, "\(url): \(String(describing: loaded.error))")
            #expect((loaded.error as? URLError)?.failingURL == url, "\(url)")
            #expect(loaded.body == nil, "\(url)")
            #expect(loaded.delegateBytes.isEmpty, "\(url)")
        }
    }

    // Tests run as root in CI, where permission bits do not stop a read: there a mode-000 file
    // is read like any other, so the case only runs for another user.
    @Test("file: an unreadable file fails with noPermissionsToReadFile", .enabled(if: geteuid() != 0, "root reads a mode-000 file"), arguments: Delivery.allCases)
    func fileWithoutPermission(delivery: Delivery) async throws {
        let folder = makeLocalFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = try writeFile(Array("private\n".utf8), named: "private.txt", in: folder)
        #expect(chmod(file.path, 0) == 0)
        defer { _ = chmod(file.path, 0o600) }
        let loaded = await loadLocal(file, via: delivery)
        #expect(urlErrorCode(loaded.error) == .noPermissionsToReadFile, "\(String(describing: loaded.error))")
        #expect(loaded.body == nil)
        #expect(loaded.delegateBytes.isEmpty)
    }

    // MARK: Redirects

    @Test("a redirect from http to a file: or data: URL fails with unsupportedURL and delivers nothing", arguments: Delivery.allCases, ["file:///etc/hostname", "data:text/plain,secret"])
    func redirectToLocalURL(delivery: Delivery, target: String) async throws {
        let httpbin = try HttpbinServer.shared()
        var components = try #require(URLComponents(url: httpbin.url("/redirect-to"), resolvingAgainstBaseURL: false))
        components.queryItems = [URLQueryItem(name: "url", value: target), URLQueryItem(name: "status_code", value: "302")]
        let start = try #require(components.url)
        let loaded = await loadLocal(start, via: delivery)
        #expect(urlErrorCode(loaded.error) == .unsupportedURL, "\(String(describing: loaded.error))")
        #expect((loaded.error as? URLError)?.failingURL?.absoluteString == target)
        #expect(loaded.body == nil)
        // Neither /etc/hostname nor "secret" reached the delegate.
        #expect(loaded.delegateBytes.isEmpty)
    }

    // MARK: Empty bodies, the shared session

    @Test("an empty file and data:, give an empty body and succeed", arguments: Delivery.allCases)
    func emptyBodies(delivery: Delivery) async throws {
        let folder = makeLocalFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let empty = try writeFile([], named: "empty.txt", in: folder)
        let loadedFile = await loadLocal(empty, via: delivery)
        #expect(loadedFile.error == nil, "\(String(describing: loadedFile.error))")
        #expect(loadedFile.body == Data())
        #expect(loadedFile.response?.expectedContentLength == 0)
        #expect(loadedFile.response?.mimeType == "text/plain")

        let dataURL = try #require(URL(string: "data:,"))
        let loadedData = await loadLocal(dataURL, via: delivery)
        #expect(loadedData.error == nil, "\(String(describing: loadedData.error))")
        #expect(loadedData.body == Data())
        #expect(loadedData.response?.expectedContentLength == 0)
        #expect(loadedData.response?.mimeType == "text/plain")
        #expect(loadedData.response?.textEncodingName == "US-ASCII")
    }

    @Test("URLSession.shared loads a file: URL with data(from:)")
    func sharedSessionFile() async throws {
        let folder = makeLocalFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let bytes = deterministicBytes(count: 300_000, seed: 9)
        let file = try writeFile(bytes, named: "shared.bin", in: folder)
        let (data, response) = try await URLSession.shared.data(from: file)
        #expect(data.count == bytes.count)
        #expect(data.sha256Hex == SHA256.hex(bytes))
        #expect(!(response is HTTPURLResponse))
        #expect(response.url == file)
        #expect(response.mimeType == "application/octet-stream")
        #expect(response.expectedContentLength == Int64(bytes.count))
    }
}
