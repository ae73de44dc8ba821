import PostgresNIO
import SyncGatePostgres
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// How PostgreSQL runs the queries whose cost must not grow with the tables, proven by the
/// statistics counters of the indexes and tables they read (as of when every session has ended).
@Suite(.serialized, .timeLimit(.minutes(10))) struct QueryPlanTests {
    /// A pull page when the statistics do not know the feed: a user who wrote thousands of
    /// changes since the last ANALYZE looks like a feed of one row to the planner, and it then
    /// read the whole feed by the commit-time index and sorted it, for every page — a bootstrap
    /// cost that grew with the square of the feed (found with auto_explain in `load bootstrap`).
    /// A page must come from the (scope, seq) key, in order, whatever the statistics.
    @Test func aPageOfAFeedTheStatisticsDoNotKnowIsReadInKeyOrder() async throws {
        let url = DatabaseURL.postgres(try await TestDatabases.shared.freshPostgres())
        // Long user ids make the key index tall while the commit-time index stays small (its
        // entries share their times, and deduplicate): the shape that tipped the planner.
        let cat = "cat-" + String(repeating: "x", count: 120)
        // Statistics that know two small feeds, and a large feed written after them.
        try await StoreHarness.withExisting(url) { harness in
            for user in ["ann", "ben"].map({ $0 + "-" + String(repeating: "y", count: 120) }) {
                for batch in 0..<2 {
                    _ = try await harness.apply((0..<1000).map { Op.create("contacts", "\(user)\(batch)-\($0)", ["name": "x"]) }, user: user)
                }
            }
            try await harness.execute("ANALYZE")
            for batch in 0..<3 {
                _ = try await harness.apply((0..<1000).map { Op.create("contacts", "c\(batch)-\($0)", ["name": "x"]) }, user: cat)
            }
        }
        let before = try await Self.settledCounters(url).indexScans
        try await StoreHarness.withExisting(url) { harness in
            let page = try await harness.store.pull(PullQuery(userID: cat, deviceID: "new", cursor: nil, limit: 1000))
            #expect(page.changes.count == 1000 && page.hasMore)
        }
        let after = try await Self.settledCounters(url).indexScans
        #expect(after["changes_pkey", default: 0] > before["changes_pkey", default: 0], "the page was not read by the key")
        #expect(after["changes_commit_time"] == before["changes_commit_time"], "the page was read by the commit-time index")
        #expect(after["changes_entity"] == before["changes_entity"], "the page was read by the entity index")
    }

    /// The live waiters' reads of several feeds in one statement read each feed by its key too,
    /// whatever the statistics know of it (the shape of the test above).
    @Test func feedReadsOfWaitersAreReadInKeyOrder() async throws {
        let url = DatabaseURL.postgres(try await TestDatabases.shared.freshPostgres())
        let users = ["ann", "ben", "cat"].map { $0 + "-" + String(repeating: "y", count: 120) }
        try await StoreHarness.withExisting(url) { harness in
            _ = try await harness.apply((0..<1000).map { Op.create("contacts", "a-\($0)", ["name": "x"]) }, user: users[0])
            try await harness.execute("ANALYZE")
            for user in users.dropFirst() {
                _ = try await harness.apply((0..<1000).map { Op.create("contacts", "c-\($0)", ["name": "x"]) }, user: user)
            }
        }
        let before = try await Self.settledCounters(url).indexScans
        try await StoreHarness.withExisting(url) { harness in
            let slices = try await harness.store.readFeeds(users.map { FeedReadRequest(scope: .user($0), after: 10, types: nil, limit: 100) })
            #expect(slices.map(\.changes.count) == [101, 101, 101])
        }
        let after = try await Self.settledCounters(url).indexScans
        #expect(after["changes_pkey", default: 0] > before["changes_pkey", default: 0], "the feeds were not read by the key")
        #expect(after["changes_commit_time"] == before["changes_commit_time"], "a feed was read by the commit-time index")
        #expect(after["changes_entity"] == before["changes_entity"], "a feed was read by the entity index")
    }

    /// A maintenance pass with nothing to compact finds that out from the feeds index of the
    /// feeds with new changes, reading no feed row: before migration 0007 it read every feed
    /// (40–55 ms of a pass at 100,000 feeds).
    @Test func aPassWithNothingToCompactReadsNoFeed() async throws {
        let url = DatabaseURL.postgres(try await TestDatabases.shared.freshPostgres())
        try await StoreHarness.withExisting(url) { harness in
            try await harness.execute("INSERT INTO feeds (scope, head, floor, compacted) SELECT 'u:f' || g, 5, 0, 5 FROM generate_series(1, 20000) g")
            try await harness.execute("ANALYZE feeds")
        }
        let before = try await Self.settledCounters(url)
        try await StoreHarness.withExisting(url) { harness in
            let report = try await harness.store.compactFeeds()
            #expect(report.deletedChanges == 0)
        }
        let after = try await Self.settledCounters(url)
        // Of 20,000 feeds: a join may take the first row of a scan before it sees it has
        // nothing to join with (one row, counted); reading every feed is 20,000.
        #expect(after.feedRowsRead - before.feedRowsRead < 10, "the pass read \(after.feedRowsRead - before.feedRowsRead) feed rows")
        #expect(after.indexScans["feeds_uncompacted", default: 0] > before.indexScans["feeds_uncompacted", default: 0])
    }

    /// A compaction batch reads its feeds' new changes and the older changes of the entities
    /// those touched, by index, however large the table: its plan read the whole `changes` table
    /// twice (sequential scans and hash joins, the maintenance pool's default planner settings)
    /// while it held its feeds locked, so only a batch of most of the table's new changes was
    /// worth its cost, and such a batch stalled pushes 0.4 s once a minute under steady writes
    /// (README, Retention). Here 100 feeds hold 50,000 changes, the statistics know them, and
    /// three feeds have 50 new changes each, of 50 entities that each have 9 older ones.
    @Test func aCompactionBatchReadsOnlyWhatItCompacts() async throws {
        let url = DatabaseURL.postgres(try await TestDatabases.shared.freshPostgres())
        try await StoreHarness.withExisting(url) { harness in
            try await harness.execute("""
                INSERT INTO changes (scope, seq, entity_type, entity_id, version, data, updated_at)
                SELECT 'u:f' || f, s, 'contacts', 'e' || (s % 50), s / 50 + 1, '{"name": "x"}', 0
                FROM generate_series(1, 100) f, generate_series(1, 500) s
                """)
            try await harness.execute("""
                INSERT INTO feeds (scope, head, floor, compacted)
                SELECT 'u:f' || f, 500, 0, CASE WHEN f <= 3 THEN 450 ELSE 500 END FROM generate_series(1, 100) f
                """)
            try await harness.execute("ANALYZE")
        }
        let before = try await Self.settledCounters(url).changeRowsRead
        try await StoreHarness.withExisting(url) { harness in
            let report = try await harness.store.compactFeeds()
            #expect(report.deletedChanges == 3 * 50 * 9)
        }
        let read = try await Self.settledCounters(url).changeRowsRead - before
        // 150 new changes, 1,350 deleted, each read once or twice; the table is 50,000.
        #expect(read < 5000, "the compaction read \(read) change rows")
    }

    /// Expired idempotency records and finished jobs are found by their age indexes and deleted
    /// by key: a pass reads what it deletes, however many are kept. With the maintenance pool's
    /// default planner settings both deletes read their whole table (the records' twice:
    /// sequential scans into a hash join), and in steady state (the retentions passed) every
    /// pass deletes a minute's worth in batches. Here 50,000 of each, 1,000 of them expired.
    @Test func expiredRecordsAndJobsAreReadByIndex() async throws {
        let url = DatabaseURL.postgres(try await TestDatabases.shared.freshPostgres())
        try await StoreHarness.withExisting(url) { harness in
            try await harness.execute("""
                INSERT INTO applied_operations (user_id, idempotency_key, version, applied_at)
                SELECT 'u' || (g % 100), 'k' || g, 1, now() - CASE WHEN g <= 1000 THEN interval '31 days' ELSE interval '1 day' END
                FROM generate_series(1, 50000) g
                """)
            try await harness.execute("""
                INSERT INTO jobs (user_id, device_id, state, max_attempts, operation_count, payload, finished_at)
                SELECT 'u' || (g % 100), 'd', 'done', 5, 1, '{}', now() - CASE WHEN g <= 1000 THEN interval '2 days' ELSE interval '1 hour' END
                FROM generate_series(1, 50000) g
                """)
            try await harness.execute("ANALYZE")
        }
        let before = try await Self.settledCounters(url).rowsRead
        try await StoreHarness.withExisting(url) { harness in
            let records = try await harness.store.pruneIdempotencyRecords(olderThanMilliseconds: 30 * 86_400_000)
            let jobs = try await harness.store.deleteFinishedJobs(olderThanMilliseconds: 86_400_000)
            #expect(records == 1000 && jobs == 1000)
        }
        let after = try await Self.settledCounters(url).rowsRead
        for table in ["applied_operations", "jobs"] {
            let read = after[table, default: 0] - before[table, default: 0]
            // 1,000 expired rows, each read once or twice; the table is 50,000.
            #expect(read < 5000, "deleting 1,000 expired rows read \(read) rows of \(table)")
        }
    }

    /// A nudger's mark pass finds the devices that read an advanced feed by the registrations' and
    /// members' keys, and a registration finds the old registrations of its token by the token:
    /// none of them reads those tables whole, however many devices are registered. Here 20,000
    /// registrations of users in 2,000 households.
    @Test func nudgeReadersAndMovedTokensAreFoundByKey() async throws {
        let url = DatabaseURL.postgres(try await TestDatabases.shared.freshPostgres())
        let now = Timestamp.now()
        try await StoreHarness.withExisting(url) { harness in
            try await harness.execute("INSERT INTO households (household_id, owner_id) SELECT 'h' || g, 'u' || (g * 10) FROM generate_series(0, 1999) g")
            try await harness.execute("""
                INSERT INTO household_members (household_id, user_id, role)
                SELECT 'h' || (g / 10), 'u' || g, CASE WHEN g % 10 = 0 THEN 'owner' ELSE 'member' END FROM generate_series(0, 19999) g
                """)
            try await harness.execute("""
                INSERT INTO push_registrations (user_id, device_id, provider, token, created_at, updated_at)
                SELECT 'u' || g, 'phone', 'fcm', 'token-' || g, 0, 0 FROM generate_series(0, 19999) g
                """)
            try await harness.execute("ANALYZE")
            // The feeds these devices read get their positions, as registering gives them.
            _ = try await harness.store.driver.trackPushFeeds()
        }
        let before = try await Self.settledCounters(url).rowsRead
        try await StoreHarness.withExisting(url) { harness in
            // A user's own feed and a household's advance, written from a device of no one's.
            _ = try await harness.apply([Op.create("weightLogs", "w1", ["kg": 70])], user: "u5", device: "laptop")
            _ = try await harness.apply([Op.create("inventory", "milk", ["qty": 1], household: "h7")], user: "u70", device: "laptop")
            let pass = try await harness.store.driver.markNudges(scopes: nil, feedLimit: 100, intervalMilliseconds: 30_000, now: now)
            #expect(pass.feeds == 2 && pass.devices == 11)
            // A token that moves to another device.
            try await harness.store.driver.upsertPushRegistration(DeviceKey(userID: "u9", deviceID: "tablet"), .fcm(token: "token-3"), now: now)
        }
        let after = try await Self.settledCounters(url).rowsRead
        for table in ["push_registrations", "household_members"] {
            let read = after[table, default: 0] - before[table, default: 0]
            #expect(read < 2000, "a mark pass and a registration read \(read) rows of \(table) (20,000)")
        }
    }

    /// A pass finds the feeds with tombstones to purge from the index of tombstones by age,
    /// reading no change when none is old enough, however many changes the table holds. Here
    /// 50,000 changes, 5,000 of them young tombstones, the statistics know them.
    @Test func aPassWithNoOldTombstoneReadsNoChange() async throws {
        let url = DatabaseURL.postgres(try await TestDatabases.shared.freshPostgres())
        let now = Timestamp.now().millisecondsSinceEpoch
        try await StoreHarness.withExisting(url) { harness in
            try await harness.execute("""
                INSERT INTO changes (scope, seq, entity_type, entity_id, version, data, updated_at)
                SELECT 'u:f' || f, s, 'contacts', 'e' || s, 1, CASE WHEN s <= 50 THEN NULL ELSE '{"name": "x"}'::jsonb END, \(now)
                FROM generate_series(1, 100) f, generate_series(1, 500) s
                """)
            try await harness.execute("ANALYZE")
        }
        let before = try await Self.settledCounters(url).changeRowsRead
        try await StoreHarness.withExisting(url) { harness in
            let report = try await harness.store.purgeTombstones(olderThanMilliseconds: 86_400_000)
            #expect(report == PurgeReport())
        }
        let read = try await Self.settledCounters(url).changeRowsRead - before
        #expect(read < 100, "the pass read \(read) change rows")
    }

    /// The hot paths' statements are planned once per connection (generic plans). Planned on a
    /// fresh database, whose never-analyzed tables count as ten pages, they chose hash joins over
    /// sequential scans of `entities` — still in use a minute later at 50,000 rows (found with
    /// auto_explain in `load sync`). Here one connection plans every statement on an empty
    /// database, then `entities` grows by 20,000 rows (a user's food logs over 2,000 days, no
    /// ANALYZE) and a push of that user is applied with the same plans: it must read its ten
    /// entities and one day's logs by index, not the table, nor all of the user's logs.
    @Test func anApplyPlannedOnAnEmptyDatabaseReadsByIndexOnceTablesHaveGrown() async throws {
        let location = try await TestDatabases.shared.freshPostgres()
        let url = DatabaseURL.postgres(location)
        try await StoreHarness.withExisting(url) { harness in
            try await harness.execute("ALTER TABLE entities SET (autovacuum_enabled = false)")
        }
        let driver = PostgresDriver(configuration: .forTests(location, maximumConnections: 1), logger: StoreHarness.logger)
        let store = SyncStore(driver: driver, logger: StoreHarness.logger)
        let collections = Collections.default
        func apply(_ operations: [SyncOperation], user: String) async throws {
            let id = try await store.enqueue(QueuedJob(userID: user, deviceID: "d", operations: operations, maximumAttempts: 5), limits: .init())
            guard case .accepted(let jobID) = id, let job = try await store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 60_000).first, job.id == jobID,
                case .done = try await store.apply(job, collections: collections, now: .now())
            else { throw TestEnvironmentError(description: "not applied: \(id)") }
        }
        func push(_ day: Int) -> [SyncOperation] {
            let date = Timestamp(millisecondsSinceEpoch: 1_767_225_600_000 + Int64(day) * 86_400_000).rfc3339.prefix(10)
            return (0..<10).map { Op.create("foodLogs", "f\(day)-\($0)", ["loggedDate": .string(String(date)), "items": [["id": "a", "calories": 100]]]) }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await driver.run() }
            defer { group.cancelAll() }
            // Every hot statement planned while the tables are empty.
            try await apply(push(0), user: "ann")
            try await StoreHarness.withExisting(url) { harness in
                try await harness.execute("""
                    INSERT INTO entities (scope, entity_type, entity_id, version, data, client_ts, updated_at, group_key)
                    SELECT 'u:ann', 'foodLogs', 'bulk-' || g, 1, jsonb_build_object('loggedDate', d, 'items', '[]'::jsonb), 0, 0, d
                    FROM generate_series(1, 20000) g, LATERAL (SELECT to_char(date '2027-01-01' + g % 2000, 'YYYY-MM-DD') AS d) day
                    """)
            }
            try await apply(push(1), user: "ann")
        }
        let read = try await Self.settledCounters(url).entityRowsRead
        // The first push reads nothing (an empty table), the second its ten entities, its day's
        // logs and summary: a few dozen rows. Scanning the table or the user's logs is 20,000.
        #expect(read < 200, "the applies read \(read) entity rows")
    }

    /// A write reads each feed's newest commit time once (the floor of its changes' commit
    /// times), whatever the number of changes it appends. The planner inlined that per-feed
    /// subquery into the insert and evaluated it once per change, and each evaluation walked
    /// back over the index entries of the changes the statement had already appended (invisible
    /// to it) before finding the newest visible one: 500,500 heap fetches, 35 of a 1,000-operation
    /// write's 42 ms (found with `perf` on PostgreSQL, one stream of 1,000-op pushes). Both
    /// writes of changes are held to it: the apply's, and a rebuild of derived documents.
    @Test func aWriteReadsEachFeedsNewestCommitTimeOnce() async throws {
        let url = DatabaseURL.postgres(try await TestDatabases.shared.freshPostgres())
        let days = 300
        let logs = (0..<days).map { day in
            let date = Timestamp(millisecondsSinceEpoch: 1_767_225_600_000 + Int64(day) * 86_400_000).rfc3339.prefix(10)
            return Op.create("foodLogs", "f\(day)", ["loggedDate": .string(String(date)), "mealType": "lunch", "items": [["id": "a", "calories": 100]]])
        }
        // A feed with changes already (so the probe has something to find), then the measured
        // apply: 300 logs and their 300 new daily summaries, 600 changes in one feed.
        try await StoreHarness.withExisting(url) { harness in
            _ = try await harness.apply([Op.create("weightLogs", "w", ["kg": 70])])
        }
        let before = try await Self.settledCounters(url).indexScans["changes_commit_time", default: 0]
        try await StoreHarness.withExisting(url) { harness in
            let results = try await harness.apply(logs)
            #expect(results.allSatisfy { $0.outcome == "applied" }, "\(results.filter { $0.outcome != "applied" }.prefix(2))")
        }
        let applied = try await Self.settledCounters(url).indexScans["changes_commit_time", default: 0]
        #expect(applied - before == 1, "the apply of 600 changes to one feed read its newest commit time \(applied - before) times")
        // A rebuild that rewrites every summary (each changed behind the server's back).
        try await StoreHarness.withExisting(url) { harness in
            try await harness.execute("UPDATE entities SET data = jsonb_set(data, '{calories}', '0') WHERE entity_type = 'dailySummaries'")
            let report = try await harness.store.recomputeDerived(userID: "alice", from: nil, through: nil, collections: harness.collections, now: .now())
            #expect(report.written == days)
        }
        let rebuilt = try await Self.settledCounters(url).indexScans["changes_commit_time", default: 0]
        #expect(rebuilt - applied == 1, "the rebuild of \(days) summaries in one feed read its newest commit time \(rebuilt - applied) times")
    }

    struct Counters {
        /// Scans per index of `changes` and `feeds`.
        var indexScans: [String: Int] = [:]
        /// Rows per table read by sequential scans and fetched through its indexes.
        var rowsRead: [String: Int] = [:]
        var feedRowsRead: Int { rowsRead["feeds", default: -1] }
        var entityRowsRead: Int { rowsRead["entities", default: -1] }
        var changeRowsRead: Int { rowsRead["changes", default: -1] }
    }

    /// The counters once every other session of the database has ended: a session reports its
    /// counters when it ends (while it lives, only when idle and at most every few seconds).
    static func settledCounters(_ url: DatabaseURL) async throws -> Counters {
        guard case .postgres(let location) = url else { throw TestEnvironmentError(description: "PostgreSQL only") }
        return try await withConnection(location) { connection in
            func texts(_ sql: String) async throws -> [String] {
                try await connection.query(PostgresQuery(unsafeSQL: sql), logger: TestDatabases.logger).collect().map { try $0.decode(String.self) }
            }
            // Client sessions only: what an autovacuum worker reads is not counted as scans or
            // reads of these tables, and it may stay in the database as long as it likes.
            let others = "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            // The store is closed, so any session left is one whose close has not reached the
            // server yet. Stress runs (2026-11-26/27) saw such sessions stay idle for minutes after
            // their driver stopped; a session flushes its counters when it exits, terminated too.
            let left = try await texts("""
                SELECT concat_ws(' | ', application_name, state, wait_event_type || ':' || wait_event,
                    'idle for ' || (now() - state_change)::text, left(query, 60)) \(others)
                """)
            if !left.isEmpty {
                TestDatabases.logger.notice("sessions left after the store closed; terminating them", metadata: ["sessions": "\(left)"])
                _ = try await texts("SELECT pg_terminate_backend(pid)::text \(others)")
            }
            try await eventually("the store's sessions to end") {
                try await texts("SELECT count(*)::text \(others)") == ["0"]
            }
            var counters = Counters()
            for row in try await texts("SELECT indexrelname || '=' || idx_scan FROM pg_stat_user_indexes WHERE relname IN ('changes', 'feeds')") {
                let parts = row.split(separator: "=")
                if parts.count == 2, let count = Int(parts[1]) { counters.indexScans[String(parts[0])] = count }
            }
            for row in try await texts("SELECT relname || '=' || (seq_tup_read + coalesce(idx_tup_fetch, 0)) FROM pg_stat_user_tables") {
                let parts = row.split(separator: "=")
                if parts.count == 2, let count = Int(parts[1]) { counters.rowsRead[String(parts[0])] = count }
            }
            return counters
        }
    }
}
