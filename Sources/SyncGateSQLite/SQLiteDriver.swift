import Foundation
package import GRDB
package import Logging
import ServiceLifecycle
import Synchronization
import SyncGateCore
package import SyncGateWire
package import SyncGateStorage
import SyncGateConcurrency
import SyncGateRuntime

/// The SQLite driver: the embedded default. One process, WAL, in-process change signals.
///
/// Writes go through GRDB's single writer connection in IMMEDIATE transactions, one transaction at
/// a time (``AsyncLock``); reads use WAL snapshots and never block writes.
package final class SQLiteDriver: StorageDriver, Service {
    package let name = "sqlite"
    package let notifier: ChangeNotifier
    let pool: DatabasePool
    let path: String
    let logger: Logger
    let writer = AsyncLock()
    /// Only one maintenance pass at a time (the PostgreSQL driver uses an advisory lock).
    let maintenanceRunning = Mutex(false)
    /// Pushes' enqueues, committed together: those asked for while one is on the writer go in the
    /// next transaction, one commit and one flush of the log for all (``insertJob(_:limits:now:)``).
    let enqueues: CallBatches<PendingEnqueue, Result<EnqueueResult, any Error>>

    /// The log's length, in pages (4 KiB), at which a commit copies it into the database file.
    static let checkpointPages = 10_000

    /// Opens (creating if needed) the database file at `path`.
    /// - Parameter busyTimeout: how long a statement waits for another process's lock on the file
    ///   (a `syncgate admin` command's transaction) before the store answers unavailable.
    package init(path: String, notifier: ChangeNotifier = ChangeNotifier(), busyTimeout: Duration = .seconds(10), logger: Logger) throws {
        self.path = path
        self.notifier = notifier
        self.logger = logger
        var configuration = Configuration()
        configuration.busyMode = .timeout(Double(busyTimeout.components.seconds) + Double(busyTimeout.components.attoseconds) / 1e18)
        configuration.label = "syncgate"
        // A transaction stays open across several accesses to the writer (see `transaction`).
        configuration.allowsUnsafeTransactions = true
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA foreign_keys = ON")
        }
        self.pool = try DatabasePool(path: path, configuration: configuration)
        // FULL: in WAL mode NORMAL does not sync the log at commit, so an acknowledged push could
        // vanish on power loss; FULL syncs every commit (one fsync each). Set on the writer after
        // the pool opened it: GRDB sets NORMAL while switching the writer to WAL, after
        // `prepareDatabase` ran.
        try pool.writeWithoutTransaction {
            try $0.execute(sql: "PRAGMA synchronous = FULL")
            // The commit that grows the log past this many pages copies it into the file, on the
            // one writer. Each copy writes every page changed since the last once, and a longer
            // log holds more changes of the same pages: fewer page writes per change than at
            // SQLite's default of 1,000 (docs/performance-log.md).
            try $0.execute(sql: "PRAGMA wal_autocheckpoint = \(Self.checkpointPages)")
        }
        let (pool, writer) = (self.pool, self.writer)
        // One transaction at a time: while it waits for the writer or its flush, the next gathers.
        enqueues = CallBatches(slots: 1, maximumBatch: 64) { batch in await Self.insertJobs(batch, pool: pool, writer: writer) }
    }

    /// The driver needs no background work of its own: it waits for shutdown, then closes the
    /// notifier so waiting requests end.
    package func run() async throws {
        try? await gracefulShutdown()
        notifier.close()
    }

    /// Sends jobs left `running` back to the rescuer at once: SQLite serves one process, so they
    /// belong to a previous run of it. Only the serving process calls this, at start; a command
    /// like `syncgate admin` opening the same file must not touch a live server's leases.
    package func releaseLeasesOfEarlierRuns() async throws {
        try await write { db in
            if try db.tableExists("jobs") {
                try db.execute(sql: "UPDATE jobs SET lease_expires_at = 0 WHERE state = 'running'")
            }
        }
    }

    // MARK: - Access

    /// Runs `body` on the writer connection, outside any transaction GRDB would open. Not
    /// cancellable: once queued it runs, so a transaction is never left half-ended.
    func onWriter<Result: Sendable>(_ body: @escaping @Sendable (Database) throws -> Result) async throws -> Result {
        try await Self.onWriter(pool, body)
    }

    static func onWriter<Result: Sendable>(_ pool: DatabasePool, _ body: @escaping @Sendable (Database) throws -> Result) async throws -> Result {
        try await withCheckedThrowingContinuation { continuation in
            pool.asyncWriteWithoutTransaction { db in
                continuation.resume(with: Swift.Result { try body(db) }.mapError(Self.availability))
            }
        }
    }

    /// Another process held the file's lock past the busy timeout: the database is unavailable
    /// for now (`503 UNAVAILABLE`, retryable), not broken (it answered `500 INTERNAL`).
    static func availability(_ error: any Error) -> any Error {
        guard let error = error as? DatabaseError, error.resultCode == .SQLITE_BUSY || error.resultCode == .SQLITE_LOCKED else { return error }
        return StoreUnavailableError("the SQLite file is locked by another process: \(error.message ?? "\(error.resultCode)")")
    }

    /// One IMMEDIATE write transaction run in one access to the writer. Not `durable`: its commit
    /// does not sync the log (the next synced commit carries it to disk), for writes whose loss
    /// in a power cut only runs a job again, as PostgreSQL's claims commit without a WAL flush.
    func write<Result: Sendable>(durable: Bool = true, _ body: @escaping @Sendable (Database) throws -> Result) async throws -> Result {
        try await Self.write(pool, writer, durable: durable, body)
    }

    static func write<Result: Sendable>(
        _ pool: DatabasePool, _ writer: AsyncLock, durable: Bool = true, _ body: @escaping @Sendable (Database) throws -> Result
    ) async throws -> Result {
        try await writer.withLock {
            try await onWriter(pool) { db in
                if !durable { try db.execute(cached: "PRAGMA synchronous = NORMAL") }
                let outcome = Swift.Result<Result, any Error> {
                    var result: Result?
                    try db.inTransaction(.immediate) {
                        result = try body(db)
                        return .commit
                    }
                    return result!
                }
                // Every other write syncs its commit (`SQLiteDurabilityTests`).
                if !durable { try db.execute(cached: "PRAGMA synchronous = FULL") }
                return try outcome.get()
            }
        }
    }

    /// A read in one WAL snapshot.
    package func read<Result: Sendable>(_ body: @escaping @Sendable (Database) throws -> Result) async throws -> Result {
        do {
            return try await pool.read(body)
        } catch {
            throw Self.availability(error)
        }
    }

    /// A write transaction spanning several accesses: the writer lock keeps every other write out
    /// until it commits or rolls back; its announcements are published only after the commit.
    /// Its first step begins it (``SQLiteTransaction``), one hop to the writer fewer; a body that
    /// makes none has nothing to commit.
    /// SQLite has no deadline of its own: `purpose` changes nothing.
    package func transaction<Result: Sendable>(
        now: Timestamp?, for purpose: TransactionPurpose,
        _ body: @escaping @Sendable (any StorageTransaction) async throws -> Result
    ) async throws -> Result {
        try await writer.withLock {
            let transaction = SQLiteTransaction(driver: self, now: now ?? .now())
            do {
                let result = try await body(transaction)
                if transaction.begun { try await onWriter { try $0.execute(cached: "COMMIT") } }
                notifier.publish(transaction.events)
                return result
            } catch {
                // A first step that failed may have failed at its BEGIN: nothing to roll back then.
                if transaction.begun {
                    _ = try? await onWriter { db in
                        guard db.isInsideTransaction else { return }
                        try db.execute(cached: "ROLLBACK")
                    }
                }
                throw error
            }
        }
    }
}

// Statements compiled once per connection and kept (GRDB's statement cache), for SQL whose text
// never varies. Compiling runs SQLite's parser and GRDB's authorizer, which cost more than
// running most of the write path's statements; the cache is keyed by the text and never
// evicts, so SQL built per call (a varying number of branches) is not given to it.
extension Database {
    func execute(cached sql: String, arguments: StatementArguments = StatementArguments()) throws {
        try cachedStatement(sql: sql).execute(arguments: arguments)
    }
}

extension Row {
    static func fetchAll(_ db: Database, cached sql: String, arguments: StatementArguments = StatementArguments()) throws -> [Row] {
        try fetchAll(db.cachedStatement(sql: sql), arguments: arguments)
    }

    static func fetchOne(_ db: Database, cached sql: String, arguments: StatementArguments = StatementArguments()) throws -> Row? {
        try fetchOne(db.cachedStatement(sql: sql), arguments: arguments)
    }
}

extension DatabaseValueConvertible where Self: StatementColumnConvertible {
    static func fetchAll(_ db: Database, cached sql: String, arguments: StatementArguments = StatementArguments()) throws -> [Self] {
        try fetchAll(db.cachedStatement(sql: sql), arguments: arguments)
    }

    static func fetchOne(_ db: Database, cached sql: String, arguments: StatementArguments = StatementArguments()) throws -> Self? {
        try fetchOne(db.cachedStatement(sql: sql), arguments: arguments)
    }
}

extension JSONValue {
    /// A JSON array of rows, the one parameter multi-row statements read with `json_each`.
    package static func rows(_ rows: [[JSONValue]]) -> String {
        JSONValue.array(rows.map(JSONValue.array)).serialized()
    }

    /// A JSON array of strings.
    package static func strings(_ values: some Sequence<String>) -> String {
        JSONValue.array(values.map(JSONValue.string)).serialized()
    }
}
