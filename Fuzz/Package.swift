// swift-tools-version: 6.1
//
// Courier's fuzz targets: one libFuzzer executable per parser. Build and run them with
// run.sh (release mode, -sanitize=fuzzer and address sanitizer, coverage instrumentation).
// Every target holds one invariant: only Courier's protocol errors may escape — no trap, no
// crash, no hang, no unbounded memory.

import PackageDescription

let package = Package(
    name: "CourierFuzz",
    dependencies: [.package(path: "..")],
    targets: [
        .target(
            name: "FuzzSupport",
            dependencies: [.product(name: "CourierHTTP1", package: "main"), .product(name: "CourierCore", package: "main")]
        ),
        .executableTarget(name: "fuzz-http1-response", dependencies: ["FuzzSupport"], path: "Sources/FuzzHTTP1Response"),
        .executableTarget(name: "fuzz-http1-chunked", dependencies: ["FuzzSupport"], path: "Sources/FuzzHTTP1Chunked"),
        .executableTarget(
            name: "fuzz-request-encoding",
            dependencies: [.product(name: "CourierHTTP1", package: "main"), .product(name: "CourierCore", package: "main")],
            path: "Sources/FuzzRequestEncoding"
        ),
        .executableTarget(
            name: "fuzz-url-request",
            dependencies: [.product(name: "Courier", package: "main")],
            path: "Sources/FuzzURLRequest"
        ),
        .executableTarget(
            name: "fuzz-http2-frames",
            dependencies: [.product(name: "CourierHTTP2", package: "main"), .product(name: "CourierCore", package: "main")],
            path: "Sources/FuzzHTTP2Frames"
        ),
        .executableTarget(
            name: "fuzz-tls-records",
            dependencies: [.product(name: "CourierTLS", package: "main"), .product(name: "CourierCore", package: "main")],
            path: "Sources/FuzzTLSRecords"
        ),
    ],
    swiftLanguageModes: [.v6]
)
