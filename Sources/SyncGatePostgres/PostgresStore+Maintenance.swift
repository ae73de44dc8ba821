public import Logging
import PostgresNIO
public import SyncGateCore
public import SyncGateStorage

extension PostgresStore {
    /// Session advisory lock held by the one process running periodic maintenance.
    static let maintenanceLockKey: Int64 = 0x5347_4D41_494E  // "SGMAIN"
    /// Rows deleted per statement, so maintenance never holds long locks on hot tables.
    static let batchSize = 5000

    public func withMaintenanceLock<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result) async throws -> Result? {
        try await withDeadline("maintenance lock", .maintenance) { [self] in
            // A session lock on a connection held for the whole pass; the work uses other connections.
            try await client.withConnection { connection in
                let locked = try await connection.query("SELECT pg_try_advisory_lock(\(Self.maintenanceLockKey))", logger: logger).collect(Bool.self)
                guard locked.first == true else { return nil }
                do {
                    let result = try await body()
                    _ = try await connection.query("SELECT pg_advisory_unlock(\(Self.maintenanceLockKey))", logger: logger)
                    return result
                } catch {
                    _ = try? await connection.query("SELECT pg_advisory_unlock(\(Self.maintenanceLockKey))", logger: logger)
                    throw error
                }
            }
        }
    }

    /// Repeats a batched DELETE until it deletes nothing; returns the total.
    func deleteInBatches(_ query: @Sendable () -> PostgresQuery) async throws -> Int {
        var total = 0
        while true {
            let deleted = try await client.query(query(), logger: logger).collect(Int.self).first ?? 0
            total += deleted
            if deleted < Self.batchSize { return total }
        }
    }

    public func deleteFinishedJobs(olderThanMilliseconds age: Int64) async throws -> Int {
        try await withDeadline("delete finished jobs", .maintenance) { [self] in
            try await deleteInBatches {
                """
                WITH gone AS (
                    DELETE FROM jobs WHERE id IN (
                        SELECT id FROM jobs WHERE state IN ('done', 'dead') AND finished_at < now() - \(age) * interval '1 millisecond'
                        LIMIT \(Self.batchSize)
                    ) RETURNING 1
                ) SELECT count(*)::int FROM gone
                """
            }
        }
    }

    public func pruneIdempotencyRecords(olderThanMilliseconds age: Int64) async throws -> Int {
        try await withDeadline("prune idempotency records", .maintenance) { [self] in
            try await deleteInBatches {
                """
                WITH gone AS (
                    DELETE FROM applied_operations WHERE (user_id, idempotency_key) IN (
                        SELECT user_id, idempotency_key FROM applied_operations
                        WHERE applied_at < now() - \(age) * interval '1 millisecond' LIMIT \(Self.batchSize)
                    ) RETURNING 1
                ) SELECT count(*)::int FROM gone
                """
            }
        }
    }

    /// Deletes every change that a later change of the same entity in the same feed supersedes.
    /// Readers lose nothing: whoever has not read the old row will read the newer one.
    public func compactFeeds() async throws -> CompactionReport {
        try await withDeadline("compact feeds", .maintenance) { [self] in
            let deleted = try await deleteInBatches {
                """
                WITH gone AS (
                    DELETE FROM changes WHERE (scope, seq) IN (
                        SELECT c.scope, c.seq FROM changes c
                        WHERE EXISTS (
                            SELECT 1 FROM changes later
                            WHERE later.scope = c.scope AND later.entity_type = c.entity_type
                              AND later.entity_id = c.entity_id AND later.seq > c.seq
                        )
                        LIMIT \(Self.batchSize)
                    ) RETURNING 1
                ) SELECT count(*)::int FROM gone
                """
            }
            return CompactionReport(deletedChanges: deleted)
        }
    }

    /// Purges tombstones older than `age` from feeds and entities and raises each affected feed's
    /// floor to the newest purged sequence number: cursors behind it get `CURSOR_INVALID`.
    public func purgeTombstones(olderThanMilliseconds age: Int64) async throws -> PurgeReport {
        try await withDeadline("purge tombstones", .maintenance) { [self] in
            let cutoff = Timestamp.now().millisecondsSinceEpoch - age
            let scopes = try await client.query(
                "SELECT DISTINCT scope FROM changes WHERE data IS NULL AND updated_at < \(cutoff)"
            ).collect(String.self)
            var report = PurgeReport()
            for scope in scopes {
                let purged = try await transaction { transaction -> Int in
                    // The feed lock orders the purge with writers of this feed.
                    _ = try await transaction.query("SELECT head FROM feeds WHERE scope = \(scope) FOR UPDATE").collect(Int64.self)
                    let rows = try await transaction.query(
                        """
                        DELETE FROM changes WHERE scope = \(scope) AND data IS NULL AND updated_at < \(cutoff)
                        RETURNING seq, entity_type, entity_id, version
                        """
                    ).collect((Int64, String, String, Int64).self)
                    guard let newest = rows.map(\.0).max() else { return 0 }
                    // Older changes of a purged entity must go too, or a new reader would see it alive.
                    try await transaction.query(
                        """
                        DELETE FROM changes c USING unnest(\(rows.map(\.1))::text[], \(rows.map(\.2))::text[], \(rows.map(\.0))::bigint[]) AS p(t, i, q)
                        WHERE c.scope = \(scope) AND c.entity_type = p.t AND c.entity_id = p.i AND c.seq < p.q
                        """
                    )
                    try await transaction.query(
                        "UPDATE feeds SET floor = greatest(floor, \(newest)) WHERE scope = \(scope)"
                    )
                    try await transaction.query(
                        """
                        DELETE FROM entities e USING unnest(\(rows.map(\.1))::text[], \(rows.map(\.2))::text[], \(rows.map(\.3))::bigint[]) AS p(t, i, v)
                        WHERE e.scope = \(scope) AND e.entity_type = p.t AND e.entity_id = p.i AND e.version = p.v AND e.data IS NULL
                        """
                    )
                    return rows.count
                }
                if purged > 0 {
                    report.purgedTombstones += purged
                    report.raisedFloors += 1
                }
            }
            return report
        }
    }

    public func forceResync(userID: String?) async throws {
        try await withDeadline("force resync", .maintenance) { [self] in
            try await transaction { transaction in
                if let userID {
                    try await transaction.query(
                        """
                        INSERT INTO users (user_id, resync_epoch) VALUES (\(userID), 1)
                        ON CONFLICT (user_id) DO UPDATE SET resync_epoch = users.resync_epoch + 1
                        """
                    )
                    try await self.notify([NotificationPayload.feedAdvanced(.user(userID))], on: transaction)
                } else {
                    try await transaction.query("UPDATE settings SET value = value + 1 WHERE key = 'resync_epoch'")
                    try await self.notify([NotificationPayload.resynchronize], on: transaction)
                }
            }
        }
    }

    /// Rebuilds daily summaries from the stored food logs, writing feed entries only for days
    /// whose totals differ from the stored summary.
    public func recomputeSummaries(userID: String?, from: CalendarDate?, to: CalendarDate?, collections: Collections, now: Timestamp) async throws -> SummaryReport {
        try await withDeadline("recompute summaries", .maintenance) { [self] in
            let users: [String]
            if let userID {
                users = [userID]
            } else {
                users = try await client.query(
                    """
                    SELECT DISTINCT substr(scope, 3) FROM entities
                    WHERE scope LIKE 'u:%' AND entity_type IN (\(DailySummaries.sourceType), \(DailySummaries.summaryType))
                    ORDER BY 1
                    """
                ).collect(String.self)
            }
            let lower = from?.iso8601 ?? "0000-01-01"
            let upper = to?.iso8601 ?? "9999-12-31"
            var report = SummaryReport()
            for user in users {
                let scope = Scope.user(user)
                let written = try await transaction { transaction -> (Int, Int) in
                    var heads = try await self.lockFeeds([scope], on: transaction)
                    let rows = try await transaction.query(
                        """
                        SELECT \(unescaped: Self.entityColumns) FROM entities
                        WHERE scope = \(scope.key) AND (
                            (entity_type = \(DailySummaries.sourceType) AND data IS NOT NULL
                             AND data ->> 'loggedDate' BETWEEN \(lower) AND \(upper))
                            OR (entity_type = \(DailySummaries.summaryType) AND entity_id BETWEEN \(lower) AND \(upper))
                        )
                        """
                    ).collect(EntityRow.self)
                    let (days, writes) = DailySummaries.rebuild(
                        stored: rows.lazy.compactMap(Self.entityState), userID: user,
                        items: collections[DailySummaries.sourceType]?.items ?? .init(), now: now
                    )
                    try await self.writeEntities(writes, heads: &heads, on: transaction)
                    if !writes.isEmpty { try await self.notify([NotificationPayload.feedAdvanced(scope)], on: transaction) }
                    return (days, writes.count)
                }
                report.daysChecked += written.0
                report.summariesWritten += written.1
            }
            return report
        }
    }

    public func stats() async throws -> StoreStats {
        try await withDeadline("stats", .request) { [self] in
            var stats = StoreStats()
            for (state, count) in try await self.client.query("SELECT state, count(*)::int FROM jobs GROUP BY state").collect((String, Int).self) {
                if let state = JobState(rawValue: state) { stats.jobsByState[state] = count }
            }
            let counts = try await self.client.query(
                """
                SELECT (SELECT count(*)::int FROM entities), (SELECT count(*)::int FROM changes), (SELECT count(*)::int FROM feeds),
                       (SELECT count(*)::int FROM applied_operations), (SELECT count(*)::int FROM households),
                       (SELECT (extract(epoch FROM now() - min(created_at)) * 1000)::bigint FROM jobs WHERE state IN ('queued', 'retrying'))
                """
            ).collect((Int, Int, Int, Int, Int, Int64?).self)
            if let (entities, changes, feeds, records, households, oldest) = counts.first {
                stats.entities = entities
                stats.changes = changes
                stats.feeds = feeds
                stats.idempotencyRecords = records
                stats.households = households
                stats.oldestQueuedAgeMilliseconds = oldest
            }
            return stats
        }
    }

    public func listJobs(_ filter: JobFilter) async throws -> [JobSnapshot] {
        try await withDeadline("list jobs", .maintenance) { [self] in
            let rows = try await client.query(
                """
                SELECT \(unescaped: Self.jobColumns) FROM jobs
                WHERE (\(filter.state?.rawValue)::text IS NULL OR state = \(filter.state?.rawValue))
                  AND (\(filter.userID)::text IS NULL OR user_id = \(filter.userID))
                ORDER BY id DESC LIMIT \(filter.limit)
                """
            ).collect(JobRow.self)
            return rows.map(Self.snapshot)
        }
    }

    public func retryDeadJobs(ids: [Int64]?) async throws -> Int {
        try await withDeadline("retry dead jobs", .maintenance) { [self] in
            try await transaction { transaction in
                let count = try await transaction.query(
                    """
                    WITH retried AS (
                        UPDATE jobs SET state = 'queued', attempts = 0, run_at = now(), results = NULL, finished_at = NULL,
                            last_error = 'retried by an operator after: ' || coalesce(last_error, ''), updated_at = now()
                        WHERE state = 'dead' AND (\(ids == nil) OR id = ANY(\(ids ?? [])::bigint[]))
                        RETURNING 1
                    ) SELECT count(*)::int FROM retried
                    """
                ).collect(Int.self).first ?? 0
                if count > 0 { try await self.notify([NotificationPayload.jobsAvailable], on: transaction) }
                return count
            }
        }
    }

    public func households(userID: String?) async throws -> [HouseholdState] {
        try await withDeadline("list households", .maintenance) { [self] in
            let rows = try await client.query(
                """
                SELECT h.household_id, h.owner_id, h.archived, m.user_id, m.role
                FROM households h LEFT JOIN household_members m ON m.household_id = h.household_id
                WHERE \(userID)::text IS NULL OR h.household_id IN (SELECT household_id FROM household_members WHERE user_id = \(userID))
                ORDER BY h.household_id
                """
            ).collect((String, String, Bool, String?, String?).self)
            var households: [String: HouseholdState] = [:]
            for (id, owner, archived, member, role) in rows {
                var household = households[id] ?? HouseholdState(id: id, ownerID: owner, archived: archived)
                if let member, let role = role.flatMap(HouseholdState.Role.init(rawValue:)) { household.members[member] = role }
                households[id] = household
            }
            return households.keys.sorted().compactMap { households[$0] }
        }
    }
}
