import CourierCore
import CourierHTTP1
import CourierReactor
import CourierTLS
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
        case .dial(let failure):
            return from(failure, url: url)
        case .timedOut:
            return .courier(.timedOut, "The request timed out.", url: url)
        case .cancelled:
            return .courier(.cancelled, "cancelled", url: url)
        case .connectionLost(let systemError):
            let detail = systemError.map { " (\($0.reason))" } ?? ""
            return .courier(.networkConnectionLost, "The network connection was lost\(detail).", url: url)
        case .remoteProtocol(let protocolError):
            if let http1 = protocolError as? HTTP1ResponseError, http1.isTruncation {
                return .courier(.networkConnectionLost, "The network connection was lost: \(http1).", url: url)
            }
            if let tls = protocolError as? TLSError {
                return from(.tls(tls), url: url)
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

    /// Apple's code and message for a connection that could not be made ready.
    static func from(_ failure: DialFailure, url: URL?) -> URLError {
        switch failure {
        case .connect(.resolution(.hostNotFound(let host))):
            return .courier(.cannotFindHost, "A server with the specified hostname could not be found (\(host)).", url: url)
        case .connect(.resolution(.lookupFailed(let host, let detail))):
            return .courier(.dnsLookupFailed, "The lookup of \(host) failed: \(detail).", url: url)
        case .connect(.noAddresses(let host)):
            return .courier(.cannotFindHost, "\(host) has no address Courier can connect to.", url: url)
        case .connect(.connect(let systemError)):
            return .courier(.cannotConnectToHost, "Could not connect to the server (\(systemError.reason)).", url: url, underlying: systemError)
        case .connect(.timedOut):
            return .courier(.timedOut, "The request timed out.", url: url)
        case .connect(.cancelled), .cancelled:
            return .courier(.cancelled, "cancelled", url: url)
        case .closedDuringHandshake:
            return .courier(.secureConnectionFailed, "The server closed the connection during the TLS handshake.", url: url)
        case .http2Setup(let why):
            return .courier(.cannotConnectToHost, "Could not start HTTP/2 on the connection (\(why)).", url: url)
        case .proxy(let proxyFailure):
            return from(proxyFailure, url: url)
        case .untrusted(let certificate):
            switch certificate {
            case .expired:
                return .courier(.serverCertificateHasBadDate, "The certificate for this server has expired.", url: url)
            case .notYetValid:
                return .courier(.serverCertificateNotYetValid, "The certificate for this server is not yet valid.", url: url)
            case .unknownRoot:
                return .courier(.serverCertificateHasUnknownRoot, "The certificate for this server was signed by an unknown certifying authority.", url: url)
            case .hostnameMismatch, .noCertificate, .untrusted:
                return .courier(.serverCertificateUntrusted, "The certificate for this server is invalid: \(certificate).", url: url)
            }
        case .tls(let tls):
            switch tls {
            case .clientCertificateRequired:
                return .courier(.clientCertificateRequired, "The server requires a client certificate.", url: url)
            case .clientCertificateRejected(let why):
                return .courier(.clientCertificateRejected, "The server rejected the client certificate (\(why)).", url: url)
            default:
                return .courier(.secureConnectionFailed, "A TLS error occurred and a secure connection to the server cannot be made (\(tls)).", url: url)
            }
        }
    }

    /// Apple's code, and a message naming the proxy, for a proxy that gave no tunnel.
    static func from(_ failure: ProxyFailure, url: URL?) -> URLError {
        let proxy = failure.proxy.authority
        switch failure {
        case .unreachable(_, .resolution(let resolution)):
            return .courier(.cannotFindHost, "The proxy \(proxy) could not be found (\(resolution)).", url: url)
        case .unreachable(_, .connect(let systemError)):
            return .courier(.cannotConnectToHost, "Could not connect to the proxy \(proxy) (\(systemError.reason)).", url: url, underlying: systemError)
        case .unreachable(_, let error):
            return .courier(.cannotConnectToHost, "Could not connect to the proxy \(proxy) (\(error)).", url: url)
        case .tunnelRefused(_, let head, let target, _) where head.status == 407:
            return .courier(.userAuthenticationRequired, "The proxy \(proxy) requires authentication for the tunnel to \(target) (407), and no credential was accepted.", url: url)
        case .tunnelRefused:
            return .courier(.cannotConnectToHost, "Could not connect to the server: \(failure).", url: url)
        case .socks(_, let socks):
            switch socks {
            case .authenticationFailed, .credentialsRequired, .noAcceptableMethod, .closedDuringAuthentication, .closedDuringMethodSelection:
                return .courier(.userAuthenticationRequired, "The SOCKS5 proxy \(proxy) did not accept the credentials: \(socks).", url: url)
            case .connectFailed:
                return .courier(.cannotConnectToHost, "Could not connect to the server through the SOCKS5 proxy \(proxy): \(socks).", url: url)
            default:
                return .courier(.badServerResponse, "The SOCKS5 proxy \(proxy) failed: \(socks).", url: url)
            }
        case .malformedReply:
            return .courier(.badServerResponse, "The proxy returned a bad response: \(failure).", url: url)
        case .closed(_, let systemError):
            return .courier(.networkConnectionLost, "The network connection was lost: \(failure).", url: url, underlying: systemError)
        case .timedOut:
            return .courier(.timedOut, "The request timed out: \(failure).", url: url)
        case .invalidTunnelRequest:
            return .courier(.badURL, "The request cannot go through the proxy: \(failure).", url: url)
        }
    }
}
