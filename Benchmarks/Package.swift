// swift-tools-version: 6.1
//
// Courier's benchmark harness: a load generator on Courier's transport, the workload clients
// (Courier's URLSession, FoundationNetworking's, AsyncHTTPClient), parser micro-benchmarks, and
// a malloc counter. `run.sh` builds these in release mode and runs the comparison.

import PackageDescription

import Foundation

// SwiftPM names a path dependency after its directory, so the checkout's folder name (whatever
// a clone is called) is the identity under which Courier's products are found.
let courier = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent.lowercased()

let package = Package(
    name: "CourierBenchmarks",
    products: [
        .library(name: "MallocCounter", type: .dynamic, targets: ["CMallocCounter"]),
    ],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.20.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.1.0"),
    ],
    targets: [
        .executableTarget(
            name: "courier-load",
            dependencies: [
                .product(name: "CourierTransport", package: courier),
                .product(name: "CourierCore", package: courier),
                .product(name: "CourierTLS", package: courier),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ],
            path: "Sources/CourierLoad"
        ),
        .executableTarget(
            name: "courier-bench",
            dependencies: ["BenchSupport", .product(name: "Courier", package: courier)],
            path: "Sources/CourierBench"
        ),
        // The same client as courier-bench with `import Courier` swapped for
        // `import FoundationNetworking`; run.sh writes its source from courier-bench's.
        .executableTarget(name: "foundation-bench", dependencies: ["BenchSupport"], path: "Sources/FoundationBench"),
        .executableTarget(
            name: "ahc-bench",
            dependencies: ["BenchSupport", .product(name: "AsyncHTTPClient", package: "async-http-client")],
            path: "Sources/AHCBench"
        ),
        .systemLibrary(name: "CHTTPParser", path: "Sources/CHTTPParser", providers: [.apt(["libhttp-parser-dev"])]),
        .executableTarget(
            name: "parser-bench",
            dependencies: [
                .product(name: "CourierHTTP1", package: courier),
                .product(name: "CourierCore", package: courier),
                "CHTTPParser",
                "BenchSupport",
            ],
            path: "Sources/ParserBench"
        ),
        .executableTarget(
            name: "cookie-bench",
            dependencies: [
                .product(name: "Courier", package: courier),
                .product(name: "CourierPolicies", package: courier),
                "BenchSupport",
            ],
            path: "Sources/CookieBench"
        ),
        .target(name: "CMallocCounter", path: "Sources/CMallocCounter"),
        .target(name: "BenchSupport", path: "Sources/BenchSupport"),
    ],
    swiftLanguageModes: [.v6]
)
