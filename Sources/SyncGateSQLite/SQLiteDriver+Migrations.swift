import GRDB
public import Logging
public import SyncGateCore
public import SyncGateStorage

extension SQLiteDriver {
    /// The migrations of `Migrations/`, embedded in the binary, in order. A test checks that the
    /// folder and this list agree (every file embedded, numbered without gaps).
    public static let migrations: [Migration] = [
        Migration(version: 1, name: "initial", bytes: PackageResources._001_initial_sql),
        Migration(version: 2, name: "group_keys", bytes: PackageResources._002_group_keys_sql),
        Migration(version: 3, name: "scopes_version", bytes: PackageResources._003_scopes_version_sql),
        Migration(version: 4, name: "commit_times", bytes: PackageResources._004_commit_times_sql, breaksOlderServers: false),
        Migration(version: 5, name: "incremental_maintenance", bytes: PackageResources._005_incremental_maintenance_sql, breaksOlderServers: false),
        Migration(version: 6, name: "uncompacted_feeds", bytes: PackageResources._006_uncompacted_feeds_sql, breaksOlderServers: false),
    ]

    public func migrate(logger: Logger) async throws -> [Int] {
        let now = Timestamp.now().millisecondsSinceEpoch
        return try await writer.withLock {
            try await onWriter { db in
                try db.execute(sql: """
                    CREATE TABLE IF NOT EXISTS syncgate_migrations (
                        version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL
                    )
                    """)
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

    public func schemaStatus() async throws -> SchemaStatus {
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
