import SyncGateWire
import GRDB

extension LocalStore {
    /// What applying a page changed beyond documents.
    struct PageEffect: Sendable, Hashable {
        var joined: [String] = []
        var left: [String] = []
        /// The page ended a resync.
        var finishedResync = false
    }

    /// Applies one pulled page in one transaction: households left (their data goes), households
    /// joined, the changes, the cursor; and, on the last page (`has_more` false), the end of the
    /// pull: stale records of a resync go, and acknowledged writes from before the pull began
    /// whose jobs the page's `device_watermark` counts leave the view (the server state now
    /// holds them).
    ///
    /// - Parameter epoch: the pull's epoch, from ``beginPull()``.
    func apply(_ page: PullPage, epoch: Int64) async throws -> PageEffect {
        try await database.write { db in
            var effect = PageEffect()
            let state = try Self.pullState(db)
            for household in Set(page.scopesRemoved) {
                if try Self.removeHousehold(db, household) { effect.left.append(household) }
            }
            for household in Set(page.scopesAdded) {
                let known = try Bool.fetchOne(db, sql: "SELECT stale FROM household WHERE household_id = ?", arguments: [household])
                if known == nil { effect.joined.append(household) }
                try db.execute(
                    sql: "INSERT INTO household (household_id, stale) VALUES (?, 0) ON CONFLICT (household_id) DO UPDATE SET stale = 0",
                    arguments: [household]
                )
            }

            let original = try Self.slice(db, keys: page.changes.map(\.key))
            var updated = original
            updated.apply(page.changes)
            try Self.save(db, from: original, to: updated)

            try db.execute(
                sql: "UPDATE sync_state SET cursor = ?, device_watermark = coalesce(?, device_watermark) WHERE id = 1",
                arguments: [page.cursor, String(page.deviceWatermark)]
            )
            if !page.hasMore {
                if state.resyncing {
                    effect.left += try Self.finishResync(db)
                    effect.finishedResync = true
                }
                try Self.dropAcknowledged(db, before: epoch, watermark: page.deviceWatermark)
            }
            effect.joined.sort()
            effect.left.sort()
            return effect
        }
    }

    /// Deletes a household's data (records, acknowledged writes). Pending writes stay: the
    /// server decides them (a rejection, unless the user joined again). Returns whether the
    /// household was known.
    private static func removeHousehold(_ db: Database, _ household: String) throws -> Bool {
        let known = try Bool.fetchOne(db, sql: "SELECT 1 FROM household WHERE household_id = ?", arguments: [household]) != nil
        let keys = try entityKeys(db, sql: "SELECT household_id, entity_type, entity_id FROM server_entity WHERE household_id = ?", household)
            .union(entityKeys(db, sql: "SELECT household_id, entity_type, entity_id FROM outbox WHERE household_id = ? AND state = 'acknowledged'", household))
        try db.execute(sql: "DELETE FROM server_entity WHERE household_id = ?", arguments: [household])
        try db.execute(sql: "DELETE FROM server_tombstone WHERE household_id = ?", arguments: [household])
        try db.execute(sql: "DELETE FROM outbox WHERE household_id = ? AND state = 'acknowledged'", arguments: [household])
        try db.execute(sql: "DELETE FROM household WHERE household_id = ?", arguments: [household])
        try refreshViews(db, keys: keys)
        return known
    }

    /// Ends a resync: what it did not pull again is gone on the server. Returns the households left.
    private static func finishResync(_ db: Database) throws -> [String] {
        let keys = try entityKeys(db, sql: "SELECT household_id, entity_type, entity_id FROM server_entity WHERE stale = 1")
        try db.execute(sql: "DELETE FROM server_entity WHERE stale = 1")
        let left = try String.fetchAll(db, sql: "SELECT household_id FROM household WHERE stale = 1")
        for household in left {
            _ = try removeHousehold(db, household)
        }
        try db.execute(sql: "UPDATE sync_state SET resyncing = 0 WHERE id = 1")
        try refreshViews(db, keys: keys)
        return left
    }

    private static func dropAcknowledged(_ db: Database, before epoch: Int64, watermark: Int64) throws {
        let keys = try entityKeys(db, sql: "SELECT household_id, entity_type, entity_id FROM outbox WHERE state = 'acknowledged' AND acked_epoch < ?", epoch)
        guard !keys.isEmpty else { return }
        let original = try slice(db, keys: keys)
        var updated = original
        updated.dropAcknowledged(before: epoch, watermark: watermark)
        updated.tidy()
        try save(db, from: original, to: updated)
    }

    private static func entityKeys(_ db: Database, sql: String, _ arguments: any DatabaseValueConvertible...) throws -> Set<EntityKey> {
        Set(
            try Row.fetchAll(db, sql: sql, arguments: StatementArguments(arguments)).map {
                EntityKey(scopeColumn: $0["household_id"], entityType: $0["entity_type"], entityID: $0["entity_id"])
            }
        )
    }
}
