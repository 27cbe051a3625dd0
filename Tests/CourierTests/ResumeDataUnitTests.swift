@testable import Courier
import CourierSync
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The resume data blob, the Content-Range reader and the partial files' sweep, without a server.
@Suite("Resume data, unit")
struct ResumeDataUnitTests {
    private func sample(_ path: String = "/tmp/CourierPartial_abc123.partial") -> ResumeData {
        var current = URLRequest(url: URL(string: "http://127.0.0.1:8080/b.bin")!)
        current.setValue("x", forHTTPHeaderField: "X-Kept")
        current.timeoutInterval = 17
        return ResumeData(
            originalRequest: URLRequest(url: URL(string: "http://127.0.0.1:8080/a.bin")!), currentRequest: current,
            partialFile: URL(fileURLWithPath: path), offset: 12345, validator: "\"tag\"", expectedLength: 99999,
            createdAt: Date(timeIntervalSince1970: 1_700_000_000)
        )
    }

    @Test("the blob round-trips every field, the requests' fields included")
    func roundTrip() throws {
        let data = try #require(sample().encoded())
        let read = try ResumeData.decode(data)
        #expect(read.originalRequest.url?.absoluteString == "http://127.0.0.1:8080/a.bin")
        #expect(read.currentRequest.url?.absoluteString == "http://127.0.0.1:8080/b.bin")
        #expect(read.currentRequest.value(forHTTPHeaderField: "X-Kept") == "x")
        #expect(read.currentRequest.timeoutInterval == 17)
        #expect(read.partialFile.path == "/tmp/CourierPartial_abc123.partial")
        #expect(read.offset == 12345)
        #expect(read.validator == "\"tag\"")
        #expect(read.expectedLength == 99999)
        #expect(read.createdAt == Date(timeIntervalSince1970: 1_700_000_000))
    }

    @Test("a blob naming any other file is refused", arguments: ["/etc/passwd", "/tmp/CourierPartial_.partial", "/tmp/CourierDownload_abc.tmp"])
    func foreignFile(_ path: String) throws {
        var data = sample()
        data.partialFile = URL(fileURLWithPath: path)
        let blob = try #require(data.encoded())
        let error = #expect(throws: URLError.self) { try ResumeData.decode(blob) }
        #expect(error?.code == .cannotDecodeRawData)
    }

    @Test("Content-Range: what continues a file, and what does not")
    func contentRange() {
        let range = ContentRange("bytes 100-199/200")
        #expect(range?.first == 100 && range?.last == 199 && range?.length == 200)
        #expect(ContentRange("bytes 0-0/*")?.length == nil)
        #expect(ContentRange("BYTES  5-9/10")?.first == 5)
        for bad in ["", "bytes */200", "bytes 10-5/20", "bytes 0-199/199", "items 0-1/2", "bytes -1-5/9", "bytes 1-2"] {
            #expect(ContentRange(bad) == nil, "\(bad)")
        }
    }

    @Test("If-Range takes a strong ETag, else a Last-Modified date; a weak ETag alone gives nothing")
    func validators() throws {
        let url = URL(string: "http://127.0.0.1/")!
        let date = "Tue, 24 Nov 2026 10:00:00 GMT"
        let strong = try #require(HTTPURLResponse(url: url, statusCode: 200, httpVersion: nil, headerFields: ["ETag": "\"a\"", "Last-Modified": date]))
        let weak = try #require(HTTPURLResponse(url: url, statusCode: 200, httpVersion: nil, headerFields: ["ETag": "W/\"a\"", "Last-Modified": date]))
        let weakOnly = try #require(HTTPURLResponse(url: url, statusCode: 200, httpVersion: nil, headerFields: ["ETag": "W/\"a\""]))
        #expect(ResumeData.validator(of: strong) == "\"a\"")
        #expect(ResumeData.validator(of: weak) == date)
        #expect(ResumeData.validator(of: weakOnly) == nil)
    }

    @Test("the sweep deletes partial files older than seven days, and nothing else")
    func sweep() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("courier-sweep-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let names = ["CourierPartial_old111.partial", "CourierPartial_new222.partial", "CourierDownload_old333.tmp", "other.partial"]
        for name in names { #expect(FileManager.default.createFile(atPath: directory.appendingPathComponent(name).path, contents: Data([1]))) }
        let eightDaysAgo = time(nil) - 8 * 24 * 3600
        for name in names where name.contains("old") || name == "other.partial" {
            var times = [timespec(tv_sec: eightDaysAgo, tv_nsec: 0), timespec(tv_sec: eightDaysAgo, tv_nsec: 0)]
            #expect(utimensat(AT_FDCWD, directory.appendingPathComponent(name).path, &times, 0) == 0)
        }
        #expect(PartialDownloadFiles.sweep(directory) == 1)
        let left = Set(try FileManager.default.contentsOfDirectory(atPath: directory.path))
        #expect(left == ["CourierPartial_new222.partial", "CourierDownload_old333.tmp", "other.partial"])
    }
}

@Suite("Download file maker")
struct DownloadFileMakerTests {
    @Test("reading the session's download-file maker does not wrap it further: the 300,000th read calls it as the first did")
    func noThunkChain() throws {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let made = Mutex(0)
        session.makeDownloadFile.withLock { maker in
            maker.make = {
                made.withLock { $0 += 1 }
                throw URLError(.cannotCreateFile)
            }
        }
        // A closure stored as the mutex's value itself came back from each access wrapped in two
        // more thunks; calling it after this many accesses overflowed the stack.
        for _ in 0..<300_000 { _ = session.makeDownloadFile.withLock { $0.make } }
        #expect(throws: URLError.self) { try session.makeDownloadFile.withLock { $0.make }() }
        #expect(made.withLock { $0 } == 1)
    }
}
