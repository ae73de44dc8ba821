import SyncGateWire
import GRDB

extension LocalStore {
    /// Records a local change in the outbox and the view, in one transaction.
    func record(_ change: LocalChange, on key: EntityKey, at timestamp: Int64, newKey: @escaping @Sendable () -> String) async throws -> WriteEffect {
        try await database.write { db in
            let original = try Self.slice(db, keys: [key])
            var updated = original
            let sequence = try Self.takeSequence(db)
            let effect: WriteEffect
            do {
                effect = try updated.record(change, on: key, at: timestamp, sequence: sequence, newKey: newKey)
            } catch LocalChangeError.notFound {
                throw SyncGateClientError(.notFound, "\(key) does not exist on this device")
            }
            try Self.save(db, from: original, to: updated)
            return effect
        }
    }

    /// What to do next with the outbox. A batch to push is marked sent in the same transaction,
    /// so no later write merges into an entry the server may be applying.
    func nextBatch(limits: OutboxBatcher.Limits) async throws -> OutboxBatcher.Next {
        try await database.write { db in
            let next = OutboxBatcher.next(try Self.batchCandidates(db, operations: limits.operations), limits: limits)
            guard case .push(let batch) = next else { return next }
            var sent: [OutboxEntry] = []
            for var entry in batch {
                if entry.state == .pending {
                    entry.state = .sent(jobID: nil)
                    try Self.saveEntry(db, entry)
                }
                sent.append(entry)
            }
            return .push(sent)
        }
    }

    /// Remembers the job a batch became (answer 202), to follow it, also after a restart.
    func recordJob(_ jobID: String, for idempotencyKeys: [String]) async throws {
        try await database.write { db in
            for key in idempotencyKeys {
                try db.execute(sql: "UPDATE outbox SET job_id = ? WHERE idempotency_key = ? AND state = 'sent'", arguments: [jobID, key])
            }
        }
    }

    /// The idempotency keys waiting for job `jobID`, in order.
    func entries(ofJob jobID: String) async throws -> [String] {
        try await database.read { db in
            try String.fetchAll(db, sql: "SELECT idempotency_key FROM outbox WHERE job_id = ? AND state = 'sent' ORDER BY seq", arguments: [jobID])
        }
    }

    /// Forgets a job the server no longer knows: its entries are pushed again with the same keys.
    func forgetJob(_ jobID: String) async throws {
        try await database.write { db in
            try db.execute(sql: "UPDATE outbox SET job_id = NULL WHERE job_id = ? AND state = 'sent'", arguments: [jobID])
        }
    }

    /// Applies the results of job `jobID` (see ``ReplicaSlice/settle(batch:results:jobID:pullEpoch:unreadable:)``).
    func settle(batch: [String], results: [OperationResult], jobID: Int64) async throws -> PushSettlement {
        try await database.write { db in
            let epoch = try Self.pullState(db).epoch
            let keys = try Self.entityKeys(db, idempotencyKeys: batch)
            let known = Set(try String.fetchAll(db, sql: "SELECT household_id FROM household"))
            let unreadable = Set(keys.compactMap(\.householdID)).subtracting(known)
            let original = try Self.slice(db, keys: keys)
            var updated = original
            let settlement = updated.settle(batch: batch, results: results, jobID: jobID, pullEpoch: epoch, unreadable: unreadable)
            try Self.save(db, from: original, to: updated)
            return settlement
        }
    }

    /// Refuses one entry without a server decision (see ``ReplicaSlice/refuse(idempotencyKey:code:message:)``).
    func refuse(idempotencyKey: String, code: String, message: String) async throws -> WriteOutcome? {
        try await database.write { db in
            let keys = try Self.entityKeys(db, idempotencyKeys: [idempotencyKey])
            let original = try Self.slice(db, keys: keys)
            var updated = original
            let outcome = updated.refuse(idempotencyKey: idempotencyKey, code: code, message: message)
            try Self.save(db, from: original, to: updated)
            return outcome
        }
    }

    /// Entries that still wait to be pushed or answered (acknowledged ones excluded).
    func pendingCount() async throws -> Int {
        try await database.read(Self.pendingCount)
    }

    static func pendingCount(_ db: Database) throws -> Int {
        try Int.fetchOne(db, sql: "SELECT count(*) FROM outbox WHERE state != 'acknowledged'") ?? 0
    }

    /// The whole outbox, in order.
    func outbox() async throws -> [OutboxEntry] {
        try await database.read { db in try Self.allEntries(db) }
    }

    private static func entityKeys(_ db: Database, idempotencyKeys: [String]) throws -> Set<EntityKey> {
        var keys: Set<EntityKey> = []
        for idempotencyKey in idempotencyKeys {
            if let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT household_id, entity_type, entity_id FROM outbox WHERE idempotency_key = ?"),
                arguments: [idempotencyKey]
            ) {
                keys.insert(EntityKey(scopeColumn: row["household_id"], entityType: row["entity_type"], entityID: row["entity_id"]))
            }
        }
        return keys
    }
}
