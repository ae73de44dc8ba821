/// One answer of `GET /v1/sync/pull`.
struct PullPage: Sendable, Hashable {
    var changes: [PullChange]
    var cursor: String
    var hasMore: Bool
    var forceResync: Bool
    var scopesAdded: [String]
    var scopesRemoved: [String]
    var deviceWatermark: String?

    init(
        changes: [PullChange], cursor: String, hasMore: Bool = false, forceResync: Bool = false,
        scopesAdded: [String] = [], scopesRemoved: [String] = [], deviceWatermark: String? = nil
    ) {
        self.changes = changes
        self.cursor = cursor
        self.hasMore = hasMore
        self.forceResync = forceResync
        self.scopesAdded = scopesAdded
        self.scopesRemoved = scopesRemoved
        self.deviceWatermark = deviceWatermark
    }

    init(json: JSONValue) throws(WireFormatError) {
        guard let cursor = json["cursor"]?.stringValue, let changes = json["changes"]?.arrayValue else {
            throw WireFormatError("a pull page without cursor or changes")
        }
        var decoded: [PullChange] = []
        for change in changes {
            guard let type = change["entity_type"]?.stringValue, let id = change["entity_id"]?.stringValue,
                let version = change["version"]?.intValue, let operation = change["operation"]?.stringValue
            else { throw WireFormatError("a change without entity_type, entity_id, version or operation") }
            let key = EntityKey(entityType: type, entityID: id, householdID: change["household_id"]?.stringValue)
            switch operation {
            case "upsert":
                guard let data = change["data"]?.objectValue else { throw WireFormatError("an upsert without data") }
                decoded.append(PullChange(key: key, data: data, version: version))
            case "delete":
                decoded.append(PullChange(key: key, data: nil, version: version))
            default:
                throw WireFormatError("a change with operation '\(operation)'")
            }
        }
        self.changes = decoded
        self.cursor = cursor
        self.hasMore = json["has_more"]?.boolValue ?? false
        self.forceResync = json["force_resync"]?.boolValue ?? false
        self.scopesAdded = json["scopes"]?["added"]?.arrayValue?.compactMap(\.stringValue) ?? []
        self.scopesRemoved = json["scopes"]?["removed"]?.arrayValue?.compactMap(\.stringValue) ?? []
        self.deviceWatermark = json["device_watermark"]?.stringValue
    }
}
