import SyncGateWire
import Foundation
import GRDB
import SyncGateConcurrency

/// The device's database (SQLite through GRDB): server records, the outbox, the optimistic view
/// the app reads, the cursor and the user's households.
///
/// Every method is one transaction. The decisions are ``ReplicaSlice``'s: a method loads the
/// slice it touches, lets it decide, and writes back what changed, together with the view rows
/// of the entities involved.
final class LocalStore: Sendable {
    let database: DatabasePool
    /// Observations under way, by number, which ``close()`` ends; `nil` once closed.
    let observations = Locked<(next: Int, tasks: [Int: Task<Void, Never>])?>((0, [:]))

    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    init(path: String) throws {
        var configuration = Configuration()
        configuration.label = "SyncGateClient"
        // A live sync, the app's writes and the app's reads may meet: wait for a lock rather than fail.
        configuration.busyMode = .timeout(10)
        database = try DatabasePool(path: path, configuration: configuration)
        try Self.migrator.migrate(database)
    }

    /// Ends every observation and closes the database; later calls fail.
    func close() {
        let running = observations.update { observations -> [Task<Void, Never>] in
            defer { observations = nil }
            return Array((observations?.tasks ?? [:]).values)
        }
        for task in running { task.cancel() }
        try? database.close()
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            // The server's documents as last pulled or answered; `stale` while a resync replaces them.
            try db.execute(
                sql: """
                    CREATE TABLE server_entity (
                        household_id TEXT NOT NULL,
                        entity_type  TEXT NOT NULL,
                        entity_id    TEXT NOT NULL,
                        version      INTEGER NOT NULL,
                        data         TEXT NOT NULL,
                        stale        INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (household_id, entity_type, entity_id)
                    ) WITHOUT ROWID;
                    CREATE INDEX server_entity_stale ON server_entity (stale) WHERE stale = 1;

                    CREATE TABLE outbox (
                        seq              INTEGER PRIMARY KEY,
                        idempotency_key  TEXT NOT NULL UNIQUE,
                        household_id     TEXT NOT NULL,
                        entity_type      TEXT NOT NULL,
                        entity_id        TEXT NOT NULL,
                        intent           TEXT NOT NULL CHECK (intent IN ('create', 'update', 'delete')),
                        data             TEXT,
                        base_version     INTEGER NOT NULL,
                        follows_pending  INTEGER NOT NULL,
                        client_timestamp INTEGER NOT NULL,
                        state            TEXT NOT NULL CHECK (state IN ('pending', 'sent', 'acknowledged')),
                        job_id           TEXT,
                        acked_version    INTEGER,
                        acked_epoch      INTEGER
                    );
                    CREATE INDEX outbox_entity ON outbox (household_id, entity_type, entity_id, seq);

                    -- What the app reads: server documents with pending writes applied. A rowid
                    -- table: SQLite reports no changes of WITHOUT ROWID tables to GRDB's observers.
                    CREATE TABLE local_entity (
                        household_id TEXT NOT NULL,
                        entity_type  TEXT NOT NULL,
                        entity_id    TEXT NOT NULL,
                        data         TEXT NOT NULL,
                        version      INTEGER,
                        pending      INTEGER NOT NULL,
                        PRIMARY KEY (household_id, entity_type, entity_id)
                    );
                    CREATE INDEX local_entity_type ON local_entity (entity_type, household_id, entity_id);

                    CREATE TABLE household (
                        household_id TEXT PRIMARY KEY,
                        stale        INTEGER NOT NULL DEFAULT 0
                    );

                    CREATE TABLE sync_state (
                        id               INTEGER PRIMARY KEY CHECK (id = 1),
                        cursor           TEXT,
                        resyncing        INTEGER NOT NULL DEFAULT 0,
                        pull_epoch       INTEGER NOT NULL DEFAULT 0,
                        next_sequence    INTEGER NOT NULL DEFAULT 1,
                        device_watermark TEXT,
                        device_id        TEXT
                    );
                    INSERT INTO sync_state (id) VALUES (1);
                    """
            )
        }
        migrator.registerMigration("v2") { db in
            // When a sync last finished without error, for SyncStatus.lastSyncedAt across launches.
            try db.execute(sql: "ALTER TABLE sync_state ADD COLUMN last_synced_at REAL")
        }
        migrator.registerMigration("v3") { db in
            // The version a pull deleted an entity at, while the outbox holds writes of it (see
            // ReplicaSlice.tombstones).
            try db.execute(
                sql: """
                    CREATE TABLE server_tombstone (
                        household_id TEXT NOT NULL,
                        entity_type  TEXT NOT NULL,
                        entity_id    TEXT NOT NULL,
                        version      INTEGER NOT NULL,
                        PRIMARY KEY (household_id, entity_type, entity_id)
                    ) WITHOUT ROWID
                    """
            )
        }
        return migrator
    }

    /// Records that a sync finished now; returns the time recorded.
    func recordSynced() async throws -> Date {
        let now = Date()
        try await database.write { db in
            try db.execute(sql: "UPDATE sync_state SET last_synced_at = ? WHERE id = 1", arguments: [now.timeIntervalSince1970])
        }
        return now
    }

    /// What the status starts from when the client opens: the undecided writes and the last sync.
    func openingStatus() throws -> SyncStatus {
        try database.read { db in
            let pending = try Self.pendingCount(db)
            let synced = try Double.fetchOne(db, sql: "SELECT last_synced_at FROM sync_state WHERE id = 1")
            return SyncStatus(pendingWrites: pending, lastSyncedAt: synced.map(Date.init(timeIntervalSince1970:)))
        }
    }

    /// Removes everything the device holds: documents, the outbox, households, the cursor, the
    /// device id (sign-out). The schema stays, so the file can be opened again.
    func erase() async throws {
        try await database.write { db in
            try db.execute(
                sql: """
                    DELETE FROM server_entity;
                    DELETE FROM server_tombstone;
                    DELETE FROM outbox;
                    DELETE FROM local_entity;
                    DELETE FROM household;
                    DELETE FROM sync_state;
                    INSERT INTO sync_state (id) VALUES (1);
                    """
            )
        }
        // Best effort: give the deleted pages back to the file system and leave no deleted data in
        // the WAL. VACUUM needs free space about the database's size; the rows are gone without it.
        try? await database.writeWithoutTransaction { db in
            try db.execute(sql: "VACUUM")
            try db.checkpoint(.truncate)
        }
    }

    // MARK: - Sync state

    /// Where pulling stands.
    struct PullState: Sendable, Hashable {
        /// `nil`: from the beginning.
        var cursor: String?
        /// A resync is under way: records are stale until pulled again.
        var resyncing: Bool
        /// Incremented when a pull begins (see ``OutboxEntry/State/acknowledged(version:epoch:jobID:)``).
        var epoch: Int64
        /// The highest finished job of this device, as the last pull reported it.
        var deviceWatermark: String?
    }

    func pullState() async throws -> PullState {
        try await database.read { db in try Self.pullState(db) }
    }

    static func pullState(_ db: Database) throws -> PullState {
        let row = try Row.fetchOne(db, sql: "SELECT cursor, resyncing, pull_epoch, device_watermark FROM sync_state WHERE id = 1")!
        return PullState(cursor: row["cursor"], resyncing: row["resyncing"], epoch: row["pull_epoch"], deviceWatermark: row["device_watermark"])
    }

    /// Starts a pull: returns the state to pull from; acknowledgements from now on belong to the new epoch.
    ///
    /// A pull from no cursor is the truth from the beginning of the feeds, like a resync: records
    /// learned from push answers before it become stale. Versions start again at 1 after a purge,
    /// so a pulled change may carry the version of an older record it must replace.
    func beginPull() async throws -> PullState {
        try await database.write { db in
            try db.execute(sql: "UPDATE sync_state SET pull_epoch = pull_epoch + 1 WHERE id = 1")
            let state = try Self.pullState(db)
            if state.cursor == nil, !state.resyncing {
                try Self.markStale(db)
                return try Self.pullState(db)
            }
            return state
        }
    }

    /// Starts over from the beginning of the feeds: the cursor goes, every record and household
    /// becomes stale (replaced by what the pull brings, removed at its end if it brings nothing).
    /// The outbox stays.
    func beginResync() async throws {
        try await database.write { db in try Self.markStale(db) }
    }

    private static func markStale(_ db: Database) throws {
        try db.execute(
            sql: """
                UPDATE server_entity SET stale = 1;
                DELETE FROM server_tombstone;
                UPDATE household SET stale = 1;
                UPDATE sync_state SET cursor = NULL, resyncing = 1 WHERE id = 1;
                """
        )
    }

    /// The households the user belongs to, as the last pulls reported them.
    func households() async throws -> [String] {
        try await database.read { db in
            try String.fetchAll(db, sql: "SELECT household_id FROM household ORDER BY household_id")
        }
    }

    /// The device id: `preferred` if given (kept if none is yet), else the kept one, else a new one.
    func deviceID(preferring preferred: String?) throws -> String {
        if let preferred {
            if let problem = DeviceID.problem(with: preferred, field: "a device id") {
                throw SyncGateClientError(.invalidArgument, "\(problem) (got '\(preferred)')")
            }
        }
        return try database.write { db in
            if let kept = try String.fetchOne(db, sql: "SELECT device_id FROM sync_state WHERE id = 1") {
                return preferred ?? kept
            }
            let id = preferred ?? "d-" + UUID().uuidString.lowercased()
            try db.execute(sql: "UPDATE sync_state SET device_id = ? WHERE id = 1", arguments: [id])
            return id
        }
    }

    static func takeSequence(_ db: Database) throws -> Int64 {
        let next = try Int64.fetchOne(db, sql: "SELECT next_sequence FROM sync_state WHERE id = 1")!
        try db.execute(sql: "UPDATE sync_state SET next_sequence = ? WHERE id = 1", arguments: [next + 1])
        return next
    }
}
