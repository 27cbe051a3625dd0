import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// A task delegate's `didFinishCollecting metrics` comes before an async call returns (and
/// before an async byte sequence ends), as on Apple's platforms, where the async calls finish
/// on the delegate queue after the metrics. The delegate here takes its time over the metrics,
/// so a call that returned without waiting for them would find none.
@Suite("Metrics before an async call returns")
struct AsyncMetricsOrderTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    /// Holds the metrics once `didFinishCollecting` has finished, 200 ms after it was called.
    final class SlowMetricsDelegate: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
        let metrics = Mutex<URLSessionTaskMetrics?>(nil)

        func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
            usleep(200_000)
            self.metrics.withLock { $0 = metrics }
        }
    }

    @Test("data(for:delegate:) returns after the metrics")
    func data() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let delegate = SlowMetricsDelegate()
        let (body, _) = try await session.data(for: URLRequest(url: nginx.url("/files/100.bin")), delegate: delegate)
        #expect(Array(body) == NginxServer.fixtures["100.bin"])
        let metrics = try #require(delegate.metrics.withLock { $0 }, "the metrics came before the call returned")
        #expect(metrics.transactionMetrics.count == 1)
    }

    @Test("download(for:delegate:) returns after the metrics")
    func download() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let delegate = SlowMetricsDelegate()
        let (file, _) = try await DownloadFilesLock.holding {
            try await session.download(for: URLRequest(url: nginx.url("/files/64k.bin")), delegate: delegate)
        }
        defer { try? FileManager.default.removeItem(at: file) }
        #expect(try Array(Data(contentsOf: file)) == NginxServer.fixtures["64k.bin"])
        #expect(delegate.metrics.withLock { $0 } != nil, "the metrics came before the call returned")
    }

    @Test("the bytes of bytes(for:delegate:) end after the metrics")
    func bytes() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let delegate = SlowMetricsDelegate()
        let (bytes, _) = try await session.bytes(for: URLRequest(url: nginx.url("/files/64k.bin")), delegate: delegate)
        var received: [UInt8] = []
        for try await byte in bytes { received.append(byte) }
        #expect(received == NginxServer.fixtures["64k.bin"])
        #expect(delegate.metrics.withLock { $0 } != nil, "the metrics came before the sequence ended")
    }
}
