import SyncGateWire

extension OutboxEntry {
    /// The operation as a push carries it: data for a create or an update, none for a delete.
    var operation: SyncOperation {
        SyncOperation(
            idempotencyKey: idempotencyKey, entityType: key.entityType, entityID: key.entityID, intent: intent, baseVersion: baseVersion,
            data: intent == .delete ? nil : (data ?? [:]), clientTimestamp: Timestamp(millisecondsSinceEpoch: clientTimestamp),
            householdID: key.householdID
        )
    }

    /// The body of a push of `entries`.
    static func pushBody(_ entries: [OutboxEntry]) -> String {
        JSONValue.object(["operations": .array(entries.map(\.operation.json))]).serialized()
    }
}
