package import Logging
package import SyncGateCore
package import SyncGateWire
package import Tracing
import SyncGateConcurrency

/// The store: every role (``FrontStore``, ``WorkerStore``, ``MaintenanceStore``, ``SchemaStore``)
/// over one ``StorageDriver``.
///
/// This is the one place where the steps of an apply, of a job's transitions, of a pull and of a
/// maintenance pass are sequenced, calling the decisions of `SyncGateCore`; the drivers below it
/// only run statements and decode rows, so both drivers behave alike by construction.
package struct SyncStore: FrontStore, WorkerStore, MaintenanceStore, SchemaStore {
    package let driver: any StorageDriver
    package let clock: StoreClock
    /// Test seams inside the store's transactions.
    package var hooks: StoreHooks
    /// Spans of the apply's steps join the caller's trace here; the process's tracer (a no-op
    /// unless tracing is configured) by default, an in-memory one in tests.
    package var tracer: any Tracer
    let logger: Logger

    /// Rows deleted per statement and tombstones purged per transaction, so maintenance never
    /// holds a lock (or SQLite's writer) for long.
    package var batchSize = 5000
    /// How much one compaction batch takes. It holds its feeds until it commits, and a writer to
    /// one of them waits for it: README, Retention, "Compaction and writers".
    package var compactionBatch = CompactionBatchLimits(feeds: 100, changes: 1000)
    /// Which jobs ``apply(_:collections:now:)-([(job:context:)]...)`` applies in one transaction.
    package var applyGroups = ApplyGroups()

    package init(driver: any StorageDriver, clock: StoreClock = .database, hooks: StoreHooks = .init(), tracer: (any Tracer)? = nil, logger: Logger) {
        self.tracer = tracer ?? InstrumentationSystem.tracer
        self.driver = driver
        self.clock = clock
        self.hooks = hooks
        self.logger = logger
    }

    package var driverName: String { driver.name }
    package var notifier: ChangeNotifier { driver.notifier }

    // MARK: - Schema

    @discardableResult
    package func migrate(logger: Logger) async throws -> [Int] {
        try await driver.migrate(logger: logger)
    }

    package func schemaStatus() async throws -> SchemaStatus {
        try await driver.schemaStatus()
    }

    package func migrationStatus() async throws -> MigrationStatus {
        MigrationStatus(applied: try await driver.appliedMigrations(), known: driver.migrations, schema: try await driver.schemaStatus())
    }

    package func pendingMigrationScript() async throws -> String {
        driver.migrationScript(try await migrationStatus().pending)
    }
}

/// Where the store's notion of "now" comes from.
///
/// In production the queue's times (claims, leases, backoff) use the database's clock where it has
/// one, so every process agrees; tests use a ``ManualClock`` to move time instead of sleeping.
package struct StoreClock: Sendable {
    let read: @Sendable () -> Timestamp?

    /// The database's clock (PostgreSQL's `now()`), or the process clock for SQLite.
    package static let database = StoreClock { nil }

    /// A clock a test moves by hand.
    package static func manual(_ clock: ManualClock) -> StoreClock {
        StoreClock { clock.now }
    }

    /// The instant to pass to drivers: `nil` for the database's own clock.
    package func now() -> Timestamp? { read() }

    /// The instant retention cutoffs count back from.
    package func wallNow() -> Timestamp { read() ?? .now() }
}

/// A clock that moves only when told to.
package final class ManualClock: Sendable {
    private let instant: Locked<Timestamp>

    package init(_ start: Timestamp = .now()) {
        instant = Locked(start)
    }

    package var now: Timestamp { instant.value }

    package func advance(milliseconds: Int64) {
        instant.update { $0 = $0.adding(milliseconds: milliseconds) }
    }
}

/// Test seams: code run at points inside the store's transactions, so tests can hold one open
/// at a known moment (a reader paging past an uncommitted change, two applies overlapping).
package struct StoreHooks: Sendable {
    /// Runs inside an apply's transaction once everything it writes is written (entities, feed
    /// changes, idempotency records, result), before it commits: a job held here is
    /// mid-transaction with its feeds locked. Throwing rolls the apply back (with every job
    /// applied in the same transaction).
    /// It gets the job and the feed sequence numbers its changes take, per feed.
    package var midApply: @Sendable (ClaimedJob<JobPayload>, _ sequences: [Scope: [Int64]]) async throws -> Void
    /// Runs between the batches of a compaction pass (after each batch that looked at feeds):
    /// a test writes here to play a writer that keeps up with compaction.
    package var betweenCompactionBatches: @Sendable () async throws -> Void

    package init(
        midApply: @escaping @Sendable (ClaimedJob<JobPayload>, _ sequences: [Scope: [Int64]]) async throws -> Void = { _, _ in },
        betweenCompactionBatches: @escaping @Sendable () async throws -> Void = {}
    ) {
        self.midApply = midApply
        self.betweenCompactionBatches = betweenCompactionBatches
    }
}

/// The most one compaction batch looks at: up to `feeds` feeds whose new changes add up to at
/// most `changes`, or `changes` of one feed's. A batch holds its feeds' writers until it ends,
/// so it stays small: its time follows the changes it looks at.
package struct CompactionBatchLimits: Sendable, Hashable {
    package var feeds: Int
    package var changes: Int
}

