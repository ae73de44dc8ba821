// swift-tools-version:6.0
import PackageDescription

// An app's package as an iOS team writes one: it depends on the SyncGate SDK (here by path; an app
// names the SDK's own repository) and nothing else. `scripts/test` builds it and checks that it
// resolves no server package (TargetGraphTests).
let package = Package(
    name: "PantryApp",
    platforms: [.iOS(.v16), .macOS(.v13)],
    dependencies: [
        .package(path: "../../../Sources/SyncGateSDK"),
    ],
    targets: [
        .executableTarget(
            name: "PantryApp",
            dependencies: [.product(name: "SyncGateClient", package: "SyncGateSDK")]
        ),
    ]
)
