import ArgumentParser
import SyncGateCommandLine
import ServiceLifecycle
import SyncGateServer
import SyncGateStorage
import UnixSignals

struct WorkerCommand: AsyncParsableCommand, RunsOnEventLoops {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Claim and apply push jobs (run as many as you like against one PostgreSQL).",
        discussion: "Also runs periodic maintenance when it holds the maintenance lock. SIGTERM: stop claiming, finish jobs in hand, exit."
    )

    @Option(help: "Lanes: transactions applying jobs at once (env SYNCGATE_WORKER_CONCURRENCY; default 4)")
    var concurrency: Int?

    @Option(help: "Most jobs a lane takes at once; those that share no feed are applied in one transaction (env SYNCGATE_WORKER_BATCH; default 16)")
    var batch: Int?

    @Option(name: .customLong("metrics-port"), help: "Serve GET /metrics (Prometheus) on this port (env SYNCGATE_METRICS_PORT; host: SYNCGATE_METRICS_HOST, default 127.0.0.1)")
    var metricsPort: Int?

    @OptionGroup var common: CommonOptions
    @OptionGroup var collections: CollectionsOption

    func run() async throws {
        var flags = collections.flags
        if let concurrency { flags[.workerConcurrency] = String(concurrency) }
        if let batch { flags[.workerBatch] = String(batch) }
        if let metricsPort { flags[.metricsPort] = String(metricsPort) }
        let (configuration, logger) = try await common.configuration(flags)
        if case .sqlite = configuration.database {
            throw ValidationError(
                "SQLite serves one process: its workers run inside `syncgate serve` (see --workers). Use a postgres:// URL for separate worker processes."
            )
        }
        // Tracing first: the worker takes the process's tracer when it is built.
        let tracing = try TracingBootstrap.service(logger: logger)
        let services = (tracing.map { [$0] } ?? []) + (try buildWorkerServices(configuration, logger: logger))
        let group = ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }
}
