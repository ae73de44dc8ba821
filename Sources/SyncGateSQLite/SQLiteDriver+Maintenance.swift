#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GRDB
import SyncGateConcurrency
import Synchronization
package import SyncGateCore
package import SyncGateWire
package import SyncGateStorage

extension SQLiteDriver {
    /// One pass at a time per database file, across processes (`serve` and `syncgate admin
    /// maintain`): an exclusive `flock` on `<database>-maintenance`, which the kernel releases if
    /// the process dies. SQLite has no advisory lock of its own to stand in for PostgreSQL's.
    package func withMaintenanceLock<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result) async throws -> Result? {
        let acquired = maintenanceRunning.withLock { running in
            defer { running = true }
            return !running
        }
        guard acquired else { return nil }
        defer { maintenanceRunning.withLock { $0 = false } }
        let descriptor = open(path + "-maintenance", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw StoreUnavailableError("cannot open \(path)-maintenance: \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            if errno == EWOULDBLOCK { return nil }
            throw StoreUnavailableError("cannot lock \(path)-maintenance: \(String(cString: strerror(errno)))")
        }
        return try await body()
    }

    /// One bounded DELETE in its own transaction; returns how many rows went.
    func deleteBatch(_ sql: String, _ arguments: StatementArguments) async throws -> Int {
        try await write { db in
            try db.execute(sql: sql, arguments: arguments)
            return db.changesCount
        }
    }

    package func deleteFinishedJobs(before cutoff: Timestamp, limit: Int) async throws -> Int {
        try await deleteBatch(
            "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state IN ('done', 'dead') AND finished_at < ? AND device_id <> ? LIMIT ?)",
            [cutoff.millisecondsSinceEpoch, SyncStore.eraseDevice, limit]
        )
    }

    package func deleteIdempotencyRecords(before cutoff: Timestamp, limit: Int) async throws -> Int {
        try await deleteBatch(
            """
            DELETE FROM applied_operations WHERE (user_id, idempotency_key) IN (
                SELECT user_id, idempotency_key FROM applied_operations WHERE applied_at < ? LIMIT ?
            )
            """,
            [cutoff.millisecondsSinceEpoch, limit]
        )
    }

    package func compactNewChanges(after: String?, feedLimit: Int, changeLimit: Int) async throws -> CompactionBatch {
        // One write transaction (SQLite's one writer: no apply runs meanwhile). The newest change
        // of each entity among a feed's new ones deletes that entity's older changes, found by
        // the entity index: the work follows the new changes, not the table.
        try await write { db in
            // While a webhook subscription exists, only changes every subscription has received.
            let webhooks = try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM webhook_subscriptions)") ?? false
            let bound = webhooks ? "min(head, \(Self.webhookReceivedBound))" : "head"
            let candidates = try Row.fetchAll(
                db,
                sql: """
                    SELECT scope, compacted, \(bound), min(\(bound), compacted + ?) FROM feeds
                    WHERE head > compacted AND \(bound) > compacted AND scope > ? ORDER BY scope LIMIT ?
                    """,
                arguments: [Int64(changeLimit), after ?? "", feedLimit]
            )
            // The feeds whose new changes fit `changeLimit` together, the first one in any case.
            var feeds: [Row] = []
            var size: Int64 = 0
            for feed in candidates {
                let (compacted, upto): (Int64, Int64) = (feed[1], feed[3])
                size += upto - compacted
                guard feeds.isEmpty || size <= Int64(changeLimit) else { break }
                feeds.append(feed)
            }
            var deleted = 0
            var cutShort = false
            for feed in feeds {
                let (scope, compacted, head, upto): (String, Int64, Int64, Int64) = (feed[0], feed[1], feed[2], feed[3])
                cutShort = cutShort || upto < head
                try db.execute(
                    sql: """
                        DELETE FROM changes WHERE (scope, seq) IN (
                            SELECT c.scope, c.seq FROM (
                                SELECT entity_type, entity_id, max(seq) AS seq FROM changes
                                WHERE scope = ? AND seq > ? AND seq <= ? GROUP BY entity_type, entity_id
                            ) l JOIN changes c
                              ON c.scope = ? AND c.entity_type = l.entity_type AND c.entity_id = l.entity_id AND c.seq < l.seq
                        )
                        """,
                    arguments: [scope, compacted, upto, scope]
                )
                deleted += db.changesCount
                try db.execute(sql: "UPDATE feeds SET compacted = ? WHERE scope = ?", arguments: [upto, scope])
            }
            return CompactionBatch(deletedChanges: deleted, feeds: feeds.count, lastScope: feeds.last.map { $0[0] }, cutShort: cutShort)
        }
    }

    package func scopesWithTombstones(before cutoff: Timestamp) async throws -> [Scope] {
        try await read { db in
            try String.fetchAll(
                db,
                sql: """
                    SELECT t.scope FROM (
                        SELECT scope, min(seq) AS oldest FROM changes WHERE data IS NULL AND updated_at < ? GROUP BY scope
                    ) t
                    WHERE NOT EXISTS (SELECT 1 FROM webhook_subscriptions)
                       OR t.oldest <= (SELECT \(Self.webhookReceivedBound) FROM feeds WHERE feeds.scope = t.scope)
                    ORDER BY 1
                    """,
                arguments: [cutoff.millisecondsSinceEpoch]
            ).compactMap(Scope.init(key:))
        }
    }

    package func scopesHoldingEntities(ofTypes types: [String]) async throws -> [Scope] {
        try await read { db in
            try String.fetchAll(
                db, sql: "SELECT DISTINCT scope FROM entities WHERE entity_type IN (SELECT value FROM json_each(?)) ORDER BY 1",
                arguments: [JSONValue.strings(types)]
            ).compactMap(Scope.init(key:))
        }
    }

    package func queueStats(now: Timestamp?) async throws -> StoreStats {
        let now = (now ?? .now()).millisecondsSinceEpoch
        return try await read { db in
            var stats = StoreStats()
            stats.jobsByState = try Self.jobsByState(db, where: "state IN \(Self.unfinished)")
            stats.oldestQueuedAgeMilliseconds = try Int64.fetchOne(
                db, sql: "SELECT ? - min(created_at) FROM jobs WHERE state IN ('queued', 'retrying')", arguments: [now]
            )
            return stats
        }
    }

    /// Jobs counted by state, of those `condition` (constant SQL) selects.
    private static func jobsByState(_ db: Database, where condition: String) throws -> [JobState: Int] {
        var counts: [JobState: Int] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT state, count(*) AS n FROM jobs WHERE \(condition) GROUP BY state") {
            if let state = JobState(rawValue: row["state"]) { counts[state] = row["n"] }
        }
        return counts
    }

    package func stats(now: Timestamp?) async throws -> StoreStats {
        let now = (now ?? .now()).millisecondsSinceEpoch
        return try await read { db in
            var stats = StoreStats()
            stats.jobsByState = try Self.jobsByState(db, where: "true")
            if let row = try Row.fetchOne(
                db,
                sql: """
                    SELECT (SELECT count(*) FROM entities) AS entities, (SELECT count(*) FROM changes) AS changes,
                           (SELECT count(*) FROM feeds) AS feeds, (SELECT count(*) FROM applied_operations) AS records,
                           (SELECT count(*) FROM households) AS households,
                           (SELECT ? - min(created_at) FROM jobs WHERE state IN ('queued', 'retrying')) AS oldest
                    """,
                arguments: [now]
            ) {
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

    package func listJobs(_ filter: JobFilter) async throws -> [JobRecord] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT \(Self.jobColumns) FROM jobs WHERE (? IS NULL OR state = ?) AND (? IS NULL OR user_id = ?) AND (? IS NULL OR id < ?)
                    ORDER BY id DESC LIMIT ?
                    """,
                arguments: [filter.state?.rawValue, filter.state?.rawValue, filter.userID, filter.userID, filter.belowID, filter.belowID, filter.limit]
            ).map(Self.jobRecord)
        }
    }

    package func jobDetail(id: Int64) async throws -> JobDetail? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT \(Self.jobDetailColumns) FROM jobs WHERE id = ?", arguments: [id]).map(Self.jobDetail)
        }
    }

    package func deleteFinishedJob(id: Int64) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM jobs WHERE id = ? AND state IN ('done', 'dead')", arguments: [id])
            return db.changesCount > 0
        }
    }

    /// One embedded database: no standbys.
    package func replicas() async throws -> [(name: String, state: String, replayLagMilliseconds: Int64?)] { [] }

    package func liveDevicesPerFront(now: Timestamp) async throws -> [(front: String, devices: Int)] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT f.front, count(p.user_id) AS devices FROM push_fronts f LEFT JOIN push_presence p ON p.front = f.front
                    WHERE f.expires_at > ? GROUP BY f.front ORDER BY f.front
                    """,
                arguments: [now.millisecondsSinceEpoch]
            ).map { (front: $0["front"], devices: $0["devices"]) }
        }
    }

    package func feedDetails(_ scopes: [Scope]) async throws -> [(scope: String, head: Int64, floor: Int64, compacted: Int64, tombstones: Int)] {
        let keys = JSONValue.array(scopes.map { .string($0.key) }).serialized()
        return try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT f.scope, f.head, f.floor, f.compacted, (SELECT count(*) FROM changes c WHERE c.scope = f.scope AND c.data IS NULL) AS tombstones
                    FROM feeds f WHERE f.scope IN (SELECT value FROM json_each(?)) ORDER BY f.scope
                    """,
                arguments: [keys]
            ).map { (scope: $0["scope"], head: $0["head"], floor: $0["floor"], compacted: $0["compacted"], tombstones: $0["tombstones"]) }
        }
    }

    package func recordMaintenanceRun(finishedAt: Timestamp, milliseconds: Int64, report: String, keep: Int) async throws {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO maintenance_runs (finished_at, milliseconds, report) VALUES (?, ?, ?)",
                arguments: [finishedAt.millisecondsSinceEpoch, milliseconds, report]
            )
            try db.execute(sql: "DELETE FROM maintenance_runs WHERE id <= ? - ?", arguments: [db.lastInsertedRowID, keep])
        }
    }

    package func maintenanceRuns(limit: Int) async throws -> [(finishedAt: Timestamp, milliseconds: Int64, report: String)] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT finished_at, milliseconds, report FROM maintenance_runs ORDER BY id DESC LIMIT ?", arguments: [limit]).map {
                (finishedAt: Timestamp(millisecondsSinceEpoch: $0["finished_at"]), milliseconds: $0["milliseconds"], report: $0["report"])
            }
        }
    }

    package func finishedPerMinute(since: Timestamp) async throws -> [(minute: Int64, done: Int, dead: Int)] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT (finished_at / 60000) * 60000 AS minute, sum(state = 'done') AS done, sum(state = 'dead') AS dead
                    FROM jobs WHERE state IN ('done', 'dead') AND finished_at >= ? GROUP BY 1 ORDER BY 1
                    """,
                arguments: [since.millisecondsSinceEpoch]
            ).map { (minute: $0["minute"], done: $0["done"], dead: $0["dead"]) }
        }
    }

    package func devices(userID: String, now: Timestamp) async throws -> [DeviceRecord] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    WITH ids AS (SELECT device_id FROM devices WHERE user_id = ?1 UNION SELECT device_id FROM push_registrations WHERE user_id = ?1)
                    SELECT i.device_id, d.last_finished_job_id AS watermark, d.updated_at AS job_at, r.provider, r.updated_at AS push_updated,
                           r.last_sent_at, r.last_error,
                           EXISTS (SELECT 1 FROM push_presence p JOIN push_fronts f ON f.front = p.front AND f.expires_at > ?2
                                   WHERE p.user_id = ?1 AND p.device_id = i.device_id) AS live
                    FROM ids i
                    LEFT JOIN devices d ON d.user_id = ?1 AND d.device_id = i.device_id
                    LEFT JOIN push_registrations r ON r.user_id = ?1 AND r.device_id = i.device_id
                    ORDER BY i.device_id
                    """,
                arguments: [userID, now.millisecondsSinceEpoch]
            ).map { row in
                var record = DeviceRecord(deviceID: row["device_id"])
                record.watermark = row["watermark"]
                record.lastJobAt = (row["job_at"] as Int64?).map(Timestamp.init(millisecondsSinceEpoch:))
                record.pushProvider = row["provider"]
                record.pushUpdatedAt = (row["push_updated"] as Int64?).map(Timestamp.init(millisecondsSinceEpoch:))
                record.pushLastSentAt = (row["last_sent_at"] as Int64?).map(Timestamp.init(millisecondsSinceEpoch:))
                record.pushLastError = row["last_error"]
                record.live = row["live"]
                return record
            }
        }
    }

    package func householdRows(userID: String?, after: String?, limit: Int?) async throws -> [HouseholdRow] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT h.household_id, h.owner_id, h.archived, m.user_id, m.role
                    FROM (
                        SELECT household_id, owner_id, archived FROM households
                        WHERE (? IS NULL OR household_id > ?)
                          AND (? IS NULL OR household_id IN (SELECT household_id FROM household_members WHERE user_id = ?))
                        ORDER BY household_id LIMIT ?
                    ) h LEFT JOIN household_members m ON m.household_id = h.household_id
                    ORDER BY h.household_id
                    """,
                arguments: [after, after, userID, userID, limit ?? -1]
            ).map(Self.householdRow)
        }
    }
}
