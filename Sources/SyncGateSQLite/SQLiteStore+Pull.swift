import GRDB
public import SyncGateCore
import SyncGateStorage

extension SQLiteStore {
    /// Reads a page in one WAL snapshot, so feed heads and rows agree.
    public func pull(_ query: PullQuery) async throws -> PullPage {
        try await read { statements in
            let households = try Self.activeHouseholds(of: query.userID, statements: statements)
            let epoch: Int64 = try statements.value(
                """
                SELECT coalesce((SELECT resync_epoch FROM users WHERE user_id = ?), 0) + (SELECT value FROM settings WHERE key = 'resync_epoch')
                """,
                [query.userID]
            ) ?? 0
            let watermark: Int64 = try statements.value(
                "SELECT last_finished_job_id FROM devices WHERE user_id = ? AND device_id = ?", [query.userID, query.deviceID]
            ) ?? 0

            var scopes = Set([Scope.user(query.userID)] + households.map(Scope.household))
            if let cursor = query.cursor { scopes.formUnion(cursor.positions.keys) }
            var feeds: [Scope: FeedInfo] = [:]
            for row in try statements.rows(
                "SELECT scope, head, floor FROM feeds WHERE scope IN (SELECT value FROM json_each(?))",
                [JSONValue.array(scopes.map { .string($0.key) }).serialized()]
            ) {
                if let scope = Scope(key: row["scope"]) { feeds[scope] = FeedInfo(head: row["head"], floor: row["floor"]) }
            }
            let plan = try PullPlanner.plan(query, households: households, resyncEpoch: epoch, feeds: feeds)

            var pages: [Scope: [FeedChange]] = [:]
            var remaining = query.limit
            for read in plan.reads where remaining > 0 {
                let rows = try Self.readChanges(read, types: query.entityTypes, limit: remaining + 1, statements: statements)
                pages[read.scope] = rows
                remaining -= min(rows.count, remaining)
            }
            return plan.assemble(pages: pages, deviceWatermark: watermark)
        }
    }

    static func activeHouseholds(of user: String, statements: Statements) throws -> [String] {
        try statements.rows(
            """
            SELECT m.household_id FROM household_members m JOIN households h ON h.household_id = m.household_id
            WHERE m.user_id = ? AND h.archived = 0 ORDER BY m.household_id
            """,
            [user]
        ).map { $0["household_id"] }
    }

    static func readChanges(_ read: PullPlan.FeedRead, types: Set<String>?, limit: Int, statements: Statements) throws -> [FeedChange] {
        let rows: [Row]
        if let types {
            rows = try statements.rows(
                """
                SELECT seq, entity_type, entity_id, version, data, updated_at FROM changes
                WHERE scope = ? AND seq > ? AND entity_type IN (SELECT value FROM json_each(?)) ORDER BY seq LIMIT ?
                """,
                [read.scope.key, read.after, JSONValue.array(types.sorted().map(JSONValue.string)).serialized(), limit]
            )
        } else {
            rows = try statements.rows(
                "SELECT seq, entity_type, entity_id, version, data, updated_at FROM changes WHERE scope = ? AND seq > ? ORDER BY seq LIMIT ?",
                [read.scope.key, read.after, limit]
            )
        }
        return rows.map { row in
            let data: String? = row["data"]
            return FeedChange(
                scope: read.scope,
                sequence: row["seq"],
                entityType: row["entity_type"],
                entityID: row["entity_id"],
                version: row["version"],
                data: data.flatMap { try? JSONParser.stored.parse($0).objectValue },
                updatedAt: Timestamp(millisecondsSinceEpoch: row["updated_at"])
            )
        }
    }

    public func readableScopes(userID: String) async throws -> [Scope] {
        try await read { statements in
            [.user(userID)] + (try Self.activeHouseholds(of: userID, statements: statements)).map(Scope.household)
        }
    }
}
