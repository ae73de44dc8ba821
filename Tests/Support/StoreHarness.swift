import Foundation
import GRDB
package import Logging
import PostgresNIO
package import SyncGateCore
package import SyncGateWire
package import SyncGatePostgres
import SyncGateSQLite
package import SyncGateStorage
package import SyncGateWorker

/// A running store on a fresh database, for one test.
package struct StoreHarness: Sendable {
    package let driver: Driver
    package let store: SyncStore
    package let url: DatabaseURL
    package let collections: Collections
    /// The store's clock when the test moves time by hand.
    package let clock: ManualClock?

    package static let logger = TestDatabases.logger

    /// Runs `body` with a fresh store of `driver`; tears it down afterwards.
    ///
    /// - Parameter clock: a clock the test moves instead of sleeping (claims, leases, backoff, retention).
    package static func with<Result: Sendable>(
        _ driver: Driver,
        collections: Collections = .default,
        clock: ManualClock? = nil,
        hooks: StoreHooks = .init(),
        listenerReconnectDelay: Duration? = nil,
        _ body: @Sendable (StoreHarness) async throws -> Result
    ) async throws -> Result {
        let url: DatabaseURL
        switch driver {
        case .postgres: url = .postgres(try await TestDatabases.shared.freshPostgres())
        case .sqlite: url = .sqlite(path: try TestDatabases.freshSQLitePath())
        }
        // The SQLite file's folder goes with the test (it may live in memory, in /dev/shm).
        defer { if case .sqlite(let path) = url { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) } }
        return try await withExisting(url, collections: collections, clock: clock, hooks: hooks, listenerReconnectDelay: listenerReconnectDelay, body)
    }

    /// Runs `body` with a store on an existing database (one a test also gives to processes).
    /// - Parameters:
    ///   - productionDeadlines: give PostgreSQL calls the server's own deadlines instead of the
    ///     tests' generous ones (for tests of what happens when the database goes away).
    ///   - requestDeadline: a request's deadline instead of either.
    package static func withExisting<Result: Sendable>(
        _ url: DatabaseURL,
        collections: Collections = .default,
        clock: ManualClock? = nil,
        hooks: StoreHooks = .init(),
        productionDeadlines: Bool = false,
        requestDeadline: Duration? = nil,
        listenerReconnectDelay: Duration? = nil,
        _ body: @Sendable (StoreHarness) async throws -> Result
    ) async throws -> Result {
        let (made, service) = try makeStore(
            url, clock: clock, productionDeadlines: productionDeadlines, requestDeadline: requestDeadline, listenerReconnectDelay: listenerReconnectDelay
        )
        var hooked = made
        hooked.hooks = hooks
        let store = hooked
        let harness = StoreHarness(driver: Driver(for: url), store: store, url: url, collections: collections, clock: clock)
        // Unstructured, so that a driver that does not stop fails the test by name instead of
        // holding it past its time limit (a task group would wait for it without end).
        let running = Task { try await service() }
        do {
            let result: Swift.Result<Result, any Error>
            do {
                try await store.migrate(logger: logger)
                result = .success(try await body(harness))
            } catch {
                result = .failure(error)
            }
            running.cancel()
            do {
                try await value(of: running, "the store's driver to stop after its cancellation")
            } catch let error as TestEnvironmentError {
                // The body's own failure says more than the hang it may have caused.
                if case .success = result { throw error }
            } catch {
                // How the driver ended does not matter once the test is over.
            }
            return try result.get()
        } catch let error as PSQLError {
            // PSQLError hides its details from `description`; tests want them.
            throw TestEnvironmentError(description: String(reflecting: error))
        }
    }

    /// A second store on the same database: another process's view (PostgreSQL), or the file
    /// opened again as after a restart (SQLite).
    package func sibling() throws -> (SyncStore, @Sendable () async throws -> Void) {
        try Self.makeStore(url, clock: clock)
    }

    package static func makeStore(
        _ url: DatabaseURL, clock: ManualClock? = nil, productionDeadlines: Bool = false, requestDeadline: Duration? = nil,
        listenerReconnectDelay: Duration? = nil
    ) throws -> (SyncStore, @Sendable () async throws -> Void) {
        let storeClock = clock.map(StoreClock.manual) ?? .database
        switch url {
        case .postgres(let location):
            // The queue depth is read fresh for every push.
            var configuration = productionDeadlines
                ? PostgresDriver.Configuration(location: location, maximumConnections: 16)
                : .forTests(location, maximumConnections: 16)
            configuration.queueDepthCacheDuration = .zero
            if let requestDeadline { configuration.requestTimeout = requestDeadline }
            if let listenerReconnectDelay { configuration.listenerReconnectDelay = listenerReconnectDelay }
            let driver = PostgresDriver(configuration: configuration, logger: logger)
            return (SyncStore(driver: driver, clock: storeClock, logger: logger), { try await driver.run() })
        case .sqlite(let path):
            let driver = try SQLiteDriver(path: path, logger: logger)
            return (SyncStore(driver: driver, clock: storeClock, logger: logger), { try await driver.run() })
        }
    }

    // MARK: - Helpers

    /// Enqueues a push without limits and returns its job id.
    @discardableResult
    package func push(_ operations: [SyncOperation], user: String = "alice", device: String = "d1") async throws -> Int64 {
        let result = try await store.enqueue(
            // The test workers' budget (workerConfiguration): a job keeps the one it was queued with.
            QueuedJob(userID: user, deviceID: device, operations: operations, maximumAttempts: 3),
            limits: .init(maximumQueuedPerUser: .max, maximumQueuedTotal: .max)
        )
        guard case .accepted(let id) = result else { throw TestEnvironmentError(description: "enqueue refused: \(result)") }
        return id
    }

    /// Claims and applies jobs in this task until none is runnable, at `now` (default: the
    /// harness's clock, or the wall clock).
    @discardableResult
    package func drain(worker: String = "test-worker", now: Timestamp? = nil) async throws -> [Int64: [OperationResult]] {
        let now = now ?? clock?.now ?? .now()
        var results: [Int64: [OperationResult]] = [:]
        while let job = try await store.claimJobs(workerID: worker, limit: 1, leaseMilliseconds: 30_000).first {
            if case .done(let jobResults, _) = try await store.apply(job, collections: collections, now: now) {
                results[job.id] = jobResults
            }
        }
        return results
    }

    /// Pushes and applies one batch; returns its results.
    package func apply(_ operations: [SyncOperation], user: String = "alice", device: String = "d1") async throws -> [OperationResult] {
        let id = try await push(operations, user: user, device: device)
        let results = try await drain()
        guard let jobResults = results[id] else { throw TestEnvironmentError(description: "job \(id) was not applied") }
        return jobResults
    }

    /// Pages through the user's feeds from `cursor` until `has_more` is false.
    package func pullAll(
        user: String = "alice", device: String = "d1", from cursor: SyncCursor? = nil, limit: Int = 500, types: Set<String>? = nil
    ) async throws -> (changes: [FeedChange], last: PullResult) {
        var cursor = cursor
        var changes: [FeedChange] = []
        while true {
            let page = try await store.pull(PullQuery(userID: user, deviceID: device, cursor: cursor, limit: limit, entityTypes: types))
            changes += page.changes
            cursor = page.cursor
            if !page.hasMore { return (changes, page) }
        }
    }

    /// A worker configuration with short intervals, for tests.
    /// - Parameter pollInterval: how often an idle worker re-checks the queue without a notification.
    package static func workerConfiguration(
        concurrency: Int = 2, leaseMilliseconds: Int64 = 30_000, pollInterval: Duration = .milliseconds(100), id: String = "worker"
    ) -> WorkerConfiguration {
        WorkerConfiguration(
            concurrency: concurrency, leaseMilliseconds: leaseMilliseconds, heartbeatInterval: .milliseconds(200),
            pollInterval: pollInterval, rescueInterval: .milliseconds(200),
            retryPolicy: RetryPolicy(maximumAttempts: 3, baseDelayMilliseconds: 20, maximumDelayMilliseconds: 100),
            workerID: id
        )
    }

    /// Runs `count` workers on this store while `body` runs.
    package func withWorkers<Result: Sendable>(
        _ count: Int,
        concurrency: Int = 2,
        leaseMilliseconds: Int64 = 30_000,
        hooks: WorkerHooks = .init(),
        _ body: @Sendable () async throws -> Result
    ) async throws -> Result {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<count {
                let worker = Worker(
                    store: store,
                    collections: collections,
                    configuration: Self.workerConfiguration(concurrency: concurrency, leaseMilliseconds: leaseMilliseconds, id: "worker-\(index)"),
                    hooks: hooks,
                    logger: Self.logger
                )
                group.addTask { try await worker.run() }
            }
            defer { group.cancelAll() }
            return try await body()
        }
    }

    /// Waits until the job is finished (polling), or fails after `timeout`.
    package func waitFinished(_ id: Int64, user: String = "alice", timeout: Duration = hangGuard) async throws -> JobRecord {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let job = try await store.job(id: id, userID: user), job.state.isFinished { return job }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestEnvironmentError(description: "job \(id) did not finish within \(timeout)")
    }

    /// The first column of every row of raw SQL, as text (cast it in the query).
    package func queryTexts(_ sql: String) async throws -> [String] {
        switch url {
        case .postgres(let location):
            return try await withConnection(location) {
                try await $0.query(PostgresQuery(unsafeSQL: sql), logger: TestDatabases.logger).collect().map { try $0.decode(String.self) }
            }
        case .sqlite(let path):
            return try await DatabaseQueue(path: path).read { try String.fetchAll($0, sql: sql) }
        }
    }

    /// Runs raw SQL on the harness's database (to plant rows no client could write).
    package func execute(_ sql: String) async throws {
        switch url {
        case .postgres(let location):
            _ = try await withConnection(location) { try await $0.query(PostgresQuery(unsafeSQL: sql), logger: TestDatabases.logger) }
        case .sqlite(let path):
            // A running server's idle workers take the write lock to claim: wait like it does.
            var configuration = Configuration()
            configuration.busyMode = .timeout(10)
            let queue = try DatabaseQueue(path: path, configuration: configuration)
            try await queue.write { try $0.execute(sql: sql) }
        }
    }
}

/// Operation builders for integration tests.
package enum Op {
    package static let clock = Timestamp(rfc3339: "2026-01-15T10:00:00.000Z")!

    package static func create(_ type: String, _ id: String, _ data: JSONObject, key: String? = nil, household: String? = nil, at: Timestamp? = nil) -> SyncOperation {
        SyncOperation(idempotencyKey: key ?? "c-\(type)-\(id)-\(UUID().uuidString)", entityType: type, entityID: id, intent: .create, baseVersion: 0, data: data, clientTimestamp: at ?? .now(), householdID: household)
    }

    package static func update(_ type: String, _ id: String, base: Int64, _ data: JSONObject, key: String? = nil, household: String? = nil, at: Timestamp? = nil) -> SyncOperation {
        SyncOperation(idempotencyKey: key ?? "u-\(type)-\(id)-\(UUID().uuidString)", entityType: type, entityID: id, intent: .update, baseVersion: base, data: data, clientTimestamp: at ?? .now(), householdID: household)
    }

    package static func delete(_ type: String, _ id: String, base: Int64, key: String? = nil, household: String? = nil, at: Timestamp? = nil) -> SyncOperation {
        SyncOperation(idempotencyKey: key ?? "d-\(type)-\(id)-\(UUID().uuidString)", entityType: type, entityID: id, intent: .delete, baseVersion: base, clientTimestamp: at ?? .now(), householdID: household)
    }
}

extension OperationResult {
    /// `applied`, `duplicate`, a resolution, or the error code.
    package var outcome: String {
        switch status {
        case .applied: return "applied"
        case .duplicate: return "duplicate"
        case .conflict(let resolution): return resolution.rawValue
        case .rejected(let code, _, _): return code
        }
    }
}

extension ApplyOutcome {
    package var isDone: Bool {
        if case .done = self { return true }
        return false
    }
}

extension EnqueueResult {
    package var isAccepted: Bool {
        if case .accepted = self { return true }
        return false
    }
}

extension Sequence where Element: Sendable {
    package func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}

extension PostgresDriver.Configuration {
    /// A driver's configuration with deadlines far longer than the server's own (5 s / 15 s), for
    /// tests that are not about deadlines: a fully parallel run on a 2-core CI machine (under
    /// `stress-ng` too) stalls single calls for seconds.
    package static func forTests(
        _ location: DatabaseURL.PostgresLocation, maximumConnections: Int, keepsAConnection: Bool = false
    ) -> Self {
        var configuration = Self(location: location, maximumConnections: maximumConnections, keepsAConnection: keepsAConnection)
        configuration.requestTimeout = .seconds(30)
        configuration.jobTimeout = .seconds(90)
        return configuration
    }
}
