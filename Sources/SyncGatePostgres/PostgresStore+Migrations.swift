public import Logging
import PostgresNIO
public import SyncGateStorage

extension PostgresStore {
    /// Session advisory lock serialising migrations across processes starting together.
    static let migrationLockKey: Int64 = 0x5347_4D49_4752  // "SGMIGR"

    public func migrate(logger: Logger) async throws -> [Int] {
        try await withDeadline("migrate", .maintenance) { [self] in
            try await client.withConnection { connection in
                try await connection.query("SELECT pg_advisory_lock(\(Self.migrationLockKey))", logger: logger)
                do {
                    let applied = try await self.applyPendingMigrations(on: connection, logger: logger)
                    try await connection.query("SELECT pg_advisory_unlock(\(Self.migrationLockKey))", logger: logger)
                    return applied
                } catch {
                    _ = try? await connection.query("SELECT pg_advisory_unlock(\(Self.migrationLockKey))", logger: logger)
                    throw error
                }
            }
        }
    }

    private func applyPendingMigrations(on connection: PostgresConnection, logger: Logger) async throws -> [Int] {
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
        let done = Set(try await connection.query("SELECT version FROM syncgate_migrations", logger: logger).collect(Int.self))
        var applied: [Int] = []
        for migration in Migration.postgres where !done.contains(migration.version) {
            logger.info("applying migration", metadata: ["syncgate.migration": "\(migration.version)_\(migration.name)"])
            // One transaction per migration; PostgresNIO runs one statement per query.
            try await connection.query("BEGIN", logger: logger)
            do {
                for statement in SQLScript.statements(migration.sql) {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query(
                    "INSERT INTO syncgate_migrations (version, name) VALUES (\(migration.version), \(migration.name))",
                    logger: logger
                )
                try await connection.query("COMMIT", logger: logger)
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: logger)
                throw error
            }
            applied.append(migration.version)
        }
        return applied
    }

    public func schemaStatus() async throws -> SchemaStatus {
        try await withDeadline("schema status", .request) { [self] in
            let latest = Migration.postgres.last?.version ?? 0
            let exists = try await self.client.query("SELECT to_regclass('syncgate_migrations') IS NOT NULL").collect(Bool.self)
            guard exists.first == true else { return SchemaStatus(applied: 0, latest: latest) }
            let applied = try await self.client.query("SELECT coalesce(max(version), 0) FROM syncgate_migrations").collect(Int.self)
            return SchemaStatus(applied: applied.first ?? 0, latest: latest)
        }
    }
}
