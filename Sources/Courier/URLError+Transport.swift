import CourierCore
import CourierHTTP1
import CourierReactor
import CourierTransport
import Foundation

/// Apple's `NSURLErrorFailingURLStringErrorKey` ("NSErrorFailingURLStringKey"), still set by
/// Apple's URLSession although Foundation marks the constant deprecated.
private let failingURLStringKey = "NSErrorFailingURLStringKey"

extension URLError {
    /// A URLError with Apple's user-info keys: the failing URL, its string, and a message.
    static func courier(_ code: URLError.Code, _ message: String, url: URL?, underlying: Error? = nil) -> URLError {
        var info: [String: Any] = [NSLocalizedDescriptionKey: message]
        if let url {
            info[NSURLErrorFailingURLErrorKey] = url
            info[failingURLStringKey] = url.absoluteString
        }
        if let underlying { info[NSUnderlyingErrorKey] = underlying as NSError }
        return URLError(code, userInfo: info)
    }

    /// Apple's code and message for a transport failure.
    static func from(_ error: TransportError, url: URL?) -> URLError {
        switch error {
        case .connect(.resolution(.hostNotFound(let host))):
            return .courier(.cannotFindHost, "A server with the specified hostname could not be found (\(host)).", url: url)
        case .connect(.resolution(.lookupFailed(let host, let detail))):
            return .courier(.dnsLookupFailed, "The lookup of \(host) failed: \(detail).", url: url)
        case .connect(.noAddresses(let host)):
            return .courier(.cannotFindHost, "\(host) has no address Courier can connect to.", url: url)
        case .connect(.connect(let systemError)):
            return .courier(.cannotConnectToHost, "Could not connect to the server (\(systemError.reason)).", url: url, underlying: systemError)
        case .connect(.timedOut), .timedOut:
            return .courier(.timedOut, "The request timed out.", url: url)
        case .connect(.cancelled), .cancelled:
            return .courier(.cancelled, "cancelled", url: url)
        case .connectionLost(let systemError):
            let detail = systemError.map { " (\($0.reason))" } ?? ""
            return .courier(.networkConnectionLost, "The network connection was lost\(detail).", url: url)
        case .remoteProtocol(let protocolError):
            if let http1 = protocolError as? HTTP1ResponseError, http1.isTruncation {
                return .courier(.networkConnectionLost, "The network connection was lost: \(http1).", url: url)
            }
            return .courier(.badServerResponse, "The server returned a bad response: \(protocolError).", url: url)
        case .localProtocol(let localError):
            return .courier(.badURL, "The request cannot be sent: \(localError).", url: url)
        case .bodyStream(let why):
            return .courier(.requestBodyStreamExhausted, "The request body stream failed: \(why).", url: url)
        case .shutDown:
            return .courier(.cancelled, "The session was invalidated.", url: url)
        }
    }
}
