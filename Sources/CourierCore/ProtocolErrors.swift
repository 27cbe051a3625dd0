/// An error that says the peer broke the protocol: a malformed response, an impossible frame.
///
/// Kept apart from local misuse and from I/O failures; the `Courier` layer turns these into
/// `URLError(.badServerResponse)` (or a closer code where Apple has one).
public protocol RemoteProtocolError: Error, CustomStringConvertible, Sendable {}

/// An error that says the caller misused the API: a header that cannot be sent, a bad argument.
///
/// Raised before any byte reaches the network.
public protocol LocalProtocolError: Error, CustomStringConvertible, Sendable {}

/// A caller-supplied field that cannot be sent without changing the message's meaning.
public enum HTTPFieldError: LocalProtocolError, Equatable {
    /// The name is empty or holds a character outside RFC 9110's `token`.
    case invalidName(String)
    /// The value holds CR, LF, NUL or another control character (header injection). The value
    /// itself is not repeated here: it may be a secret.
    case invalidValue(name: String)
    /// The method is not a `token`.
    case invalidMethod(String)
    /// The request target or authority holds whitespace or control characters.
    case invalidTarget(String)

    public var description: String {
        switch self {
        case .invalidName(let name):
            return "invalid header field name \(name.debugDescription): names must be RFC 9110 tokens"
        case .invalidValue(let name):
            return "invalid value for header field \(name.debugDescription): CR, LF, NUL and other control characters are not allowed"
        case .invalidMethod(let method):
            return "invalid HTTP method \(method.debugDescription): methods must be RFC 9110 tokens"
        case .invalidTarget(let target):
            return "invalid request target \(target.debugDescription)"
        }
    }
}
