import SyncGateWire
/// What a pushed operation asks for (`intent` on the wire).
typealias WriteIntent = SyncOperation.Intent

/// One operation waiting in the outbox, and where it stands.
///
/// The idempotency key is made once, when the entry is first written, and never changes: every
/// attempt to push the entry sends the same key, so the server applies it at most once.
struct OutboxEntry: Sendable, Hashable {
    enum State: Sendable, Hashable {
        /// Never sent: later writes of the same entity may still merge into it.
        case pending
        /// Sent at least once, answer not known yet; `jobID` is the server's job when it answered 202.
        /// Its content is frozen: the server may have applied it.
        case sent(jobID: String?)
        /// The server applied it at `version`, in job `jobID` (`nil`: acknowledged before the
        /// client kept it). It stays in the local view until the server state catches up: a pull
        /// reaches `version`, or a pull that began at pull epoch `epoch` or later completes with
        /// a `device_watermark` of at least `jobID` (a pull read from a lagging standby may not
        /// hold the write yet, and says so by its watermark).
        case acknowledged(version: Int64, epoch: Int64, jobID: Int64?)
    }

    /// Position in the outbox; operations are pushed in this order.
    var sequence: Int64
    var idempotencyKey: String
    var key: EntityKey
    var intent: WriteIntent
    /// The full document (create), the changed top-level fields with `null` for removed ones
    /// (update), or `nil` (delete).
    var data: JSONObject?
    /// The server version this write was made on.
    var baseVersion: Int64
    /// Made on top of an earlier entry of the same entity whose result is not known yet: its base
    /// version is that entry's resulting version, known once the server answers it. It is not
    /// pushed before then.
    var followsPending: Bool
    /// When the app made the write, in milliseconds since 1970 (`client_timestamp`).
    var clientTimestamp: Int64
    var state: State

    var isAcknowledged: Bool {
        if case .acknowledged = state { return true }
        return false
    }

    var acknowledgedVersion: Int64? {
        if case .acknowledged(let version, _, _) = state { return version }
        return nil
    }

    var jobID: String? {
        if case .sent(let jobID) = state { return jobID }
        return nil
    }
}

/// The server's document of an entity, as last pulled or answered.
struct ServerRecord: Sendable, Hashable {
    var version: Int64
    var data: JSONObject
    /// Left from before a resync: replaced by whatever the resync pulls, removed if it pulls nothing.
    var stale: Bool = false
}
