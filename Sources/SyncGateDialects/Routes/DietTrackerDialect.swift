import Crypto
import Foundation
package import SyncGateCore
package import SyncGateWire
import SyncGateStorage

/// The diet tracker's sync dialect (`../shared/DIALECTS.md`): its push body becomes the
/// operations of one ordinary job, and the job's results become its push response. Pure
/// translation: the routes (``DialectRoutes``) do the I/O.
package enum DietTrackerDialect {
    /// Its collections that have another name in SyncGate; every other collection is the entity
    /// type of the same name.
    static let renamed: [String: String] = ["families": "households", "familyMembers": "household_members"]
    static let collections: [String: String] = Dictionary(uniqueKeysWithValues: renamed.map { ($1, $0) })

    package static func entityType(ofCollection collection: String) -> String { renamed[collection] ?? collection }
    package static func collection(ofEntityType type: String) -> String { collections[type] ?? type }

    /// One change of a push, as the client sent it: what its response speaks of.
    package struct Change: Sendable, Hashable {
        package var collection: String
        package var documentID: String
        package var operation: SyncOperation.Intent
        package var version: Int64
        package var data: JSONObject?
    }

    package struct Push: Sendable, Hashable {
        /// `deviceId` of the body, when it has one.
        package var deviceID: String?
        package var changes: [Change]
        /// The changes as SyncGate operations, in order, with derived idempotency keys.
        package var operations: [SyncOperation]
    }

    /// Parses and checks a push body: its shape only, like `POST /v1/sync/push`.
    package static func push(body: some Collection<UInt8>, limits: PushLimits, receivedAt: Timestamp) throws(ProtocolError) -> Push {
        let document = try PushRequest.parse(body, limits: limits)
        guard let root = document.objectValue else { throw ProtocolError(.validationError, "the body must be a JSON object") }
        var deviceID: String?
        if let value = root["deviceId"], !value.isNull {
            guard let text = value.stringValue else { throw ProtocolError(.validationError, "deviceId must be a string") }
            if let problem = DeviceID.problem(with: text, field: "deviceId") { throw ProtocolError(.validationError, problem) }
            deviceID = text
        }
        guard let list = root["changes"]?.arrayValue else { throw ProtocolError(.validationError, "field 'changes' must be an array") }
        guard list.count <= limits.maximumOperations else {
            throw ProtocolError(.validationError, "too many changes: \(list.count) (at most \(limits.maximumOperations) per push)")
        }
        var changes: [Change] = []
        var operations: [JSONValue] = []
        for (index, value) in list.enumerated() {
            let (change, operation) = try Self.change(value, path: "changes[\(index)]")
            changes.append(change)
            operations.append(operation)
        }
        guard !operations.isEmpty else { return Push(deviceID: deviceID, changes: [], operations: []) }
        // The same checks and limits as a /v1 push, on the translated operations.
        do {
            let request = try PushRequest(document: ["operations": .array(operations)], limits: limits, receivedAt: receivedAt)
            return Push(deviceID: deviceID, changes: changes, operations: request.operations)
        } catch {
            throw ProtocolError(.validationError, Self.renaming(error.message))
        }
    }

    static func change(_ value: JSONValue, path: String) throws(ProtocolError) -> (Change, JSONValue) {
        guard let object = value.objectValue else { throw ProtocolError(.validationError, "\(path) must be an object") }
        func string(_ field: String, required: Bool = true) throws(ProtocolError) -> String? {
            guard let value = object[field], !value.isNull else {
                if required { throw ProtocolError(.validationError, "\(path).\(field) is required") }
                return nil
            }
            guard let text = value.stringValue else { throw ProtocolError(.validationError, "\(path).\(field) must be a string") }
            return text
        }
        let collection = try string("collection")!
        let documentID = try string("documentId")!
        let operation = try SyncOperation.Intent.named(try string("operation")!, field: "\(path).operation")
        let version = try object.version("version", path: path)
        let timestamp = try string("timestamp", required: false)
        let household = try string("householdId", required: false)
        let data = object["data"].flatMap { $0.isNull ? nil : $0 }
        if operation != .delete, data?.objectValue == nil {
            throw ProtocolError(.validationError, "\(path).data must be an object for \(operation.rawValue)")
        }
        let keptData = operation == .delete ? nil : data
        let key = idempotencyKey(collection: collection, documentID: documentID, operation: operation, version: version, timestamp: timestamp, data: keptData)
        var translated: JSONObject = [
            "idempotency_key": .string(key),
            "entity_type": .string(entityType(ofCollection: collection)),
            "entity_id": .string(documentID),
            "intent": .string(operation.rawValue),
            "base_version": .int(version),
        ]
        if let keptData { translated["data"] = keptData }
        if let timestamp { translated["client_timestamp"] = .string(timestamp) }
        if let household { translated["household_id"] = .string(household) }
        let change = Change(collection: collection, documentID: documentID, operation: operation, version: version, data: keptData?.objectValue)
        return (change, .object(translated))
    }

    /// The idempotency key of a change: these clients send none, and resend a push they got no
    /// answer to unchanged. A digest of everything the change says (its collection, document,
    /// operation, base version, local timestamp and document) is the same for the resent change
    /// and differs for any other, so the resend answers `duplicate` instead of applying twice.
    /// (Two changes equal in all of that, made at the same millisecond, are one change.)
    package static func idempotencyKey(
        collection: String, documentID: String, operation: SyncOperation.Intent, version: Int64, timestamp: String?, data: JSONValue?
    ) -> String {
        let canonical: JSONValue = [
            .string(collection), .string(documentID), .string(operation.rawValue), .int(version),
            timestamp.map(JSONValue.string) ?? .null, data ?? .null,
        ]
        let digest = SHA256.hash(data: Array(canonical.serialized().utf8))
        return "diet:" + digest.map { byte in String(byte, radix: 16).leftPadded(to: 2) }.joined()
    }

    /// A /v1 message in the dialect's words.
    static func renaming(_ message: String) -> String {
        message
            .replacingOccurrences(of: "operations[", with: "changes[")
            .replacingOccurrences(of: ".entity_type", with: ".collection")
            .replacingOccurrences(of: ".entity_id", with: ".documentId")
            .replacingOccurrences(of: ".client_timestamp", with: ".timestamp")
            .replacingOccurrences(of: ".household_id", with: ".householdId")
            .replacingOccurrences(of: "operations", with: "changes")
    }

    /// The push response of a finished job: `applied` lists what took effect (a resent change
    /// included), `conflicts` what the server resolved, `rejected` what it refused.
    package static func response(changes: [Change], results: [OperationResult], serverTime: Timestamp) -> JSONValue {
        var applied: [JSONValue] = []
        var conflicts: [JSONValue] = []
        var rejected: [JSONValue] = []
        for (change, result) in zip(changes, results) {
            func conflict(_ resolution: String, version: Int64, data: JSONObject?) -> JSONValue {
                [
                    "documentId": .string(change.documentID), "clientVersion": .int(change.version), "serverVersion": .int(version),
                    "serverData": data.map(JSONValue.object) ?? .null, "resolution": .string(resolution),
                ]
            }
            switch result.status {
            case .applied, .duplicate:
                applied.append(.string(change.documentID))
            case .conflict(.serverWins):
                conflicts.append(conflict("server_wins", version: result.version ?? 0, data: result.serverData))
            case .conflict(.clientWins):
                applied.append(.string(change.documentID))
                conflicts.append(conflict("client_wins", version: result.version ?? 0, data: change.data))
            case .conflict(.merged):
                applied.append(.string(change.documentID))
                conflicts.append(conflict("merge", version: result.version ?? 0, data: result.mergedData))
            case .rejected(let code, _, _) where code == ErrorCode.entityNotFound.rawValue:
                // As the original server: an update or delete of a missing document.
                conflicts.append(conflict("server_wins", version: 0, data: nil))
            case .rejected(let code, let message, _):
                rejected.append([
                    "documentId": .string(change.documentID), "collection": .string(change.collection), "code": .string(code),
                    "message": .string(message),
                ])
            }
        }
        return [
            "success": .bool(rejected.isEmpty), "applied": .array(applied), "conflicts": .array(conflicts),
            "rejected": .array(rejected), "serverTime": .string(serverTime.rfc3339),
        ]
    }

    /// A change of a pull. A document of a household-scoped collection names its household in
    /// `householdId`, as a push of it must (families and their members carry theirs in their ids).
    package static func change(_ change: FeedChange) -> JSONValue {
        var answer: JSONObject = [
            "collection": .string(collection(ofEntityType: change.entityType)), "documentId": .string(change.entityID),
            "operation": change.data == nil ? "delete" : "upsert", "data": change.data.map(JSONValue.object) ?? .null,
            "version": .int(change.version), "updatedAt": .string(change.updatedAt.rfc3339),
        ]
        if let household = householdField(change.scope, entityType: change.entityType) { answer["householdId"] = .string(household) }
        return .object(answer)
    }

    /// `POST /sync/full`: the live documents by collection, household-scoped ones with their
    /// `householdId` as in a pull.
    package static func full(_ documents: LiveDocuments) -> JSONValue {
        // Gathered apart and wrapped once: appending to an array held in the object copied it
        // each time, quadratic in a collection's size.
        var lists: [String: [JSONValue]] = [:]
        for document in documents.documents {
            var entry: JSONObject = [
                "documentId": .string(document.key.entityID), "version": .int(document.version),
                "updatedAt": .string(document.updatedAt.rfc3339), "data": .object(document.data),
            ]
            if let household = householdField(document.key.scope, entityType: document.key.entityType) { entry["householdId"] = .string(household) }
            lists[collection(ofEntityType: document.key.entityType), default: []].append(.object(entry))
        }
        let data = JSONObject(uniqueKeysWithValues: lists.map { ($0.key, JSONValue.array($0.value)) })
        return ["data": .object(data), "serverTime": .string(Timestamp(millisecondsSinceEpoch: documents.serverTime).rfc3339)]
    }

    /// The household a document of `scope` belongs to, for the collections that take
    /// `householdId` (every household-scoped one but families and their members).
    static func householdField(_ scope: Scope, entityType: String) -> String? {
        guard collections[entityType] == nil else { return nil }
        return scope.householdID
    }
}

extension String {
    func leftPadded(to length: Int) -> String {
        count >= length ? self : String(repeating: "0", count: length - count) + self
    }
}
