import PostgresNIO
import SyncGateCore
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// How PostgreSQL runs the queries whose cost must not grow with the tables, proven by the
/// statistics counters of the indexes and tables they read (as of when every session has ended).
@Suite(.serialized, .timeLimit(.minutes(3))) struct QueryPlanTests {
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

    struct Counters {
        /// Scans per index of `changes` and `feeds`.
        var indexScans: [String: Int] = [:]
        /// Rows of `feeds` read by sequential scans and fetched through its indexes.
        var feedRowsRead = 0
    }

    /// The counters once every other session of the database has ended: a session reports its
    /// counters when it ends (while it lives, only when idle and at most every few seconds).
    static func settledCounters(_ url: DatabaseURL) async throws -> Counters {
        guard case .postgres(let location) = url else { throw TestEnvironmentError(description: "PostgreSQL only") }
        return try await withConnection(location) { connection in
            func texts(_ sql: String) async throws -> [String] {
                try await connection.query(PostgresQuery(unsafeSQL: sql), logger: TestDatabases.logger).collect().map { try $0.decode(String.self) }
            }
            try await eventually("the store's sessions to end", timeout: .seconds(15)) {
                try await texts("SELECT count(*)::text FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()") == ["0"]
            }
            var counters = Counters()
            for row in try await texts("SELECT indexrelname || '=' || idx_scan FROM pg_stat_user_indexes WHERE relname IN ('changes', 'feeds')") {
                let parts = row.split(separator: "=")
                if parts.count == 2, let count = Int(parts[1]) { counters.indexScans[String(parts[0])] = count }
            }
            counters.feedRowsRead = Int(try await texts("SELECT (seq_tup_read + coalesce(idx_tup_fetch, 0))::text FROM pg_stat_user_tables WHERE relname = 'feeds'").first ?? "") ?? -1
            return counters
        }
    }
}
