import Logging
package import SyncGateCore
package import SyncGateWire
package import Tracing
import SyncGateConcurrency

extension SyncStore {
    /// Applies a job in one transaction whose round trips do not grow with its operations
    /// (see ``apply(_:collections:now:)-([(job:context:)]...)``).
    ///
    /// When the database refuses what one operation would store (an error retrying cannot fix,
    /// see ``ClassifiedFailure``) — something the shared validation did not foresee — the job is
    /// not failed as a whole: each operation is tried alone in a transaction that is rolled back,
    /// and the job is applied again with the refused ones rejected (`VALIDATION_ERROR`), so one
    /// bad operation never fails its neighbours.
    package func apply(_ job: ClaimedJob<JobPayload>, collections: Collections, now: Timestamp) async throws -> ApplyOutcome {
        try await applyAlone(job, context: ServiceContext.current ?? .topLevel, collections: collections, now: now)
    }

    /// Applies claimed jobs of different users, as few transactions as their feeds allow
    /// (``ApplyGroups``): jobs that share no feed are applied together in one transaction of a
    /// constant number of statements:
    ///
    /// 1. lock the jobs, still `running` under this worker's leases (a job whose lease was lost
    ///    writes nothing), and create and lock the feeds they write, in sorted order: writers of
    ///    a feed serialise here, so sequence numbers follow commit order;
    /// 2. load every job's idempotency records, entities (with the parents the pushed documents
    ///    name), households and the inputs of the derivation groups the pushed documents name in
    ///    one read; then the parents only the stored documents name;
    /// 3. decide every operation in memory (``BatchApplier``), job by job;
    /// 4. load each derivation's inputs for the groups the writes touch that step 2 could not
    ///    know of (a stored document's group that a write left), and derive;
    /// 5. write entities and changes, feed heads, idempotency records, the jobs' results and
    ///    device watermarks in one statement (households and scopes versions before it, when
    ///    memberships changed); the announcements go out at commit.
    ///
    /// Each job applies in its trace context (the worker's `apply` span): the `notify` span of
    /// its commit joins it. Each job's outcome, in order. When a shared transaction fails, each of its jobs is applied
    /// again alone (``apply(_:collections:now:)-(ClaimedJob<JobPayload>...)``), so one job's failure never
    /// fails its neighbours.
    package func apply(
        _ jobs: [(job: ClaimedJob<JobPayload>, context: ServiceContext)], collections: Collections, now: Timestamp
    ) async -> [Result<ApplyOutcome, any Error>] {
        let work = jobs.map { Work($0.job, context: $0.context, operations: $0.job.operations, collections: collections, now: now, refused: [:]) }
        let members = work.map { ApplyGroups.Member(scopes: Set($0.requirements.scopes), operations: $0.operations.count) }
        var outcomes: [Int64: Result<ApplyOutcome, any Error>] = [:]
        for group in applyGroups.groups(members).map({ $0.map { work[$0] } }) {
            if group.count == 1 {
                outcomes[group[0].job.id] = await Self.result { try await applyAlone(group[0].job, context: group[0].context, prepared: group[0], collections: collections, now: now) }
                continue
            }
            do {
                for (id, outcome) in try await attempt(group, probe: false) { outcomes[id] = .success(outcome) }
            } catch {
                logger.debug("a shared apply failed; applying its jobs one at a time", metadata: [
                    "syncgate.jobs": "\(group.map(\.job.id))", "syncgate.error": "\(error)",
                ])
                for member in group {
                    outcomes[member.job.id] = await Self.result { try await applyAlone(member.job, context: member.context, prepared: member, collections: collections, now: now) }
                }
            }
        }
        return jobs.map { outcomes[$0.job.id] ?? .failure(StoreUnavailableError("job \($0.job.id) was not applied")) }
    }

    private static func result(_ body: () async throws -> ApplyOutcome) async -> Result<ApplyOutcome, any Error> {
        do { return .success(try await body()) } catch { return .failure(error) }
    }

    /// One job in a transaction of its own, with the refused-operation isolation.
    /// - Parameter prepared: the job's work with all its operations and none refused, when the
    ///   caller has it: its requirements (costly on large jobs) then are not worked out again.
    private func applyAlone(
        _ job: ClaimedJob<JobPayload>, context: ServiceContext, prepared: Work? = nil, collections: Collections, now: Timestamp
    ) async throws -> ApplyOutcome {
        let operations = job.operations
        func run(_ work: Work, probe: Bool) async throws -> ApplyOutcome {
            try await attempt([work], probe: probe)[job.id] ?? .leaseLost
        }
        func once(_ operations: [SyncOperation], refused: [ExactKey: String], probe: Bool) async throws -> ApplyOutcome {
            try await run(Work(job, context: context, operations: operations, collections: collections, now: now, refused: refused), probe: probe)
        }
        do {
            return try await run(
                prepared ?? Work(job, context: context, operations: operations, collections: collections, now: now, refused: [:]), probe: false
            )
        } catch where error.isDataRefusal {
            // Why the database refuses `candidates` with `refused` left out; `nil` if it does not.
            func refusal(_ candidates: some Collection<SyncOperation>, refused: [ExactKey: String]) async throws -> String? {
                do {
                    _ = try await once(Array(candidates), refused: refused, probe: true)
                    return nil
                } catch is ProbeRolledBack {
                    return nil
                } catch let refusal as any ClassifiedFailure where refusal.isPermanent {
                    return "the database cannot store this operation's result (\(refusal.clientReason))"
                }
            }
            var refused: [ExactKey: String] = [:]
            // Each operation alone first: one transaction of one operation each.
            for operation in operations where refused[ExactKey(operation.idempotencyKey)] == nil {
                if let reason = try await refusal(CollectionOfOne(operation), refused: [:]) { refused[ExactKey(operation.idempotencyKey)] = reason }
            }
            // An operation that needs an earlier one of the job (an update of what the job
            // creates) passes alone: the rest still refused, the first prefix the database
            // refuses ends with it, found by bisection. Bounded: a job of many such operations
            // fails as a whole, as it did before.
            var passing = 0
            for _ in 0..<Self.refusalSearches {
                guard var reason = try await refusal(operations, refused: refused) else { break }
                var failing = operations.count
                while failing - passing > 1 {
                    let middle = (passing + failing) / 2
                    if let shorter = try await refusal(operations[..<middle], refused: refused) {
                        (failing, reason) = (middle, shorter)
                    } else {
                        passing = middle
                    }
                }
                refused[ExactKey(operations[failing - 1].idempotencyKey)] = reason
                passing = failing
            }
            guard !refused.isEmpty else { throw error }
            logger.warning("the database refused operations of a job; applying the rest", metadata: [
                "syncgate.job": "\(job.id)", "syncgate.refused": "\(refused.count)", "syncgate.error": "\(error)",
            ])
            return try await once(operations, refused: refused, probe: false)
        }
    }

    /// A probe's transaction ends here, rolled back, after every write succeeded.
    struct ProbeRolledBack: Error {}

    /// How many refused operations of one job the apply looks for by bisection (each costs about
    /// log2(operations) probe transactions).
    static let refusalSearches = 8

    /// What one transaction does for a job: the operations it tries (some may be refused
    /// already) and what they need.
    struct Work: Sendable {
        var job: ClaimedJob<JobPayload>
        /// The trace context the job's commit announces in.
        var context: ServiceContext
        var operations: [SyncOperation]
        var applier: BatchApplier
        var requirements: BatchApplier.Requirements

        init(
            _ job: ClaimedJob<JobPayload>, context: ServiceContext, operations: [SyncOperation], collections: Collections, now: Timestamp,
            refused: [ExactKey: String]
        ) {
            var applier = BatchApplier(userID: job.userID, collections: collections, now: now)
            applier.refused = refused
            self.job = job
            self.context = context
            self.operations = operations
            self.applier = applier
            // What the refused operations would need is not locked or read: their feed may be
            // the very value the database refused.
            self.requirements = applier.requirements(for: operations.filter { refused[ExactKey($0.idempotencyKey)] == nil })
        }
    }

    /// One transaction for `work` (jobs that share no feed); each job's outcome. A probe rolls
    /// back once everything is written.
    private func attempt(_ work: [Work], probe: Bool) async throws -> [Int64: ApplyOutcome] {
        let hooks = probe ? StoreHooks() : hooks
        let notify = Locked<[any Span]>([])
        defer { for span in notify.value { span.end() } }
        do {
            return try await driver.transaction(now: clock.now()) { transaction in
                try await applyTransaction(work, transaction: transaction, hooks: hooks, probe: probe, notify: notify)
            }
        } catch {
            for span in notify.value { span.recordError(error) }
            throw error
        }
    }

    private func applyTransaction(
        _ work: [Work], transaction: any StorageTransaction, hooks: StoreHooks, probe: Bool, notify: Locked<[any Span]>
    ) async throws -> [Int64: ApplyOutcome] {
        guard let derivations = work.first?.applier.collections.derivations else { return [:] }
        let locks = try await transaction.lock(
            jobs: work.map(\.job.lease), feeds: Set(work.flatMap(\.requirements.scopes)).sorted()
        )
        var outcomes: [Int64: ApplyOutcome] = [:]
        for lost in work where !locks.jobs.contains(lost.job.id) { outcomes[lost.job.id] = .leaseLost }
        let held = work.filter { locks.jobs.contains($0.job.id) }
        guard !held.isEmpty else { return outcomes }
        var heads = locks.heads

        // Each derivation's groups that the pushed documents name: their inputs come with the one
        // read below, so a batch whose writes touch no other group (creates, updates within their
        // group) needs no read of its own for them.
        let named = derivations.map { derivation in
            held.reduce(into: Set<DerivedGroup>()) { $0.formUnion($1.applier.groupsNamed(by: $1.operations, for: derivation)) }
        }
        // One read for every job; each job's snapshot holds only its own feeds' rows.
        let rows = try await transaction.load(
            ApplyReads(
                // Any order: locks were taken on the feeds.
                entities: Array(held.reduce(into: Set<EntityKey>()) { $0.formUnion($1.requirements.entityKeys) }),
                idempotencyKeys: held.flatMap { job in job.requirements.idempotencyKeys.map { IdempotencyKey(userID: job.job.userID, key: $0) } },
                households: held.reduce(into: Set<Scope>()) { $0.formUnion($1.requirements.householdIDs.map(Scope.household)) }.sorted()
                    .compactMap(\.householdID),
                inputs: zip(derivations, named).flatMap { derivation, groups in groups.isEmpty ? [] : derivation.inputs(for: groups) }
            )
        )
        var entities = Self.byScope(try rows.entities.map { row throws(StoredDataError) in try EntityState(stored: row) })
        // Inputs of the named groups (a superset of what a derivation plans with: it reads only its groups' rows).
        let namedInputs = Self.byScope(try rows.inputs.map { row throws(StoredDataError) in try EntityState(stored: row) })
        let households = HouseholdState.fold(rows.households)
        func snapshot(_ job: Work) -> BatchApplier.Snapshot {
            var snapshot = BatchApplier.Snapshot()
            for scope in job.requirements.scopes { snapshot.entities.merge(entities[scope] ?? [:]) { stored, _ in stored } }
            for key in job.requirements.idempotencyKeys {
                if let version = rows.recorded[IdempotencyKey(userID: job.job.userID, key: key)] { snapshot.recorded[ExactKey(key)] = .some(version) }
            }
            for id in job.requirements.householdIDs { snapshot.households[.household(id)] = households[.household(id)] }
            return snapshot
        }
        var snapshots = held.map(snapshot)
        // The parents only the stored documents name.
        let parents = zip(held, snapshots).reduce(into: Set<EntityKey>()) { keys, pair in
            keys.formUnion(pair.0.applier.parentKeys(for: pair.0.operations, loaded: pair.1.entities).subtracting(pair.1.entities.keys))
        }
        if !parents.isEmpty {
            for (scope, loaded) in Self.byScope(Array(try await transaction.entities([.keys(parents.sorted())]).values)) {
                entities[scope, default: [:]].merge(loaded) { stored, _ in stored }
            }
            snapshots = held.map(snapshot)
        }

        var outcomesOfJobs = zip(held, snapshots).map { job, snapshot in job.applier.apply(job.operations, snapshot: snapshot) }
        for (derivation, named) in zip(derivations, named) {
            let touched = outcomesOfJobs.indices.map { derivation.groupsTouched(by: outcomesOfJobs[$0].writes, original: snapshots[$0].entities) }
            let all = touched.reduce(into: Set<DerivedGroup>()) { $0.formUnion($1) }
            guard !all.isEmpty else { continue }
            // The groups the read above could not know of: a stored document's group that a write left.
            var inputs = namedInputs
            let unread = all.subtracting(named)
            if !unread.isEmpty {
                for (scope, loaded) in Self.byScope(Array(try await transaction.entities(derivation.inputs(for: unread)).values)) {
                    inputs[scope, default: [:]].merge(loaded) { stored, _ in stored }
                }
            }
            for index in outcomesOfJobs.indices where !touched[index].isEmpty {
                let stored = Set(touched[index].map(\.scope)).flatMap { (inputs[$0] ?? [:]).values }
                outcomesOfJobs[index].writes += derivation.plan(
                    groups: touched[index], stored: stored, writes: outcomesOfJobs[index].writes, now: held[index].applier.now
                )
            }
        }

        var write = ApplyWrite()
        var advanced: Set<Scope> = []
        var sequences: [[Scope: [Int64]]] = []
        var changedHouseholds: [HouseholdState] = []
        var wakeUsers: Set<ExactKey> = []
        var finishedEvents: [StoreEvent] = []
        for (job, outcome) in zip(held, outcomesOfJobs) {
            // A service key's push (its device `service:<name>`) marks its changes with that origin.
            let origin = DeviceID.isReserved(job.job.deviceID) ? job.job.deviceID : nil
            // A device's push (its derived summaries too) is not nudged back to that device.
            let writer = origin == nil ? PushWriter.key(DeviceKey(userID: job.job.userID, deviceID: job.job.deviceID)) : nil
            let rows = try EntityRowWrite.rows(outcome.writes, heads: &heads, derivations: derivations, origin: origin, writer: writer)
            write.entities += rows
            advanced.formUnion(outcome.scopes)
            sequences.append(Dictionary(grouping: rows) { Scope(key: $0.row.scope)! }.mapValues { $0.map(\.sequence) })
            write.records += outcome.recorded.map { IdempotencyRecord(userID: job.job.userID, key: $0.key, version: $0.version) }
            changedHouseholds += outcome.households
            wakeUsers.formUnion(outcome.wakeUsers)
            let results = JobCodec.encodeResults(outcome.results)
            let finished = FinishedJob(id: job.job.id, userID: job.job.userID, deviceID: job.job.deviceID, state: .done, results: results)
            write.finished.append(finished)
            finishedEvents.append(.jobFinished(finished))
        }
        write.heads = heads.filter { advanced.contains($0.key) }
        // Household feeds the lock made for writes the apply refused (a non-member's writes to a
        // made-up household) go again: any user could otherwise fill the feeds table.
        let unused = heads.filter { $0.value == 0 && $0.key.householdID != nil && !advanced.contains($0.key) }.keys.sorted()
        if !unused.isEmpty { try await transaction.dropEmptyFeeds(unused) }
        if !changedHouseholds.isEmpty { try await transaction.writeHouseholds(changedHouseholds) }
        // Membership first: a process that hears a household's feed advance has heard who left it
        // in the same commit, so a waiter of a member removed there is not woken to read the feed
        // on its old cursor (PostgreSQL hands the notifications over one at a time).
        if !wakeUsers.isEmpty {
            let versions = try await transaction.bumpScopesVersions(userIDs: wakeUsers.sorted().map(\.id))
            write.events += versions.sorted { $0.key < $1.key }.map { StoreEvent.scopesChanged(userID: $0.key.id, version: $0.value) }
        }
        write.events += advanced.sorted().map { StoreEvent.feedAdvanced($0, head: heads[$0] ?? 0) }
        // The jobs last: a process that hears a job finished has heard the heads it advanced, so
        // a long-poll's page never counts a job in its watermark whose changes it did not read.
        write.events += finishedEvents
        // The notifications go out when the transaction commits (PostgreSQL NOTIFY, or the SQLite
        // driver's in-process signal after its commit): each job's span covers both.
        if !probe {
            notify.update { spans in
                for job in held {
                    let span = tracer.startSpan("notify", context: job.context)
                    span.attributes["syncgate.events"] = write.events.count
                    span.attributes["syncgate.jobs_together"] = held.count
                    spans.append(span)
                }
            }
        }
        try await transaction.write(write)
        if probe { throw ProbeRolledBack() }
        for (job, sequences) in zip(held, sequences) {
            try await hooks.midApply(job.job, sequences)
        }
        let roundTrips = transaction.roundTrips
        for (job, outcome) in zip(held, outcomesOfJobs) { outcomes[job.job.id] = .done(outcome.results, roundTrips: roundTrips) }
        return outcomes
    }

    /// States by feed, then by key.
    private static func byScope(_ states: some Sequence<EntityState>) -> [Scope: [EntityKey: EntityState]] {
        var byScope: [Scope: [EntityKey: EntityState]] = [:]
        for state in states { byScope[state.key.scope, default: [:]][state.key] = state }
        return byScope
    }
}
