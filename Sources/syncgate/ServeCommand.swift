import ArgumentParser
import SyncGateCommandLine
import Hummingbird
import SyncGateCore
import SyncGateWire
import SyncGateServer

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

    @OptionGroup var common: CommonOptions
    @OptionGroup var collections: CollectionsOption

    func run() async throws {
        var flags = collections.flags
        if let host { flags[.host] = host }
        if let port { flags[.port] = String(port) }
        if let workers { flags[.workers] = String(workers) }
        let (configuration, logger) = try await common.configuration(flags)
        do {
            // Tracing first: the front and its workers take the process's tracer when they are built.
            let tracing = try TracingBootstrap.service(logger: logger)
            try await buildApplication(configuration, services: tracing.map { [$0] } ?? [], logger: logger).runService()
        } catch let error as ConfigurationError {
            throw ValidationError(error.message)
        }
    }
}
