package import SyncGateWire
// Pull model: what a client asks for and what a page of feed changes holds.


package struct PullQuery: Sendable, Hashable {
    package var userID: String
    package var deviceID: String
    /// `nil`: from the beginning (bootstrap).
    package var cursor: SyncCursor?
    package var limit: Int
    /// `nil`: every type.
    package var entityTypes: Set<String>?

    package init(userID: String, deviceID: String, cursor: SyncCursor?, limit: Int, entityTypes: Set<String>? = nil) {
        self.userID = userID
        self.deviceID = deviceID
        self.cursor = cursor
        self.limit = limit
        self.entityTypes = entityTypes
    }

    /// The same query from `cursor` on: the page after one that answered `cursor`.
    package func continuing(at cursor: SyncCursor) -> PullQuery {
        var next = self
        next.cursor = cursor
        return next
    }
}

/// One row of a feed.
package struct FeedChange: Sendable, Hashable {
    package var scope: Scope
    package var sequence: Int64
    package var entityType: String
    package var entityID: String
    package var version: Int64
    /// The document as text; `nil` for a delete.
    package var document: DocumentText?
    package var updatedAt: Timestamp
    /// `service:<key name>` for a change a service key's push made; `nil` for a device's.
    package var origin: String?

    package init(
        scope: Scope, sequence: Int64, entityType: String, entityID: String, version: Int64, data: JSONObject?, updatedAt: Timestamp,
        origin: String? = nil
    ) {
        self.init(
            scope: scope, sequence: sequence, entityType: entityType, entityID: entityID, version: version, document: data.map(DocumentText.init),
            updatedAt: updatedAt, origin: origin
        )
    }

    package init(
        scope: Scope, sequence: Int64, entityType: String, entityID: String, version: Int64, document: DocumentText?, updatedAt: Timestamp,
        origin: String? = nil
    ) {
        self.scope = scope
        self.sequence = sequence
        self.entityType = entityType
        self.entityID = entityID
        self.version = version
        self.document = document
        self.updatedAt = updatedAt
        self.origin = origin
    }

    /// The document; `nil` for a delete.
    package var data: JSONObject? { document?.object }

    /// The change as a pull page carries it.
    package var pulled: PulledChange {
        PulledChange(
            entityType: entityType, entityID: entityID, householdID: scope.householdID, data: data, version: version, updatedAt: updatedAt, origin: origin
        )
    }

    /// Appends the change as ``pulled`` serializes, its document written as the checked text it is.
    package func write(to output: inout [UInt8]) {
        PulledChange.write(
            entityType: entityType, entityID: entityID, householdID: scope.householdID, document: document, version: version, updatedAt: updatedAt,
            origin: origin, to: &output
        )
    }
}

/// What a pull read: the changes of one page, the cursor past them, the household news, the
/// device's watermark, and the scopes version it was read under. The route writes it as the
/// wire's ``PullPage``.
package struct PullResult: Sendable, Hashable {
    package var changes: [FeedChange]
    package var cursor: SyncCursor
    package var hasMore: Bool
    package var forceResync: Bool
    package var scopesAdded: [String]
    package var scopesRemoved: [String]
    /// The highest finished job id of the device (0: none yet).
    package var deviceWatermark: Int64
    /// The user's scopes version this page was read under (not on the wire: a live waiter
    /// compares it with the versions notifications announce).
    package var scopesVersion: Int64 = 0

    /// Whether a waiting pull should answer now rather than hold.
    package var hasNews: Bool {
        !changes.isEmpty || hasMore || forceResync || !scopesAdded.isEmpty || !scopesRemoved.isEmpty
    }

    /// What the next pull, with this page's cursor, answers if nothing passed that cursor since:
    /// nothing new, at the same cursor. `nil` when that pull has more to read than the feeds'
    /// heads tell (this page was one part of several) or must read its scopes again (this page
    /// changed them, or asked for a resync).
    package var quietSuccessor: PullResult? {
        guard !hasMore, !forceResync, scopesAdded.isEmpty, scopesRemoved.isEmpty else { return nil }
        return PullResult(
            changes: [], cursor: cursor, hasMore: false, forceResync: false, scopesAdded: [], scopesRemoved: [],
            deviceWatermark: deviceWatermark, scopesVersion: scopesVersion
        )
    }
}

