@testable import Courier
import Foundation
import Testing

private let exampleURL = URL(string: "https://example.com/items?page=2")!
private let documentURL = URL(string: "https://example.com/")!
private let otherURL = URL(string: "http://other.example/next")!

/// A request with every property away from its default.
private func customRequest() -> URLRequest {
    var request = URLRequest(url: exampleURL, cachePolicy: .returnCacheDataElseLoad, timeoutInterval: 12.5)
    request.mainDocumentURL = documentURL
    request.networkServiceType = .background
    request.allowsCellularAccess = false
    request.httpMethod = "post"
    request.setValue("application/json", forHTTPHeaderField: "Content-Type")
    request.setValue("one", forHTTPHeaderField: "X-Custom")
    request.addValue("two", forHTTPHeaderField: "x-custom")
    request.httpBody = Data("{\"a\":1}".utf8)
    request.httpShouldHandleCookies = false
    request.httpShouldUsePipelining = false
    return request
}

/// Checks that `reference` shows every property `customRequest()` sets.
private func expectCustom(_ reference: NSURLRequest, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(reference.url == exampleURL, sourceLocation: sourceLocation)
    #expect(reference.cachePolicy == .returnCacheDataElseLoad, sourceLocation: sourceLocation)
    #expect(reference.timeoutInterval == 12.5, sourceLocation: sourceLocation)
    #expect(reference.mainDocumentURL == documentURL, sourceLocation: sourceLocation)
    #expect(reference.networkServiceType == .background, sourceLocation: sourceLocation)
    #expect(!reference.allowsCellularAccess, sourceLocation: sourceLocation)
    #expect(reference.httpMethod == "POST", sourceLocation: sourceLocation)
    #expect(reference.allHTTPHeaderFields == ["Content-Type": "application/json", "X-Custom": "one,two"], sourceLocation: sourceLocation)
    #expect(reference.value(forHTTPHeaderField: "content-type") == "application/json", sourceLocation: sourceLocation)
    #expect(reference.value(forHTTPHeaderField: "X-CUSTOM") == "one,two", sourceLocation: sourceLocation)
    #expect(reference.httpBody == Data("{\"a\":1}".utf8), sourceLocation: sourceLocation)
    #expect(reference.httpBodyStream == nil, sourceLocation: sourceLocation)
    #expect(!reference.httpShouldHandleCookies, sourceLocation: sourceLocation)
    #expect(!reference.httpShouldUsePipelining, sourceLocation: sourceLocation)
}

/// Archives `object` with secure coding and reads it back as an `NSURLRequest`.
private func roundTrip(_ object: NSURLRequest) throws -> NSURLRequest? {
    let data = try NSKeyedArchiver.archivedData(withRootObject: object, requiringSecureCoding: true)
    return try NSKeyedUnarchiver.unarchivedObject(ofClass: NSURLRequest.self, from: data)
}

@Suite("NSURLRequest and NSMutableURLRequest")
struct NSURLRequestTests {
    // MARK: Defaults and bridging

    @Test("a new request object has URLRequest's defaults")
    func defaults() {
        for reference in [NSURLRequest(url: exampleURL), NSMutableURLRequest(url: exampleURL)] {
            #expect(reference.url == exampleURL)
            #expect(reference.httpMethod == "GET")
            #expect(reference.timeoutInterval == 60)
            #expect(reference.cachePolicy == .useProtocolCachePolicy)
            #expect(reference.networkServiceType == .default)
            #expect(reference.mainDocumentURL == nil)
            #expect(reference.allHTTPHeaderFields == nil)
            #expect(reference.httpBody == nil)
            #expect(reference.httpBodyStream == nil)
            #expect(reference.allowsCellularAccess)
            #expect(reference.httpShouldHandleCookies)
            #expect(reference.httpShouldUsePipelining)
            #expect(reference as URLRequest == URLRequest(url: exampleURL))
        }
        let custom = NSURLRequest(url: exampleURL, cachePolicy: .reloadIgnoringLocalAndRemoteCacheData, timeoutInterval: 7)
        #expect(custom.cachePolicy == .reloadIgnoringLocalAndRemoteCacheData)
        #expect(custom.timeoutInterval == 7)
    }

    @Test("a URLRequest bridges to NSURLRequest and back with every property")
    func bridgesBothWays() {
        let request = customRequest()
        let reference = request as NSURLRequest
        expectCustom(reference)
        #expect(!(reference is NSMutableURLRequest))
        let back = reference as URLRequest
        #expect(back == request)
        #expect(back.allHTTPHeaderFields == request.allHTTPHeaderFields)
        #expect(reference._bridgeToSwift() == request)
    }

    @Test("a bridged request object is a snapshot of the value")
    func bridgedObjectIsSnapshot() {
        var request = URLRequest(url: exampleURL)
        let reference = request as NSURLRequest
        request.url = otherURL
        request.httpMethod = "DELETE"
        #expect(reference.url == exampleURL)
        #expect(reference.httpMethod == "GET")
    }

    @Test("the body stream crosses the bridge as the same stream, and excludes the body bytes")
    func bodyStreamBridges() {
        let stream = InputStream(data: Data("streamed".utf8))
        var request = URLRequest(url: exampleURL)
        request.httpBody = Data("bytes".utf8)
        request.httpBodyStream = stream
        let reference = request as NSURLRequest
        #expect(reference.httpBodyStream === stream)
        #expect(reference.httpBody == nil)
        #expect((reference as URLRequest).httpBodyStream === stream)
    }

    // MARK: NSMutableURLRequest

    @Test("every setter of NSMutableURLRequest shows in the URLRequest it bridges to")
    func mutableSettersBridge() {
        let mutable = NSMutableURLRequest(url: otherURL)
        mutable.url = exampleURL
        mutable.cachePolicy = .returnCacheDataElseLoad
        mutable.timeoutInterval = 12.5
        mutable.mainDocumentURL = documentURL
        mutable.networkServiceType = .background
        mutable.allowsCellularAccess = false
        mutable.httpMethod = "post"
        mutable.setValue("application/json", forHTTPHeaderField: "Content-Type")
        mutable.setValue("one", forHTTPHeaderField: "X-Custom")
        mutable.addValue("two", forHTTPHeaderField: "x-custom")
        mutable.httpBody = Data("{\"a\":1}".utf8)
        mutable.httpShouldHandleCookies = false
        mutable.httpShouldUsePipelining = false
        expectCustom(mutable)
        let request = mutable as URLRequest
        #expect(request == customRequest())
        #expect(request.value(forHTTPHeaderField: "CONTENT-TYPE") == "application/json")
        // Assigned on the object, the timeout counts as assigned on the value too.
        #expect(request.isTimeoutIntervalSet)
        #expect(!(NSMutableURLRequest(url: exampleURL) as URLRequest).isTimeoutIntervalSet)
    }

    @Test("header fields are found and replaced without regard to case, keeping the first name")
    func headerFieldsIgnoreCase() {
        let mutable = NSMutableURLRequest(url: exampleURL)
        mutable.setValue("a", forHTTPHeaderField: "X-Token")
        mutable.setValue("b", forHTTPHeaderField: "x-token")
        #expect(mutable.allHTTPHeaderFields == ["X-Token": "b"])
        mutable.addValue("c", forHTTPHeaderField: "X-TOKEN")
        #expect(mutable.value(forHTTPHeaderField: "x-Token") == "b,c")
        mutable.setValue(nil, forHTTPHeaderField: "x-token")
        #expect(mutable.allHTTPHeaderFields == nil)
        mutable.allHTTPHeaderFields = ["Accept": "text/plain", "X-One": "1"]
        #expect(mutable.value(forHTTPHeaderField: "accept") == "text/plain")
        mutable.allHTTPHeaderFields = nil
        #expect(mutable.value(forHTTPHeaderField: "accept") == nil)
    }

    @Test("a nil method restores GET; common methods are upper-cased, others kept")
    func methodNormalisation() {
        let mutable = NSMutableURLRequest(url: exampleURL)
        mutable.httpMethod = "delete"
        #expect(mutable.httpMethod == "DELETE")
        mutable.httpMethod = "PropFind"
        #expect(mutable.httpMethod == "PropFind")
        mutable.httpMethod = nil
        #expect(mutable.httpMethod == "GET")
    }

    @Test("setting the body bytes clears the stream, and the other way round")
    func bodyExclusive() {
        let mutable = NSMutableURLRequest(url: exampleURL)
        let stream = InputStream(data: Data("s".utf8))
        mutable.httpBody = Data("b".utf8)
        mutable.httpBodyStream = stream
        #expect(mutable.httpBody == nil)
        #expect(mutable.httpBodyStream === stream)
        mutable.httpBody = Data("b".utf8)
        #expect(mutable.httpBodyStream == nil)
        #expect(mutable.httpBody == Data("b".utf8))
    }

    // MARK: Copying

    @Test("copying a plain NSURLRequest gives the same object")
    func immutableCopyIsSelf() {
        let reference = NSURLRequest(url: exampleURL)
        #expect(reference.copy() as? NSURLRequest === reference)
        #expect(reference.copy(with: nil) as? NSURLRequest === reference)
    }

    @Test("a copy of a mutable request is an immutable snapshot the original's changes do not reach")
    func copyOfMutableIsSnapshot() throws {
        let mutable = NSMutableURLRequest(url: exampleURL)
        mutable.httpMethod = "POST"
        mutable.setValue("application/json", forHTTPHeaderField: "Accept")
        mutable.httpBody = Data("body".utf8)
        let copy = try #require(mutable.copy() as? NSURLRequest)
        #expect(!(copy is NSMutableURLRequest))
        #expect(copy !== mutable)
        #expect(copy.isEqual(mutable))

        mutable.url = otherURL
        mutable.httpMethod = "HEAD"
        mutable.addValue("text/html", forHTTPHeaderField: "Accept")
        mutable.httpBody = nil
        #expect(copy.url == exampleURL)
        #expect(copy.httpMethod == "POST")
        #expect(copy.value(forHTTPHeaderField: "Accept") == "application/json")
        #expect(copy.httpBody == Data("body".utf8))
        #expect(copy.copy() as? NSURLRequest === copy)
    }

    @Test("a mutable copy is independent of its source, both ways")
    func mutableCopyIndependent() throws {
        let original = NSMutableURLRequest(url: exampleURL)
        original.httpMethod = "POST"
        original.setValue("1", forHTTPHeaderField: "X-Version")
        let copy = try #require(original.mutableCopy() as? NSMutableURLRequest)
        #expect(copy.isEqual(original))

        original.url = otherURL
        original.setValue("2", forHTTPHeaderField: "X-Version")
        #expect(copy.url == exampleURL)
        #expect(copy.value(forHTTPHeaderField: "X-Version") == "1")

        copy.httpMethod = "PUT"
        copy.mainDocumentURL = documentURL
        #expect(original.httpMethod == "POST")
        #expect(original.mainDocumentURL == nil)

        let plain = NSURLRequest(url: exampleURL)
        let fromPlain = try #require(plain.mutableCopy(with: nil) as? NSMutableURLRequest)
        fromPlain.url = otherURL
        #expect(plain.url == exampleURL)
    }

    // MARK: Equality

    @Test("request objects are equal, and hash alike, when their requests are equal")
    func equalityAndHash() {
        let first = NSURLRequest(url: exampleURL)
        let second = NSURLRequest(url: exampleURL)
        let mutable = NSMutableURLRequest(url: exampleURL)
        #expect(first.isEqual(second))
        #expect(first == second)
        #expect(first.hash == second.hash)
        #expect(first.isEqual(mutable))
        #expect(first.hash == mutable.hash)
        #expect(Set<NSURLRequest>([first, second, mutable]).count == 1)

        mutable.httpMethod = "POST"
        #expect(!first.isEqual(mutable))
        #expect(!first.isEqual(NSURLRequest(url: otherURL)))
        #expect(!first.isEqual("https://example.com/items?page=2"))
        #expect(!first.isEqual(nil))
        #expect(first.isEqual(customRequest() as NSURLRequest) == false)
        #expect((customRequest() as NSURLRequest).isEqual(customRequest() as NSURLRequest))
    }

    @Test("the description names the URL, or (null) without one")
    func describesURL() {
        let mutable = NSMutableURLRequest(url: exampleURL)
        #expect(mutable.description.contains("https://example.com/items?page=2"))
        mutable.url = nil
        #expect(mutable.description.contains("(null)"))
    }

    // MARK: Archiving

    @Test("request objects support secure coding")
    func secureCoding() {
        #expect(NSURLRequest.supportsSecureCoding)
        #expect(NSMutableURLRequest.supportsSecureCoding)
    }

    @Test("a secure keyed archive keeps every property")
    func archiveRoundTrip() throws {
        let mutable = NSMutableURLRequest(url: exampleURL)
        mutable.cachePolicy = .returnCacheDataElseLoad
        mutable.timeoutInterval = 12.5
        mutable.mainDocumentURL = documentURL
        mutable.networkServiceType = .background
        mutable.allowsCellularAccess = false
        mutable.httpMethod = "POST"
        mutable.setValue("application/json", forHTTPHeaderField: "Content-Type")
        mutable.setValue("one,two", forHTTPHeaderField: "X-Custom")
        mutable.httpBody = Data("{\"a\":1}".utf8)
        mutable.httpShouldHandleCookies = false
        mutable.httpShouldUsePipelining = false

        let decoded = try #require(try roundTrip(mutable))
        #expect(decoded is NSMutableURLRequest)
        expectCustom(decoded)
        #expect(decoded.isEqual(mutable))
        #expect(decoded as URLRequest == mutable as URLRequest)
        #expect((decoded as URLRequest).isTimeoutIntervalSet)
    }

    @Test("a plain request survives an archive with its defaults")
    func archiveDefaults() throws {
        let reference = NSURLRequest(url: exampleURL, cachePolicy: .reloadRevalidatingCacheData, timeoutInterval: 30)
        let decoded = try #require(try roundTrip(reference))
        #expect(!(decoded is NSMutableURLRequest))
        #expect(decoded.isEqual(reference))
        #expect(decoded.cachePolicy == .reloadRevalidatingCacheData)
        #expect(decoded.timeoutInterval == 30)
        #expect(decoded.httpMethod == "GET")
        #expect(decoded.allHTTPHeaderFields == nil)
        #expect(decoded.httpBody == nil)
        #expect(decoded.mainDocumentURL == nil)
        // The initializer's timeout was not assigned, and still is not after the archive.
        #expect(!(decoded as URLRequest).isTimeoutIntervalSet)
    }

    @Test("an empty body stays an empty body through an archive")
    func archiveEmptyBody() throws {
        let mutable = NSMutableURLRequest(url: exampleURL)
        mutable.httpBody = Data()
        let decoded = try #require(try roundTrip(mutable))
        #expect(decoded.httpBody == Data())
    }

    @Test("the body stream is left out of an archive")
    func archiveSkipsStream() throws {
        let mutable = NSMutableURLRequest(url: exampleURL)
        mutable.httpBodyStream = InputStream(data: Data("streamed".utf8))
        let decoded = try #require(try roundTrip(mutable))
        #expect(decoded.httpBodyStream == nil)
        #expect(decoded.httpBody == nil)
        #expect(decoded.url == exampleURL)
    }

    @Test("an archived request without a URL does not decode")
    func archiveWithoutURLFails() throws {
        let mutable = NSMutableURLRequest(url: exampleURL)
        mutable.url = nil
        let data = try NSKeyedArchiver.archivedData(withRootObject: mutable, requiringSecureCoding: true)
        #expect(throws: (any Error).self) {
            try NSKeyedUnarchiver.unarchivedObject(ofClass: NSURLRequest.self, from: data)
        }
    }

    // MARK: Enumerations

    @Test("cache policies have Apple's raw values, shared with URLRequest.CachePolicy")
    func cachePolicyValues() {
        #expect(NSURLRequest.CachePolicy.useProtocolCachePolicy.rawValue == 0)
        #expect(NSURLRequest.CachePolicy.reloadIgnoringLocalCacheData.rawValue == 1)
        #expect(NSURLRequest.CachePolicy.returnCacheDataElseLoad.rawValue == 2)
        #expect(NSURLRequest.CachePolicy.returnCacheDataDontLoad.rawValue == 3)
        #expect(NSURLRequest.CachePolicy.reloadIgnoringLocalAndRemoteCacheData.rawValue == 4)
        #expect(NSURLRequest.CachePolicy.reloadRevalidatingCacheData.rawValue == 5)
        #expect(NSURLRequest.CachePolicy.reloadIgnoringCacheData == .reloadIgnoringLocalCacheData)
        #expect(NSURLRequest.CachePolicy(rawValue: 4) == .reloadIgnoringLocalAndRemoteCacheData)
        #expect(NSURLRequest.CachePolicy(rawValue: 6) == nil)
    }

    @Test("network service types have FoundationNetworking's and Apple's raw values")
    func networkServiceTypeValues() {
        let expected: [(NSURLRequest.NetworkServiceType, UInt)] = [
            (.default, 0), (.voip, 1), (.video, 2), (.background, 3), (.voice, 4),
            (.networkServiceTypeCallSignaling, 5), (.responsiveData, 6), (.avStreaming, 8),
            (.responsiveAV, 9), (.callSignaling, 11),
        ]
        for (serviceType, raw) in expected {
            #expect(serviceType.rawValue == raw)
            #expect(URLRequest.NetworkServiceType(rawValue: raw) == serviceType)
        }
    }

    // MARK: Reflection

    @Test("a URLRequest's mirror has FoundationNetworking's children")
    func mirror() {
        let mirror = Mirror(reflecting: customRequest())
        #expect(mirror.displayStyle == .struct)
        #expect(mirror.children.map(\.label) == [
            "url", "cachePolicy", "timeoutInterval", "mainDocumentURL", "networkServiceType",
            "allowsCellularAccess", "httpMethod", "allHTTPHeaderFields", "httpBody", "httpBodyStream",
            "httpShouldHandleCookies", "httpShouldUsePipelining",
        ])
        let cachePolicy = mirror.children.first { $0.label == "cachePolicy" }?.value
        #expect(cachePolicy as? UInt == NSURLRequest.CachePolicy.returnCacheDataElseLoad.rawValue)
        let method = mirror.children.first { $0.label == "httpMethod" }?.value
        #expect(method as? String == "POST")
    }

    // MARK: Sessions

    @Test("a session takes a request made from an NSMutableURLRequest, as it was at that moment")
    func sessionTakesBridgedRequest() {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        // Loopback and never resumed: the task is made and cancelled, nothing is sent.
        let mutable = NSMutableURLRequest(url: URL(string: "http://127.0.0.1:9/upload")!)
        mutable.httpMethod = "PUT"
        mutable.setValue("text/plain", forHTTPHeaderField: "Content-Type")
        mutable.httpBody = Data("payload".utf8)
        let task = session.dataTask(with: mutable as URLRequest)
        mutable.httpMethod = "DELETE"
        mutable.setValue(nil, forHTTPHeaderField: "Content-Type")
        #expect(task.originalRequest?.httpMethod == "PUT")
        #expect(task.originalRequest?.value(forHTTPHeaderField: "content-type") == "text/plain")
        #expect(task.originalRequest?.httpBody == Data("payload".utf8))
        #expect(task.originalRequest != mutable as URLRequest)
        task.cancel()
    }
}
