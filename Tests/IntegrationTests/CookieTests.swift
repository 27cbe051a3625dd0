@testable import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// Cookies through the session: stored from every response (redirects and 401s included),
/// sent with every request of a task, as the configuration and the request say; against
/// httpbin's `/cookies/…`, nginx's `add_header Set-Cookie` on 127.0.0.1 and localhost (two
/// hosts for the host-only rules), and scripted servers.
@Suite("CookieTests")
struct CookieTests {
    let httpbin: HttpbinServer
    let nginx: NginxServer

    init() throws {
        httpbin = try HttpbinServer.shared()
        nginx = try NginxServer.shared()
    }

    /// An ephemeral configuration with a jar of its own, accepting every cookie.
    func configuration(_ storage: HTTPCookieStorage = HTTPCookieStorage(store: .memory)) -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 10
        configuration.httpCookieStorage = storage
        configuration.httpCookieAcceptPolicy = .always
        return configuration
    }

    func cookiesSeen(by data: Data?) throws -> [String: String] {
        let object = try JSONSerialization.jsonObject(with: data ?? Data()) as? [String: Any]
        return object?["cookies"] as? [String: String] ?? [:]
    }

    @Test("httpbin: a cookie set on a redirect goes with the next hop", arguments: Delivery.allCases)
    func setOnRedirect(_ delivery: Delivery) async throws {
        let loaded = await load(URLRequest(url: httpbin.url("/cookies/set?flavour=oat&count=3")), via: delivery, configuration: configuration())
        #expect(loaded.error == nil, "\(String(describing: loaded.error))")
        #expect(loaded.response?.url?.path == "/cookies")
        #expect(try cookiesSeen(by: loaded.body) == ["flavour": "oat", "count": "3"])
    }

    @Test("httpbin: cookies persist across tasks of a session and /cookies/delete removes them")
    func acrossTasks() async throws {
        let storage = HTTPCookieStorage(store: .memory)
        let session = URLSession(configuration: configuration(storage))
        defer { session.finishTasksAndInvalidate() }
        _ = try await session.data(from: httpbin.url("/cookies/set?a=1&b=2"))
        let (seen, _) = try await session.data(from: httpbin.url("/cookies"))
        #expect(try cookiesSeen(by: seen) == ["a": "1", "b": "2"])
        let (afterDelete, _) = try await session.data(from: httpbin.url("/cookies/delete?a"))
        #expect(try cookiesSeen(by: afterDelete) == ["b": "2"])
        #expect(storage.cookies?.map(\.name) == ["b"])
        #expect(storage.cookies(for: httpbin.url("/"))?.first?.value == "2")
    }

    @Test("ephemeral sessions have jars of their own; sessions sharing a storage share cookies")
    func jarsPerStorage() async throws {
        let first = URLSession(configuration: configuration())
        let second = URLSession(configuration: configuration())
        defer {
            first.finishTasksAndInvalidate()
            second.finishTasksAndInvalidate()
        }
        _ = try await first.data(from: httpbin.url("/cookies/set?mine=1"))
        let (other, _) = try await second.data(from: httpbin.url("/cookies"))
        #expect(try cookiesSeen(by: other).isEmpty)

        let shared = HTTPCookieStorage(store: .memory)
        let third = URLSession(configuration: configuration(shared))
        let fourth = URLSession(configuration: configuration(shared))
        defer {
            third.finishTasksAndInvalidate()
            fourth.finishTasksAndInvalidate()
        }
        _ = try await third.data(from: httpbin.url("/cookies/set?ours=1"))
        let (together, _) = try await fourth.data(from: httpbin.url("/cookies"))
        #expect(try cookiesSeen(by: together) == ["ours": "1"])
    }

    @Test("no storage, httpShouldHandleCookies false, httpShouldSetCookies false, accept policy never")
    func switches() async throws {
        // No storage: nothing stored or sent.
        let none = configuration()
        none.httpCookieStorage = nil
        let bare = URLSession(configuration: none)
        defer { bare.finishTasksAndInvalidate() }
        let (noJar, _) = try await bare.data(from: httpbin.url("/cookies/set?x=1"))
        #expect(try cookiesSeen(by: noJar).isEmpty)

        // The request opts out: neither sent nor stored.
        let storage = HTTPCookieStorage(store: .memory)
        let session = URLSession(configuration: configuration(storage))
        defer { session.finishTasksAndInvalidate() }
        var optOut = URLRequest(url: httpbin.url("/cookies/set?y=1"))
        optOut.httpShouldHandleCookies = false
        let (optedOut, _) = try await session.data(for: optOut)
        #expect(try cookiesSeen(by: optedOut).isEmpty)
        #expect(storage.cookies == nil)

        // httpShouldSetCookies false: stored, not sent.
        let notSending = configuration(storage)
        notSending.httpShouldSetCookies = false
        let quiet = URLSession(configuration: notSending)
        defer { quiet.finishTasksAndInvalidate() }
        let (quietly, _) = try await quiet.data(from: httpbin.url("/cookies/set?z=1"))
        #expect(try cookiesSeen(by: quietly).isEmpty)
        #expect(storage.cookies?.map(\.name) == ["z"])

        // Accept policy never: not stored.
        let closed = configuration(HTTPCookieStorage(store: .memory))
        closed.httpCookieAcceptPolicy = .never
        let refusing = URLSession(configuration: closed)
        defer { refusing.finishTasksAndInvalidate() }
        let (refused, _) = try await refusing.data(from: httpbin.url("/cookies/set?w=1"))
        #expect(try cookiesSeen(by: refused).isEmpty)
        #expect(closed.httpCookieStorage?.cookies == nil)
    }

    @Test("onlyFromMainDocumentDomain refuses cookies for a request made for another site")
    func mainDocumentDomain() async throws {
        let storage = HTTPCookieStorage(store: .memory)
        let configuration = configuration(storage)
        configuration.httpCookieAcceptPolicy = .onlyFromMainDocumentDomain
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        var foreign = URLRequest(url: nginx.url("/cookie/set"))
        foreign.mainDocumentURL = URL(string: "http://elsewhere.invalid/")
        _ = try await session.data(for: foreign)
        #expect(storage.cookies == nil)
        var own = URLRequest(url: nginx.url("/cookie/set"))
        own.mainDocumentURL = nginx.url("/index.html")
        _ = try await session.data(for: own)
        #expect(Set(storage.cookies?.map(\.name) ?? []) == ["nginx", "lasting"])
    }

    @Test("nginx: host-only cookies go back to 127.0.0.1, not to localhost; paths and expiry apply")
    func hostOnlyAndPaths() async throws {
        let storage = HTTPCookieStorage(store: .memory)
        let session = URLSession(configuration: configuration(storage))
        defer { session.finishTasksAndInvalidate() }
        _ = try await session.data(from: nginx.url("/cookie/set"))
        let (echoed, _) = try await session.data(from: nginx.url("/echo"))
        #expect(try EchoReply(echoed).header("Cookie") == "nginx=host-only")
        let localhost = nginx.url("/echo").absoluteString.replacingOccurrences(of: "127.0.0.1", with: "localhost")
        let (other, _) = try await session.data(from: URL(string: localhost)!)
        #expect(try EchoReply(other).header("Cookie") == nil)
        // Max-Age=0 removes it.
        _ = try await session.data(from: nginx.url("/cookie/expire"))
        #expect(storage.cookies?.map(\.name) == ["lasting"])
        #expect(storage.cookies?.first?.path == "/cookie")
        #expect(storage.cookies?.first?.isSessionOnly == false)
    }

    @Test("a Secure HttpOnly cookie from loopback http is kept and sent (loopback counts as secure)")
    func secureOnLoopback() async throws {
        let storage = HTTPCookieStorage(store: .memory)
        let session = URLSession(configuration: configuration(storage))
        defer { session.finishTasksAndInvalidate() }
        _ = try await session.data(from: nginx.url("/cookie/secure"))
        let (echoed, _) = try await session.data(from: nginx.url("/echo"))
        #expect(try EchoReply(echoed).header("Cookie") == "guarded=1")
        #expect(storage.cookies?.first?.isSecure == true)
        #expect(storage.cookies?.first?.isHTTPOnly == true)
    }

    @Test("order: longer paths first, then older; a caller's Cookie is merged before the jar's")
    func orderAndMerge() async throws {
        let server = try AnsweringServer { request, _ in
            switch request.target {
            case "/set":
                return AnsweringServer.Answer(headers: [
                    ("Set-Cookie", "root=1; Path=/"), ("Set-Cookie", "deep=3; Path=/a/b"), ("Set-Cookie", "mid=2; Path=/a"),
                    ("Set-Cookie", "other=4; Path=/x"),
                ], body: [])
            default:
                return .ok(request.header("Cookie") ?? "")
            }
        }
        let session = URLSession(configuration: configuration())
        defer { session.finishTasksAndInvalidate() }
        _ = try await session.data(from: server.url("/set"))
        let (ordered, _) = try await session.data(from: server.url("/a/b/c"))
        #expect(String(decoding: ordered, as: UTF8.self) == "deep=3; mid=2; root=1")
        var request = URLRequest(url: server.url("/a"))
        request.setValue("mine=0", forHTTPHeaderField: "Cookie")
        let (merged, _) = try await session.data(for: request)
        #expect(String(decoding: merged, as: UTF8.self) == "mine=0; mid=2; root=1")
    }

    @Test("a cookie set with a 401 goes with the authenticated retry")
    func setOnChallenge() async throws {
        let server = try AnsweringServer { request, _ in
            guard request.header("Authorization") != nil else {
                return AnsweringServer.Answer(status: 401, reason: "Unauthorized", headers: [("WWW-Authenticate", "Basic realm=\"r\""), ("Set-Cookie", "challenge=seen")], body: [])
            }
            return .ok(request.header("Cookie") ?? "none")
        }
        let answerer = ChallengeAnswerer(user: "u", password: "p")
        let session = URLSession(configuration: configuration(), delegate: answerer, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (data, _) = try await session.data(from: server.url("/"))
        #expect(String(decoding: data, as: UTF8.self) == "challenge=seen")
    }

    @Test("the caller's Cookie is dropped on a cross-origin redirect; the jar's cookies follow their own rules")
    func crossOriginRedirect() async throws {
        let other = try AnsweringServer { request, _ in .ok(request.header("Cookie") ?? "none") }
        let server = try AnsweringServer { request, _ in
            .init(status: 302, reason: "Found", headers: [("Location", other.url("/landing").absoluteString), ("Set-Cookie", "first=1")], body: [])
        }
        let session = URLSession(configuration: configuration())
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: server.url("/start"))
        request.setValue("secret=1", forHTTPHeaderField: "Cookie")
        let (data, _) = try await session.data(for: request)
        // Cookies do not tell ports apart (RFC 6265bis §8.5): the jar's host-only cookie for
        // 127.0.0.1 goes to the other port too; the caller's field does not cross origins.
        #expect(String(decoding: data, as: UTF8.self) == "first=1")
    }

    @Test("the storage posts NSHTTPCookieManagerCookiesChanged when a response changes it")
    func notification() async throws {
        let storage = HTTPCookieStorage(store: .memory)
        let posted = Mutex(0)
        let observer = NotificationCenter.default.addObserver(forName: .NSHTTPCookieManagerCookiesChanged, object: storage, queue: nil) { _ in
            posted.withLock { $0 += 1 }
        }
        defer { NotificationCenter.default.removeObserver(observer) }
        let session = URLSession(configuration: configuration(storage))
        defer { session.finishTasksAndInvalidate() }
        _ = try await session.data(from: nginx.url("/cookie/set"))
        storage.flush()
        #expect(posted.withLock { $0 } == 1)
        _ = try await session.data(from: nginx.url("/echo"))
        storage.flush()
        #expect(posted.withLock { $0 } == 1, "a request that sets nothing changes nothing")
    }

    @Test("persistent cookies survive in the file; session cookies never reach it")
    func persistence() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("courier-cookies-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("cookies.sqlite")
        let storage = HTTPCookieStorage(store: .file(file))
        let session = URLSession(configuration: configuration(storage))
        defer { session.finishTasksAndInvalidate() }
        _ = try await session.data(from: nginx.url("/cookie/set"))
        storage.flush()
        let reopened = HTTPCookieStorage(store: .file(file))
        #expect(reopened.cookies?.map(\.name) == ["lasting"], "the session cookie stays in memory")
        let attributes = try FileManager.default.attributesOfItem(atPath: file.path)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
    }
}
