// courier-store-writer DBPATH BATCHES PER_BATCH
//
// Used only by the tests (CookieDatabaseTests): writes BATCHES transactions of PER_BATCH
// persistent cookies named b<batch>-<index> to the cookie store at DBPATH, one
// `CookieDatabase.apply` per batch, and prints `committed <batch>` on stdout after each commit,
// unbuffered, so that a parent that kills it knows which batches are durable.

import Foundation

#if DEBUG
@testable import Courier
import CourierPolicies

/// A fixed expiry far beyond any test run: 2100-01-01T00:00:00Z.
let farFuture = Date(timeIntervalSince1970: 4_102_444_800)
/// Makes each value about 200 bytes, the size of a typical session token.
let padding = String(repeating: "x", count: 190)

let arguments = CommandLine.arguments
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
