import PostgresNIO
import SyncGateCore
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// How PostgreSQL reads a pull page when its statistics do not know the feed: a user who wrote
/// thousands of changes since the last ANALYZE looks like a feed of one row to the planner, and
/// it then read the whole feed by the commit-time index and sorted it, for every page — a
/// bootstrap cost that grew with the square of the feed (found with auto_explain in `load
/// bootstrap`). A page must come from the (scope, seq) key, in order, whatever the statistics.
@Suite(.serialized, .timeLimit(.minutes(3))) struct PullPlanTests {
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
        let before = try await Self.settledIndexScans(url)
        try await StoreHarness.withExisting(url) { harness in
            let page = try await harness.store.pull(PullQuery(userID: cat, deviceID: "new", cursor: nil, limit: 1000))
            #expect(page.changes.count == 1000 && page.hasMore)
        }
        let after = try await Self.settledIndexScans(url)
        #expect(after["changes_pkey", default: 0] > before["changes_pkey", default: 0], "the page was not read by the key")
        #expect(after["changes_commit_time"] == before["changes_commit_time"], "the page was read by the commit-time index")
        #expect(after["changes_entity"] == before["changes_entity"], "the page was read by the entity index")
    }

    /// The index counters once every other session of the database has ended: a session reports
    /// its counters when it ends (while it lives, only when idle and at most every few seconds).
    static func settledIndexScans(_ url: DatabaseURL) async throws -> [String: Int] {
        guard case .postgres(let location) = url else { throw TestEnvironmentError(description: "PostgreSQL only") }
        return try await withConnection(location) { connection in
            func texts(_ sql: String) async throws -> [String] {
                try await connection.query(PostgresQuery(unsafeSQL: sql), logger: TestDatabases.logger).collect().map { try $0.decode(String.self) }
            }
            try await eventually("the store's sessions to end", timeout: .seconds(15)) {
                try await texts("SELECT count(*)::text FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()") == ["0"]
            }
            var scans: [String: Int] = [:]
            for row in try await texts("SELECT indexrelname || '=' || idx_scan FROM pg_stat_user_indexes WHERE relname = 'changes'") {
                let parts = row.split(separator: "=")
                if parts.count == 2, let count = Int(parts[1]) { scans[String(parts[0])] = count }
            }
            return scans
        }
    }
}
