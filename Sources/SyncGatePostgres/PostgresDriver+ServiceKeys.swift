import Foundation
import PostgresNIO
package import SyncGateCore
package import SyncGateStorage
package import SyncGateWire

extension PostgresDriver {
    typealias ServiceKeyColumns = (String, String, String, String?, Date, Date?)

    static func serviceKeyRecord(_ columns: ServiceKeyColumns) -> ServiceKeyRecord {
        let (name, hint, scopes, reach, created, revoked) = columns
        return ServiceKeyRecord(
            name: name, hint: hint, storedScopes: scopes, storedReach: reach, createdAt: Timestamp(created), revokedAt: revoked.map(Timestamp.init)
        )
    }

    package func insertServiceKey(_ key: NewServiceKey, now: Timestamp?) async throws -> Bool {
        let inserted = try await query(
            "create service key", .maintenance,
            """
            INSERT INTO service_keys (name, key_hash, hint, scopes, reach, created_at)
            VALUES (\(key.name), \(key.keyHash), \(key.hint), \(key.storedScopes), \(key.storedReach),
                    coalesce(timestamptz 'epoch' + \(now.milliseconds)::bigint * interval '1 millisecond', now()))
            ON CONFLICT (name) DO NOTHING
            RETURNING name
            """,
            as: String.self
        )
        return !inserted.isEmpty
    }

    package func serviceKeys() async throws -> [ServiceKeyRecord] {
        try await query(
            "list service keys", .maintenance,
            "SELECT name, hint, scopes, reach, created_at, revoked_at FROM service_keys ORDER BY name",
            as: ServiceKeyColumns.self
        ).map(Self.serviceKeyRecord)
    }

    package func serviceKey(hash: String) async throws -> ServiceKeyRecord? {
        try await query(
            "look up service key", .request,
            "SELECT name, hint, scopes, reach, created_at, revoked_at FROM service_keys WHERE key_hash = \(hash)",
            as: ServiceKeyColumns.self
        ).first.map(Self.serviceKeyRecord)
    }

    package func revokeServiceKey(name: String, now: Timestamp?) async throws -> Bool {
        let revoked = try await query(
            "revoke service key", .maintenance,
            """
            UPDATE service_keys SET revoked_at = coalesce(timestamptz 'epoch' + \(now.milliseconds)::bigint * interval '1 millisecond', now())
            WHERE name = \(name) AND revoked_at IS NULL
            RETURNING name
            """,
            as: String.self
        )
        return !revoked.isEmpty
    }
}

extension PostgresDriver {
    package func entity(_ key: EntityKey) async throws -> StoredEntityRow? {
        try await query(
            "read entity", .request,
            """
            SELECT \(unescaped: Self.entityColumns) FROM entities e
            WHERE e.scope = \(key.scope.key) AND e.entity_type = \(key.entityType) AND e.entity_id = \(key.entityID)
            """,
            as: EntityColumns.self
        ).first.map(Self.entityRow)
    }

    package func currentEntities(in scope: Scope, types: Set<String>?, after: EntityPosition?, limit: Int) async throws -> [StoredEntityRow] {
        let typeList = types?.sorted()
        return try await query(
            "read current entities", .request,
            """
            SELECT \(unescaped: Self.entityColumns) FROM entities e
            WHERE e.scope = \(scope.key) AND e.data IS NOT NULL
              AND (\(typeList)::text[] IS NULL OR e.entity_type = ANY(\(typeList)::text[]))
              AND (\(after?.entityType)::text IS NULL OR (e.entity_type, e.entity_id) > (\(after?.entityType)::text, \(after?.entityID)::text))
            ORDER BY e.entity_type, e.entity_id
            LIMIT \(limit)
            """,
            as: EntityColumns.self
        ).map(Self.entityRow)
    }
}
