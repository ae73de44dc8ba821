import PostgresNIO
import SyncGateCore
import SyncGateWire
@testable import SyncGatePostgres
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// Writers lock their feeds in one global (sorted) order, or two of them can deadlock. An
/// apply's first statement locks its jobs and feeds; when one of the feeds does not exist yet it
/// must lock none of them, because the apply then creates the missing feed — and creating it can
/// wait on another writer that is creating the same feed and next asks for one the apply would
/// hold (a feed sorting after the missing one): a deadlock PostgreSQL breaks after a second by
/// failing one side. Then the apply locks every feed, in order.
@Suite(.timeLimit(.minutes(10))) struct FeedLockOrderTests {
    @Test func theFirstStatementLocksNoFeedWhileOneIsMissing() async throws {
        let location = try await TestDatabases.shared.freshPostgres()
        try await StoreHarness.withExisting(.postgres(location)) { harness in
            try await harness.execute("INSERT INTO feeds (scope) VALUES ('u:b'), ('u:c')")
        }
        try await withConnection(location) { apply in
            try await withConnection(location) { other in
                func run(_ connection: PostgresConnection, _ sql: String) async throws {
                    _ = try await connection.query(PostgresQuery(unsafeSQL: sql), logger: TestDatabases.logger).collect()
                }
                func otherTakes(_ scope: String) async throws -> Bool {
                    // NOWAIT fails at once (55P03) when the apply holds the row.
                    do {
                        try await run(other, "BEGIN")
                        defer { Task { try? await run(other, "ROLLBACK") } }
                        try await run(other, "SELECT head FROM feeds WHERE scope = '\(scope)' FOR UPDATE NOWAIT")
                        try await run(other, "ROLLBACK")
                        return true
                    } catch let error as PSQLError where error.serverInfo?[.sqlState] == "55P03" {
                        try await run(other, "ROLLBACK")
                        return false
                    }
                }
                // `u:a` is missing: nothing may be held.
                try await run(apply, "BEGIN")
                let someMissing = try await apply.rows(LockForApplyStatement(leases: [], scopes: ["u:a", "u:b"]), logger: TestDatabases.logger)
                #expect(someMissing.isEmpty)
                #expect(try await otherTakes("u:b"), "the first statement held u:b while u:a was missing")
                try await run(apply, "ROLLBACK")
                // Every feed exists: all are held, in order (the statement's ordinary path).
                try await run(apply, "BEGIN")
                let allThere = try await apply.rows(LockForApplyStatement(leases: [], scopes: ["u:b", "u:c"]), logger: TestDatabases.logger)
                #expect(allThere.map(\.0) == ["u:b", "u:c"])
                #expect(try await !otherTakes("u:c"), "the first statement did not lock its feeds")
                try await run(apply, "ROLLBACK")
            }
        }
    }
}
