import ArgumentParser
import SyncGateStorage

struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Apply pending schema migrations (safe to run from several processes at once)."
    )

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    func run() async throws {
        let logger = try logging.makeLogger()
        let url = try database.resolved()
        let (applied, status) = try await Runtime.withStore(url, logger: logger) { store in
            (try await store.migrate(logger: logger), try await store.schemaStatus())
        }
        if applied.isEmpty {
            print("schema is current (version \(status.applied))")
        } else {
            print("applied migrations \(applied.map(String.init).joined(separator: ", ")); schema is at version \(status.applied)")
        }
    }
}
