package import SyncGateCore
package import SyncGateWire

/// PantryPal's sync dialect (`../shared/DIALECTS.md`): a household's changes with the document
/// as a JSON string. Pure translation; ``DialectRoutes`` does the I/O.
package enum PantryPalDialect {
    /// A change of `GET /api/sync/changes`. The original server kept the action of each write;
    /// a feed keeps the newest state of an entity, so version 1 reads as `create`, later ones as
    /// `update`, a tombstone as `delete`. `client_timestamp` is the server time of the change.
    package static func change(_ change: FeedChange) -> JSONValue {
        let action = change.data == nil ? "delete" : (change.version == 1 ? "create" : "update")
        return [
            "entity_type": .string(change.entityType), "entity_id": .string(change.entityID), "action": .string(action),
            "payload": change.data.map { JSONValue.string(JSONValue.object($0).serialized()) } ?? .null,
            "client_timestamp": .string(change.updatedAt.rfc3339),
        ]
    }
}
