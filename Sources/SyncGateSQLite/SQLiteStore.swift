import Foundation
import GRDB
public import Logging
public import ServiceLifecycle
import Synchronization
import SyncGateCore
public import SyncGateStorage

/// The SQLite driver: the embedded default. One process, WAL, in-process change signals.
///
/// Writes go through GRDB's single writer connection in IMMEDIATE transactions, so jobs, feeds
/// and entities change one transaction at a time; reads use WAL snapshots and never block writes.
public final class SQLiteStore: SyncStore, Service {
    public let driverName = "sqlite"
    public let notifier: ChangeNotifier
    let pool: DatabasePool
    let path: String
    let logger: Logger
    /// Only one maintenance pass at a time (the PostgreSQL driver uses an advisory lock).
    let maintenanceRunning = Mutex(false)

    /// Opens (creating if needed) the database file at `path`.
    public init(path: String, notifier: ChangeNotifier = ChangeNotifier(), logger: Logger) throws {
        self.path = path
        self.notifier = notifier
        self.logger = logger
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.label = "syncgate"
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA foreign_keys = ON")
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        self.pool = try DatabasePool(path: path, configuration: configuration)
    }

    /// The store needs no background work of its own; `run` waits for shutdown, then closes the
    /// notifier so waiting requests end.
    public func run() async throws {
        // Jobs left running belong to a previous process (SQLite serves one): let the rescuer
        // take them at once instead of waiting for their leases to expire.
        // (Before the first migration there is no jobs table, and nothing to release.)
        try await pool.write { db in
            if try db.tableExists("jobs") {
                try db.execute(sql: "UPDATE jobs SET lease_expires_at = 0 WHERE state = 'running'")
            }
        }
        try? await gracefulShutdown()
        notifier.close()
    }

    public func shutdown() async {
        notifier.close()
    }

    // MARK: - Helpers

    /// An IMMEDIATE write transaction; events are published only after it commits.
    func write<Result: Sendable>(_ body: @Sendable (Statements) throws -> (Result, [StoreEvent])) async throws -> Result {
        let (result, events) = try await pool.writeWithoutTransaction { db in
            var outcome: (Result, [StoreEvent])?
            try db.inTransaction(.immediate) {
                outcome = try body(Statements(db))
                return .commit
            }
            return outcome!
        }
        notifier.publish(events)
        return result
    }

    /// A read in one WAL snapshot.
    func read<Result: Sendable>(_ body: @Sendable (Statements) throws -> Result) async throws -> Result {
        try await pool.read { db in try body(Statements(db)) }
    }

    static var now: Int64 { Timestamp.now().millisecondsSinceEpoch }
}

/// Statements of one transaction, counted (a job's apply must not need more for more operations).
final class Statements {
    let db: Database
    private(set) var count = 0

    init(_ db: Database) { self.db = db }

    func execute(_ sql: String, _ arguments: StatementArguments = []) throws {
        count += 1
        try db.execute(sql: sql, arguments: arguments)
    }

    func rows(_ sql: String, _ arguments: StatementArguments = []) throws -> [Row] {
        count += 1
        return try Row.fetchAll(db, sql: sql, arguments: arguments)
    }

    func value<Value: DatabaseValueConvertible>(_ sql: String, _ arguments: StatementArguments = []) throws -> Value? {
        count += 1
        return try Value.fetchOne(db, sql: sql, arguments: arguments)
    }
}

extension JSONValue {
    /// A JSON array of rows, the one parameter multi-row statements read with `json_each`.
    static func rows(_ rows: [[JSONValue]]) -> String {
        JSONValue.array(rows.map(JSONValue.array)).serialized()
    }
}

extension JSONParser {
    static let stored = JSONParser(maximumDepth: 512)
}
