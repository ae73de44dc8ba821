import Foundation
import PostgresNIO
package import SyncGateCore
package import SyncGateWire
package import SyncGateStorage

extension PostgresDriver {
    /// Session advisory lock held by the one process running periodic maintenance.
    static let maintenanceLockKey: Int64 = 0x5347_4D41_494E  // "SGMAIN"

    package func withMaintenanceLock<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result) async throws -> Result? {
        let logger = self.logger
        return try await withConnection("maintenance lock", .maintenance) { connection in
            // A session lock on a connection held for the whole pass; the work uses other connections.
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

    /// A DELETE … RETURNING 1 wrapped to count its rows, planned by index
    /// (``indexDrivenQuery(_:_:as:)``).
    func deleteCounting(_ operation: String, _ query: PostgresQuery) async throws -> Int {
        try await indexDrivenQuery(operation, query, as: Int.self).first ?? 0
    }

    /// One maintenance statement, every row collected, planned as the hot paths are
    /// (``hotPathSettings``' planner costs, for its transaction only): index probes wherever an
    /// index serves. Maintenance finds a few rows (a minute's expired records, a feed's new
    /// changes) in tables that keep far more, and with PostgreSQL's defaults its statements read
    /// whole tables (sequential scans into hash joins) at 50,000 rows with statistics
    /// (QueryPlanTests); a compaction batch did so while it held its feeds locked.
    func indexDrivenQuery<each Column: PostgresDecodable>(
        _ operation: String, _ query: PostgresQuery, as columns: (repeat each Column).Type
    ) async throws -> [(repeat each Column)] where repeat each Column: Sendable {
        let logger = self.logger
        return try await withConnection(operation, .maintenance) { connection in
            try await connection.inTransaction(logger: logger) {
                try await connection.query(Self.indexDrivenForThisTransaction, logger: logger)
                return try await connection.query(query, logger: logger).collect(columns)
            }
        }
    }

    /// ``hotPathSettings``' planner costs, for the rest of the transaction (`plan_cache_mode`
    /// aside: these statements are planned once).
    static let indexDrivenForThisTransaction = PostgresQuery(
        unsafeSQL: "SELECT " + hotPathSettings.filter { $0.0 != "plan_cache_mode" }.map { "set_config('\($0.0)', '\($0.1)', true)" }.joined(separator: ", ")
    )

    package func deleteFinishedJobs(before cutoff: Timestamp, limit: Int) async throws -> Int {
        try await deleteCounting(
            "delete finished jobs",
            """
            WITH gone AS (
                DELETE FROM jobs WHERE id IN (
                    SELECT id FROM jobs WHERE state IN ('done', 'dead') AND finished_at < timestamptz 'epoch' + \(cutoff.millisecondsSinceEpoch)::bigint * interval '1 millisecond'
                      AND device_id <> \(SyncStore.eraseDevice) LIMIT \(limit)
                )
                -- Checked again on the row as it is when locked: a dead job an operator queued
                -- again meanwhile is kept (the subquery read it before the retry committed).
                AND state IN ('done', 'dead')
                RETURNING 1
            ) SELECT count(*)::int FROM gone
            """
        )
    }

    package func deleteIdempotencyRecords(before cutoff: Timestamp, limit: Int) async throws -> Int {
        try await deleteCounting(
            "prune idempotency records",
            """
            WITH gone AS (
                DELETE FROM applied_operations WHERE (user_id, idempotency_key) IN (
                    SELECT user_id, idempotency_key FROM applied_operations WHERE applied_at < timestamptz 'epoch' + \(cutoff.millisecondsSinceEpoch)::bigint * interval '1 millisecond' LIMIT \(limit)
                ) RETURNING 1
            ) SELECT count(*)::int FROM gone
            """
        )
    }

    package func compactNewChanges(after: String?, feedLimit: Int, changeLimit: Int) async throws -> CompactionBatch {
        if try await isCitus() { return try await citusCompactNewChanges(after: after, feedLimit: feedLimit, changeLimit: changeLimit) }
        // One statement, planned by index: a batch costs what it compacts (with PostgreSQL's
        // defaults its plan read the whole `changes` table twice), so a small one holds its
        // feeds' writers briefly (README, Retention).
        let rows = try await indexDrivenQuery(
            "compact feeds", Self.compaction(after: after, feedLimit: feedLimit, changeLimit: changeLimit), as: (Int, Int, String?, Bool).self
        )
        guard let (deleted, feeds, last, cutShort) = rows.first else { return CompactionBatch(deletedChanges: 0, feeds: 0) }
        return CompactionBatch(deletedChanges: deleted, feeds: feeds, lastScope: last, cutShort: cutShort)
    }

    /// The feeds taken are those whose new changes fit `changeLimit` together, counted in scope
    /// order from the first (always taken). Feeds an apply holds are skipped (their turn comes
    /// next pass), so compaction never waits for a writer and a writer waits for it at most one
    /// batch. The newest change of each entity among the feed's new ones deletes that entity's
    /// older changes. While a webhook subscription exists, only changes every subscription has
    /// received are compacted (``PostgresDriver/webhookReceivedBound``), the bound as read in the
    /// statement's snapshot carried to the locked rows. Every scope key sorts after '' (none is empty).
    static func compaction(after: String?, feedLimit: Int, changeLimit: Int) -> PostgresQuery {
        """
        WITH webhooks AS (
            SELECT EXISTS (SELECT 1 FROM webhook_subscriptions) AS enabled
        ), candidates AS (
            SELECT scope, bound, size, sum(size) OVER (ORDER BY scope) AS running
            FROM (
                SELECT scope, bound, least(bound - compacted, \(Int64(changeLimit))) AS size
                FROM (
                    SELECT scope, compacted,
                           CASE WHEN webhooks.enabled THEN least(head, \(unescaped: PostgresDriver.webhookReceivedBound)) ELSE head END AS bound
                    FROM feeds, webhooks WHERE head > compacted AND scope > \(after ?? "")
                ) open WHERE bound > compacted ORDER BY scope LIMIT \(feedLimit)
            ) next
        ), taken AS (
            SELECT scope, bound FROM candidates WHERE running <= \(Int64(changeLimit)) OR running = size
        ), f AS (
            -- Another pass may have compacted the row since the snapshot: never below it.
            SELECT feeds.scope, feeds.compacted, taken.bound AS head,
                   greatest(feeds.compacted, least(taken.bound, feeds.compacted + \(Int64(changeLimit)))) AS upto
            FROM feeds JOIN taken ON taken.scope = feeds.scope
            FOR UPDATE OF feeds SKIP LOCKED
        ), latest AS (
            SELECT c.scope, c.entity_type, c.entity_id, max(c.seq) AS seq
            FROM f JOIN changes c ON c.scope = f.scope AND c.seq > f.compacted AND c.seq <= f.upto
            GROUP BY c.scope, c.entity_type, c.entity_id
        ), gone AS (
            DELETE FROM changes c USING latest l
            WHERE c.scope = l.scope AND c.entity_type = l.entity_type AND c.entity_id = l.entity_id AND c.seq < l.seq
            RETURNING 1
        ), marked AS (
            UPDATE feeds SET compacted = f.upto FROM f WHERE feeds.scope = f.scope RETURNING 1
        )
        SELECT (SELECT count(*)::int FROM gone), (SELECT count(*)::int FROM marked), (SELECT max(scope) FROM taken),
               (SELECT coalesce(bool_or(upto < head), false) FROM f)
        """
    }

    package func scopesWithTombstones(before cutoff: Timestamp) async throws -> [Scope] {
        // Citus cannot join its distributed changes and feeds with the coordinator's webhook
        // tables (as compaction and the purge itself avoid): every feed with an old tombstone.
        if try await isCitus() {
            return try await query(
                "purge tombstones", .maintenance,
                "SELECT DISTINCT scope FROM changes WHERE data IS NULL AND updated_at < \(cutoff.millisecondsSinceEpoch) ORDER BY 1",
                as: String.self
            ).compactMap(Scope.init(key:))
        }
        return try await query(
            "purge tombstones", .maintenance,
            """
            SELECT t.scope FROM (
                SELECT scope, min(seq) AS oldest FROM changes WHERE data IS NULL AND updated_at < \(cutoff.millisecondsSinceEpoch) GROUP BY scope
            ) t
            WHERE NOT EXISTS (SELECT 1 FROM webhook_subscriptions)
               OR t.oldest <= (SELECT \(unescaped: Self.webhookReceivedBound) FROM feeds WHERE feeds.scope = t.scope)
            ORDER BY 1
            """,
            as: String.self
        ).compactMap(Scope.init(key:))
    }

    package func scopesHoldingEntities(ofTypes types: [String]) async throws -> [Scope] {
        try await query(
            "derived data", .maintenance,
            "SELECT DISTINCT scope FROM entities WHERE entity_type = ANY(\(types)::text[]) ORDER BY 1",
            as: String.self
        ).compactMap(Scope.init(key:))
    }

    package func stats(now: Timestamp?) async throws -> StoreStats {
        let logger = self.logger
        return try await withConnection("stats", .maintenance) { connection in
            var stats = StoreStats()
            for (state, count) in try await connection.query("SELECT state, count(*)::int FROM jobs GROUP BY state", logger: logger).collect((String, Int).self) {
                if let state = JobState(rawValue: state) { stats.jobsByState[state] = count }
            }
            let counts = try await connection.query(
                """
                SELECT (SELECT count(*)::int FROM entities), (SELECT count(*)::int FROM changes), (SELECT count(*)::int FROM feeds),
                       (SELECT count(*)::int FROM applied_operations), (SELECT count(*)::int FROM households),
                       (SELECT (extract(epoch FROM coalesce(timestamptz 'epoch' + \(now.milliseconds)::bigint * interval '1 millisecond', now()) - min(created_at)) * 1000)::bigint
                        FROM jobs WHERE state IN ('queued', 'retrying'))
                """,
                logger: logger
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

    package func queueStats(now: Timestamp?) async throws -> StoreStats {
        // Both read the partial indexes of unfinished jobs, however many finished jobs are kept.
        let rows = try await query(
            "queue stats", .maintenance,
            """
            SELECT state, count(*)::int,
                   (SELECT (extract(epoch FROM coalesce(timestamptz 'epoch' + \(now.milliseconds)::bigint * interval '1 millisecond', now()) - min(created_at)) * 1000)::bigint
                    FROM jobs WHERE state IN ('queued', 'retrying'))
            FROM jobs WHERE state IN \(unescaped: Self.unfinishedStates) GROUP BY state
            """,
            as: (String, Int, Int64?).self
        )
        var stats = StoreStats()
        for (state, count, oldest) in rows {
            if let state = JobState(rawValue: state) { stats.jobsByState[state] = count }
            stats.oldestQueuedAgeMilliseconds = oldest
        }
        return stats
    }

    package func listJobs(_ filter: JobFilter) async throws -> [JobRecord] {
        try await query(
            "list jobs", .maintenance,
            """
            SELECT \(unescaped: Self.jobColumns) FROM jobs
            WHERE (\(filter.state?.rawValue)::text IS NULL OR state = \(filter.state?.rawValue))
              AND (\(filter.userID)::text IS NULL OR user_id = \(filter.userID))
              AND (\(filter.belowID)::bigint IS NULL OR id < \(filter.belowID))
            ORDER BY id DESC LIMIT \(filter.limit)
            """,
            as: JobColumns.self
        ).map(Self.jobRecord)
    }

    package func jobDetail(id: Int64) async throws -> JobDetail? {
        try await query(
            "show job", .maintenance, "SELECT \(unescaped: Self.jobDetailColumns) FROM jobs WHERE id = \(id)", as: JobDetailColumns.self
        ).first.map(Self.jobDetail)
    }

    package func deleteFinishedJob(id: Int64) async throws -> Bool {
        try await !query(
            "delete job", .maintenance, "DELETE FROM jobs WHERE id = \(id) AND state IN ('done', 'dead') RETURNING id", as: Int64.self
        ).isEmpty
    }

    package func replicas() async throws -> [(name: String, state: String, replayLagMilliseconds: Int64?)] {
        try await query(
            "replicas", .maintenance,
            "SELECT coalesce(application_name, ''), coalesce(state, ''), (extract(epoch FROM replay_lag) * 1000)::bigint FROM pg_stat_replication ORDER BY 1",
            as: (String, String, Int64?).self
        ).map { (name: $0.0, state: $0.1, replayLagMilliseconds: $0.2) }
    }

    package func liveDevicesPerFront(now: Timestamp) async throws -> [(front: String, devices: Int)] {
        try await query(
            "live devices per front", .maintenance,
            """
            SELECT f.front, count(p.user_id)::int FROM push_fronts f LEFT JOIN push_presence p ON p.front = f.front
            WHERE f.expires_at > \(now.millisecondsSinceEpoch) GROUP BY f.front ORDER BY f.front
            """,
            as: (String, Int).self
        ).map { (front: $0.0, devices: $0.1) }
    }

    package func feedDetails(_ scopes: [Scope]) async throws -> [(scope: String, head: Int64, floor: Int64, compacted: Int64, tombstones: Int)] {
        try await query(
            "feed details", .maintenance,
            """
            SELECT f.scope, f.head, f.floor, f.compacted, count(c.seq)::int FROM feeds f
            LEFT JOIN changes c ON c.scope = f.scope AND c.data IS NULL
            WHERE f.scope = ANY(\(scopes.map(\.key))::text[]) GROUP BY f.scope, f.head, f.floor, f.compacted ORDER BY f.scope
            """,
            as: (String, Int64, Int64, Int64, Int).self
        ).map { (scope: $0.0, head: $0.1, floor: $0.2, compacted: $0.3, tombstones: $0.4) }
    }

    package func recordMaintenanceRun(finishedAt: Timestamp, milliseconds: Int64, report: String, keep: Int) async throws {
        try await execute(
            "record maintenance run", .maintenance,
            """
            WITH made AS (
                INSERT INTO maintenance_runs (finished_at, milliseconds, report) VALUES (\(finishedAt.millisecondsSinceEpoch), \(milliseconds), \(report))
                RETURNING id
            )
            DELETE FROM maintenance_runs WHERE id <= (SELECT id FROM made) - \(Int64(keep))
            """
        )
    }

    package func maintenanceRuns(limit: Int) async throws -> [(finishedAt: Timestamp, milliseconds: Int64, report: String)] {
        try await query(
            "maintenance runs", .maintenance,
            "SELECT finished_at, milliseconds, report FROM maintenance_runs ORDER BY id DESC LIMIT \(Int64(limit))",
            as: (Int64, Int64, String).self
        ).map { (finishedAt: Timestamp(millisecondsSinceEpoch: $0.0), milliseconds: $0.1, report: $0.2) }
    }

    package func finishedPerMinute(since: Timestamp) async throws -> [(minute: Int64, done: Int, dead: Int)] {
        try await query(
            "finished per minute", .maintenance,
            """
            SELECT (extract(epoch FROM date_trunc('minute', finished_at)) * 1000)::bigint AS minute,
                   (count(*) FILTER (WHERE state = 'done'))::int, (count(*) FILTER (WHERE state = 'dead'))::int
            FROM jobs WHERE state IN ('done', 'dead') AND finished_at >= timestamptz 'epoch' + \(since.millisecondsSinceEpoch)::bigint * interval '1 millisecond'
            GROUP BY 1 ORDER BY 1
            """,
            as: (Int64, Int, Int).self
        ).map { (minute: $0.0, done: $0.1, dead: $0.2) }
    }

    package func devices(userID: String, now: Timestamp) async throws -> [DeviceRecord] {
        try await query(
            "list devices", .maintenance,
            """
            WITH ids AS (
                SELECT device_id FROM devices WHERE user_id = \(userID) UNION SELECT device_id FROM push_registrations WHERE user_id = \(userID)
            )
            SELECT i.device_id, d.last_finished_job_id, d.updated_at, r.provider, r.updated_at, r.last_sent_at, r.last_error,
                   EXISTS (SELECT 1 FROM push_presence p JOIN push_fronts f ON f.front = p.front AND f.expires_at > \(now.millisecondsSinceEpoch)
                           WHERE p.user_id = \(userID) AND p.device_id = i.device_id)
            FROM ids i
            LEFT JOIN devices d ON d.user_id = \(userID) AND d.device_id = i.device_id
            LEFT JOIN push_registrations r ON r.user_id = \(userID) AND r.device_id = i.device_id
            ORDER BY i.device_id
            """,
            as: (String, Int64?, Date?, String?, Int64?, Int64?, String?, Bool).self
        ).map { device, watermark, jobAt, provider, pushUpdated, pushSent, pushError, live in
            var record = DeviceRecord(deviceID: device)
            record.watermark = watermark
            record.lastJobAt = jobAt.map(Timestamp.init)
            record.pushProvider = provider
            record.pushUpdatedAt = pushUpdated.map(Timestamp.init(millisecondsSinceEpoch:))
            record.pushLastSentAt = pushSent.map(Timestamp.init(millisecondsSinceEpoch:))
            record.pushLastError = pushError
            record.live = live
            return record
        }
    }

    package func householdRows(userID: String?, after: String?, limit: Int?) async throws -> [HouseholdRow] {
        try await query(
            "list households", .maintenance,
            """
            SELECT h.household_id, h.owner_id, h.archived, m.user_id, m.role
            FROM (
                SELECT household_id, owner_id, archived FROM households
                WHERE (\(after)::text IS NULL OR household_id > \(after))
                  AND (\(userID)::text IS NULL OR household_id IN (SELECT household_id FROM household_members WHERE user_id = \(userID)))
                ORDER BY household_id LIMIT \(limit)
            ) h LEFT JOIN household_members m ON m.household_id = h.household_id
            ORDER BY h.household_id
            """,
            as: HouseholdColumns.self
        ).map(Self.householdRow)
    }
}
