import Courier
import Foundation
import Testing

private let exampleURL = URL(string: "https://example.com/path?q=1")!

@Suite("URLRequest")
struct URLRequestTests {
    // MARK: Defaults

    @Test("a new request has Apple's defaults")
    func defaults() {
        let request = URLRequest(url: exampleURL)
        #expect(request.url == exampleURL)
        #expect(request.httpMethod == "GET")
        #expect(request.timeoutInterval == 60)
        #expect(request.cachePolicy == .useProtocolCachePolicy)
        #expect(request.httpShouldHandleCookies)
        #expect(request.allowsCellularAccess)
        #expect(request.networkServiceType == .default)
        #expect(request.mainDocumentURL == nil)
        #expect(request.allHTTPHeaderFields == nil)
        #expect(request.httpBody == nil)
        #expect(request.httpBodyStream == nil)
    }

    @Test("init(url:cachePolicy:timeoutInterval:) keeps its arguments")
    func initArguments() {
        let request = URLRequest(url: exampleURL, cachePolicy: .returnCacheDataDontLoad, timeoutInterval: 12.5)
        #expect(request.cachePolicy == .returnCacheDataDontLoad)
        #expect(request.timeoutInterval == 12.5)
        #expect(request.httpMethod == "GET")
    }

    @Test("properties can be set and read back")
    func settableProperties() {
        var request = URLRequest(url: exampleURL)
        let other = URL(string: "http://other.example/")!
        request.url = other
        request.timeoutInterval = 5
        request.cachePolicy = .reloadIgnoringLocalAndRemoteCacheData
        request.httpShouldHandleCookies = false
        request.mainDocumentURL = exampleURL
        request.allowsCellularAccess = false
        #expect(request.url == other)
        #expect(request.timeoutInterval == 5)
        #expect(request.cachePolicy == .reloadIgnoringLocalAndRemoteCacheData)
        #expect(!request.httpShouldHandleCookies)
        #expect(request.mainDocumentURL == exampleURL)
        #expect(!request.allowsCellularAccess)
    }

    @Test("cache policies have Apple's raw values, and reloadIgnoringCacheData is an alias")
    func cachePolicyValues() {
        #expect(URLRequest.CachePolicy.useProtocolCachePolicy.rawValue == 0)
        #expect(URLRequest.CachePolicy.reloadIgnoringLocalCacheData.rawValue == 1)
        #expect(URLRequest.CachePolicy.reloadIgnoringLocalAndRemoteCacheData.rawValue == 4)
        #expect(URLRequest.CachePolicy.returnCacheDataElseLoad.rawValue == 2)
        #expect(URLRequest.CachePolicy.returnCacheDataDontLoad.rawValue == 3)
        #expect(URLRequest.CachePolicy.reloadRevalidatingCacheData.rawValue == 5)
        #expect(URLRequest.CachePolicy.reloadIgnoringCacheData == .reloadIgnoringLocalCacheData)
    }

    // MARK: Method

    @Test("common methods are upper-cased", arguments: [
        ("get", "GET"), ("Get", "GET"), ("GET", "GET"), ("post", "POST"), ("Post", "POST"), ("put", "PUT"),
        ("delete", "DELETE"), ("head", "HEAD"), ("connect", "CONNECT"),
    ])
    func commonMethodsUpperCased(_ given: String, _ expected: String) {
        var request = URLRequest(url: exampleURL)
        request.httpMethod = given
        #expect(request.httpMethod == expected)
    }

    @Test("other methods are kept exactly as given", arguments: ["PROPFIND", "purge", "MkCol", "X-Custom", "REPORT"])
    func customMethodsPreserved(_ method: String) {
        var request = URLRequest(url: exampleURL)
        request.httpMethod = method
        #expect(request.httpMethod == method)
    }

    @Test("setting the method to nil restores GET")
    func nilMethodIsGet() {
        var request = URLRequest(url: exampleURL)
        request.httpMethod = "POST"
        request.httpMethod = nil
        #expect(request.httpMethod == "GET")
    }

    // MARK: Header fields

    @Test("a header name keeps the case it was first set with; later sets change only the value")
    func headerNameKeepsFirstCase() {
        var request = URLRequest(url: exampleURL)
        request.setValue("application/json", forHTTPHeaderField: "x-api-KEY")
        request.setValue("text/plain", forHTTPHeaderField: "X-API-Key")
        #expect(request.allHTTPHeaderFields == ["x-api-KEY": "text/plain"])
    }

    @Test("lookup ignores case", arguments: ["Content-Type", "content-type", "CONTENT-TYPE", "cOnTeNt-tYpE"])
    func lookupIgnoresCase(_ name: String) {
        var request = URLRequest(url: exampleURL)
        request.setValue("text/html", forHTTPHeaderField: "Content-Type")
        #expect(request.value(forHTTPHeaderField: name) == "text/html")
    }

    @Test("lookup of an absent field is nil")
    func lookupAbsent() {
        var request = URLRequest(url: exampleURL)
        #expect(request.value(forHTTPHeaderField: "Accept") == nil)
        request.setValue("x", forHTTPHeaderField: "Accept-Language")
        #expect(request.value(forHTTPHeaderField: "Accept") == nil)
    }

    @Test("setValue replaces the value")
    func setValueReplaces() {
        var request = URLRequest(url: exampleURL)
        request.setValue("a", forHTTPHeaderField: "Accept")
        request.setValue("b", forHTTPHeaderField: "accept")
        #expect(request.value(forHTTPHeaderField: "Accept") == "b")
        #expect(request.allHTTPHeaderFields?.count == 1)
    }

    @Test("setValue(nil) removes the field, in any case; removing an absent field does nothing")
    func setNilRemoves() {
        var request = URLRequest(url: exampleURL)
        request.setValue("a", forHTTPHeaderField: "Accept")
        request.setValue("1", forHTTPHeaderField: "X-Keep")
        request.setValue(nil, forHTTPHeaderField: "ACCEPT")
        #expect(request.value(forHTTPHeaderField: "Accept") == nil)
        #expect(request.allHTTPHeaderFields == ["X-Keep": "1"])
        request.setValue(nil, forHTTPHeaderField: "Missing")
        #expect(request.allHTTPHeaderFields == ["X-Keep": "1"])
        request.setValue(nil, forHTTPHeaderField: "x-keep")
        #expect(request.allHTTPHeaderFields == nil)
    }

    @Test("addValue joins values with a comma and no space")
    func addValueJoins() {
        var request = URLRequest(url: exampleURL)
        request.addValue("text/html", forHTTPHeaderField: "Accept")
        request.addValue("application/json", forHTTPHeaderField: "accept")
        request.addValue("*/*", forHTTPHeaderField: "ACCEPT")
        #expect(request.value(forHTTPHeaderField: "Accept") == "text/html,application/json,*/*")
        #expect(request.allHTTPHeaderFields == ["Accept": "text/html,application/json,*/*"])
    }

    @Test("addValue to an absent field sets it; setValue afterwards replaces the joined value")
    func addThenSet() {
        var request = URLRequest(url: exampleURL)
        request.addValue("1", forHTTPHeaderField: "X-Count")
        #expect(request.value(forHTTPHeaderField: "x-count") == "1")
        request.addValue("2", forHTTPHeaderField: "X-Count")
        request.setValue("3", forHTTPHeaderField: "X-COUNT")
        #expect(request.allHTTPHeaderFields == ["X-Count": "3"])
    }

    @Test("allHTTPHeaderFields round-trips a dictionary")
    func allHeaderFieldsRoundTrip() {
        var request = URLRequest(url: exampleURL)
        let fields = ["Accept": "*/*", "X-Custom": "v", "authorization": "Bearer t", "Content-Type": "text/plain"]
        request.allHTTPHeaderFields = fields
        #expect(request.allHTTPHeaderFields == fields)
        #expect(request.value(forHTTPHeaderField: "Authorization") == "Bearer t")
        #expect(request.value(forHTTPHeaderField: "content-type") == "text/plain")
    }

    @Test("assigning allHTTPHeaderFields replaces every field; nil clears them")
    func allHeaderFieldsReplaces() {
        var request = URLRequest(url: exampleURL)
        request.setValue("old", forHTTPHeaderField: "X-Old")
        request.allHTTPHeaderFields = ["X-New": "new"]
        #expect(request.value(forHTTPHeaderField: "X-Old") == nil)
        #expect(request.allHTTPHeaderFields == ["X-New": "new"])
        request.allHTTPHeaderFields = nil
        #expect(request.allHTTPHeaderFields == nil)
        #expect(request.value(forHTTPHeaderField: "X-New") == nil)
    }

    // MARK: Body

    @Test("httpBody is kept")
    func httpBodyKept() {
        var request = URLRequest(url: exampleURL)
        request.httpBody = Data("payload".utf8)
        #expect(request.httpBody == Data("payload".utf8))
        #expect(request.httpBodyStream == nil)
        request.httpBody = nil
        #expect(request.httpBody == nil)
    }

    @Test("setting httpBodyStream clears httpBody")
    func streamClearsBody() {
        var request = URLRequest(url: exampleURL)
        request.httpBody = Data("payload".utf8)
        let stream = InputStream(data: Data("streamed".utf8))
        request.httpBodyStream = stream
        #expect(request.httpBody == nil)
        #expect(request.httpBodyStream === stream)
    }

    @Test("setting httpBody clears httpBodyStream")
    func bodyClearsStream() {
        var request = URLRequest(url: exampleURL)
        request.httpBodyStream = InputStream(data: Data("streamed".utf8))
        request.httpBody = Data("payload".utf8)
        #expect(request.httpBodyStream == nil)
        #expect(request.httpBody == Data("payload".utf8))
    }

    // MARK: Value semantics, Equatable, Hashable

    @Test("a copy is independent of the original")
    func valueSemantics() {
        var original = URLRequest(url: exampleURL)
        original.setValue("1", forHTTPHeaderField: "X-A")
        var copy = original
        copy.httpMethod = "POST"
        copy.setValue("2", forHTTPHeaderField: "X-A")
        copy.httpBody = Data([1, 2, 3])
        #expect(original.httpMethod == "GET")
        #expect(original.value(forHTTPHeaderField: "X-A") == "1")
        #expect(original.httpBody == nil)
    }

    @Test("requests built the same way are equal and hash alike")
    func equalRequests() {
        func make() -> URLRequest {
            var request = URLRequest(url: exampleURL, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: 30)
            request.httpMethod = "PUT"
            request.setValue("text/plain", forHTTPHeaderField: "Content-Type")
            request.setValue("1", forHTTPHeaderField: "X-A")
            request.httpBody = Data("body".utf8)
            return request
        }
        let a = make(), b = make()
        #expect(a == b)
        #expect(a.hashValue == b.hashValue)
        #expect(Set([a, b]).count == 1)
    }

    @Test("header fields set in a different order still make equal requests")
    func headerOrderDoesNotMatterForEquality() {
        var a = URLRequest(url: exampleURL)
        a.setValue("1", forHTTPHeaderField: "X-A")
        a.setValue("2", forHTTPHeaderField: "X-B")
        var b = URLRequest(url: exampleURL)
        b.setValue("2", forHTTPHeaderField: "X-B")
        b.setValue("1", forHTTPHeaderField: "X-A")
        #expect(a == b)
        #expect(a.hashValue == b.hashValue)
    }

    @Test("a method, a header, a body, a URL, a policy or a timeout makes requests differ")
    func unequalRequests() {
        let base = URLRequest(url: exampleURL)
        var method = base
        method.httpMethod = "POST"
        var header = base
        header.setValue("1", forHTTPHeaderField: "X-A")
        var body = base
        body.httpBody = Data("x".utf8)
        var otherBody = base
        otherBody.httpBody = Data("y".utf8)
        var url = base
        url.url = URL(string: "https://example.com/other")!
        var policy = base
        policy.cachePolicy = .returnCacheDataElseLoad
        var timeout = base
        timeout.timeoutInterval = 1
        var cookies = base
        cookies.httpShouldHandleCookies = false
        for (name, variant) in [("method", method), ("header", header), ("body", body), ("url", url), ("policy", policy),
                                ("timeout", timeout), ("cookies", cookies)] {
            #expect(variant != base, "\(name) should make requests differ")
        }
        #expect(body != otherBody)
        #expect(Set([base, method, header, body, otherBody, url, policy]).count == 7)
    }

    @Test("requests with body streams are equal only when they share the stream")
    func streamEquality() {
        let stream = InputStream(data: Data("s".utf8))
        var a = URLRequest(url: exampleURL)
        a.httpBodyStream = stream
        var b = URLRequest(url: exampleURL)
        b.httpBodyStream = stream
        var c = URLRequest(url: exampleURL)
        c.httpBodyStream = InputStream(data: Data("s".utf8))
        #expect(a == b)
        #expect(a != c)
        #expect(a != URLRequest(url: exampleURL))
    }
}

@Suite("URLProtocol properties")
struct URLProtocolPropertyTests {
    @Test("setProperty stores in a mutable request, copies carry it, removeProperty takes it out; equality ignores it")
    func properties() {
        let mutable = NSMutableURLRequest(url: URL(string: "http://127.0.0.1/a")!)
        URLProtocol.setProperty(42, forKey: "count", in: mutable)
        URLProtocol.setProperty(["a": 1], forKey: "table", in: mutable)
        let request = mutable as URLRequest
        #expect(URLProtocol.property(forKey: "count", in: request) as? Int == 42)
        #expect((URLProtocol.property(forKey: "table", in: request) as? [String: Int])?["a"] == 1)
        var copy = request
        copy.setValue("x", forHTTPHeaderField: "X-Copy")
        #expect(URLProtocol.property(forKey: "count", in: copy) as? Int == 42)
        #expect(request == URLRequest(url: URL(string: "http://127.0.0.1/a")!))
        URLProtocol.removeProperty(forKey: "count", in: mutable)
        #expect(URLProtocol.property(forKey: "count", in: mutable as URLRequest) == nil)
        #expect(URLProtocol.property(forKey: "count", in: request) as? Int == 42, "an earlier copy keeps its value")
        #expect(URLProtocol.property(forKey: "missing", in: request) == nil)
    }

    @Test("the base class loads nothing; canonicalRequest and requestIsCacheEquivalent have Apple's defaults")
    func defaults() {
        let a = URLRequest(url: URL(string: "http://127.0.0.1/a")!)
        var b = a
        b.setValue("1", forHTTPHeaderField: "X-Other")
        #expect(!URLProtocol.canInit(with: a))
        #expect(URLProtocol.canonicalRequest(for: b) == b)
        #expect(URLProtocol.requestIsCacheEquivalent(a, to: b))
        #expect(!URLProtocol.requestIsCacheEquivalent(a, to: URLRequest(url: URL(string: "http://127.0.0.1/c")!)))
        let configuration = URLSessionConfiguration.default
        #expect(configuration.protocolClasses?.isEmpty == true)
        configuration.protocolClasses?.insert(URLProtocol.self, at: 0)
        #expect((configuration.copy() as? URLSessionConfiguration)?.protocolClasses?.count == 1)
    }
}
