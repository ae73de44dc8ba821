public import Logging
import PostgresNIO
public import SyncGateCore
public import SyncGateStorage

extension PostgresStore {
    /// Applies a job in one READ COMMITTED transaction whose statement count does not grow with
    /// its number of operations:
    ///
    /// 1. lock the job row, still `running` under this worker's lease token (else: lease lost);
    /// 2. create and lock the feed rows it writes, in sorted order (writers of a feed serialise
    ///    here, so sequence numbers follow commit order);
    /// 3. load idempotency records, entities, households and parents — one query each;
    /// 4. decide every operation in memory (``BatchApplier``), then the daily summaries;
    /// 5. write entities, changes, feed heads, idempotency records, households, the job's results
    ///    and the device watermark with multi-row statements, and queue the NOTIFYs.
    public func apply(_ job: ClaimedJob, collections: Collections, now: Timestamp) async throws -> ApplyOutcome {
        try await withDeadline("apply a job", .job) { [self] in
            let applier = BatchApplier(userID: job.userID, collections: collections, now: now)
            let requirements = applier.requirements(for: job.operations)
            return try await transaction { transaction in
                let held = try await transaction.query(
                    "SELECT id FROM jobs WHERE id = \(job.id) AND state = 'running' AND lease_token = \(job.leaseToken) FOR UPDATE"
                ).collect(Int64.self)
                guard !held.isEmpty else { return .leaseLost }

                var heads = try await self.lockFeeds(requirements.scopes, on: transaction)
                var snapshot = BatchApplier.Snapshot()
                snapshot.recorded = try await self.loadRecorded(user: job.userID, keys: requirements.idempotencyKeys, on: transaction)
                snapshot.entities = try await self.loadEntities(requirements.entityKeys, on: transaction)
                snapshot.households = try await self.loadHouseholds(requirements.householdIDs, on: transaction)
                let parents = applier.parentKeys(for: job.operations, loaded: snapshot.entities).subtracting(snapshot.entities.keys)
                if !parents.isEmpty {
                    snapshot.entities.merge(try await self.loadEntities(parents, on: transaction)) { stored, _ in stored }
                }

                var outcome = applier.apply(job.operations, snapshot: snapshot)
                if !outcome.summaryDays.isEmpty {
                    let (logs, summaries) = try await self.loadSummaryInputs(user: job.userID, days: outcome.summaryDays, on: transaction)
                    outcome.writes += applier.summaryWrites(for: outcome, storedLogs: logs, existingSummaries: summaries)
                }

                try await self.writeEntities(outcome.writes, heads: &heads, on: transaction)
                try await self.recordIdempotency(user: job.userID, outcome.recorded, on: transaction)
                try await self.writeHouseholds(outcome.households, on: transaction)
                try await transaction.query(
                    """
                    UPDATE jobs SET state = 'done', results = \(JobPayload.encodeResults(outcome.results)), finished_at = now(),
                        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, last_error = NULL, updated_at = now()
                    WHERE id = \(job.id)
                    """
                )
                try await self.recordFinished(jobID: job.id, userID: job.userID, deviceID: job.deviceID, on: transaction)
                var payloads = [NotificationPayload.jobFinished(job.id)]
                payloads += outcome.scopes.sorted().map(NotificationPayload.feedAdvanced)
                payloads += outcome.wakeUsers.sorted().map { NotificationPayload.feedAdvanced(.user($0)) }
                try await self.notify(payloads, on: transaction)
                // +2: BEGIN and COMMIT.
                return .done(outcome.results, statements: transaction.statements + 2)
            }
        }
    }

    // MARK: - Locks and loads

    /// Creates missing feed rows, then locks them all in sorted order; returns their heads.
    func lockFeeds(_ scopes: [Scope], on transaction: Transaction) async throws -> [Scope: Int64] {
        let keys = scopes.map(\.key).sorted()
        try await transaction.query(
            "INSERT INTO feeds (scope) SELECT unnest(\(keys)::text[]) ORDER BY 1 ON CONFLICT DO NOTHING"
        )
        let rows = try await transaction.query(
            "SELECT scope, head FROM feeds WHERE scope = ANY(\(keys)::text[]) ORDER BY scope FOR UPDATE"
        ).collect((String, Int64).self)
        var heads: [Scope: Int64] = [:]
        for (key, head) in rows {
            if let scope = Scope(key: key) { heads[scope] = head }
        }
        return heads
    }

    func loadRecorded(user: String, keys: [String], on transaction: Transaction) async throws -> [String: Int64?] {
        guard !keys.isEmpty else { return [:] }
        let rows = try await transaction.query(
            "SELECT idempotency_key, version FROM applied_operations WHERE user_id = \(user) AND idempotency_key = ANY(\(keys)::text[])"
        ).collect((String, Int64?).self)
        var recorded: [String: Int64?] = [:]
        for (key, version) in rows { recorded[key] = .some(version) }
        return recorded
    }

    static let entityColumns = "scope, entity_type, entity_id, version, data::text, meta::text, client_ts, updated_at"
    typealias EntityRow = (String, String, String, Int64, String?, String?, Int64, Int64)

    static func entityState(_ row: EntityRow) -> EntityState? {
        let (scopeKey, type, id, version, data, meta, clientTimestamp, updatedAt) = row
        guard let scope = Scope(key: scopeKey) else { return nil }
        return EntityState(
            key: EntityKey(scope: scope, entityType: type, entityID: id),
            version: version,
            data: data.flatMap { try? JSONParser.stored.parse($0).objectValue },
            clientTimestamp: Timestamp(millisecondsSinceEpoch: clientTimestamp),
            updatedAt: Timestamp(millisecondsSinceEpoch: updatedAt),
            meta: EntityMeta(json: meta.flatMap { try? JSONParser.stored.parse($0) })
        )
    }

    func loadEntities(_ keys: Set<EntityKey>, on transaction: Transaction) async throws -> [EntityKey: EntityState] {
        guard !keys.isEmpty else { return [:] }
        let sorted = keys.sorted()
        let rows = try await transaction.query(
            """
            SELECT \(unescaped: Self.entityColumns) FROM entities
            WHERE (scope, entity_type, entity_id) IN (
                SELECT * FROM unnest(\(sorted.map(\.scope.key))::text[], \(sorted.map(\.entityType))::text[], \(sorted.map(\.entityID))::text[])
            )
            """
        ).collect(EntityRow.self)
        var states: [EntityKey: EntityState] = [:]
        for row in rows {
            if let state = Self.entityState(row) { states[state.key] = state }
        }
        return states
    }

    func loadHouseholds(_ ids: Set<String>, on transaction: Transaction) async throws -> [String: HouseholdState] {
        guard !ids.isEmpty else { return [:] }
        let rows = try await transaction.query(
            """
            SELECT h.household_id, h.owner_id, h.archived, m.user_id, m.role
            FROM households h LEFT JOIN household_members m ON m.household_id = h.household_id
            WHERE h.household_id = ANY(\(Array(ids))::text[])
            """
        ).collect((String, String, Bool, String?, String?).self)
        var households: [String: HouseholdState] = [:]
        for (id, owner, archived, member, role) in rows {
            var household = households[id] ?? HouseholdState(id: id, ownerID: owner, archived: archived)
            if let member, let role = role.flatMap(HouseholdState.Role.init(rawValue:)) { household.members[member] = role }
            households[id] = household
        }
        return households
    }

    /// The user's live food logs on `days` and the stored summaries of those days.
    func loadSummaryInputs(user: String, days: Set<String>, on transaction: Transaction) async throws -> ([EntityKey: JSONObject], [String: EntityState]) {
        let scope = Scope.user(user)
        let dayList = days.sorted()
        let rows = try await transaction.query(
            """
            SELECT \(unescaped: Self.entityColumns) FROM entities
            WHERE scope = \(scope.key) AND (
                (entity_type = \(DailySummaries.sourceType) AND data IS NOT NULL AND data ->> 'loggedDate' = ANY(\(dayList)::text[]))
                OR (entity_type = \(DailySummaries.summaryType) AND entity_id = ANY(\(dayList)::text[]))
            )
            """
        ).collect(EntityRow.self)
        return DailySummaries.partition(rows.lazy.compactMap(Self.entityState))
    }

    // MARK: - Writes

    /// Upserts entity states and appends one change per state to its feed, numbering changes
    /// from the locked heads.
    func writeEntities(_ states: [EntityState], heads: inout [Scope: Int64], on transaction: Transaction) async throws {
        guard !states.isEmpty else { return }
        var scopes: [String] = [], types: [String] = [], ids: [String] = [], versions: [Int64] = []
        var documents: [String] = [], metas: [String] = [], clientTimestamps: [Int64] = [], updatedAts: [Int64] = []
        var sequences: [Int64] = []
        for state in states {
            let next = (heads[state.key.scope] ?? 0) + 1
            heads[state.key.scope] = next
            scopes.append(state.key.scope.key)
            types.append(state.key.entityType)
            ids.append(state.key.entityID)
            versions.append(state.version)
            // Arrays cannot carry SQL NULLs here: the JSON text `null` stands for "no document".
            documents.append(state.data.map { JSONValue.object($0).serialized() } ?? "null")
            metas.append(state.meta.isEmpty ? "null" : state.meta.json.serialized())
            clientTimestamps.append(state.clientTimestamp.millisecondsSinceEpoch)
            updatedAts.append(state.updatedAt.millisecondsSinceEpoch)
            sequences.append(next)
        }
        try await transaction.query(
            """
            INSERT INTO entities (scope, entity_type, entity_id, version, data, meta, client_ts, updated_at)
            SELECT s, t, i, v, nullif(d, 'null')::jsonb, nullif(m, 'null')::jsonb, c, u
            FROM unnest(\(scopes)::text[], \(types)::text[], \(ids)::text[], \(versions)::bigint[],
                        \(documents)::text[], \(metas)::text[], \(clientTimestamps)::bigint[], \(updatedAts)::bigint[])
                 AS w(s, t, i, v, d, m, c, u)
            ON CONFLICT (scope, entity_type, entity_id) DO UPDATE SET
                version = excluded.version, data = excluded.data, meta = excluded.meta,
                client_ts = excluded.client_ts, updated_at = excluded.updated_at
            """
        )
        try await transaction.query(
            """
            INSERT INTO changes (scope, seq, entity_type, entity_id, version, data, updated_at)
            SELECT s, q, t, i, v, nullif(d, 'null')::jsonb, u
            FROM unnest(\(scopes)::text[], \(sequences)::bigint[], \(types)::text[], \(ids)::text[], \(versions)::bigint[],
                        \(documents)::text[], \(updatedAts)::bigint[])
                 AS w(s, q, t, i, v, d, u)
            """
        )
        let written = Set(scopes)
        let advanced = heads.filter { scope, _ in written.contains(scope.key) }
        try await transaction.query(
            """
            UPDATE feeds SET head = h.head
            FROM unnest(\(advanced.keys.map(\.key))::text[], \(Array(advanced.values))::bigint[]) AS h(scope, head)
            WHERE feeds.scope = h.scope
            """
        )
    }

    /// A plain INSERT: a key recorded concurrently (which per-user ordering rules out) aborts the
    /// transaction instead of applying twice; the retry then answers `duplicate`.
    func recordIdempotency(user: String, _ records: [(key: String, version: Int64?)], on transaction: Transaction) async throws {
        guard !records.isEmpty else { return }
        try await transaction.query(
            """
            INSERT INTO applied_operations (user_id, idempotency_key, version)
            SELECT \(user), k, nullif(v, -1) FROM unnest(\(records.map(\.key))::text[], \(records.map { $0.version ?? -1 })::bigint[]) AS r(k, v)
            """
        )
    }

    func writeHouseholds(_ households: [HouseholdState], on transaction: Transaction) async throws {
        guard !households.isEmpty else { return }
        let ids = households.map(\.id)
        try await transaction.query(
            """
            INSERT INTO households (household_id, owner_id, archived)
            SELECT * FROM unnest(\(ids)::text[], \(households.map(\.ownerID))::text[], \(households.map(\.archived))::boolean[])
            ON CONFLICT (household_id) DO UPDATE SET owner_id = excluded.owner_id, archived = excluded.archived, updated_at = now()
            """
        )
        var memberHouseholds: [String] = [], memberUsers: [String] = [], memberRoles: [String] = []
        for household in households {
            for (user, role) in household.members.sorted(by: { $0.key < $1.key }) {
                memberHouseholds.append(household.id)
                memberUsers.append(user)
                memberRoles.append(role.rawValue)
            }
        }
        try await transaction.query(
            """
            DELETE FROM household_members m
            WHERE m.household_id = ANY(\(ids)::text[])
              AND (m.household_id, m.user_id) NOT IN (SELECT * FROM unnest(\(memberHouseholds)::text[], \(memberUsers)::text[]))
            """
        )
        try await transaction.query(
            """
            INSERT INTO household_members (household_id, user_id, role)
            SELECT * FROM unnest(\(memberHouseholds)::text[], \(memberUsers)::text[], \(memberRoles)::text[])
            ON CONFLICT (household_id, user_id) DO UPDATE SET role = excluded.role
            """
        )
    }
}
