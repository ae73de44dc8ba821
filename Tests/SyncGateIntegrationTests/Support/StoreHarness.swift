import Foundation
import Logging
import Synchronization
import PostgresNIO
import SyncGateCore
import SyncGatePostgres
import SyncGateSQLite
import SyncGateStorage
import SyncGateWorker

/// A running store on a fresh database, for one test.
struct StoreHarness: Sendable {
    let driver: Driver
    let store: any SyncStore
    let url: DatabaseURL
    let collections: Collections

    static let logger = TestDatabases.logger

    /// Runs `body` with a fresh store of `driver`; tears it down afterwards.
    static func with<Result: Sendable>(
        _ driver: Driver,
        collections: Collections = .default,
        _ body: @Sendable (StoreHarness) async throws -> Result
    ) async throws -> Result {
        do {
            return try await run(driver, collections: collections, body)
        } catch let error as PSQLError {
            // PSQLError hides its details from `description`; tests want them.
            throw TestEnvironmentError(description: String(reflecting: error))
        }
    }

    /// Runs `body` with a store on an existing database (one a test also gives to processes).
    /// - Parameter productionDeadlines: give PostgreSQL calls the server's own deadlines instead
    ///   of the tests' generous ones (for tests of what happens when the database goes away).
    static func withExisting<Result: Sendable>(
        _ url: DatabaseURL,
        collections: Collections = .default,
        productionDeadlines: Bool = false,
        _ body: @Sendable (StoreHarness) async throws -> Result
    ) async throws -> Result {
        let (store, service) = try makeStore(url, productionDeadlines: productionDeadlines)
        return try await run(store: store, service: service, url: url, collections: collections, body)
    }

    private static func run<Result: Sendable>(
        _ driver: Driver,
        collections: Collections,
        _ body: @Sendable (StoreHarness) async throws -> Result
    ) async throws -> Result {
        let (store, url, service) = try await makeStore(driver)
        return try await run(store: store, service: service, url: url, collections: collections, body)
    }

    private static func run<Result: Sendable>(
        store: any SyncStore,
        service: (@Sendable () async throws -> Void)?,
        url: DatabaseURL,
        collections: Collections,
        _ body: @Sendable (StoreHarness) async throws -> Result
    ) async throws -> Result {
        let driver = Driver(for: url)
        let harness = StoreHarness(driver: driver, store: store, url: url, collections: collections)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            if let service { group.addTask { try await service() } }
            defer {
                group.cancelAll()
            }
            try await store.migrate(logger: logger)
            let result = try await body(harness)
            await store.shutdown()
            return result
        }
    }

    /// A second store on the same database: another process's view (PostgreSQL), or the file
    /// opened again as after a restart (SQLite).
    func sibling() throws -> (any SyncStore, (@Sendable () async throws -> Void)?) {
        try Self.makeStore(url)
    }

    static func makeStore(_ driver: Driver) async throws -> (any SyncStore, DatabaseURL, (@Sendable () async throws -> Void)?) {
        switch driver {
        case .postgres:
            let url = DatabaseURL.postgres(try await TestDatabases.shared.freshPostgres())
            let (store, service) = try makeStore(url)
            return (store, url, service)
        case .sqlite:
            let url = DatabaseURL.sqlite(path: try TestDatabases.freshSQLitePath())
            let (store, service) = try makeStore(url)
            return (store, url, service)
        }
    }

    static func makeStore(_ url: DatabaseURL, productionDeadlines: Bool = false) throws -> (any SyncStore, (@Sendable () async throws -> Void)?) {
        switch url {
        case .postgres(let location):
            // Unless asked for the production deadlines (5 s / 15 s), far longer ones: a fully
            // parallel run on a 2-core CI machine stalls single calls for seconds, and most tests
            // are not about deadlines.
            var configuration = PostgresStore.Configuration(location: location, maximumConnections: 16)
            if !productionDeadlines {
                configuration.requestTimeout = .seconds(30)
                configuration.jobTimeout = .seconds(90)
            }
            let store = PostgresStore(configuration: configuration, logger: logger)
            return (store, { try await store.run() })
        case .sqlite(let path):
            let store = try SQLiteStore(path: path, logger: logger)
            return (store, { try await store.run() })
        }
    }

    // MARK: - Helpers

    /// Enqueues a push without limits and returns its job id.
    @discardableResult
    func push(_ operations: [SyncOperation], user: String = "alice", device: String = "d1") async throws -> Int64 {
        let result = try await store.enqueue(NewJob(userID: user, deviceID: device, operations: operations, maximumAttempts: 5), limits: .init(maximumQueuedPerUser: .max, maximumQueuedTotal: .max))
        guard case .accepted(let id) = result else { throw TestEnvironmentError(description: "enqueue refused: \(result)") }
        return id
    }

    /// Claims and applies jobs in this task until none is runnable.
    @discardableResult
    func drain(worker: String = "test-worker", now: Timestamp = .now()) async throws -> [Int64: [OperationResult]] {
        var results: [Int64: [OperationResult]] = [:]
        while let job = try await store.claimJobs(workerID: worker, limit: 1, leaseMilliseconds: 30_000).first {
            if case .done(let jobResults, _) = try await store.apply(job, collections: collections, now: now) {
                results[job.id] = jobResults
            }
        }
        return results
    }

    /// Pushes and applies one batch; returns its results.
    func apply(_ operations: [SyncOperation], user: String = "alice", device: String = "d1") async throws -> [OperationResult] {
        let id = try await push(operations, user: user, device: device)
        let results = try await drain()
        guard let jobResults = results[id] else { throw TestEnvironmentError(description: "job \(id) was not applied") }
        return jobResults
    }

    /// Pages through the user's feeds from `cursor` until `has_more` is false.
    func pullAll(user: String = "alice", device: String = "d1", from cursor: SyncCursor? = nil, limit: Int = 500, types: Set<String>? = nil) async throws -> (changes: [FeedChange], last: PullPage) {
        var cursor = cursor
        var changes: [FeedChange] = []
        while true {
            let page = try await store.pull(PullQuery(userID: user, deviceID: device, cursor: cursor, limit: limit, entityTypes: types))
            changes += page.changes
            cursor = page.cursor
            if !page.hasMore { return (changes, page) }
        }
    }

    /// Runs `count` workers on this store while `body` runs.
    func withWorkers<Result: Sendable>(
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
                    configuration: WorkerConfiguration(
                        concurrency: concurrency, leaseMilliseconds: leaseMilliseconds, heartbeatInterval: .milliseconds(200),
                        pollInterval: .milliseconds(100), rescueInterval: .milliseconds(200),
                        retryPolicy: RetryPolicy(maximumAttempts: 3, baseDelayMilliseconds: 20, maximumDelayMilliseconds: 100),
                        workerID: "worker-\(index)"
                    ),
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
    func waitFinished(_ id: Int64, user: String = "alice", timeout: Duration = .seconds(30)) async throws -> JobSnapshot {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let job = try await store.job(id: id, userID: user), job.state.isFinished { return job }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestEnvironmentError(description: "job \(id) did not finish within \(timeout)")
    }
}

/// Operation builders for integration tests.
enum Op {
    static let clock = Timestamp(rfc3339: "2026-01-15T10:00:00.000Z")!

    static func create(_ type: String, _ id: String, _ data: JSONObject, key: String? = nil, household: String? = nil, at: Timestamp? = nil) -> SyncOperation {
        SyncOperation(idempotencyKey: key ?? "c-\(type)-\(id)-\(UUID().uuidString)", entityType: type, entityID: id, intent: .create, baseVersion: 0, data: data, clientTimestamp: at ?? .now(), householdID: household)
    }

    static func update(_ type: String, _ id: String, base: Int64, _ data: JSONObject, key: String? = nil, household: String? = nil, at: Timestamp? = nil) -> SyncOperation {
        SyncOperation(idempotencyKey: key ?? "u-\(type)-\(id)-\(UUID().uuidString)", entityType: type, entityID: id, intent: .update, baseVersion: base, data: data, clientTimestamp: at ?? .now(), householdID: household)
    }

    static func delete(_ type: String, _ id: String, base: Int64, key: String? = nil, household: String? = nil, at: Timestamp? = nil) -> SyncOperation {
        SyncOperation(idempotencyKey: key ?? "d-\(type)-\(id)-\(UUID().uuidString)", entityType: type, entityID: id, intent: .delete, baseVersion: base, clientTimestamp: at ?? .now(), householdID: household)
    }
}

extension OperationResult {
    /// `applied`, `duplicate`, a resolution, or the error code.
    var outcome: String {
        switch status {
        case .applied: return "applied"
        case .duplicate: return "duplicate"
        case .conflict(let resolution): return resolution.rawValue
        case .rejected(let code, _, _): return code
        }
    }
}

/// Shared mutable state for concurrent test tasks (a `Mutex` that closures can capture).
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    init(_ value: Value) { mutex = Mutex(value) }

    func withLock<Result>(_ body: (inout Value) -> Result) -> Result {
        mutex.withLock { body(&$0) }
    }

    var value: Value { mutex.withLock { $0 } }
}
