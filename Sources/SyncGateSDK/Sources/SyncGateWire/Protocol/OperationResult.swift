/// The outcome of one operation, in the order of the pushed operations.
public struct OperationResult: Sendable, Hashable {
    public enum Status: Sendable, Hashable {
        case applied
        case duplicate
        case conflict(Resolution)
        case rejected(errorCode: String, message: String, retryable: Bool)
    }

    public enum Resolution: String, Sendable, Hashable {
        case serverWins = "server_wins"
        case clientWins = "client_wins"
        case merged
    }

    public var idempotencyKey: String
    public var entityType: String
    public var entityID: String
    public var status: Status
    /// The entity's version after this operation (absent for rejections).
    public var version: Int64?
    /// `server_wins`: the current document, `nil` meaning deleted.
    public var serverData: JSONObject?
    /// `merged`: the stored document after the merge.
    public var mergedData: JSONObject?

    public init(
        idempotencyKey: String,
        entityType: String,
        entityID: String,
        status: Status,
        version: Int64? = nil,
        serverData: JSONObject? = nil,
        mergedData: JSONObject? = nil
    ) {
        self.idempotencyKey = idempotencyKey
        self.entityType = entityType
        self.entityID = entityID
        self.status = status
        self.version = version
        self.serverData = serverData
        self.mergedData = mergedData
    }

    public static func rejected(_ operation: SyncOperation, code: String, message: String, retryable: Bool = false) -> Self {
        OperationResult(
            idempotencyKey: operation.idempotencyKey,
            entityType: operation.entityType,
            entityID: operation.entityID,
            status: .rejected(errorCode: code, message: message, retryable: retryable)
        )
    }

    public static func rejected(_ operation: SyncOperation, _ code: ErrorCode, _ message: String) -> Self {
        rejected(operation, code: code.rawValue, message: message, retryable: code.isRetryable)
    }

    /// Whether the operation's key is remembered for `duplicate` answers (everything but rejections).
    public var isRecorded: Bool {
        if case .rejected = status { return false }
        return true
    }

    public var json: JSONValue {
        var object: JSONObject = [
            "idempotency_key": .string(idempotencyKey),
            "entity_type": .string(entityType),
            "entity_id": .string(entityID),
        ]
        switch status {
        case .applied:
            object["status"] = "applied"
        case .duplicate:
            object["status"] = "duplicate"
        case .conflict(let resolution):
            object["status"] = "conflict"
            object["resolution"] = .string(resolution.rawValue)
            if resolution == .serverWins { object["server_data"] = serverData.map(JSONValue.object) ?? .null }
            if resolution == .merged { object["data"] = mergedData.map(JSONValue.object) ?? .null }
        case .rejected(let code, let message, let retryable):
            object["status"] = "rejected"
            object["error_code"] = .string(code)
            object["error_message"] = .string(message)
            object["retryable"] = .bool(retryable)
        }
        if let version { object["version"] = .int(version) }
        return .object(object)
    }

    /// Reads a result from its wire form (a push's answer, or as stored on a job): the status's
    /// required fields must be there (a version but for rejections, the data of a merge).
    public init(json: JSONValue) throws(WireFormatError) {
        guard let key = json["idempotency_key"]?.stringValue, let type = json["entity_type"]?.stringValue,
            let id = json["entity_id"]?.stringValue, let status = json["status"]?.stringValue
        else { throw WireFormatError("a result without idempotency_key, entity_type, entity_id or status") }
        self.idempotencyKey = key
        self.entityType = type
        self.entityID = id
        self.version = json["version"]?.integerValue
        self.serverData = json["server_data"]?.objectValue
        self.mergedData = json["data"]?.objectValue
        switch status {
        case "applied": self.status = .applied
        case "duplicate": self.status = .duplicate
        case "conflict":
            guard let resolution = json["resolution"]?.stringValue.flatMap(Resolution.init(rawValue:)) else {
                throw WireFormatError("a conflict result with resolution \(json["resolution"]?.serialized() ?? "missing")")
            }
            self.status = .conflict(resolution)
        case "rejected":
            self.status = .rejected(
                errorCode: json["error_code"]?.stringValue ?? ErrorCode.internal.rawValue,
                message: json["error_message"]?.stringValue ?? "",
                retryable: json["retryable"]?.boolValue ?? false
            )
            return
        default:
            throw WireFormatError("a result with status '\(status)'")
        }
        guard version != nil else { throw WireFormatError("a '\(status)' result without a version") }
        if self.status == .conflict(.merged), mergedData == nil { throw WireFormatError("a merged result without data") }
    }
}
