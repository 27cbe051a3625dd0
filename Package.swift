// swift-tools-version: 6.1
//
// Courier: Apple's URL Loading System for Linux, on its own network stack.
// The targets form the house of layers described in ../shared/ARCHITECTURE.md and
// docs/internals/: a target imports only the targets beneath it.

import PackageDescription

let package = Package(
    name: "Courier",
    products: [
        .library(name: "Courier", targets: ["Courier"]),
        .executable(name: "courier", targets: ["CourierCLI"]),
        // The process that carries background sessions' transfers (URLSessionConfiguration
        // .background): install it next to the program, or on PATH.
        .executable(name: "courier-background", targets: ["CourierBackground"]),
        // A load generator on the transport, like wrk, wrk2 and h2load.
        .executable(name: "courier-load", targets: ["CourierLoad"]),
        // The layers under the public API, for the benchmark harness (a load generator on the
        // transport) and the fuzz targets (the protocol cores).
        .library(name: "CourierTransport", targets: ["CourierTransport"]),
        .library(name: "CourierHTTP1", targets: ["CourierHTTP1"]),
        .library(name: "CourierHTTP2", targets: ["CourierHTTP2"]),
        .library(name: "CourierTLS", targets: ["CourierTLS"]),
        .library(name: "CourierCore", targets: ["CourierCore"]),
        .library(name: "CourierPolicies", targets: ["CourierPolicies"]),
        .library(name: "CourierWebSocket", targets: ["CourierWebSocket"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.5.0"),
        // courier-load's latency histograms.
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.1.0"),
    ],
    targets: [
        // C shims and system libraries.
        .target(name: "CCourierLinux"),
        // The HTTP/1 parser's field-line scanner, sixteen bytes at a time.
        .target(name: "CCourierScan"),
        .systemLibrary(
            name: "CCourierOpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),
        .systemLibrary(
            name: "CCourierNghttp2",
            pkgConfig: "libnghttp2",
            providers: [.apt(["libnghttp2-dev"])]
        ),
        .systemLibrary(
            name: "CCourierZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        .systemLibrary(
            name: "CCourierBrotli",
            pkgConfig: "libbrotlidec",
            providers: [.apt(["libbrotli-dev"])]
        ),
        .systemLibrary(
            name: "CCourierPSL",
            pkgConfig: "libpsl",
            providers: [.apt(["libpsl-dev", "publicsuffix"])]
        ),
        .systemLibrary(
            name: "CCourierSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),

        // Pure vocabulary: bytes, fields, heads, validation, limits.
        .target(name: "CourierCore"),
        // The lock (Synchronization's Mutex, visible to ThreadSanitizer).
        .target(name: "CourierSync", dependencies: ["CCourierLinux"]),

        // Pure protocol cores.
        .target(name: "CourierHTTP1", dependencies: ["CourierCore", "CCourierScan"]),
        // RFC 6455 framing and messages, sans-IO: the WebSocket task's codec.
        .target(name: "CourierWebSocket", dependencies: ["CCourierOpenSSL", "CCourierZlib"]),
        .target(name: "CourierTLS", dependencies: ["CCourierLinux", "CourierCore", "CourierSync", "CCourierOpenSSL"]),
        .target(name: "CourierHTTP2", dependencies: ["CourierCore", "CCourierNghttp2"]),
        .target(
            name: "CourierPool",
            dependencies: [.product(name: "DequeModule", package: "swift-collections")]
        ),

        // Pure session policies: the task state machine, redirects, authentication, cookies,
        // content decoding.
        .target(name: "CourierPolicies", dependencies: ["CourierCore", "CCourierZlib", "CCourierBrotli", "CCourierOpenSSL", "CCourierPSL"]),

        // IO: epoll selector, event loops, timers, sockets, resolver.
        .target(
            name: "CourierReactor",
            dependencies: [
                "CourierCore", "CCourierLinux", "CourierSync",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
            ]
        ),

        // IO drivers joining the cores to the reactor.
        .target(
            name: "CourierTransport",
            dependencies: [
                "CourierCore", "CourierHTTP1", "CourierHTTP2", "CourierPool", "CourierReactor", "CourierSync", "CourierTLS",
                .product(name: "DequeModule", package: "swift-collections"),
            ]
        ),

        // Public API.
        .target(
            name: "Courier",
            dependencies: [
                "CCourierLinux", "CCourierSQLite", "CourierCore", "CourierHTTP1", "CourierPolicies", "CourierReactor", "CourierSync", "CourierTransport", "CourierTLS", "CourierWebSocket",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // The `courier` command-line client.
        .executableTarget(
            name: "CourierCLI",
            dependencies: [
                "Courier", "CourierCore", "CourierPolicies", "CourierSync",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),

        // The load generator.
        .executableTarget(
            name: "CourierLoad",
            dependencies: [
                "CourierCore", "CourierHTTP1", "CourierReactor", "CourierSync", "CourierTLS", "CourierTransport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ]
        ),

        // The background-session daemon.
        .executableTarget(name: "CourierBackground", dependencies: ["Courier"]),

        // Test support: real peers on loopback (nginx, a scripted raw server).
        .target(
            name: "_CourierTestSupport",
            dependencies: ["CCourierOpenSSL", "CourierCore", "CourierSync"],
            path: "Tests/_CourierTestSupport",
            resources: [.copy("Resources/echo.js")]
        ),

        .testTarget(name: "CourierCoreTests", dependencies: ["CourierCore", "_CourierTestSupport"]),
        .testTarget(name: "CourierPoolTests", dependencies: ["CourierPool", "_CourierTestSupport"]),
        .testTarget(name: "CourierPoliciesTests", dependencies: ["CourierPolicies", "CourierCore", "CCourierZlib", "CCourierBrotli", "_CourierTestSupport"]),
        .testTarget(name: "CourierHTTP2Tests", dependencies: ["CourierHTTP2", "CourierCore", "CCourierNghttp2"]),
        .testTarget(name: "CourierTLSTests", dependencies: ["CourierTLS", "CCourierOpenSSL", "_CourierTestSupport", "CourierCore"]),
        .testTarget(
            name: "CourierHTTP1Tests",
            dependencies: ["CourierHTTP1", "CourierCore", "CCourierScan"],
            resources: [.copy("Transcripts")]
        ),
        .testTarget(name: "CourierReactorTests", dependencies: ["CourierReactor", "CourierSync", "_CourierTestSupport"]),
        .testTarget(name: "CourierTests", dependencies: ["Courier", "CourierCore", "CourierSync", "CourierTransport", "_CourierTestSupport"]),
        .testTarget(name: "CourierWebSocketTests", dependencies: ["CourierWebSocket", "_CourierTestSupport"]),
        .testTarget(name: "CourierTransportTests", dependencies: ["CourierTransport", "CourierCore", "CourierReactor", "CourierSync", "_CourierTestSupport"]),
        // A writer of the cookie store that the crash test kills mid-transaction (debug builds
        // only: it imports Courier's internals with @testable).
        // The soak (scripts/soak.sh): one session, many requests, rate and memory per tenth.
        .executableTarget(name: "courier-soak", dependencies: ["Courier", "CourierSync", "_CourierTestSupport"], path: "Tests/CourierSoak"),
        .executableTarget(name: "courier-store-writer", dependencies: ["Courier", "CourierPolicies"], path: "Tests/CourierStoreWriter"),
        // The Autobahn WebSocket conformance client (scripts/autobahn.sh): echoes every case of
        // `wstest -m fuzzingserver` through URLSessionWebSocketTask.
        // Makes a background session in a process of its own, for the tests of sessions that
        // outlive their process.
        .executableTarget(name: "courier-background-probe", dependencies: ["Courier", "CourierSync"], path: "Tests/CourierBackgroundProbe"),
        // Runs one download task, for the test that fills the disk under it.
        .executableTarget(name: "courier-download-probe", dependencies: ["Courier"], path: "Tests/CourierDownloadProbe"),
        .executableTarget(name: "courier-autobahn", dependencies: ["Courier", "CourierSync"], path: "Tests/CourierAutobahn"),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "Courier", "CourierCore", "CourierPolicies", "CourierSync", "CourierTLS", "CourierTransport", "CourierWebSocket", "_CourierTestSupport",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Ordinary FoundationNetworking code, built against Courier: the one-import switch.
        .testTarget(name: "SwitchFromFoundationNetworkingTests", dependencies: ["Courier", "_CourierTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)

// The ThreadSanitizer build (scripts/lib/sanitized-build.sh sets COURIER_TEST_TARGETS=concurrent)
// leaves out the test targets of the modules that are single-threaded by design, whose tests
// start no thread: ThreadSanitizer has nothing to look at there (they run in the other build),
// and they are 10.7k lines of test code that build would compile for nothing.
if Context.environment["COURIER_TEST_TARGETS"] == "concurrent" {
    let singleThreaded: Set = [
        "CourierCoreTests", "CourierHTTP1Tests", "CourierHTTP2Tests", "CourierTLSTests", "CourierWebSocketTests",
        "CourierPoliciesTests", "CourierPoolTests",
    ]
    package.targets.removeAll { singleThreaded.contains($0.name) }
}
