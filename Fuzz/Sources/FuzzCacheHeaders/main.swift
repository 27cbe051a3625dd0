// RFC 9111 cache decisions on arbitrary header fields. The first byte picks the stored
// response's status; the rest is split into lines (LF or CRLF). A line "Name: value" whose name
// is a token is a header field; any other line is a Cache-Control value. A line "--" starts the
// next section: the stored response, the request (it got the stored response and now asks
// again), optionally another request, optionally a 304's fields. Request and response times are
// fixed, and `now` takes a few fixed moments plus the moment the response turns stale and the
// dates the fields name.
//
// Whatever the input, nothing traps, and: every HTTP-date read is in whole seconds within
// 0000…10000, unchanged by surrounding whitespace, and in 1601…9999 reads back from its own
// IMF-fixdate; Cache-Control's numbers are delta-seconds within 2^31, directive names ignore
// case and the first occurrence wins; a storable response meets §3; the freshness lifetime is
// finite and ≥ 0; the current age is finite, ≥ 0 and non-decreasing in `now`; Vary matches the
// request that got the response (but `Vary: *` nothing) and compares symmetrically; `decide`
// answers fresh only for a fresh response or one the request's max-stale allows, and obeys the
// request's no-cache, max-age and min-fresh; its validation fields are `conditionalFields`;
// stale-if-error needs a window that covers the staleness and, once refused, stays refused;
// merging an empty 304 drops only Date and Age, merging a 304 replaces exactly what §4.3.4 says
// (and twice is once); invalidation keeps to the request URL's origin.
import CourierCore
import CourierPolicies
import Foundation

private let statuses = [200, 203, 204, 206, 301, 304, 404, 500]
/// 2024-05-01T11:59:59.75Z and 2024-05-01T12:00:00.25Z: the seeds' Date is 12:00:00.
private let requestTime = Date(timeIntervalSince1970: 1_714_564_799.75)
private let responseTime = Date(timeIntervalSince1970: 1_714_564_800.25)
/// Seconds after response_time at which every input is judged.
private let fixedOffsets: [TimeInterval] = [0, 0.5, 30, 60, 3_599.75, 3_600, 86_400, 30 * 86_400, 400 * 86_400]
private let requestURL = URL(string: "https://cache.example.test:8443/app/items?id=7")!
private let safeMethods = ["GET", "HEAD", "OPTIONS", "TRACE"]
/// Unsafe or of unknown safety ("get" is not GET): all invalidate alike.
private let unsafeMethods = ["POST", "DELETE", "PURGE", "get"]
/// CacheControl.maximumDeltaSeconds (internal): 2^31.
private let maximumDeltaSeconds = 2_147_483_648
/// 0000-01-01T00:00:00Z and 10000-01-01T00:00:00Z (9999-12-31T23:59:60, a leap second, is the
/// next second): the range four-digit years can denote.
private let earliestParsable = -62_167_219_200.0
private let latestParsable = 253_402_300_800.0
/// 1601-01-01T00:00:00Z and 9999-12-31T23:59:59Z, where format and parse must agree.
private let earliestRoundTrip = -11_644_473_600.0
private let latestRoundTrip = 253_402_300_799.0
/// What HTTPCachePolicy.merge documents a 304 never updates (notUpdatedFieldNames is internal).
private let notUpdatedFieldNames: Set<String> = [
    "content-length", "content-encoding", "content-range",
    "connection", "proxy-connection", "keep-alive", "te", "transfer-encoding", "upgrade",
    "proxy-authenticate", "proxy-authentication-info", "proxy-authorization",
]
/// tchar (RFC 9110 §5.6.2).
private let tokenBytes = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCacheHeaders(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let status = statuses[Int(data[0]) % statuses.count]
    let sections = readSections(Array(UnsafeBufferPointer(start: data + 1, count: size - 1)))
    let response = sections[0]
    let request = sections.count > 1 ? sections[1] : HTTPFields()
    let otherRequest = sections.count > 2 ? sections[2] : nil
    let notModified = sections.count > 3 ? sections[3] : nil
    let stored = StoredResponseFacts(
        status: status, responseFields: response, requestFields: request,
        requestTime: requestTime, responseTime: responseTime
    )

    var dates: [Date] = []
    for fields in sections {
        checkCacheControl(fields)
        for field in fields.fields {
            if let date = checkDate(field.value) { dates.append(date) }
        }
    }
    checkStorable(status: status, request: request, response: response)
    let lifetime = checkLifetime(stored)
    let moments = momentsToJudge(stored, lifetime: lifetime, dates: dates)
    let ages = checkAges(stored, moments: moments)
    checkVary(stored, otherRequest: otherRequest)
    let conditional = checkConditionalFields(stored)
    for asking in [request] + (otherRequest.map { [$0] } ?? []) {
        checkDecisions(stored, request: asking, moments: moments, ages: ages, lifetime: lifetime, conditional: conditional)
        checkStaleOnError(stored, request: asking, moments: moments, ages: ages, lifetime: lifetime)
    }
    checkMergeWithEmpty(response)
    if let notModified { checkMerge(response, notModified) }
    checkInvalidation(status: status, response: response)
    return 0
}

// MARK: Reading the input

/// The input's sections of fields; the first (the stored response's) is always there.
private func readSections(_ bytes: [UInt8]) -> [HTTPFields] {
    var sections = [HTTPFields()]
    for rawLine in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
        var line = rawLine
        if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
        if line.elementsEqual("--".utf8) {
            if sections.count < 4 { sections.append(HTTPFields()) }
            continue
        }
        guard !line.isEmpty else { continue }
        let (name, value) = field(line)
        sections[sections.count - 1].append(name: name, value: value)
    }
    return sections
}

/// "Name: value" when the text before the first colon is a token, else a Cache-Control value.
/// Values lose their surrounding SP and HTAB, as a parser's would.
private func field(_ line: ArraySlice<UInt8>) -> (name: String, value: String) {
    if let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex,
       line[..<colon].allSatisfy({ tokenBytes.contains($0) }) {
        let value = trimmedBytes(line[(colon + 1)...])
        return (String(decoding: line[..<colon], as: UTF8.self), String(decoding: value, as: UTF8.self))
    }
    return ("Cache-Control", String(decoding: trimmedBytes(line), as: UTF8.self))
}

private func trimmedBytes(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
    var start = bytes.startIndex
    var end = bytes.endIndex
    while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
    while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
    return bytes[start..<end]
}

// MARK: HTTP-date and Cache-Control

/// A date HTTPDate reads is in whole seconds within four-digit years, ignores surrounding
/// whitespace, and in 1601…9999 reads back from its own IMF-fixdate.
private func checkDate(_ value: String) -> Date? {
    guard let date = HTTPDate.parse(value) else { return nil }
    let seconds = date.timeIntervalSince1970
    precondition(seconds == seconds.rounded(.towardZero), "a date not in whole seconds (\(seconds)) from: \(value)")
    precondition(seconds >= earliestParsable && seconds <= latestParsable, "a date outside 0000…10000 (\(seconds)) from: \(value)")
    precondition(HTTPDate.parse(" \t" + value + " ") == date, "surrounding whitespace changes the date of: \(value)")
    if seconds >= earliestRoundTrip && seconds <= latestRoundTrip {
        let written = HTTPDate.format(date)
        precondition(written.utf8.count == 29, "not an IMF-fixdate: \(written)")
        precondition(HTTPDate.parse(written) == date, "\(written) does not read back as \(seconds) (from: \(value))")
    }
    return date
}

/// Cache-Control's numbers are delta-seconds within 2^31; reading twice agrees; directive names
/// ignore ASCII case; repeating every Cache-Control line after the others changes nothing
/// (the first occurrence wins).
private func checkCacheControl(_ fields: HTTPFields) {
    let directives = CacheControl(fields)
    precondition(CacheControl(fields) == directives, "two reads of one Cache-Control differ")
    let numbers = [directives.maxAge, directives.sharedMaxAge, directives.minFresh, directives.staleWhileRevalidate, directives.staleIfError]
    for case let number? in numbers {
        precondition(number >= 0 && number <= maximumDeltaSeconds, "a delta-seconds out of range: \(number)")
    }
    if case .seconds(let seconds)? = directives.maxStale {
        precondition(seconds >= 0 && seconds <= maximumDeltaSeconds, "a max-stale out of range: \(seconds)")
    }
    let values = fields.values("Cache-Control")
    guard !values.isEmpty else {
        precondition(directives == CacheControl(), "directives without a Cache-Control field")
        return
    }
    var repeated = fields
    for value in values { repeated.append(name: "cache-control", value: value) }
    precondition(CacheControl(repeated) == directives, "a repeated directive overrode the first: \(values)")
    var shouted = HTTPFields()
    for field in fields.fields {
        let isCacheControl = field.name.lowercased() == "cache-control"
        shouted.append(name: field.name, value: isCacheControl ? asciiUppercased(field.value) : field.value)
    }
    precondition(CacheControl(shouted) == directives, "directive names are case-sensitive: \(values)")
}

private func asciiUppercased(_ text: String) -> String {
    let bytes = text.utf8.map { (byte: UInt8) -> UInt8 in byte >= 0x61 && byte <= 0x7A ? byte - 0x20 : byte }
    return String(decoding: bytes, as: UTF8.self)
}

// MARK: Storing, freshness, age

/// §3: what isStorable stores meets every condition its documentation lists.
private func checkStorable(status: Int, request: HTTPFields, response: HTTPFields) {
    let responseDirectives = CacheControl(response)
    for method in ["GET", "HEAD", "POST", "get"] {
        guard HTTPCachePolicy.isStorable(method: method, requestFields: request, status: status, responseFields: response) else { continue }
        precondition(method == "GET", "a response to \(method) is storable")
        precondition(status != 206 && status != 304, "a \(status) is storable")
        precondition(!CacheControl(request).noStore && !responseDirectives.noStore, "stored despite no-store")
        precondition(!listMembers(response, "Vary").contains("*"), "stored despite Vary: *")
        precondition(
            responseDirectives.isPublic || responseDirectives.isPrivate || response.contains("Expires")
                || responseDirectives.maxAge != nil || HTTPCachePolicy.heuristicallyCacheableStatuses.contains(status),
            "a \(status) stored without explicit or heuristic freshness"
        )
    }
}

/// §4.2.1: finite and ≥ 0; max-age when present; a heuristic within its cap and only where
/// §4.2.2 allows one.
private func checkLifetime(_ stored: StoredResponseFacts) -> TimeInterval {
    let lifetime = HTTPCachePolicy.freshnessLifetime(stored)
    precondition(lifetime.isFinite && lifetime >= 0, "a freshness lifetime of \(lifetime)")
    let directives = CacheControl(stored.responseFields)
    if let maxAge = directives.maxAge {
        precondition(lifetime == TimeInterval(maxAge), "a lifetime of \(lifetime) under max-age=\(maxAge)")
    } else if !stored.responseFields.contains("Expires") {
        precondition(lifetime <= HTTPCachePolicy.maximumHeuristicLifetime, "a heuristic lifetime of \(lifetime)")
        if !HTTPCachePolicy.heuristicallyCacheableStatuses.contains(stored.status) && !directives.isPublic {
            precondition(lifetime == 0, "a heuristic lifetime of \(lifetime) for a \(stored.status)")
        }
    }
    return lifetime
}

/// The fixed moments, the moment the response turns stale (and a second either side), and up
/// to eight of the dates the fields name, when not before response_time; in order.
private func momentsToJudge(_ stored: StoredResponseFacts, lifetime: TimeInterval, dates: [Date]) -> [Date] {
    var moments = fixedOffsets.map { responseTime.addingTimeInterval($0) }
    let turn = lifetime - HTTPCachePolicy.currentAge(stored, now: responseTime)
    if turn.isFinite {
        for offset in [turn - 1, turn, turn + 1] where offset >= 0 {
            moments.append(responseTime.addingTimeInterval(offset))
        }
    }
    moments += dates.filter { $0 >= responseTime }.prefix(8)
    return moments.sorted()
}

/// §4.2.3: finite, ≥ 0 from response_time on, and non-decreasing in `now`.
private func checkAges(_ stored: StoredResponseFacts, moments: [Date]) -> [TimeInterval] {
    var ages: [TimeInterval] = []
    for now in moments {
        let age = HTTPCachePolicy.currentAge(stored, now: now)
        precondition(age.isFinite && age >= 0, "a current age of \(age) at \(now.timeIntervalSince1970)")
        if let previous = ages.last {
            precondition(age >= previous, "the age fell from \(previous) to \(age) at \(now.timeIntervalSince1970)")
        }
        ages.append(age)
    }
    return ages
}

// MARK: Vary, decisions, validation, stale-if-error

/// §4.1: the request that got the response matches unless Vary has "*"; matching is symmetric.
private func checkVary(_ stored: StoredResponseFacts, otherRequest: HTTPFields?) {
    let varyAll = listMembers(stored.responseFields, "Vary").contains("*")
    let matchesOwn = HTTPCachePolicy.varyMatches(stored, requestFields: stored.requestFields)
    precondition(matchesOwn == !varyAll, "Vary matching of the request that got the response: \(matchesOwn), Vary: * \(varyAll)")
    guard let otherRequest else { return }
    let forward = HTTPCachePolicy.varyMatches(stored, requestFields: otherRequest)
    var swapped = stored
    swapped.requestFields = otherRequest
    let backward = HTTPCachePolicy.varyMatches(swapped, requestFields: stored.requestFields)
    precondition(forward == backward, "Vary matching is not symmetric")
    precondition(!(varyAll && forward), "Vary: * matched")
}

/// §4.3.1: If-None-Match from a non-empty ETag, If-Modified-Since from a valid Last-Modified,
/// nothing else.
private func checkConditionalFields(_ stored: StoredResponseFacts) -> HTTPFields {
    let conditional = HTTPCachePolicy.conditionalFields(for: stored)
    precondition(conditional == HTTPCachePolicy.conditionalFields(for: stored), "two conditional field sets differ")
    precondition(conditional.count <= 2, "\(conditional.count) conditional fields")
    for field in conditional.fields {
        precondition(field.name == "If-None-Match" || field.name == "If-Modified-Since", "a conditional field \(field.name)")
    }
    let etag = stored.responseFields.first("ETag").map(trimmedCharacters) ?? ""
    precondition(conditional.first("If-None-Match") == (etag.isEmpty ? nil : etag), "If-None-Match does not carry the ETag \(etag)")
    if let since = conditional.first("If-Modified-Since") {
        precondition(HTTPDate.parse(since) != nil, "If-Modified-Since is no date: \(since)")
        precondition(since == stored.responseFields.first("Last-Modified").map(trimmedCharacters), "If-Modified-Since is not the Last-Modified")
    } else if let lastModified = stored.responseFields.first("Last-Modified") {
        precondition(HTTPDate.parse(lastModified) == nil, "a valid Last-Modified left out: \(lastModified)")
    }
    return conditional
}

/// §4 and §4.2.4, RFC 5861 §3: what `decide` answers obeys the directives it documents.
private func checkDecisions(
    _ stored: StoredResponseFacts, request: HTTPFields, moments: [Date], ages: [TimeInterval],
    lifetime: TimeInterval, conditional: HTTPFields
) {
    let asked = CacheControl(request)
    let offered = CacheControl(stored.responseFields)
    for (now, age) in zip(moments, ages) {
        let decision = HTTPCachePolicy.decide(stored, requestFields: request, now: now)
        let moment = "at age \(age), lifetime \(lifetime)"
        switch decision {
        case .validate(let fields):
            precondition(fields == conditional, "validation fields other than conditionalFields \(moment)")
            continue
        case .fresh:
            if !(lifetime > age) {
                precondition(!offered.mustRevalidate, "a must-revalidate response served stale \(moment)")
                switch asked.maxStale {
                case .any?: break
                case .seconds(let seconds)?:
                    precondition(age - lifetime <= TimeInterval(seconds), "stale beyond max-stale=\(seconds) served \(moment)")
                case nil:
                    preconditionFailure("a stale response served as fresh without max-stale \(moment)")
                }
            }
        case .staleWhileRevalidate:
            precondition(!(lifetime > age), "a fresh response served as stale-while-revalidate \(moment)")
            precondition(!offered.mustRevalidate, "a must-revalidate response served stale \(moment)")
            guard let window = offered.staleWhileRevalidate else {
                preconditionFailure("stale-while-revalidate without the directive \(moment)")
            }
            precondition(age - lifetime <= TimeInterval(window), "stale beyond stale-while-revalidate=\(window) \(moment)")
            switch asked.maxStale {
            case .any?: preconditionFailure("max-stale (any) not served as fresh \(moment)")
            case .seconds(let seconds)?:
                precondition(age - lifetime > TimeInterval(seconds), "within max-stale=\(seconds) yet not fresh \(moment)")
            case nil: break
            }
        }
        // Served from the cache: the request's and the response's no-cache, the request's
        // max-age (a positive one is valid) and min-fresh were honoured.
        precondition(!asksNoCache(request) && !offered.noCache, "no-cache answered from the cache \(moment)")
        if let maxAge = asked.maxAge, maxAge > 0 {
            precondition(age <= TimeInterval(maxAge), "older than the request's max-age=\(maxAge) \(moment)")
        }
        if let minFresh = asked.minFresh {
            precondition(lifetime - age >= TimeInterval(minFresh), "less fresh than min-fresh=\(minFresh) \(moment)")
        }
    }
}

/// RFC 5861 §4: allowed only by a window that covers the staleness, never against no-cache or
/// must-revalidate, and once refused, refused at every later moment.
private func checkStaleOnError(
    _ stored: StoredResponseFacts, request: HTTPFields, moments: [Date], ages: [TimeInterval], lifetime: TimeInterval
) {
    let asked = CacheControl(request)
    let offered = CacheControl(stored.responseFields)
    var allowedBefore = true
    for (now, age) in zip(moments, ages) {
        let allowed = HTTPCachePolicy.mayServeStaleOnError(stored, requestFields: request, now: now)
        defer { allowedBefore = allowed }
        guard allowed else { continue }
        precondition(allowedBefore, "stale-if-error refused at an earlier moment, allowed at age \(age)")
        precondition(!offered.noCache && !offered.mustRevalidate, "stale-if-error despite no-cache or must-revalidate")
        let staleness = max(0, age - lifetime)
        let byRequest = asked.staleIfError.map { staleness <= TimeInterval($0) } ?? false
        let byResponse = offered.staleIfError.map { staleness <= TimeInterval($0) } ?? false
        precondition(byRequest || (byResponse && !asksNoCache(request)), "stale-if-error with no window covering \(staleness) s")
    }
}

// MARK: 304 merge and invalidation

/// §4.3.4 as merge documents it: an empty 304 keeps every stored field but Date and Age, in order.
private func checkMergeWithEmpty(_ stored: HTTPFields) {
    let merged = HTTPCachePolicy.merge(stored: stored, notModified: HTTPFields())
    var expected = HTTPFields()
    for field in stored.fields where !["date", "age"].contains(field.name.lowercased()) {
        expected.append(name: field.name, value: field.value)
    }
    precondition(merged == expected, "an empty 304 changed more than Date and Age")
}

/// A 304's fields replace the stored ones of their names, except the ones never updated and
/// those its Connection names; Date and Age the 304 does not update are dropped; everything else
/// stays. Merging the same 304 again changes nothing.
private func checkMerge(_ stored: HTTPFields, _ notModified: HTTPFields) {
    let merged = HTTPCachePolicy.merge(stored: stored, notModified: notModified)
    let excluded = notUpdatedFieldNames.union(listMembers(notModified, "Connection"))
    let before = grouped(stored)
    let updates = grouped(notModified).filter { !excluded.contains($0.key) }
    let after = grouped(merged)
    for name in Set(before.keys).union(updates.keys).union(after.keys) {
        let expected: [String]
        if let update = updates[name] {
            expected = update
        } else if name == "date" || name == "age" {
            expected = []
        } else {
            expected = before[name] ?? []
        }
        precondition((after[name] ?? []) == expected, "merge gave \(name): \(after[name] ?? []), not \(expected)")
    }
    precondition(HTTPCachePolicy.merge(stored: merged, notModified: notModified) == merged, "merging one 304 twice differs from once")
}

/// Only unsafe methods with a 2xx or 3xx invalidate; the request URL first, then at most
/// Location and Content-Location, of the same origin, without fragments or duplicates.
private func checkInvalidation(status: Int, response: HTTPFields) {
    for method in safeMethods {
        let urls = HTTPCachePolicy.invalidatedURLs(method: method, status: status, requestURL: requestURL, responseFields: response)
        precondition(urls.isEmpty, "\(method) invalidated \(urls)")
    }
    var first: [String]?
    for method in unsafeMethods {
        let urls = HTTPCachePolicy.invalidatedURLs(method: method, status: status, requestURL: requestURL, responseFields: response)
        guard (200...399).contains(status) else {
            precondition(urls.isEmpty, "a \(status) invalidated \(urls)")
            continue
        }
        let written = urls.map(\.absoluteString)
        if let first {
            precondition(written == first, "\(method) invalidated \(written), not \(first)")
            continue
        }
        first = written
        precondition(!urls.isEmpty && written[0] == requestURL.absoluteString, "the request URL is not invalidated first: \(written)")
        precondition(urls.count <= 3 && Set(written).count == urls.count, "too many or repeated URLs: \(written)")
        let origin = Origin(requestURL)
        for url in urls {
            precondition(url.fragment == nil, "a fragment kept: \(url.absoluteString)")
            precondition(Origin(url) == origin, "another origin invalidated: \(url.absoluteString)")
        }
    }
}

/// Scheme, host and port (made explicit), as RFC 6454 compares them.
private struct Origin: Equatable {
    var scheme: String?
    var host: String?
    var port: Int?

    init(_ url: URL) {
        scheme = url.scheme?.lowercased()
        host = url.host(percentEncoded: false)?.lowercased()
        switch (url.port, scheme) {
        case (let port?, _): self.port = port
        case (nil, "https"?): port = 443
        case (nil, "http"?): port = 80
        default: port = nil
        }
    }
}

// MARK: Helpers (as HTTPCachePolicy documents them)

/// Request no-cache, or Pragma: no-cache in a request without Cache-Control (§5.4).
private func asksNoCache(_ fields: HTTPFields) -> Bool {
    CacheControl(fields).noCache || (!fields.contains("Cache-Control") && listMembers(fields, "Pragma").contains("no-cache"))
}

/// A list field's members across its lines, trimmed and lower-cased, empty ones left out.
private func listMembers(_ fields: HTTPFields, _ name: String) -> [String] {
    fields.values(name).flatMap { $0.split(separator: ",") }.map { trimmedCharacters(String($0)).lowercased() }.filter { !$0.isEmpty }
}

/// `text` without leading and trailing SP and HTAB characters.
private func trimmedCharacters(_ text: String) -> String {
    var characters = Substring(text)
    while let first = characters.first, first == " " || first == "\t" { characters.removeFirst() }
    while let last = characters.last, last == " " || last == "\t" { characters.removeLast() }
    return String(characters)
}

/// Values by lower-cased name, in order. Names here are tokens, so this is HTTPFields' matching.
private func grouped(_ fields: HTTPFields) -> [String: [String]] {
    var result: [String: [String]] = [:]
    for field in fields.fields { result[field.name.lowercased(), default: []].append(field.value) }
    return result
}
