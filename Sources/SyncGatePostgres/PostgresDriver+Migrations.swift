import Foundation
package import Logging
import PostgresNIO
import SyncGatePostgresSchema
package import SyncGateStorage

extension PostgresDriver {
    /// The migrations of `sql/postgres/`, embedded in the binary, in order. A test checks that the
    /// folder and this list agree (every file embedded, numbered without gaps).
    package static let migrations = Migration.embedded(PostgresSchema.files)

    package var migrations: [Migration] { Self.migrations }

    /// The table recording applied migrations. `compatible_from` is read by ``schemaStatus()``;
    /// rows from before the column have none (= their own version).
    static let bookkeeping = [
        """
        CREATE TABLE IF NOT EXISTS syncgate_migrations (
            version    integer     PRIMARY KEY,
            name       text        NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now()
        )
        """,
        "ALTER TABLE syncgate_migrations ADD COLUMN IF NOT EXISTS compatible_from integer",
    ]

    /// Session advisory lock serialising migrations across processes starting together.
    static let migrationLockKey: Int64 = 0x5347_4D49_4752  // "SGMIGR"

    package func migrate(logger: Logger) async throws -> [Int] {
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
        for statement in bookkeeping {
            try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
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

    package func appliedMigrations() async throws -> [AppliedMigration] {
        let exists = try await query("applied migrations", .request, "SELECT to_regclass('syncgate_migrations') IS NOT NULL", as: Bool.self)
        guard exists.first == true else { return [] }
        return try await query(
            "applied migrations", .request,
            """
            SELECT version, name, (extract(epoch FROM applied_at) * 1000)::int8, (to_jsonb(m) ->> 'compatible_from')::int
            FROM syncgate_migrations m ORDER BY version
            """,
            as: (Int, String, Int64, Int?).self
        ).map { AppliedMigration(version: $0.0, name: $0.1, appliedAt: $0.2, compatibleFrom: $0.3) }
    }

    package func migrationScript(_ pending: [Migration]) -> String {
        var script = "-- SyncGate PostgreSQL migrations, as `syncgate migrate` applies them (run with psql -v ON_ERROR_STOP=1).\n"
        script += Self.bookkeeping.map { $0 + ";\n" }.joined()
        for migration in pending {
            script += "\n-- \(migration.version)_\(migration.name)\nBEGIN;\n\(migration.sql.trimmingCharacters(in: .whitespacesAndNewlines))\n"
            script += "INSERT INTO syncgate_migrations (version, name, compatible_from) VALUES "
            script += "(\(migration.version), '\(migration.name)', \(Migration.compatibleFrom(migration.version, in: Self.migrations)));\nCOMMIT;\n"
        }
        return script
    }

    package func schemaStatus() async throws -> SchemaStatus {
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
