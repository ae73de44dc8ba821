package import SyncGateCore
package import SyncGateWire

extension SyncStore {
    package func withMaintenanceLock<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result) async throws -> Result? {
        try await driver.withMaintenanceLock(body)
    }

    package func deleteFinishedJobs(olderThanMilliseconds age: Int64) async throws -> Int {
        let cutoff = clock.wallNow().adding(milliseconds: -age)
        return try await inBatches { try await driver.deleteFinishedJobs(before: cutoff, limit: $0) }
    }

    package func pruneIdempotencyRecords(olderThanMilliseconds age: Int64) async throws -> Int {
        let cutoff = clock.wallNow().adding(milliseconds: -age)
        return try await inBatches { try await driver.deleteIdempotencyRecords(before: cutoff, limit: $0) }
    }

    /// Deletes every change that a later change of the same entity in the same feed supersedes.
    /// Readers lose nothing: whoever has not read the old row will read the newer one.
    ///
    /// Proportional to new work: each feed remembers how far compaction has looked, so a pass
    /// reads only the changes written since the last one (and the feeds table, by its index of
    /// feeds with new changes), in batches of at most ``compactionBatch``'s new changes. A batch
    /// holds its feeds' writers until it commits, so batches are small: a minute of steady
    /// writes held pushes up to 0.4 s in batches of 100 feeds × 5,000 changes (README,
    /// Retention). A pass walks the feeds once, in scope order: a batch goes on after the last
    /// feed the one before it took (looked at, or skipped because a writer held it), or takes the
    /// same feed again when it had more new changes than a batch takes, and the pass ends after
    /// the last feed with new changes. Changes written meanwhile to feeds it has passed wait for
    /// the next pass. (It used to take the first feeds with new changes at every batch: feeds
    /// written between batches were taken again and again, the feeds after them waited, and
    /// under steady writes a pass ran to its cap.) A pass stops after 10,000 batches in any case.
    package func compactFeeds() async throws -> CompactionReport {
        var report = CompactionReport()
        var after: String?
        for _ in 0..<10_000 {
            let batch = try await driver.compactNewChanges(after: after, feedLimit: compactionBatch.feeds, changeLimit: compactionBatch.changes)
            report.deletedChanges += batch.deletedChanges
            guard let last = batch.lastScope else { break }
            if !batch.cutShort { after = last }
            try await hooks.betweenCompactionBatches()
        }
        return report
    }

    /// Purges tombstones older than `age` feed by feed, a batch per transaction (each under the
    /// feed's lock, which orders it with the feed's writers), raising each feed's floor: cursors
    /// behind it get `CURSOR_INVALID`.
    package func purgeTombstones(olderThanMilliseconds age: Int64) async throws -> PurgeReport {
        let cutoff = clock.wallNow().adding(milliseconds: -age)
        var report = PurgeReport()
        for scope in try await driver.scopesWithTombstones(before: cutoff) {
            let purged = try await inBatches { limit in
                try await driver.transaction(now: clock.now(), for: .maintenance) { transaction in
                    _ = try await transaction.lockFeeds([scope])
                    return try await transaction.purgeTombstones(scope: scope, before: cutoff, limit: limit)
                }
            }
            if purged > 0 {
                report.purgedTombstones += purged
                report.raisedFloors += 1
            }
        }
        return report
    }

    package func forceResync(userID: String?) async throws {
        try await driver.transaction(now: clock.now(), for: .maintenance) { transaction in
            try await transaction.bumpResyncEpoch(userID: userID)
            if let userID {
                let versions = try await transaction.bumpScopesVersions(userIDs: [userID])
                try await transaction.announce([.scopesChanged(userID: userID, version: versions[ExactKey(userID)] ?? 0)])
            } else {
                try await transaction.announce([.resynchronize])
            }
        }
    }

    /// Rebuilds derived data (the daily summaries) from the stored documents, for one user or
    /// everyone, between two group keys (days) inclusive, writing feed entries only for derived
    /// entities that change.
    package func recomputeDerived(userID: String?, from lower: String?, through upper: String?, collections: Collections, now: Timestamp) async throws -> DerivationReport {
        let derivations = collections.derivations
        let scopes: [Scope]
        if let userID {
            scopes = [.user(userID)]
        } else {
            scopes = try await driver.scopesHoldingEntities(ofTypes: derivations.flatMap { [$0.sourceType, $0.derivedType] })
        }
        var report = DerivationReport()
        for scope in scopes {
            for derivation in derivations {
                let (checked, written) = try await driver.transaction(now: clock.now(), for: .maintenance) { transaction in
                    var heads = try await transaction.lockFeeds([scope])
                    let stored = try await transaction.entities(derivation.rebuildInputs(scope: scope, from: lower, through: upper))
                    let (checked, writes) = derivation.rebuild(stored: Array(stored.values), now: now)
                    if !writes.isEmpty {
                        let rows = try EntityRowWrite.rows(writes, heads: &heads, derivations: derivations)
                        try await transaction.writeEntities(rows, heads: heads)
                        try await transaction.announce([.feedAdvanced(scope, head: heads[scope] ?? 0)])
                    }
                    return (checked, writes.count)
                }
                report.groupsChecked += checked
                report.written += written
            }
        }
        return report
    }

    package func stats() async throws -> StoreStats {
        try await driver.stats(now: clock.now())
    }

    /// Only the queue: unfinished jobs by state and the oldest runnable job's age.
    package func queueStats() async throws -> StoreStats {
        try await driver.queueStats(now: clock.now())
    }

    /// Recent jobs, newest first, their results as stored.
    package func listJobs(_ filter: JobFilter) async throws -> [JobRecord] {
        try await driver.listJobs(filter)
    }

    /// Queues dead jobs again (``StorageTransaction/requeueDeadJobs(ids:)``); all of them when
    /// `ids` is nil, oldest first, `requeueBatch` per transaction: on PostgreSQL each takes one
    /// lock per user it requeues for, and a transaction holds only so many.
    package func retryDeadJobs(ids: [Int64]?) async throws -> Int {
        guard ids == nil else { return try await requeue(ids) }
        var dead: [Int64] = []
        var below: Int64?
        while true {
            let page = try await driver.listJobs(JobFilter(state: .dead, limit: 1000, belowID: below))
            guard let last = page.last else { break }
            dead += page.map(\.id)
            below = last.id
        }
        var total = 0
        for start in stride(from: 0, to: dead.count, by: Self.requeueBatch) {
            total += try await requeue(Array(dead.reversed()[start..<min(start + Self.requeueBatch, dead.count)]))
        }
        return total
    }

    static let requeueBatch = 200

    private func requeue(_ ids: [Int64]?) async throws -> Int {
        try await driver.transaction(now: clock.now(), for: .maintenance) { transaction in
            let count = try await transaction.requeueDeadJobs(ids: ids)
            if count > 0 { try await transaction.announce([.jobsAvailable]) }
            return count
        }
    }

    package func createServiceKey(_ key: NewServiceKey) async throws -> Bool {
        try await driver.insertServiceKey(key, now: clock.now())
    }

    package func serviceKeys() async throws -> [ServiceKeyRecord] {
        try await driver.serviceKeys()
    }

    package func serviceKey(hash: String) async throws -> ServiceKeyRecord? {
        try await driver.serviceKey(hash: hash)
    }

    package func registerPush(_ device: DeviceKey, _ registration: PushRegistration) async throws {
        try await driver.upsertPushRegistration(device, registration, now: clock.wallNow())
    }

    package func pushRegistration(_ device: DeviceKey) async throws -> StoredPushRegistration? {
        try await driver.pushRegistration(device)
    }

    package func unregisterPush(_ device: DeviceKey) async throws -> Bool {
        try await driver.deletePushRegistration(device)
    }

    package func revokeServiceKey(name: String) async throws -> Bool {
        try await driver.revokeServiceKey(name: name, now: clock.now())
    }

    package func entity(_ key: EntityKey) async throws -> EntityState? {
        try await driver.entity(key).map(EntityState.init(stored:))
    }

    package func currentEntities(in scope: Scope, types: Set<String>?, after: EntityPosition?, limit: Int) async throws -> [EntityState] {
        try await driver.currentEntities(in: scope, types: types, after: after, limit: limit).map(EntityState.init(stored:))
    }

    /// At most `limit` households (all when `nil`) whose ids sort after `after`, by id.
    package func households(userID: String?, after: String? = nil, limit: Int? = nil) async throws -> [HouseholdState] {
        let rows = try await driver.householdRows(userID: userID, after: after, limit: limit)
        let households = HouseholdState.fold(rows)
        // The rows' order, not Swift's: a next page's `after` compares as the database does.
        var listed = Set<Scope>()
        return rows.compactMap { listed.insert(.household($0.householdID)).inserted ? households[.household($0.householdID)] : nil }
    }

    /// Repeats a bounded step until it does less than a full batch; returns the total.
    func inBatches(_ step: (Int) async throws -> Int) async throws -> Int {
        var total = 0
        while true {
            let done = try await step(batchSize)
            total += done
            if done < batchSize { return total }
        }
    }
}
