import GRDB
import Synchronization
public import SyncGateCore
public import SyncGateStorage

extension SQLiteStore {
    /// Rows deleted per statement, so a maintenance pass never holds the writer for long.
    static let batchSize = 5000

    public func withMaintenanceLock<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result) async throws -> Result? {
        let acquired = maintenanceRunning.withLock { running in
            defer { running = true }
            return !running
        }
        guard acquired else { return nil }
        defer { maintenanceRunning.withLock { $0 = false } }
        return try await body()
    }

    /// Repeats a batched DELETE until it deletes fewer than a batch; returns the total.
    func deleteInBatches(_ sql: String, _ arguments: @escaping @Sendable () -> StatementArguments) async throws -> Int {
        var total = 0
        while true {
            let deleted = try await write { statements in
                try statements.execute(sql, arguments())
                return (statements.db.changesCount, [])
            }
            total += deleted
            if deleted < Self.batchSize { return total }
        }
    }

    public func deleteFinishedJobs(olderThanMilliseconds age: Int64) async throws -> Int {
        try await deleteInBatches(
            "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state IN ('done', 'dead') AND finished_at < ? LIMIT \(Self.batchSize))"
        ) { [Self.now - age] }
    }

    public func pruneIdempotencyRecords(olderThanMilliseconds age: Int64) async throws -> Int {
        try await deleteInBatches(
            """
            DELETE FROM applied_operations WHERE (user_id, idempotency_key) IN (
                SELECT user_id, idempotency_key FROM applied_operations WHERE applied_at < ? LIMIT \(Self.batchSize)
            )
            """
        ) { [Self.now - age] }
    }

    public func compactFeeds() async throws -> CompactionReport {
        let deleted = try await deleteInBatches(
            """
            DELETE FROM changes WHERE (scope, seq) IN (
                SELECT c.scope, c.seq FROM changes c
                WHERE EXISTS (
                    SELECT 1 FROM changes later
                    WHERE later.scope = c.scope AND later.entity_type = c.entity_type AND later.entity_id = c.entity_id AND later.seq > c.seq
                )
                LIMIT \(Self.batchSize)
            )
            """
        ) { [] }
        return CompactionReport(deletedChanges: deleted)
    }

    /// As on PostgreSQL: drop old tombstones and everything older of their entities, delete the
    /// entity rows, and raise each feed's floor to the newest purged sequence number.
    public func purgeTombstones(olderThanMilliseconds age: Int64) async throws -> PurgeReport {
        let cutoff = Self.now - age
        return try await write { statements in
            let purged = try statements.rows(
                "SELECT scope, seq, entity_type, entity_id, version FROM changes WHERE data IS NULL AND updated_at < ?", [cutoff]
            )
            var floors: [String: Int64] = [:]
            for row in purged {
                let scope: String = row["scope"]
                let seq: Int64 = row["seq"]
                try statements.execute(
                    "DELETE FROM changes WHERE scope = ? AND entity_type = ? AND entity_id = ? AND seq <= ?",
                    [scope, row["entity_type"] as String, row["entity_id"] as String, seq]
                )
                try statements.execute(
                    "DELETE FROM entities WHERE scope = ? AND entity_type = ? AND entity_id = ? AND version = ? AND data IS NULL",
                    [scope, row["entity_type"] as String, row["entity_id"] as String, row["version"] as Int64]
                )
                floors[scope] = max(floors[scope] ?? 0, seq)
            }
            for (scope, floor) in floors {
                try statements.execute("UPDATE feeds SET floor = max(floor, ?) WHERE scope = ?", [floor, scope])
            }
            return (PurgeReport(purgedTombstones: purged.count, raisedFloors: floors.count), [])
        }
    }

    public func forceResync(userID: String?) async throws {
        try await write { statements in
            if let userID {
                try statements.execute(
                    "INSERT INTO users (user_id, resync_epoch) VALUES (?, 1) ON CONFLICT (user_id) DO UPDATE SET resync_epoch = users.resync_epoch + 1",
                    [userID]
                )
                return ((), [.feedAdvanced(.user(userID))])
            }
            try statements.execute("UPDATE settings SET value = value + 1 WHERE key = 'resync_epoch'")
            return ((), [.resynchronize])
        }
    }

    public func recomputeSummaries(userID: String?, from: CalendarDate?, to: CalendarDate?, collections: Collections, now: Timestamp) async throws -> SummaryReport {
        let users: [String]
        if let userID {
            users = [userID]
        } else {
            users = try await read { statements in
                try statements.rows(
                    "SELECT DISTINCT substr(scope, 3) AS user FROM entities WHERE scope LIKE 'u:%' AND entity_type IN (?, ?) ORDER BY 1",
                    [DailySummaries.sourceType, DailySummaries.summaryType]
                ).map { $0["user"] }
            }
        }
        let lower = from?.iso8601 ?? "0000-01-01"
        let upper = to?.iso8601 ?? "9999-12-31"
        let items = collections[DailySummaries.sourceType]?.items ?? .init()
        var report = SummaryReport()
        for user in users {
            let scope = Scope.user(user)
            let (days, written) = try await write { statements -> ((Int, Int), [StoreEvent]) in
                var heads = try Self.feedHeads([scope], statements: statements)
                let rows = try statements.rows(
                    """
                    SELECT \(Self.entityColumns) FROM entities e
                    WHERE e.scope = ? AND (
                        (e.entity_type = ? AND e.data IS NOT NULL AND json_extract(e.data, '$.loggedDate') BETWEEN ? AND ?)
                        OR (e.entity_type = ? AND e.entity_id BETWEEN ? AND ?)
                    )
                    """,
                    [scope.key, DailySummaries.sourceType, lower, upper, DailySummaries.summaryType, lower, upper]
                )
                let (days, writes) = DailySummaries.rebuild(stored: rows.lazy.compactMap(Self.entityState), userID: user, items: items, now: now)
                try Self.writeEntities(writes, heads: &heads, statements: statements)
                return ((days, writes.count), writes.isEmpty ? [] : [.feedAdvanced(scope)])
            }
            report.daysChecked += days
            report.summariesWritten += written
        }
        return report
    }

    public func stats() async throws -> StoreStats {
        try await read { statements in
            var stats = StoreStats()
            for row in try statements.rows("SELECT state, count(*) AS n FROM jobs GROUP BY state") {
                if let state = JobState(rawValue: row["state"]) { stats.jobsByState[state] = row["n"] }
            }
            let counts = try statements.rows(
                """
                SELECT (SELECT count(*) FROM entities) AS entities, (SELECT count(*) FROM changes) AS changes,
                       (SELECT count(*) FROM feeds) AS feeds, (SELECT count(*) FROM applied_operations) AS records,
                       (SELECT count(*) FROM households) AS households,
                       (SELECT ? - min(created_at) FROM jobs WHERE state IN ('queued', 'retrying')) AS oldest
                """,
                [Self.now]
            )
            if let row = counts.first {
                stats.entities = row["entities"]
                stats.changes = row["changes"]
                stats.feeds = row["feeds"]
                stats.idempotencyRecords = row["records"]
                stats.households = row["households"]
                stats.oldestQueuedAgeMilliseconds = row["oldest"]
            }
            return stats
        }
    }

    public func listJobs(_ filter: JobFilter) async throws -> [JobSnapshot] {
        try await read { statements in
            try statements.rows(
                """
                SELECT \(Self.jobColumns) FROM jobs
                WHERE (? IS NULL OR state = ?) AND (? IS NULL OR user_id = ?)
                ORDER BY id DESC LIMIT ?
                """,
                [filter.state?.rawValue, filter.state?.rawValue, filter.userID, filter.userID, filter.limit]
            ).map(Self.snapshot)
        }
    }

    public func retryDeadJobs(ids: [Int64]?) async throws -> Int {
        try await write { statements in
            let list = JSONValue.array((ids ?? []).map(JSONValue.int)).serialized()
            try statements.execute(
                """
                UPDATE jobs SET state = 'queued', attempts = 0, run_at = ?, results = NULL, finished_at = NULL,
                    last_error = 'retried by an operator after: ' || coalesce(last_error, ''), updated_at = ?
                WHERE state = 'dead' AND (? OR id IN (SELECT value FROM json_each(?)))
                """,
                [Self.now, Self.now, ids == nil, list]
            )
            let count = statements.db.changesCount
            return (count, count > 0 ? [.jobsAvailable] : [])
        }
    }

    public func households(userID: String?) async throws -> [HouseholdState] {
        try await read { statements in
            let rows = try statements.rows(
                """
                SELECT h.household_id, h.owner_id, h.archived, m.user_id, m.role
                FROM households h LEFT JOIN household_members m ON m.household_id = h.household_id
                WHERE ? IS NULL OR h.household_id IN (SELECT household_id FROM household_members WHERE user_id = ?)
                """,
                [userID, userID]
            )
            let households = Self.households(from: rows)
            return households.keys.sorted().compactMap { households[$0] }
        }
    }
}
