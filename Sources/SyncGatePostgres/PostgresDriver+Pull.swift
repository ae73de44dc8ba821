import PostgresNIO
public import SyncGateCore
public import SyncGateStorage

extension PostgresDriver {
    static let entityColumns = "e.scope, e.entity_type, e.entity_id, e.version, e.data::text, e.meta::text, e.client_ts, e.updated_at"
    typealias EntityColumns = (String, String, String, Int64, String?, String?, Int64, Int64)

    static func entityRow(_ columns: EntityColumns) -> StoredEntityRow {
        let (scope, type, id, version, data, meta, clientTimestamp, updatedAt) = columns
        return StoredEntityRow(scope: scope, entityType: type, entityID: id, version: version, data: data, meta: meta, clientTimestamp: clientTimestamp, updatedAt: updatedAt)
    }

    typealias HouseholdColumns = (String, String, Bool, String?, String?)

    static func householdRow(_ columns: HouseholdColumns) -> HouseholdRow {
        let (id, owner, archived, member, role) = columns
        return HouseholdRow(householdID: id, ownerID: owner, archived: archived, memberID: member, role: role)
    }

    public func pullContext(userID: String, deviceID: String, extraScopes: [Scope]) async throws -> PullContext {
        let logger = self.logger
        return try await withConnection("pull", .request) { connection in
            // One statement, one snapshot.
            let rows = try await connection.query(
                """
                WITH households AS (
                    SELECT m.household_id FROM household_members m JOIN households h ON h.household_id = m.household_id
                    WHERE m.user_id = \(userID) AND NOT h.archived
                ), feed_list AS (
                    SELECT 'h:' || household_id AS scope FROM households
                    UNION SELECT 'u:' || \(userID) UNION SELECT unnest(\(extraScopes.map(\.key))::text[])
                )
                SELECT
                    coalesce((SELECT array_agg(household_id ORDER BY household_id) FROM households), '{}'),
                    coalesce((SELECT resync_epoch FROM users WHERE user_id = \(userID)), 0)
                        + (SELECT value FROM settings WHERE key = 'resync_epoch'),
                    coalesce((SELECT scopes_version FROM users WHERE user_id = \(userID)), 0),
                    coalesce((SELECT last_finished_job_id FROM devices WHERE user_id = \(userID) AND device_id = \(deviceID)), 0),
                    coalesce((SELECT array_agg(f.scope ORDER BY f.scope) FROM feeds f JOIN feed_list l ON l.scope = f.scope), '{}'),
                    coalesce((SELECT array_agg(f.head ORDER BY f.scope) FROM feeds f JOIN feed_list l ON l.scope = f.scope), '{}'),
                    coalesce((SELECT array_agg(f.floor ORDER BY f.scope) FROM feeds f JOIN feed_list l ON l.scope = f.scope), '{}')
                """,
                logger: logger
            ).collect(([String], Int64, Int64, Int64, [String], [Int64], [Int64]).self)
            guard let (households, epoch, scopesVersion, watermark, scopes, heads, floors) = rows.first else {
                throw StoreUnavailableError("pull read no settings")
            }
            var feeds: [Scope: FeedInfo] = [:]
            for (index, key) in scopes.enumerated() {
                if let scope = Scope(key: key) { feeds[scope] = FeedInfo(head: heads[index], floor: floors[index]) }
            }
            return PullContext(households: households, resyncEpoch: epoch, scopesVersion: scopesVersion, deviceWatermark: watermark, feeds: feeds)
        }
    }

    public func readChanges(_ reads: [PullPlan.FeedRead], types: Set<String>?, limit: Int) async throws -> FeedPage {
        let logger = self.logger
        let typeList = types?.sorted()
        return try await withConnection("pull", .request) { connection in
            // One snapshot for the rows and the floors they are checked against.
            try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
            do {
                // A page is read in key order, never found by another index and sorted: for a feed
                // written since the last ANALYZE the planner estimates one row, and then preferred
                // the small commit-time index plus a sort — reading the whole feed for every page
                // (PullPlanTests). No read of this transaction needs a sort.
                try await connection.query("SET LOCAL enable_sort = off", logger: logger)
                var page = FeedPage()
                var remaining = limit
                for read in reads where remaining > 0 {
                    let rows = try await connection.query(
                        """
                        SELECT seq, entity_type, entity_id, version, data::text, updated_at FROM changes
                        WHERE scope = \(read.scope.key) AND seq > \(read.after)
                          AND (\(typeList)::text[] IS NULL OR entity_type = ANY(\(typeList)::text[]))
                        ORDER BY seq LIMIT \(remaining + 1)
                        """,
                        logger: logger
                    ).collect((Int64, String, String, Int64, String?, Int64).self).map { row in
                        let (sequence, type, id, version, data, updatedAt) = row
                        return ChangeRow(sequence: sequence, entityType: type, entityID: id, version: version, data: data, updatedAt: updatedAt)
                    }
                    page.rows[read.scope] = rows
                    remaining -= min(rows.count, remaining)
                }
                for (key, floor) in try await connection.query(
                    "SELECT scope, floor FROM feeds WHERE scope = ANY(\(reads.map(\.scope.key))::text[])", logger: logger
                ).collect((String, Int64).self) {
                    if let scope = Scope(key: key) { page.floors[scope] = floor }
                }
                try await connection.query("COMMIT", logger: logger)
                return page
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: logger)
                throw error
            }
        }
    }

    public func watchState(feeds: [Scope], users: [String]) async throws -> WatchState {
        // One statement: the heads, the versions and the epoch share a snapshot.
        let rows = try await query(
            "watch state", .request,
            """
            SELECT 'feed', scope, head FROM feeds WHERE scope = ANY(\(feeds.map(\.key))::text[])
            UNION ALL
            SELECT 'user', user_id, scopes_version FROM users WHERE user_id = ANY(\(users)::text[])
            UNION ALL
            SELECT 'epoch', '', value FROM settings WHERE key = 'resync_epoch'
            """,
            as: (String, String, Int64).self
        )
        var state = WatchState()
        for (kind, key, value) in rows {
            switch kind {
            case "feed": if let scope = Scope(key: key) { state.heads[scope] = value }
            case "user": state.scopesVersions[key] = value
            default: state.resyncEpoch = value
            }
        }
        return state
    }

    public func activeHouseholds(userID: String) async throws -> [String] {
        try await query(
            "readable scopes", .request,
            """
            SELECT m.household_id FROM household_members m JOIN households h ON h.household_id = m.household_id
            WHERE m.user_id = \(userID) AND NOT h.archived ORDER BY m.household_id
            """,
            as: String.self
        )
    }
}
