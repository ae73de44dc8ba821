import Foundation
import GRDB
import SyncGateConcurrency
package import Logging
import SyncGateCore
import SyncGateWire
import SyncGateSQLiteSchema
package import SyncGateStorage

extension SQLiteDriver {
    /// The migrations of `sql/sqlite/`, embedded in the binary, in order. A test checks that the
    /// folder and this list agree (every file embedded, numbered without gaps).
    package static let migrations = Migration.embedded(SQLiteSchema.files)

    package var migrations: [Migration] { Self.migrations }

    /// The table recording applied migrations (`applied_at` in milliseconds since the epoch).
    static let bookkeeping = """
        CREATE TABLE IF NOT EXISTS syncgate_migrations (
            version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL, compatible_from INTEGER
        )
        """

    package func migrate(logger: Logger) async throws -> [Int] {
        let now = Timestamp.now().millisecondsSinceEpoch
        return try await writer.withLock {
            try await onWriter { db in
                try db.execute(sql: Self.bookkeeping)
                // Read by ``schemaStatus()``; rows from before the column have none (= their own version).
                if try !Self.recordsCompatibility(db) {
                    try db.execute(sql: "ALTER TABLE syncgate_migrations ADD COLUMN compatible_from INTEGER")
                }
                let done = Set(try Int.fetchAll(db, sql: "SELECT version FROM syncgate_migrations"))
                var applied: [Int] = []
                for migration in Self.migrations where !done.contains(migration.version) {
                    logger.info("applying migration", metadata: ["syncgate.migration": "\(migration.version)_\(migration.name)"])
                    try db.inTransaction(.immediate) {
                        try db.execute(sql: migration.sql)
                        try db.execute(
                            sql: "INSERT INTO syncgate_migrations (version, name, applied_at, compatible_from) VALUES (?, ?, ?, ?)",
                            arguments: [migration.version, migration.name, now, Migration.compatibleFrom(migration.version, in: Self.migrations)]
                        )
                        return .commit
                    }
                    applied.append(migration.version)
                }
                return applied
            }
        }
    }

    package func appliedMigrations() async throws -> [AppliedMigration] {
        try await read { db in
            guard try db.tableExists("syncgate_migrations") else { return [] }
            let compatibility = try Self.recordsCompatibility(db) ? "compatible_from" : "NULL AS compatible_from"
            return try Row.fetchAll(db, sql: "SELECT version, name, applied_at, \(compatibility) FROM syncgate_migrations ORDER BY version").map {
                AppliedMigration(version: $0["version"], name: $0["name"], appliedAt: $0["applied_at"], compatibleFrom: $0["compatible_from"])
            }
        }
    }

    package func migrationScript(_ pending: [Migration]) -> String {
        var script = "-- SyncGate SQLite migrations, as `syncgate migrate` applies them (run with sqlite3 -bail).\n"
        script += Self.bookkeeping + ";\n"
        for migration in pending {
            script += "\n-- \(migration.version)_\(migration.name)\nBEGIN IMMEDIATE;\n\(migration.sql.trimmingCharacters(in: .whitespacesAndNewlines))\n"
            script += "INSERT INTO syncgate_migrations (version, name, applied_at, compatible_from) VALUES "
            script += "(\(migration.version), '\(migration.name)', \(Self.clockMilliseconds), "
            script += "\(Migration.compatibleFrom(migration.version, in: Self.migrations)));\nCOMMIT;\n"
        }
        return script
    }

    package func schemaStatus() async throws -> SchemaStatus {
        let latest = Self.migrations.last?.version ?? 0
        return try await read { db in
            guard try db.tableExists("syncgate_migrations") else { return SchemaStatus(applied: 0, latest: latest) }
            // A database an older release migrated has no compatible_from column yet.
            let recorded = try Self.recordsCompatibility(db)
            let newest = try Row.fetchOne(
                db, sql: "SELECT version, \(recorded ? "compatible_from" : "NULL AS compatible_from") FROM syncgate_migrations ORDER BY version DESC LIMIT 1"
            )
            return SchemaStatus(applied: newest?["version"] ?? 0, latest: latest, compatibleFrom: newest?["compatible_from"])
        }
    }

    /// Whether `syncgate_migrations` has the `compatible_from` column (a database an older
    /// release migrated has not, until this release's migrator adds it).
    private static func recordsCompatibility(_ db: Database) throws -> Bool {
        try db.columns(in: "syncgate_migrations").contains { $0.name == "compatible_from" }
    }
}
