import ArgumentParser
import SyncGateServer
import SyncGateStorage

struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Apply pending schema migrations (safe to run from several processes at once)."
    )

    @OptionGroup var common: CommonOptions

    func run() async throws {
        let (configuration, logger) = try await common.configuration()
        let (applied, status) = try await OpenStore.with(configuration.database, logger: logger) { store in
            (try await store.migrate(logger: logger), try await store.schemaStatus())
        }
        if applied.isEmpty {
            print("schema is current (version \(status.applied))")
        } else {
            print("applied migrations \(applied.map(String.init).joined(separator: ", ")); schema is at version \(status.applied)")
        }
    }
}
