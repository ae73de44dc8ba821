import PostgresNIO
import Synchronization
import SyncGateCore
import SyncGateStorage
import SyncGateWire

// On a Citus coordinator (docs/scaling.md#distributed-postgresql-citus, sql/citus/distribute.sql)
// the feed tables are distributed by scope, a few small ones are reference tables, and the queue
// and everything keyed by user stay plain tables of the coordinator. Citus refuses a statement
// that combines the coordinator's tables with distributed ones, a multi-shard SELECT … FOR
// UPDATE, and a LIMIT in a lateral subquery over a table function: the statements below do the
// same work split by where the tables live, in the same transaction, at the cost of more round
// trips. The statements of plain PostgreSQL stay as they are.

extension PostgresDriver {
    /// Whether the database has the Citus extension, looked up once per process (a deployment
    /// that adds it restarts its processes).
    package func isCitus() async throws -> Bool {
        if let known = citus.withLock({ $0 }) { return known }
        let found = try await query("detect citus", .request, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')", as: Bool.self)
            .first ?? false
        citus.withLock { $0 = found }
        return found
    }

    /// On Citus, lets PostgreSQL plan each statement with its parameters' values, once per
    /// connection: Citus plans a distributed statement only with them, and the hot path's sessions
    /// ask for generic plans (``hotPathSettings``).
    func citusSession(_ connection: PostgresConnection) async throws {
        guard citus.withLock({ $0 }) == true, !citusSessions.withLock({ $0.contains(connection.id) }) else { return }
        try await connection.query("SET plan_cache_mode = force_custom_plan", logger: logger)
        citusSessions.withLock { _ = $0.insert(connection.id) }
    }

    /// ``pullContext(userID:deviceID:extraScopes:)`` on Citus: one statement per kind of table.
    /// Citus gives no snapshot across nodes in any case; each feed's head and floor are read
    /// together, on its node.
    func citusPullContext(userID: String, deviceID: String, extraScopes: [Scope]) async throws -> PullContext {
        let logger = self.logger
        return try await withConnection("pull", .request) { connection in
            let households = try await connection.query(
                """
                SELECT m.household_id FROM household_members m JOIN households h ON h.household_id = m.household_id
                WHERE m.user_id = \(userID) AND NOT h.archived ORDER BY m.household_id
                """,
                logger: logger
            ).collect(String.self)
            let user = try await connection.query(
                """
                SELECT coalesce((SELECT resync_epoch FROM users WHERE user_id = \(userID)), 0),
                       coalesce((SELECT scopes_version FROM users WHERE user_id = \(userID)), 0),
                       coalesce((SELECT last_finished_job_id FROM devices WHERE user_id = \(userID) AND device_id = \(deviceID)), 0)
                """,
                logger: logger
            ).collect((Int64, Int64, Int64).self)
            let epoch = try await connection.query("SELECT value FROM settings WHERE key = 'resync_epoch'", logger: logger).collect(Int64.self)
            guard let (userEpoch, scopesVersion, watermark) = user.first, let globalEpoch = epoch.first else {
                throw StoreUnavailableError("pull read no settings")
            }
            let keys = Set([Scope.user(userID).key] + households.map { Scope.household($0).key } + extraScopes.map(\.key)).sorted()
            let rows = try await connection.query("SELECT scope, head, floor FROM feeds WHERE scope = ANY(\(keys)::text[])", logger: logger)
                .collect((String, Int64, Int64).self)
            var feeds: [Scope: FeedInfo] = [:]
            for (key, head, floor) in rows {
                if let scope = Scope(key: key) { feeds[scope] = FeedInfo(head: head, floor: floor) }
            }
            return PullContext(
                households: households, resyncEpoch: userEpoch + globalEpoch, scopesVersion: scopesVersion, deviceWatermark: watermark, feeds: feeds
            )
        }
    }

    /// ``readChanges(_:types:limit:)`` on Citus: each feed's floor and rows in one statement on
    /// its node (they share that node's snapshot), feed after feed until the page is full; the
    /// floors of the feeds after that in one more.
    func citusReadChanges(_ reads: [PullPlan.FeedRead], types: Set<String>?, limit: Int) async throws -> FeedPage {
        let logger = self.logger
        let types = types?.sorted()
        return try await withConnection("pull", .request) { connection in
            var page = FeedPage()
            var remaining = limit
            var unread: [Scope] = []
            for read in reads {
                guard remaining > 0 else {
                    unread.append(read.scope)
                    continue
                }
                let rows = try await connection.query(
                    """
                    SELECT 0, NULL::bigint, NULL::text, NULL::text, NULL::bigint, NULL::text, floor, NULL::text FROM feeds WHERE scope = \(read.scope.key)
                    UNION ALL
                    (SELECT 1, seq, entity_type, entity_id, version, data::text, updated_at, origin FROM changes
                     WHERE scope = \(read.scope.key) AND seq > \(read.after) AND seq <= \(read.through ?? .max) AND (\(types)::text[] IS NULL OR entity_type = ANY(\(types)::text[]))
                     ORDER BY seq LIMIT \(Int64(remaining) + 1))
                    """,
                    logger: logger
                ).collect((Int, Int64?, String?, String?, Int64?, String?, Int64?, String?).self)
                var changes: [ChangeRow] = []
                for (part, sequence, type, id, version, data, number, origin) in rows {
                    if part == 0 {
                        page.floors[read.scope] = number ?? 0
                    } else if let sequence, let type, let id, let version, let updatedAt = number {
                        changes.append(ChangeRow(sequence: sequence, entityType: type, entityID: id, version: version, data: data, updatedAt: updatedAt, origin: origin))
                    }
                }
                changes.sort { $0.sequence < $1.sequence }
                page.rows[read.scope] = changes
                remaining -= min(changes.count, remaining)
            }
            if !unread.isEmpty {
                let floors = try await connection.query("SELECT scope, floor FROM feeds WHERE scope = ANY(\(unread.map(\.key))::text[])", logger: logger)
                    .collect((String, Int64).self)
                for (key, floor) in floors {
                    if let scope = Scope(key: key) { page.floors[scope] = floor }
                }
            }
            return page
        }
    }

    /// ``watchState(feeds:users:)`` on Citus: one statement per kind of table.
    func citusWatchState(feeds: [Scope], users: [String]) async throws -> WatchState {
        let logger = self.logger
        return try await withConnection("watch state", .request) { connection in
            var state = WatchState()
            for (key, head) in try await connection.query("SELECT scope, head FROM feeds WHERE scope = ANY(\(feeds.map(\.key))::text[])", logger: logger)
                .collect((String, Int64).self)
            {
                if let scope = Scope(key: key) { state.heads[scope] = head }
            }
            for (user, version) in try await connection.query(
                "SELECT user_id, scopes_version FROM users WHERE user_id = ANY(\(users)::text[])", logger: logger
            ).collect((String, Int64).self) {
                state.scopesVersions[ExactKey(user)] = version
            }
            state.resyncEpoch = try await connection.query("SELECT value FROM settings WHERE key = 'resync_epoch'", logger: logger)
                .collect(Int64.self).first ?? 0
            return state
        }
    }
}

extension PostgresDriver {
    /// ``compactNewChanges(after:feedLimit:changeLimit:)`` on Citus: the feeds with new changes
    /// (and, while a webhook subscription exists, how far every subscription has received them)
    /// read first, then each feed taken compacted by one statement on its node, skipped while an
    /// apply holds it — the rules of PostgreSQL's statement (``compaction(after:feedLimit:changeLimit:)``).
    func citusCompactNewChanges(after: String?, feedLimit: Int, changeLimit: Int) async throws -> CompactionBatch {
        let logger = self.logger
        return try await withConnection("compact feeds", .maintenance) { connection in
            let webhooks = try await connection.query("SELECT EXISTS (SELECT 1 FROM webhook_subscriptions)", logger: logger).collect(Bool.self).first ?? false
            // The next feeds whose bound is past their compaction mark, in scope order.
            var candidates: [(scope: String, compacted: Int64, bound: Int64)] = []
            var from = after ?? ""
            while candidates.count < feedLimit {
                let page = try await connection.query(
                    "SELECT scope, head, compacted, webhooked FROM feeds WHERE head > compacted AND scope > \(from) ORDER BY scope LIMIT \(Int64(feedLimit))",
                    logger: logger
                ).collect((String, Int64, Int64, Int64).self)
                var pending: [String: Int64] = [:]
                if webhooks, !page.isEmpty {
                    for (scope, first) in try await connection.query(
                        """
                        SELECT scope, min(first_seq) - 1 FROM webhook_deliveries
                        WHERE delivered_at IS NULL AND scope = ANY(\(page.map(\.0))::text[]) GROUP BY scope
                        """,
                        logger: logger
                    ).collect((String, Int64).self) {
                        pending[scope] = first
                    }
                }
                for (scope, head, compacted, webhooked) in page where candidates.count < feedLimit {
                    let bound = webhooks ? min(head, min(webhooked, pending[scope] ?? webhooked)) : head
                    if bound > compacted { candidates.append((scope, compacted, bound)) }
                }
                guard page.count == feedLimit, let last = page.last?.0 else { break }
                from = last
            }
            // Taken while their new changes fit the limit together; the first always.
            var taken: [(scope: String, bound: Int64)] = []
            var running: Int64 = 0
            for candidate in candidates {
                let size = min(candidate.bound - candidate.compacted, Int64(changeLimit))
                running += size
                guard running <= Int64(changeLimit) || taken.isEmpty else { break }
                taken.append((candidate.scope, candidate.bound))
            }
            var batch = CompactionBatch(deletedChanges: 0, feeds: 0, lastScope: taken.last?.scope)
            for (scope, bound) in taken {
                let rows = try await connection.query(
                    """
                    WITH f AS (
                        SELECT scope, compacted, \(bound)::bigint AS head,
                               greatest(compacted, least(\(bound)::bigint, compacted + \(Int64(changeLimit)))) AS upto
                        FROM feeds WHERE scope = \(scope) FOR UPDATE SKIP LOCKED
                    ), latest AS (
                        SELECT c.scope, c.entity_type, c.entity_id, max(c.seq) AS seq
                        FROM f JOIN changes c ON c.scope = f.scope AND c.seq > f.compacted AND c.seq <= f.upto
                        WHERE c.scope = \(scope)
                        GROUP BY c.scope, c.entity_type, c.entity_id
                    ), gone AS (
                        DELETE FROM changes c USING latest l
                        WHERE c.scope = \(scope) AND c.scope = l.scope AND c.entity_type = l.entity_type AND c.entity_id = l.entity_id AND c.seq < l.seq
                        RETURNING 1
                    ), marked AS (
                        UPDATE feeds SET compacted = f.upto FROM f WHERE feeds.scope = \(scope) AND feeds.scope = f.scope RETURNING 1
                    )
                    SELECT (SELECT count(*)::int FROM gone), (SELECT count(*)::int FROM marked), (SELECT coalesce(bool_or(upto < head), false) FROM f)
                    """,
                    logger: logger
                ).collect((Int, Int, Bool).self)
                guard let (deleted, marked, cutShort) = rows.first else { continue }
                batch.deletedChanges += deleted
                batch.feeds += marked
                batch.cutShort = batch.cutShort || cutShort
            }
            return batch
        }
    }
}

extension PostgresTransaction {
    /// ``lock(jobs:feeds:)`` on Citus: the jobs, then each feed on its own node, in sorted
    /// order (the same order as on PostgreSQL, so two writers of the same feeds never deadlock),
    /// a missing feed created in its turn.
    func citusLock(jobs leases: [JobLease], feeds scopes: [Scope]) async throws -> ApplyLocks {
        let held = try await query(
            """
            SELECT j.id FROM jobs j JOIN unnest(\(leases.map(\.id))::bigint[], \(leases.map(\.token))::text[]) AS lease(id, token)
              ON j.id = lease.id AND j.lease_token = lease.token
            WHERE j.state = 'running' ORDER BY j.id FOR UPDATE OF j
            """
        ).collect(Int64.self)
        return ApplyLocks(jobs: Set(held), heads: try await citusLockFeeds(scopes))
    }

    /// ``lockFeeds(_:)`` on Citus: each feed on its own node, in sorted order, a missing one
    /// created in its turn.
    func citusLockFeeds(_ scopes: [Scope]) async throws -> [Scope: Int64] {
        var heads: [Scope: Int64] = [:]
        for scope in scopes.sorted(by: { $0.key < $1.key }) {
            var head = try await query("SELECT head FROM feeds WHERE scope = \(scope.key) FOR UPDATE").collect(Int64.self).first
            if head == nil {
                try await query("INSERT INTO feeds (scope) VALUES (\(scope.key)) ON CONFLICT DO NOTHING")
                head = try await query("SELECT head FROM feeds WHERE scope = \(scope.key) FOR UPDATE").collect(Int64.self).first
            }
            heads[scope] = head
        }
        return heads
    }

    /// ``load(_:)`` on Citus: the entities (distributed), the idempotency records (coordinator)
    /// and the households (reference tables), each in its own statement.
    func citusLoad(_ reads: ApplyReads) async throws -> ApplyRows {
        var loaded = ApplyRows()
        loaded.entities = try await loadEntities([.keys(reads.entities)])
        loaded.inputs = try await loadEntities(reads.inputs)
        let keys = reads.idempotencyKeys
        if !keys.isEmpty {
            for (user, key, version) in try await query(
                """
                SELECT a.user_id, a.idempotency_key, a.version FROM unnest(\(keys.map(\.userID))::text[], \(keys.map(\.key))::text[]) AS r(user_id, idempotency_key)
                JOIN applied_operations a ON a.user_id = r.user_id AND a.idempotency_key = r.idempotency_key
                """
            ).collect((String, String, Int64?).self) {
                loaded.recorded[IdempotencyKey(userID: user, key: key)] = .some(version)
            }
        }
        if !reads.households.isEmpty {
            loaded.households = try await query(
                """
                SELECT h.household_id, h.owner_id, h.archived, m.user_id, m.role
                FROM households h LEFT JOIN household_members m ON m.household_id = h.household_id
                WHERE h.household_id = ANY(\(reads.households)::text[])
                """
            ).collect(PostgresDriver.HouseholdColumns.self).map(PostgresDriver.householdRow)
        }
        return loaded
    }

    /// The first statement of ``purgeTombstones(scope:before:limit:)`` on Citus: how far every
    /// webhook subscription has received the feed read first from the coordinator's tables, then
    /// the tombstones deleted on the feed's node.
    func citusTombstonesToPurge(scope: Scope, before cutoff: Timestamp, limit: Int) async throws -> [(Int64, String, String, Int64)] {
        var bound: Int64?
        if try await query("SELECT EXISTS (SELECT 1 FROM webhook_subscriptions)").collect(Bool.self).first == true {
            let webhooked = try await query("SELECT webhooked FROM feeds WHERE scope = \(scope.key)").collect(Int64.self).first ?? 0
            let pending = try await query(
                "SELECT min(first_seq) - 1 FROM webhook_deliveries WHERE scope = \(scope.key) AND delivered_at IS NULL"
            ).collect(Int64?.self).first ?? nil
            bound = min(webhooked, pending ?? webhooked)
        }
        return try await query(
            """
            DELETE FROM changes WHERE (scope, seq) IN (
                SELECT scope, seq FROM changes
                WHERE scope = \(scope.key) AND data IS NULL AND updated_at < \(cutoff.millisecondsSinceEpoch)
                  AND (\(bound)::bigint IS NULL OR seq <= \(bound)::bigint)
                ORDER BY seq LIMIT \(limit)
            )
            RETURNING seq, entity_type, entity_id, version
            """
        ).collect((Int64, String, String, Int64).self)
    }

    /// ``write(_:)`` on Citus: the feed data (``writeEntities(_:heads:)``), then the
    /// coordinator's part in one statement: idempotency records, finished jobs, device
    /// watermarks and the notifications.
    func citusWrite(_ write: ApplyWrite) async throws {
        try await writeEntities(write.entities, heads: write.heads)
        let records = write.records, finished = write.finished
        try await query(
            """
            WITH recorded AS (
                INSERT INTO applied_operations (user_id, idempotency_key, version, applied_at)
                SELECT r.u, r.k, nullif(r.v, -1), coalesce(timestamptz 'epoch' + \(now)::bigint * interval '1 millisecond', now())
                FROM unnest(\(records.map(\.userID))::text[], \(records.map(\.key))::text[], \(records.map { $0.version ?? -1 })::bigint[]) AS r(u, k, v)
            ), finished AS (
                UPDATE jobs SET state = f.state, results = f.results, last_error = NULL,
                    finished_at = coalesce(timestamptz 'epoch' + \(now)::bigint * interval '1 millisecond', now()),
                    updated_at = coalesce(timestamptz 'epoch' + \(now)::bigint * interval '1 millisecond', now()),
                    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
                FROM unnest(\(finished.map(\.id))::bigint[], \(finished.map(\.state.rawValue))::text[], \(finished.map(\.results))::text[]) AS f(id, state, results)
                WHERE jobs.id = f.id
            ), watermarks AS (
                INSERT INTO devices (user_id, device_id, last_finished_job_id)
                SELECT u, d, max(j) FROM unnest(\(finished.map(\.userID))::text[], \(finished.map(\.deviceID))::text[], \(finished.map(\.id))::bigint[]) AS f(u, d, j)
                GROUP BY u, d ORDER BY u, d
                ON CONFLICT (user_id, device_id) DO UPDATE
                SET last_finished_job_id = greatest(devices.last_finished_job_id, excluded.last_finished_job_id), updated_at = now()
            )
            SELECT pg_notify(\(PostgresDriver.channel), payload)::text FROM unnest(\(write.events.map(NotificationPayload.encode))::text[]) AS payload
            """
        )
    }

    /// The changes of ``writeEntities(_:heads:)`` on Citus: each feed's commit time is read
    /// before they are appended (Citus refuses the correlated subquery beside the insert).
    func citusAppendChanges(_ entities: [EntityRowWrite]) async throws {
        let scopes = entities.map(\.row.scope), types = entities.map(\.row.entityType), ids = entities.map(\.row.entityID)
        let versions = entities.map(\.row.version), sequences = entities.map(\.sequence), updatedAts = entities.map(\.row.updatedAt)
        let documents = entities.map { $0.row.data ?? "null" }, origins = entities.map { $0.origin ?? "" }, writers = entities.map { $0.writer ?? "" }
        // Commit times as PostgreSQL's statement computes them (PostgresDriver.commitTimes): the
        // transaction's start, raised to each feed's newest change.
        let feeds = Array(Set(scopes)).sorted()
        let start = try await query("SELECT floor(extract(epoch FROM now()) * 1000)::bigint").collect(Int64.self).first ?? 0
        var times = Dictionary(uniqueKeysWithValues: feeds.map { ($0, start) })
        for (scope, newest) in try await query(
            "SELECT scope, max(committed_at) FROM changes WHERE scope = ANY(\(feeds)::text[]) GROUP BY scope"
        ).collect((String, Int64?).self) {
            times[scope] = max(start, newest ?? 0)
        }
        let committed = scopes.map { times[$0] ?? start }
        try await query(
            """
            INSERT INTO changes (scope, seq, entity_type, entity_id, version, data, updated_at, committed_at, origin, writer)
            SELECT s, q, t, i, v, nullif(d, 'null')::jsonb, u, a, nullif(o, ''), nullif(r, '')
            FROM unnest(\(scopes)::text[], \(sequences)::bigint[], \(types)::text[], \(ids)::text[], \(versions)::bigint[],
                        \(documents)::text[], \(updatedAts)::bigint[], \(committed)::bigint[], \(origins)::text[], \(writers)::text[])
                 AS w(s, q, t, i, v, d, u, a, o, r)
            """
        )
    }
}
