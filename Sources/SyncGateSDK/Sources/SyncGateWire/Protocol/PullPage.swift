/// One change of a pull page (`changes[]`): an entity's document at `version`, or its delete.
public struct PulledChange: Sendable, Hashable {
    public var entityType: String
    public var entityID: String
    /// The household of a household-scoped type; `nil` for the user's own data.
    public var householdID: String?
    /// The document; `nil` for a delete.
    public var data: JSONObject?
    public var version: Int64
    public var updatedAt: Timestamp
    /// Who made the change when it was not a device: `service:<key name>` for an app backend's
    /// push with a service key; `nil` (absent on the wire) for a device's.
    public var origin: String?

    public init(
        entityType: String, entityID: String, householdID: String? = nil, data: JSONObject?, version: Int64, updatedAt: Timestamp,
        origin: String? = nil
    ) {
        self.entityType = entityType
        self.entityID = entityID
        self.householdID = householdID
        self.data = data
        self.version = version
        self.updatedAt = updatedAt
        self.origin = origin
    }

    public var json: JSONValue {
        var members = Self.members(
            entityType: entityType, entityID: entityID, householdID: householdID, data: data.map(JSONValue.object), version: version, updatedAt: updatedAt
        )
        if let origin { members["origin"] = .string(origin) }
        return .object(members)
    }

    /// Appends a change as ``json`` writes it, its document written as the checked text it is:
    /// building a stored document's tree only to write it again is a pull page's largest cost.
    public static func write(
        entityType: String, entityID: String, householdID: String?, document: DocumentText?, version: Int64, updatedAt: Timestamp,
        origin: String? = nil, to output: inout [UInt8]
    ) {
        func append(_ literal: StaticString) {
            output.append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
        }
        // Keys in sorted order, as the tree is written.
        append(#"{"data":"#)
        if let document { output.append(contentsOf: document.bytes) } else { append("null") }
        append(#","entity_id":"#)
        JSONValue.writeString(entityID, to: &output)
        append(#","entity_type":"#)
        JSONValue.writeString(entityType, to: &output)
        append(#","household_id":"#)
        if let householdID { JSONValue.writeString(householdID, to: &output) } else { append("null") }
        append(document == nil ? #","operation":"delete""# : #","operation":"upsert""#)
        if let origin {
            append(#","origin":"#)
            JSONValue.writeString(origin, to: &output)
        }
        append(#","updated_at":"#)
        JSONValue.writeString(updatedAt.rfc3339, to: &output)
        append(#","version":"#)
        output.append(contentsOf: String(version).utf8)
        append("}")
    }

    private static func members(
        entityType: String, entityID: String, householdID: String?, data: JSONValue?, version: Int64, updatedAt: Timestamp
    ) -> JSONObject {
        [
            "entity_type": .string(entityType),
            "entity_id": .string(entityID),
            "operation": data == nil ? "delete" : "upsert",
            "data": data ?? .null,
            "version": .int(version),
            "updated_at": .string(updatedAt.rfc3339),
            "household_id": householdID.map(JSONValue.string) ?? .null,
        ]
    }

    public init(json: JSONValue) throws(WireFormatError) {
        guard let type = json["entity_type"]?.stringValue, let id = json["entity_id"]?.stringValue,
            let version = json["version"]?.integerValue, let operation = json["operation"]?.stringValue
        else { throw WireFormatError("a change without entity_type, entity_id, version or operation") }
        self.entityType = type
        self.entityID = id
        self.householdID = json["household_id"]?.stringValue
        self.origin = json["origin"]?.stringValue
        self.version = version
        self.updatedAt = json["updated_at"]?.stringValue.flatMap(Timestamp.init(rfc3339:)) ?? Timestamp(millisecondsSinceEpoch: 0)
        switch operation {
        case "upsert":
            guard let data = json["data"]?.objectValue else { throw WireFormatError("an upsert of \(type)/\(id) without data") }
            self.data = data
        case "delete":
            self.data = nil
        default:
            throw WireFormatError("a change with operation '\(operation)'")
        }
    }
}

/// A pull answer (`GET /v1/sync/pull`): changes in commit order within each feed, the cursor to
/// send back, and what else the device must know (``Envelope``, whose members it also answers).
@dynamicMemberLookup
public struct PullPage: Sendable, Hashable {
    public var changes: [PulledChange]
    public var envelope: Envelope

    /// Everything of a page but its changes.
    public struct Envelope: Sendable, Hashable {
        /// Opaque: sent back as `cursor` for what comes next.
        public var cursor: String
        public var hasMore: Bool
        /// Start over: drop local data and pull without a cursor.
        public var forceResync: Bool
        /// Households joined since the cursor, read from their beginning.
        public var scopesAdded: [String]
        /// Households left: the device deletes their data.
        public var scopesRemoved: [String]
        /// The highest finished job of the device (0: none yet).
        public var deviceWatermark: Int64
        public var serverTime: Timestamp

        public init(
            cursor: String, hasMore: Bool = false, forceResync: Bool = false, scopesAdded: [String] = [], scopesRemoved: [String] = [],
            deviceWatermark: Int64 = 0, serverTime: Timestamp = .now()
        ) {
            self.cursor = cursor
            self.hasMore = hasMore
            self.forceResync = forceResync
            self.scopesAdded = scopesAdded
            self.scopesRemoved = scopesRemoved
            self.deviceWatermark = deviceWatermark
            self.serverTime = serverTime
        }

        /// The envelope's members: every key sorts after "changes".
        var members: JSONObject {
            [
                "cursor": .string(cursor),
                "has_more": .bool(hasMore),
                "force_resync": .bool(forceResync),
                "scopes": ["added": .array(scopesAdded.map(JSONValue.string)), "removed": .array(scopesRemoved.map(JSONValue.string))],
                "device_watermark": .string(String(deviceWatermark)),
                "server_time": .string(serverTime.rfc3339),
            ]
        }
    }

    public init(changes: [PulledChange], envelope: Envelope) {
        self.changes = changes
        self.envelope = envelope
    }

    public subscript<Value>(dynamicMember member: KeyPath<Envelope, Value>) -> Value {
        envelope[keyPath: member]
    }

    public var json: JSONValue {
        var members = envelope.members
        members["changes"] = .array(changes.map(\.json))
        return .object(members)
    }

    /// Writes a page: `writeChanges` appends its changes, comma-separated
    /// (``PulledChange/write(entityType:entityID:householdID:document:version:updatedAt:origin:to:)``), then the
    /// envelope follows; the result is what ``json`` serializes to.
    public static func write(_ envelope: Envelope, to output: inout [UInt8], changes writeChanges: (inout [UInt8]) -> Void) {
        output.append(contentsOf: #"{"changes":["#.utf8)
        writeChanges(&output)
        output.append(contentsOf: "],".utf8)
        output.append(contentsOf: JSONValue.object(envelope.members).serializedBytes().dropFirst())
    }

    public init(json: JSONValue) throws(WireFormatError) {
        guard let cursor = json["cursor"]?.stringValue, let changes = json["changes"]?.arrayValue else {
            throw WireFormatError("a pull page without cursor or changes")
        }
        var decoded: [PulledChange] = []
        decoded.reserveCapacity(changes.count)
        for change in changes { decoded.append(try PulledChange(json: change)) }
        self.changes = decoded
        self.envelope = Envelope(
            cursor: cursor,
            hasMore: json["has_more"]?.boolValue ?? false,
            forceResync: json["force_resync"]?.boolValue ?? false,
            scopesAdded: json["scopes"]?["added"]?.arrayValue?.compactMap(\.stringValue) ?? [],
            scopesRemoved: json["scopes"]?["removed"]?.arrayValue?.compactMap(\.stringValue) ?? [],
            deviceWatermark: json["device_watermark"]?.stringValue.flatMap { Int64($0) } ?? 0,
            serverTime: json["server_time"]?.stringValue.flatMap(Timestamp.init(rfc3339:)) ?? Timestamp(millisecondsSinceEpoch: 0)
        )
    }
}
