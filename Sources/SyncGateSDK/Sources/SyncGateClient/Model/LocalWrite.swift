import SyncGateWire
/// What a local write did, returned by ``SyncClient/write(type:id:data:household:)`` and friends.
public struct LocalWrite: Sendable, Hashable {
    /// The entity written.
    public var key: EntityKey
    /// The idempotency key of the outbox entry that carries the write: its ``WriteOutcome``
    /// arrives with the same key. `nil` when nothing will be pushed: the document was already
    /// as asked, or a delete cancelled a create that was never sent.
    public var idempotencyKey: String?
}

/// What one ``SyncClient/sync()`` did.
public struct SyncReport: Sendable, Hashable {
    /// Writes the server decided, in push order.
    public var settled: [WriteOutcome] = []
    /// Writes still in the outbox afterwards: pushed again on the next sync (a retryable
    /// failure, or a job that has not finished within the follow-up time).
    public var pending: Int = 0
    /// Changes pulled (including ones already known).
    public var pulledChanges: Int = 0
    /// Whether the client started over from the beginning of the feeds, and why.
    public var resynced: ResyncReason?

    /// An empty report.
    public init() {}
}
