import GRDB
import SyncGateCore
import SyncGateWire
import SyncGateStorage

/// One open IMMEDIATE transaction: each step is one access to the writer connection, and the
/// announcements wait for the commit.
final class SQLiteTransaction: StorageTransaction {
    let driver: SQLiteDriver
    /// Milliseconds since the epoch: SQLite has no clock of its own here.
    let now: Int64
    /// Accesses to the writer so far, the COMMIT that follows the steps included: each is a hop
    /// to the writer's queue and back, SQLite's round trip (its statements are calls into the
    /// library).
    private(set) var roundTrips = 1
    /// Whether the first step has run: it begins the transaction, in the same access.
    private(set) var begun = false
    private(set) var events: [StoreEvent] = []

    init(driver: SQLiteDriver, now: Timestamp) {
        self.driver = driver
        self.now = now.millisecondsSinceEpoch
    }

    /// Runs one step's statements on the writer, in one access; the first begins the transaction.
    private func step<Result: Sendable>(_ body: @escaping @Sendable (Database) throws -> Result) async throws -> Result {
        roundTrips += 1
        guard begun else {
            begun = true
            return try await driver.onWriter { db in
                try db.execute(cached: "BEGIN IMMEDIATE")
                return try body(db)
            }
        }
        return try await driver.onWriter(body)
    }

    func lock(jobs leases: [JobLease], feeds scopes: [Scope]) async throws -> ApplyLocks {
        // The IMMEDIATE transaction already excludes every other writer: checking is locking.
        let list = JSONValue.rows(leases.map { [.int($0.id), .string($0.token)] })
        let keys = JSONValue.strings(scopes.map(\.key))
        return try await step { db in
            var locks = ApplyLocks(jobs: [], heads: [:])
            locks.jobs = Set(
                try Int64.fetchAll(
                    db,
                    cached: """
                        SELECT j.id FROM json_each(?) l JOIN jobs j
                          ON j.id = json_extract(l.value, '$[0]') AND j.lease_token = json_extract(l.value, '$[1]')
                        WHERE j.state = 'running'
                        """,
                    arguments: [list]
                )
            )
            if !scopes.isEmpty { locks.heads = try Self.createFeeds(db, keys) }
            return locks
        }
    }

    /// Creates the missing feeds of `keys` (a JSON array) and returns every one's head.
    private static func createFeeds(_ db: Database, _ keys: String) throws -> [Scope: Int64] {
        try db.execute(cached: "INSERT OR IGNORE INTO feeds (scope) SELECT value FROM json_each(?)", arguments: [keys])
        var heads: [Scope: Int64] = [:]
        for row in try Row.fetchAll(db, cached: "SELECT scope, head FROM feeds WHERE scope IN (SELECT value FROM json_each(?))", arguments: [keys]) {
            if let scope = Scope(key: row["scope"]) { heads[scope] = row["head"] }
        }
        return heads
    }

    func lockFeeds(_ scopes: [Scope]) async throws -> [Scope: Int64] {
        let keys = JSONValue.strings(scopes.map(\.key))
        return try await step { db in try Self.createFeeds(db, keys) }
    }

    func load(_ reads: ApplyReads) async throws -> ApplyRows {
        let entities = SQLiteDriver.entitySelect([.keys(reads.entities)])
        let keys = JSONValue.rows(reads.idempotencyKeys.map { [.string($0.userID), .string($0.key)] })
        let households = JSONValue.strings(reads.households)
        let inputs = SQLiteDriver.entitySelect(reads.inputs)
        return try await step { db in
            var rows = ApplyRows()
            rows.entities = try entities.rows(db)
            rows.inputs = try inputs.rows(db)
            for row in try Row.fetchAll(
                db,
                cached: """
                    SELECT a.user_id, a.idempotency_key, a.version FROM json_each(?) r JOIN applied_operations a
                      ON a.user_id = json_extract(r.value, '$[0]') AND a.idempotency_key = json_extract(r.value, '$[1]')
                    """,
                arguments: [keys]
            ) {
                rows.recorded[IdempotencyKey(userID: row[0], key: row[1])] = .some(row[2])
            }
            rows.households = try Row.fetchAll(
                db,
                cached: """
                    SELECT h.household_id, h.owner_id, h.archived, m.user_id, m.role
                    FROM households h LEFT JOIN household_members m ON m.household_id = h.household_id
                    WHERE h.household_id IN (SELECT value FROM json_each(?))
                    """,
                arguments: [households]
            ).map(SQLiteDriver.householdRow)
            return rows
        }
    }

    func loadEntities(_ queries: [EntityQuery]) async throws -> [StoredEntityRow] {
        let select = SQLiteDriver.entitySelect(queries)
        guard select.branches > 0 else { return [] }
        return try await step { db in try select.rows(db) }
    }

    func write(_ write: ApplyWrite) async throws {
        let now = self.now
        try await step { db in
            try Self.writeEntities(db, write.entities, heads: write.heads)
            try Self.record(db, write.records, now: now)
            try Self.finish(db, write.finished, now: now)
        }
        events += write.events
    }

    func writeEntities(_ entities: [EntityRowWrite], heads: [Scope: Int64]) async throws {
        guard !entities.isEmpty else { return }
        try await step { db in try Self.writeEntities(db, entities, heads: heads) }
    }

    /// Upserts entities, appends one change per entity (at its `sequence`) and sets the feed heads,
    /// a cached statement run per row: SQLite runs in process, so a statement is a library call,
    /// not a round trip, and rows bound as parameters cost far less than rows read from a JSON
    /// parameter with `json_each` (docs/performance-log.md, "SQLite: the apply's rows bound").
    private static func writeEntities(_ db: Database, _ entities: [EntityRowWrite], heads: [Scope: Int64]) throws {
        guard !entities.isEmpty else { return }
        let upsert = try db.cachedStatement(
            sql: """
                INSERT INTO entities (scope, entity_type, entity_id, version, data, meta, client_ts, updated_at, group_key)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (scope, entity_type, entity_id) DO UPDATE SET
                    version = excluded.version, data = excluded.data, meta = excluded.meta,
                    client_ts = excluded.client_ts, updated_at = excluded.updated_at, group_key = excluded.group_key
                """
        )
        let append = try db.cachedStatement(
            sql: """
                INSERT INTO changes (scope, seq, entity_type, entity_id, version, data, updated_at, committed_at, origin, writer)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
        )
        // Commit times: the clock, raised to the feed's newest change (migration 0004); one for
        // all of a feed's changes in this write.
        let clock = try Int64.fetchOne(db, cached: "SELECT \(SQLiteDriver.clockMilliseconds)") ?? 0
        let newest = try db.cachedStatement(sql: "SELECT coalesce(max(committed_at), 0) FROM changes WHERE scope = ?")
        var committedAt: [String: Int64] = [:]
        for write in entities {
            let entity = write.row
            let commitTime: Int64
            if let known = committedAt[entity.scope] {
                commitTime = known
            } else {
                commitTime = max(clock, try Int64.fetchOne(newest, arguments: [entity.scope]) ?? 0)
                committedAt[entity.scope] = commitTime
            }
            try upsert.execute(arguments: [
                entity.scope, entity.entityType, entity.entityID, entity.version, entity.data, entity.meta,
                entity.clientTimestamp, entity.updatedAt, write.groupKey,
            ])
            try append.execute(arguments: [
                entity.scope, write.sequence, entity.entityType, entity.entityID, entity.version, entity.data,
                entity.updatedAt, commitTime, write.origin, write.writer,
            ])
        }
        let advance = try db.cachedStatement(sql: "UPDATE feeds SET head = ? WHERE scope = ?")
        for (scope, head) in heads.sorted(by: { $0.key < $1.key }) {
            try advance.execute(arguments: [head, scope.key])
        }
    }

    /// A plain INSERT, as on PostgreSQL: a key recorded twice aborts the transaction.
    private static func record(_ db: Database, _ records: [IdempotencyRecord], now: Int64) throws {
        guard !records.isEmpty else { return }
        let insert = try db.cachedStatement(
            sql: "INSERT INTO applied_operations (user_id, idempotency_key, version, applied_at) VALUES (?, ?, ?, ?)"
        )
        for record in records {
            try insert.execute(arguments: [record.userID, record.key, record.version, now])
        }
    }

    /// Finishes jobs with their results and advances their devices' watermarks.
    /// `errors` with the attempt that failed appended (its error and time the parameters named),
    /// the last 20 kept, oldest first.
    static func appendError(error: String, at: String) -> String {
        """
        (SELECT json_group_array(json(value)) FROM (SELECT key, value FROM (
            SELECT key, value FROM json_each(json_insert(coalesce(errors, '[]'), '$[#]', json_object('at', \(at), 'attempt', attempts, 'error', \(error))))
            ORDER BY key DESC LIMIT 20) ORDER BY key))
        """
    }

    private static func finish(_ db: Database, _ finished: [FinishedJob], error: String? = nil, now: Int64) throws {
        for finish in finished {
            try db.execute(
                cached: """
                    UPDATE jobs SET state = ?, results = ?, last_error = ?, finished_at = ?, updated_at = ?,
                        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
                        errors = CASE WHEN ?3 IS NULL THEN errors ELSE \(appendError(error: "?3", at: "?4")) END
                    WHERE id = ?
                    """,
                arguments: [finish.state.rawValue, finish.results, error, now, now, finish.id]
            )
            try db.execute(
                cached: """
                    INSERT INTO devices (user_id, device_id, last_finished_job_id, updated_at) VALUES (?, ?, ?, ?)
                    ON CONFLICT (user_id, device_id) DO UPDATE
                    SET last_finished_job_id = max(devices.last_finished_job_id, excluded.last_finished_job_id), updated_at = excluded.updated_at
                    """,
                arguments: [finish.userID, finish.deviceID, finish.id, now]
            )
        }
    }

    func dropEmptyFeeds(_ scopes: [Scope]) async throws {
        guard !scopes.isEmpty else { return }
        let keys = JSONValue.strings(scopes.map(\.key))
        try await step { db in
            try db.execute(cached: "DELETE FROM feeds WHERE scope IN (SELECT value FROM json_each(?)) AND head = 0", arguments: [keys])
        }
    }

    func writeHouseholds(_ households: [HouseholdState]) async throws {
        guard !households.isEmpty else { return }
        let now = self.now
        let list = JSONValue.rows(households.map { [.string($0.id), .string($0.ownerID), .bool($0.archived)] })
        let members = JSONValue.rows(households.flatMap { household in
            household.members.sorted { $0.key < $1.key }.map { [.string(household.id), .string($0.key.id), .string($0.value.rawValue)] }
        })
        let ids = JSONValue.strings(households.map(\.id))
        try await step { db in
            try db.execute(
                cached: """
                    INSERT INTO households (household_id, owner_id, archived, created_at, updated_at)
                    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), ?, ? FROM json_each(?) WHERE true
                    ON CONFLICT (household_id) DO UPDATE SET owner_id = excluded.owner_id, archived = excluded.archived, updated_at = excluded.updated_at
                    """,
                arguments: [now, now, list]
            )
            try db.execute(
                cached: """
                    DELETE FROM household_members
                    WHERE household_id IN (SELECT value FROM json_each(?))
                      AND NOT EXISTS (
                          SELECT 1 FROM json_each(?) m
                          WHERE json_extract(m.value, '$[0]') = household_members.household_id AND json_extract(m.value, '$[1]') = household_members.user_id
                      )
                    """,
                arguments: [ids, members]
            )
            try db.execute(
                cached: """
                    INSERT INTO household_members (household_id, user_id, role, joined_at)
                    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), ? FROM json_each(?) WHERE true
                    ON CONFLICT (household_id, user_id) DO UPDATE SET role = excluded.role
                    """,
                arguments: [now, members]
            )
        }
    }

    func finishJob(_ job: FinishedJob, error: String?) async throws {
        let now = self.now
        try await step { db in try Self.finish(db, [job], error: error, now: now) }
    }

    func retryJob(id: Int64, delayMilliseconds: Int64, error: String) async throws {
        let now = self.now
        try await step { db in
            try db.execute(
                cached: """
                    UPDATE jobs SET state = 'retrying', run_at = ?, last_error = ?, lease_owner = NULL, lease_token = NULL,
                        lease_expires_at = NULL, updated_at = ?3, errors = \(Self.appendError(error: "?2", at: "?3"))
                    WHERE id = ?
                    """,
                arguments: [now + delayMilliseconds, error, now, id]
            )
        }
    }

    func expiredLeases(limit: Int) async throws -> [ClaimedJob<String>] {
        let now = self.now
        return try await step { db in
            try Row.fetchAll(
                db,
                cached: "SELECT \(SQLiteDriver.claimedColumns) FROM jobs WHERE state = 'running' AND lease_expires_at < ? ORDER BY id LIMIT ?",
                arguments: [now, limit]
            ).map(SQLiteDriver.claimedJob)
        }
    }

    func lockWaitingJob(id: Int64) async throws -> JobDetail? {
        // The transaction holds SQLite's write lock: no claim runs beside it.
        try await step { db in
            try Row.fetchOne(
                db,
                cached: """
                    SELECT \(SQLiteDriver.jobDetailColumns) FROM jobs WHERE id = ? AND state IN ('queued', 'retrying')
                      AND NOT EXISTS (
                          SELECT 1 FROM jobs earlier
                          WHERE earlier.user_id = jobs.user_id AND earlier.device_id = jobs.device_id AND earlier.id < jobs.id
                            AND earlier.state IN ('queued', 'running', 'retrying')
                      )
                    """,
                arguments: [id]
            ).map(SQLiteDriver.jobDetail)
        }
    }

    func eraseUser(_ userID: String, households: [String]) async throws -> ErasedUser {
        let scope = Scope.user(userID).key
        let householdScopes = JSONValue.array(households.map { .string(Scope.household($0).key) }).serialized()
        return try await step { db in
            var erased = ErasedUser()
            func count(_ sql: String, _ arguments: StatementArguments) throws -> Int {
                try db.execute(sql: sql, arguments: arguments)
                return db.changesCount
            }
            erased.jobs = try count("DELETE FROM jobs WHERE user_id = ?", [userID])
            erased.idempotencyRecords = try count("DELETE FROM applied_operations WHERE user_id = ?", [userID])
            erased.devices = try count("DELETE FROM devices WHERE user_id = ?", [userID])
            erased.pushRegistrations = try count("DELETE FROM push_registrations WHERE user_id = ?", [userID])
            _ = try count("DELETE FROM push_presence WHERE user_id = ?", [userID])
            erased.entities = try count("DELETE FROM entities WHERE scope = ?", [scope])
            erased.changes = try count("DELETE FROM changes WHERE scope = ?", [scope])
            _ = try count("DELETE FROM webhook_deliveries WHERE scope = ?", [scope])
            _ = try count("DELETE FROM push_positions WHERE scope = ?", [scope])
            // Emptied, not deleted: sequence numbers go on from the head (see the PostgreSQL driver).
            _ = try count("UPDATE feeds SET floor = head, compacted = head, webhooked = head WHERE scope = ?", [scope])
            // Of archived households only: a live one's membership is its feed's, changed by jobs.
            _ = try count(
                "DELETE FROM household_members WHERE user_id = ? AND household_id IN (SELECT household_id FROM households WHERE archived = 1)", [userID]
            )
            // A writer is `<device id>/<user id>`: device ids hold no `/`, user ids may.
            erased.householdChangesUnattributed = try count(
                "UPDATE changes SET writer = NULL WHERE scope IN (SELECT value FROM json_each(?)) AND substr(writer, instr(writer, '/') + 1) = ?",
                [householdScopes, userID]
            )
            return erased
        }
    }

    func requeueDeadJobs(ids: [Int64]?) async throws -> Int {
        let now = self.now
        let list = JSONValue.array((ids ?? []).map(JSONValue.int)).serialized()
        return try await step { db in
            try db.execute(
                cached: """
                    UPDATE jobs SET state = 'queued', attempts = 0, run_at = ?, results = NULL, finished_at = NULL,
                        last_error = 'retried by an operator after: ' || coalesce(last_error, ''), updated_at = ?
                    WHERE state = 'dead' AND (? OR id IN (SELECT value FROM json_each(?)))
                      AND NOT EXISTS (
                          SELECT 1 FROM jobs later
                          WHERE later.user_id = jobs.user_id AND later.id > jobs.id AND later.state IN ('queued', 'running', 'retrying')
                      )
                    """,
                arguments: [now, now, ids == nil, list]
            )
            return db.changesCount
        }
    }

    /// A purge's deletes: the tombstones of the list (JSON rows of type, id, seq, version) and
    /// every older change of their entities; then each one's entity by its key. Each row of the
    /// list is looked up by key (RetentionTests checks the plans), so a batch costs its size.
    static let purgeChanges = """
        DELETE FROM changes WHERE (scope, seq) IN (
            SELECT c.scope, c.seq FROM json_each(?) p CROSS JOIN changes c
            ON c.scope = ? AND c.entity_type = json_extract(p.value, '$[0]') AND c.entity_id = json_extract(p.value, '$[1]')
               AND c.seq <= json_extract(p.value, '$[2]')
        )
        """
    static let purgeEntities = """
        DELETE FROM entities WHERE (scope, entity_type, entity_id) IN (
            SELECT e.scope, e.entity_type, e.entity_id FROM json_each(?) p CROSS JOIN entities e
            ON e.scope = ? AND e.entity_type = json_extract(p.value, '$[0]') AND e.entity_id = json_extract(p.value, '$[1]')
            WHERE e.data IS NULL AND e.version = json_extract(p.value, '$[3]')
        )
        """

    func purgeTombstones(scope: Scope, before cutoff: Timestamp, limit: Int) async throws -> Int {
        try await step { db in
            let purged = try Row.fetchAll(
                db,
                cached: """
                    SELECT seq, entity_type, entity_id, version FROM changes
                    WHERE scope = ? AND data IS NULL AND updated_at < ?
                      -- While a webhook subscription exists, only tombstones every subscription
                      -- has received (none of a feed without a row).
                      AND (NOT EXISTS (SELECT 1 FROM webhook_subscriptions)
                           OR seq <= (SELECT \(SQLiteDriver.webhookReceivedBound) FROM feeds WHERE scope = ?))
                    ORDER BY seq LIMIT ?
                    """,
                arguments: [scope.key, cutoff.millisecondsSinceEpoch, scope.key, limit]
            )
            guard let newest = purged.map({ $0["seq"] as Int64 }).max() else { return 0 }
            let list = JSONValue.rows(purged.map { [.string($0["entity_type"]), .string($0["entity_id"]), .int($0["seq"]), .int($0["version"])] })
            // The tombstones and every older change of their entities: a new reader must not see them alive.
            try db.execute(cached: Self.purgeChanges, arguments: [list, scope.key])
            // Each tombstone's entity by its key, unless written again since. (Matching every
            // entity against the whole list instead, in a correlated subquery, made a batch of
            // 5,000 take ~11 s under the one writer: RetentionTests.)
            try db.execute(cached: Self.purgeEntities, arguments: [list, scope.key])
            try db.execute(cached: "UPDATE feeds SET floor = max(floor, ?) WHERE scope = ?", arguments: [newest, scope.key])
            return purged.count
        }
    }

    func bumpResyncEpoch(userID: String?) async throws {
        try await step { db in
            if let userID {
                try db.execute(
                    cached: "INSERT INTO users (user_id, resync_epoch) VALUES (?, 1) ON CONFLICT (user_id) DO UPDATE SET resync_epoch = users.resync_epoch + 1",
                    arguments: [userID]
                )
            } else {
                try db.execute(cached: "UPDATE settings SET value = value + 1 WHERE key = 'resync_epoch'")
            }
        }
    }

    func bumpScopesVersions(userIDs: [String]) async throws -> [ExactKey: Int64] {
        guard !userIDs.isEmpty else { return [:] }
        let list = JSONValue.strings(userIDs.sorted())
        return try await step { db in
            try db.execute(
                cached: """
                    INSERT INTO users (user_id, scopes_version) SELECT value, 1 FROM json_each(?) WHERE true
                    ON CONFLICT (user_id) DO UPDATE SET scopes_version = users.scopes_version + 1
                    """,
                arguments: [list]
            )
            var versions: [ExactKey: Int64] = [:]
            for row in try Row.fetchAll(db, cached: "SELECT user_id, scopes_version FROM users WHERE user_id IN (SELECT value FROM json_each(?))", arguments: [list]) {
                versions[ExactKey(row[0])] = row[1]
            }
            return versions
        }
    }

    func announce(_ events: [StoreEvent]) async throws {
        self.events += events
    }
}
