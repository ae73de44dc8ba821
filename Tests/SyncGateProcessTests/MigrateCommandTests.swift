import Foundation
import GRDB
import SyncGatePostgres
import SyncGateSQLite
import SyncGateServer
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// `syncgate migrate --status` and `--print-sql`, for operators and for DBAs who apply schema
/// changes with their own tools; `syncgate --version`.
@Suite(.timeLimit(.minutes(10))) struct MigrateCommandTests {
    /// Runs the binary with `arguments` against `url`: its exit status and output.
    static func syncgate(_ arguments: [String], url: DatabaseURL) async throws -> (status: Int32?, output: String) {
        let setting = switch url {
        case .postgres(let location): location.urlString
        case .sqlite(let path): "sqlite:" + path
        }
        let process = try SyncGateProcess(arguments + ["--log-level", "error"], environment: ["SYNCGATE_DATABASE_URL": setting])
        return (await process.waitForExit(timeout: hangGuard), process.log)
    }

    /// A fresh database the binary can reach, and how to run a script of SQL on it the way a DBA would.
    static func database(_ driver: Driver) async throws -> (url: DatabaseURL, apply: @Sendable (String) async throws -> Void, cleanup: @Sendable () -> Void) {
        switch driver {
        case .postgres:
            let location = try await TestDatabases.shared.freshEmptyPostgres()
            let apply: @Sendable (String) async throws -> Void = { script in
                let file = NSTemporaryDirectory() + "syncgate-migrations-\(UUID().uuidString.prefix(8)).sql"
                try script.write(toFile: file, atomically: true, encoding: .utf8)
                defer { try? FileManager.default.removeItem(atPath: file) }
                let bin = ProcessInfo.processInfo.environment["SYNCGATE_TEST_PG_BIN"] ?? "/usr/lib/postgresql/15/bin"
                let psql = try SyncGateProcess(executable: bin + "/psql", ["-v", "ON_ERROR_STOP=1", "-q", "-f", file, location.urlString], environment: [:])
                let status = await psql.waitForExit(timeout: hangGuard)
                guard status == 0 else { throw TestEnvironmentError(description: "psql exited \(String(describing: status)): \(psql.log)") }
            }
            return (.postgres(location), apply, {})
        case .sqlite:
            let path = try TestDatabases.freshSQLitePath()
            let apply: @Sendable (String) async throws -> Void = { script in
                // The script holds its own transactions, as the sqlite3 shell would run it.
                try DatabaseQueue(path: path).writeWithoutTransaction { try $0.execute(sql: script) }
            }
            return (.sqlite(path: path), apply, { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) })
        }
    }

    @Test(arguments: Driver.selected)
    func aDBAAppliesThePrintedSQLAndTheServerSeesTheSchemaCurrent(_ driver: Driver) async throws {
        let (url, apply, cleanup) = try await Self.database(driver)
        defer { cleanup() }
        let migrations = driver == .postgres ? PostgresDriver.migrations : SQLiteDriver.migrations

        // Nothing applied: every migration pending, and this release cannot serve (exit 1).
        let before = try await Self.syncgate(["migrate", "--status"], url: url)
        #expect(before.status == 1, "\(before.output)")
        #expect(before.output.contains("schema version 0; this release (\(SyncGateVersion.current)) knows \(migrations.count)"), "\(before.output)")
        for migration in migrations {
            #expect(before.output.contains("pending  \(String(format: "%04d", migration.version))_\(migration.name)"), "\(migration.name): \(before.output)")
        }
        #expect(before.output.contains("pending: \(migrations.count)"))

        // The printed SQL, applied by hand, is the whole schema and records itself.
        let printed = try await Self.syncgate(["migrate", "--print-sql"], url: url)
        #expect(printed.status == 0, "\(printed.output)")
        for migration in migrations { #expect(printed.output.contains(migration.sql.trimmingCharacters(in: .whitespacesAndNewlines))) }
        try await apply(printed.output)

        let after = try await Self.syncgate(["migrate", "--status"], url: url)
        #expect(after.status == 0, "\(after.output)")
        #expect(after.output.contains("compatible: the schema is current"), "\(after.output)")
        #expect(after.output.components(separatedBy: "  applied  ").count - 1 == migrations.count, "\(after.output)")
        #expect(!after.output.contains("pending"))
        #expect(try await Self.syncgate(["migrate"], url: url).output.contains("schema is current (version \(migrations.count))"))
        // Nothing left to print but the bookkeeping table's definition.
        let again = try await Self.syncgate(["migrate", "--print-sql"], url: url)
        #expect(again.status == 0 && !again.output.contains("INSERT INTO syncgate_migrations"), "\(again.output)")
    }

    /// A newer release's breaking migration: --status says this release cannot serve, exit 1.
    @Test(arguments: Driver.selected)
    func statusExplainsASchemaThisReleaseCannotServe(_ driver: Driver) async throws {
        let (url, _, cleanup) = try await Self.database(driver)
        defer { cleanup() }
        #expect(try await Self.syncgate(["migrate"], url: url).status == 0)
        try await StoreHarness.withExisting(url) { harness in
            let latest = (driver == .postgres ? PostgresDriver.migrations : SQLiteDriver.migrations).count
            let columns = driver == .sqlite ? "version, name, applied_at, compatible_from" : "version, name, compatible_from"
            let values = driver == .sqlite ? "\(latest + 1), 'future', 0, \(latest + 1)" : "\(latest + 1), 'future', \(latest + 1)"
            try await harness.execute("INSERT INTO syncgate_migrations (\(columns)) VALUES (\(values))")
        }
        let status = try await Self.syncgate(["migrate", "--status"], url: url)
        #expect(status.status == 1)
        #expect(status.output.contains("not compatible:") && status.output.contains("upgrade it"), "\(status.output)")
    }

    @Test func versionIsTheReleasesAndTheChangelogsNewest() async throws {
        let process = try SyncGateProcess(["--version"], environment: [:])
        #expect(await process.waitForExit(timeout: hangGuard) == 0)
        #expect(process.log.trimmingCharacters(in: .whitespacesAndNewlines) == "syncgate \(SyncGateVersion.current)")
        let changelog = try String(contentsOf: DeployTests.root.appendingPathComponent("CHANGELOG.md"), encoding: .utf8)
        let newest = try #require(changelog.firstMatch(of: /\n## \[?[^\n]*?(\d+\.\d+\.\d+)/)?.output.1)
        #expect(String(newest) == SyncGateVersion.current, "CHANGELOG.md's newest entry is \(newest)")
    }
}
