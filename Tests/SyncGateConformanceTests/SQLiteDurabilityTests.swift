import Foundation
import GRDB
import Logging
import SyncGateCore
import SyncGateWire
import SyncGateServer
import SyncGateStorage
import SyncGateRuntime
import SyncGateConcurrency
import SyncGateTestSupport
import Testing

@testable import SyncGateSQLite

/// The embedded driver's promises about the file: an acknowledged push survives power loss, and
/// a command opening a live server's file leaves the server's jobs alone.
@Suite(.timeLimit(.minutes(10))) struct SQLiteDurabilityTests {
    /// WAL with `synchronous = NORMAL` does not sync the log at commit: the push a client was told
    /// is stored could vanish with the power. FULL (2) syncs every commit.
    @Test func everyCommitIsSyncedToDisk() async throws {
        let path = try TestDatabases.freshSQLitePath()
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        let driver = try SQLiteDriver(path: path, logger: TestDatabases.logger)
        #expect(try await driver.write { try String.fetchOne($0, sql: "PRAGMA journal_mode") } == "wal")
        #expect(try await driver.write { try Int.fetchOne($0, sql: "PRAGMA synchronous") } == 2)
    }

    /// A heartbeat that waited for the writer behind a long write extends its lease from when it
    /// writes, as the rescuer reads its clock once it holds the writer: dated from before the
    /// wait, the extension could already be past, and the rescuer re-queued a running job.
    @Test func aHeartbeatThatWaitedForTheWriterExtendsFromWhenItWrites() async throws {
        try await StoreHarness.with(.sqlite) { harness in
            let driver = try #require(harness.store.driver as? SQLiteDriver)
            _ = try await harness.push([Op.create("weightLogs", "w", ["kg": 1])])
            let claimed = try #require(try await driver.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 60_000, now: nil).first)
            let holding = TestGate("the writer held"), release = TestGate("the long write to end")
            let long = Task {
                try await driver.transaction(now: nil, for: .maintenance) { _ in
                    holding.open()
                    try await release.wait()
                }
            }
            try await holding.wait()
            // An extension of 200 ms, asked for now; the write holds the writer longer than that.
            let asked = Timestamp.now()
            let heartbeat = Task { try await driver.extendLeases([claimed.lease], leaseMilliseconds: 200, now: nil) }
            try await eventually("the heartbeat waiting for the writer", every: .milliseconds(10)) { driver.writer.waiting == 1 }
            try await eventually("200 ms since it was asked", every: .milliseconds(10)) { Timestamp.now() > asked.adding(milliseconds: 250) }
            let released = Timestamp.now()
            release.open()
            try await long.value
            try await heartbeat.value
            // Dated from the write, not the ask: still ahead of when the writer was let go.
            let expires = try await harness.queryTexts("SELECT CAST(lease_expires_at AS TEXT) FROM jobs").compactMap { Int64($0) }
            #expect(expires.count == 1 && expires[0] >= released.millisecondsSinceEpoch + 200, "\(expires) against \(released.millisecondsSinceEpoch)")
        }
    }

    /// One maintenance pass at a time per file, whichever process runs it (`serve`'s and
    /// `syncgate admin maintain`'s drivers are two): a second driver on the file is told another
    /// holds the lock, and gets it once the first let go.
    @Test func oneMaintenancePassAtATimePerFileAcrossDrivers() async throws {
        let path = try TestDatabases.freshSQLitePath()
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        let first = try SQLiteDriver(path: path, logger: TestDatabases.logger)
        let second = try SQLiteDriver(path: path, logger: TestDatabases.logger)
        let holding = TestGate("the first pass running")
        let release = TestGate("the first pass released")
        let pass = Task { try await first.withMaintenanceLock { holding.open(); try await release.wait(); return 1 } }
        try await holding.wait()
        #expect(try await second.withMaintenanceLock { 2 } == nil)
        release.open()
        #expect(try await pass.value == 1)
        #expect(try await second.withMaintenanceLock { 2 } == 2)
    }

    /// A claim or a lease extension commits without syncing the log (`durable: false`: lost in a
    /// power cut, it only runs a job again); every other write syncs its commit, after a relaxed
    /// one and after a relaxed one that failed.
    @Test func onlyClaimsAndLeasesCommitWithoutASync() async throws {
        let path = try TestDatabases.freshSQLitePath()
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        let driver = try SQLiteDriver(path: path, logger: TestDatabases.logger)
        #expect(try await driver.write(durable: false) { try Int.fetchOne($0, sql: "PRAGMA synchronous") } == 1)
        #expect(try await driver.write { try Int.fetchOne($0, sql: "PRAGMA synchronous") } == 2)
        struct Refused: Error {}
        await #expect(throws: Refused.self) { try await driver.write(durable: false) { _ in throw Refused() } }
        #expect(try await driver.write { try Int.fetchOne($0, sql: "PRAGMA synchronous") } == 2)
        // After a real claim and lease extension, too.
        let store = SyncStore(driver: driver, logger: TestDatabases.logger)
        _ = try await store.migrate(logger: TestDatabases.logger)
        let job = QueuedJob(userID: "alice", deviceID: "d1", operations: [Op.create("weightLogs", "w1", ["kg": 70])], maximumAttempts: 5)
        guard case .accepted = try await store.enqueue(job, limits: .init()) else { throw TestEnvironmentError(description: "not enqueued") }
        let claimed = try await store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 60_000)
        #expect(claimed.count == 1)
        try await driver.extendLeases(claimed.map(\.lease), leaseMilliseconds: 60_000, now: nil)
        #expect(try await driver.write { try Int.fetchOne($0, sql: "PRAGMA synchronous") } == 2)
    }

    /// The writer copies the log into the file every 10,000 pages (~40 MiB), not SQLite's 1,000:
    /// ten times fewer copies, each of fewer pages per change (see `SQLiteDriver.checkpointPages`).
    @Test func theLogIsCheckpointedEveryTenThousandPages() async throws {
        let path = try TestDatabases.freshSQLitePath()
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        let driver = try SQLiteDriver(path: path, logger: TestDatabases.logger)
        #expect(try await driver.write { try Int.fetchOne($0, sql: "PRAGMA wal_autocheckpoint") } == 10_000)
    }

    /// `syncgate admin …` and `syncgate migrate` open the file of a running server: the job that
    /// server's worker holds stays held (only a serving process, at its start, releases leases).
    @Test func aCommandOpeningALiveFileKeepsTheServersLeases() async throws {
        let path = try TestDatabases.freshSQLitePath()
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        try await StoreHarness.withExisting(.sqlite(path: path)) { harness in
            let id = try await harness.push([Op.create("weightLogs", "w1", ["kg": 70])])
            try await harness.execute("UPDATE jobs SET state = 'running', attempts = 1, lease_expires_at = 4102444800000 WHERE id = \(id)")
        }
        let (stats, _) = try await OpenStore.with(.sqlite(path: path), logger: TestDatabases.logger) { store in
            (try await store.stats(), try await store.migrate(logger: TestDatabases.logger))
        }
        #expect(stats.jobsByState[.running] == 1, "\(stats)")
        let lease = try await DatabaseQueue(path: path).read { try Int64.fetchOne($0, sql: "SELECT lease_expires_at FROM jobs") }
        #expect(lease == 4_102_444_800_000)
    }

    /// A push while another process holds the file's write lock past the busy timeout (an admin
    /// command's long transaction) is told the database is unavailable, which clients retry; it
    /// was an internal error (`500`). Once the lock is gone the same push goes through.
    @Test func aWriteLockHeldByAnotherProcessMakesTheStoreUnavailableNotBroken() async throws {
        let path = try TestDatabases.freshSQLitePath()
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        try await StoreHarness.withExisting(.sqlite(path: path)) { _ in }
        let store = SyncStore(driver: try SQLiteDriver(path: path, busyTimeout: .milliseconds(200), logger: TestDatabases.logger), logger: TestDatabases.logger)
        let job = QueuedJob(userID: "alice", deviceID: "d1", operations: [Op.create("weightLogs", "w1", ["kg": 70])], maximumAttempts: 5)
        var unsafe = Configuration()
        unsafe.allowsUnsafeTransactions = true  // the lock stays held across two accesses
        let other = try DatabaseQueue(path: path, configuration: unsafe)
        try await other.writeWithoutTransaction { try $0.execute(sql: "BEGIN IMMEDIATE") }
        await #expect(throws: StoreUnavailableError.self) { try await store.enqueue(job, limits: .init()) }
        try await other.writeWithoutTransaction { try $0.execute(sql: "ROLLBACK") }
        guard case .accepted = try await store.enqueue(job, limits: .init()) else {
            Issue.record("the push was not accepted once the lock was gone")
            return
        }
    }

    /// Pushes that arrive while the writer is busy are enqueued together, in one transaction and
    /// one flush of the log, and each counts the ones before it against the per-user limit.
    @Test func enqueuesWaitingForTheWriterGoTogetherAndCountEachOther() async throws {
        let path = try TestDatabases.freshSQLitePath()
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        try await StoreHarness.withExisting(.sqlite(path: path)) { _ in }
        let driver = try SQLiteDriver(path: path, logger: TestDatabases.logger)
        let job = QueuedJob(userID: "alice", deviceID: "d1", operations: [Op.create("weightLogs", "w1", ["kg": 70])], maximumAttempts: 5)
        let limits = QueueLimits(maximumQueuedPerUser: 3)
        let holding = TestGate("the writer held")
        let release = TestGate("the writer released")
        let held = Task {
            try await driver.transaction(now: nil) { _ in
                holding.open()
                try await release.wait()
            }
        }
        try await holding.wait()
        let first = Task { try await driver.insertJob(job, limits: limits, now: nil) }
        try await eventually("the first enqueue's transaction waiting for the writer") { driver.enqueues.callCount == 1 }
        let later = (0..<3).map { _ in Task { try await driver.insertJob(job, limits: limits, now: nil) } }
        try await eventually("three enqueues waiting for the next transaction") { driver.enqueues.waitingCount == 3 }
        release.open()
        try await held.value
        var results = [try await first.value]
        for task in later { results.append(try await task.value) }
        #expect(driver.enqueues.callCount == 2, "the three went in one transaction")
        #expect(results.filter { if case .accepted = $0 { true } else { false } }.count == 3)
        #expect(results.filter { $0 == .rateLimited(queued: 3) }.count == 1, "\(results)")
        let queued = try await driver.write { try Int.fetchOne($0, sql: "SELECT count(*) FROM jobs") }
        #expect(queued == 3)
    }
}
