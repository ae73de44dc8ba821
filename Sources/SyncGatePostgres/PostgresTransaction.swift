import Foundation
import Logging
import PostgresNIO
import SyncGateCore
import SyncGateWire
import SyncGateStorage

/// One open transaction on one connection: its statements, counted (a job's apply must not need
/// more statements for more operations).
final class PostgresTransaction: StorageTransaction {
    let connection: PostgresConnection
    let logger: Logger
    /// The transaction's "now" in milliseconds since the epoch; `NULL` binds the database's clock.
    let now: Int64?
    /// On a Citus coordinator: statements split by where their tables live (PostgresDriver+Citus.swift).
    let citus: Bool
    /// Statements so far, each a round trip; BEGIN and COMMIT count too.
    private(set) var roundTrips = 2

    init(connection: PostgresConnection, now: Timestamp?, citus: Bool = false, logger: Logger) {
        self.connection = connection
        self.now = now?.millisecondsSinceEpoch
        self.citus = citus
        self.logger = logger
    }

    @discardableResult
    func query(_ query: PostgresQuery, file: String = #fileID, line: Int = #line) async throws -> PostgresRowSequence {
        roundTrips += 1
        return try await connection.query(query, logger: logger, file: file, line: line)
    }

    /// A prepared statement (see PostgresStatements.swift), its rows collected.
    @discardableResult
    func run<Statement: PostgresPreparedStatement>(_ statement: Statement) async throws -> [Statement.Row] {
        roundTrips += 1
        return try await connection.rows(statement, logger: logger)
    }

    func lock(jobs leases: [JobLease], feeds scopes: [Scope]) async throws -> ApplyLocks {
        if citus { return try await citusLock(jobs: leases, feeds: scopes) }
        // One statement: the jobs (fencing), then the feeds in sorted order when all of them
        // exist. Feeds are created on a scope's first write only: then it locks none, and the
        // rare path below creates the missing ones and locks every feed, in order.
        let rows = try await run(LockForApplyStatement(leases: leases, scopes: scopes.map(\.key)))
        var locks = ApplyLocks(jobs: [], heads: [:])
        for (key, value) in rows {
            if let key {
                if let scope = Scope(key: key) { locks.heads[scope] = value }
            } else {
                locks.jobs.insert(value)
            }
        }
        guard scopes.contains(where: { locks.heads[$0] == nil }) else { return locks }
        locks.heads = try await lockFeeds(scopes)
        return locks
    }

    func dropEmptyFeeds(_ scopes: [Scope]) async throws {
        guard !scopes.isEmpty else { return }
        try await query("DELETE FROM feeds WHERE scope = ANY(\(scopes.map(\.key))::text[]) AND head = 0")
    }

    func lockFeeds(_ scopes: [Scope]) async throws -> [Scope: Int64] {
        if citus { return try await citusLockFeeds(scopes) }
        let keys = scopes.map(\.key)
        try await query("INSERT INTO feeds (scope) SELECT unnest(\(keys)::text[]) ORDER BY 1 ON CONFLICT DO NOTHING")
        // Locks in the given (sorted) order, so two writers of the same feeds never deadlock.
        let rows = try await query(
            "SELECT scope, head FROM feeds WHERE scope = ANY(\(keys)::text[]) ORDER BY scope FOR UPDATE"
        ).collect((String, Int64).self)
        var heads: [Scope: Int64] = [:]
        for (key, head) in rows {
            if let scope = Scope(key: key) { heads[scope] = head }
        }
        return heads
    }

    func load(_ reads: ApplyReads) async throws -> ApplyRows {
        if citus { return try await citusLoad(reads) }
        // One statement, one snapshot (taken after the locks). Derivation inputs are keys and
        // group members; a range (a rebuild's, never an apply's) would take a statement of its own.
        let inputs = EntityProbes(reads.inputs)
        let rows = try await run(LoadForApplyStatement(reads: reads, inputs: inputs))
        var loaded = ApplyRows()
        if !inputs.ranges.isEmpty { loaded.inputs = try await loadEntities(inputs.ranges) }
        for (kind, first, second, third, number, fourth, fifth, sixth, seventh) in rows {
            switch kind {
            case 0, 3:
                let row = StoredEntityRow(
                    scope: first, entityType: second, entityID: third ?? "", version: number ?? 0, data: fourth, meta: fifth,
                    clientTimestamp: sixth ?? 0, updatedAt: seventh ?? 0
                )
                if kind == 0 { loaded.entities.append(row) } else { loaded.inputs.append(row) }
            case 1:
                loaded.recorded[IdempotencyKey(userID: first, key: second)] = .some(number)
            default:
                loaded.households.append(HouseholdRow(householdID: first, ownerID: second, archived: number == 1, memberID: third, role: fourth))
            }
        }
        return loaded
    }

    func loadEntities(_ queries: [EntityQuery]) async throws -> [StoredEntityRow] {
        let queries = queries.filter { !$0.isEmpty }
        guard !queries.isEmpty else { return [] }
        // An apply's loads (keys, derivation groups): one prepared statement.
        let probes = EntityProbes(queries)
        if probes.ranges.isEmpty {
            return try await run(LoadEntitiesStatement(probes: probes)).map(PostgresDriver.entityRow)
        }
        // A rebuild's ranges: one statement however many queries, a UNION ALL of one indexed probe each.
        var builder = QueryBuilder()
        for (index, entityQuery) in queries.enumerated() {
            if index > 0 { builder.append(" UNION ALL ") }
            builder.append("SELECT \(PostgresDriver.entityColumns) FROM entities e WHERE ")
            switch entityQuery {
            case .keys(let keys):
                builder.append("(e.scope, e.entity_type, e.entity_id) IN (SELECT * FROM unnest(\(builder.bind(keys.map(\.scope.key)))::text[], ")
                builder.append("\(builder.bind(keys.map(\.entityType)))::text[], \(builder.bind(keys.map(\.entityID)))::text[]))")
            case .groupMembers(let scope, let type, let groups):
                builder.append("e.scope = \(builder.bind(scope.key)) AND e.entity_type = \(builder.bind(type)) ")
                builder.append("AND e.group_key = ANY(\(builder.bind(groups))::text[]) AND e.data IS NOT NULL")
            case .groupRange(let scope, let type, let from, let through):
                builder.append("e.scope = \(builder.bind(scope.key)) AND e.entity_type = \(builder.bind(type)) AND e.group_key IS NOT NULL ")
                builder.append("AND (\(builder.bind(from))::text IS NULL OR e.group_key >= \(builder.bind(from))) ")
                builder.append("AND (\(builder.bind(through))::text IS NULL OR e.group_key <= \(builder.bind(through))) AND e.data IS NOT NULL")
            case .idRange(let scope, let type, let from, let through):
                builder.append("e.scope = \(builder.bind(scope.key)) AND e.entity_type = \(builder.bind(type)) ")
                builder.append("AND (\(builder.bind(from))::text IS NULL OR e.entity_id >= \(builder.bind(from))) ")
                builder.append("AND (\(builder.bind(through))::text IS NULL OR e.entity_id <= \(builder.bind(through)))")
            }
        }
        return try await query(builder.query).collect(PostgresDriver.EntityColumns.self).map(PostgresDriver.entityRow)
    }

    func write(_ write: ApplyWrite) async throws {
        if citus { return try await citusWrite(write) }
        try await run(WriteAppliedStatement(write: write, now: now))
    }

    func writeEntities(_ entities: [EntityRowWrite], heads: [Scope: Int64]) async throws {
        guard !entities.isEmpty else { return }
        let scopes = entities.map(\.row.scope), types = entities.map(\.row.entityType), ids = entities.map(\.row.entityID)
        let versions = entities.map(\.row.version), sequences = entities.map(\.sequence)
        // Arrays cannot carry SQL NULLs here: the JSON text `null` stands for "no document", and
        // an empty group key, origin or writer for none.
        let documents = entities.map { $0.row.data ?? "null" }, metas = entities.map { $0.row.meta ?? "null" }
        let groups = entities.map { $0.groupKey ?? "" }, origins = entities.map { $0.origin ?? "" }, writers = entities.map { $0.writer ?? "" }
        let clientTimestamps = entities.map(\.row.clientTimestamp), updatedAts = entities.map(\.row.updatedAt)
        try await query(
            """
            INSERT INTO entities (scope, entity_type, entity_id, version, data, meta, client_ts, updated_at, group_key)
            SELECT s, t, i, v, nullif(d, 'null')::jsonb, nullif(m, 'null')::jsonb, c, u, nullif(g, '')
            FROM unnest(\(scopes)::text[], \(types)::text[], \(ids)::text[], \(versions)::bigint[],
                        \(documents)::text[], \(metas)::text[], \(clientTimestamps)::bigint[], \(updatedAts)::bigint[], \(groups)::text[])
                 AS w(s, t, i, v, d, m, c, u, g)
            ON CONFLICT (scope, entity_type, entity_id) DO UPDATE SET
                version = excluded.version, data = excluded.data, meta = excluded.meta,
                client_ts = excluded.client_ts, updated_at = excluded.updated_at, group_key = excluded.group_key
            """
        )
        if citus {
            try await citusAppendChanges(entities)
        } else {
            try await query(
                """
                WITH w AS (
                    SELECT * FROM unnest(\(scopes)::text[], \(sequences)::bigint[], \(types)::text[], \(ids)::text[], \(versions)::bigint[],
                                         \(documents)::text[], \(updatedAts)::bigint[], \(origins)::text[], \(writers)::text[]) AS w(s, q, t, i, v, d, u, o, r)
                ), \(unescaped: PostgresDriver.commitTimes)
                INSERT INTO changes (scope, seq, entity_type, entity_id, version, data, updated_at, committed_at, origin, writer)
                SELECT w.s, w.q, w.t, w.i, w.v, nullif(w.d, 'null')::jsonb, w.u, at.at, nullif(w.o, ''), nullif(w.r, '')
                FROM w JOIN at ON at.s = w.s
                """
            )
        }
        let advanced = heads.sorted { $0.key < $1.key }
        try await query(
            """
            UPDATE feeds SET head = h.head
            FROM unnest(\(advanced.map(\.key.key))::text[], \(advanced.map(\.value))::bigint[]) AS h(scope, head)
            WHERE feeds.scope = h.scope
            """
        )
    }

    func writeHouseholds(_ households: [HouseholdState]) async throws {
        guard !households.isEmpty else { return }
        let ids = households.map(\.id)
        try await query(
            """
            -- now() in the row, not in DO UPDATE: Citus allows only immutable functions there.
            INSERT INTO households (household_id, owner_id, archived, updated_at)
            SELECT h, o, a, now() FROM unnest(\(ids)::text[], \(households.map(\.ownerID))::text[], \(households.map(\.archived))::boolean[]) AS n(h, o, a)
            ON CONFLICT (household_id) DO UPDATE SET owner_id = excluded.owner_id, archived = excluded.archived, updated_at = excluded.updated_at
            """
        )
        var memberHouseholds: [String] = [], memberUsers: [String] = [], memberRoles: [String] = []
        for household in households {
            for (user, role) in household.members.sorted(by: { $0.key < $1.key }) {
                memberHouseholds.append(household.id)
                memberUsers.append(user.id)
                memberRoles.append(role.rawValue)
            }
        }
        try await query(
            """
            DELETE FROM household_members m
            WHERE m.household_id = ANY(\(ids)::text[])
              AND (m.household_id, m.user_id) NOT IN (SELECT * FROM unnest(\(memberHouseholds)::text[], \(memberUsers)::text[]))
            """
        )
        try await query(
            """
            INSERT INTO household_members (household_id, user_id, role)
            SELECT * FROM unnest(\(memberHouseholds)::text[], \(memberUsers)::text[], \(memberRoles)::text[])
            ON CONFLICT (household_id, user_id) DO UPDATE SET role = excluded.role
            """
        )
    }

    func finishJob(_ finish: FinishedJob, error: String?) async throws {
        try await query(
            """
            UPDATE jobs SET state = \(finish.state.rawValue), results = \(finish.results), last_error = \(error),
                errors = CASE WHEN \(error)::text IS NULL THEN errors ELSE jsonb_path_query_array(coalesce(errors, '[]'::jsonb)
                    || jsonb_build_array(jsonb_build_object('at', coalesce(\(now)::bigint, floor(extract(epoch FROM now()) * 1000)::bigint), 'attempt', attempts, 'error', \(error)::text)), '$[last - 19 to last]') END,
                finished_at = coalesce(timestamptz 'epoch' + \(now)::bigint * interval '1 millisecond', now()), updated_at = coalesce(timestamptz 'epoch' + \(now)::bigint * interval '1 millisecond', now()),
                lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
            WHERE id = \(finish.id)
            """
        )
        try await query(
            """
            INSERT INTO devices (user_id, device_id, last_finished_job_id) VALUES (\(finish.userID), \(finish.deviceID), \(finish.id))
            ON CONFLICT (user_id, device_id) DO UPDATE
            SET last_finished_job_id = greatest(devices.last_finished_job_id, excluded.last_finished_job_id), updated_at = now()
            """
        )
    }

    func retryJob(id: Int64, delayMilliseconds: Int64, error: String) async throws {
        try await query(
            """
            UPDATE jobs SET state = 'retrying', last_error = \(error),
                errors = jsonb_path_query_array(coalesce(errors, '[]'::jsonb)
                    || jsonb_build_array(jsonb_build_object('at', coalesce(\(now)::bigint, floor(extract(epoch FROM now()) * 1000)::bigint), 'attempt', attempts, 'error', \(error)::text)), '$[last - 19 to last]'),
                run_at = coalesce(timestamptz 'epoch' + \(now)::bigint * interval '1 millisecond', now()) + \(delayMilliseconds) * interval '1 millisecond',
                lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = coalesce(timestamptz 'epoch' + \(now)::bigint * interval '1 millisecond', now())
            WHERE id = \(id)
            """
        )
    }

    func expiredLeases(limit: Int) async throws -> [ClaimedJob<String>] {
        // SKIP LOCKED: a locked row is being applied right now by a live worker.
        try await query(
            """
            SELECT \(unescaped: PostgresDriver.claimedColumns) FROM jobs
            WHERE state = 'running' AND lease_expires_at < coalesce(timestamptz 'epoch' + \(now)::bigint * interval '1 millisecond', now())
            ORDER BY id LIMIT \(limit)
            FOR UPDATE SKIP LOCKED
            """
        ).collect(PostgresDriver.ClaimedColumns.self).map(PostgresDriver.claimedJob)
    }

    func lockWaitingJob(id: Int64) async throws -> JobDetail? {
        // A claim that holds the row commits it `running`: the state is checked again after the wait.
        try await query(
            """
            SELECT \(unescaped: PostgresDriver.jobDetailColumns) FROM jobs WHERE id = \(id) AND state IN ('queued', 'retrying')
              AND NOT EXISTS (
                  SELECT 1 FROM jobs earlier
                  WHERE earlier.user_id = jobs.user_id AND earlier.device_id = jobs.device_id AND earlier.id < jobs.id
                    AND earlier.state IN ('queued', 'running', 'retrying')
              )
            FOR UPDATE
            """
        ).collect(PostgresDriver.JobDetailColumns.self).first.map(PostgresDriver.jobDetail)
    }

    func eraseUser(_ userID: String, households: [String]) async throws -> ErasedUser {
        let scope = Scope.user(userID).key
        var erased = ErasedUser()
        func count(_ statement: PostgresQuery) async throws -> Int {
            try await query(statement).collect(Int.self).count
        }
        erased.jobs = try await count("DELETE FROM jobs WHERE user_id = \(userID) RETURNING 1")
        erased.idempotencyRecords = try await count("DELETE FROM applied_operations WHERE user_id = \(userID) RETURNING 1")
        erased.devices = try await count("DELETE FROM devices WHERE user_id = \(userID) RETURNING 1")
        erased.pushRegistrations = try await count("DELETE FROM push_registrations WHERE user_id = \(userID) RETURNING 1")
        try await query("DELETE FROM push_presence WHERE user_id = \(userID)")
        erased.entities = try await count("DELETE FROM entities WHERE scope = \(scope) RETURNING 1")
        erased.changes = try await count("DELETE FROM changes WHERE scope = \(scope) RETURNING 1")
        try await query("DELETE FROM webhook_deliveries WHERE scope = \(scope)")
        try await query("DELETE FROM push_positions WHERE scope = \(scope)")
        // The feed row stays, emptied (floor at head): its sequence numbers go on from the head,
        // never again from 1, since a live front's watch table holds heads it only ever raises.
        try await query("UPDATE feeds SET floor = head, compacted = head, webhooked = head WHERE scope = \(scope)")
        // Of archived households only: a live one's membership is its feed's, changed by jobs.
        try await query(
            "DELETE FROM household_members m USING households h WHERE m.user_id = \(userID) AND h.household_id = m.household_id AND h.archived"
        )
        // A writer is `<device id>/<user id>`: device ids hold no `/`, user ids may.
        erased.householdChangesUnattributed = try await count(
            """
            UPDATE changes SET writer = NULL
            WHERE scope = ANY(\(households.map { Scope.household($0).key })::text[]) AND substr(writer, strpos(writer, '/') + 1) = \(userID)
            RETURNING 1
            """
        )
        return erased
    }

    func requeueDeadJobs(ids: [Int64]?) async throws -> Int {
        // The users' enqueue locks first (syncgate_enqueue's), in one order: a push enqueued
        // meanwhile is either seen below as a later unfinished job, or queued after this commits
        // (behind the retried job).
        try await query(
            """
            SELECT count(pg_advisory_xact_lock(1397182805, hashtext(user_id)))::int FROM (
                SELECT DISTINCT user_id FROM jobs WHERE state = 'dead' AND (\(ids == nil) OR id = ANY(\(ids ?? [])::bigint[])) ORDER BY user_id
            ) users
            """
        ).collect(Int.self)
        return try await query(
            """
            WITH retried AS (
                UPDATE jobs SET state = 'queued', attempts = 0, run_at = coalesce(timestamptz 'epoch' + \(now)::bigint * interval '1 millisecond', now()), results = NULL,
                    finished_at = NULL, last_error = 'retried by an operator after: ' || coalesce(last_error, ''),
                    updated_at = coalesce(timestamptz 'epoch' + \(now)::bigint * interval '1 millisecond', now())
                WHERE state = 'dead' AND (\(ids == nil) OR id = ANY(\(ids ?? [])::bigint[]))
                  AND NOT EXISTS (
                      SELECT 1 FROM jobs later
                      WHERE later.user_id = jobs.user_id AND later.id > jobs.id AND later.state IN ('queued', 'running', 'retrying')
                  )
                RETURNING 1
            ) SELECT count(*)::int FROM retried
            """
        ).collect(Int.self).first ?? 0
    }

    func purgeTombstones(scope: Scope, before cutoff: Timestamp, limit: Int) async throws -> Int {
        let rows = try await citus ? citusTombstonesToPurge(scope: scope, before: cutoff, limit: limit) : query(
            """
            DELETE FROM changes WHERE (scope, seq) IN (
                SELECT scope, seq FROM changes
                WHERE scope = \(scope.key) AND data IS NULL AND updated_at < \(cutoff.millisecondsSinceEpoch)
                  -- While a webhook subscription exists, only tombstones every subscription has
                  -- received (none of a feed without a row).
                  AND (NOT EXISTS (SELECT 1 FROM webhook_subscriptions)
                       OR seq <= (SELECT \(unescaped: PostgresDriver.webhookReceivedBound) FROM feeds WHERE scope = \(scope.key)))
                ORDER BY seq LIMIT \(limit)
            )
            RETURNING seq, entity_type, entity_id, version
            """
        ).collect((Int64, String, String, Int64).self)
        guard let newest = rows.map(\.0).max() else { return 0 }
        // Older changes of a purged entity must go too, or a new reader would see it alive.
        try await query(
            """
            DELETE FROM changes c USING unnest(\(rows.map(\.1))::text[], \(rows.map(\.2))::text[], \(rows.map(\.0))::bigint[]) AS p(t, i, q)
            WHERE c.scope = \(scope.key) AND c.entity_type = p.t AND c.entity_id = p.i AND c.seq < p.q
            """
        )
        try await query("UPDATE feeds SET floor = greatest(floor, \(newest)) WHERE scope = \(scope.key)")
        try await query(
            """
            DELETE FROM entities e USING unnest(\(rows.map(\.1))::text[], \(rows.map(\.2))::text[], \(rows.map(\.3))::bigint[]) AS p(t, i, v)
            WHERE e.scope = \(scope.key) AND e.entity_type = p.t AND e.entity_id = p.i AND e.version = p.v AND e.data IS NULL
            """
        )
        return rows.count
    }

    func bumpResyncEpoch(userID: String?) async throws {
        if let userID {
            try await query(
                """
                INSERT INTO users (user_id, resync_epoch) VALUES (\(userID), 1)
                ON CONFLICT (user_id) DO UPDATE SET resync_epoch = users.resync_epoch + 1
                """
            )
        } else {
            try await query("UPDATE settings SET value = value + 1 WHERE key = 'resync_epoch'")
        }
    }

    func bumpScopesVersions(userIDs: [String]) async throws -> [ExactKey: Int64] {
        guard !userIDs.isEmpty else { return [:] }
        let rows = try await query(
            """
            INSERT INTO users (user_id, scopes_version) SELECT u, 1 FROM unnest(\(userIDs.sorted())::text[]) AS u ORDER BY 1
            ON CONFLICT (user_id) DO UPDATE SET scopes_version = users.scopes_version + 1
            RETURNING user_id, scopes_version
            """
        ).collect((String, Int64).self)
        return Dictionary(rows.map { (ExactKey($0), $1) }, uniquingKeysWith: max)
    }

    /// Queues the notifications; PostgreSQL delivers them when the transaction commits.
    func announce(_ events: [StoreEvent]) async throws {
        guard !events.isEmpty else { return }
        try await query(
            "SELECT pg_notify(\(PostgresDriver.channel), payload)::text FROM unnest(\(events.map(NotificationPayload.encode))::text[]) AS payload"
        )
    }
}

extension EntityQuery {
    /// A query that cannot match anything (no keys, no groups).
    var isEmpty: Bool {
        switch self {
        case .keys(let keys): keys.isEmpty
        case .groupMembers(_, _, let groups): groups.isEmpty
        case .groupRange, .idRange: false
        }
    }
}

/// SQL assembled piece by piece with numbered parameters, for statements whose shape depends on
/// the request (one UNION ALL branch per entity query).
struct QueryBuilder {
    private var sql = ""
    private var bindings = PostgresBindings()

    mutating func append(_ text: String) {
        sql += text
    }

    /// Adds a parameter; returns its placeholder (`$n`).
    mutating func bind<Value: PostgresDynamicTypeEncodable>(_ value: Value) -> String {
        bindings.append(value)
        return "$\(bindings.count)"
    }

    /// Adds a parameter that may be NULL.
    mutating func bind<Value: PostgresDynamicTypeEncodable>(_ value: Value?) -> String {
        bindings.append(value)
        return "$\(bindings.count)"
    }

    var query: PostgresQuery { PostgresQuery(unsafeSQL: sql, binds: bindings) }
}
