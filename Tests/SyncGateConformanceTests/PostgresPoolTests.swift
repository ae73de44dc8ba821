import PostgresNIO
@testable import SyncGatePostgres
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateTestSupport
import SyncGateConcurrency
import Synchronization
import Testing

/// The pool of requests and jobs as `serve` and `worker` run it (`PostgresDriver.hotPool`): it
/// opens a connection at start and keeps it (one: PostgresNIO 1.33's pool does not survive a
/// database restart with more), sends no keep-alive queries, and its sessions ask the server for
/// TCP keep-alives instead.
@Suite struct PostgresPoolTests {
    /// Each pool's sessions say what they are in `pg_stat_activity`: an operator tells the
    /// requests' and jobs' pool from the maintenance pool's up to 4 sessions.
    @Test func sessionsNameTheirPool() async throws {
        guard Driver.selected.contains(.postgres) else { return }
        let location = try await TestDatabases.shared.freshPostgres()
        let driver = PostgresDriver(configuration: .forTests(location, maximumConnections: 2), logger: StoreHarness.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await driver.run() }
            defer { group.cancelAll() }
            let pooled = try await driver.query("name", .request, "SELECT current_setting('application_name')", as: String.self)
            let maintenance = try await driver.query("name", .maintenance, "SELECT current_setting('application_name')", as: String.self)
            #expect(pooled == ["syncgate"])
            #expect(maintenance == ["syncgate maintenance"])
        }
    }

    /// An operator's and the maintenance pass's transactions (an erase, a purge, a recompute) are
    /// as large as the data: they run within the maintenance deadline, not a worker's. With the
    /// worker's deadline at a nanosecond, each still finishes.
    @Test func maintenanceTransactionsTakeTheMaintenanceDeadline() async throws {
        guard Driver.selected.contains(.postgres) else { return }
        let location = try await TestDatabases.shared.freshPostgres()
        try await StoreHarness.withExisting(.postgres(location)) { harness in
            _ = try await harness.apply([Op.create("foodLogs", "f1", ["loggedDate": "2026-01-15", "items": [["id": "a", "calories": 500]]])], user: "bob")
            _ = try await harness.apply([Op.create("weightLogs", "w1", ["kg": 70]), Op.delete("weightLogs", "w1", base: 1)])
        }
        var configuration = PostgresDriver.Configuration.forTests(location, maximumConnections: 2)
        configuration.jobTimeout = .nanoseconds(1)
        let driver = PostgresDriver(configuration: configuration, logger: StoreHarness.logger)
        let store = SyncStore(driver: driver, logger: StoreHarness.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await driver.run() }
            defer { group.cancelAll() }
            try await store.forceResync(userID: nil)
            #expect(try await store.retryDeadJobs(ids: nil) == 0)
            #expect(try await store.purgeTombstones(olderThanMilliseconds: -60_000).purgedTombstones == 1)
            _ = try await store.recomputeDerived(userID: "bob", from: nil, through: nil, collections: .default, now: .now())
            guard case .erased = try await store.eraseUser("bob") else { Issue.record("bob was not erased"); return }
        }
    }

    /// Without keep-alive queries, a session the server ends must still leave the pool: the
    /// pool opens its connections again and later statements do not fail on the ended ones.
    @Test func aPoolThatKeepsItsConnectionsReplacesTheOnesTheServerEnds() async throws {
        guard Driver.selected.contains(.postgres) else { return }
        let location = try await TestDatabases.shared.freshPostgres()
        let driver = PostgresDriver(
            configuration: .forTests(location, maximumConnections: 5, keepsAConnection: true), logger: StoreHarness.logger
        )
        let store = SyncStore(driver: driver, logger: StoreHarness.logger)
        // The pool's sessions: the ones counted are the ones ended.
        let pooled = "FROM pg_stat_activity WHERE application_name = 'syncgate' AND datname = current_database()"
        func sessions() async throws -> Int {
            try await withConnection(location) { try await $0.integer("SELECT count(*)::int \(pooled)") }
        }
        func push(_ id: String) async throws {
            let enqueued = try await store.enqueue(QueuedJob(userID: "ann", deviceID: "d", operations: [Op.create("weightLogs", id, ["kg": 70])], maximumAttempts: 5), limits: .init())
            guard case .accepted = enqueued else { throw TestEnvironmentError(description: "not accepted: \(enqueued)") }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await driver.run() }
            defer { group.cancelAll() }
            // Opened at start, before any statement needs one.
            try await eventually("the pool's kept session") { try await sessions() == 1 }
            let settings = try await driver.query(
                "settings", .request, "SELECT name, setting FROM pg_settings WHERE name IN ('tcp_keepalives_idle', 'plan_cache_mode', 'jit') ORDER BY name",
                as: (String, String).self
            )
            #expect(settings.map { "\($0.0)=\($0.1)" } == ["jit=off", "plan_cache_mode=force_generic_plan", "tcp_keepalives_idle=60"])
            try await push("before")

            let ended = try await withConnection(location) { try await $0.integer("SELECT count(pg_terminate_backend(pid))::int \(pooled)") }
            #expect(ended >= 1)  // the kept one, and any the enqueue's announcement opened
            try await eventually("the pool's session opened again") { try await sessions() == 1 }
            // Later statements do not fail on the ended sessions (an enqueue's announcement may
            // open a second connection beside the kept one: not counted).
            for index in 0..<6 { try await push("after-\(index)") }
        }
    }

    /// A request that holds a connection gives up (503) once the database is known to refuse
    /// connections, instead of waiting out its deadline for an answer that may never come (a
    /// statement in flight when the server went away). The listener's verdict is played here by
    /// setting it, while the statement sleeps well past the test.
    @Test func aRequestHoldingAConnectionGivesUpOnceTheDatabaseIsKnownDown() async throws {
        guard Driver.selected.contains(.postgres) else { return }
        let location = try await TestDatabases.shared.freshPostgres()
        var configuration = PostgresDriver.Configuration(location: location, maximumConnections: 2)
        configuration.requestTimeout = .seconds(3600)
        configuration.listens = false
        let driver = PostgresDriver(configuration: configuration, logger: StoreHarness.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await driver.run() }
            defer { group.cancelAll() }
            let sleeping = "FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(3600)%' AND state = 'active'"
            let outcome = Locked<Result<[String], any Error>?>(nil)
            let request = Task {
                do {
                    let rows = try await driver.query("sleep", .request, "SELECT pg_sleep(3600)::text", as: String.self)
                    outcome.update { $0 = .success(rows) }
                } catch {
                    outcome.update { $0 = .failure(error) }
                }
            }
            defer { request.cancel() }
            // The statement runs: the request holds its connection.
            try await eventually("the statement running") {
                try await withConnection(location) { try await $0.integer("SELECT count(*)::int \(sleeping)") } == 1
            }
            driver.databaseDown.store(true, ordering: .relaxed)
            try await eventually("the request to give up") { outcome.value != nil }
            guard case .failure(let error)? = outcome.value, error is StoreUnavailableError else {
                throw TestEnvironmentError(description: "expected StoreUnavailableError, got \(String(describing: outcome.value))")
            }
            // Clean-up: end the sleeping statement, should its cancellation not have reached it yet.
            try await withConnection(location) { _ = try await $0.integer("SELECT count(pg_cancel_backend(pid))::int \(sleeping)") }
        }
    }

    /// A process stopped between two statements of a transaction (SIGSTOP, a hung host) holds
    /// that transaction's locks: here a feed head, which every push to the feed must lock. The
    /// server ends such a session once it has sat idle in its transaction past the limit, so the
    /// feed is writable again, and the stopped transaction's writes are rolled back.
    @Test func aSessionIdleInATransactionIsEndedAndItsLocksReleased() async throws {
        guard Driver.selected.contains(.postgres) else { return }
        let location = try await TestDatabases.shared.freshPostgres()
        // Room for attempts that stay stuck (below).
        var configuration = PostgresDriver.Configuration.forTests(location, maximumConnections: 8)
        configuration.idleInTransactionTimeout = .seconds(3)
        // The caller's deadline also ends a transaction (in a process that runs): not this one.
        configuration.jobTimeout = .seconds(3600)
        let driver = PostgresDriver(configuration: configuration, logger: StoreHarness.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await driver.run() }
            defer { group.cancelAll() }
            try await withConnection(location) { try await $0.integer("INSERT INTO feeds (scope, head) VALUES ('u:ann', 7) RETURNING 0") }
            let resume = Latch()
            defer { resume.open() }
            // A loaded machine may pause this process for the limit between the transaction's
            // first statements: then the server ends it before it locks, and it is tried again.
            // (Its next statement then waits for the deadline: PostgresNIO does not answer one
            // sent on a session the server ended, so an attempt is also given up after a minute.)
            var stopped: Task<Void, Never>?
            for _ in 0..<5 where stopped == nil {
                let locked = Latch()
                let ended = Latch()
                let attempt = Task {
                    defer { ended.open() }
                    _ = try? await driver.transaction(now: nil, for: .apply) { transaction in
                        _ = try await transaction.lockFeeds([.user("ann"), .user("bob")])
                        locked.open()
                        // The stopped process: nothing more is sent in this transaction.
                        try await resume.wait()
                    }
                }
                // Both waits end at cancellation (a task's value would not).
                let tookTheLock = await withTaskGroup(of: Bool.self) { race in
                    race.addTask { (try? await locked.wait()) != nil }
                    race.addTask { (try? await ended.wait()).map { false } ?? false }
                    race.addTask { (try? await Task.sleep(for: .seconds(60))).map { false } ?? false }
                    defer { race.cancelAll() }
                    return await race.next() ?? false
                }
                if tookTheLock { stopped = attempt } else { attempt.cancel() }
            }
            defer { stopped?.cancel() }
            guard stopped != nil else {
                Issue.record("the transaction never held the lock: ended before its second statement five times")
                return
            }
            // Another writer waits for the feed's lock and gets it once the session is ended
            // (its lock_timeout is a hang guard only: without the limit the test fails there).
            let head = try await withConnection(location) { connection in
                _ = try await connection.query("SET lock_timeout = '120s'", logger: TestDatabases.logger)
                return try await connection.integer("SELECT head::int FROM feeds WHERE scope = 'u:ann' FOR UPDATE")
            }
            #expect(head == 7)
            // Its write (the feed it made) was rolled back with it. (Resumed, it fails only at
            // its deadline: PostgresNIO does not answer a statement sent on the ended session.)
            let made = try await withConnection(location) { try await $0.integer("SELECT count(*)::int FROM feeds WHERE scope = 'u:bob'") }
            #expect(made == 0)
        }
    }
}
