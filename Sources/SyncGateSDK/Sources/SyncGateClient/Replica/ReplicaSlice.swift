import SyncGateWire
/// The local state of a few entities — their server records and their outbox entries — with
/// every decision the client makes about them, as pure functions.
///
/// The store loads the slice a transaction touches, lets it decide, and writes back what
/// changed, so each decision (recording a write, applying push results or a pulled page) is
/// tested without a database.
struct ReplicaSlice: Sendable, Hashable {
    /// Server records of the slice's entities (absent: the server has none, or it is deleted).
    var server: [EntityKey: ServerRecord]
    /// Every outbox entry of the slice's entities, in outbox order.
    var outbox: [OutboxEntry]
    /// The version a pull deleted an entity at, kept while the outbox holds writes of it: the
    /// answer to one of them may describe an older version, which must not bring it back.
    var tombstones: [EntityKey: Int64]

    init(server: [EntityKey: ServerRecord] = [:], outbox: [OutboxEntry] = [], tombstones: [EntityKey: Int64] = [:]) {
        self.server = server
        self.outbox = outbox.sorted { $0.sequence < $1.sequence }
        self.tombstones = tombstones
    }

    /// The entries of one entity, in outbox order.
    func entries(of key: EntityKey) -> [OutboxEntry] {
        outbox.filter { $0.key == key }
    }

    /// What the app sees of an entity.
    func view(of key: EntityKey) -> LocalView.Document {
        LocalView.document(server: server[key], entries: entries(of: key))
    }

    /// Every entity the slice knows.
    var keys: Set<EntityKey> {
        Set(server.keys).union(outbox.map(\.key)).union(tombstones.keys)
    }

    /// The version the server state of `key` is known to have reached: its record's, or the
    /// deletion's.
    func knownVersion(of key: EntityKey) -> Int64? {
        server[key]?.version ?? tombstones[key]
    }

    /// Drops acknowledged entries the server state has caught up with (or deleted since), lets
    /// the first unresolved entry of each entity be pushed, and forgets tombstones of entities
    /// with no writes left.
    mutating func tidy() {
        let known = self
        outbox.removeAll { entry in
            guard let acknowledged = entry.acknowledgedVersion, let version = known.knownVersion(of: entry.key) else { return false }
            return acknowledged <= version
        }
        let written = Set(outbox.map(\.key))
        tombstones = tombstones.filter { written.contains($0.key) }
        var unresolvedBefore: Set<EntityKey> = []
        for index in outbox.indices where !outbox[index].isAcknowledged {
            if !unresolvedBefore.contains(outbox[index].key) {
                outbox[index].followsPending = false
            }
            unresolvedBefore.insert(outbox[index].key)
        }
    }

    /// Removes acknowledged entries from before pull epoch `epoch` whose jobs `watermark` counts:
    /// a pull that began at that epoch has completed and its pages were read after those jobs
    /// finished, so the server state holds whatever they wrote (or something newer, or the
    /// entity is gone).
    mutating func dropAcknowledged(before epoch: Int64, watermark: Int64) {
        outbox.removeAll { entry in
            guard case .acknowledged(_, let acknowledgedAt, let jobID) = entry.state else { return false }
            return acknowledgedAt < epoch && (jobID ?? 0) <= watermark
        }
    }
}
