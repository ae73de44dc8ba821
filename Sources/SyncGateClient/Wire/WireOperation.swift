extension OutboxEntry {
    /// The operation as `POST /v1/sync/push` takes it.
    var wireOperation: JSONValue {
        var operation: JSONObject = [
            "idempotency_key": .string(idempotencyKey),
            "entity_type": .string(key.entityType),
            "entity_id": .string(key.entityID),
            "intent": .string(intent.rawValue),
            "base_version": .int(baseVersion),
            "client_timestamp": .string(WireTimestamp.format(milliseconds: clientTimestamp)),
            "household_id": key.householdID.map(JSONValue.string) ?? .null,
        ]
        if intent != .delete {
            operation["data"] = .object(data ?? [:])
        }
        return .object(operation)
    }

    /// The body of a push of `entries`.
    static func pushBody(_ entries: [OutboxEntry]) -> String {
        JSONValue.object(["operations": .array(entries.map(\.wireOperation))]).serialized()
    }
}
