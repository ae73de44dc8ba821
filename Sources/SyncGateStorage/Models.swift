package import SyncGateCore
package import SyncGateWire

// The values the store's roles exchange with their callers.

package struct SchemaStatus: Sendable, Hashable {
    /// The newest migration applied to the database (0: none).
    package var applied: Int
    /// The newest migration this release knows.
    package var latest: Int
    /// The oldest schema version a server may be built for and still use this database, as the
    /// newest applied migration recorded it: a migration that breaks older servers raises it;
    /// an additive one keeps it.
    package var compatibleFrom: Int

    package init(applied: Int, latest: Int, compatibleFrom: Int? = nil) {
        self.applied = applied
        self.latest = latest
        self.compatibleFrom = compatibleFrom ?? applied
    }

    /// Exactly this release's schema: nothing to migrate.
    package var isCurrent: Bool { applied == latest }

    /// This release can serve from the database: its schema is current, or a newer release's
    /// migrations ran and none of them breaks this release (rolling upgrades: migrate first,
    /// older fronts stay ready).
    package var isServable: Bool { applied >= latest && compatibleFrom <= latest }

    /// Why this release cannot serve, or `nil`.
    package var problem: String? {
        if applied < latest { return "the database schema is at version \(applied), this server needs \(latest): run `syncgate migrate`" }
        if compatibleFrom > latest {
            return "the database schema is at version \(applied), which needs a server built for version \(compatibleFrom) or later; this one knows \(latest): upgrade it"
        }
        return nil
    }
}

/// A migration as the database recorded it when it was applied.
package struct AppliedMigration: Sendable, Hashable {
    package var version: Int
    package var name: String
    /// When it was applied (milliseconds since the epoch).
    package var appliedAt: Int64
    /// The oldest schema version a server may be built for to use the database from then on;
    /// `nil` in rows written before releases recorded it.
    package var compatibleFrom: Int?

    package init(version: Int, name: String, appliedAt: Int64, compatibleFrom: Int?) {
        self.version = version
        self.name = name
        self.appliedAt = appliedAt
        self.compatibleFrom = compatibleFrom
    }
}

/// What `syncgate migrate --status` reports: the migrations the database has, the ones this
/// release would apply, and whether this release can serve the schema as it is.
package struct MigrationStatus: Sendable, Hashable {
    package var applied: [AppliedMigration]
    package var pending: [Migration]
    package var schema: SchemaStatus

    package init(applied: [AppliedMigration], known: [Migration], schema: SchemaStatus) {
        self.applied = applied
        let done = Set(applied.map(\.version))
        self.pending = known.filter { !done.contains($0.version) }
        self.schema = schema
    }
}

/// A numbered schema migration (`sql/<driver>/NNNN_name.sql`, embedded in the binary).
package struct Migration: Sendable, Hashable {
    package var version: Int
    package var name: String
    package var sql: String
    /// Servers built for an earlier version cannot run against it (it drops, renames or changes
    /// the meaning of something they use). An additive migration (new tables, columns with
    /// defaults, functions) is not: older fronts stay ready while a rolling upgrade proceeds.
    package var breaksOlderServers: Bool

    package init(version: Int, name: String, sql: String, breaksOlderServers: Bool = true) {
        self.version = version
        self.name = name
        self.sql = sql
        self.breaksOlderServers = breaksOlderServers
    }

    /// A driver's migrations from the files its schema target embeds (`sql/<driver>/`), in order.
    package static func embedded(_ files: [(version: Int, name: String, breaksOlderServers: Bool, sql: [UInt8])]) -> [Migration] {
        files.map { Migration(version: $0.version, name: $0.name, sql: String(decoding: $0.sql, as: UTF8.self), breaksOlderServers: $0.breaksOlderServers) }
    }

    /// The oldest version a server may be built for to use a database migrated to `version`.
    package static func compatibleFrom(_ version: Int, in migrations: [Migration]) -> Int {
        migrations.last { $0.version <= version && $0.breaksOlderServers }?.version ?? 0
    }
}

// MARK: - Jobs

package struct QueueLimits: Sendable, Hashable {
    /// Unfinished jobs one user may have before pushes get 429.
    package var maximumQueuedPerUser: Int
    /// Unfinished jobs in all before pushes get 503 `OVERLOADED`.
    package var maximumQueuedTotal: Int

    package init(maximumQueuedPerUser: Int = 100, maximumQueuedTotal: Int = 100_000) {
        self.maximumQueuedPerUser = maximumQueuedPerUser
        self.maximumQueuedTotal = maximumQueuedTotal
    }
}

package enum EnqueueResult: Sendable, Hashable {
    case accepted(jobID: Int64)
    case rateLimited(queued: Int)
    case overloaded(depth: Int)
}

package enum ApplyOutcome: Sendable, Hashable {
    /// Committed. `roundTrips` counts the transaction's round trips to the database
    /// (``StorageTransaction/roundTrips``), which do not grow with the job's number of operations.
    case done([OperationResult], roundTrips: Int)
    /// The lease expired and the job was rescued (or finished) elsewhere; nothing was written.
    case leaseLost
}

package struct RescueReport: Sendable, Hashable {
    package var requeued: Int = 0
    package var dead: Int = 0
}

package struct JobFilter: Sendable, Hashable {
    package var state: JobState?
    package var userID: String?
    package var limit: Int
    /// Only jobs with a lower id (the next page of a listing, newest first).
    package var belowID: Int64?

    package init(state: JobState? = nil, userID: String? = nil, limit: Int = 50, belowID: Int64? = nil) {
        self.state = state
        self.userID = userID
        self.limit = limit
        self.belowID = belowID
    }
}

// MARK: - Maintenance reports

package struct CompactionReport: Sendable, Hashable {
    package var deletedChanges: Int
    package init(deletedChanges: Int = 0) { self.deletedChanges = deletedChanges }
}

package struct PurgeReport: Sendable, Hashable {
    package var purgedTombstones: Int
    /// Feeds whose purge floor rose (cursors below it now get `CURSOR_INVALID`).
    package var raisedFloors: Int
    package init(purgedTombstones: Int = 0, raisedFloors: Int = 0) {
        self.purgedTombstones = purgedTombstones
        self.raisedFloors = raisedFloors
    }
}

/// What a rebuild of derived data (`syncgate admin recompute-summaries`) did.
package struct DerivationReport: Sendable, Hashable {
    /// Groups (days, for the daily summaries) whose derived entity was checked.
    package var groupsChecked: Int = 0
    /// Derived entities written because they had changed.
    package var written: Int = 0
}

package struct StoreStats: Sendable, Hashable {
    package var jobsByState: [JobState: Int]
    package var entities: Int
    package var changes: Int
    package var feeds: Int
    package var idempotencyRecords: Int
    package var households: Int
    package var oldestQueuedAgeMilliseconds: Int64?

    package init(
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
    package var queueDepth: Int {
        (jobsByState[.queued] ?? 0) + (jobsByState[.running] ?? 0) + (jobsByState[.retrying] ?? 0)
    }

    /// As the admin API's overview and `syncgate admin stats --json` show it.
    package var json: JSONValue {
        [
            "jobs": .object(Dictionary(uniqueKeysWithValues: JobState.allCases.map { ($0.rawValue, JSONValue.int(Int64(jobsByState[$0] ?? 0))) })),
            "queue_depth": .int(Int64(queueDepth)), "oldest_queued_age_ms": oldestQueuedAgeMilliseconds.map(JSONValue.int) ?? .null,
            "entities": .int(Int64(entities)), "changes": .int(Int64(changes)), "feeds": .int(Int64(feeds)),
            "idempotency_records": .int(Int64(idempotencyRecords)), "households": .int(Int64(households)),
        ]
    }
}

/// The changes of one feed after a position, and the feed's floor as of that read.
package struct FeedSlice: Sendable, Hashable {
    package var changes: [FeedChange]
    package var floor: Int64
}

/// One feed read for live waiters: the changes of `scope` after `after` (of `types` only, when
/// given), at most `limit` and one more, which tells the page is not the last.
package struct FeedReadRequest: Sendable, Hashable {
    package var scope: Scope
    package var after: Int64
    package var types: Set<String>?
    package var limit: Int

    package init(scope: Scope, after: Int64, types: Set<String>?, limit: Int) {
        self.scope = scope
        self.after = after
        self.types = types
        self.limit = limit
    }
}

/// A storage failure the front reports as `503 UNAVAILABLE`.
package struct StoreUnavailableError: Error, Sendable, CustomStringConvertible {
    package var reason: String
    package init(_ reason: String) { self.reason = reason }
    package var description: String { "database unavailable: \(reason)" }
}
