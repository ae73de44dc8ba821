import GRDB
package import SyncGateCore
package import SyncGateSQLite
import SyncGateWire
package import SyncGateStorage

/// Reads by commit time, for the seed apps' dialects (migration 0004, docs/dialects.md).
extension SQLiteDriver: DialectDriver {
    package func commitHorizon() async throws -> Int64 {
        try await read { db in
            try Int64.fetchOne(
                db,
                sql: """
                    SELECT min(\(Self.clockMilliseconds), coalesce((SELECT min(claimed_at) FROM jobs WHERE state = 'running'), \(Int64.max))) - 1
                    """
            ) ?? 0
        }
    }

    package func latestCommitTimes(_ entities: [EntityKey]) async throws -> [EntityKey: Int64] {
        guard !entities.isEmpty else { return [:] }
        let list = JSONValue.rows(entities.map { [.string($0.scope.key), .string($0.entityType), .string($0.entityID)] })
        return try await read { db in
            var times: [EntityKey: Int64] = [:]
            for row in try Row.fetchAll(
                db,
                sql: """
                    SELECT json_extract(k.value, '$[0]'), json_extract(k.value, '$[1]'), json_extract(k.value, '$[2]'),
                           (SELECT c.committed_at FROM changes c
                            WHERE c.scope = json_extract(k.value, '$[0]') AND c.entity_type = json_extract(k.value, '$[1]')
                              AND c.entity_id = json_extract(k.value, '$[2]')
                            ORDER BY c.seq DESC LIMIT 1)
                    FROM json_each(?) k
                    """,
                arguments: [list]
            ) {
                guard let time = row[3] as Int64?, let scope = Scope(key: row[0]) else { continue }
                times[EntityKey(scope: scope, entityType: row[1], entityID: row[2])] = time
            }
            return times
        }
    }

    package func readChanges(_ reads: [TimedRead], after: Int64, through: Int64, types: Set<String>?, limit: Int) async throws -> [TimedChangeRow] {
        guard !reads.isEmpty, limit > 0 else { return [] }
        let list = JSONValue.rows(reads.map { [.string($0.scope.key), .int($0.visibleFrom)] })
        let typeList = types.map { JSONValue.strings($0.sorted()) }
        return try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT c.scope, max(c.committed_at, json_extract(r.value, '$[1]')) AS t,
                           c.seq, c.entity_type, c.entity_id, c.version, c.data, c.updated_at
                    FROM json_each(?) r CROSS JOIN changes c
                      ON c.scope = json_extract(r.value, '$[0]')
                     AND c.committed_at > CASE WHEN json_extract(r.value, '$[1]') > ? THEN \(Int64.min) ELSE ? END
                     AND c.committed_at <= ?
                    WHERE (? IS NULL OR c.entity_type IN (SELECT value FROM json_each(?)))
                    ORDER BY t, c.scope, c.seq
                    LIMIT ?
                    """,
                arguments: [list, after, after, through, typeList, typeList ?? "[]", Int64(clamping: limit)]
            ).compactMap { row in
                guard let scope = Scope(key: row[0]) else { return nil }
                return TimedChangeRow(
                    scope: scope, time: row[1],
                    row: ChangeRow(sequence: row[2], entityType: row[3], entityID: row[4], version: row[5], data: row[6], updatedAt: row[7])
                )
            }
        }
    }

    package func liveEntities(scopes: [Scope], types: Set<String>?) async throws -> [StoredEntityRow] {
        guard !scopes.isEmpty else { return [] }
        let scopeList = JSONValue.strings(scopes.map(\.key))
        let typeList = types.map { JSONValue.strings($0.sorted()) }
        return try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT \(Self.entityColumns) FROM entities e
                    WHERE e.scope IN (SELECT value FROM json_each(?)) AND e.data IS NOT NULL
                      AND (? IS NULL OR e.entity_type IN (SELECT value FROM json_each(?)))
                    ORDER BY e.scope, e.entity_type, e.entity_id
                    """,
                arguments: [scopeList, typeList, typeList ?? "[]"]
            ).map(Self.entityRow)
        }
    }
}
