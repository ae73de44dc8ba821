// swift-tools-version:6.0
import Foundation
import PackageDescription

// The SyncGate client SDK: what an app links, and the wire format the server shares with it.
// A package of its own, so that an app resolves GRDB and swift-log and nothing of the server's
// (the server's package, at the repository's root, depends on this one by path). Apps take it
// from its own repository, made with `git subtree split` (docs/sdk.md).

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

// Low floors, so that an app's older toolchain can pick releases it reads (GRDB 7.10 needs Swift
// 6.1, swift-log 1.16 Swift 6.2); the SDK uses nothing newer than GRDB 7.0 and swift-log 1.5 offer.
var dependencies: [Package.Dependency] = [
    .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.0.0"),
    .package(url: "https://github.com/apple/swift-log.git", from: "1.5.0"),
]
// The DocC plugin only when documentation is built (scripts/sdk-docs), so that apps never resolve it.
if ProcessInfo.processInfo.environment["SYNCGATE_DOCC"] == "1" {
    dependencies.append(.package(url: "https://github.com/swiftlang/swift-docc-plugin.git", from: "1.5.0"))
}

let package = Package(
    name: "SyncGateSDK",
    platforms: [.iOS(.v16), .macOS(.v13), .tvOS(.v16), .watchOS(.v9), .visionOS(.v1)],
    products: [
        // The client: a local GRDB store, the outbox, queries, sync status and the sync engine.
        .library(name: "SyncGateClient", targets: ["SyncGateClient"]),
        // The wire format alone (the server links it; an app gets it through SyncGateClient).
        .library(name: "SyncGateWire", targets: ["SyncGateWire"]),
        // Locks for async code, shared with the server.
        .library(name: "SyncGateConcurrency", targets: ["SyncGateConcurrency"]),
    ],
    dependencies: dependencies,
    targets: [
        // The JSON value, its strict parser and writer, timestamps, and the protocol's models. No dependency at all.
        .target(name: "SyncGateWire", swiftSettings: swiftSettings),
        // A lock that exists on every platform the SDK supports, and async locks and latches on it. No dependency.
        .target(name: "SyncGateConcurrency", swiftSettings: swiftSettings),
        .target(
            name: "SyncGateClient",
            dependencies: [
                "SyncGateWire",
                "SyncGateConcurrency",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
