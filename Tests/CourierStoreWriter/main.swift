// courier-store-writer DBPATH BATCHES PER_BATCH
// courier-store-writer cache DIR ENTRIES
//
// Used only by the tests, which kill it with SIGKILL at various moments and then check the
// store it leaves.
//
// The first form (CookieDatabaseTests) writes BATCHES transactions of PER_BATCH persistent
// cookies named b<batch>-<index> to the cookie store at DBPATH, one `CookieDatabase.apply` per
// batch, and prints `committed <batch>` on stdout after each commit, unbuffered, so that a
// parent that kills it knows which batches are durable.
//
// The second (URLCacheStoreTests) stores ENTRIES responses in the disk cache in DIR, through
// `URLCache(memoryCapacity: 0, diskCapacity: 1 << 30, directory:)`: entry <i> is a 200 for
// https://example.test/entry/<i> with `X-Index: <i>` and a body of `cacheEntryBodySize` bytes,
// each the byte i % 256 (so a body file, and a partial or wrong one is detectable). After
// each `storeCachedResponse` + `flush()` it prints `committed <i>`.

import Foundation

#if DEBUG
@testable import Courier
import CourierPolicies

/// A fixed expiry far beyond any test run: 2100-01-01T00:00:00Z.
let farFuture = Date(timeIntervalSince1970: 4_102_444_800)
/// Makes each value about 200 bytes, the size of a typical session token.
let padding = String(repeating: "x", count: 190)

/// The second form: see the top of the file.
func writeCacheEntries(directory: String, count: Int) -> Never {
    /// The body size of an entry: 100 KiB, well above the inline limit, so it gets a file.
    let cacheEntryBodySize = 100 * 1024
    let cache = URLCache(memoryCapacity: 0, diskCapacity: 1 << 30, directory: URL(fileURLWithPath: directory, isDirectory: true))
    for index in 0..<count {
        let url = URL(string: "https://example.test/entry/\(index)")!
        guard
            let response = HTTPURLResponse(
                url: url, statusCode: 200, httpVersion: "HTTP/1.1",
                headerFields: ["Content-Type": "application/octet-stream", "X-Index": "\(index)"]
            )
        else { exit(70) }  // EX_SOFTWARE
        let body = Data(repeating: UInt8(truncatingIfNeeded: index), count: cacheEntryBodySize)
        cache.storeCachedResponse(CachedURLResponse(response: response, data: body, storagePolicy: .allowed), for: URLRequest(url: url))
        cache.flush()
        // A disk that failed makes the cache keep to memory: nothing would be durable.
        guard cache.usesDisk else {
            FileHandle.standardError.write(Data("courier-store-writer: the disk cache in \(directory) cannot be used\n".utf8))
            exit(1)
        }
        FileHandle.standardOutput.write(Data("committed \(index)\n".utf8))
    }
    exit(0)
}

let arguments = CommandLine.arguments
if arguments.count == 4, arguments[1] == "cache" {
    guard let count = Int(arguments[3]), count >= 0 else {
        FileHandle.standardError.write(Data("usage: courier-store-writer cache DIR ENTRIES\n".utf8))
        exit(64)  // EX_USAGE
    }
    writeCacheEntries(directory: arguments[2], count: count)
}

guard arguments.count == 4, let batches = Int(arguments[2]), let perBatch = Int(arguments[3]), batches >= 0, perBatch >= 0 else {
    FileHandle.standardError.write(Data("usage: courier-store-writer DBPATH BATCHES PER_BATCH\n".utf8))
    exit(64)  // EX_USAGE
}

do {
    let database = try CookieDatabase.open(at: URL(fileURLWithPath: arguments[1]))
    for batch in 0..<batches {
        let now = Date()
        let cookies = (0..<perBatch).map { index in
            StoredCookie(
                name: "b\(batch)-\(index)", value: "\(padding)-\(batch)-\(index)", domain: "example.test", hostOnly: true, path: "/",
                expiry: farFuture, secure: false, httpOnly: false, sameSite: nil, creation: now, lastAccess: now
            )
        }
        try database.apply(stored: cookies, removed: [])
        // FileHandle writes straight to the descriptor: no buffer to lose when killed.
        FileHandle.standardOutput.write(Data("committed \(batch)\n".utf8))
    }
} catch {
    FileHandle.standardError.write(Data("courier-store-writer: \(error)\n".utf8))
    exit(1)
}
#else
// `@testable import` needs a module built for testing, which only debug builds are.
FileHandle.standardError.write(Data("courier-store-writer: built only in debug builds, for the tests\n".utf8))
exit(2)
#endif
