import Foundation
import Logging
import PostgresNIO
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateRuntime

// The statements of the hot paths — a push, a claim, an apply, a pull, a live wake-up — prepared
// once per connection (PostgresNIO's named statements) and planned once (see
// `PostgresDriver.client`). Each is a fixed text: what varies with a request travels in array
// parameters, never in the SQL, so one prepared statement serves every call. Every parameter is
// cast in the text, so its type never depends on the first call's values (a NULL has none).

/// `syncgate_enqueue` (migrations 0004, 0008): the per-user queue limit and the insert, and no
/// notify (a `nil` notification): workers hear of the job from ``AnnounceJobsStatement``.
struct EnqueueStatement: PostgresPreparedStatement {
    static let name = "sg_enqueue"
    static let sql = """
        SELECT queued, job_id FROM syncgate_enqueue(
            $1::text, $2::text, $3::bigint, $4::bigint, $5::text,
            coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', now()), $7::bigint, $8::text, $9::text
        )
        """
    typealias Row = (Int, Int64?)

    var job: QueuedJob
    var now: Int64?
    var limit: Int
    var notification: String?

    func makeBindings() throws -> PostgresBindings {
        PostgresBindings(
            job.userID,
            job.deviceID,
            Int64(job.maximumAttempts),
            Int64(job.operationCount),
            job.payload,
            now,
            Int64(limit),
            PostgresDriver.channel,
            notification
        )
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

struct JobStatusStatement: PostgresPreparedStatement {
    static let name = "sg_job_status"
    static let sql = "SELECT \(PostgresDriver.jobColumns) FROM jobs WHERE id = $1::bigint AND user_id = $2::text"
    typealias Row = PostgresDriver.JobColumns

    var id: Int64
    var userID: String

    func makeBindings() throws -> PostgresBindings { PostgresBindings(id, userID) }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// Tells workers that jobs are queued, in a transaction of its own that does not wait for the
/// WAL flush: a NOTIFY holds a database-wide lock until its transaction's commit is flushed, so
/// in the enqueue's durable transaction it made every push commit one flush after another
/// (migration 0008). Lost in a crash, it only leaves workers to their poll. It waits for that
/// lock (taken at its commit) no longer than its caller waits for it: one abandoned by its
/// deadline must not hold a pooled connection for as long as another transaction holds the lock.
struct AnnounceJobsStatement: PostgresPreparedStatement {
    static let name = "sg_announce_jobs"
    static let sql = """
        WITH relaxed AS (SELECT \(PostgresDriver.relaxedCommit), set_config('lock_timeout', $3::text, true) AS lock_timeout)
        SELECT pg_notify($1::text, $2::text)::text FROM relaxed
        """
    typealias Row = String

    /// The longest wait for the notify lock.
    var lockTimeout: Duration

    func makeBindings() throws -> PostgresBindings {
        // Milliseconds, at least one (0 would mean no limit), by NIO's saturating conversion (as
        // EventLoopTimer's).
        let milliseconds = max(1, TimeAmount(lockTimeout).nanoseconds / 1_000_000)
        return PostgresBindings(PostgresDriver.channel, NotificationPayload.encode(.jobsAvailable), String(milliseconds))
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(String.self) }
}

/// Oldest runnable jobs first, skipping rows other workers are claiming, and only a user's oldest
/// unfinished job: one job per user at a time, in push order. Its commit does not wait for the
/// WAL flush (a claim lost in a crash only runs the job again: docs/job-states.md).
struct ClaimStatement: PostgresPreparedStatement {
    static let name = "sg_claim"
    static let sql = """
        WITH relaxed AS (SELECT \(PostgresDriver.relaxedCommit)),
        candidates AS (
            SELECT j.id FROM jobs j
            WHERE j.state IN ('queued', 'retrying') AND j.run_at <= coalesce(timestamptz 'epoch' + $4::bigint * interval '1 millisecond', now())
              AND NOT EXISTS (
                  SELECT 1 FROM jobs earlier
                  WHERE earlier.user_id = j.user_id AND earlier.id < j.id
                    AND earlier.state IN ('queued', 'running', 'retrying')
              )
            ORDER BY j.id
            LIMIT $2::bigint
            FOR UPDATE SKIP LOCKED
        )
        UPDATE jobs SET
            state = 'running',
            attempts = jobs.attempts + 1,
            lease_owner = $1::text,
            lease_token = md5(random()::text || clock_timestamp()::text),
            -- The database's clock, never a test's: the commit-time horizon (migration 0005).
            claimed_at = now(),
            lease_expires_at = coalesce(timestamptz 'epoch' + $4::bigint * interval '1 millisecond', now()) + $3::bigint * interval '1 millisecond',
            updated_at = coalesce(timestamptz 'epoch' + $4::bigint * interval '1 millisecond', now())
        FROM candidates, relaxed WHERE jobs.id = candidates.id
        RETURNING jobs.id, jobs.lease_token, jobs.user_id, jobs.device_id, jobs.attempts, jobs.max_attempts, jobs.payload, jobs.created_at
        """
    typealias Row = PostgresDriver.ClaimedColumns

    var workerID: String
    var limit: Int
    var leaseMilliseconds: Int64
    var now: Int64?

    func makeBindings() throws -> PostgresBindings { PostgresBindings(workerID, Int64(limit), leaseMilliseconds, now) }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// A job whose row is locked is being applied right now, which protects it better than a lease:
/// skip it rather than wait. Like a claim, it does not wait for the WAL flush.
struct ExtendLeasesStatement: PostgresPreparedStatement {
    static let name = "sg_extend_leases"
    static let sql = """
        WITH relaxed AS (SELECT \(PostgresDriver.relaxedCommit))
        UPDATE jobs SET lease_expires_at = coalesce(timestamptz 'epoch' + $4::bigint * interval '1 millisecond', now()) + $3::bigint * interval '1 millisecond',
            updated_at = coalesce(timestamptz 'epoch' + $4::bigint * interval '1 millisecond', now())
        FROM relaxed
        WHERE id IN (
            SELECT j.id FROM jobs j
            JOIN unnest($1::bigint[], $2::text[]) AS lease(id, token) ON j.id = lease.id AND j.lease_token = lease.token
            WHERE j.state = 'running'
            FOR UPDATE OF j SKIP LOCKED
        )
        """
    typealias Row = ()

    var leases: [JobLease]
    var leaseMilliseconds: Int64
    var now: Int64?

    func makeBindings() throws -> PostgresBindings { PostgresBindings(leases.map(\.id), leases.map(\.token), leaseMilliseconds, now) }

    func decodeRow(_ row: PostgresRow) throws -> Row {}
}

/// An apply's first statement: the jobs (fencing), then the feeds in sorted order — only if
/// every one exists. When one does not, it locks none: the caller creates the missing ones and
/// then locks them all in order. (Holding the existing ones while creating another could wait on
/// a feed that sorts before one held: two such writers deadlock.)
struct LockForApplyStatement: PostgresPreparedStatement {
    static let name = "sg_apply_lock"
    static let sql = """
        WITH held AS (
            SELECT j.id FROM jobs j JOIN unnest($1::bigint[], $2::text[]) AS lease(id, token)
              ON j.id = lease.id AND j.lease_token = lease.token
            WHERE j.state = 'running' ORDER BY j.id FOR UPDATE OF j
        ), locked AS (
            SELECT scope, head FROM feeds
            WHERE scope = ANY($3::text[]) AND (SELECT count(*) FROM feeds WHERE scope = ANY($3::text[])) = cardinality($3::text[])
            ORDER BY scope FOR UPDATE
        )
        SELECT NULL::text, id FROM held UNION ALL SELECT scope, head FROM locked
        """
    typealias Row = (String?, Int64)

    var leases: [JobLease]
    var scopes: [String]

    func makeBindings() throws -> PostgresBindings { PostgresBindings(leases.map(\.id), leases.map(\.token), scopes) }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// An apply's reads in one snapshot, taken after its locks: rows of four kinds, told apart by the
/// first column (0 entities, 1 idempotency records, 2 households with their members, 3 derivation
/// inputs).
struct LoadForApplyStatement: PostgresPreparedStatement {
    static let name = "sg_apply_load"
    static let sql = """
        SELECT 0, e.scope, e.entity_type, e.entity_id, e.version, e.data::text, e.meta::text, e.client_ts, e.updated_at
        FROM unnest($1::text[], $2::text[], $3::text[]) AS k(scope, entity_type, entity_id)
        JOIN entities e ON e.scope = k.scope AND e.entity_type = k.entity_type AND e.entity_id = k.entity_id
        UNION ALL
        SELECT 1, a.user_id, a.idempotency_key, NULL, a.version, NULL, NULL, NULL, NULL
        FROM unnest($4::text[], $5::text[]) AS r(user_id, idempotency_key)
        JOIN applied_operations a ON a.user_id = r.user_id AND a.idempotency_key = r.idempotency_key
        UNION ALL
        SELECT 2, h.household_id, h.owner_id, m.user_id, h.archived::int::bigint, m.role, NULL, NULL, NULL
        FROM households h LEFT JOIN household_members m ON m.household_id = h.household_id
        WHERE h.household_id = ANY($6::text[])
        UNION ALL
        SELECT 3, e.scope, e.entity_type, e.entity_id, e.version, e.data::text, e.meta::text, e.client_ts, e.updated_at
        FROM unnest($7::text[], $8::text[], $9::text[]) AS k(scope, entity_type, entity_id)
        JOIN entities e ON e.scope = k.scope AND e.entity_type = k.entity_type AND e.entity_id = k.entity_id
        UNION ALL
        SELECT 3, e.scope, e.entity_type, e.entity_id, e.version, e.data::text, e.meta::text, e.client_ts, e.updated_at
        FROM unnest($10::text[], $11::text[], $12::text[]) AS g(scope, entity_type, group_key)
        JOIN entities e ON e.scope = g.scope AND e.entity_type = g.entity_type AND e.group_key = g.group_key
        WHERE e.group_key IS NOT NULL AND e.data IS NOT NULL
        """
    typealias Row = (Int, String, String, String?, Int64?, String?, String?, Int64?, Int64?)

    var reads: ApplyReads
    /// The derivation inputs of `reads` (kind 3), read as ``LoadEntitiesStatement`` reads them.
    var inputs: EntityProbes

    func makeBindings() throws -> PostgresBindings {
        PostgresBindings(
            reads.entities.map(\.scope.key),
            reads.entities.map(\.entityType),
            reads.entities.map(\.entityID),
            reads.idempotencyKeys.map(\.userID),
            reads.idempotencyKeys.map(\.key),
            reads.households,
            inputs
        )
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// Entities by key, and the live members of derivation groups: what an apply loads after its
/// first read (parents only stored documents name, the inputs of a group the first read could
/// not know of). Each group is read by its key in the group index, whatever the statistics say
/// of the user's other groups.
struct LoadEntitiesStatement: PostgresPreparedStatement {
    static let name = "sg_load_entities"
    static let sql = """
        SELECT e.scope, e.entity_type, e.entity_id, e.version, e.data::text, e.meta::text, e.client_ts, e.updated_at
        FROM unnest($1::text[], $2::text[], $3::text[]) AS k(scope, entity_type, entity_id)
        JOIN entities e ON e.scope = k.scope AND e.entity_type = k.entity_type AND e.entity_id = k.entity_id
        UNION ALL
        SELECT e.scope, e.entity_type, e.entity_id, e.version, e.data::text, e.meta::text, e.client_ts, e.updated_at
        FROM unnest($4::text[], $5::text[], $6::text[]) AS g(scope, entity_type, group_key)
        JOIN entities e ON e.scope = g.scope AND e.entity_type = g.entity_type AND e.group_key = g.group_key
        WHERE e.group_key IS NOT NULL AND e.data IS NOT NULL
        """
    typealias Row = PostgresDriver.EntityColumns

    var probes: EntityProbes

    func makeBindings() throws -> PostgresBindings { PostgresBindings(probes) }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// Entity queries as the fixed-shape statements bind them (``LoadEntitiesStatement``, the
/// derivation inputs of ``LoadForApplyStatement``): three arrays of keys, three of groups.
struct EntityProbes: StatementParameter {
    var keys: [EntityKey] = []
    /// (scope, type, group key) of each group whose live members to read.
    var groups: [(scope: String, type: String, key: String)] = []
    /// The ranges among the queries (a rebuild's, never an apply's): no fixed shape reads them.
    var ranges: [EntityQuery] = []

    init(_ queries: [EntityQuery]) {
        for query in queries {
            switch query {
            case .keys(let more): keys += more
            case .groupMembers(let scope, let type, let members): groups += members.map { (scope.key, type, $0) }
            case .groupRange, .idRange: ranges.append(query)
            }
        }
    }

    /// Six parameters: the keys' scopes, types and ids, the groups' scopes, types and keys.
    func bind(to bindings: inout PostgresBindings) {
        bindings.append(keys.map(\.scope.key))
        bindings.append(keys.map(\.entityType))
        bindings.append(keys.map(\.entityID))
        bindings.append(groups.map(\.scope))
        bindings.append(groups.map(\.type))
        bindings.append(groups.map(\.key))
    }
}

extension PostgresDriver {
    /// The CTE `at (s, at)`: the commit time of the changes a statement appends to each feed of
    /// its CTE `w` (column `s`). Commit times (migration 0005) are the transaction's start, raised
    /// to the feed's newest change, so that within a feed they follow commit order as sequence
    /// numbers do (the feed is locked). One index probe per feed: MATERIALIZED, or the planner
    /// inlines it into the insert that joins it and probes once per change, each probe walking
    /// back over the changes the statement has appended (QueryPlanTests).
    static let commitTimes = """
        at AS MATERIALIZED (
            SELECT f.s, greatest(floor(extract(epoch FROM now()) * 1000)::bigint,
                                 coalesce((SELECT max(c.committed_at) FROM changes c WHERE c.scope = f.s), 0)) AS at
            FROM (SELECT DISTINCT s FROM w) f
        )
        """
}

/// Everything an apply writes, in one statement: entities and their changes, feed heads,
/// idempotency records, the jobs' results and their devices' watermarks; then the
/// notifications, which PostgreSQL delivers at commit. Arrays cannot carry SQL NULLs here: the
/// JSON text `null` stands for "no document", and an empty string for no group key, origin or writer.
struct WriteAppliedStatement: PostgresPreparedStatement {
    static let name = "sg_apply_write"
    static let sql = """
        WITH w AS (
            SELECT s, t, i, v, nullif(d, 'null')::jsonb AS d, nullif(m, 'null')::jsonb AS m, c, u, nullif(g, '') AS g, q, nullif(o, '') AS o,
                   nullif(r, '') AS r
            FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::text[], $10::bigint[],
                        $24::text[], $25::text[])
                 AS w(s, t, i, v, d, m, c, u, g, q, o, r)
        ), upserted AS (
            INSERT INTO entities (scope, entity_type, entity_id, version, data, meta, client_ts, updated_at, group_key)
            SELECT s, t, i, v, d, m, c, u, g FROM w
            ON CONFLICT (scope, entity_type, entity_id) DO UPDATE SET
                version = excluded.version, data = excluded.data, meta = excluded.meta,
                client_ts = excluded.client_ts, updated_at = excluded.updated_at, group_key = excluded.group_key
        ), \(PostgresDriver.commitTimes), appended AS (
            INSERT INTO changes (scope, seq, entity_type, entity_id, version, data, updated_at, committed_at, origin, writer)
            SELECT w.s, w.q, w.t, w.i, w.v, w.d, w.u, at.at, w.o, w.r FROM w JOIN at ON at.s = w.s
        ), advanced AS (
            UPDATE feeds SET head = h.head FROM unnest($11::text[], $12::bigint[]) AS h(scope, head) WHERE feeds.scope = h.scope
        ), recorded AS (
            INSERT INTO applied_operations (user_id, idempotency_key, version, applied_at)
            SELECT r.u, r.k, nullif(r.v, -1), coalesce(timestamptz 'epoch' + $13::bigint * interval '1 millisecond', now())
            FROM unnest($14::text[], $15::text[], $16::bigint[]) AS r(u, k, v)
        ), finished AS (
            UPDATE jobs SET state = f.state, results = f.results, last_error = NULL,
                finished_at = coalesce(timestamptz 'epoch' + $13::bigint * interval '1 millisecond', now()),
                updated_at = coalesce(timestamptz 'epoch' + $13::bigint * interval '1 millisecond', now()),
                lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
            FROM unnest($17::bigint[], $18::text[], $19::text[]) AS f(id, state, results)
            WHERE jobs.id = f.id
        ), watermarks AS (
            INSERT INTO devices (user_id, device_id, last_finished_job_id)
            SELECT u, d, max(j) FROM unnest($20::text[], $21::text[], $17::bigint[]) AS f(u, d, j)
            GROUP BY u, d ORDER BY u, d
            ON CONFLICT (user_id, device_id) DO UPDATE
            SET last_finished_job_id = greatest(devices.last_finished_job_id, excluded.last_finished_job_id), updated_at = now()
        )
        SELECT pg_notify($22::text, payload)::text FROM unnest($23::text[]) AS payload
        """
    typealias Row = String?

    var write: ApplyWrite
    var now: Int64?

    func makeBindings() throws -> PostgresBindings {
        let entities = write.entities
        let heads = write.heads.sorted { $0.key < $1.key }
        return PostgresBindings(
            entities.map(\.row.scope),
            entities.map(\.row.entityType),
            entities.map(\.row.entityID),
            entities.map(\.row.version),
            entities.map { $0.row.data ?? "null" },
            entities.map { $0.row.meta ?? "null" },
            entities.map(\.row.clientTimestamp),
            entities.map(\.row.updatedAt),
            entities.map { $0.groupKey ?? "" },
            entities.map(\.sequence),
            heads.map(\.key.key),
            heads.map(\.value),
            now,
            write.records.map(\.userID),
            write.records.map(\.key),
            write.records.map { $0.version ?? -1 },
            write.finished.map(\.id),
            write.finished.map(\.state.rawValue),
            write.finished.map(\.results),
            write.finished.map(\.userID),
            write.finished.map(\.deviceID),
            PostgresDriver.channel,
            write.events.map(NotificationPayload.encode),
            entities.map { $0.origin ?? "" },
            entities.map { $0.writer ?? "" }
        )
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// What a pull plans with, in one snapshot: the user's active households, resync epoch, scopes
/// version, the device's watermark, and the head and floor of every feed it may read.
struct PullContextStatement: PostgresPreparedStatement {
    static let name = "sg_pull_context"
    static let sql = """
        WITH households AS (
            SELECT m.household_id FROM household_members m JOIN households h ON h.household_id = m.household_id
            WHERE m.user_id = $1::text AND NOT h.archived
        ), feed_list AS (
            SELECT 'h:' || household_id AS scope FROM households
            UNION SELECT 'u:' || $1::text UNION SELECT unnest($3::text[])
        )
        SELECT
            coalesce((SELECT array_agg(household_id ORDER BY household_id) FROM households), '{}'),
            coalesce((SELECT resync_epoch FROM users WHERE user_id = $1::text), 0)
                + (SELECT value FROM settings WHERE key = 'resync_epoch'),
            coalesce((SELECT scopes_version FROM users WHERE user_id = $1::text), 0),
            coalesce((SELECT last_finished_job_id FROM devices WHERE user_id = $1::text AND device_id = $2::text), 0),
            coalesce((SELECT array_agg(f.scope ORDER BY f.scope) FROM feeds f JOIN feed_list l ON l.scope = f.scope), '{}'),
            coalesce((SELECT array_agg(f.head ORDER BY f.scope) FROM feeds f JOIN feed_list l ON l.scope = f.scope), '{}'),
            coalesce((SELECT array_agg(f.floor ORDER BY f.scope) FROM feeds f JOIN feed_list l ON l.scope = f.scope), '{}')
        """
    typealias Row = ([String], Int64, Int64, Int64, [String], [Int64], [Int64])

    var userID: String
    var deviceID: String
    var extraScopes: [String]

    func makeBindings() throws -> PostgresBindings { PostgresBindings(userID, deviceID, extraScopes) }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// The rows of ``ReadChangesStatement`` and ``ReadFeedsStatement``: first a floor row (kind 0)
/// per feed read, then the change rows (kind 1), each with its read's ordinal. `$1` holds the
/// reads' scopes and `$3` the entity types (`NULL`: all); a lateral join over `feedChanges`
/// gives each read one index range.
enum FeedReadRows {
    static let floors = """
        SELECT 0, r.ord, NULL::bigint, NULL::text, NULL::text, NULL::bigint, NULL::text, f.floor, NULL::text
        FROM unnest($1::text[]) WITH ORDINALITY AS r(scope, ord) JOIN feeds f ON f.scope = r.scope
        """
    static let changes = "SELECT 1, r.ord, c.seq, c.entity_type, c.entity_id, c.version, c.data::text, c.updated_at, c.origin"
    static let feedChanges = """
        SELECT seq, entity_type, entity_id, version, data, updated_at, origin FROM changes c
        WHERE c.scope = r.scope AND c.seq > r.after AND ($3::text[] IS NULL OR c.entity_type = ANY($3::text[]))
        """
    typealias Row = (Int, Int64, Int64?, String?, String?, Int64?, String?, Int64?, String?)
}

/// A page of changes, in one statement (one snapshot): the floor of every feed of the reads,
/// then each feed's changes after its position in feed order, `limit + 1` rows in all at most —
/// a feed gets at most one row more than the page still has room for, and the feeds after the
/// page filled are not read at all. Each feed is read in key order (scope, seq), one index range
/// per feed (the lateral join leaves the planner no other way): never the whole feed, whatever
/// the statistics say (`QueryPlanTests`).
struct ReadChangesStatement: PostgresPreparedStatement {
    static let name = "sg_read_changes"
    static let sql = """
        \(FeedReadRows.floors)
        UNION ALL
        (\(FeedReadRows.changes)
         FROM unnest($1::text[], $2::bigint[], $5::bigint[]) WITH ORDINALITY AS r(scope, after, through, ord)
         CROSS JOIN LATERAL (\(FeedReadRows.feedChanges) AND c.seq <= r.through ORDER BY c.seq LIMIT $4::bigint + 1) c
         LIMIT $4::bigint + 1)
        """
    typealias Row = FeedReadRows.Row

    var reads: [PullPlan.FeedRead]
    var types: [String]?
    var limit: Int

    func makeBindings() throws -> PostgresBindings {
        PostgresBindings(reads.map(\.scope.key), reads.map(\.after), types, Int64(limit), reads.map { $0.through ?? .max })
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// The feed reads of live waiters: each request's rows after its position (its own limit), and
/// its feed's floor, by the request's ordinal; one statement for the waiters a commit woke.
struct ReadFeedsStatement: PostgresPreparedStatement {
    static let name = "sg_read_feeds"
    static let sql = """
        \(FeedReadRows.floors)
        UNION ALL
        \(FeedReadRows.changes)
        FROM unnest($1::text[], $2::bigint[], $4::bigint[]) WITH ORDINALITY AS r(scope, after, lim, ord)
        CROSS JOIN LATERAL (\(FeedReadRows.feedChanges) ORDER BY c.seq LIMIT r.lim) c
        """
    typealias Row = FeedReadRows.Row

    /// Requests of the same types (one statement per distinct set).
    var requests: [FeedReadRequest]
    var types: [String]?

    func makeBindings() throws -> PostgresBindings { PostgresBindings(requests.map(\.scope.key), requests.map(\.after), types, requests.map { Int64($0.limit) + 1 }) }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// The live waiters' safety net: heads, scopes versions and the resync epoch in one snapshot.
struct WatchStateStatement: PostgresPreparedStatement {
    static let name = "sg_watch_state"
    static let sql = """
        SELECT 'feed', scope, head FROM feeds WHERE scope = ANY($1::text[])
        UNION ALL
        SELECT 'user', user_id, scopes_version FROM users WHERE user_id = ANY($2::text[])
        UNION ALL
        SELECT 'epoch', '', value FROM settings WHERE key = 'resync_epoch'
        """
    typealias Row = (String, String, Int64)

    var feeds: [String]
    var users: [String]

    func makeBindings() throws -> PostgresBindings { PostgresBindings(feeds, users) }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

extension PostgresConnection {
    /// Runs a prepared statement (preparing it on this connection the first time) and collects its rows.
    func rows<Statement: PostgresPreparedStatement>(_ statement: Statement, logger: Logger) async throws -> [Statement.Row] {
        var rows: [Statement.Row] = []
        for try await row in try await execute(statement, logger: logger) { rows.append(row) }
        return rows
    }
}
