import GRDB
public import SyncGateCore
public import SyncGateStorage

extension SQLiteStore {
    /// Applies a job in one IMMEDIATE transaction, with the same steps (and decisions) as the
    /// PostgreSQL driver: check the lease, read the feeds, load everything the batch touches in
    /// one statement per kind, decide in memory, write back with multi-row statements.
    public func apply(_ job: ClaimedJob, collections: Collections, now: Timestamp) async throws -> ApplyOutcome {
        let applier = BatchApplier(userID: job.userID, collections: collections, now: now)
        let requirements = applier.requirements(for: job.operations)
        return try await write { statements in
            let held: Int64? = try statements.value(
                "SELECT id FROM jobs WHERE id = ? AND state = 'running' AND lease_token = ?", [job.id, job.leaseToken]
            )
            guard held != nil else { return (.leaseLost, []) }

            var heads = try Self.feedHeads(requirements.scopes, statements: statements)
            var snapshot = BatchApplier.Snapshot()
            snapshot.recorded = try Self.loadRecorded(user: job.userID, keys: requirements.idempotencyKeys, statements: statements)
            snapshot.entities = try Self.loadEntities(requirements.entityKeys, statements: statements)
            snapshot.households = try Self.loadHouseholds(requirements.householdIDs, statements: statements)
            let parents = applier.parentKeys(for: job.operations, loaded: snapshot.entities).subtracting(snapshot.entities.keys)
            if !parents.isEmpty {
                snapshot.entities.merge(try Self.loadEntities(parents, statements: statements)) { stored, _ in stored }
            }

            var outcome = applier.apply(job.operations, snapshot: snapshot)
            if !outcome.summaryDays.isEmpty {
                let (logs, summaries) = try Self.loadSummaryInputs(user: job.userID, days: outcome.summaryDays, statements: statements)
                outcome.writes += applier.summaryWrites(for: outcome, storedLogs: logs, existingSummaries: summaries)
            }

            try Self.writeEntities(outcome.writes, heads: &heads, statements: statements)
            try Self.recordIdempotency(user: job.userID, outcome.recorded, statements: statements)
            try Self.writeHouseholds(outcome.households, statements: statements)
            let finished = Self.now
            try statements.execute(
                """
                UPDATE jobs SET state = 'done', results = ?, finished_at = ?, lease_owner = NULL, lease_token = NULL,
                    lease_expires_at = NULL, last_error = NULL, updated_at = ?
                WHERE id = ?
                """,
                [JobPayload.encodeResults(outcome.results), finished, finished, job.id]
            )
            try Self.recordFinished(jobID: job.id, userID: job.userID, deviceID: job.deviceID, statements: statements)
            var events: [StoreEvent] = [.jobFinished(job.id)]
            events += outcome.scopes.sorted().map(StoreEvent.feedAdvanced)
            events += outcome.wakeUsers.sorted().map { StoreEvent.feedAdvanced(.user($0)) }
            // +2: BEGIN and COMMIT, as the PostgreSQL driver counts them.
            return (.done(outcome.results, statements: statements.count + 2), events)
        }
    }

    // MARK: - Loads

    /// Creates missing feed rows and reads the heads (the write transaction is exclusive).
    static func feedHeads(_ scopes: [Scope], statements: Statements) throws -> [Scope: Int64] {
        let keys = JSONValue.array(scopes.map { .string($0.key) }).serialized()
        try statements.execute("INSERT OR IGNORE INTO feeds (scope) SELECT value FROM json_each(?)", [keys])
        var heads: [Scope: Int64] = [:]
        for row in try statements.rows("SELECT scope, head FROM feeds WHERE scope IN (SELECT value FROM json_each(?))", [keys]) {
            if let scope = Scope(key: row["scope"]) { heads[scope] = row["head"] }
        }
        return heads
    }

    static func loadRecorded(user: String, keys: [String], statements: Statements) throws -> [String: Int64?] {
        guard !keys.isEmpty else { return [:] }
        var recorded: [String: Int64?] = [:]
        for row in try statements.rows(
            "SELECT idempotency_key, version FROM applied_operations WHERE user_id = ? AND idempotency_key IN (SELECT value FROM json_each(?))",
            [user, JSONValue.array(keys.map(JSONValue.string)).serialized()]
        ) {
            recorded[row["idempotency_key"]] = .some(row["version"])
        }
        return recorded
    }

    static let entityColumns = "e.scope, e.entity_type, e.entity_id, e.version, e.data, e.meta, e.client_ts, e.updated_at"

    static func entityState(_ row: Row) -> EntityState? {
        guard let scope = Scope(key: row["scope"]) else { return nil }
        let data: String? = row["data"]
        let meta: String? = row["meta"]
        return EntityState(
            key: EntityKey(scope: scope, entityType: row["entity_type"], entityID: row["entity_id"]),
            version: row["version"],
            data: data.flatMap { try? JSONParser.stored.parse($0).objectValue },
            clientTimestamp: Timestamp(millisecondsSinceEpoch: row["client_ts"]),
            updatedAt: Timestamp(millisecondsSinceEpoch: row["updated_at"]),
            meta: EntityMeta(json: meta.flatMap { try? JSONParser.stored.parse($0) })
        )
    }

    static func loadEntities(_ keys: Set<EntityKey>, statements: Statements) throws -> [EntityKey: EntityState] {
        guard !keys.isEmpty else { return [:] }
        let list = JSONValue.rows(keys.sorted().map { [.string($0.scope.key), .string($0.entityType), .string($0.entityID)] })
        var states: [EntityKey: EntityState] = [:]
        // CROSS JOIN keeps the key list as the outer loop, probing the primary key.
        for row in try statements.rows(
            """
            SELECT \(entityColumns) FROM json_each(?) k CROSS JOIN entities e
            ON e.scope = json_extract(k.value, '$[0]') AND e.entity_type = json_extract(k.value, '$[1]') AND e.entity_id = json_extract(k.value, '$[2]')
            """,
            [list]
        ) {
            if let state = entityState(row) { states[state.key] = state }
        }
        return states
    }

    static func loadHouseholds(_ ids: Set<String>, statements: Statements) throws -> [String: HouseholdState] {
        guard !ids.isEmpty else { return [:] }
        let rows = try statements.rows(
            """
            SELECT h.household_id, h.owner_id, h.archived, m.user_id, m.role
            FROM households h LEFT JOIN household_members m ON m.household_id = h.household_id
            WHERE h.household_id IN (SELECT value FROM json_each(?))
            """,
            [JSONValue.array(ids.sorted().map(JSONValue.string)).serialized()]
        )
        return households(from: rows)
    }

    static func households(from rows: [Row]) -> [String: HouseholdState] {
        var households: [String: HouseholdState] = [:]
        for row in rows {
            let id: String = row["household_id"]
            var household = households[id] ?? HouseholdState(id: id, ownerID: row["owner_id"], archived: row["archived"])
            if let member: String = row["user_id"], let role = (row["role"] as String?).flatMap(HouseholdState.Role.init(rawValue:)) {
                household.members[member] = role
            }
            households[id] = household
        }
        return households
    }

    static func loadSummaryInputs(user: String, days: Set<String>, statements: Statements) throws -> ([EntityKey: JSONObject], [String: EntityState]) {
        let dayList = JSONValue.array(days.sorted().map(JSONValue.string)).serialized()
        let rows = try statements.rows(
            """
            SELECT \(entityColumns) FROM entities e
            WHERE e.scope = ? AND (
                (e.entity_type = ? AND e.data IS NOT NULL AND json_extract(e.data, '$.loggedDate') IN (SELECT value FROM json_each(?)))
                OR (e.entity_type = ? AND e.entity_id IN (SELECT value FROM json_each(?)))
            )
            """,
            [Scope.user(user).key, DailySummaries.sourceType, dayList, DailySummaries.summaryType, dayList]
        )
        return DailySummaries.partition(rows.lazy.compactMap(entityState))
    }

    // MARK: - Writes

    /// Upserts entity states and appends one change per state, numbering from the feed heads.
    static func writeEntities(_ states: [EntityState], heads: inout [Scope: Int64], statements: Statements) throws {
        guard !states.isEmpty else { return }
        var rows: [[JSONValue]] = []
        var advanced: Set<Scope> = []
        for state in states {
            let next = (heads[state.key.scope] ?? 0) + 1
            heads[state.key.scope] = next
            advanced.insert(state.key.scope)
            rows.append([
                .string(state.key.scope.key), .string(state.key.entityType), .string(state.key.entityID), .int(state.version),
                state.data.map { .string(JSONValue.object($0).serialized()) } ?? .null,
                state.meta.isEmpty ? .null : .string(state.meta.json.serialized()),
                .int(state.clientTimestamp.millisecondsSinceEpoch), .int(state.updatedAt.millisecondsSinceEpoch), .int(next),
            ])
        }
        let list = JSONValue.rows(rows)
        try statements.execute(
            """
            INSERT INTO entities (scope, entity_type, entity_id, version, data, meta, client_ts, updated_at)
            SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), json_extract(value, '$[3]'),
                   json_extract(value, '$[4]'), json_extract(value, '$[5]'), json_extract(value, '$[6]'), json_extract(value, '$[7]')
            FROM json_each(?) WHERE true
            ON CONFLICT (scope, entity_type, entity_id) DO UPDATE SET
                version = excluded.version, data = excluded.data, meta = excluded.meta,
                client_ts = excluded.client_ts, updated_at = excluded.updated_at
            """,
            [list]
        )
        try statements.execute(
            """
            INSERT INTO changes (scope, seq, entity_type, entity_id, version, data, updated_at)
            SELECT json_extract(value, '$[0]'), json_extract(value, '$[8]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
                   json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[7]')
            FROM json_each(?)
            """,
            [list]
        )
        let headRows = JSONValue.rows(advanced.sorted().map { [.string($0.key), .int(heads[$0] ?? 0)] })
        try statements.execute(
            """
            UPDATE feeds SET head = (SELECT json_extract(value, '$[1]') FROM json_each(?) WHERE json_extract(value, '$[0]') = feeds.scope)
            WHERE scope IN (SELECT json_extract(value, '$[0]') FROM json_each(?))
            """,
            [headRows, headRows]
        )
    }

    /// A plain INSERT, as on PostgreSQL: a key recorded twice aborts the transaction.
    static func recordIdempotency(user: String, _ records: [(key: String, version: Int64?)], statements: Statements) throws {
        guard !records.isEmpty else { return }
        try statements.execute(
            """
            INSERT INTO applied_operations (user_id, idempotency_key, version, applied_at)
            SELECT ?, json_extract(value, '$[0]'), json_extract(value, '$[1]'), ? FROM json_each(?)
            """,
            [user, now, JSONValue.rows(records.map { [.string($0.key), $0.version.map(JSONValue.int) ?? .null] })]
        )
    }

    static func writeHouseholds(_ households: [HouseholdState], statements: Statements) throws {
        guard !households.isEmpty else { return }
        let now = now
        let list = JSONValue.rows(households.map { [.string($0.id), .string($0.ownerID), .bool($0.archived)] })
        try statements.execute(
            """
            INSERT INTO households (household_id, owner_id, archived, created_at, updated_at)
            SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), ?, ? FROM json_each(?) WHERE true
            ON CONFLICT (household_id) DO UPDATE SET owner_id = excluded.owner_id, archived = excluded.archived, updated_at = excluded.updated_at
            """,
            [now, now, list]
        )
        let members = JSONValue.rows(households.flatMap { household in
            household.members.sorted { $0.key < $1.key }.map { [.string(household.id), .string($0.key), .string($0.value.rawValue)] }
        })
        let ids = JSONValue.array(households.map { .string($0.id) }).serialized()
        try statements.execute(
            """
            DELETE FROM household_members
            WHERE household_id IN (SELECT value FROM json_each(?))
              AND NOT EXISTS (
                  SELECT 1 FROM json_each(?) m
                  WHERE json_extract(m.value, '$[0]') = household_members.household_id AND json_extract(m.value, '$[1]') = household_members.user_id
              )
            """,
            [ids, members]
        )
        try statements.execute(
            """
            INSERT INTO household_members (household_id, user_id, role, joined_at)
            SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), ? FROM json_each(?) WHERE true
            ON CONFLICT (household_id, user_id) DO UPDATE SET role = excluded.role
            """,
            [now, members]
        )
    }
}
