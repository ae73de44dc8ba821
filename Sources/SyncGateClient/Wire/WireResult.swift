/// One operation's result in a push answer or job status (`results[]`).
struct WireResult: Sendable, Hashable {
    enum Status: Sendable, Hashable {
        case applied
        case duplicate
        case serverWins
        case clientWins
        case merged
        case rejected(code: String, message: String, retryable: Bool)
    }

    var idempotencyKey: String
    var entityType: String
    var entityID: String
    var status: Status
    var version: Int64?
    /// `server_wins`: the current document, `.null` when the entity is deleted.
    var serverData: JSONValue?
    /// `merged`: the stored document after the merge.
    var mergedData: JSONObject?

    init(
        idempotencyKey: String, entityType: String, entityID: String, status: Status, version: Int64? = nil,
        serverData: JSONValue? = nil, mergedData: JSONObject? = nil
    ) {
        self.idempotencyKey = idempotencyKey
        self.entityType = entityType
        self.entityID = entityID
        self.status = status
        self.version = version
        self.serverData = serverData
        self.mergedData = mergedData
    }

    init(json: JSONValue) throws(WireFormatError) {
        guard let key = json["idempotency_key"]?.stringValue,
            let type = json["entity_type"]?.stringValue,
            let id = json["entity_id"]?.stringValue,
            let status = json["status"]?.stringValue
        else { throw WireFormatError("a result without idempotency_key, entity_type, entity_id or status") }
        self.idempotencyKey = key
        self.entityType = type
        self.entityID = id
        self.version = json["version"]?.intValue
        self.serverData = json["server_data"]
        self.mergedData = json["data"]?.objectValue
        switch status {
        case "applied": self.status = .applied
        case "duplicate": self.status = .duplicate
        case "conflict":
            switch json["resolution"]?.stringValue {
            case "server_wins": self.status = .serverWins
            case "client_wins": self.status = .clientWins
            case "merged": self.status = .merged
            default: throw WireFormatError("a conflict result with resolution \(json["resolution"]?.serialized() ?? "missing")")
            }
        case "rejected":
            self.status = .rejected(
                code: json["error_code"]?.stringValue ?? "INTERNAL",
                message: json["error_message"]?.stringValue ?? "",
                retryable: json["retryable"]?.boolValue ?? false
            )
        default:
            throw WireFormatError("a result with status '\(status)'")
        }
        switch self.status {
        case .applied, .duplicate, .serverWins, .clientWins:
            guard version != nil else { throw WireFormatError("a '\(status)' result without a version") }
        case .merged:
            guard version != nil, mergedData != nil else { throw WireFormatError("a merged result without version and data") }
        case .rejected:
            break
        }
    }
}

/// A server answer that does not have the protocol's shape.
struct WireFormatError: Error, Sendable, Hashable, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = "unexpected answer from the server: \(description)" }
}
