public import Hummingbird
import NIOCore
public import Logging
public import ServiceLifecycle
public import SyncGateHTTP
import SyncGateSQLite
public import SyncGateStorage
import SyncGateWorker

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
public func buildApplication(
    _ configuration: ServerConfiguration,
    store given: SyncStore? = nil,
    front wrap: (@Sendable (any FrontStore) -> any FrontStore)? = nil,
    watcher observe: (@Sendable (FeedWatcher) -> Void)? = nil,
    logger: Logger
) async throws -> some ApplicationProtocol {
    let opened = try given.map { OpenStore(store: $0, service: NoService()) }
        ?? OpenStore.open(configuration.database, maximumConnections: 10 + 2 * configuration.workers, hooks: configuration.storeHooks, logger: logger)
    let store = opened.store
    let secret = try SigningSecret.resolve(configured: configuration.jwtSecret, database: configuration.database)
    let authority = await TokenAuthority(secret: secret.value, maximumLifetimeSeconds: configuration.jwtMaximumLifetimeSeconds)
    if let file = secret.developmentFile {
        let days = min(30 * 86_400, configuration.jwtMaximumLifetimeSeconds) / 86_400
        let token = try await authority.issue(userID: "dev", ttlSeconds: min(30 * 86_400, configuration.jwtMaximumLifetimeSeconds))
        logger.warning("SYNCGATE_JWT_SECRET is not set: using the development secret in \(file). Set a real secret before exposing this server.")
        logger.notice("a token for the user 'dev' (valid \(days) days; mint others with `syncgate token --user ID`): \(token)")
    }

    let front = configuration.front
    let frontStore = wrap?(store) ?? store
    let watcher = FeedWatcher(store: frontStore, interval: front.pollInterval, limits: front.liveLimits, logger: logger)
    observe?(watcher)
    let router = buildRouter(store: frontStore, watcher: watcher, authority: authority, configuration: front)
    let readTimeout = TimeAmount(front.requestReadTimeout)
    let idleTimeout = TimeAmount(front.idleTimeout)
    var app = Application(
        router: router,
        server: .http1(configuration: .init(
            additionalChannelHandlers: [RequestReadTimeoutHandler(timeout: readTimeout), OversizedBodyGuard(maximumBodyBytes: front.maximumBodyBytes)],
            idleTimeout: idleTimeout
        )),
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "syncgate"),
        logger: logger
    )
    if given == nil { app.addServices(opened.service) }
    // After the store (stops before it), before the server (outlives its requests).
    app.addServices(watcher)
    if configuration.workers > 0 {
        app.addServices(
            Worker(store: store, collections: configuration.collections, configuration: configuration.worker(lanes: configuration.workers), hooks: configuration.workerHooks, logger: logger),
            MaintenanceService(store: store, retention: configuration.retention, interval: configuration.maintenanceInterval, logger: logger)
        )
    }
    let database = configuration.database
    let workers = configuration.workers
    app.beforeServerStarts {
        let applied = try await store.migrate(logger: logger)
        // SQLite serves one process: jobs left running belong to an earlier run of this server.
        if given == nil, workers > 0, let sqlite = store.driver as? SQLiteDriver { try await sqlite.releaseLeasesOfEarlierRuns() }
        logger.info("database ready", metadata: [
            "syncgate.database": "\(database)", "syncgate.migrations_applied": "\(applied)", "syncgate.workers": "\(workers)",
        ])
    }
    return app
}

/// The services of a `syncgate worker` process: the store, the worker lanes and maintenance.
public func buildWorkerServices(_ configuration: ServerConfiguration, logger: Logger) throws -> [any Service] {
    let opened = try OpenStore.open(configuration.database, maximumConnections: 2 * configuration.workerConcurrency + 4, hooks: configuration.storeHooks, logger: logger)
    return [
        opened.service,
        Worker(
            store: opened.store, collections: configuration.collections, configuration: configuration.worker(lanes: configuration.workerConcurrency),
            hooks: configuration.workerHooks, logger: logger
        ),
        MaintenanceService(store: opened.store, retention: configuration.retention, interval: configuration.maintenanceInterval, logger: logger),
    ]
}

/// A service with nothing to run (a store its caller runs).
struct NoService: Service {
    func run() async throws {}
}
