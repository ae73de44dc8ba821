import SyncGateWire
extension PulledChange {
    /// The entity it changes.
    var key: EntityKey { EntityKey(entityType: entityType, entityID: entityID, householdID: householdID) }
}

extension ReplicaSlice {
    /// Applies pulled changes in order: a change replaces the local record only when its version
    /// is higher (a change may arrive more than once), or the local record is stale because a
    /// resync is under way (the feed from its beginning is the truth, even where versions went
    /// back after a purge). A delete removes the record, and leaves a tombstone of its version
    /// while the outbox holds writes of the entity.
    mutating func apply(_ changes: [PulledChange]) {
        for change in changes {
            let newer: Bool
            if let record = server[change.key] {
                newer = record.stale || change.version > record.version
            } else {
                newer = tombstones[change.key].map { change.version > $0 } ?? true
            }
            guard newer else { continue }
            if let data = change.data {
                server[change.key] = ServerRecord(version: change.version, data: data)
                tombstones[change.key] = nil
            } else {
                server[change.key] = nil
                tombstones[change.key] = change.version
            }
        }
        tidy()
    }
}
