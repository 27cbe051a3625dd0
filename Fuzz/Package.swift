// swift-tools-version: 6.1
//
// Courier's fuzz targets: one libFuzzer executable per parser. Build and run them with
// run.sh (release mode, -sanitize=fuzzer and address sanitizer, coverage instrumentation).
// Every target holds one invariant: only Courier's protocol errors may escape — no trap, no
// crash, no hang, no unbounded memory.

import PackageDescription

import Foundation

// SwiftPM names a path dependency after its directory, so the checkout's folder name (whatever
// a clone is called) is the identity under which Courier's products are found.
let courier = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent.lowercased()

let package = Package(
    name: "CourierFuzz",
    dependencies: [.package(path: "..")],
    targets: [
        .target(
            name: "FuzzSupport",
            dependencies: [.product(name: "CourierHTTP1", package: courier), .product(name: "CourierCore", package: courier)]
        ),
        .executableTarget(name: "fuzz-http1-response", dependencies: ["FuzzSupport"], path: "Sources/FuzzHTTP1Response"),
        .executableTarget(name: "fuzz-http1-chunked", dependencies: ["FuzzSupport"], path: "Sources/FuzzHTTP1Chunked"),
        .executableTarget(
            name: "fuzz-request-encoding",
            dependencies: [.product(name: "CourierHTTP1", package: courier), .product(name: "CourierCore", package: courier)],
            path: "Sources/FuzzRequestEncoding"
        ),
        .executableTarget(
            name: "fuzz-url-request",
            dependencies: [.product(name: "Courier", package: courier)],
            path: "Sources/FuzzURLRequest"
        ),
        .executableTarget(
            name: "fuzz-http2-frames",
            dependencies: [.product(name: "CourierHTTP2", package: courier), .product(name: "CourierCore", package: courier)],
            path: "Sources/FuzzHTTP2Frames"
        ),
        .executableTarget(
            name: "fuzz-data-url",
            dependencies: [.product(name: "CourierPolicies", package: courier)],
            path: "Sources/FuzzDataURL"
        ),
        .executableTarget(
            name: "fuzz-redirect-location",
            dependencies: [.product(name: "CourierPolicies", package: courier)],
            path: "Sources/FuzzRedirectLocation"
        ),
        .executableTarget(
            name: "fuzz-tls-records",
            dependencies: [.product(name: "CourierTLS", package: courier), .product(name: "CourierCore", package: courier)],
            path: "Sources/FuzzTLSRecords"
        ),
        .executableTarget(
            name: "fuzz-content-decoding",
            dependencies: [.product(name: "CourierPolicies", package: courier)],
            path: "Sources/FuzzContentDecoding"
        ),
        .executableTarget(
            name: "fuzz-auth-challenge",
            dependencies: [.product(name: "CourierPolicies", package: courier)],
            path: "Sources/FuzzAuthChallenge"
        ),
        .executableTarget(
            name: "fuzz-set-cookie",
            dependencies: [.product(name: "CourierPolicies", package: courier)],
            path: "Sources/FuzzSetCookie"
        ),
        .executableTarget(
            name: "fuzz-cache-headers",
            dependencies: [.product(name: "CourierPolicies", package: courier), .product(name: "CourierCore", package: courier)],
            path: "Sources/FuzzCacheHeaders"
        ),
        .executableTarget(
            name: "fuzz-socks-reply",
            dependencies: [.product(name: "CourierTransport", package: courier), .product(name: "CourierCore", package: courier)],
            path: "Sources/FuzzSOCKSReply"
        ),
        .executableTarget(
            name: "fuzz-multipart-replace",
            dependencies: [.product(name: "CourierPolicies", package: courier)],
            path: "Sources/FuzzMultipartReplace"
        ),
        .executableTarget(
            name: "fuzz-websocket-frames",
            dependencies: [.product(name: "CourierWebSocket", package: courier)],
            path: "Sources/FuzzWebSocketFrames"
        ),
    ],
    swiftLanguageModes: [.v6]
)
