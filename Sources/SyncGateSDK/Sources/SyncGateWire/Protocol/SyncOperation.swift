/// One queued client change, as pushed and as stored in a job's payload.
public struct SyncOperation: Sendable, Hashable {
    public enum Intent: String, Sendable, CaseIterable {
        case create, update, delete
    }

    public var idempotencyKey: String
    public var entityType: String
    public var entityID: String
    public var intent: Intent
    public var baseVersion: Int64
    /// The full document for `create`, the top-level patch for `update` (a `null` removes the field), `nil` for `delete`.
    public var data: JSONObject?
    public var clientTimestamp: Timestamp
    public var householdID: String?

    public init(
        idempotencyKey: String,
        entityType: String,
        entityID: String,
        intent: Intent,
        baseVersion: Int64 = 0,
        data: JSONObject? = nil,
        clientTimestamp: Timestamp,
        householdID: String? = nil
    ) {
        self.idempotencyKey = idempotencyKey
        self.entityType = entityType
        self.entityID = entityID
        self.intent = intent
        self.baseVersion = baseVersion
        self.data = data
        self.clientTimestamp = clientTimestamp
        self.householdID = householdID
    }

    /// The wire form (also the job payload form).
    public var json: JSONValue {
        var object: JSONObject = [
            "idempotency_key": .string(idempotencyKey),
            "entity_type": .string(entityType),
            "entity_id": .string(entityID),
            "intent": .string(intent.rawValue),
            "base_version": .int(baseVersion),
            "client_timestamp": .string(clientTimestamp.rfc3339),
            "household_id": householdID.map(JSONValue.string) ?? .null,
        ]
        if let data { object["data"] = .object(data) }
        return .object(object)
    }
}
