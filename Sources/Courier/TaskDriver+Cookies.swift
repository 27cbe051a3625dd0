import CourierCore
import CourierTransport
import Foundation

/// Cookies on the way out and in (the bridge stage): every request of a task carries the
/// cookies of the configuration's `httpCookieStorage` that match it, and every response —
/// a redirect and a 401 included — has its `Set-Cookie` fields stored before anything follows
/// it, so a cookie set on one hop goes with the next.
extension TaskDriver {
    /// Adds the jar's cookies to the request's `Cookie` field, after the caller's own.
    func addCookies(to transportRequest: inout TransportRequest, request: URLRequest) {
        session.addCookies(to: &transportRequest, request: request)
    }

    /// Stores the cookies a response head sets, as the configuration's accept policy allows.
    func storeCookies(from head: HTTPResponseHead, url: URL, request: URLRequest?) {
        let refusals = session.storeCookies(from: head, url: url, request: request)
        if !refusals.isEmpty {
            logger.debug("cookies refused", metadata: ["task": "\(identifier)", "reasons": "\(refusals.joined(separator: "; "))"])
        }
    }
}

/// The same for every kind of task (a WebSocket's handshake too).
extension URLSession {
    func addCookies(to transportRequest: inout TransportRequest, request: URLRequest) {
        guard setsCookies, let storage = cookieStorage, request.httpShouldHandleCookies, let url = request.url,
              let jarCookies = storage.cookieField(for: url, mainDocumentURL: request.mainDocumentURL) else { return }
        if let callerCookies = transportRequest.head.fields.combined("Cookie"), !callerCookies.isEmpty {
            transportRequest.head.fields.set(name: "Cookie", value: callerCookies + "; " + jarCookies)
        } else {
            transportRequest.head.fields.set(name: "Cookie", value: jarCookies)
        }
    }

    /// Stores what `head` sets; returns why any cookie was refused.
    @discardableResult
    func storeCookies(from head: HTTPResponseHead, url: URL, request: URLRequest?) -> [String] {
        guard request?.httpShouldHandleCookies ?? true, let storage = cookieStorage else { return [] }
        let fields = head.fields.values("Set-Cookie")
        guard !fields.isEmpty else { return [] }
        return storage.storeResponseCookies(fields, for: url, mainDocumentURL: request?.mainDocumentURL, policy: frozenConfiguration.httpCookieAcceptPolicy)
    }
}
