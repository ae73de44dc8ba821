import Foundation
import PostgresNIO
package import SyncGateStorage
package import SyncGateWire

extension PostgresDriver {
    typealias ServiceKeyColumns = (String, String, String, Date, Date?)

    static func serviceKeyRecord(_ columns: ServiceKeyColumns) -> ServiceKeyRecord {
        let (name, hint, scopes, created, revoked) = columns
        return ServiceKeyRecord(
            name: name, hint: hint, scopes: ServiceScope.parse(stored: scopes), createdAt: Timestamp(created), revokedAt: revoked.map(Timestamp.init)
        )
    }

    package func insertServiceKey(_ key: NewServiceKey, now: Timestamp?) async throws -> Bool {
        let inserted = try await query(
            "create service key", .maintenance,
            """
            INSERT INTO service_keys (name, key_hash, hint, scopes, created_at)
            VALUES (\(key.name), \(key.keyHash), \(key.hint), \(ServiceScope.stored(key.scopes)),
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
            "SELECT name, hint, scopes, created_at, revoked_at FROM service_keys ORDER BY name",
            as: ServiceKeyColumns.self
        ).map(Self.serviceKeyRecord)
    }

    package func serviceKey(hash: String) async throws -> ServiceKeyRecord? {
        try await query(
            "look up service key", .request,
            "SELECT name, hint, scopes, created_at, revoked_at FROM service_keys WHERE key_hash = \(hash)",
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
