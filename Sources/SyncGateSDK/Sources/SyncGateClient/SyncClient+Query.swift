import SyncGateWire
public import GRDB

extension SyncClient {
    /// The entities a query selects, in its order.
    /// - Throws: ``SyncGateClientError/Code/invalidArgument`` for a field name that is not one, a
    ///   negative limit, or an array or object compared with a field.
    public func read(_ query: EntityQuery) async throws -> [SyncEntity] {
        try checkOpen()
        let sql = try QuerySQL(query)
        return try await local { try await store.entities(sql) }
    }

    /// The entities a query selects now, and again each time that result changes (a change to
    /// other entities does not emit), until the loop stops iterating.
    public func observe(_ query: EntityQuery) -> AsyncThrowingStream<[SyncEntity], any Error> {
        do {
            let sql = try QuerySQL(query)
            return store.observe { db in try LocalStore.entities(db, sql) }
        } catch {
            return AsyncThrowingStream { $0.finish(throwing: error) }
        }
    }

    /// Runs read-only SQL on the device's database, for what queries do not cover. The view the
    /// app reads is the table `local_entity`: `household_id` (`''` for the user's own), `entity_type`,
    /// `entity_id`, `data` (the document as JSON text, for SQLite's JSON functions), `version` and
    /// `pending` (1 while a write of this device is undecided). Other tables are the client's own
    /// and may change between versions; writing fails (the connection is read-only).
    ///
    /// ```swift
    /// let calories = try await client.readDatabase { db in
    ///     try Double.fetchOne(db, sql: """
    ///         SELECT sum(json_extract(data, '$.calories')) FROM local_entity
    ///         WHERE entity_type = 'foodLogs' AND json_extract(data, '$.loggedDate') = ?
    ///         """, arguments: ["2026-01-15"]) ?? 0
    /// }
    /// ```
    public func readDatabase<Value: Sendable>(_ body: @escaping @Sendable (Database) throws -> Value) async throws -> Value {
        try checkOpen()
        return try await local { try await store.read(body) }
    }
}
