public import SyncGateWire
/// How the server decided one of the device's writes, once it did.
///
/// Every write the app makes ends in exactly one outcome (writes merged into an unsent one share
/// its outcome), unless a later local delete cancelled it before it was sent.
public struct WriteOutcome: Sendable, Hashable {
    /// The decision.
    public enum Result: Sendable, Hashable {
        /// Applied as written; the entity is now at `version`.
        case applied(version: Int64)
        /// Applied although the entity had changed since the write's base version (policy
        /// `client_wins`, or `lww` with the later timestamp).
        case clientWins(version: Int64)
        /// Merged with concurrent changes (`field_merge`, `items_merge`); `data` is the merged document.
        case merged(version: Int64, data: JSONObject)
        /// Lost to the server's state, which the local store now holds (`data` `nil`: deleted).
        case serverWins(version: Int64, data: JSONObject?)
        /// The server had already decided this write (an earlier answer was lost on the way);
        /// `version` is the entity's version after that decision. The next pull shows the result.
        case duplicate(version: Int64)
        /// Refused for good (`VALIDATION_ERROR`, `PERMISSION_DENIED`, `ENTITY_NOT_FOUND`, a
        /// parent-archived code, or `PAYLOAD_TOO_LARGE` for a write too large to push). The write
        /// left the outbox and the local data shows the server's state again.
        case rejected(code: String, message: String)
    }

    /// The write's idempotency key (see ``LocalWrite/idempotencyKey``).
    public var idempotencyKey: String
    /// The entity written.
    public var key: EntityKey
    /// The decision.
    public var result: Result

    /// Makes an outcome (the client reports them in ``SyncEvent/writeSettled(_:)``).
    public init(idempotencyKey: String, key: EntityKey, result: Result) {
        self.idempotencyKey = idempotencyKey
        self.key = key
        self.result = result
    }

    /// Whether the write is known to have taken effect (applied, client-wins or merged). A
    /// duplicate's first decision is not known to the client.
    public var tookEffect: Bool {
        switch result {
        case .applied, .clientWins, .merged: return true
        case .duplicate, .serverWins, .rejected: return false
        }
    }

    /// The error code when the write was rejected.
    public var rejectionCode: String? {
        if case .rejected(let code, _) = result { return code }
        return nil
    }
}
