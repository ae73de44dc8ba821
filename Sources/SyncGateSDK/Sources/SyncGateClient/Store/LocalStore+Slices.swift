import SyncGateWire
import GRDB

extension LocalStore {
    /// The records and outbox entries of `keys`.
    static func slice(_ db: Database, keys: some Sequence<EntityKey>) throws -> ReplicaSlice {
        var server: [EntityKey: ServerRecord] = [:]
        var outbox: [OutboxEntry] = []
        var tombstones: [EntityKey: Int64] = [:]
        for key in Set(keys) {
            let arguments: StatementArguments = [key.scopeColumn, key.entityType, key.entityID]
            if let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT version, data, stale FROM server_entity WHERE household_id = ? AND entity_type = ? AND entity_id = ?"),
                arguments: arguments
            ) {
                server[key] = ServerRecord(version: row["version"], data: try document(row["data"]), stale: row["stale"])
            } else if let version = try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT version FROM server_tombstone WHERE household_id = ? AND entity_type = ? AND entity_id = ?"),
                arguments: arguments
            ) {
                tombstones[key] = version
            }
            outbox += try Row.fetchAll(
                db.cachedStatement(sql: "SELECT * FROM outbox WHERE household_id = ? AND entity_type = ? AND entity_id = ? ORDER BY seq"),
                arguments: arguments
            ).map(outboxEntry)
        }
        return ReplicaSlice(server: server, outbox: outbox, tombstones: tombstones)
    }

    /// Writes what changed from `original` to `updated`, and the view of every entity in either.
    static func save(_ db: Database, from original: ReplicaSlice, to updated: ReplicaSlice) throws {
        let keys = original.keys.union(updated.keys)
        for key in keys where original.server[key] != updated.server[key] {
            if let record = updated.server[key] {
                try db.cachedStatement(
                    sql: """
                        INSERT INTO server_entity (household_id, entity_type, entity_id, version, data, stale) VALUES (?, ?, ?, ?, ?, ?)
                        ON CONFLICT (household_id, entity_type, entity_id) DO UPDATE SET version = excluded.version, data = excluded.data, stale = excluded.stale
                        """
                ).execute(arguments: [key.scopeColumn, key.entityType, key.entityID, record.version, JSONValue.object(record.data).serialized(), record.stale])
            } else {
                try db.cachedStatement(sql: "DELETE FROM server_entity WHERE household_id = ? AND entity_type = ? AND entity_id = ?")
                    .execute(arguments: [key.scopeColumn, key.entityType, key.entityID])
            }
        }
        for key in keys where original.tombstones[key] != updated.tombstones[key] {
            if let version = updated.tombstones[key] {
                try db.cachedStatement(
                    sql: """
                        INSERT INTO server_tombstone (household_id, entity_type, entity_id, version) VALUES (?, ?, ?, ?)
                        ON CONFLICT (household_id, entity_type, entity_id) DO UPDATE SET version = excluded.version
                        """
                ).execute(arguments: [key.scopeColumn, key.entityType, key.entityID, version])
            } else {
                try db.cachedStatement(sql: "DELETE FROM server_tombstone WHERE household_id = ? AND entity_type = ? AND entity_id = ?")
                    .execute(arguments: [key.scopeColumn, key.entityType, key.entityID])
            }
        }
        let before = Dictionary(original.outbox.map { ($0.idempotencyKey, $0) }, uniquingKeysWith: { first, _ in first })
        let after = Set(updated.outbox.map(\.idempotencyKey))
        for entry in original.outbox where !after.contains(entry.idempotencyKey) {
            try db.cachedStatement(sql: "DELETE FROM outbox WHERE idempotency_key = ?").execute(arguments: [entry.idempotencyKey])
        }
        for entry in updated.outbox where before[entry.idempotencyKey] != entry {
            try saveEntry(db, entry)
        }
        try refreshViews(db, slice: updated, keys: keys)
    }

    /// Recomputes the view rows of `keys` from the database.
    static func refreshViews(_ db: Database, keys: some Sequence<EntityKey>) throws {
        let keys = Set(keys)
        try refreshViews(db, slice: slice(db, keys: keys), keys: keys)
    }

    private static func refreshViews(_ db: Database, slice: ReplicaSlice, keys: Set<EntityKey>) throws {
        for key in keys {
            let view = slice.view(of: key)
            if let data = view.data {
                try db.cachedStatement(
                    sql: """
                        INSERT INTO local_entity (household_id, entity_type, entity_id, data, version, pending) VALUES (?, ?, ?, ?, ?, ?)
                        ON CONFLICT (household_id, entity_type, entity_id) DO UPDATE SET data = excluded.data, version = excluded.version, pending = excluded.pending
                        """
                ).execute(arguments: [key.scopeColumn, key.entityType, key.entityID, JSONValue.object(data).serialized(), view.version, view.hasPendingWrites])
            } else {
                try db.cachedStatement(sql: "DELETE FROM local_entity WHERE household_id = ? AND entity_type = ? AND entity_id = ?")
                    .execute(arguments: [key.scopeColumn, key.entityType, key.entityID])
            }
        }
    }

    static func saveEntry(_ db: Database, _ entry: OutboxEntry) throws {
        let state: String
        var jobID: String?
        var ackedVersion: Int64?
        var ackedEpoch: Int64?
        switch entry.state {
        case .pending: state = "pending"
        case .sent(let job):
            state = "sent"
            jobID = job
        case .acknowledged(let version, let epoch, let job):
            state = "acknowledged"
            jobID = job.map { String($0) }
            ackedVersion = version
            ackedEpoch = epoch
        }
        try db.cachedStatement(
            sql: """
                INSERT OR REPLACE INTO outbox (seq, idempotency_key, household_id, entity_type, entity_id, intent, data, base_version,
                    follows_pending, client_timestamp, state, job_id, acked_version, acked_epoch)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [
            entry.sequence, entry.idempotencyKey, entry.key.scopeColumn, entry.key.entityType, entry.key.entityID,
            entry.intent.rawValue, entry.data.map { JSONValue.object($0).serialized() }, entry.baseVersion,
            entry.followsPending, entry.clientTimestamp, state, jobID, ackedVersion, ackedEpoch,
        ])
    }

    static func outboxEntry(_ row: Row) throws -> OutboxEntry {
        let state: OutboxEntry.State
        switch row["state"] as String {
        case "pending": state = .pending
        case "sent": state = .sent(jobID: row["job_id"])
        default:
            let jobID: String? = row["job_id"]
            state = .acknowledged(version: row["acked_version"], epoch: row["acked_epoch"], jobID: jobID.flatMap { Int64($0) })
        }
        let data: String? = row["data"]
        return OutboxEntry(
            sequence: row["seq"],
            idempotencyKey: row["idempotency_key"],
            key: EntityKey(scopeColumn: row["household_id"], entityType: row["entity_type"], entityID: row["entity_id"]),
            intent: WriteIntent(rawValue: row["intent"]) ?? .update,
            data: try data.map(document),
            baseVersion: row["base_version"],
            followsPending: row["follows_pending"],
            clientTimestamp: row["client_timestamp"],
            state: state
        )
    }

    /// What ``OutboxBatcher/next(_:limits:)`` decides on, read in bounded size (an outbox kept
    /// offline for weeks is read a batch at a time, not whole at every batch): the first entry
    /// waiting for its job, or else the first `operations` undecided entries, since a batch is
    /// a prefix of those.
    static func batchCandidates(_ db: Database, operations: Int) throws -> [OutboxEntry] {
        if let waiting = try Row.fetchOne(db, sql: "SELECT * FROM outbox WHERE state = 'sent' AND job_id IS NOT NULL ORDER BY seq LIMIT 1") {
            return [try outboxEntry(waiting)]
        }
        return try Row.fetchAll(db, sql: "SELECT * FROM outbox WHERE state <> 'acknowledged' ORDER BY seq LIMIT ?", arguments: [max(1, operations)])
            .map(outboxEntry)
    }

    /// Every outbox entry, in order.
    static func allEntries(_ db: Database) throws -> [OutboxEntry] {
        try Row.fetchAll(db, sql: "SELECT * FROM outbox ORDER BY seq").map(outboxEntry)
    }

    static func document(_ text: String) throws -> JSONObject {
        guard let object = try JSONValue(parsing: text).objectValue else {
            throw SyncGateClientError(.localStore, "a stored document is not a JSON object")
        }
        return object
    }
}
