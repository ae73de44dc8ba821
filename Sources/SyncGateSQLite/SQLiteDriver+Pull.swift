package import GRDB
package import SyncGateCore
import SyncGateWire
package import SyncGateStorage

extension SQLiteDriver {
    /// The clock every commit time and claim time is read from, in milliseconds since the epoch:
    /// one SQL expression, so the horizon, the claims and the changes agree to the rounding.
    package static let clockMilliseconds = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"

    package static let entityColumns = "e.scope, e.entity_type, e.entity_id, e.version, e.data, e.meta, e.client_ts, e.updated_at"

    package static func entityRow(_ row: Row) -> StoredEntityRow {
        StoredEntityRow(
            scope: row[0], entityType: row[1], entityID: row[2], version: row[3], data: row[4], meta: row[5],
            clientTimestamp: row[6], updatedAt: row[7]
        )
    }

    static func householdRow(_ row: Row) -> HouseholdRow {
        HouseholdRow(householdID: row[0], ownerID: row[1], archived: row[2], memberID: row[3], role: row[4])
    }

    /// One SELECT of entities for several queries: every key in one probe, every group member in
    /// another, and a probe per range, joined by UNION ALL.
    struct EntitySelect {
        var sql: String
        var arguments: StatementArguments
        var branches: Int
        /// Without ranges its text is one of three constants: compiled once and kept. With them it
        /// varies with their number, and is compiled for the call.
        var constant: Bool

        /// The rows; none without a query.
        func rows(_ db: Database) throws -> [StoredEntityRow] {
            guard branches > 0 else { return [] }
            let rows = constant ? try Row.fetchAll(db, cached: sql, arguments: arguments) : try Row.fetchAll(db, sql: sql, arguments: arguments)
            return rows.map(SQLiteDriver.entityRow)
        }
    }

    static func entitySelect(_ queries: [EntityQuery]) -> EntitySelect {
        var keys: [[JSONValue]] = []
        var members: [[JSONValue]] = []
        var ranges: [String] = []
        var rangeArguments: [(any DatabaseValueConvertible)?] = []
        for query in queries {
            switch query {
            case .keys(let list):
                keys += list.map { [.string($0.scope.key), .string($0.entityType), .string($0.entityID)] }
            case .groupMembers(let scope, let type, let groups):
                members += groups.map { [.string(scope.key), .string(type), .string($0)] }
            case .groupRange(let scope, let type, let from, let through):
                ranges.append(
                    """
                    SELECT \(entityColumns) FROM entities e WHERE e.scope = ? AND e.entity_type = ? AND e.group_key IS NOT NULL
                      AND (? IS NULL OR e.group_key >= ?) AND (? IS NULL OR e.group_key <= ?) AND e.data IS NOT NULL
                    """
                )
                rangeArguments += [scope.key, type, from, from, through, through]
            case .idRange(let scope, let type, let from, let through):
                ranges.append(
                    "SELECT \(entityColumns) FROM entities e WHERE e.scope = ? AND e.entity_type = ? AND (? IS NULL OR e.entity_id >= ?) AND (? IS NULL OR e.entity_id <= ?)"
                )
                rangeArguments += [scope.key, type, from, from, through, through]
            }
        }
        var branches: [String] = []
        var arguments: [(any DatabaseValueConvertible)?] = []
        if !keys.isEmpty {
            // CROSS JOIN keeps the list as the outer loop, probing the primary key.
            branches.append(
                """
                SELECT \(entityColumns) FROM json_each(?) k CROSS JOIN entities e
                ON e.scope = json_extract(k.value, '$[0]') AND e.entity_type = json_extract(k.value, '$[1]') AND e.entity_id = json_extract(k.value, '$[2]')
                """
            )
            arguments.append(JSONValue.rows(keys))
        }
        if !members.isEmpty {
            // Each group probed in its index: without statistics the planner took the primary
            // key's (scope, entity_type) prefix, every entity of the type in the feed.
            branches.append(
                """
                SELECT \(entityColumns) FROM json_each(?) g CROSS JOIN entities e INDEXED BY entities_group
                ON e.scope = json_extract(g.value, '$[0]') AND e.entity_type = json_extract(g.value, '$[1]') AND e.group_key = json_extract(g.value, '$[2]')
                WHERE e.group_key IS NOT NULL AND e.data IS NOT NULL
                """
            )
            arguments.append(JSONValue.rows(members))
        }
        return EntitySelect(
            sql: (branches + ranges).joined(separator: " UNION ALL "), arguments: StatementArguments(arguments + rangeArguments),
            branches: branches.count + ranges.count, constant: ranges.isEmpty
        )
    }

    package func pullContext(userID: String, deviceID: String, extraScopes: [Scope]) async throws -> PullContext {
        try await read { db in
            let households = try Self.activeHouseholds(of: userID, db)
            let epoch = try Int64.fetchOne(
                db,
                cached: "SELECT coalesce((SELECT resync_epoch FROM users WHERE user_id = ?), 0) + (SELECT value FROM settings WHERE key = 'resync_epoch')",
                arguments: [userID]
            ) ?? 0
            let scopesVersion = try Int64.fetchOne(db, cached: "SELECT scopes_version FROM users WHERE user_id = ?", arguments: [userID]) ?? 0
            let watermark = try Int64.fetchOne(
                db, cached: "SELECT last_finished_job_id FROM devices WHERE user_id = ? AND device_id = ?", arguments: [userID, deviceID]
            ) ?? 0
            let scopes = Set([Scope.user(userID)] + households.map(Scope.household) + extraScopes)
            var feeds: [Scope: FeedInfo] = [:]
            for row in try Row.fetchAll(
                db, cached: "SELECT scope, head, floor FROM feeds WHERE scope IN (SELECT value FROM json_each(?))",
                arguments: [JSONValue.strings(scopes.map(\.key))]
            ) {
                if let scope = Scope(key: row["scope"]) { feeds[scope] = FeedInfo(head: row["head"], floor: row["floor"]) }
            }
            return PullContext(households: households, resyncEpoch: epoch, scopesVersion: scopesVersion, deviceWatermark: watermark, feeds: feeds)
        }
    }

    package func readChanges(_ reads: [PullPlan.FeedRead], types: Set<String>?, limit: Int) async throws -> FeedPage {
        return try await read { db in
            var page = FeedPage()
            var remaining = limit
            for read in reads where remaining > 0 {
                let rows = try Self.feedRows(db, scope: read.scope, after: read.after, through: read.through, types: types, limit: remaining + 1)
                page.rows[read.scope] = rows
                remaining -= min(rows.count, remaining)
            }
            for row in try Row.fetchAll(
                db, cached: "SELECT scope, floor FROM feeds WHERE scope IN (SELECT value FROM json_each(?))",
                arguments: [JSONValue.strings(reads.map(\.scope.key))]
            ) {
                if let scope = Scope(key: row["scope"]) { page.floors[scope] = row["floor"] }
            }
            return page
        }
    }

    package func readFeeds(_ requests: [FeedReadRequest]) async throws -> [FeedRows] {
        try await read { db in
            try requests.map { request in
                let rows = try Self.feedRows(db, scope: request.scope, after: request.after, types: request.types, limit: request.limit + 1)
                let floor = try Int64.fetchOne(db, cached: "SELECT floor FROM feeds WHERE scope = ?", arguments: [request.scope.key]) ?? 0
                return FeedRows(rows: rows, floor: floor)
            }
        }
    }

    /// Up to `limit` changes of `scope` after `after` and up to `through` (of `types` only, when
    /// given), in sequence order.
    private static func feedRows(_ db: Database, scope: Scope, after: Int64, through: Int64? = nil, types: Set<String>?, limit: Int) throws -> [ChangeRow] {
        let typeList = types.map { JSONValue.strings($0.sorted()) }
        return try Row.fetchAll(
            db,
            cached: """
                SELECT seq, entity_type, entity_id, version, data, updated_at, origin FROM changes
                WHERE scope = ? AND seq > ? AND seq <= ? AND (? IS NULL OR entity_type IN (SELECT value FROM json_each(?)))
                ORDER BY seq LIMIT ?
                """,
            arguments: [scope.key, after, through ?? .max, typeList, typeList ?? "[]", limit]
        ).map { row in
            ChangeRow(sequence: row[0], entityType: row[1], entityID: row[2], version: row[3], data: row[4], updatedAt: row[5], origin: row[6])
        }
    }

    package func watchState(feeds: [Scope], users: [String]) async throws -> WatchState {
        let feedList = JSONValue.strings(feeds.map(\.key))
        let userList = JSONValue.strings(users)
        return try await read { db in
            var state = WatchState()
            for row in try Row.fetchAll(db, cached: "SELECT scope, head FROM feeds WHERE scope IN (SELECT value FROM json_each(?))", arguments: [feedList]) {
                if let scope = Scope(key: row[0]) { state.heads[scope] = row[1] }
            }
            for row in try Row.fetchAll(db, cached: "SELECT user_id, scopes_version FROM users WHERE user_id IN (SELECT value FROM json_each(?))", arguments: [userList]) {
                state.scopesVersions[ExactKey(row[0])] = row[1]
            }
            state.resyncEpoch = try Int64.fetchOne(db, cached: "SELECT value FROM settings WHERE key = 'resync_epoch'")
            return state
        }
    }

    package func activeHouseholds(userID: String) async throws -> [String] {
        try await read { db in try Self.activeHouseholds(of: userID, db) }
    }

    static func activeHouseholds(of user: String, _ db: Database) throws -> [String] {
        try String.fetchAll(
            db,
            cached: """
                SELECT m.household_id FROM household_members m JOIN households h ON h.household_id = m.household_id
                WHERE m.user_id = ? AND h.archived = 0 ORDER BY m.household_id
                """,
            arguments: [user]
        )
    }
}
