import GRDB
public import Logging
public import SyncGateStorage

extension SQLiteStore {
    public func migrate(logger: Logger) async throws -> [Int] {
        try await pool.writeWithoutTransaction { db in
            try db.execute(sql: """
                CREATE TABLE IF NOT EXISTS syncgate_migrations (
                    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL
                )
                """)
            let done = Set(try Int.fetchAll(db, sql: "SELECT version FROM syncgate_migrations"))
            var applied: [Int] = []
            for migration in Migration.sqlite where !done.contains(migration.version) {
                logger.info("applying migration", metadata: ["syncgate.migration": "\(migration.version)_\(migration.name)"])
                try db.inTransaction(.immediate) {
                    try db.execute(sql: migration.sql)
                    try db.execute(
                        sql: "INSERT INTO syncgate_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                        arguments: [migration.version, migration.name, SQLiteStore.now]
                    )
                    return .commit
                }
                applied.append(migration.version)
            }
            return applied
        }
    }

    public func schemaStatus() async throws -> SchemaStatus {
        try await read { statements in
            let latest = Migration.sqlite.last?.version ?? 0
            let exists: Bool = try statements.value("SELECT count(*) > 0 FROM sqlite_master WHERE name = 'syncgate_migrations'") ?? false
            guard exists else { return SchemaStatus(applied: 0, latest: latest) }
            let applied: Int = try statements.value("SELECT coalesce(max(version), 0) FROM syncgate_migrations") ?? 0
            return SchemaStatus(applied: applied, latest: latest)
        }
    }
}
