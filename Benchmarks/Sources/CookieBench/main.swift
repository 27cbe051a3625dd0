// Cookie lookup micro-benchmark: the cookies for one request, in a jar of 3,000 cookies
// across 300 domains (10 per domain: host-only and domain cookies on several paths). Two
// levels: the pure jar (`CookieJar.cookies(for:)` and the Cookie field, what a session does
// per request) and the public `HTTPCookieStorage.cookies(for:)` (which also builds the
// `HTTPCookie` objects). Prints JSON: nanoseconds per lookup and cookies matched.

import BenchSupport
import Courier
import CourierPolicies
import Foundation

let domains = 300
let perDomain = 10
let now = Date(timeIntervalSince1970: 1_800_000_000)
let paths = ["/", "/a", "/a/b", "/c", "/a/b/c"]

var jar = CookieJar(limits: CookieJar.Limits(perDomain: 100, total: 10_000))
let storage = URLSessionConfiguration.ephemeral.httpCookieStorage!
for d in 0..<domains {
    let host = "www.site\(d).example"
    for c in 0..<perDomain {
        let domainCookie = c % 2 == 0
        let path = paths[c % paths.count]
        let stored = StoredCookie(
            name: "c\(c)", value: "value-\(d)-\(c)", domain: domainCookie ? "site\(d).example" : host, hostOnly: !domainCookie,
            path: path, expiry: now.addingTimeInterval(86_400), secure: false, httpOnly: false, sameSite: nil,
            creation: now.addingTimeInterval(Double(c)), lastAccess: now
        )
        jar.insert(stored, now: now)
        var properties: [HTTPCookiePropertyKey: Any] = [
            .name: "c\(c)", .value: "value-\(d)-\(c)", .domain: domainCookie ? ".site\(d).example" : host, .path: path,
            .expires: Date().addingTimeInterval(86_400),
        ]
        properties[.version] = "0"
        storage.setCookie(HTTPCookie(properties: properties)!)
    }
}
precondition(jar.count == domains * perDomain)
precondition(storage.cookies?.count == domains * perDomain)

let urls = (0..<domains).map { URL(string: "http://www.site\($0).example/a/b/index.html")! }
let suffixes = SystemPublicSuffixes.shared

@MainActor func measureJar(iterations: Int) -> (seconds: Double, matched: Int) {
    var matched = 0
    let start = ContinuousClock.now
    for i in 0..<iterations {
        let found = jar.cookies(for: CookieContext(url: urls[i % urls.count]), now: now, suffixes: suffixes)
        matched += CookieJar.cookieHeader(found) == nil ? 0 : found.count
    }
    return (seconds(ContinuousClock.now - start), matched)
}

@MainActor func measureStorage(iterations: Int) -> (seconds: Double, matched: Int) {
    var matched = 0
    let start = ContinuousClock.now
    for i in 0..<iterations {
        matched += storage.cookies(for: urls[i % urls.count])?.count ?? 0
    }
    return (seconds(ContinuousClock.now - start), matched)
}

_ = measureJar(iterations: 10_000)
_ = measureStorage(iterations: 2_000)
let jarRun = measureJar(iterations: 200_000)
let storageRun = measureStorage(iterations: 50_000)
let results: [String: Any] = [
    "cookies": domains * perDomain,
    "domains": domains,
    "jar": ["nsPerLookup": jarRun.seconds / 200_000 * 1e9, "cookiesPerLookup": Double(jarRun.matched) / 200_000],
    "storage": ["nsPerLookup": storageRun.seconds / 50_000 * 1e9, "cookiesPerLookup": Double(storageRun.matched) / 50_000],
]
let data = try JSONSerialization.data(withJSONObject: results, options: [.sortedKeys])
print(String(decoding: data, as: UTF8.self))
