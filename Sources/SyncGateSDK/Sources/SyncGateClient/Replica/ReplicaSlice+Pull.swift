import SyncGateWire
extension PulledChange {
    /// The entity it changes.
    var key: EntityKey { EntityKey(entityType: entityType, entityID: entityID, householdID: householdID) }
}

extension ReplicaSlice {
    /// Applies pulled changes in order: a change replaces the local record only when its version
    /// is higher (a change may arrive more than once), or the local record is stale because a
    /// resync is under way (the feed from its beginning is the truth, even where versions went
    /// back after a purge). A delete removes the record.
    mutating func apply(_ changes: [PulledChange]) {
        for change in changes {
            let record = server[change.key]
            let newer = record.map { $0.stale || change.version > $0.version } ?? true
            guard newer else { continue }
            if let data = change.data {
                server[change.key] = ServerRecord(version: change.version, data: data)
            } else {
                server[change.key] = nil
            }
        }
        tidy()
    }
}
