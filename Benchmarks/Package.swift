// swift-tools-version: 6.1
//
// Courier's benchmark harness: the workload clients (Courier's URLSession, FoundationNetworking's,
// AsyncHTTPClient), hop-floor (W1's shapes without a library), transport-floor (the same shapes on
// Courier's transport), parser micro-benchmarks, and a malloc counter. `run.sh` builds these, and the
// main package's `courier-load`, in release mode and runs the comparison.

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
    ],
    targets: [
        .executableTarget(
            name: "courier-bench",
            dependencies: ["BenchSupport", .product(name: "Courier", package: courier)],
            path: "Sources/CourierBench"
        ),
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
        .systemLibrary(name: "CHopFloor", path: "Sources/CHopFloor", providers: [.apt(["libssl-dev", "libnghttp2-dev"])]),
        .executableTarget(name: "hop-floor", dependencies: ["BenchSupport", "CHopFloor"], path: "Sources/HopFloor"),
        .executableTarget(
            name: "transport-floor",
            dependencies: [
                "BenchSupport",
                .product(name: "CourierTransport", package: courier),
                .product(name: "CourierCore", package: courier),
            ],
            path: "Sources/TransportFloor"
        ),
        .target(name: "CMallocCounter", path: "Sources/CMallocCounter"),
        .target(name: "BenchSupport", path: "Sources/BenchSupport"),
    ],
    swiftLanguageModes: [.v6]
)

// The same client as courier-bench with `import Courier` swapped for `import FoundationNetworking`.
// run.sh writes its source from courier-bench's; until it has, the package builds without it, so
// that any other product builds from a fresh clone.
let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
if FileManager.default.fileExists(atPath: here.appendingPathComponent("Sources/FoundationBench/main.swift").path) {
    // FOUNDATION_BENCH leaves out what only Courier has (its loop executor).
    package.targets.append(.executableTarget(
        name: "foundation-bench", dependencies: ["BenchSupport"], path: "Sources/FoundationBench",
        swiftSettings: [.define("FOUNDATION_BENCH")]
    ))
}
