package import Hummingbird
import HummingbirdCore
import NIOCore
package import Logging
package import ServiceLifecycle
package import SyncGateHTTP
import SyncGateCore
import SyncGateWire
import SyncGateDialects
import SyncGateSQLite
package import SyncGateStorage
import SyncGateWorker
import SyncGateWebhooks
import SyncGatePush
import SyncGateConcurrency
import Tracing

/// Builds a `serve` process: the HTTP front, its in-process workers and maintenance, migrations
/// before the server starts, and (unless `store` is given) the store's own service.
///
/// `syncgate serve` and the tests both call it, so the tests run the production wiring. Services
/// stop in reverse order: the HTTP server drains first, then the workers finish their jobs, then
/// the database connections close.
///
/// - Parameters:
///   - store: a store the caller runs itself (tests); `nil` opens ``ServerConfiguration/database``.
///   - front: what the HTTP routes and the live waiters see of the store (tests wrap it to count
///     or to cut off its notifications); `nil`: the store itself.
///   - watcher: receives the front's ``FeedWatcher`` once built (tests observe its waiters).
///   - services: more services to run, started first and stopped last (the trace exporter).
package func buildApplication(
    _ configuration: ServerConfiguration,
    services: [any Service] = [],
    store given: SyncStore? = nil,
    front wrap: (@Sendable (any FrontStore) -> any FrontStore)? = nil,
    watcher observe: (@Sendable (FeedWatcher) -> Void)? = nil,
    logger: Logger
) async throws -> some ApplicationProtocol {
    let connections = ServerConfiguration.frontConnections + 2 * configuration.workers
    let opened = try given.map { OpenStore(store: $0, service: NoService()) }
        ?? OpenStore.open(
            configuration.database, maximumConnections: connections, keepsAConnection: true, hooks: configuration.storeHooks, logger: logger
        )
    let tracer = configuration.tracer ?? InstrumentationSystem.tracer
    var traced = opened.store
    if given == nil || configuration.tracer != nil { traced.tracer = tracer }
    let store = traced
    // With an identity provider and no secret, only the provider's tokens are accepted.
    let secret = configuration.identityProvider != nil && configuration.jwtSecret == nil
        ? nil : try SigningSecret.resolve(configured: configuration.jwtSecret, database: configuration.database)
    let identityProvider = configuration.identityProvider.map { IdentityProviderKeys(configuration: $0, logger: logger) }
    let authority = await TokenAuthority(
        secret: secret?.value, identityProvider: identityProvider, maximumLifetimeSeconds: configuration.jwtMaximumLifetimeSeconds
    )
    if let file = secret?.developmentFile {
        let days = min(30 * 86_400, configuration.jwtMaximumLifetimeSeconds) / 86_400
        let token = try await authority.issue(userID: "dev", ttlSeconds: min(30 * 86_400, configuration.jwtMaximumLifetimeSeconds))
        logger.warning("SYNCGATE_JWT_SECRET is not set: using the development secret in \(file). Set a real secret before exposing this server.")
        logger.notice("a token for the user 'dev' (valid \(days) days; mint others with `syncgate token --user ID`): \(token)")
    }

    var publicFront = configuration.front
    // With a metrics port, /metrics is served there only: the public port never shows it.
    if configuration.metricsPort != nil { publicFront.servesMetrics = false }
    let front = publicFront
    // Pulls read from the standbys, if any; the rest of the front stays on the primary.
    let replicas = configuration.readDatabases.map { standby in
        OpenStore.replica(standby, maximumConnections: ServerConfiguration.frontConnections, keepsAConnection: true, logger: logger)
    }
    let reads: any FrontStore = replicas.isEmpty
        ? store : ReplicatedFrontStore(primary: store, replicas: replicas.map(\.store), logger: logger)
    let frontStore = wrap?(reads) ?? reads
    // Opened once this process has migrated: its live waiters and workers read nothing before.
    let schemaReady = Latch()
    let watcher = FeedWatcher(store: frontStore, interval: front.pollInterval, limits: front.liveLimits, schemaReady: schemaReady, logger: logger)
    observe?(watcher)
    var plugins: [any FrontPlugin] = []
    if !configuration.dialects.isEmpty {
        // Their reads by commit time are served by the primary: standbys lag, and a `since` read
        // must see every change below the horizon it reads first.
        guard let driver = store.driver as? any DialectDriver else {
            throw ConfigurationError("\(ServerConfiguration.Setting.dialects.describe): this database driver has no reads by commit time")
        }
        plugins.append(DialectPlugin(configuration.dialects, store: DialectStore(driver: driver)))
    }
    let webhooks = StoreWebhookAdministration(store: store, allowPrivate: configuration.webhooks.allowPrivateAddresses)
    let router = try buildRouter(
        store: frontStore, watcher: watcher, authority: authority, configuration: front, plugins: plugins, webhooks: webhooks, tracer: tracer
    )
    let readTimeout = TimeAmount(front.requestReadTimeout)
    let idleTimeout = TimeAmount(front.idleTimeout)
    let http1 = HTTP1Channel.Configuration(
        additionalChannelHandlers: [RequestReadTimeoutHandler(timeout: readTimeout), OversizedBodyGuard(maximumBodyBytes: front.maximumBodyBytes)],
        idleTimeout: idleTimeout
    )
    let shards = ConnectionShards()
    var app = Application(
        responder: ChildTaskResponder(base: router.buildResponder(), streamPaths: [StreamRoutes.eventStream]),
        server: HTTPServerBuilder { responder in
            ShardedChildChannel(base: HTTP1Channel(responder: responder, configuration: http1), shards: shards)
        },
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "syncgate"),
        logger: logger
    )
    app.addServices(services)
    if given == nil { app.addServices(opened.service) }
    for replica in replicas { app.addServices(replica.service) }
    // After the store (stops before it), before the server (outlives its requests).
    app.addServices(watcher, QueueSampler(store: store, logger: logger))
    // While nudging is configured, the devices with a live connection here are not nudged.
    if configuration.push.isConfigured {
        app.addServices(PresencePublisher(store: frontStore, watcher: watcher, lifetime: configuration.push.presenceLifetime, logger: logger))
    }
    if let port = configuration.metricsPort {
        app.addServices(buildMetricsServer(host: configuration.metricsHost, port: port, logger: logger))
    }
    if let port = configuration.adminPort {
        let settings = JSONValue.array(configuration.configured.map { ["name": .string($0.name), "value": .string($0.value)] })
        let retention = configuration.retention
        let admin = try buildAdminRouter(
            store: store, authority: authority, configuration: front, settings: settings, liveConnections: { watcher.waiterCount },
            maintain: {
                guard let (report, duration) = try await MaintenanceTasks.runAndRecord(on: store, retention: retention) else { return ["ran": false] }
                return report.json(milliseconds: Int64(duration / .milliseconds(1)))
            },
            webhooks: webhooks
        )
        // The public port's limits: a head within the idle timeout, a body within the read timeout
        // and no endless body (its sign-in form answers anyone who reaches the port).
        app.addServices(
            Application(
                router: admin, server: .http1(configuration: http1),
                configuration: .init(address: .hostname(configuration.adminHost, port: port), serverName: "syncgate-admin"), logger: logger
            )
        )
    }
    if configuration.workers > 0 {
        app.addServices(
            Worker(
                store: store, collections: configuration.collections, configuration: configuration.worker(lanes: configuration.workers),
                hooks: configuration.workerHooks, schemaReady: schemaReady, tracer: tracer, logger: logger
            ),
            MaintenanceService(store: store, retention: configuration.retention, interval: configuration.maintenanceInterval, logger: logger)
        )
        if configuration.webhooks.enabled {
            app.addServices(WebhookService(store: store, configuration: configuration.webhooks, schemaReady: schemaReady, logger: logger))
        }
        if configuration.push.isConfigured, configuration.push.enabled {
            app.addServices(NudgeService(store: store, configuration: configuration.push, schemaReady: schemaReady, logger: logger))
        }
    }
    // Last before the server: it stops after the server and before everything its requests use.
    app.addServices(shards)
    let database = configuration.database
    let workers = configuration.workers
    app.beforeServerStarts {
        // Keys in hand before the first request; a provider that is down now is retried on demand.
        if let identityProvider { await identityProvider.refresh() }
        let applied = try await store.migrate(logger: logger)
        // SQLite serves one process: jobs left running belong to an earlier run of this server.
        if given == nil, workers > 0, let sqlite = store.driver as? SQLiteDriver { try await sqlite.releaseLeasesOfEarlierRuns() }
        schemaReady.open()
        logger.info("database ready", metadata: [
            "syncgate.version": "\(SyncGateVersion.current)", "syncgate.database": "\(database)",
            "syncgate.migrations_applied": "\(applied)", "syncgate.workers": "\(workers)",
        ])
    }
    return app
}

/// The services of a `syncgate worker` process: the store, the worker lanes and maintenance.
package func buildWorkerServices(_ configuration: ServerConfiguration, logger: Logger) throws -> [any Service] {
    let opened = try OpenStore.open(
        configuration.database, maximumConnections: ServerConfiguration.workerConnections(lanes: configuration.workerConcurrency),
        keepsAConnection: true, hooks: configuration.storeHooks,
        logger: logger
    )
    let tracer = configuration.tracer ?? InstrumentationSystem.tracer
    var store = opened.store
    store.tracer = tracer
    var services: [any Service] = [
        opened.service,
        Worker(
            store: store, collections: configuration.collections, configuration: configuration.worker(lanes: configuration.workerConcurrency),
            hooks: configuration.workerHooks, tracer: tracer, logger: logger
        ),
        MaintenanceService(store: store, retention: configuration.retention, interval: configuration.maintenanceInterval, logger: logger),
        QueueSampler(store: store, logger: logger),
    ]
    if configuration.webhooks.enabled {
        services.append(WebhookService(store: store, configuration: configuration.webhooks, logger: logger))
    }
    if configuration.push.isConfigured, configuration.push.enabled {
        services.append(NudgeService(store: store, configuration: configuration.push, logger: logger))
    }
    if let port = configuration.metricsPort {
        services.append(buildMetricsServer(host: configuration.metricsHost, port: port, logger: logger))
    }
    return services
}

/// A service with nothing to run (a store its caller runs).
struct NoService: Service {
    func run() async throws {}
}
