import PostgresNIO
package import SyncGateCore
import SyncGateWire
package import SyncGateStorage

extension PostgresDriver {
    package static let entityColumns = "e.scope, e.entity_type, e.entity_id, e.version, e.data::text, e.meta::text, e.client_ts, e.updated_at"
    package typealias EntityColumns = (String, String, String, Int64, String?, String?, Int64, Int64)

    package static func entityRow(_ columns: EntityColumns) -> StoredEntityRow {
        let (scope, type, id, version, data, meta, clientTimestamp, updatedAt) = columns
        return StoredEntityRow(scope: scope, entityType: type, entityID: id, version: version, data: data, meta: meta, clientTimestamp: clientTimestamp, updatedAt: updatedAt)
    }

    typealias HouseholdColumns = (String, String, Bool, String?, String?)

    static func householdRow(_ columns: HouseholdColumns) -> HouseholdRow {
        let (id, owner, archived, member, role) = columns
        return HouseholdRow(householdID: id, ownerID: owner, archived: archived, memberID: member, role: role)
    }

    package func pullContext(userID: String, deviceID: String, extraScopes: [Scope]) async throws -> PullContext {
        if try await isCitus() { return try await citusPullContext(userID: userID, deviceID: deviceID, extraScopes: extraScopes) }
        let logger = self.logger
        return try await withConnection("pull", .request) { connection in
            // One statement, one snapshot.
            let rows = try await connection.rows(
                PullContextStatement(userID: userID, deviceID: deviceID, extraScopes: extraScopes.map(\.key)), logger: logger
            )
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

    package func readChanges(_ reads: [PullPlan.FeedRead], types: Set<String>?, limit: Int) async throws -> FeedPage {
        if try await isCitus() { return try await citusReadChanges(reads, types: types, limit: limit) }
        // One statement: the rows and the floors they are checked against share its snapshot.
        let rows = try await run("pull", .request, ReadChangesStatement(reads: reads, types: types?.sorted(), limit: limit))
        var page = FeedPage()
        let byRead = Self.feedRows(rows, reads: reads.count)
        for (read, feed) in zip(reads, byRead) {
            if let floor = feed.floor { page.floors[read.scope] = floor }
        }
        // The statement's bound, fed by the same rule: each feed at most one row more than the
        // page still has room for, and no feed after the page filled.
        var remaining = limit
        for (read, feed) in zip(reads, byRead) where remaining > 0 {
            let rows = feed.changes.prefix(remaining + 1)
            page.rows[read.scope] = Array(rows)
            remaining -= min(rows.count, remaining)
        }
        return page
    }

    package func readFeeds(_ requests: [FeedReadRequest]) async throws -> [FeedRows] {
        if try await isCitus() {
            // One read per request, through the pull's Citus path.
            var read: [FeedRows] = []
            for request in requests {
                let feed = PullPlan.FeedRead(scope: request.scope, after: request.after, resumes: true)
                let page = try await citusReadChanges([feed], types: request.types, limit: request.limit)
                read.append(FeedRows(rows: page.rows[request.scope] ?? [], floor: page.floors[request.scope] ?? 0))
            }
            return read
        }
        var read = Array(repeating: FeedRows(rows: [], floor: 0), count: requests.count)
        // One statement per set of types asked for (nearly always one: all types).
        let groups = Dictionary(grouping: requests.indices, by: { requests[$0].types })
        for (types, indices) in groups {
            let rows = try await run("read feeds", .request, ReadFeedsStatement(requests: indices.map { requests[$0] }, types: types?.sorted()))
            for (index, feed) in zip(indices, Self.feedRows(rows, reads: indices.count)) {
                read[index] = FeedRows(rows: feed.changes, floor: feed.floor ?? 0)
            }
        }
        return read
    }

    /// The rows of a statement that reads feeds (``ReadChangesStatement``, ``ReadFeedsStatement``)
    /// by the ordinal of their read: its feed's floor (`nil`: the feed has no row yet) and its
    /// changes in sequence order.
    static func feedRows(_ rows: [ReadChangesStatement.Row], reads count: Int) -> [(floor: Int64?, changes: [ChangeRow])] {
        var byRead = Array(repeating: (floor: Int64?.none, changes: [ChangeRow]()), count: count)
        for (part, ordinal, sequence, type, id, version, data, number, origin) in rows {
            guard (1...Int64(count)).contains(ordinal) else { continue }
            let index = Int(ordinal) - 1
            if part == 0 {
                byRead[index].floor = number ?? 0
            } else if let sequence, let type, let id, let version, let updatedAt = number {
                byRead[index].changes.append(ChangeRow(
                    sequence: sequence, entityType: type, entityID: id, version: version, data: data, updatedAt: updatedAt, origin: origin
                ))
            }
        }
        for index in byRead.indices { byRead[index].changes.sort { $0.sequence < $1.sequence } }
        return byRead
    }

    package func watchState(feeds: [Scope], users: [String]) async throws -> WatchState {
        if try await isCitus() { return try await citusWatchState(feeds: feeds, users: users) }
        // One statement: the heads, the versions and the epoch share a snapshot.
        let rows = try await run("watch state", .request, WatchStateStatement(feeds: feeds.map(\.key), users: users))
        var state = WatchState()
        for (kind, key, value) in rows {
            switch kind {
            case "feed": if let scope = Scope(key: key) { state.heads[scope] = value }
            case "user": state.scopesVersions[ExactKey(key)] = value
            default: state.resyncEpoch = value
            }
        }
        return state
    }

    package func activeHouseholds(userID: String) async throws -> [String] {
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
