import SyncGateWire
/// Something the app may want to react to, reported by ``SyncClient/events()``.
public enum SyncEvent: Sendable, Hashable {
    /// The server decided one of the device's writes. Rejections are the ones to show the user.
    case writeSettled(WriteOutcome)
    /// The client dropped its copy of the server's data and pulled everything again; pending
    /// writes were kept.
    case resynced(ResyncReason)
    /// The user joined or left households (a left household's data is gone from the device).
    case householdsChanged(joined: [String], left: [String])
    /// Live sync failed and will try again after `retryIn`.
    case liveSyncFailed(SyncGateClientError, retryIn: Duration)
    /// The app's own backend changed these entities (a push with a service key or token), as one
    /// pulled page brought them: for a "changed by the server" note. Not reported by a first
    /// sync or a resync, which bring history rather than news.
    case changedByService([ServiceChange])
}

/// One change the app's backend made, as pulled.
public struct ServiceChange: Sendable, Hashable {
    public var key: EntityKey
    /// `service:<key name>`: which of the backend's keys made it.
    public var origin: String
    /// Whether the change deleted the entity.
    public var deleted: Bool

    public init(key: EntityKey, origin: String, deleted: Bool) {
        self.key = key
        self.origin = origin
        self.deleted = deleted
    }
}

/// Why the client started over from the beginning of the feeds.
public enum ResyncReason: String, Sendable, Hashable {
    /// The server answered `409 CURSOR_INVALID`: the cursor is older than a purge, or unreadable.
    case cursorInvalid
    /// The server asked with `force_resync: true` (an operator, or a schema change).
    case forced
}
