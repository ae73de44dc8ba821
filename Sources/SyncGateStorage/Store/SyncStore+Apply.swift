import Logging
public import SyncGateCore
import Tracing

extension SyncStore {
    /// Applies a job in one transaction whose statement count does not grow with its operations:
    ///
    /// 1. lock the job, still `running` under this worker's lease (else: lease lost, nothing written);
    /// 2. create and lock the feeds it writes, in sorted order: writers of a feed serialise here,
    ///    so sequence numbers follow commit order;
    /// 3. load idempotency records, entities (with the parents the pushed documents name) and
    ///    households; then the parents only the stored documents name;
    /// 4. decide every operation in memory (``BatchApplier``);
    /// 5. load each derivation's inputs for the groups the writes touch and derive;
    /// 6. write entities and changes, feed heads, idempotency records, households, the job's
    ///    results and the device watermark, and announce what committed.
    ///
    /// When the database refuses what one operation would store (an error retrying cannot fix,
    /// see ``ClassifiedFailure``) — something the shared validation did not foresee — the job is
    /// not failed as a whole: each operation is tried alone in a transaction that is rolled back,
    /// and the job is applied again with the refused ones rejected (`VALIDATION_ERROR`), so one
    /// bad operation never fails its neighbours.
    public func apply(_ job: ClaimedJob, collections: Collections, now: Timestamp) async throws -> ApplyOutcome {
        do {
            return try await attempt(job, operations: job.operations, collections: collections, now: now, refused: [:], probe: false)
        } catch where error.isDataRefusal && job.operations.count > 1 {
            var refused: [String: String] = [:]
            for operation in job.operations where refused[operation.idempotencyKey] == nil {
                do {
                    _ = try await attempt(job, operations: [operation], collections: collections, now: now, refused: [:], probe: true)
                } catch is ProbeRolledBack {
                    continue
                } catch let refusal as any ClassifiedFailure where refusal.isPermanent {
                    refused[operation.idempotencyKey] = "the database cannot store this operation's result (\(refusal.clientReason))"
                }
            }
            guard !refused.isEmpty else { throw error }
            logger.warning("the database refused operations of a job; applying the rest", metadata: [
                "syncgate.job": "\(job.id)", "syncgate.refused": "\(refused.count)", "syncgate.error": "\(error)",
            ])
            return try await attempt(job, operations: job.operations, collections: collections, now: now, refused: refused, probe: false)
        }
    }

    /// A probe's transaction ends here, rolled back, after every write succeeded.
    struct ProbeRolledBack: Error {}

    private func attempt(
        _ job: ClaimedJob, operations: [SyncOperation], collections: Collections, now: Timestamp, refused: [String: String], probe: Bool
    ) async throws -> ApplyOutcome {
        var configured = BatchApplier(userID: job.userID, collections: collections, now: now)
        configured.refused = refused
        let applier = configured
        let hooks = probe ? StoreHooks() : hooks
        let notify = Locked<(any Span)?>(nil)
        defer { notify.value?.end() }
        do {
            return try await applyTransaction(job, operations: operations, applier: applier, now: now, hooks: hooks, probe: probe, notify: notify)
        } catch {
            notify.value?.recordError(error)
            throw error
        }
    }

    private func applyTransaction(
        _ job: ClaimedJob, operations: [SyncOperation], applier: BatchApplier, now: Timestamp, hooks: StoreHooks, probe: Bool,
        notify: Locked<(any Span)?>
    ) async throws -> ApplyOutcome {
        let derivations = applier.collections.derivations
        let requirements = applier.requirements(for: operations)
        return try await driver.transaction(now: clock.now()) { transaction in
            guard try await transaction.lockJob(job.lease) else { return .leaseLost }
            var heads = try await transaction.lockFeeds(requirements.scopes)

            var snapshot = BatchApplier.Snapshot()
            snapshot.recorded = try await transaction.loadRecorded(userID: job.userID, keys: requirements.idempotencyKeys)
            snapshot.entities = try await transaction.entities([.keys(requirements.entityKeys.sorted())])
            snapshot.households = HouseholdState.fold(try await transaction.loadHouseholds(requirements.householdIDs.sorted()))
            let parents = applier.parentKeys(for: operations, loaded: snapshot.entities).subtracting(snapshot.entities.keys)
            if !parents.isEmpty {
                snapshot.entities.merge(try await transaction.entities([.keys(parents.sorted())])) { stored, _ in stored }
            }

            var outcome = applier.apply(operations, snapshot: snapshot)
            for derivation in derivations {
                let groups = derivation.groupsTouched(by: outcome.writes, original: snapshot.entities)
                guard !groups.isEmpty else { continue }
                let inputs = try await transaction.entities(derivation.inputs(for: groups))
                outcome.writes += derivation.plan(groups: groups, stored: Array(inputs.values), writes: outcome.writes, now: now)
            }

            let rows = try EntityRowWrite.rows(outcome.writes, heads: &heads, derivations: derivations)
            let advanced = outcome.scopes
            try await transaction.writeEntities(rows, heads: heads.filter { advanced.contains($0.key) })
            try await hooks.midApply(
                ApplyingJob(jobID: job.id, userID: job.userID, sequences: Dictionary(grouping: rows) { Scope(key: $0.scope)! }.mapValues { $0.map(\.sequence) })
            )
            try await transaction.recordIdempotency(userID: job.userID, outcome.recorded)
            try await transaction.writeHouseholds(outcome.households)
            if probe { throw ProbeRolledBack() }
            try await transaction.finishJob(
                JobFinish(id: job.id, userID: job.userID, deviceID: job.deviceID, state: .done, results: JobCodec.encodeResults(outcome.results), lastError: nil)
            )
            var events: [StoreEvent] = [.jobFinished(job.id, device: DeviceKey(userID: job.userID, deviceID: job.deviceID))]
            events += advanced.sorted().map { StoreEvent.feedAdvanced($0, head: heads[$0] ?? 0) }
            if !outcome.wakeUsers.isEmpty {
                let versions = try await transaction.bumpScopesVersions(userIDs: outcome.wakeUsers.sorted())
                events += versions.sorted { $0.key < $1.key }.map { StoreEvent.scopesChanged(userID: $0.key, version: $0.value) }
            }
            // The notification goes out when the transaction commits (PostgreSQL NOTIFY, or the
            // SQLite driver's in-process signal after its commit): the span covers both.
            let span = tracer.startSpan("notify", context: ServiceContext.current ?? .topLevel)
            span.attributes["syncgate.events"] = events.count
            notify.update { $0 = span }
            try await transaction.announce(events)
            return .done(outcome.results, statements: transaction.statementCount)
        }
    }
}
