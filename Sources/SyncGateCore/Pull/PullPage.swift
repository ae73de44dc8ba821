// Pull model: what a client asks for and what a page of feed changes holds.


public struct PullQuery: Sendable, Hashable {
    public var userID: String
    public var deviceID: String
    /// `nil`: from the beginning (bootstrap).
    public var cursor: SyncCursor?
    public var limit: Int
    /// `nil`: every type.
    public var entityTypes: Set<String>?

    public init(userID: String, deviceID: String, cursor: SyncCursor?, limit: Int, entityTypes: Set<String>? = nil) {
        self.userID = userID
        self.deviceID = deviceID
        self.cursor = cursor
        self.limit = limit
        self.entityTypes = entityTypes
    }
}

/// One row of a feed.
public struct FeedChange: Sendable, Hashable {
    public var scope: Scope
    public var sequence: Int64
    public var entityType: String
    public var entityID: String
    public var version: Int64
    /// The document as text; `nil` for a delete.
    public var document: DocumentText?
    public var updatedAt: Timestamp

    public init(scope: Scope, sequence: Int64, entityType: String, entityID: String, version: Int64, data: JSONObject?, updatedAt: Timestamp) {
        self.init(scope: scope, sequence: sequence, entityType: entityType, entityID: entityID, version: version, document: data.map(DocumentText.init), updatedAt: updatedAt)
    }

    public init(scope: Scope, sequence: Int64, entityType: String, entityID: String, version: Int64, document: DocumentText?, updatedAt: Timestamp) {
        self.scope = scope
        self.sequence = sequence
        self.entityType = entityType
        self.entityID = entityID
        self.version = version
        self.document = document
        self.updatedAt = updatedAt
    }

    /// The document; `nil` for a delete.
    public var data: JSONObject? { document?.object }

    public var json: JSONValue {
        [
            "entity_type": .string(entityType),
            "entity_id": .string(entityID),
            "operation": data == nil ? "delete" : "upsert",
            "data": data.map(JSONValue.object) ?? .null,
            "version": .int(version),
            "updated_at": .string(updatedAt.rfc3339),
            "household_id": scope.householdID.map(JSONValue.string) ?? .null,
        ]
    }
}

public struct PullPage: Sendable, Hashable {
    public var changes: [FeedChange]
    public var cursor: SyncCursor
    public var hasMore: Bool
    public var forceResync: Bool
    public var scopesAdded: [String]
    public var scopesRemoved: [String]
    /// The highest finished job id of the device (0: none yet).
    public var deviceWatermark: Int64
    /// The user's scopes version this page was read under (not on the wire: a live waiter
    /// compares it with the versions notifications announce).
    public var scopesVersion: Int64

    public init(
        changes: [FeedChange], cursor: SyncCursor, hasMore: Bool, forceResync: Bool, scopesAdded: [String], scopesRemoved: [String],
        deviceWatermark: Int64, scopesVersion: Int64 = 0
    ) {
        self.changes = changes
        self.cursor = cursor
        self.hasMore = hasMore
        self.forceResync = forceResync
        self.scopesAdded = scopesAdded
        self.scopesRemoved = scopesRemoved
        self.deviceWatermark = deviceWatermark
        self.scopesVersion = scopesVersion
    }

    /// Whether a waiting pull should answer now rather than hold.
    public var hasNews: Bool {
        !changes.isEmpty || hasMore || forceResync || !scopesAdded.isEmpty || !scopesRemoved.isEmpty
    }

    /// What the next pull, with this page's cursor, answers if nothing passed that cursor since:
    /// nothing new, at the same cursor. `nil` when that pull has more to read than the feeds'
    /// heads tell (this page was one part of several) or must read its scopes again (this page
    /// changed them, or asked for a resync).
    public var quietSuccessor: PullPage? {
        guard !hasMore, !forceResync, scopesAdded.isEmpty, scopesRemoved.isEmpty else { return nil }
        return PullPage(
            changes: [], cursor: cursor, hasMore: false, forceResync: false, scopesAdded: [], scopesRemoved: [],
            deviceWatermark: deviceWatermark, scopesVersion: scopesVersion
        )
    }
}

