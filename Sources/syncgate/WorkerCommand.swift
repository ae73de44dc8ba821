import ArgumentParser
import Logging
import ServiceLifecycle
import UnixSignals
import SyncGateStorage
import SyncGateWorker

struct WorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Claim and apply push jobs (run as many as you like against one PostgreSQL).",
        discussion: "Also runs periodic maintenance when it holds the maintenance lock. SIGTERM: stop claiming, finish jobs in hand, exit."
    )

    @Option(help: "Jobs applied at once (env SYNCGATE_WORKER_CONCURRENCY; default 4)")
    var concurrency: Int?

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var collections: CollectionsOptions
    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        let logger = try logging.makeLogger()
        let url = try database.resolved()
        if case .sqlite = url {
            throw ValidationError(
                "SQLite serves one process: its workers run inside `syncgate serve` (see --workers). Use a postgres:// URL for separate worker processes."
            )
        }
        let collections = try self.collections.load()
        let settings = try Settings.fromEnvironment()
        let concurrency = try concurrency ?? Environment.integer("SYNCGATE_WORKER_CONCURRENCY") ?? 4
        guard concurrency > 0 else { throw ValidationError("--concurrency must be at least 1") }

        let store = try Runtime.makeStore(url, logger: logger, maximumConnections: 2 * concurrency + 4)
        let worker = Worker(store: store, collections: collections, configuration: settings.workerConfiguration(concurrency: concurrency), logger: logger)
        let maintenance = MaintenanceService(store: store, retention: settings.retention, interval: settings.maintenanceInterval, logger: logger)
        let group = ServiceGroup(
            configuration: .init(services: [store, worker, maintenance], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        )
        try await group.run()
    }
}
