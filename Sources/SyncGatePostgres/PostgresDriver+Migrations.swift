public import Logging
import PostgresNIO
public import SyncGateStorage

extension PostgresDriver {
    /// The migrations of `Migrations/`, embedded in the binary, in order. A test checks that the
    /// folder and this list agree (every file embedded, numbered without gaps).
    public static let migrations: [Migration] = [
        Migration(version: 1, name: "initial", bytes: PackageResources._001_initial_sql),
        Migration(version: 2, name: "group_keys", bytes: PackageResources._002_group_keys_sql),
        Migration(version: 3, name: "scopes_version", bytes: PackageResources._003_scopes_version_sql),
        Migration(version: 4, name: "enqueue", bytes: PackageResources._004_enqueue_sql, breaksOlderServers: false),
        Migration(version: 5, name: "commit_times", bytes: PackageResources._005_commit_times_sql, breaksOlderServers: false),
        Migration(version: 6, name: "incremental_maintenance", bytes: PackageResources._006_incremental_maintenance_sql, breaksOlderServers: false),
        Migration(version: 7, name: "uncompacted_feeds", bytes: PackageResources._007_uncompacted_feeds_sql, breaksOlderServers: false),
        Migration(version: 8, name: "enqueue_without_notify", bytes: PackageResources._008_enqueue_without_notify_sql, breaksOlderServers: false),
        Migration(version: 9, name: "job_compression", bytes: PackageResources._009_job_compression_sql, breaksOlderServers: false),
    ]

    /// Session advisory lock serialising migrations across processes starting together.
    static let migrationLockKey: Int64 = 0x5347_4D49_4752  // "SGMIGR"

    public func migrate(logger: Logger) async throws -> [Int] {
        try await withConnection("migrate", .maintenance) { connection in
            try await connection.query("SELECT pg_advisory_lock(\(Self.migrationLockKey))", logger: logger)
            do {
                let applied = try await Self.applyPendingMigrations(on: connection, logger: logger)
                try await connection.query("SELECT pg_advisory_unlock(\(Self.migrationLockKey))", logger: logger)
                return applied
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(Self.migrationLockKey))", logger: logger)
                throw error
            }
        }
    }

    private static func applyPendingMigrations(on connection: PostgresConnection, logger: Logger) async throws -> [Int] {
        try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS syncgate_migrations (
                version    integer     PRIMARY KEY,
                name       text        NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            logger: logger
        )
        // Read by ``schemaStatus()``; rows from before the column have none (= their own version).
        try await connection.query("ALTER TABLE syncgate_migrations ADD COLUMN IF NOT EXISTS compatible_from integer", logger: logger)
        let done = Set(try await connection.query("SELECT version FROM syncgate_migrations", logger: logger).collect(Int.self))
        var applied: [Int] = []
        for migration in migrations where !done.contains(migration.version) {
            logger.info("applying migration", metadata: ["syncgate.migration": "\(migration.version)_\(migration.name)"])
            // One transaction per migration; PostgresNIO runs one statement per query.
            try await connection.inTransaction(logger: logger) {
                for statement in SQLScript.statements(migration.sql) {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query(
                    """
                    INSERT INTO syncgate_migrations (version, name, compatible_from)
                    VALUES (\(migration.version), \(migration.name), \(Migration.compatibleFrom(migration.version, in: migrations)))
                    """,
                    logger: logger
                )
            }
            applied.append(migration.version)
        }
        return applied
    }

    public func schemaStatus() async throws -> SchemaStatus {
        let latest = Self.migrations.last?.version ?? 0
        let exists = try await query("schema status", .request, "SELECT to_regclass('syncgate_migrations') IS NOT NULL", as: Bool.self)
        guard exists.first == true else { return SchemaStatus(applied: 0, latest: latest) }
        let newest = try await query(
            // Through to_jsonb: a database an older release migrated has no compatible_from column yet.
            "schema status", .request,
            "SELECT version, (to_jsonb(m) ->> 'compatible_from')::int FROM syncgate_migrations m ORDER BY version DESC LIMIT 1", as: (Int, Int?).self
        ).first
        return SchemaStatus(applied: newest?.0 ?? 0, latest: latest, compatibleFrom: newest?.1)
    }
}
