@testable import Courier
import CourierTransport
import Foundation
import Testing

/// The additional headers of a configuration as plain strings.
private func stringHeaders(_ configuration: URLSessionConfiguration) -> [String: String]? {
    configuration.httpAdditionalHeaders as? [String: String]
}

/// Sets every property Courier's configuration has to a value other than its default.
private func customise(_ configuration: URLSessionConfiguration) {
    configuration.identifier = "custom.identifier"
    configuration.timeoutIntervalForRequest = 12
    configuration.timeoutIntervalForResource = 345
    configuration.httpMaximumConnectionsPerHost = 2
    configuration.httpAdditionalHeaders = ["X-Custom": "1", "Accept": "text/plain"]
    configuration.networkServiceType = .background
    configuration.allowsCellularAccess = false
    configuration.isDiscretionary = true
    configuration.courierHTTP2StreamWindowSize = 4 << 20
    configuration.courierDecodesContent = false
}

/// Checks the values `customise` sets.
private func expectCustomised(_ configuration: URLSessionConfiguration, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(configuration.identifier == "custom.identifier", sourceLocation: sourceLocation)
    #expect(configuration.timeoutIntervalForRequest == 12, sourceLocation: sourceLocation)
    #expect(configuration.timeoutIntervalForResource == 345, sourceLocation: sourceLocation)
    #expect(configuration.httpMaximumConnectionsPerHost == 2, sourceLocation: sourceLocation)
    #expect(stringHeaders(configuration) == ["X-Custom": "1", "Accept": "text/plain"], sourceLocation: sourceLocation)
    #expect(configuration.networkServiceType == .background, sourceLocation: sourceLocation)
    #expect(!configuration.allowsCellularAccess, sourceLocation: sourceLocation)
    #expect(configuration.isDiscretionary, sourceLocation: sourceLocation)
    #expect(configuration.courierHTTP2StreamWindowSize == 4 << 20, sourceLocation: sourceLocation)
    #expect(!configuration.courierDecodesContent, sourceLocation: sourceLocation)
}

/// A delegate that does nothing.
private final class SilentDelegate: NSObject, URLSessionDelegate, @unchecked Sendable {}

@Suite("URLSessionConfiguration and the session's copy of it")
struct ConfigurationTests {
    // MARK: Defaults

    @Test("default has Apple's values: 60 s per request, 7 days per resource, 6 connections per host")
    func defaultValues() {
        let configuration = URLSessionConfiguration.default
        #expect(configuration.timeoutIntervalForRequest == 60)
        #expect(configuration.timeoutIntervalForResource == 7 * 24 * 60 * 60)
        #expect(configuration.timeoutIntervalForResource == 604_800)
        #expect(configuration.httpMaximumConnectionsPerHost == 6)
        #expect(configuration.identifier == nil)
        #expect(configuration.httpAdditionalHeaders == nil)
        #expect(configuration.networkServiceType == .default)
        #expect(configuration.allowsCellularAccess)
        #expect(!configuration.isDiscretionary)
        #expect(!configuration.httpShouldUsePipelining)
    }

    @Test("ephemeral has the same timeouts and limits as default")
    func ephemeralValues() {
        let configuration = URLSessionConfiguration.ephemeral
        #expect(configuration.timeoutIntervalForRequest == 60)
        #expect(configuration.timeoutIntervalForResource == 604_800)
        #expect(configuration.httpMaximumConnectionsPerHost == 6)
        #expect(configuration.identifier == nil)
        #expect(configuration.httpAdditionalHeaders == nil)
    }

    @Test("default returns a new instance on every access")
    func defaultIsNewEachTime() {
        let first = URLSessionConfiguration.default
        let second = URLSessionConfiguration.default
        #expect(first !== second)
        first.timeoutIntervalForRequest = 1
        first.httpAdditionalHeaders = ["X": "y"]
        #expect(URLSessionConfiguration.default.timeoutIntervalForRequest == 60)
        #expect(URLSessionConfiguration.default.httpAdditionalHeaders == nil)
        #expect(second.timeoutIntervalForRequest == 60)
    }

    @Test("ephemeral returns a new instance on every access")
    func ephemeralIsNewEachTime() {
        let first = URLSessionConfiguration.ephemeral
        #expect(first !== URLSessionConfiguration.ephemeral)
        first.httpMaximumConnectionsPerHost = 1
        #expect(URLSessionConfiguration.ephemeral.httpMaximumConnectionsPerHost == 6)
    }

    // MARK: Copying

    @Test("copy() carries every property")
    func copyCarriesProperties() throws {
        let original = URLSessionConfiguration.default
        customise(original)
        let copy = try #require(original.copy() as? URLSessionConfiguration)
        #expect(copy !== original)
        expectCustomised(copy)
    }

    @Test("copy(with:) carries every property too")
    func copyWithZone() throws {
        let original = URLSessionConfiguration.ephemeral
        customise(original)
        let copy = try #require(original.copy(with: nil) as? URLSessionConfiguration)
        #expect(copy !== original)
        expectCustomised(copy)
    }

    @Test("a copy is independent: changing either leaves the other alone")
    func copyIsIndependent() throws {
        let original = URLSessionConfiguration.default
        customise(original)
        let copy = try #require(original.copy() as? URLSessionConfiguration)

        copy.timeoutIntervalForRequest = 99
        copy.httpAdditionalHeaders = ["X-Other": "2"]
        copy.httpMaximumConnectionsPerHost = 9
        copy.identifier = nil
        expectCustomised(original)

        original.timeoutIntervalForResource = 1
        original.allowsCellularAccess = true
        #expect(copy.timeoutIntervalForResource == 345)
        #expect(!copy.allowsCellularAccess)
        #expect(copy.timeoutIntervalForRequest == 99)
        #expect(stringHeaders(copy) == ["X-Other": "2"])
    }

    // MARK: The session's copy

    @Test("a session copies its configuration at creation; later changes do not reach it")
    func sessionCopiesAtCreation() {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 5
        configuration.timeoutIntervalForResource = 50
        configuration.httpMaximumConnectionsPerHost = 3
        configuration.httpAdditionalHeaders = ["X-A": "1"]
        let session = URLSession(configuration: configuration)
        defer { session.invalidateAndCancel() }

        configuration.timeoutIntervalForRequest = 99
        configuration.timeoutIntervalForResource = 990
        configuration.httpMaximumConnectionsPerHost = 1
        configuration.httpAdditionalHeaders = ["X-B": "2"]

        let seen = session.configuration
        #expect(seen !== configuration)
        #expect(seen.timeoutIntervalForRequest == 5)
        #expect(seen.timeoutIntervalForResource == 50)
        #expect(seen.httpMaximumConnectionsPerHost == 3)
        #expect(stringHeaders(seen) == ["X-A": "1"])
    }

    @Test("a session made with a delegate and queue copies its configuration too")
    func sessionWithDelegateCopies() {
        let configuration = URLSessionConfiguration.default
        configuration.timeoutIntervalForRequest = 7
        let delegate = SilentDelegate()
        let queue = OperationQueue()
        let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue)
        defer { session.invalidateAndCancel() }
        configuration.timeoutIntervalForRequest = 70
        #expect(session.configuration.timeoutIntervalForRequest == 7)
        #expect(session.delegate === delegate)
        #expect(session.delegateQueue === queue)
    }

    @Test("session.configuration returns a copy: changing it does not change the session")
    func sessionConfigurationIsACopy() {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 5
        let session = URLSession(configuration: configuration)
        defer { session.invalidateAndCancel() }

        let first = session.configuration
        first.timeoutIntervalForRequest = 1
        first.httpAdditionalHeaders = ["X-Changed": "yes"]
        first.httpMaximumConnectionsPerHost = 1

        let second = session.configuration
        #expect(second !== first)
        #expect(second.timeoutIntervalForRequest == 5)
        #expect(second.httpAdditionalHeaders == nil)
        #expect(second.httpMaximumConnectionsPerHost == 6)
    }

    @Test("a session's configuration keeps every customised property")
    func sessionKeepsAllProperties() {
        let configuration = URLSessionConfiguration.default
        customise(configuration)
        let session = URLSession(configuration: configuration)
        defer { session.invalidateAndCancel() }
        expectCustomised(session.configuration)
    }

    @Test("two sessions from one configuration object do not share changes")
    func twoSessionsOneConfiguration() {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 10
        let first = URLSession(configuration: configuration)
        configuration.timeoutIntervalForRequest = 20
        let second = URLSession(configuration: configuration)
        defer {
            first.invalidateAndCancel()
            second.invalidateAndCancel()
        }
        #expect(first.configuration.timeoutIntervalForRequest == 10)
        #expect(second.configuration.timeoutIntervalForRequest == 20)
    }

    // MARK: Delegate queue and shared session

    @Test("without a queue, a session makes its own serial delegate queue")
    func ownSerialQueue() {
        let first = URLSession(configuration: .ephemeral)
        let second = URLSession(configuration: .ephemeral, delegate: nil, delegateQueue: nil)
        defer {
            first.invalidateAndCancel()
            second.invalidateAndCancel()
        }
        #expect(first.delegateQueue.maxConcurrentOperationCount == 1)
        #expect(second.delegateQueue.maxConcurrentOperationCount == 1)
        #expect(first.delegateQueue !== second.delegateQueue)
        #expect(first.delegate == nil)
    }

    @Test("the shared session is one object with default timeouts and no delegate")
    func sharedSession() {
        #expect(URLSession.shared === URLSession.shared)
        #expect(URLSession.shared.delegate == nil)
        let configuration = URLSession.shared.configuration
        #expect(configuration.timeoutIntervalForRequest == 60)
        #expect(configuration.timeoutIntervalForResource == 604_800)
        #expect(configuration.httpMaximumConnectionsPerHost == 6)
        #expect(URLSession.shared.delegateQueue.maxConcurrentOperationCount == 1)
    }

    @Test("courierHTTP2StreamWindowSize sets the window HTTP/2 streams start with; the growth stops at 8 MiB or at that start")
    func http2StreamWindow() throws {
        func windows(_ size: Int?) throws -> (initial: Int32, maximum: Int32) {
            let configuration = URLSessionConfiguration.ephemeral
            configuration.courierHTTP2StreamWindowSize = size
            let session = URLSession(configuration: configuration)
            defer { session.invalidateAndCancel() }
            let transport = try #require(session.loader as? HTTPTransport)
            return (transport.configuration.http2.initialStreamWindowSize, transport.configuration.http2.maximumStreamWindowSize)
        }
        let standard = try windows(nil)
        #expect(standard.initial == 1 << 20 && standard.maximum == 8 << 20)
        let smaller = try windows(64 << 10)
        #expect(smaller.initial == 64 << 10 && smaller.maximum == 8 << 20)
        let larger = try windows(16 << 20)
        #expect(larger.initial == 16 << 20 && larger.maximum == 16 << 20)
        let huge = try windows(Int.max)
        #expect(huge.initial == Int32.max && huge.maximum == Int32.max)
    }

    @Test("a background session's daemon gets the HTTP/2 stream window with the rest of the settings")
    func http2StreamWindowReachesTheDaemon() throws {
        let configuration = URLSessionConfiguration.background(withIdentifier: "window.test")
        configuration.courierHTTP2StreamWindowSize = 3 << 20
        let settings = WireSettings(configuration)
        let decoded = try JSONDecoder().decode(WireSettings.self, from: JSONEncoder().encode(settings))
        #expect(decoded.configuration.courierHTTP2StreamWindowSize == 3 << 20)
        // A journal written before the field reads as no start of its own.
        var older = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(settings)) as? [String: Any])
        older["http2StreamWindowSize"] = nil
        let fromOlder = try JSONDecoder().decode(WireSettings.self, from: JSONSerialization.data(withJSONObject: older))
        #expect(fromOlder.configuration.courierHTTP2StreamWindowSize == nil)
    }

    @Test("a background session's daemon decodes content or not as the configuration says; older settings decode")
    func decodesContentReachesTheDaemon() throws {
        let configuration = URLSessionConfiguration.background(withIdentifier: "decoding.test")
        configuration.courierDecodesContent = false
        let settings = WireSettings(configuration)
        let decoded = try JSONDecoder().decode(WireSettings.self, from: JSONEncoder().encode(settings))
        #expect(!decoded.configuration.courierDecodesContent)
        var older = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(settings)) as? [String: Any])
        older["decodesContent"] = nil
        let fromOlder = try JSONDecoder().decode(WireSettings.self, from: JSONSerialization.data(withJSONObject: older))
        #expect(fromOlder.configuration.courierDecodesContent)
    }

    @Test("changing the shared session's configuration copy does not change it")
    func sharedConfigurationIsACopy() {
        let copy = URLSession.shared.configuration
        copy.timeoutIntervalForRequest = 1
        #expect(URLSession.shared.configuration.timeoutIntervalForRequest == 60)
    }
}
