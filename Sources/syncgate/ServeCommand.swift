import ArgumentParser
import Hummingbird
import Logging
import ServiceLifecycle
import SyncGateHTTP
import SyncGateStorage
import SyncGateWorker

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the HTTP front (and, unless --workers 0, in-process workers).",
        discussion: "Applies pending migrations at start. SIGTERM drains: requests finish, workers finish their jobs."
    )

    @Option(help: "Address to listen on (env SYNCGATE_HOST; default 127.0.0.1)")
    var host: String?

    @Option(help: "Port to listen on (env SYNCGATE_PORT; default 8080)")
    var port: Int?

    @Option(help: "In-process worker lanes; 0 runs the front only (env SYNCGATE_WORKERS; default 2)")
    var workers: Int?

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var collections: CollectionsOptions
    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        let logger = try logging.makeLogger()
        let url = try database.resolved()
        let collections = try self.collections.load()
        let settings = try Settings.fromEnvironment()
        let host = host ?? Environment.string("SYNCGATE_HOST") ?? "127.0.0.1"
        let port = try port ?? Environment.integer("SYNCGATE_PORT") ?? 8080
        let workers = try workers ?? Environment.integer("SYNCGATE_WORKERS") ?? 2
        guard workers >= 0 else { throw ValidationError("--workers must be 0 or more") }

        let secret = try Runtime.jwtSecret(for: url, logger: logger)
        let authority = await TokenAuthority(secret: secret.value)
        if let file = secret.developmentFile {
            let token = try await authority.issue(userID: "dev", ttlSeconds: 30 * 86_400)
            logger.warning(
                "SYNCGATE_JWT_SECRET is not set: using the development secret in \(file). Set a real secret before exposing this server."
            )
            logger.notice("a token for the user 'dev' (valid 30 days; mint others with `syncgate token --user ID`): \(token)")
        }
        let store = try Runtime.makeStore(url, logger: logger, maximumConnections: 10 + 2 * workers)
        let router = buildRouter(store: store, authority: authority, configuration: settings.front)
        var app = Application(
            router: router,
            configuration: .init(address: .hostname(host, port: port), serverName: "syncgate"),
            logger: logger
        )
        // Services stop in reverse order: the HTTP server drains first, then workers finish
        // their jobs, then the database connections close.
        app.addServices(store)
        if workers > 0 {
            app.addServices(
                Worker(store: store, collections: collections, configuration: settings.workerConfiguration(concurrency: workers), logger: logger),
                MaintenanceService(store: store, retention: settings.retention, interval: settings.maintenanceInterval, logger: logger)
            )
        }
        app.beforeServerStarts {
            let applied = try await store.migrate(logger: logger)
            logger.info("database ready", metadata: [
                "syncgate.database": "\(url)", "syncgate.migrations_applied": "\(applied)", "syncgate.workers": "\(workers)",
            ])
        }
        try await app.runService()
    }
}
