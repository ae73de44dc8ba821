public import Logging
public import SyncGateCore

/// The storage driver interface: everything the front, the workers and the maintenance commands
/// ask of a database. PostgreSQL and SQLite implement it and pass one conformance suite.
///
/// Drivers own their SQL; the decisions (conflict policies, permissions, summaries, cursor
/// positions) come from `SyncGateCore` so both drivers decide identically.
public protocol SyncStore: Sendable {
    /// A short name for logs and `/readyz`: `postgres` or `sqlite`.
    var driverName: String { get }

    /// Where committed changes are announced (NOTIFY or in-process signals).
    var notifier: ChangeNotifier { get }

    // MARK: Schema

    /// Applies pending migrations (safe when several processes start together); returns the versions applied.
    @discardableResult
    func migrate(logger: Logger) async throws -> [Int]

    /// The applied and the known schema versions, for readiness checks.
    func schemaStatus() async throws -> SchemaStatus

    // MARK: Front

    /// Makes a push durable as one job, unless the caller or the queue is over its limit.
    func enqueue(_ job: NewJob, limits: QueueLimits) async throws -> EnqueueResult

    /// A job of `userID`, or `nil` when there is none (or it is another user's).
    func job(id: Int64, userID: String) async throws -> JobSnapshot?

    /// One page of the user's feeds after `cursor`.
    func pull(_ query: PullQuery) async throws -> PullPage

    /// The feeds a user reads now: their own and their households'.
    func readableScopes(userID: String) async throws -> [Scope]

    // MARK: Workers

    /// Claims up to `limit` runnable jobs, at most one per user, oldest first, leased for `lease`.
    func claimJobs(workerID: String, limit: Int, leaseMilliseconds: Int64) async throws -> [ClaimedJob]

    /// Extends the leases of jobs this worker still holds.
    func extendLeases(_ jobs: [JobLease], leaseMilliseconds: Int64) async throws

    /// Applies a claimed job in one transaction: effects, feeds, idempotency records, results.
    /// Returns ``ApplyOutcome/leaseLost`` (and changes nothing) when the job is no longer this worker's.
    func apply(_ job: ClaimedJob, collections: Collections, now: Timestamp) async throws -> ApplyOutcome

    /// Records a failed attempt: back to `retrying` with a delay, or `dead` with every operation answered `INTERNAL`.
    /// Returns false when the job was no longer this worker's.
    @discardableResult
    func fail(_ job: ClaimedJob, error: String, next: RetryPolicy.Next) async throws -> Bool

    /// Returns expired leases (workers that died) to the queue, or marks them dead when out of attempts.
    func rescueExpiredLeases(policy: RetryPolicy, jitter: @escaping @Sendable () -> Double) async throws -> RescueReport

    // MARK: Maintenance and administration

    /// Runs `body` while holding the cluster-wide maintenance lock; returns `nil` if another process holds it.
    func withMaintenanceLock<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result) async throws -> Result?

    func deleteFinishedJobs(olderThanMilliseconds: Int64) async throws -> Int
    func compactFeeds() async throws -> CompactionReport
    func purgeTombstones(olderThanMilliseconds: Int64) async throws -> PurgeReport
    func pruneIdempotencyRecords(olderThanMilliseconds: Int64) async throws -> Int
    func forceResync(userID: String?) async throws
    func recomputeSummaries(userID: String?, from: CalendarDate?, to: CalendarDate?, collections: Collections, now: Timestamp) async throws -> SummaryReport
    func stats() async throws -> StoreStats
    func listJobs(_ filter: JobFilter) async throws -> [JobSnapshot]
    func retryDeadJobs(ids: [Int64]?) async throws -> Int
    func households(userID: String?) async throws -> [HouseholdState]

    /// Releases connections; the store is unusable afterwards.
    func shutdown() async
}

public struct SchemaStatus: Sendable, Hashable {
    public var applied: Int
    public var latest: Int

    public init(applied: Int, latest: Int) {
        self.applied = applied
        self.latest = latest
    }

    public var isCurrent: Bool { applied == latest }
}

/// A numbered schema migration (`sql/<driver>/NNNN_name.sql`, embedded in the binary).
public struct Migration: Sendable, Hashable {
    public var version: Int
    public var name: String
    public var sql: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }
}

// MARK: - Jobs

public struct NewJob: Sendable {
    public var userID: String
    public var deviceID: String
    public var operations: [SyncOperation]
    public var maximumAttempts: Int

    public init(userID: String, deviceID: String, operations: [SyncOperation], maximumAttempts: Int) {
        self.userID = userID
        self.deviceID = deviceID
        self.operations = operations
        self.maximumAttempts = maximumAttempts
    }
}

public struct QueueLimits: Sendable, Hashable {
    /// Unfinished jobs one user may have before pushes get 429.
    public var maximumQueuedPerUser: Int
    /// Unfinished jobs in all before pushes get 503 `OVERLOADED`.
    public var maximumQueuedTotal: Int

    public init(maximumQueuedPerUser: Int = 100, maximumQueuedTotal: Int = 100_000) {
        self.maximumQueuedPerUser = maximumQueuedPerUser
        self.maximumQueuedTotal = maximumQueuedTotal
    }
}

public enum EnqueueResult: Sendable, Hashable {
    case accepted(jobID: Int64)
    case rateLimited(queued: Int)
    case overloaded(depth: Int)
}

public struct JobSnapshot: Sendable, Hashable {
    public var id: Int64
    public var userID: String
    public var deviceID: String
    public var state: JobState
    public var attempts: Int
    public var maximumAttempts: Int
    public var operationCount: Int
    public var results: [OperationResult]?
    public var lastError: String?
    public var createdAt: Timestamp
    public var finishedAt: Timestamp?

    public init(
        id: Int64, userID: String, deviceID: String, state: JobState, attempts: Int, maximumAttempts: Int,
        operationCount: Int, results: [OperationResult]?, lastError: String?, createdAt: Timestamp, finishedAt: Timestamp?
    ) {
        self.id = id
        self.userID = userID
        self.deviceID = deviceID
        self.state = state
        self.attempts = attempts
        self.maximumAttempts = maximumAttempts
        self.operationCount = operationCount
        self.results = results
        self.lastError = lastError
        self.createdAt = createdAt
        self.finishedAt = finishedAt
    }
}

/// A job a worker holds: the lease token fences every write it makes.
public struct ClaimedJob: Sendable, Hashable {
    public var id: Int64
    public var leaseToken: String
    public var userID: String
    public var deviceID: String
    public var attempts: Int
    public var maximumAttempts: Int
    public var operations: [SyncOperation]

    public init(id: Int64, leaseToken: String, userID: String, deviceID: String, attempts: Int, maximumAttempts: Int, operations: [SyncOperation]) {
        self.id = id
        self.leaseToken = leaseToken
        self.userID = userID
        self.deviceID = deviceID
        self.attempts = attempts
        self.maximumAttempts = maximumAttempts
        self.operations = operations
    }

    public var lease: JobLease { JobLease(id: id, token: leaseToken) }
}

public struct JobLease: Sendable, Hashable {
    public var id: Int64
    public var token: String

    public init(id: Int64, token: String) {
        self.id = id
        self.token = token
    }
}

public enum ApplyOutcome: Sendable, Hashable {
    /// Committed. `statements` counts the database statements the transaction needed, which does
    /// not grow with the job's number of operations.
    case done([OperationResult], statements: Int)
    /// The lease expired and the job was rescued (or finished) elsewhere; nothing was written.
    case leaseLost
}

public struct RescueReport: Sendable, Hashable {
    public var requeued: Int
    public var dead: Int

    public init(requeued: Int = 0, dead: Int = 0) {
        self.requeued = requeued
        self.dead = dead
    }
}

public struct JobFilter: Sendable, Hashable {
    public var state: JobState?
    public var userID: String?
    public var limit: Int

    public init(state: JobState? = nil, userID: String? = nil, limit: Int = 50) {
        self.state = state
        self.userID = userID
        self.limit = limit
    }
}

// MARK: - Maintenance reports

public struct CompactionReport: Sendable, Hashable {
    public var deletedChanges: Int
    public init(deletedChanges: Int = 0) { self.deletedChanges = deletedChanges }
}

public struct PurgeReport: Sendable, Hashable {
    public var purgedTombstones: Int
    /// Feeds whose purge floor rose (cursors below it now get `CURSOR_INVALID`).
    public var raisedFloors: Int
    public init(purgedTombstones: Int = 0, raisedFloors: Int = 0) {
        self.purgedTombstones = purgedTombstones
        self.raisedFloors = raisedFloors
    }
}

public struct SummaryReport: Sendable, Hashable {
    public var daysChecked: Int
    public var summariesWritten: Int
    public init(daysChecked: Int = 0, summariesWritten: Int = 0) {
        self.daysChecked = daysChecked
        self.summariesWritten = summariesWritten
    }
}

public struct StoreStats: Sendable, Hashable {
    public var jobsByState: [JobState: Int]
    public var entities: Int
    public var changes: Int
    public var feeds: Int
    public var idempotencyRecords: Int
    public var households: Int
    public var oldestQueuedAgeMilliseconds: Int64?

    public init(
        jobsByState: [JobState: Int] = [:], entities: Int = 0, changes: Int = 0, feeds: Int = 0,
        idempotencyRecords: Int = 0, households: Int = 0, oldestQueuedAgeMilliseconds: Int64? = nil
    ) {
        self.jobsByState = jobsByState
        self.entities = entities
        self.changes = changes
        self.feeds = feeds
        self.idempotencyRecords = idempotencyRecords
        self.households = households
        self.oldestQueuedAgeMilliseconds = oldestQueuedAgeMilliseconds
    }

    /// Jobs that are not finished.
    public var queueDepth: Int {
        (jobsByState[.queued] ?? 0) + (jobsByState[.running] ?? 0) + (jobsByState[.retrying] ?? 0)
    }
}

/// A storage failure the front reports as `503 UNAVAILABLE`.
public struct StoreUnavailableError: Error, Sendable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { "database unavailable: \(reason)" }
}
