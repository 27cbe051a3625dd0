// Redirect decisions on arbitrary Location values: the input's first line is the request URL
// (a fixed one when it does not parse), the rest the Location. Whatever the input, the policy
// answers without trapping; a redirect it follows goes to an absolute URL, a POST becomes GET
// (301-303) or stays POST (307, 308), and a hop to another origin never keeps the credential
// fields.
import CourierPolicies
import Foundation

private let fallbackBase = URL(string: "http://example.test:8080/a/b/c?q=1#frag")!

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRedirectLocation(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let parts = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
    var base = fallbackBase
    var location = text
    if parts.count == 2 {
        location = String(parts[1])
        if let parsed = URL(string: String(parts[0])), ["http", "https"].contains(parsed.scheme?.lowercased() ?? ""), parsed.host != nil {
            base = parsed
        }
    }
    let policy = RedirectPolicy(extraCrossOriginFieldNames: ["X-Api-Key"])
    let status = [301, 302, 303, 307, 308][size % 5]
    switch policy.decide(status: status, location: location, requestURL: base, method: "POST", redirectsSoFar: size % 17) {
    case .deliver, .fail:
        break
    case .follow(let redirect):
        precondition(redirect.url.scheme != nil, "followed to a URL without a scheme: \(redirect.url)")
        precondition(status >= 307 ? redirect.method == "POST" : redirect.method == "GET", "wrong method for \(status)")
        precondition(redirect.isCrossOrigin == !RedirectPolicy.sameOrigin(base, redirect.url), "origin comparison disagrees")
        if redirect.isCrossOrigin {
            precondition(redirect.removedFieldNames.isSuperset(of: ["authorization", "proxy-authorization", "cookie", "x-api-key"]), "credentials kept across origins")
        }
    }
    _ = RedirectPolicy.resolve(location: location, against: base)
    return 0
}
