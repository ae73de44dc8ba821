// swift-tools-version:6.2
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "syncgate",
    // The server runs on Linux; macOS 15 for developing it there (Mutex). The client SDK is a
    // package of its own, Sources/SyncGateSDK, with the platforms apps need.
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "syncgate", targets: ["syncgate"]),
        .executable(name: "syncgate-demo", targets: ["syncgate-demo"]),
    ],
    dependencies: [
        // The SDK's package: the wire format, the async locks and the client, which the server shares.
        .package(path: "Sources/SyncGateSDK"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.7.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/adam-fowler/compress-nio.git", from: "1.5.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-configuration.git", from: "1.4.0", traits: [.defaults, "YAML", "Logging"]),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        // OTLP over HTTP only: the gRPC exporter would add grpc-swift to every build.
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        // The process machinery of the server: a timer wheel on an event loop and the mailboxes
        // waiters sleep in.
        .target(
            name: "SyncGateRuntime",
            dependencies: [.product(name: "SyncGateConcurrency", package: "SyncGateSDK"), .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        // The protocol's decisions (policies, cursors, validation, summaries): no I/O.
        .target(
            name: "SyncGateCore",
            dependencies: [.product(name: "SyncGateWire", package: "SyncGateSDK"), .product(name: "Yams", package: "Yams")],
            resources: [.embedInCode("Resources/collections.yaml")],
            swiftSettings: swiftSettings
        ),
        // The storage driver interface, the one orchestration of every store role, and the
        // in-process change notifier.
        .target(
            name: "SyncGateStorage",
            dependencies: [
                "SyncGateCore",
                .product(name: "SyncGateConcurrency", package: "SyncGateSDK"),
                "SyncGateRuntime",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The schema's one source, sql/: each driver's migrations as a DBA reads them, embedded from there.
        .target(
            name: "SyncGatePostgresSchema",
            path: "sql/postgres",
            resources: [
                .embedInCode("0001_initial.sql"),
                .embedInCode("0002_group_keys.sql"),
                .embedInCode("0003_scopes_version.sql"),
                .embedInCode("0004_enqueue.sql"),
                .embedInCode("0005_commit_times.sql"),
                .embedInCode("0006_incremental_maintenance.sql"),
                .embedInCode("0007_uncompacted_feeds.sql"),
                .embedInCode("0008_enqueue_without_notify.sql"),
                .embedInCode("0009_job_compression.sql"),
                .embedInCode("0010_service_keys.sql"),
                .embedInCode("0011_change_origin.sql"),
                .embedInCode("0012_webhooks.sql"),
                .embedInCode("0013_webhook_ranges.sql"),
                .embedInCode("0014_push_registrations.sql"),
                .embedInCode("0015_job_errors.sql"),
                .embedInCode("0016_maintenance_runs.sql"),
                .embedInCode("0017_push_attempts.sql"),
                .embedInCode("0018_webhook_claims.sql"),
                .embedInCode("0019_service_key_reach.sql"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SyncGateSQLiteSchema",
            path: "sql/sqlite",
            resources: [
                .embedInCode("0001_initial.sql"),
                .embedInCode("0002_group_keys.sql"),
                .embedInCode("0003_scopes_version.sql"),
                .embedInCode("0004_commit_times.sql"),
                .embedInCode("0005_incremental_maintenance.sql"),
                .embedInCode("0006_uncompacted_feeds.sql"),
                .embedInCode("0007_service_keys.sql"),
                .embedInCode("0008_change_origin.sql"),
                .embedInCode("0009_webhooks.sql"),
                .embedInCode("0010_webhook_ranges.sql"),
                .embedInCode("0011_push_registrations.sql"),
                .embedInCode("0012_job_errors.sql"),
                .embedInCode("0013_maintenance_runs.sql"),
                .embedInCode("0014_push_attempts.sql"),
                .embedInCode("0015_webhook_claims.sql"),
                .embedInCode("0016_service_key_reach.sql"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SyncGatePostgres",
            dependencies: [
                "SyncGateStorage",
                "SyncGatePostgresSchema",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SyncGateSQLite",
            dependencies: [
                "SyncGateStorage",
                "SyncGateRuntime",
                "SyncGateSQLiteSchema",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SyncGateWorker",
            dependencies: [
                "SyncGateStorage",
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // Change webhooks: the announcer and sender a worker process runs (docs/webhooks.md).
        .target(
            name: "SyncGateWebhooks",
            dependencies: [
                "SyncGateStorage",
                .product(name: "SyncGateConcurrency", package: "SyncGateSDK"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Push nudges to backgrounded devices (docs/push.md): the nudger a worker process runs,
        // the APNs and FCM clients, and the decisions about their answers, retries and tokens.
        .target(
            name: "SyncGatePush",
            dependencies: [
                .product(name: "SyncGateWire", package: "SyncGateSDK"),
                "SyncGateStorage",
                .product(name: "SyncGateConcurrency", package: "SyncGateSDK"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SyncGateHTTP",
            dependencies: [
                "SyncGateStorage",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdAuth", package: "hummingbird-auth"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Yams", package: "Yams"),
            ],
            resources: [
                .embedInCode("Resources/openapi.yaml"), .embedInCode("Resources/admin-openapi.yaml"),
                // The admin console's templates and style (Admin/Console.swift).
                .embedInCode("Resources/console/layout.mustache"), .embedInCode("Resources/console/login.mustache"),
                .embedInCode("Resources/console/overview.mustache"), .embedInCode("Resources/console/jobs.mustache"),
                .embedInCode("Resources/console/job.mustache"), .embedInCode("Resources/console/user.mustache"),
                .embedInCode("Resources/console/households.mustache"), .embedInCode("Resources/console/webhooks.mustache"),
                .embedInCode("Resources/console/console.css"),
            ],
            swiftSettings: swiftSettings
        ),
        // The seed apps' own sync dialects, a front plug-in mounted by configuration: their routes
        // and translation, and the reads by commit time they need of a driver (DialectDriver).
        .target(
            name: "SyncGateDialects",
            dependencies: [
                "SyncGateHTTP",
                "SyncGatePostgres",
                "SyncGateSQLite",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            resources: [.embedInCode("Resources/openapi.yaml")],
            swiftSettings: swiftSettings
        ),
        // The composition root: configuration, opening a store, and the processes built from them.
        .target(
            name: "SyncGateServer",
            dependencies: [
                "SyncGatePostgres",
                "SyncGateSQLite",
                "SyncGateWorker",
                "SyncGateWebhooks",
                "SyncGatePush",
                "SyncGateHTTP",
                "SyncGateDialects",
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        // What the commands share: the options every command takes, logging, metrics and tracing bootstrap.
        .target(
            name: "SyncGateCommandLine",
            dependencies: [
                "SyncGateServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // `syncgate load`: the load generators, linked by the executable only, never by a server target.
        .target(
            name: "SyncGateLoad",
            dependencies: [
                "SyncGateCommandLine",
                "SyncGateServer",
                "SyncGateHTTP",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "syncgate",
            dependencies: [
                "SyncGateCommandLine",
                "SyncGateLoad",
                "SyncGateServer",
                "SyncGateWorker",
                "SyncGateWebhooks",
                "SyncGateHTTP",
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // A command-line pantry app: two simulated devices of one household against a running `syncgate serve`.
        .executableTarget(
            name: "syncgate-demo",
            dependencies: [
                .product(name: "SyncGateClient", package: "SyncGateSDK"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ],
            swiftSettings: swiftSettings
        ),
        // `scripts/bench-sdk`: the SDK's bootstrap and queries over a local store, from memory.
        .executableTarget(
            name: "syncgate-sdk-bench",
            dependencies: [.product(name: "SyncGateClient", package: "SyncGateSDK")],
            swiftSettings: swiftSettings
        ),
        // Tests: unit (Core, pure), conformance (the store, worker and HTTP front, once per driver),
        // process (the real binary), and the support they share.
        .target(
            name: "SyncGateTestSupport",
            dependencies: [
                "SyncGatePush",
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                "SyncGateWebhooks",
                "SyncGateServer",
                "SyncGatePostgres",
                "SyncGateSQLite",
                "SyncGateWorker",
                "SyncGateHTTP",
                "SyncGateDialects",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Tests/Support",
            swiftSettings: swiftSettings
        ),
        // The wire format: parser limits, writer, timestamps, the models' JSON both ways. No I/O.
        .testTarget(
            name: "SyncGateWireTests",
            dependencies: [.product(name: "SyncGateWire", package: "SyncGateSDK"), "SyncGateCore"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SyncGateCoreTests",
            dependencies: ["SyncGateCore", "SyncGateStorage"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SyncGateConformanceTests",
            dependencies: [
                "SyncGatePush",
                "SyncGateWebhooks",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                "SyncGateTestSupport",
                "SyncGateServer",
                "SyncGateDialects",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The server's parts that need no database: the runtime's timers and mailboxes, the
        // notifier, the worker's claim gate, token checks, settings, notification payloads.
        .testTarget(
            name: "SyncGateComponentTests",
            dependencies: [
                "SyncGatePush",
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                "SyncGateWebhooks",
                "SyncGateTestSupport",
                "SyncGateServer",
                "SyncGateDialects",
                "SyncGateRuntime",
                .product(name: "SyncGateConcurrency", package: "SyncGateSDK"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            swiftSettings: swiftSettings
        ),
        // The client SDK: its decisions without I/O, its store on real SQLite files, and the
        // convergence proof against the production server on both drivers.
        .testTarget(
            name: "SyncGateClientTests",
            dependencies: [
                .product(name: "SyncGateClient", package: "SyncGateSDK"),
                "SyncGateTestSupport",
                "SyncGateStorage",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SyncGateProcessTests",
            dependencies: [
                "SyncGateTestSupport",
                "SyncGateServer",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Yams", package: "Yams"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
