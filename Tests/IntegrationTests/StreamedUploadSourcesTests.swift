import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// Where a streamed upload's body can come from: a file's stream and a Data's, over HTTP/1.1
/// (chunked) and HTTP/2 (DATA frames); bound pairs have their own suite
/// (`BoundStreamUploadTests`). Progress reaches the total for every upload form, and a task's
/// `progress` completes.
@Suite("Streamed upload sources and progress")
struct StreamedUploadSourcesTests {
    let nginx: NginxServer
    let payload = Data(deterministicBytes(count: 2 * 1024 * 1024 + 17, seed: 77))

    init() throws {
        nginx = try NginxServer.shared()
    }

    enum Source: String, CaseIterable, Sendable { case file, data }

    @Test("uploadTask(withStreamedRequest:) sends the whole stream, whatever its source, over h1 and h2", arguments: Source.allCases, [false, true])
    func sources(_ source: Source, _ http2: Bool) async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("courier-stream-\(UUID().uuidString).bin")
        try payload.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let payload = self.payload
        let delegate = StreamGivingDelegate {
            switch source {
            case .file: return InputStream(url: file)
            case .data: return InputStream(data: payload)
            }
        }
        let session = URLSession(configuration: .uncached, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: http2 ? nginx.tlsURL("good", "/echo") : nginx.url("/echo"))
        request.httpMethod = "PUT"
        let error = await delegate.run(session.uploadTask(withStreamedRequest: request))
        #expect(error == nil)
        let response = try #require(delegate.response)
        #expect(response.value(forHTTPHeaderField: "X-Body-Length") == "\(payload.count)")
        #expect(response.value(forHTTPHeaderField: "X-Body-SHA256") == payload.sha256Hex)
        let sent = delegate.totalsSent
        #expect(sent.last == Int64(payload.count), "didSendBodyData reaches the whole body")
        #expect(sent == sent.sorted())
    }

    @Test("progress: a finished download's and upload's Progress are complete, fractionCompleted 1.0, known length or not", .exclusiveDownloadFiles, arguments: ["/files/8m.bin", "/chunked/1m.bin"])
    func progressCompletes(_ path: String) async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let download = session.downloadTask(with: nginx.url(path)) { _, _, _ in }
        let downloadProgress = download.progress
        var upload = URLRequest(url: nginx.url("/echo"))
        upload.httpMethod = "POST"
        let uploadTask = session.uploadTask(with: upload, from: payload) { _, _, _ in }
        let uploadProgress = uploadTask.progress
        download.resume()
        uploadTask.resume()
        let finished = await pollUntil { download.state == .completed && uploadTask.state == .completed }
        try #require(finished)
        #expect(download.error == nil && uploadTask.error == nil)
        #expect(downloadProgress.fractionCompleted == 1.0)
        #expect(downloadProgress.completedUnitCount == download.countOfBytesReceived)
        #expect(uploadProgress.fractionCompleted == 1.0)
        #expect(uploadTask.countOfBytesSent == Int64(payload.count))
        #expect(uploadTask.countOfBytesExpectedToSend == Int64(payload.count))
    }
}
