public import SyncGateCore
public import SyncGateWire

// The values the store's roles exchange with their callers.

public struct SchemaStatus: Sendable, Hashable {
    /// The newest migration applied to the database (0: none).
    public var applied: Int
    /// The newest migration this release knows.
    public var latest: Int
    /// The oldest schema version a server may be built for and still use this database, as the
    /// newest applied migration recorded it: a migration that breaks older servers raises it;
    /// an additive one keeps it.
    public var compatibleFrom: Int

    public init(applied: Int, latest: Int, compatibleFrom: Int? = nil) {
        self.applied = applied
        self.latest = latest
        self.compatibleFrom = compatibleFrom ?? applied
    }

    /// Exactly this release's schema: nothing to migrate.
    public var isCurrent: Bool { applied == latest }

    /// This release can serve from the database: its schema is current, or a newer release's
    /// migrations ran and none of them breaks this release (rolling upgrades: migrate first,
    /// older fronts stay ready).
    public var isServable: Bool { applied >= latest && compatibleFrom <= latest }

    /// Why this release cannot serve, or `nil`.
    public var problem: String? {
        if applied < latest { return "the database schema is at version \(applied), this server needs \(latest): run `syncgate migrate`" }
        if compatibleFrom > latest {
            return "the database schema is at version \(applied), which needs a server built for version \(compatibleFrom) or later; this one knows \(latest): upgrade it"
        }
        return nil
    }
}

/// A migration as the database recorded it when it was applied.
public struct AppliedMigration: Sendable, Hashable {
    public var version: Int
    public var name: String
    /// When it was applied (milliseconds since the epoch).
    public var appliedAt: Int64
    /// The oldest schema version a server may be built for to use the database from then on;
    /// `nil` in rows written before releases recorded it.
    public var compatibleFrom: Int?

    public init(version: Int, name: String, appliedAt: Int64, compatibleFrom: Int?) {
        self.version = version
        self.name = name
        self.appliedAt = appliedAt
        self.compatibleFrom = compatibleFrom
    }
}

/// What `syncgate migrate --status` reports: the migrations the database has, the ones this
/// release would apply, and whether this release can serve the schema as it is.
public struct MigrationStatus: Sendable, Hashable {
    public var applied: [AppliedMigration]
    public var pending: [Migration]
    public var schema: SchemaStatus

    public init(applied: [AppliedMigration], known: [Migration], schema: SchemaStatus) {
        self.applied = applied
        let done = Set(applied.map(\.version))
        self.pending = known.filter { !done.contains($0.version) }
        self.schema = schema
    }
}

/// A numbered schema migration (`sql/<driver>/NNNN_name.sql`, embedded in the binary).
public struct Migration: Sendable, Hashable {
    public var version: Int
    public var name: String
    public var sql: String
    /// Servers built for an earlier version cannot run against it (it drops, renames or changes
    /// the meaning of something they use). An additive migration (new tables, columns with
    /// defaults, functions) is not: older fronts stay ready while a rolling upgrade proceeds.
    public var breaksOlderServers: Bool

    public init(version: Int, name: String, sql: String, breaksOlderServers: Bool = true) {
        self.version = version
        self.name = name
        self.sql = sql
        self.breaksOlderServers = breaksOlderServers
    }

    /// A migration from its embedded file.
    public init(version: Int, name: String, bytes: [UInt8], breaksOlderServers: Bool = true) {
        self.init(version: version, name: name, sql: String(decoding: bytes, as: UTF8.self), breaksOlderServers: breaksOlderServers)
    }

    /// The oldest version a server may be built for to use a database migrated to `version`.
    public static func compatibleFrom(_ version: Int, in migrations: [Migration]) -> Int {
        migrations.last { $0.version <= version && $0.breaksOlderServers }?.version ?? 0
    }
}

// MARK: - Jobs

public struct NewJob: Sendable {
    public var userID: String
    public var deviceID: String
    public var operations: [SyncOperation]
    public var maximumAttempts: Int
    /// The push's trace context, stored with the job so the worker's spans join its trace.
    public var traceContext: [String: String]

    public init(userID: String, deviceID: String, operations: [SyncOperation], maximumAttempts: Int, traceContext: [String: String] = [:]) {
        self.traceContext = traceContext
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
    /// The results (decoded from ``storedResults`` when the snapshot holds only those).
    public var results: [OperationResult]? {
        get { decoded ?? storedResults.flatMap { try? JobCodec.decodeResults($0) } }
        set { decoded = newValue }
    }
    private var decoded: [OperationResult]?
    /// The results as stored (their wire form), when the snapshot was made without decoding them
    /// (from a finishing notification, or a read for an answer): the answer carries them as they are.
    public var storedResults: String?
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
        self.decoded = results
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
    /// When the push was enqueued.
    public var createdAt: Timestamp
    /// The push's trace context (empty when it had none).
    public var traceContext: [String: String]

    public init(
        id: Int64, leaseToken: String, userID: String, deviceID: String, attempts: Int, maximumAttempts: Int, operations: [SyncOperation],
        createdAt: Timestamp = .now(), traceContext: [String: String] = [:]
    ) {
        self.createdAt = createdAt
        self.traceContext = traceContext
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

/// What a rebuild of derived data (`syncgate admin recompute-summaries`) did.
public struct DerivationReport: Sendable, Hashable {
    /// Groups (days, for the daily summaries) whose derived entity was checked.
    public var groupsChecked: Int
    /// Derived entities written because they had changed.
    public var written: Int
    public init(groupsChecked: Int = 0, written: Int = 0) {
        self.groupsChecked = groupsChecked
        self.written = written
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

/// The changes of one feed after a position, and the feed's floor as of that read.
public struct FeedSlice: Sendable, Hashable {
    public var changes: [FeedChange]
    public var floor: Int64

    public init(changes: [FeedChange], floor: Int64) {
        self.changes = changes
        self.floor = floor
    }
}

/// A storage failure the front reports as `503 UNAVAILABLE`.
public struct StoreUnavailableError: Error, Sendable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { "database unavailable: \(reason)" }
}
