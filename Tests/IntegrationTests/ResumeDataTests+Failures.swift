@testable import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// A download that must not produce resume data.
enum NotResumable: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// A POST (the server's answer would otherwise allow resuming).
    case post
    /// Neither ETag nor Last-Modified.
    case noValidator
    /// Only a weak ETag.
    case weakETagOnly
    /// A 200 without `Accept-Ranges: bytes`.
    case noAcceptRanges

    var testDescription: String { rawValue }

    var behaviour: ResumableServer.Behaviour {
        switch self {
        case .post: ResumableServer.Behaviour()
        case .noValidator: ResumableServer.Behaviour(validator: .absent)
        case .weakETagOnly: ResumableServer.Behaviour(validator: .weakETag)
        case .noAcceptRanges: ResumableServer.Behaviour(acceptRanges: false)
        }
    }
}

/// How a download ends before its body does.
enum EarlyEnd: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// `cancel(byProducingResumeData:)`.
    case cancelled
    /// The server closes the connection mid-body.
    case cutShort

    var testDescription: String { rawValue }
}

/// The three ways to resume: a delegate task, a completion handler, `download(resumeFrom:)`.
enum ResumeForm: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case delegate, completionHandler, async

    var testDescription: String { rawValue }
}

/// Resume data that Courier must refuse.
enum DamagedResumeData: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case empty
    case randomBytes
    /// A property list, but not one Courier made.
    case foreignPropertyList
    /// Courier's, with a version no Courier has written yet.
    case futureVersion
    /// Courier's, naming a file that is not a `CourierPartial_*.partial` file.
    case foreignPartialFile

    var testDescription: String { rawValue }
}

/// `data`, a property list, with the dictionary values (at any depth) that `replace` gives a
/// replacement for, written in the same format; and how many were replaced.
func rewritingPropertyList(_ data: Data, _ replace: (String, Any) -> Any?) throws -> (data: Data, replaced: Int) {
    var format = PropertyListSerialization.PropertyListFormat.binary
    let object = try PropertyListSerialization.propertyList(from: data, options: [], format: &format)
    var replaced = 0
    let rewritten = rewritePropertyListValue(object, replace, &replaced)
    let encoded = try PropertyListSerialization.data(fromPropertyList: rewritten, format: format, options: 0)
    return (encoded, replaced)
}

private func rewritePropertyListValue(_ value: Any, _ replace: (String, Any) -> Any?, _ replaced: inout Int) -> Any {
    if let dictionary = value as? [String: Any] {
        var result: [String: Any] = [:]
        for (key, inner) in dictionary {
            if let replacement = replace(key, inner) {
                result[key] = replacement
                replaced += 1
            } else {
                result[key] = rewritePropertyListValue(inner, replace, &replaced)
            }
        }
        return result
    }
    if let array = value as? [Any] {
        var result: [Any] = []
        for inner in array { result.append(rewritePropertyListValue(inner, replace, &replaced)) }
        return result
    }
    return value
}

extension ResumeDataTests {
    @Test("no resume data without GET, a strong validator and Accept-Ranges: the handler gets nil, the error carries none, no file is kept", .exclusiveDownloadFiles, arguments: NotResumable.allCases, EarlyEnd.allCases)
    func notResumable(_ kind: NotResumable, _ end: EarlyEnd) async throws {
        let fixture = try ResumeFixture(behaviour: kind.behaviour)
        defer { fixture.close() }
        let (server, recorder, session, partials) = (fixture.server, fixture.recorder, fixture.session, fixture.partials)
        let downloads = downloadFilesPresent()
        var request = URLRequest(url: server.url())
        if kind == .post {
            request.httpMethod = "POST"
            request.httpBody = Data("resume me".utf8)
        }

        let error: URLError
        switch end {
        case .cancelled:
            let (data, record) = try await fixture.interrupt(request, at: Self.offset)
            #expect(data == nil)
            #expect(record.resumeData.count == 1)
            error = try #require(record.error as? URLError)
            #expect(error.code == .cancelled)
        case .cutShort:
            server.cut(at: [Self.offset], with: .close)
            session.downloadTask(with: request).resume()
            let done = await recorder.waitForCompletion()
            try #require(done)
            error = try #require(recorder.snapshot.error as? URLError)
            #expect(error.code == .networkConnectionLost)
        }
        #expect(error.downloadTaskResumeData == nil)
        #expect(!error.userInfo.keys.contains(URLSessionDownloadTaskResumeData))
        #expect(server.requests.first?.method == (kind == .post ? "POST" : "GET"))
        #expect(partialFilesPresent() == partials, "no partial file without resume data")
        let left = await downloadFilesLeft(besides: downloads)
        #expect(left.isEmpty, "the download file is deleted: \(left)")
    }

    @Test("cancelled before the response head: the handler gets nil, before didCompleteWithError", .exclusiveDownloadFiles)
    func cancelBeforeResponse() async throws {
        let partials = partialFilesPresent()
        defer { removePartialFiles(except: partials) }
        let arrived = ResumeFlag()
        let server = try ScriptedServer { connection in
            guard connection.readRequest() != nil else { return }
            arrived.set()
            connection.readToEOF(timeout: 10)
        }
        defer { server.stop() }
        let recorder = ResumeRecorder()
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.downloadTask(with: server.url("/held"))
        task.resume()
        let sent = await pollUntil { arrived.isSet }
        try #require(sent)
        let data = await recorder.cancelProducingResumeData(task, session: session)
        #expect(data == nil)
        let done = await recorder.waitForCompletion()
        try #require(done)
        let record = recorder.snapshot
        #expect(record.resumeData.count == 1)
        let handled = try #require(record.events.firstIndex(of: "resumeData"))
        let completed = try #require(record.events.firstIndex(of: "complete"))
        #expect(handled < completed, "\(record.events)")
        #expect(record.offQueue == 0)
        let error = try #require(record.error as? URLError)
        #expect(error.code == .cancelled)
        #expect(error.downloadTaskResumeData == nil)
        #expect(partialFilesPresent() == partials)
    }

    @Test("damaged or foreign resume data fails the task with .cannotDecodeRawData in every form, and nothing is sent", .exclusiveDownloadFiles, arguments: DamagedResumeData.allCases, ResumeForm.allCases)
    func damaged(_ damage: DamagedResumeData, _ form: ResumeForm) async throws {
        let partials = partialFilesPresent()
        defer { removePartialFiles(except: partials) }
        let server = try ResumableServer(size: 1024 * 1024)
        defer { server.stop() }
        let foreignBytes = Data(repeating: 0x41, count: 1000)
        let foreignFile = FileManager.default.temporaryDirectory.appendingPathComponent("CourierForeign_\(UInt32.random(in: 0...UInt32.max)).partial")
        defer { try? FileManager.default.removeItem(at: foreignFile) }

        let data: Data
        switch damage {
        case .empty:
            data = Data()
        case .randomBytes:
            var generator = SplitMix64(seed: 0xBAD_DA7A)
            data = Data((0..<600).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        case .foreignPropertyList:
            let foreign: [String: Any] = ["Format": "not Courier's", "Entries": [1, 2, 3], "URL": server.url().absoluteString]
            data = try PropertyListSerialization.data(fromPropertyList: foreign, format: .binary, options: 0)
        case .futureVersion:
            let genuine = try await genuineResumeData(from: server)
            // The key's name is Courier's business: whichever entry names a version.
            let rewritten = try rewritingPropertyList(genuine) { key, value in
                guard key.lowercased().contains("version") else { return nil }
                if value is String { return "999999" }
                return 999_999
            }
            try #require(rewritten.replaced == 1, "the resume data has one version entry")
            data = rewritten.data
        case .foreignPartialFile:
            let genuine = try await genuineResumeData(from: server)
            try foreignBytes.write(to: foreignFile)
            let rewritten = try rewritingPropertyList(genuine) { _, value in
                guard let text = value as? String, text.contains("CourierPartial_") else { return nil }
                return text.hasPrefix("/") ? foreignFile.path : foreignFile.lastPathComponent
            }
            try #require(rewritten.replaced >= 1, "the resume data names its partial file")
            data = rewritten.data
        }

        let requestsBefore = server.requests.count
        let error = await resumeExpectingFailure(data, form: form)
        #expect(urlErrorCode(error) == .cannotDecodeRawData, "\(String(describing: error))")
        #expect(server.requests.count == requestsBefore, "nothing is sent")
        if damage == .foreignPartialFile {
            #expect(FileManager.default.contents(atPath: foreignFile.path) == foreignBytes, "the file it names is left alone")
        }
    }

    @Test("a resumed request refused before any response fails with resume data again", .exclusiveDownloadFiles)
    func refusedResume() async throws {
        let fixture = try ResumeFixture()
        defer { fixture.close() }
        let (resumeData, _) = try await fixture.interrupt(at: Self.offset)
        let data = try #require(resumeData)
        fixture.server.stop()

        let record = try await fixture.resumeDownload(data)
        let error = try #require(record.error as? URLError)
        #expect(error.code == .cannotConnectToHost)
        #expect(error.downloadTaskResumeData != nil, "the resume data comes back with the error")
        #expect(!partialFilesPresent().subtracting(fixture.partials).isEmpty, "the partial file is still kept")
    }

    @Test("a resumed request whose connection closes unanswered fails with resume data that later resumes the download", .exclusiveDownloadFiles)
    func droppedResume() async throws {
        let fixture = try ResumeFixture()
        defer { fixture.close() }
        let (server, recorder, partials) = (fixture.server, fixture.recorder, fixture.partials)
        let (resumeData, _) = try await fixture.interrupt(at: Self.offset)
        let data = try #require(resumeData)

        server.dropRequests(true)
        try await fixture.resumeDownload(data)
        let error = try #require(recorder.snapshot.error as? URLError)
        #expect(error.code != .cancelled)
        #expect(!recorder.snapshot.events.contains("write"))
        let again = try #require(error.downloadTaskResumeData, "the resume data comes back with the error")
        #expect(server.requests.contains { $0.status == 0 }, "the request was dropped")

        recorder.reset()
        server.dropRequests(false)
        let record = try await fixture.resumeDownload(again)
        expectResumed(record, at: Int64(Self.offset), length: server.body.count, sha256: server.sha256)
        #expect(server.requests.last?.range == "bytes=\(Self.offset)-")
        #expect(server.requests.last?.status == 206)
        let consumed = await pollUntil(timeout: .seconds(2)) { partialFilesPresent() == partials }
        #expect(consumed)
    }

    @Test("nginx: /slow/8m.bin cancelled after 1 MiB and resumed from there, whole", .exclusiveDownloadFiles)
    func nginxSlowResume() async throws {
        let nginx = try NginxServer.shared()
        let fixture = try #require(NginxServer.fixtures["8m.bin"])
        let partials = partialFilesPresent()
        defer { removePartialFiles(except: partials) }
        let once = ResumeFlag()
        let recorder = ResumeRecorder(onWrite: { owner, delegateSession, task, total in
            if total >= 1024 * 1024, once.claim() { owner.cancelRecordingResumeData(task, session: delegateSession) }
        })
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        session.downloadTask(with: nginx.url("/slow/8m.bin")).resume()
        let cancelled = await recorder.waitForCompletion(timeout: .seconds(20))
        try #require(cancelled)
        let first = recorder.snapshot
        recorder.reset()
        #expect(urlErrorCode(first.error) == .cancelled)
        #expect(first.resumeData.count == 1)
        let data = try #require(first.resumeData.first ?? nil, "nginx's strong ETag and Accept-Ranges allow resuming")
        let written = first.totalWritten

        session.downloadTask(withResumeData: data).resume()
        let done = await recorder.waitForCompletion(timeout: .seconds(30))
        try #require(done)
        let record = recorder.snapshot
        let offset = try #require(record.resumes.first?.offset)
        #expect(offset >= written && offset >= 1024 * 1024 && offset < Int64(fixture.count), "went on from the bytes in the file (\(offset))")
        expectResumed(record, at: offset, length: fixture.count, sha256: SHA256.hex(fixture))
        let consumed = await pollUntil(timeout: .seconds(2)) { partialFilesPresent() == partials }
        #expect(consumed)
    }

    @Test("nginx: a gzip-encoded download cancelled mid-body gives no resume data", .exclusiveDownloadFiles)
    func nginxGzip() async throws {
        let nginx = try NginxServer.shared()
        let partials = partialFilesPresent()
        defer { removePartialFiles(except: partials) }
        let once = ResumeFlag()
        let recorder = ResumeRecorder(onWrite: { owner, delegateSession, task, _ in
            if once.claim() { owner.cancelRecordingResumeData(task, session: delegateSession) }
        })
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.downloadTask(with: nginx.url("/gzip/8m.bin"))
        task.resume()
        let done = await recorder.waitForCompletion()
        try #require(done)
        let record = recorder.snapshot
        #expect((task.response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Encoding") == "gzip")
        #expect(urlErrorCode(record.error) == .cancelled, "cancelled mid-body, not finished first")
        #expect(record.resumeData.count == 1)
        #expect(record.resumeData.allSatisfy { $0 == nil }, "no resume data for an encoded body")
        #expect((record.error as? URLError)?.downloadTaskResumeData == nil)
        #expect(partialFilesPresent() == partials)
    }

    /// Resume data made by cancelling a download from `server` after 256 KiB.
    func genuineResumeData(from server: ResumableServer) async throws -> Data {
        let recorder = ResumeRecorder()
        let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (data, _) = try await interruptDownload(URLRequest(url: server.url()), session: session, recorder: recorder, server: server, at: 256 * 1024)
        return try #require(data)
    }

    /// Resumes `data` in `form` and returns the error the task failed with; a success is
    /// recorded as an issue.
    func resumeExpectingFailure(_ data: Data, form: ResumeForm) async -> (any Error)? {
        switch form {
        case .delegate:
            let recorder = ResumeRecorder()
            let session = URLSession(configuration: .uncached, delegate: recorder, delegateQueue: nil)
            defer { session.finishTasksAndInvalidate() }
            session.downloadTask(withResumeData: data).resume()
            guard await recorder.waitForCompletion() else {
                Issue.record("the task did not complete")
                return nil
            }
            let record = recorder.snapshot
            #expect(record.resumes.isEmpty && record.written.isEmpty && !record.events.contains("finish"), "\(record.events)")
            return record.error
        case .completionHandler:
            let session = URLSession(configuration: .uncached)
            defer { session.finishTasksAndInvalidate() }
            let log = HandlerLog()
            session.downloadTask(withResumeData: data) { location, _, error in
                log.note(session, "completion", location: location, error: error)
            }.resume()
            guard await pollUntil({ !log.entries.isEmpty }) else {
                Issue.record("the completion handler was not called")
                return nil
            }
            #expect(log.entries.count == 1)
            #expect(log.entries.first?.location == nil)
            return log.entries.first?.error
        case .async:
            let session = URLSession(configuration: .uncached)
            defer { session.finishTasksAndInvalidate() }
            do {
                let (location, _) = try await session.download(resumeFrom: data)
                try? FileManager.default.removeItem(at: location)
                Issue.record("the download succeeded")
                return nil
            } catch {
                return error
            }
        }
    }

    @Test("a download suspended mid-body and resumed later is byte-identical (FoundationNetworking corrupts it)", .exclusiveDownloadFiles)
    func suspendedAndResumed() async throws {
        let fixture = try ResumeFixture(behaviour: .init(chunkDelay: 2000))
        defer { fixture.close() }
        let (server, recorder, session) = (fixture.server, fixture.recorder, fixture.session)
        let task = session.downloadTask(with: server.url())
        task.resume()
        let reached = await pollUntil { task.countOfBytesReceived >= 1024 * 1024 }
        try #require(reached)
        task.suspend()
        try await Task.sleep(for: .milliseconds(300))
        let whileSuspended = task.countOfBytesReceived
        try await Task.sleep(for: .milliseconds(300))
        // Reading stopped: at most what was already in flight arrived meanwhile.
        #expect(task.countOfBytesReceived - whileSuspended < 512 * 1024)
        #expect(recorder.snapshot.completions == 0)
        task.resume()
        let done = await recorder.waitForCompletion()
        try #require(done)
        let record = recorder.snapshot
        #expect(record.error == nil)
        #expect(record.sha256 == server.sha256)
        #expect(server.requests.count == 1, "one request: suspending sends nothing new")
    }
}

extension ResumeDataTests {
    @Test(
        "courierKeepsPartialDownloads: a download cut short keeps its bytes in a file the error names, with or without resume data; without it the file goes",
        .exclusiveDownloadFiles, arguments: [ResumableServer.Validator.absent, .strongETag]
    )
    func keepsPartialDownloads(_ validator: ResumableServer.Validator) async throws {
        let server = try ResumableServer(behaviour: ResumableServer.Behaviour(validator: validator))
        defer { server.stop() }
        let cut = 300_000
        let downloads = downloadFilesPresent()
        let partials = partialFilesPresent()

        let keeping = URLSessionConfiguration.ephemeral
        keeping.courierKeepsPartialDownloads = true
        #expect((keeping.copy() as? URLSessionConfiguration)?.courierKeepsPartialDownloads == true)
        let session = URLSession(configuration: keeping)
        defer { session.invalidateAndCancel() }
        server.cut(at: [cut], with: .close)
        let error = try await #require(throws: URLError.self) { _ = try await session.download(from: server.url()) }
        #expect(error.code == .networkConnectionLost)
        let file = try #require(error.courierPartialDownloadFile)
        #expect(try Data(contentsOf: file) == Data(server.body.prefix(cut)), "every byte that came, in order")
        // The caller's now: deleting it is this test's business.
        #expect(unlink(file.path) == 0)
        #expect((error.downloadTaskResumeData != nil) == (validator == .strongETag), "resume data as without the option")

        // The default: the file is deleted unless resume data keeps it.
        let plain = URLSession(configuration: .ephemeral)
        defer { plain.invalidateAndCancel() }
        server.cut(at: [cut], with: .close)
        let plainError = try await #require(throws: URLError.self) { _ = try await plain.download(from: server.url()) }
        #expect(plainError.courierPartialDownloadFile == nil)
        #expect(plainError.userInfo[CourierPartialDownloadFileKey] == nil)
        // The resume data's partial file (with a validator) is not used here.
        removePartialFiles(except: partials)
        let left = await downloadFilesLeft(besides: downloads)
        #expect(left.isEmpty, "no download file left by either session: \(left)")
    }
}
