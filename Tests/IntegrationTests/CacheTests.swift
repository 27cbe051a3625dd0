@testable import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// The session's HTTP cache (RFC 9111, private): fresh hits that send nothing (the scripted
/// server counts what arrives), conditional requests and 304 merging, Vary, Age, the request
/// cache policies, invalidation by unsafe methods, `willCacheResponse`, and nginx's own
/// `expires`, `Cache-Control`, ETag and Last-Modified.
@Suite("CacheTests")
struct CacheTests {
    let nginx: NginxServer

    init() throws {
        nginx = try NginxServer.shared()
    }

    /// An ephemeral configuration with a cache of its own (memory only).
    func configuration(_ cache: URLCache = URLCache(memoryCapacity: 4 * 1024 * 1024, diskCapacity: 0, directory: nil)) -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 10
        configuration.urlCache = cache
        return configuration
    }

    /// A server answering each request with `answer(request, count so far)`.
    func server(_ answer: @escaping @Sendable (ScriptedRequest, Int) -> AnsweringServer.Answer) throws -> AnsweringServer {
        let counter = Mutex(0)
        return try AnsweringServer { request, _ in
            let count = counter.withLock { value -> Int in
                value += 1
                return value
            }
            return answer(request, count)
        }
    }

    static func text(_ data: Data?) -> String? { data.map { String(decoding: $0, as: UTF8.self) } }

    @Test("a fresh response is answered from the cache without a request", arguments: Delivery.allCases)
    func freshHit(_ delivery: Delivery) async throws {
        let origin = try server { _, count in
            AnsweringServer.Answer(headers: [("Cache-Control", "max-age=3600"), ("Content-Type", "text/plain")], body: Array("version \(count)".utf8))
        }
        let configuration = configuration()
        let first = await load(URLRequest(url: origin.url("/fresh")), via: delivery, configuration: configuration)
        // What the cache holds between the loads, for the message should the second miss (it
        // did once in a full run, on a loaded machine, and never alone).
        let held = configuration.urlCache?.cachedResponse(for: URLRequest(url: origin.url("/fresh")))
        let heldText = held.map { "stored \($0.data.count) bytes, request \($0.requestTime), response \($0.responseTime), now \(Date())" } ?? "nothing stored"
        let second = await load(URLRequest(url: origin.url("/fresh")), via: delivery, configuration: configuration)
        #expect(Self.text(first.body) == "version 1", "\(String(describing: first.error))")
        #expect(Self.text(second.body) == "version 1", "\(heldText); first: \(String(describing: first.error)) \(first.record.events)")
        #expect(second.response?.statusCode == 200)
        #expect(second.response?.value(forHTTPHeaderField: "Cache-Control") == "max-age=3600")
        #expect(origin.requests.count == 1)
    }

    @Test("the metrics of a hit say localCache; of a load, networkLoad")
    func metricsFetchType() async throws {
        let origin = try server { _, _ in AnsweringServer.Answer(headers: [("Cache-Control", "max-age=3600")], body: Array("x".utf8)) }
        let configuration = configuration()
        // Through the delegate: its metrics arrive before the completion the load waits for.
        let miss = await load(URLRequest(url: origin.url("/m")), via: .delegate, configuration: configuration)
        let hit = await load(URLRequest(url: origin.url("/m")), via: .delegate, configuration: configuration)
        #expect(miss.record.metrics?.transactionMetrics.map(\.resourceFetchType) == [.networkLoad])
        #expect(hit.record.metrics?.transactionMetrics.map(\.resourceFetchType) == [.localCache])
    }

    @Test("no-store, and a response without freshness or validators, go to the network each time")
    func notStored() async throws {
        for headers in [[("Cache-Control", "no-store, max-age=3600")], [("Cache-Control", "private, no-store")]] {
            let origin = try server { _, count in AnsweringServer.Answer(headers: headers, body: Array("n\(count)".utf8)) }
            let configuration = configuration()
            _ = await load(URLRequest(url: origin.url("/x")), via: .asyncData, configuration: configuration)
            let again = await load(URLRequest(url: origin.url("/x")), via: .asyncData, configuration: configuration)
            #expect(Self.text(again.body) == "n2")
            #expect(origin.requests.count == 2)
        }
    }

    @Test("a stale response is revalidated with If-None-Match; the 304 is merged into the stored 200", arguments: [Delivery.completionHandler, .delegate, .asyncData, .download])
    func revalidateETag(_ delivery: Delivery) async throws {
        let origin = try server { request, count in
            if request.header("If-None-Match") == "\"v1\"" {
                return AnsweringServer.Answer(status: 304, reason: "Not Modified", headers: [("ETag", "\"v1\""), ("X-Checked", "\(count)"), ("Cache-Control", "no-cache")], body: [])
            }
            return AnsweringServer.Answer(headers: [("ETag", "\"v1\""), ("Cache-Control", "no-cache"), ("X-Checked", "\(count)"), ("Content-Type", "text/plain")], body: Array("the stored body".utf8))
        }
        let configuration = configuration()
        _ = await load(URLRequest(url: origin.url("/doc")), via: delivery, configuration: configuration)
        let second = await load(URLRequest(url: origin.url("/doc")), via: delivery, configuration: configuration)
        #expect(second.error == nil, "\(String(describing: second.error))")
        #expect(second.response?.statusCode == 200)
        #expect(Self.text(second.body) == "the stored body")
        #expect(second.response?.value(forHTTPHeaderField: "X-Checked") == "2", "the 304's fields replace the stored ones")
        #expect(second.response?.value(forHTTPHeaderField: "Content-Type") == "text/plain")
        #expect(origin.requests.count == 2)
        #expect(origin.requests.last?.header("If-None-Match") == "\"v1\"")
    }

    @Test("Last-Modified gives If-Modified-Since; a 200 to it replaces the stored response")
    func revalidateLastModified() async throws {
        let stamp = "Sun, 06 Nov 1994 08:49:37 GMT"
        let origin = try server { request, count in
            if count == 3, request.header("If-Modified-Since") == stamp {
                return AnsweringServer.Answer(headers: [("Last-Modified", "Mon, 07 Nov 1994 08:49:37 GMT"), ("Cache-Control", "max-age=0")], body: Array("changed".utf8))
            }
            if request.header("If-Modified-Since") == stamp {
                return AnsweringServer.Answer(status: 304, reason: "Not Modified", headers: [], body: [])
            }
            return AnsweringServer.Answer(headers: [("Last-Modified", stamp), ("Cache-Control", "max-age=0")], body: Array("original".utf8))
        }
        let configuration = configuration()
        let first = await load(URLRequest(url: origin.url("/lm")), via: .asyncData, configuration: configuration)
        let second = await load(URLRequest(url: origin.url("/lm")), via: .asyncData, configuration: configuration)
        let third = await load(URLRequest(url: origin.url("/lm")), via: .asyncData, configuration: configuration)
        #expect([first, second, third].map { Self.text($0.body) } == ["original", "original", "changed"])
        #expect(origin.requests.dropFirst().allSatisfy { $0.header("If-Modified-Since") == stamp })
    }

    @Test("Vary: a stored response answers only requests whose varying fields match")
    func vary() async throws {
        let origin = try server { request, count in
            AnsweringServer.Answer(headers: [("Cache-Control", "max-age=3600"), ("Vary", "Accept-Language")], body: Array("\(request.header("Accept-Language") ?? "-") \(count)".utf8))
        }
        let configuration = configuration()
        func get(_ language: String) async -> String? {
            var request = URLRequest(url: origin.url("/v"))
            request.setValue(language, forHTTPHeaderField: "Accept-Language")
            return Self.text(await load(request, via: .asyncData, configuration: configuration).body)
        }
        #expect(await get("en") == "en 1")
        #expect(await get("en") == "en 1")
        #expect(await get("de") == "de 2")
        #expect(origin.requests.count == 2)
    }

    @Test("Age counts: max-age=10 with Age: 30 is stale on arrival")
    func ageCounts() async throws {
        let origin = try server { _, count in AnsweringServer.Answer(headers: [("Cache-Control", "max-age=10"), ("Age", "30")], body: Array("a\(count)".utf8)) }
        let configuration = configuration()
        _ = await load(URLRequest(url: origin.url("/age")), via: .asyncData, configuration: configuration)
        let again = await load(URLRequest(url: origin.url("/age")), via: .asyncData, configuration: configuration)
        #expect(Self.text(again.body) == "a2")
    }

    @Test("odd dates: Expires 0 is already expired; an RFC 850 Expires counts; Expires before Date is stale", arguments: [
        ("Expires", "0", false),
        ("Expires", "Sunday, 06-Nov-44 08:49:37 GMT", true),
        ("Expires", "Thu, 01 Jan 1970 00:00:00 GMT", false),
        ("Expires", "Wed, 01 Jan 2048 00:00:00 GMT", true),
    ])
    func oddDates(_ name: String, _ value: String, _ fresh: Bool) async throws {
        let origin = try server { _, count in AnsweringServer.Answer(headers: [(name, value)], body: Array("d\(count)".utf8)) }
        let configuration = configuration()
        _ = await load(URLRequest(url: origin.url("/d")), via: .asyncData, configuration: configuration)
        let again = await load(URLRequest(url: origin.url("/d")), via: .asyncData, configuration: configuration)
        #expect(Self.text(again.body) == (fresh ? "d1" : "d2"), "\(name): \(value)")
    }

    @Test("request cache policies: returnCacheDataElseLoad, returnCacheDataDontLoad, reloadIgnoringLocalCacheData, reloadRevalidatingCacheData")
    func policies() async throws {
        let origin = try server { request, count in
            if request.header("If-None-Match") == "\"e\"" {
                return AnsweringServer.Answer(status: 304, reason: "Not Modified", headers: [], body: [])
            }
            return AnsweringServer.Answer(headers: [("Cache-Control", "max-age=0"), ("ETag", "\"e\"")], body: Array("p\(count)".utf8))
        }
        let configuration = configuration()
        // Nothing stored: DontLoad fails without a request.
        var dontLoad = URLRequest(url: origin.url("/p"))
        dontLoad.cachePolicy = .returnCacheDataDontLoad
        let failed = await load(dontLoad, via: .completionHandler, configuration: configuration)
        #expect(urlErrorCode(failed.error) == .resourceUnavailable)
        #expect(origin.requests.isEmpty)

        _ = await load(URLRequest(url: origin.url("/p")), via: .asyncData, configuration: configuration)
        #expect(origin.requests.count == 1)
        // Stale, but these two take what is stored.
        var elseLoad = URLRequest(url: origin.url("/p"))
        elseLoad.cachePolicy = .returnCacheDataElseLoad
        #expect(Self.text(await load(elseLoad, via: .asyncData, configuration: configuration).body) == "p1")
        #expect(Self.text(await load(dontLoad, via: .asyncData, configuration: configuration).body) == "p1")
        #expect(origin.requests.count == 1)
        // Ignoring the cache: a plain request.
        var reload = URLRequest(url: origin.url("/p"))
        reload.cachePolicy = .reloadIgnoringLocalCacheData
        #expect(Self.text(await load(reload, via: .asyncData, configuration: configuration).body) == "p2")
        #expect(origin.requests.last?.header("If-None-Match") == nil)
        // Revalidating: a conditional request, answered 304 from the stored body.
        var revalidating = URLRequest(url: origin.url("/p"))
        revalidating.cachePolicy = .reloadRevalidatingCacheData
        #expect(Self.text(await load(revalidating, via: .asyncData, configuration: configuration).body) == "p2")
        #expect(origin.requests.last?.header("If-None-Match") == "\"e\"")
    }

    @Test("a successful POST invalidates the stored GET of its URL")
    func invalidation() async throws {
        let origin = try server { request, count in
            AnsweringServer.Answer(headers: [("Cache-Control", "max-age=3600")], body: Array("\(request.method) \(count)".utf8))
        }
        let configuration = configuration()
        #expect(Self.text(await load(URLRequest(url: origin.url("/item")), via: .asyncData, configuration: configuration).body) == "GET 1")
        #expect(Self.text(await load(URLRequest(url: origin.url("/item")), via: .asyncData, configuration: configuration).body) == "GET 1")
        var post = URLRequest(url: origin.url("/item"))
        post.httpMethod = "POST"
        post.httpBody = Data("change".utf8)
        _ = await load(post, via: .asyncData, configuration: configuration)
        #expect(Self.text(await load(URLRequest(url: origin.url("/item")), via: .asyncData, configuration: configuration).body) == "GET 3")
    }

    @Test("willCacheResponse comes after the data and before the metrics; nil stores nothing, a replacement is stored")
    func willCacheResponse() async throws {
        let origin = try server { _, count in AnsweringServer.Answer(headers: [("Cache-Control", "max-age=3600")], body: Array("w\(count)".utf8)) }
        let configuration = URLSessionConfiguration.default
        configuration.urlCache = URLCache(memoryCapacity: 1 << 20, diskCapacity: 0, directory: nil)
        let refusing = RedirectRecorder(decideCache: { _ in nil })
        let refused = await load(URLRequest(url: origin.url("/refused")), via: .delegate, configuration: configuration, recorder: refusing)
        #expect(refused.record.collapsedEvents == ["response", "data", "willCache", "metrics", "complete"])
        _ = await load(URLRequest(url: origin.url("/refused")), via: .delegate, configuration: configuration, recorder: RedirectRecorder(decideCache: { _ in nil }))
        #expect(origin.requests.count == 2)

        let replacing = RedirectRecorder(decideCache: { proposed in
            CachedURLResponse(response: proposed.response, data: Data("replaced".utf8), userInfo: ["by": "test"], storagePolicy: .allowedInMemoryOnly)
        })
        _ = await load(URLRequest(url: origin.url("/replaced")), via: .delegate, configuration: configuration, recorder: replacing)
        let hit = await load(URLRequest(url: origin.url("/replaced")), via: .asyncData, configuration: configuration)
        #expect(Self.text(hit.body) == "replaced")
        #expect(origin.requests.count == 3)
    }

    @Test("stale-if-error: a 503, or a connection that dies, is answered with the stale stored response")
    func staleIfError() async throws {
        let origin = try server { _, count in
            count == 1
                ? AnsweringServer.Answer(headers: [("Cache-Control", "max-age=0, stale-if-error=3600")], body: Array("good".utf8))
                : AnsweringServer.Answer(status: 503, reason: "Unavailable", headers: [], body: Array("down".utf8))
        }
        let configuration = configuration()
        _ = await load(URLRequest(url: origin.url("/s")), via: .asyncData, configuration: configuration)
        let fallback = await load(URLRequest(url: origin.url("/s")), via: .asyncData, configuration: configuration)
        #expect(Self.text(fallback.body) == "good")
        #expect(fallback.response?.statusCode == 200)
        #expect(origin.requests.count == 2)

        // Without stale-if-error the 503 is the answer.
        let strict = try server { _, count in
            count == 1
                ? AnsweringServer.Answer(headers: [("Cache-Control", "max-age=0")], body: Array("good".utf8))
                : AnsweringServer.Answer(status: 503, reason: "Unavailable", headers: [], body: Array("down".utf8))
        }
        _ = await load(URLRequest(url: strict.url("/s")), via: .asyncData, configuration: configuration)
        let plain = await load(URLRequest(url: strict.url("/s")), via: .asyncData, configuration: configuration)
        #expect(plain.response?.statusCode == 503)

        // A connection closed without an answer.
        let served = Mutex(0)
        let dying = try ScriptedServer { connection in
            while connection.readRequest(timeout: 5) != nil {
                let first = served.withLock { value -> Bool in
                    value += 1
                    return value == 1
                }
                guard first else {
                    connection.close()
                    return
                }
                connection.respond(headers: [("Cache-Control", "max-age=0, stale-if-error=3600"), ("Content-Length", "4")], body: Array("kept".utf8))
            }
        }
        _ = await load(URLRequest(url: dying.url("/d")), via: .asyncData, configuration: configuration)
        let rescued = await load(URLRequest(url: dying.url("/d")), via: .asyncData, configuration: configuration)
        #expect(rescued.error == nil, "\(String(describing: rescued.error))")
        #expect(Self.text(rescued.body) == "kept")
    }

    @Test("a 200 to HEAD with the same validator refreshes the stored GET's fields")
    func headRefreshes() async throws {
        let origin = try server { request, count in
            AnsweringServer.Answer(headers: [("Cache-Control", "max-age=3600"), ("ETag", "\"h\""), ("X-Version", "\(count)")], body: request.method == "HEAD" ? [] : Array("body".utf8))
        }
        let cache = URLCache(memoryCapacity: 1 << 20, diskCapacity: 0, directory: nil)
        let configuration = configuration(cache)
        _ = await load(URLRequest(url: origin.url("/h")), via: .asyncData, configuration: configuration)
        var head = URLRequest(url: origin.url("/h"))
        head.httpMethod = "HEAD"
        _ = await load(head, via: .asyncData, configuration: configuration)
        let stored = cache.cachedResponse(for: URLRequest(url: origin.url("/h")))
        #expect((stored?.response as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Version") == "2")
        #expect(stored.map { Self.text($0.data) } == "body")
    }

    @Test("ephemeral sessions keep private caches")
    func privateCaches() async throws {
        let origin = try server { _, count in AnsweringServer.Answer(headers: [("Cache-Control", "max-age=3600")], body: Array("e\(count)".utf8)) }
        let first = URLSession(configuration: .ephemeral)
        let second = URLSession(configuration: .ephemeral)
        defer {
            first.finishTasksAndInvalidate()
            second.finishTasksAndInvalidate()
        }
        let (a, _) = try await first.data(from: origin.url("/e"))
        let (b, _) = try await second.data(from: origin.url("/e"))
        let (c, _) = try await first.data(from: origin.url("/e"))
        #expect([a, b, c].map { Self.text($0) } == ["e1", "e2", "e1"])
    }

    @Test("nginx: expires and Cache-Control give hits; ETag and no-cache give 304 revalidations", arguments: ["/cache/expires/hello.txt", "/cache/max-age/hello.txt", "/cache/no-cache/hello.txt"])
    func nginxHeaders(_ path: String) async throws {
        let configuration = configuration()
        let first = await load(URLRequest(url: nginx.url(path)), via: .delegate, configuration: configuration)
        let second = await load(URLRequest(url: nginx.url(path)), via: .delegate, configuration: configuration)
        #expect(first.body.map(Array.init) == NginxServer.fixtures["hello.txt"])
        #expect(second.body.map(Array.init) == NginxServer.fixtures["hello.txt"])
        #expect(second.response?.statusCode == 200)
        let transactions = second.record.metrics?.transactionMetrics ?? []
        if path.contains("no-cache") {
            #expect(transactions.map(\.resourceFetchType) == [.networkLoad])
            #expect(transactions.first?.countOfResponseBodyBytesReceived == 0, "a 304 carries no body")
        } else {
            #expect(transactions.map(\.resourceFetchType) == [.localCache])
        }
    }
}
