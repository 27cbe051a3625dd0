import Foundation

/// What to do with a response that may be a redirect (RFC 9110 section 15.4), as Apple's
/// URL Loading System does it: which statuses are followed, how the method and body change,
/// which header fields must not travel to another origin, and how far a chain may go.
///
/// A pure value: it is given the facts of one hop and returns a ``Decision``; the session
/// layer asks the delegate and sends the next request.
public struct RedirectPolicy: Sendable, Equatable {
    /// Most redirects one task follows; the next one fails the task (Apple's limit, also
    /// curl's default of 50 is higher, browsers use 20).
    public static let maximumRedirects = 16

    /// Header fields never carried to another origin: credentials and caller-set cookies.
    public static let credentialFieldNames: Set<String> = ["authorization", "proxy-authorization", "cookie"]

    /// Header fields that describe a request body; removed when a redirect drops the body
    /// (RFC 9110 section 15.4, "remove content-specific header fields").
    public static let contentFieldNames: Set<String> = [
        "content-type", "content-length", "content-encoding", "content-language", "content-location", "transfer-encoding",
    ]

    /// Lower-cased names removed on a hop to another origin, in addition to
    /// ``credentialFieldNames`` (a Courier extension: API keys and similar secrets).
    public var extraCrossOriginFieldNames: Set<String>

    public init(extraCrossOriginFieldNames: some Sequence<String> = []) {
        self.extraCrossOriginFieldNames = Set(extraCrossOriginFieldNames.map { $0.lowercased() })
    }

    /// How a redirect changes the request body.
    public enum BodyChange: Sendable, Equatable {
        /// The method and body stay as they were (307, 308, and 301/302/303 for methods they
        /// leave alone).
        case keep
        /// The method becomes GET and the body with its content fields is dropped.
        case dropAndUseGET
    }

    /// The next request of a followed redirect.
    public struct Redirect: Sendable, Equatable {
        /// Where to go: the Location resolved against the request URL.
        public var url: URL
        /// The method of the next request.
        public var method: String
        public var bodyChange: BodyChange
        /// True when the next request goes to another origin (scheme, host or port).
        public var isCrossOrigin: Bool
        /// Lower-cased names of the caller's header fields to remove from the next request.
        public var removedFieldNames: Set<String>

        public init(url: URL, method: String, bodyChange: BodyChange, isCrossOrigin: Bool, removedFieldNames: Set<String>) {
            self.url = url
            self.method = method
            self.bodyChange = bodyChange
            self.isCrossOrigin = isCrossOrigin
            self.removedFieldNames = removedFieldNames
        }
    }

    /// Why a redirect cannot be followed.
    public enum Failure: Error, Sendable, Equatable {
        /// Another redirect after ``maximumRedirects``.
        case tooManyRedirects(limit: Int)
        /// The Location cannot be parsed as a URL reference.
        case badLocation(String)
    }

    /// The decision for one response.
    public enum Decision: Sendable, Equatable {
        /// Not a redirect to follow: deliver the response as it is (any status but 301, 302,
        /// 303, 307 and 308, or one of those without a Location).
        case deliver
        /// Follow it (after the delegate agrees).
        case follow(Redirect)
        /// A redirect that fails the task.
        case fail(Failure)
    }

    /// True for the statuses a Location makes a redirect: 301, 302, 303, 307 and 308 (300
    /// and 304 through 306 are delivered as they are).
    public static func isRedirect(status: Int) -> Bool {
        switch status {
        case 301, 302, 303, 307, 308: return true
        default: return false
        }
    }

    /// Decides what a response means for the request that got it.
    ///
    /// - Parameters:
    ///   - status: the response status.
    ///   - location: the Location field, if any.
    ///   - requestURL: the URL of the request that got the response.
    ///   - method: the request's method.
    ///   - redirectsSoFar: redirects this task already followed.
    public func decide(status: Int, location: String?, requestURL: URL, method: String, redirectsSoFar: Int) -> Decision {
        guard Self.isRedirect(status: status), let location else { return .deliver }
        let trimmed = location.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else { return .deliver }
        guard redirectsSoFar < Self.maximumRedirects else { return .fail(.tooManyRedirects(limit: Self.maximumRedirects)) }
        // A Location to a scheme Courier does not load (an app's `myapp://callback`, say) is
        // still offered to the delegate, as Apple does: OAuth clients refuse it and read the
        // Location. Followed, it fails when sent, with an unsupported-URL error.
        guard let target = Self.resolve(location: trimmed, against: requestURL), target.scheme != nil else {
            return .fail(.badLocation(trimmed))
        }
        let bodyChange = Self.bodyChange(status: status, method: method)
        let crossOrigin = !Self.sameOrigin(requestURL, target)
        var removed: Set<String> = []
        if bodyChange == .dropAndUseGET { removed.formUnion(Self.contentFieldNames) }
        if crossOrigin {
            removed.formUnion(Self.credentialFieldNames)
            removed.formUnion(extraCrossOriginFieldNames)
        }
        return .follow(Redirect(
            url: target, method: bodyChange == .dropAndUseGET ? "GET" : method, bodyChange: bodyChange,
            isCrossOrigin: crossOrigin, removedFieldNames: removed
        ))
    }

    /// How the method changes (RFC 9110 sections 15.4.2–15.4.9, with the behaviour every
    /// browser and Apple's loader have for 301 and 302):
    /// 1. 301 and 302 turn POST into GET, and leave other methods alone;
    /// 2. 303 turns every method but HEAD into GET (HEAD stays HEAD);
    /// 3. 307 and 308 never change the method or the body.
    static func bodyChange(status: Int, method: String) -> BodyChange {
        switch status {
        case 301, 302: return method.uppercased() == "POST" ? .dropAndUseGET : .keep
        case 303: return ["GET", "HEAD"].contains(method.uppercased()) ? .keep : .dropAndUseGET
        default: return .keep
        }
    }

    /// Resolves a Location field value against the URL of the request (RFC 3986 section 5.2);
    /// the request's fragment is kept when the Location has none (RFC 9110 section 10.2.2).
    /// Nil when the value is not a URI reference.
    public static func resolve(location: String, against base: URL) -> URL? {
        // Some servers send spaces or other characters that must be escaped; escape what a
        // URL cannot hold rather than refusing the redirect (as browsers and curl do).
        let escaped = escapeInvalidCharacters(location)
        guard let reference = URL(string: escaped, relativeTo: base)?.absoluteURL else { return nil }
        guard reference.fragment == nil, let fragment = base.fragment(percentEncoded: true) else { return reference }
        guard var components = URLComponents(url: reference, resolvingAgainstBaseURL: false) else { return reference }
        components.percentEncodedFragment = fragment
        return components.url ?? reference
    }

    /// True when both URLs have the same scheme, host and port (the port made explicit).
    public static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        func parts(_ url: URL) -> (String, String, Int)? {
            guard let scheme = url.scheme?.lowercased(), let host = url.host(percentEncoded: false)?.lowercased() else { return nil }
            let port = url.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : -1)
            return (scheme, host, port)
        }
        guard let left = parts(a), let right = parts(b) else { return false }
        return left == right
    }

    /// Percent-encodes spaces, controls, non-ASCII bytes and the few ASCII characters a URL
    /// cannot hold, leaving existing escapes and reserved characters alone.
    static func escapeInvalidCharacters(_ text: String) -> String {
        var result = ""
        for byte in text.utf8 {
            switch byte {
            case 0x21...0x7E where !invalidASCII.contains(byte):
                result.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                result += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return result
    }

    /// Printable ASCII characters that a URL must escape: `"`, `<`, `>`, `\`, `^`, backtick,
    /// `{`, `|`, `}`.
    private static let invalidASCII: Set<UInt8> = Set("\"<>\\^`{|}".utf8)
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
