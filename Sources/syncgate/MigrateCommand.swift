import ArgumentParser
import SyncGateCommandLine
import Foundation
import SyncGateServer
import SyncGateStorage

struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Apply pending schema migrations (safe to run from several processes at once).",
        discussion: """
            --status reports the applied and pending migrations and whether this release can serve
            the schema, without changing anything; it exits 1 when this release cannot serve the
            schema as it is (migrations pending, or a newer release's breaking migration applied).
            --print-sql prints the SQL of the pending migrations, bookkeeping included, for a DBA
            who applies schema changes with their own tools; it changes nothing either. The same
            files are in the repository's sql/ folder.
            """
    )

    @OptionGroup var common: CommonOptions

    @Flag(help: "Show applied and pending migrations and whether this release can serve the schema; apply nothing.")
    var status = false

    @Flag(name: .customLong("print-sql"), help: "Print the SQL of the pending migrations instead of applying them.")
    var printSQL = false

    func validate() throws {
        if status && printSQL { throw ValidationError("--status and --print-sql do not go together") }
    }

    func run() async throws {
        let (configuration, logger) = try await common.configuration()
        if status {
            let report = try await OpenStore.with(configuration.database, logger: logger) { try await $0.migrationStatus() }
            print(Self.describe(report))
            if !report.schema.isServable { throw ExitCode(1) }
            return
        }
        if printSQL {
            print(try await OpenStore.with(configuration.database, logger: logger) { try await $0.pendingMigrationScript() }, terminator: "")
            return
        }
        let (applied, status) = try await OpenStore.with(configuration.database, logger: logger) { store in
            (try await store.migrate(logger: logger), try await store.schemaStatus())
        }
        if applied.isEmpty {
            print("schema is current (version \(status.applied))")
        } else {
            print("applied migrations \(applied.map(String.init).joined(separator: ", ")); schema is at version \(status.applied)")
        }
    }

    /// `--status`'s report: one line per migration, then the verdict.
    static func describe(_ report: MigrationStatus) -> String {
        var lines = ["schema version \(report.schema.applied); this release (\(SyncGateVersion.current)) knows \(report.schema.latest)"]
        for migration in report.applied {
            let when = Date(timeIntervalSince1970: Double(migration.appliedAt) / 1000).formatted(.iso8601)
            lines.append("  applied  \(Self.label(migration.version, migration.name))  \(when)")
        }
        for migration in report.pending {
            lines.append("  pending  \(Self.label(migration.version, migration.name))")
        }
        if !report.pending.isEmpty {
            lines.append("pending: \(report.pending.count) (run `syncgate migrate`, or apply `syncgate migrate --print-sql`)")
        } else if let problem = report.schema.problem {
            lines.append("not compatible: \(problem)")
        } else if report.schema.isCurrent {
            lines.append("compatible: the schema is current")
        } else {
            lines.append("compatible: a newer release migrated it additively; this release serves it")
        }
        return lines.joined(separator: "\n")
    }

    private static func label(_ version: Int, _ name: String) -> String {
        let number = String(version)
        return String(repeating: "0", count: max(0, 4 - number.count)) + number + "_" + name
    }
}
