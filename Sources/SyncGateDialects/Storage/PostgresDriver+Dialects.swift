import PostgresNIO
package import SyncGateCore
package import SyncGatePostgres
import SyncGateWire
package import SyncGateStorage

/// Reads by commit time, for the seed apps' dialects (migration 0005, docs/dialects.md).
extension PostgresDriver: DialectDriver {
    package func commitHorizon() async throws -> Int64 {
        // now() and the claims are the database's one clock. Running jobs are few (at most the
        // workers' lanes), found by the partial index of running leases.
        let rows = try await query(
            "commit horizon", .request,
            """
            SELECT least(
                floor(extract(epoch FROM now()) * 1000)::bigint,
                coalesce((SELECT floor(extract(epoch FROM min(claimed_at)) * 1000)::bigint FROM jobs WHERE state = 'running'), \(Int64.max))
            ) - 1
            """,
            as: Int64.self
        )
        guard let horizon = rows.first else { throw StoreUnavailableError("commit horizon returned no row") }
        return horizon
    }

    package func latestCommitTimes(_ entities: [EntityKey]) async throws -> [EntityKey: Int64] {
        guard !entities.isEmpty else { return [:] }
        // On Citus (no LIMIT in a lateral subquery over a table function): the newest commit
        // time of each entity's changes, the same since a feed's commit times follow its sequence.
        let rows = try await isCitus()
            ? try await query(
                "latest commit times", .request,
                """
                SELECT c.scope, c.entity_type, c.entity_id, max(c.committed_at)
                FROM unnest(\(entities.map(\.scope.key))::text[], \(entities.map(\.entityType))::text[], \(entities.map(\.entityID))::text[])
                     AS k(scope, entity_type, entity_id)
                JOIN changes c ON c.scope = k.scope AND c.entity_type = k.entity_type AND c.entity_id = k.entity_id
                GROUP BY c.scope, c.entity_type, c.entity_id
                """,
                as: (String, String, String, Int64).self
            )
            : try await query(
                "latest commit times", .request,
                """
                SELECT k.scope, k.entity_type, k.entity_id, latest.committed_at
                FROM unnest(\(entities.map(\.scope.key))::text[], \(entities.map(\.entityType))::text[], \(entities.map(\.entityID))::text[])
                     AS k(scope, entity_type, entity_id)
                CROSS JOIN LATERAL (
                    SELECT c.committed_at FROM changes c
                    WHERE c.scope = k.scope AND c.entity_type = k.entity_type AND c.entity_id = k.entity_id
                    ORDER BY c.seq DESC LIMIT 1
                ) latest
                """,
                as: (String, String, String, Int64).self
            )
        var times: [EntityKey: Int64] = [:]
        for (scope, type, id, time) in rows {
            if let scope = Scope(key: scope) { times[EntityKey(scope: scope, entityType: type, entityID: id)] = time }
        }
        return times
    }

    package func readChanges(_ reads: [TimedRead], after: Int64, through: Int64, types: Set<String>?, limit: Int) async throws -> [TimedChangeRow] {
        guard !reads.isEmpty, limit > 0 else { return [] }
        let typeList = types?.sorted()
        // Per feed one range of the (scope, committed_at) index: after `after`, or the whole feed
        // up to `through` when it became visible after `after`.
        let rows = try await query(
            "read changes by time", .request,
            """
            SELECT c.scope, greatest(c.committed_at, r.visible_from) AS t, c.seq, c.entity_type, c.entity_id, c.version, c.data::text, c.updated_at
            FROM unnest(\(reads.map(\.scope.key))::text[], \(reads.map(\.visibleFrom))::bigint[]) AS r(scope, visible_from)
            JOIN changes c ON c.scope = r.scope
             AND c.committed_at > CASE WHEN r.visible_from > \(after) THEN \(Int64.min) ELSE \(after) END
             AND c.committed_at <= \(through)
            WHERE (\(typeList)::text[] IS NULL OR c.entity_type = ANY(\(typeList)::text[]))
            ORDER BY t, c.scope, c.seq
            LIMIT \(Int64(clamping: limit))
            """,
            as: (String, Int64, Int64, String, String, Int64, String?, Int64).self
        )
        return rows.compactMap { row in
            let (key, time, sequence, type, id, version, data, updatedAt) = row
            guard let scope = Scope(key: key) else { return nil }
            return TimedChangeRow(
                scope: scope, time: time,
                row: ChangeRow(sequence: sequence, entityType: type, entityID: id, version: version, data: data, updatedAt: updatedAt)
            )
        }
    }

    package func liveEntities(scopes: [Scope], types: Set<String>?) async throws -> [StoredEntityRow] {
        guard !scopes.isEmpty else { return [] }
        let typeList = types?.sorted()
        return try await query(
            "live entities", .request,
            """
            SELECT \(unescaped: Self.entityColumns) FROM entities e
            WHERE e.scope = ANY(\(scopes.map(\.key))::text[]) AND e.data IS NOT NULL
              AND (\(typeList)::text[] IS NULL OR e.entity_type = ANY(\(typeList)::text[]))
            ORDER BY e.scope, e.entity_type, e.entity_id
            """,
            as: EntityColumns.self
        ).map(Self.entityRow)
    }
}
