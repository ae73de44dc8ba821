public import Logging
import PostgresNIO
public import SyncGateCore
public import SyncGateStorage

extension PostgresStore {
    /// Reads a page in one REPEATABLE READ snapshot, so feed heads and rows agree.
    public func pull(_ query: PullQuery) async throws -> PullPage {
        try await withDeadline("pull", .request) { [self] in
            try await self.transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") { transaction in
                let scopeRows = try await transaction.query(
                    """
                    SELECT
                        coalesce((SELECT array_agg(m.household_id ORDER BY m.household_id)
                                  FROM household_members m JOIN households h ON h.household_id = m.household_id
                                  WHERE m.user_id = \(query.userID) AND NOT h.archived), '{}'),
                        coalesce((SELECT resync_epoch FROM users WHERE user_id = \(query.userID)), 0)
                            + (SELECT value FROM settings WHERE key = 'resync_epoch'),
                        coalesce((SELECT last_finished_job_id FROM devices
                                  WHERE user_id = \(query.userID) AND device_id = \(query.deviceID)), 0)
                    """
                ).collect(([String], Int64, Int64).self)
                guard let (households, epoch, watermark) = scopeRows.first else { throw StoreUnavailableError("pull read no settings") }

                var scopes = Set([Scope.user(query.userID)] + households.map(Scope.household))
                if let cursor = query.cursor { scopes.formUnion(cursor.positions.keys) }
                let feeds = try await self.feedInfo(Array(scopes), on: transaction)
                let plan = try PullPlanner.plan(query, households: households, resyncEpoch: epoch, feeds: feeds)

                var pages: [Scope: [FeedChange]] = [:]
                var remaining = query.limit
                for read in plan.reads where remaining > 0 {
                    let rows = try await self.readChanges(read, types: query.entityTypes, limit: remaining + 1, on: transaction)
                    pages[read.scope] = rows
                    remaining -= min(rows.count, remaining)
                }
                return plan.assemble(pages: pages, deviceWatermark: watermark)
            }
        }
    }

    func feedInfo(_ scopes: [Scope], on transaction: Transaction) async throws -> [Scope: FeedInfo] {
        let rows = try await transaction.query(
            "SELECT scope, head, floor FROM feeds WHERE scope = ANY(\(scopes.map(\.key))::text[])"
        ).collect((String, Int64, Int64).self)
        var feeds: [Scope: FeedInfo] = [:]
        for (key, head, floor) in rows {
            if let scope = Scope(key: key) { feeds[scope] = FeedInfo(head: head, floor: floor) }
        }
        return feeds
    }

    func readChanges(_ read: PullPlan.FeedRead, types: Set<String>?, limit: Int, on transaction: Transaction) async throws -> [FeedChange] {
        let query: PostgresQuery
        if let types {
            query = """
                SELECT seq, entity_type, entity_id, version, data::text, updated_at FROM changes
                WHERE scope = \(read.scope.key) AND seq > \(read.after) AND entity_type = ANY(\(types.sorted())::text[])
                ORDER BY seq LIMIT \(limit)
                """
        } else {
            query = """
                SELECT seq, entity_type, entity_id, version, data::text, updated_at FROM changes
                WHERE scope = \(read.scope.key) AND seq > \(read.after)
                ORDER BY seq LIMIT \(limit)
                """
        }
        return try await transaction.query(query).collect((Int64, String, String, Int64, String?, Int64).self).map { row in
            let (sequence, type, id, version, data, updatedAt) = row
            return FeedChange(
                scope: read.scope,
                sequence: sequence,
                entityType: type,
                entityID: id,
                version: version,
                data: data.flatMap { try? JSONParser.stored.parse($0).objectValue },
                updatedAt: Timestamp(millisecondsSinceEpoch: updatedAt)
            )
        }
    }

    public func readableScopes(userID: String) async throws -> [Scope] {
        try await withDeadline("readable scopes", .request) { [self] in
            let households = try await self.client.query(
                """
                SELECT m.household_id FROM household_members m JOIN households h ON h.household_id = m.household_id
                WHERE m.user_id = \(userID) AND NOT h.archived ORDER BY m.household_id
                """
            ).collect(String.self)
            return [.user(userID)] + households.map(Scope.household)
        }
    }
}
