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
    /// while the outbox holds writes of the entity. A change pulled after a delete comes later in
    /// the feed, whatever its version (a re-create after the server purged the entity starts
    /// again at 1): the tombstone guards against push answers only.
    mutating func apply(_ changes: [PulledChange]) {
        for change in changes {
            let newer = server[change.key].map { $0.stale || change.version > $0.version } ?? true
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
