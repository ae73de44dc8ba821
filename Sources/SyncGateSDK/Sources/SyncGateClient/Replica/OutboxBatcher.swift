import SyncGateWire
/// Chooses the next batch to push from the outbox.
enum OutboxBatcher {
    /// How much one push may carry.
    struct Limits: Sendable, Hashable {
        /// Operations per push (the server's default maximum is 1,000).
        var operations: Int
        /// Approximate request size in bytes (the server's default body limit is 4 MiB).
        var bytes: Int
    }

    /// What the engine should do next with the outbox.
    enum Next: Sendable, Hashable {
        /// Nothing to push.
        case idle
        /// A push answered 202 and its job has not been followed to the end: follow it first, so
        /// results arrive in order and nothing is pushed twice while it runs.
        case follow(jobID: String)
        /// Push these entries, in this order.
        case push([OutboxEntry])
    }

    /// The longest prefix of the unacknowledged entries that fits the limits and stops before an
    /// entry that waits for an earlier entry's result. Stopping there, instead of skipping it,
    /// keeps the outbox order: a batch applies in order on the server, and later writes may
    /// depend on earlier ones (a household before its inventory). The first entry is always
    /// taken, even over the byte limit, so one large write cannot block the outbox.
    static func next(_ outbox: [OutboxEntry], limits: Limits) -> Next {
        let unresolved = outbox.filter { !$0.isAcknowledged }
        if let jobID = unresolved.lazy.compactMap(\.jobID).first {
            return .follow(jobID: jobID)
        }
        var batch: [OutboxEntry] = []
        var bytes = 0
        for entry in unresolved {
            if entry.followsPending || batch.count >= limits.operations { break }
            let size = estimatedSize(of: entry)
            if !batch.isEmpty, bytes + size > limits.bytes { break }
            batch.append(entry)
            bytes += size
        }
        return batch.isEmpty ? .idle : .push(batch)
    }

    /// The operation's size on the wire, near enough: its document plus the fixed fields.
    static func estimatedSize(of entry: OutboxEntry) -> Int {
        256 + entry.key.entityType.utf8.count + entry.key.entityID.utf8.count + (entry.data.map { JSONValue.object($0).serialized().utf8.count } ?? 0)
    }
}
