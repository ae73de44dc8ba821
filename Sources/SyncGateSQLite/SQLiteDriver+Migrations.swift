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
                let done = Set(try Int.fetchAll(db, sql: "SELECT version FROM syncgate_migrations"))
                var applied: [Int] = []
                for migration in Self.migrations where !done.contains(migration.version) {
                    logger.info("applying migration", metadata: ["syncgate.migration": "\(migration.version)_\(migration.name)"])
                    try db.inTransaction(.immediate) {
                        try db.execute(sql: migration.sql)
                        try db.execute(
                            sql: "INSERT INTO syncgate_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                            arguments: [migration.version, migration.name, now]
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
            let applied = try Int.fetchOne(db, sql: "SELECT coalesce(max(version), 0) FROM syncgate_migrations") ?? 0
            return SchemaStatus(applied: applied, latest: latest)
        }
    }
}
