import SyncGateWire
import SyncGateConcurrency
import GRDB

extension LocalStore {
    /// Which entities a read returns.
    struct Selection: Sendable, Hashable {
        var entityType: String?
        /// `.some(nil)`: the user's own entities only; `nil`: any household.
        var household: String??
    }

    static func entities(_ db: Database, _ selection: Selection) throws -> [SyncEntity] {
        var conditions: [String] = []
        var arguments: [any DatabaseValueConvertible] = []
        if let type = selection.entityType {
            conditions.append("entity_type = ?")
            arguments.append(type)
        }
        if let household = selection.household {
            conditions.append("household_id = ?")
            arguments.append(household ?? "")
        }
        let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        return try Row.fetchAll(
            db,
            sql: "SELECT * FROM local_entity \(filter) ORDER BY entity_type, household_id, entity_id",
            arguments: StatementArguments(arguments)
        ).map(entity)
    }

    func entities(_ selection: Selection) async throws -> [SyncEntity] {
        try await database.read { db in try Self.entities(db, selection) }
    }

    func entity(_ key: EntityKey) async throws -> SyncEntity? {
        try await database.read { db in
            try Row.fetchOne(
                db, sql: "SELECT * FROM local_entity WHERE household_id = ? AND entity_type = ? AND entity_id = ?",
                arguments: [key.scopeColumn, key.entityType, key.entityID]
            ).map(Self.entity)
        }
    }

    /// The server's records (not the view), for inspection.
    func serverRecords() async throws -> [EntityKey: ServerRecord] {
        try await database.read { db in
            var records: [EntityKey: ServerRecord] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT * FROM server_entity") {
                let key = EntityKey(scopeColumn: row["household_id"], entityType: row["entity_type"], entityID: row["entity_id"])
                records[key] = ServerRecord(version: row["version"], data: try Self.document(row["data"]), stale: row["stale"])
            }
            return records
        }
    }

    /// The entities of a selection now and after every change, until the sequence is no longer iterated.
    func observe(_ selection: Selection) -> AsyncThrowingStream<[SyncEntity], any Error> {
        observe { db in try Self.entities(db, selection) }
    }

    /// What `fetch` reads now, and again whenever a transaction changes it (GRDB re-reads after
    /// each commit that touches the tables read, and duplicates are dropped), until the sequence is
    /// no longer iterated or the store closes (the sequence then ends).
    func observe<Value: Sendable & Equatable>(_ fetch: @escaping @Sendable (Database) throws -> Value) -> AsyncThrowingStream<Value, any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: Value.self, throwing: (any Error).self)
        let observation = ValueObservation
            .tracking(fetch)
            .removeDuplicates()
            .values(in: database)
        let observations = self.observations
        // Made and registered in one step with close(): either close() sees it and cancels it, or
        // it sees the store closed. It removes itself when it ends, which waits for this step.
        let task = observations.update { registered -> Task<Void, Never>? in
            guard let number = registered?.next else { return nil }
            registered?.next += 1
            let task = Task {
                do {
                    for try await value in observation {
                        continuation.yield(value)
                    }
                    continuation.finish()
                } catch is CancellationError {
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
                _ = observations.update { $0?.tasks.removeValue(forKey: number) }
            }
            registered?.tasks[number] = task
            return task
        }
        guard let task else {
            continuation.finish(throwing: SyncGateClientError(.closed, "the client was closed"))
            return stream
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// The entities of a type with this id, in whichever households (or the user's own) the device has them.
    func entities(type: String, id: String) async throws -> [SyncEntity] {
        try await database.read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM local_entity WHERE entity_type = ? AND entity_id = ? ORDER BY household_id",
                arguments: [type, id]
            ).map(Self.entity)
        }
    }

    static func entity(_ row: Row) throws -> SyncEntity {
        SyncEntity(
            key: EntityKey(scopeColumn: row["household_id"], entityType: row["entity_type"], entityID: row["entity_id"]),
            data: try document(row["data"]),
            version: row["version"],
            hasPendingWrites: row["pending"]
        )
    }
}
