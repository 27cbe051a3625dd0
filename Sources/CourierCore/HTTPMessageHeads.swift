/// An HTTP request method (RFC 9110 section 9), case-sensitive as the RFC says.
public struct HTTPMethod: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }

    public static let get = HTTPMethod("GET")
    public static let head = HTTPMethod("HEAD")
    public static let post = HTTPMethod("POST")
    public static let put = HTTPMethod("PUT")
    public static let delete = HTTPMethod("DELETE")
    public static let options = HTTPMethod("OPTIONS")
    public static let trace = HTTPMethod("TRACE")
    public static let connect = HTTPMethod("CONNECT")
    public static let patch = HTTPMethod("PATCH")

    /// Idempotent per RFC 9110 section 9.2.2: repeating the request has the same intended effect,
    /// so it may be retried after a connection failure.
    public var isIdempotent: Bool {
        switch self {
        case .get, .head, .put, .delete, .options, .trace: return true
        default: return false
        }
    }

    /// Methods whose request content has a defined meaning, so an empty body is still framed
    /// with `Content-Length: 0` (RFC 9110 section 8.6).
    public var expectsRequestContent: Bool {
        self == .post || self == .put || self == .patch
    }

    public var description: String { rawValue }
}

/// An HTTP protocol version.
public struct HTTPVersion: Hashable, Sendable, CustomStringConvertible {
    public var major: Int
    public var minor: Int

    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }

    public static let http1_0 = HTTPVersion(major: 1, minor: 0)
    public static let http1_1 = HTTPVersion(major: 1, minor: 1)
    public static let http2 = HTTPVersion(major: 2, minor: 0)

    /// "HTTP/1.1", as written on a status line. The versions every response has are literals:
    /// interpolating them cost about 850 instructions a response.
    public var description: String {
        switch (major, minor) {
        case (1, 1): "HTTP/1.1"
        case (2, 0): "HTTP/2"
        case (1, 0): "HTTP/1.0"
        default: minor == 0 && major >= 2 ? "HTTP/\(major)" : "HTTP/\(major).\(minor)"
        }
    }
}

/// The head of a response: status line and header fields.
public struct HTTPResponseHead: Sendable, Equatable {
    public var version: HTTPVersion
    /// The three-digit status code.
    public var status: Int
    /// The reason phrase; carries no meaning and may be empty (always empty on HTTP/2).
    public var reason: String
    public var fields: HTTPFields {
        // What was read from the fields no longer holds once they change.
        didSet { validatedContentLength = nil }
    }
    /// The Content-Length that the HTTP/1 parser validated while it framed the body, or that
    /// nghttp2 checked on an HTTP/2 head, so that a reader need not look the field up again:
    /// its value, or -1 when the head has none; nil when not known (a head neither made, or
    /// whose fields changed since). Not part of equality: it only repeats what the fields say.
    /// Set only inside the package, by the code that read the fields.
    public package(set) var validatedContentLength: Int?

    public init(version: HTTPVersion, status: Int, reason: String = "", fields: HTTPFields = HTTPFields()) {
        self.version = version
        self.status = status
        self.reason = reason
        self.fields = fields
    }

    /// 1xx.
    public var isInformational: Bool { (100..<200).contains(status) }

    public static func == (lhs: HTTPResponseHead, rhs: HTTPResponseHead) -> Bool {
        lhs.version == rhs.version && lhs.status == rhs.status && lhs.reason == rhs.reason && lhs.fields == rhs.fields
    }
}

/// The head of a request, independent of the HTTP version that will carry it.
public struct HTTPRequestHead: Sendable, Equatable {
    public var method: HTTPMethod
    /// The request target: origin-form (`/path?query`), absolute-form (to a proxy) or
    /// authority-form (CONNECT).
    public var target: String
    /// `host[:port]` of the URL: the Host field on HTTP/1.1, `:authority` on HTTP/2.
    public var authority: String
    /// The scheme, for HTTP/2's `:scheme`.
    public var scheme: String
    /// Fields supplied by the caller and the session (framing fields are the encoder's business).
    public var fields: HTTPFields

    public init(method: HTTPMethod, target: String, authority: String, scheme: String = "http", fields: HTTPFields = HTTPFields()) {
        self.method = method
        self.target = target
        self.authority = authority
        self.scheme = scheme
        self.fields = fields
    }
}

extension HTTPRequestHead {
    /// Checks the head before anything is written: method and target as a request line needs
    /// them, every field name a token and every value free of CR, LF, NUL and the other
    /// controls (no header injection).
    public func validate() throws(HTTPFieldError) {
        // Scanned as contiguous bytes where the strings have them: stepping through a
        // String's UTF-8 view costs several times as much per byte.
        let method = method.rawValue
        guard method.utf8.withContiguousStorageIfAvailable({ HTTPFieldValidation.isToken(UnsafeRawBufferPointer($0)) })
            ?? HTTPFieldValidation.isToken(method.utf8) else {
            throw .invalidMethod(method)
        }
        guard target.utf8.withContiguousStorageIfAvailable(HTTPFieldValidation.isValidTarget) ?? HTTPFieldValidation.isValidTarget(target.utf8) else {
            throw .invalidTarget(target)
        }
        guard authority.utf8.withContiguousStorageIfAvailable(HTTPFieldValidation.isValidTarget) ?? HTTPFieldValidation.isValidTarget(authority.utf8) else {
            throw .invalidTarget(authority)
        }
        try fields.validate()
    }
}

extension HTTPFields {
    /// Checks that every name is a token and every value free of CR, LF, NUL and the other
    /// controls; at once when these fields were checked before (``validated()``).
    public func validate() throws(HTTPFieldError) {
        guard !knownValid else { return }
        var failure: HTTPFieldError?
        forEachField { name, value in
            guard failure == nil else { return }
            if !HTTPFieldValidation.isToken(name) {
                failure = .invalidName(String(decoding: name, as: UTF8.self))
            } else if !HTTPFieldValidation.isValidFieldValue(value) {
                failure = .invalidValue(name: String(decoding: name, as: UTF8.self))
            }
        }
        if let failure { throw failure }
    }

    /// These fields, checked (``validate()``) and marked as checked, for fields many requests
    /// share unchanged (a session's defaults): a head carrying them is not checked again
    /// until a field is added.
    public func validated() throws(HTTPFieldError) -> HTTPFields {
        try validate()
        var checked = self
        checked.knownValid = true
        return checked
    }
}
