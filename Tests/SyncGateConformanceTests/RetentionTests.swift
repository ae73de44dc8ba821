import Foundation
import GRDB
import PostgresNIO
import SyncGateCore
import SyncGateWire
@testable import SyncGateStorage
import SyncGateWorker
import SyncGateTestSupport
import Synchronization
import Testing

@testable import SyncGateSQLite

/// Compaction, tombstone purge, idempotency pruning, job retention and force-resync.
@Suite(.timeLimit(.minutes(10))) struct RetentionTests {
    @Test(arguments: Driver.selected)
    func compactionKeepsEveryCursorValidAndLosesNoLatestChange(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            // Ten versions of a few entities, with a cursor taken after each job.
            var cursors: [SyncCursor?] = [nil]
            _ = try await harness.apply([Op.create("weightLogs", "a", ["kg": 0]), Op.create("weightLogs", "b", ["kg": 0]), Op.create("contacts", "gone", ["n": 0])])
            cursors.append(try await harness.pullAll().last.cursor)
            for version in Int64(1)..<10 {
                var operations = [Op.update("weightLogs", "a", base: version, ["kg": .int(version)])]
                if version % 3 == 0 { operations.append(Op.update("weightLogs", "b", base: version / 3, ["kg": .int(version)])) }
                if version == 5 { operations.append(Op.delete("contacts", "gone", base: 1)) }
                _ = try await harness.apply(operations)
                cursors.append(try await harness.pullAll().last.cursor)
            }
            // What a reader should end up with from each cursor, before compaction.
            var expected: [[String: Int64]] = []
            for cursor in cursors { expected.append(Self.latestVersions(try await harness.pullAll(from: cursor).changes)) }

            let report = try await harness.store.compactFeeds()
            #expect(report.deletedChanges > 0)
            let remaining = try await harness.pullAll().changes
            #expect(remaining.count == 3)
            #expect(remaining.first { $0.entityID == "gone" }?.data == nil)
            for (index, cursor) in cursors.enumerated() {
                // Every old cursor still works and leads to the same latest versions.
                let changes = try await harness.pullAll(from: cursor).changes
                #expect(Self.latestVersions(changes) == expected[index], "cursor \(index)")
            }
            #expect(try await harness.store.compactFeeds().deletedChanges == 0)
        }
    }

    /// Compaction looks only at changes written since it last looked: a pass with nothing new
    /// looks at no feed, and a change written later still removes what it supersedes from before
    /// the mark. Small batches (2 changes) so a feed takes several; and each batch says
    /// which feed it looked at last and whether one needs another batch.
    @Test(arguments: Driver.selected)
    func compactionLooksOnlyAtNewChangesAndStillRemovesWhatTheySupersede(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            var store = harness.store
            store.compactionBatch = CompactionBatchLimits(feeds: 100, changes: 2)
            _ = try await harness.apply([Op.create("weightLogs", "a", ["kg": 0]), Op.create("weightLogs", "b", ["kg": 0])])
            for version in Int64(1)...4 { _ = try await harness.apply([Op.update("weightLogs", "a", base: version, ["kg": .int(version)])]) }
            _ = try await harness.apply([Op.create("households", "h", ["name": "H"])])
            #expect(try await store.compactFeeds().deletedChanges == 4)
            // Nothing new: no feed to look at.
            #expect(try await store.driver.compactNewChanges(after: nil, feedLimit: 100, changeLimit: 2) == CompactionBatch(deletedChanges: 0, feeds: 0))
            // "b" written again: its first change, below the mark, goes; nothing else is read again.
            _ = try await harness.apply([Op.update("weightLogs", "b", base: 1, ["kg": 9])])
            #expect(
                try await store.driver.compactNewChanges(after: nil, feedLimit: 100, changeLimit: 2)
                    == CompactionBatch(deletedChanges: 1, feeds: 1, lastScope: Scope.user("alice").key, cutShort: false))
            #expect(try await store.driver.compactNewChanges(after: nil, feedLimit: 100, changeLimit: 2).feeds == 0)
            // Three new changes, two a batch: cut short, then caught up. A feed
            // after the last one asked about is not looked at.
            for version in Int64(2)...4 { _ = try await harness.apply([Op.update("weightLogs", "b", base: version, ["kg": .int(version)])]) }
            #expect(try await store.driver.compactNewChanges(after: Scope.user("alice").key, feedLimit: 100, changeLimit: 2).feeds == 0)
            #expect(
                try await store.driver.compactNewChanges(after: nil, feedLimit: 100, changeLimit: 2)
                    == CompactionBatch(deletedChanges: 2, feeds: 1, lastScope: Scope.user("alice").key, cutShort: true))
            #expect(
                try await store.driver.compactNewChanges(after: nil, feedLimit: 100, changeLimit: 2)
                    == CompactionBatch(deletedChanges: 1, feeds: 1, lastScope: Scope.user("alice").key, cutShort: false))
            let remaining = try await harness.pullAll().changes
            #expect(Dictionary(remaining.map { ($0.entityID, $0.version) }, uniquingKeysWith: max) == ["a": 5, "b": 5, "h": 1, "h:alice": 1])
            #expect(remaining.count == 4)
        }
    }

    /// A pass walks the feeds in scope order and ends after the last one with new changes: a
    /// feed written again between batches waits for the next pass. (Taking the first feeds with
    /// new changes again at every batch starved the feeds after them while those kept being
    /// written, and ran the pass to its cap of 10,000 batches.) One feed a batch; between
    /// batches a writer adds a change to the first feed, 40 times at most.
    @Test(arguments: Driver.selected)
    func aPassReachesTheLastFeedWhileAnEarlierOneKeepsBeingWritten(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            for user in ["alice", "bob"] {
                _ = try await harness.apply([Op.create("weightLogs", "w", ["kg": 0])], user: user)
                for version in Int64(1)...3 { _ = try await harness.apply([Op.update("weightLogs", "w", base: version, ["kg": .int(version)])], user: user) }
            }
            #expect(Scope.user("alice").key < Scope.user("bob").key)
            let writes = Mutex(0)
            var store = harness.store
            store.compactionBatch = CompactionBatchLimits(feeds: 1, changes: 100)
            store.hooks.betweenCompactionBatches = {
                let version = writes.withLock { count -> Int64? in
                    guard count < 40 else { return nil }
                    count += 1
                    return Int64(count) + 3
                }
                guard let version else { return }
                _ = try await harness.apply([Op.update("weightLogs", "w", base: version, ["kg": .int(version)])], user: "alice")
            }
            let report = try await store.compactFeeds()
            // alice's feed, then bob's, then none: two batches with a writer's turn after each.
            #expect(writes.withLock { $0 } == 2)
            #expect(report.deletedChanges == 6)
            #expect(try await harness.pullAll(user: "bob").changes.count == 1)
        }
    }

    /// A batch takes feeds in scope order while their new changes add up to its change limit,
    /// the first one in any case (cut short when it alone has more), so that it holds few
    /// writers for a short time however many feeds have new changes. Three feeds of three new
    /// changes (one entity written three times: two superseded) each.
    @Test(arguments: Driver.selected)
    func aBatchTakesFeedsWhileTheirNewChangesFitItsLimit(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let users = ["alice", "bob", "carol"]
            for user in users {
                _ = try await harness.apply([Op.create("weightLogs", "w", ["kg": 0])], user: user)
                for version in Int64(1)...2 { _ = try await harness.apply([Op.update("weightLogs", "w", base: version, ["kg": .int(version)])], user: user) }
            }
            let (alice, bob, carol) = (Scope.user("alice").key, Scope.user("bob").key, Scope.user("carol").key)
            #expect(alice < bob && bob < carol)
            let driver = harness.store.driver
            // Two changes: the first feed alone, cut short (its first two changes: one superseded).
            #expect(try await driver.compactNewChanges(after: nil, feedLimit: 100, changeLimit: 2) == CompactionBatch(deletedChanges: 1, feeds: 1, lastScope: alice, cutShort: true))
            // Six: alice's last one and bob's three fit, carol's three more do not.
            #expect(try await driver.compactNewChanges(after: nil, feedLimit: 100, changeLimit: 6) == CompactionBatch(deletedChanges: 3, feeds: 2, lastScope: bob, cutShort: false))
            // One feed at most: carol's, though more would fit.
            #expect(try await driver.compactNewChanges(after: bob, feedLimit: 1, changeLimit: 100) == CompactionBatch(deletedChanges: 2, feeds: 1, lastScope: carol, cutShort: false))
            #expect(try await driver.compactNewChanges(after: nil, feedLimit: 100, changeLimit: 100) == CompactionBatch(deletedChanges: 0, feeds: 0))
            for user in users { #expect(try await harness.pullAll(user: user).changes.map(\.version) == [3]) }
        }
    }

    /// A batch skips a feed a writer holds, and the pass goes on to the feeds after it (the held
    /// feed's turn comes next pass). Batches of one feed (a change limit of three): alice's feed,
    /// held by an apply paused in its transaction, is a batch of its own, which looks at nothing.
    /// PostgreSQL only: SQLite has one writer, so compaction there waits for the apply.
    @Test(arguments: Driver.selected.filter { $0 == .postgres })
    func aPassGoesOnPastAFeedAWriterHolds(_ driver: Driver) async throws {
        let hold = HeldApply("alice's apply to hold her feed")
        try await StoreHarness.with(driver, hooks: hold.hooks) { harness in
            for user in ["alice", "bob"] {
                _ = try await harness.apply([Op.create("weightLogs", "w", ["kg": 0])], user: user)
                for version in Int64(1)...2 { _ = try await harness.apply([Op.update("weightLogs", "w", base: version, ["kg": .int(version)])], user: user) }
            }
            let id = try await harness.push([Op.create("weightLogs", "held", ["kg": 1])], user: "alice")
            hold.hold(id)
            var store = harness.store
            store.compactionBatch = CompactionBatchLimits(feeds: 100, changes: 3)
            let claimed = try await store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 60_000)
            #expect(claimed.map(\.id) == [id])
            let collections = harness.collections
            let apply = Task { [store] in try await store.apply(claimed[0], collections: collections, now: .now()) }
            try await hold.held.wait()
            let report = try await store.compactFeeds()
            hold.release.open()
            #expect(try await value(of: apply, "the held apply to finish once released").isDone)
            // Bob's two superseded changes, none of alice's.
            #expect(report.deletedChanges == 2)
            #expect(try await harness.pullAll(user: "bob").changes.map(\.version) == [3])
            #expect(try await harness.pullAll(user: "alice").changes.count == 4)
        }
    }

    static func latestVersions(_ changes: [FeedChange]) -> [String: Int64] {
        var latest: [String: Int64] = [:]
        for change in changes { latest[change.entityID] = max(latest[change.entityID] ?? 0, change.version) }
        return latest
    }

    @Test(arguments: Driver.selected)
    func purgingTombstonesInvalidatesOnlyCursorsBehindTheFloor(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply([Op.create("weightLogs", "a", ["kg": 1]), Op.create("weightLogs", "b", ["kg": 1])])
            let old = try await harness.pullAll().last.cursor
            // Not compacted: the purge alone must not leave "a"'s older rows behind.
            _ = try await harness.apply([Op.delete("weightLogs", "a", base: 1)])
            let afterDelete = try await harness.pullAll().last.cursor
            _ = try await harness.apply([Op.update("weightLogs", "b", base: 1, ["kg": 2])])

            // Young tombstones stay.
            #expect(try await harness.store.purgeTombstones(olderThanMilliseconds: 3_600_000) == PurgeReport())
            let report = try await harness.store.purgeTombstones(olderThanMilliseconds: 0)
            #expect(report == PurgeReport(purgedTombstones: 1, raisedFloors: 1))

            // A cursor from before the purged delete could have missed it: CURSOR_INVALID.
            await #expect(throws: CursorError.expired(.user("alice"))) { try await harness.pullAll(from: old) }
            // A cursor that had seen it is fine, and so is a fresh bootstrap.
            #expect(try await harness.pullAll(from: afterDelete).changes.map(\.entityID) == ["b"])
            let fresh = try await harness.pullAll()
            #expect(Set(fresh.changes.map(\.entityID)) == ["b"])
            // The purged id can be created again from scratch.
            #expect(try await harness.apply([Op.create("weightLogs", "a", ["kg": 9])]).map(\.outcome) == ["applied"])
        }
    }

    /// A bootstrap that starts after a purge pages through what is left, however small its pages:
    /// positions below the floor are fine for a reader that began under that floor (found by the
    /// client SDK's convergence test, where such a resync could never finish). A purge after it
    /// began still expires its cursor.
    @Test(arguments: Driver.selected)
    func aBootstrapAfterAPurgePagesThroughWhatIsLeft(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply([
                Op.create("households", "home", ["name": "Home"]),
                Op.create("inventory", "milk", ["q": 1], household: "home"),
                Op.create("inventory", "eggs", ["q": 1], household: "home"),
            ])
            _ = try await harness.apply([Op.delete("inventory", "eggs", base: 1, household: "home")])
            _ = try await harness.apply(["bread", "butter"].map { Op.create("inventory", $0, ["q": 1], household: "home") })
            _ = try await harness.apply((0..<4).map { Op.create("weightLogs", "w\($0)", ["kg": 70]) })
            #expect(try await harness.store.purgeTombstones(olderThanMilliseconds: -1).raisedFloors == 1)

            // Pages of 2: alice's own feed first (the household's position stays 0), then the
            // household's feed in steps, below its floor.
            let paged = try await harness.pullAll(limit: 2)
            #expect(paged.changes.map(\.entityID) == ["w0", "w1", "w2", "w3", "home", "home:alice", "milk", "bread", "butter"])

            // A reader part way through the household's feed when a second purge raises its floor
            // past the reader's position may have missed a delete: refused.
            var cursor: SyncCursor?
            for _ in 0..<3 { cursor = try await harness.store.pull(PullQuery(userID: "alice", deviceID: "d1", cursor: cursor, limit: 2)).cursor }
            #expect(cursor?.positions[.household("home")] == 2)
            _ = try await harness.apply([Op.delete("inventory", "butter", base: 1, household: "home")])
            _ = try await harness.store.purgeTombstones(olderThanMilliseconds: -1)
            await #expect(throws: CursorError.expired(.household("home"))) { try await harness.pullAll(from: cursor, limit: 2) }
            #expect(try await harness.pullAll(limit: 2).changes.map(\.entityID) == ["w0", "w1", "w2", "w3", "home", "home:alice", "milk", "bread"])
        }
    }

    /// Tombstones go in bounded batches, one transaction each (SQLite's writer is never held for a
    /// whole purge), and the floor ends at the newest purged change.
    @Test(arguments: Driver.selected)
    func purgingWorksInBoundedBatches(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply((0..<7).map { Op.create("contacts", "c\($0)", ["n": .int(Int64($0))]) })
            _ = try await harness.apply((0..<7).map { Op.delete("contacts", "c\($0)", base: 1) } + [Op.create("contacts", "kept", ["n": 1])])
            var store = harness.store
            store.batchSize = 3
            let report = try await store.purgeTombstones(olderThanMilliseconds: -1)
            #expect(report == PurgeReport(purgedTombstones: 7, raisedFloors: 1))
            #expect(try await harness.pullAll().changes.map(\.entityID) == ["kept"])
            #expect(try await harness.store.stats().entities == 1)
            // The floor is the newest purged change (7 creates, then 7 deletes: sequence 14).
            let fresh = try await harness.pullAll().last.cursor
            #expect(fresh.positions[.user("alice")] == 15)
            await #expect(throws: CursorError.expired(.user("alice"))) {
                try await harness.pullAll(from: SyncCursor(userID: "alice", resyncEpoch: 0, positions: [.user("alice"): 13]))
            }
            _ = try await harness.pullAll(from: SyncCursor(userID: "alice", resyncEpoch: 0, positions: [.user("alice"): 14]))
        }
    }

    /// A purge batch holds its feed (on SQLite, the one writer) until it commits, so its cost
    /// must grow with its tombstones, not with their square: on SQLite the entities' delete
    /// matched each candidate against the whole batch, and a batch of 5,000 (the default) took
    /// ~11 s, in which every push of the server waited and some answered 500 (found with
    /// `scripts/bench-purge --sqlite`). One feed, 5,000 tombstones, one batch; on SQLite each of
    /// the batch's deletes looks its rows up by key (its plan searches, never scans, the table),
    /// which a count of work shows where a timing could not on a loaded machine.
    @Test(arguments: Driver.selected)
    func aFullPurgeBatchTakesTimeInProportionToItsTombstones(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            for start in stride(from: 0, to: 5000, by: 1000) {
                _ = try await harness.apply((start..<start + 1000).map { Op.create("weightLogs", "w\($0)", ["kg": 70]) })
            }
            for start in stride(from: 0, to: 5000, by: 1000) {
                _ = try await harness.apply((start..<start + 1000).map { Op.delete("weightLogs", "w\($0)", base: 1) })
            }
            let report = try await harness.store.purgeTombstones(olderThanMilliseconds: -1)
            #expect(report == PurgeReport(purgedTombstones: 5000, raisedFloors: 1))
            #expect(try await harness.store.stats().entities == 0)
            guard case .sqlite(let path) = harness.url else { return }
            for (table, statement) in [("changes", SQLiteTransaction.purgeChanges), ("entities", SQLiteTransaction.purgeEntities)] {
                let plan = try DatabaseQueue(path: path).inDatabase { db in
                    try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + statement, arguments: ["[]", "u:alice"]).map { $0["detail"] as String }
                }
                let alias = table == "changes" ? "c" : "e"
                #expect(plan.contains { $0.hasPrefix("SEARCH \(alias) USING") } && !plan.contains { $0.hasPrefix("SCAN \(alias)") }, "\(table): \(plan)")
            }
        }
    }

    /// Retention's delete picks finished jobs, then deletes them: a dead job an operator queues
    /// again between the two (its retry waiting on no lock of retention's, committed while the
    /// delete waits on the row) is kept. PostgreSQL only: SQLite's one writer orders the two.
    @Test func retentionKeepsADeadJobQueuedAgainWhileItDeletes() async throws {
        guard Driver.selected.contains(.postgres) else { return }
        let location = try await TestDatabases.shared.freshPostgres()
        try await StoreHarness.withExisting(.postgres(location)) { harness in
            let id = try await harness.push([Op.create("weightLogs", "w1", ["kg": 70])])
            try await harness.execute("UPDATE jobs SET state = 'dead', finished_at = now() - interval '2 days' WHERE id = \(id)")
            try await withConnection(location) { session in
                _ = try await session.query("BEGIN", logger: TestDatabases.logger)
                _ = try await session.query("UPDATE jobs SET state = 'queued', finished_at = NULL WHERE id = \(unescaped: String(id))", logger: TestDatabases.logger)
                let deleting = Task { try await harness.store.deleteFinishedJobs(olderThanMilliseconds: 86_400_000) }
                try await eventually("retention's delete waiting for the retried job's row") {
                    try await harness.queryTexts("SELECT pid::text FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%DELETE FROM jobs%'").count == 1
                }
                _ = try await session.query("COMMIT", logger: TestDatabases.logger)
                #expect(try await deleting.value == 0)
            }
            #expect(try await harness.store.job(id: id, userID: "alice")?.state == .queued)
        }
    }

    @Test(arguments: Driver.selected)
    func pruningForgetsOldIdempotencyKeysAndFinishedJobs(_ driver: Driver) async throws {
        let clock = ManualClock()
        try await StoreHarness.with(driver, clock: clock) { harness in
            let create = Op.create("weightLogs", "a", ["kg": 1], key: "k")
            let id = try await harness.push([create])
            try await harness.drain()
            #expect(try await harness.store.pruneIdempotencyRecords(olderThanMilliseconds: 3_600_000) == 0)
            #expect(try await harness.store.deleteFinishedJobs(olderThanMilliseconds: 3_600_000) == 0)
            clock.advance(milliseconds: 3_600_001)
            #expect(try await harness.store.pruneIdempotencyRecords(olderThanMilliseconds: 3_600_000) == 1)
            #expect(try await harness.store.deleteFinishedJobs(olderThanMilliseconds: 3_600_000) == 1)
            #expect(try await harness.store.job(id: id, userID: "alice") == nil)
            // The device watermark outlives the job; the forgotten key is no longer a duplicate.
            #expect(try await harness.pullAll().last.deviceWatermark == id)
            #expect(try await harness.apply([create]).map(\.outcome) == ["server_wins"])
        }
    }

    @Test(arguments: Driver.selected)
    func forceResyncAsksClientsToStartOverWithoutAnError(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply([Op.create("weightLogs", "a", ["kg": 1])])
            _ = try await harness.apply([Op.create("weightLogs", "b", ["kg": 1])], user: "bob")
            let alice = try await harness.pullAll().last.cursor
            let bob = try await harness.pullAll(user: "bob").last.cursor
            try await harness.store.forceResync(userID: "alice")
            let page = try await harness.pullAll(from: alice).last
            #expect(page.forceResync && page.changes.isEmpty)
            #expect(!(try await harness.pullAll(user: "bob", from: bob).last.forceResync))
            // Starting over clears it.
            let restart = try await harness.pullAll()
            #expect(!restart.last.forceResync && restart.changes.count == 1)
            #expect(!(try await harness.pullAll(from: restart.last.cursor).last.forceResync))
            // Everyone at once.
            try await harness.store.forceResync(userID: nil)
            #expect(try await harness.pullAll(user: "bob", from: bob).last.forceResync)
            #expect(try await harness.pullAll(from: restart.last.cursor).last.forceResync)
        }
    }

    @Test(arguments: Driver.selected)
    func onlyOneProcessRunsMaintenanceAtATime(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let inside = TestGate("the first pass to hold the lock")
            let release = TestGate("the first pass's release")
            let store = harness.store
            async let first: Int? = store.withMaintenanceLock {
                inside.open()
                try await release.wait()
                return 1
            }
            try await inside.wait()
            let second = try await store.withMaintenanceLock { 2 }
            #expect(second == nil)
            release.open()
            #expect(try await first == 1)
            #expect(try await store.withMaintenanceLock { 3 } == 3)
        }
    }

    @Test(arguments: Driver.selected)
    func aMaintenancePassAppliesRetention(_ driver: Driver) async throws {
        let clock = ManualClock()
        try await StoreHarness.with(driver, clock: clock) { harness in
            _ = try await harness.apply([Op.create("weightLogs", "a", ["kg": 1], key: "k")])
            _ = try await harness.apply([Op.update("weightLogs", "a", base: 1, ["kg": 2])])
            _ = try await harness.apply([Op.delete("weightLogs", "a", base: 2)])
            clock.advance(milliseconds: 10)
            let report = try await MaintenanceTasks.run(on: harness.store, retention: RetentionConfiguration(finishedJobsMilliseconds: 1, tombstonesMilliseconds: 1, idempotencyMilliseconds: 1))
            #expect(report.deletedJobs == 3)
            #expect(report.prunedIdempotencyRecords == 3)
            #expect(report.compaction.deletedChanges == 2)
            #expect(report.purge.purgedTombstones == 1)
            #expect(try await harness.store.stats().changes == 0)
        }
    }
}
