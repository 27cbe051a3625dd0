import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// Transparent content decoding as Apple's URL Loading System does it: Accept-Encoding offered
/// by default, gzip, deflate and br bodies decoded in every delivery mode, the response's
/// fields left as received, broken bodies failing with cannotDecodeContentData, unknown codings
/// passed through, and decompression bombs stopped by Courier's limits. Against nginx's `/gzip/`
/// and `/static-gz/`, httpbin's `/gzip`, `/deflate` and `/brotli`, and scripted servers.
@Suite("ContentDecodingTests")
struct ContentDecodingTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    /// The tokens of an Accept-Encoding value, lower-cased, without weights.
    static func codings(_ value: String?) -> Set<String> {
        Set((value ?? "").split(separator: ",").map { $0.split(separator: ";")[0].trimmingCharacters(in: .whitespaces).lowercased() })
    }

    /// A server that answers every request with `body` and these content fields.
    static func serving(_ body: [UInt8], headers: [(String, String)]) throws -> AnsweringServer {
        try AnsweringServer { _, _ in AnsweringServer.Answer(headers: headers, body: body) }
    }

    // MARK: - nginx

    @Test("nginx's on-the-fly gzip decodes to the exact file", arguments: ["hello.txt", "64k.bin", "1m.bin"], Delivery.allCases)
    func gzipFixtures(_ name: String, _ delivery: Delivery) async throws {
        let fixture = try #require(NginxServer.fixtures[name])
        let loaded = await load(URLRequest(url: nginx.url("/gzip/\(name)")), via: delivery)
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        let response = try #require(loaded.response)
        #expect(response.statusCode == 200)
        #expect(response.value(forHTTPHeaderField: "Content-Encoding") == "gzip", "it was compressed on the wire; the field stays as received")
        #expect(response.expectedContentLength == -1, "nginx compresses on the fly, chunked")
        let body = try #require(loaded.body)
        #expect(body.count == fixture.count)
        let intact = Array(body) == fixture
        #expect(intact, "the decoded body differs from the file")
    }

    @Test("the default Accept-Encoding offers gzip, deflate and br")
    func defaultAcceptEncoding() async throws {
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let (echoData, _) = try await session.data(from: nginx.url("/echo"))
        let offered = Self.codings(try EchoReply(echoData).header("Accept-Encoding"))
        #expect(offered.isSuperset(of: ["gzip", "deflate", "br"]), "\(offered)")

        let httpbin = try HttpbinServer.shared()
        let (headersData, _) = try await session.data(from: httpbin.url("/headers"))
        let offeredToHttpbin = Self.codings(try HttpbinReply(headersData).header("Accept-Encoding"))
        #expect(offeredToHttpbin.isSuperset(of: ["gzip", "deflate", "br"]), "\(offeredToHttpbin)")
    }

    @Test("a caller's Accept-Encoding is sent as given", arguments: ["identity", "gzip", "br;q=1.0, gzip;q=0.5"])
    func callerAcceptEncoding(_ value: String) async throws {
        var request = URLRequest(url: nginx.url("/echo"))
        request.setValue(value, forHTTPHeaderField: "Accept-Encoding")
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        let (data, _) = try await session.data(for: request)
        #expect(try EchoReply(data).header("Accept-Encoding") == value)
    }

    @Test("Accept-Encoding: identity gets /gzip/ uncompressed, with its Content-Length", arguments: [Delivery.asyncData, .delegate, .download])
    func identityRequested(_ delivery: Delivery) async throws {
        var request = URLRequest(url: nginx.url("/gzip/64k.bin"))
        request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        let loaded = await load(request, via: delivery)
        #expect(loaded.error == nil)
        let response = try #require(loaded.response)
        #expect(response.value(forHTTPHeaderField: "Content-Encoding") == nil)
        #expect(response.expectedContentLength == 64 * 1024)
        #expect(loaded.body.map(Array.init) == NginxServer.fixtures["64k.bin"])
    }

    @Test("gzip_static's pre-compressed file decodes; expectedContentLength is the encoded length", arguments: ["hello.txt", "repeated.txt"], Delivery.allCases)
    func gzipStatic(_ name: String, _ delivery: Delivery) async throws {
        let fixture = try #require(NginxServer.staticGzipFixtures[name])
        let encodedLength = Int64(try Data(contentsOf: nginx.directory.appendingPathComponent("www/static-gz/\(name).gz")).count)
        let loaded = await load(URLRequest(url: nginx.url("/static-gz/\(name)")), via: delivery)
        #expect(loaded.error == nil)
        let response = try #require(loaded.response)
        #expect(response.value(forHTTPHeaderField: "Content-Encoding") == "gzip")
        #expect(response.expectedContentLength == encodedLength, "the length on the wire, as the server declared it")
        let body = try #require(loaded.body)
        #expect(Array(body) == fixture)
        if name == "repeated.txt" {
            #expect(Int64(body.count) > response.expectedContentLength, "the decoded body is longer than the declared length")
        }
    }

    @Test("with courierDecodesContent off, the body is delivered as coded, and the cache is neither written nor read", arguments: [Delivery.asyncData, .delegate, .download])
    func notDecoded(_ delivery: Delivery) async throws {
        let name = "repeated.txt"
        let encoded = try Data(contentsOf: nginx.directory.appendingPathComponent("www/static-gz/\(name).gz"))
        // Large enough for the decoded body: a cache keeps nothing above a twentieth of its size.
        let cache = URLCache(memoryCapacity: 16 << 20, diskCapacity: 0, diskPath: nil)
        func configuration(decoding: Bool) -> URLSessionConfiguration {
            let configuration = URLSessionConfiguration.ephemeral
            configuration.urlCache = cache
            configuration.courierDecodesContent = decoding
            return configuration
        }
        let request = URLRequest(url: nginx.url("/static-gz/\(name)"))
        let coded = await load(request, via: delivery, configuration: configuration(decoding: false))
        #expect(coded.error == nil, "\(String(describing: coded.error))")
        #expect(coded.response?.value(forHTTPHeaderField: "Content-Encoding") == "gzip")
        #expect(coded.body == encoded, "the gzip bytes nginx sent")
        #expect(cache.cachedResponse(for: request) == nil, "nothing coded went into a cache of decoded bodies")
        // A decoding session stores the same response (so it is one the cache keeps) ...
        let decoded = await load(request, via: delivery, configuration: configuration(decoding: true))
        #expect(decoded.body.map(Array.init) == NginxServer.staticGzipFixtures[name])
        #expect(cache.cachedResponse(for: request) != nil)
        // ... which a session that does not decode does not take.
        let again = await load(request, via: delivery, configuration: configuration(decoding: false))
        #expect(again.body == encoded)
    }

    @Test("metrics count the body bytes received and the bytes after decoding")
    func decodingMetrics() async throws {
        let name = "repeated.txt"
        let fixture = try #require(NginxServer.staticGzipFixtures[name])
        let encodedLength = Int64(try Data(contentsOf: nginx.directory.appendingPathComponent("www/static-gz/\(name).gz")).count)
        let loaded = await load(URLRequest(url: nginx.url("/static-gz/\(name)")), via: .delegate)
        #expect(loaded.error == nil)
        let transaction = try #require(loaded.record.metrics?.transactionMetrics.last)
        #expect(transaction.countOfResponseBodyBytesReceived == encodedLength)
        #expect(transaction.countOfResponseBodyBytesAfterDecoding == Int64(fixture.count))
    }

    // MARK: - httpbin

    @Test("httpbin's gzip, deflate and brotli responses decode", arguments: ["gzip", "deflate", "brotli"], Delivery.allCases)
    func httpbinCodings(_ path: String, _ delivery: Delivery) async throws {
        let httpbin = try HttpbinServer.shared()
        let loaded = await load(URLRequest(url: httpbin.url("/\(path)")), via: delivery)
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        let response = try #require(loaded.response)
        #expect(response.statusCode == 200)
        let field = ["gzip": "gzip", "deflate": "deflate", "brotli": "br"][path]
        #expect(response.value(forHTTPHeaderField: "Content-Encoding") == field)
        let reply = try HttpbinReply(loaded.body)
        switch path {
        case "gzip": #expect(reply.gzipped == true)
        case "deflate": #expect(reply.deflated == true)
        default: #expect(reply.brotli == true)
        }
        #expect(reply.method == "GET")
    }

    // MARK: - Broken and unknown codings

    @Test("a corrupt gzip body fails with cannotDecodeContentData", arguments: [
        // A gzip header, then a deflate block of the reserved type 3.
        [0x1F, 0x8B, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x01, 0x02, 0x03],
        // Not gzip at all.
        Array("this body was never compressed".utf8),
    ] as [[UInt8]])
    func corruptGzip(_ body: [UInt8]) async throws {
        let server = try Self.serving(body, headers: [("Content-Type", "text/plain"), ("Content-Encoding", "gzip")])
        for delivery in Delivery.allCases {
            let loaded = await load(URLRequest(url: server.url("/corrupt")), via: delivery)
            #expect(urlErrorCode(loaded.error) == .cannotDecodeContentData, "\(delivery): \(String(describing: loaded.error))")
        }
    }

    @Test("a gzip body cut short fails with cannotDecodeContentData, though its Content-Length is right", arguments: ["half", "near the end"])
    func truncatedGzip(_ cut: String) async throws {
        let plain = Array(String(repeating: "a line of text that compresses\n", count: 500).utf8) + deterministicBytes(count: 4000, seed: 77)
        let whole = try gzip(plain)
        // "near the end" loses the 8-byte trailer and the last bytes of the deflate stream.
        let truncated = Array(whole.prefix(cut == "half" ? whole.count / 2 : whole.count - 20))
        let server = try Self.serving(truncated, headers: [("Content-Type", "text/plain"), ("Content-Encoding", "gzip")])
        for delivery in [Delivery.asyncData, .delegate, .download] {
            let loaded = await load(URLRequest(url: server.url("/truncated")), via: delivery)
            #expect(urlErrorCode(loaded.error) == .cannotDecodeContentData, "\(delivery): \(String(describing: loaded.error))")
        }
        // The same body whole decodes: the cut is what fails.
        let intact = try Self.serving(whole, headers: [("Content-Encoding", "gzip")])
        let loaded = await load(URLRequest(url: intact.url("/whole")), via: .asyncData)
        #expect(loaded.error == nil)
        #expect(loaded.body.map(Array.init) == plain)
    }

    @Test("five stacked gzip codings decode; six fail with cannotDecodeContentData before any decoder is made", arguments: [5, 6])
    func stackedCodings(_ count: Int) async throws {
        let plain = Array("stacked codings\n".utf8)
        var body = plain
        for _ in 0..<count { body = try gzip(body) }
        let field = Array(repeating: "gzip", count: count).joined(separator: ", ")
        let server = try Self.serving(body, headers: [("Content-Type", "text/plain"), ("Content-Encoding", field)])
        for delivery in [Delivery.asyncData, .delegate, .download] {
            let loaded = await load(URLRequest(url: server.url("/stacked")), via: delivery)
            if count <= ContentDecodingLimits.default.maximumCodings {
                #expect(loaded.error == nil, "\(delivery): \(String(describing: loaded.error))")
                #expect(loaded.body.map(Array.init) == plain, "\(delivery)")
            } else {
                #expect(urlErrorCode(loaded.error) == .cannotDecodeContentData, "\(delivery): \(String(describing: loaded.error))")
            }
        }
    }

    @Test("a coding Courier does not know is delivered as received", arguments: Delivery.allCases)
    func unknownCoding(_ delivery: Delivery) async throws {
        let body = deterministicBytes(count: 3000, seed: 78)
        let server = try Self.serving(body, headers: [("Content-Type", "application/octet-stream"), ("Content-Encoding", "zstd")])
        let loaded = await load(URLRequest(url: server.url("/zstd")), via: delivery)
        #expect(loaded.error == nil)
        #expect(loaded.response?.value(forHTTPHeaderField: "Content-Encoding") == "zstd")
        #expect(loaded.body.map(Array.init) == body)
    }

    // MARK: - Decompression bombs

    /// 64 MiB of zeros, gzipped (about 64 KB: a ratio near deflate's maximum of 1032).
    static let bomb: Result<[UInt8], any Error> = Result {
        let directory = TestRun.makeDirectory("bomb")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("bomb.gz")
        try runTool("/bin/sh", ["-c", "head -c \(ContentDecodingTests.bombSize) /dev/zero | gzip -c -n > '\(file.path)'"])
        return Array(try Data(contentsOf: file))
    }

    static let bombSize = 64 * 1024 * 1024

    @Test("a decompression bomb fails with a clear URLError", arguments: [Delivery.asyncData, .delegate])
    func bombStopped(_ delivery: Delivery) async throws {
        let server = try Self.serving(try Self.bomb.get(), headers: [("Content-Type", "application/octet-stream"), ("Content-Encoding", "gzip")])
        let loaded = await load(URLRequest(url: server.url("/bomb")), via: delivery)
        let error = try #require(loaded.error as? URLError, "\(String(describing: loaded.error))")
        #expect([URLError.Code.cannotDecodeContentData, .dataLengthExceedsMaximum].contains(error.code), "\(error)")
        #expect(!error.localizedDescription.isEmpty)
        #expect(error.failingURL?.absoluteString == server.url("/bomb").absoluteString)
        #expect(loaded.body == nil)
    }

    @Test("with courierContentDecodingLimits raised, the same body decodes")
    func bombAllowed() async throws {
        let server = try Self.serving(try Self.bomb.get(), headers: [("Content-Type", "application/octet-stream"), ("Content-Encoding", "gzip")])
        let configuration = URLSessionConfiguration.uncached
        var limits = configuration.courierContentDecodingLimits
        limits.maximumDecodedBytes = 1_073_741_824
        limits.maximumRatio = 1_000_000
        limits.ratioCheckThreshold = 1_073_741_824
        configuration.courierContentDecodingLimits = limits
        let loaded = await load(URLRequest(url: server.url("/bomb")), via: .asyncData, configuration: configuration)
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        let body = try #require(loaded.body)
        #expect(body.count == Self.bombSize)
        #expect(body == Data(count: Self.bombSize), "all zeros")
    }
}

/// gzip-compresses bytes with the system's gzip (in every Debian system), in the test run's
/// directory.
func gzip(_ bytes: [UInt8]) throws -> [UInt8] {
    let directory = TestRun.makeDirectory("gzip")
    defer { try? FileManager.default.removeItem(at: directory) }
    let input = directory.appendingPathComponent("plain")
    try Data(bytes).write(to: input)
    try runTool("/bin/sh", ["-c", "gzip -c -n '\(input.path)' > '\(input.path).gz'"])
    return Array(try Data(contentsOf: directory.appendingPathComponent("plain.gz")))
}
