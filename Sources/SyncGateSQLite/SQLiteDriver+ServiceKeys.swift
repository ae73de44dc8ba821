import GRDB
package import SyncGateCore
package import SyncGateStorage
package import SyncGateWire

extension SQLiteDriver {
    static let serviceKeyColumns = "name, hint, scopes, reach, created_at, revoked_at"

    static func serviceKeyRecord(_ row: Row) -> ServiceKeyRecord {
        ServiceKeyRecord(
            name: row[0], hint: row[1], storedScopes: row[2], storedReach: row[3],
            createdAt: Timestamp(millisecondsSinceEpoch: row[4]), revokedAt: (row[5] as Int64?).map(Timestamp.init(millisecondsSinceEpoch:))
        )
    }

    package func insertServiceKey(_ key: NewServiceKey, now: Timestamp?) async throws -> Bool {
        let created = (now ?? .now()).millisecondsSinceEpoch
        return try await write { db in
            try db.execute(
                sql: "INSERT INTO service_keys (name, key_hash, hint, scopes, reach, created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
                arguments: [key.name, key.keyHash, key.hint, key.storedScopes, key.storedReach, created]
            )
            return db.changesCount == 1
        }
    }

    package func serviceKeys() async throws -> [ServiceKeyRecord] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT \(Self.serviceKeyColumns) FROM service_keys ORDER BY name").map(Self.serviceKeyRecord)
        }
    }

    package func serviceKey(hash: String) async throws -> ServiceKeyRecord? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT \(Self.serviceKeyColumns) FROM service_keys WHERE key_hash = ?", arguments: [hash]).map(Self.serviceKeyRecord)
        }
    }

    package func revokeServiceKey(name: String, now: Timestamp?) async throws -> Bool {
        let revoked = (now ?? .now()).millisecondsSinceEpoch
        return try await write { db in
            try db.execute(sql: "UPDATE service_keys SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL", arguments: [revoked, name])
            return db.changesCount == 1
        }
    }
}

extension SQLiteDriver {
    package func entity(_ key: EntityKey) async throws -> StoredEntityRow? {
        try await read { db in
            try Row.fetchOne(
                db,
                sql: "SELECT \(Self.entityColumns) FROM entities e WHERE e.scope = ? AND e.entity_type = ? AND e.entity_id = ?",
                arguments: [key.scope.key, key.entityType, key.entityID]
            ).map(Self.entityRow)
        }
    }

    package func currentEntities(in scope: Scope, types: Set<String>?, after: EntityPosition?, limit: Int) async throws -> [StoredEntityRow] {
        // Only the clauses given: SQLite plans `(? IS NULL OR …)` without the primary key, and would
        // walk the scope from its start for every page.
        var sql = "SELECT \(Self.entityColumns) FROM entities e WHERE e.scope = ? AND e.data IS NOT NULL"
        var arguments: StatementArguments = [scope.key]
        if let types {
            sql += " AND e.entity_type IN (SELECT value FROM json_each(?))"
            arguments += [JSONValue.strings(types.sorted())]
        }
        if let after {
            sql += " AND (e.entity_type, e.entity_id) > (?, ?)"
            arguments += [after.entityType, after.entityID]
        }
        sql += " ORDER BY e.entity_type, e.entity_id LIMIT ?"
        arguments += [limit]
        let statement = sql, bound = arguments
        return try await read { db in
            try Row.fetchAll(db, sql: statement, arguments: bound).map(Self.entityRow)
        }
    }
}
