import SyncGateWire
/// A change the app makes to one entity.
enum LocalChange: Sendable, Hashable {
    /// The whole document: created if the entity is absent, else updated with the fields that differ.
    case put(JSONObject)
    /// Some top-level fields (`null` removes one); the entity must exist.
    case patch(JSONObject)
    case delete
}

/// What recording a local change did to the outbox.
enum WriteEffect: Sendable, Hashable {
    /// A new entry with this key.
    case appended(idempotencyKey: String)
    /// Merged into the entity's unsent entry with this key.
    case merged(idempotencyKey: String)
    /// Deleted an entity that only existed in an unsent create: that entry is gone, nothing will be pushed.
    case cancelled(idempotencyKey: String)
    /// Nothing to do: the document already is what was asked, or the entity is already absent.
    case unchanged

    /// The key of the outbox entry that carries the change, if one does.
    var idempotencyKey: String? {
        switch self {
        case .appended(let key), .merged(let key): return key
        case .cancelled, .unchanged: return nil
        }
    }
}

/// A local change that cannot be recorded.
enum LocalChangeError: Error, Sendable, Hashable {
    /// A patch of an entity the device does not have.
    case notFound
}

extension ReplicaSlice {
    /// Records a change the app made at `timestamp` (milliseconds since 1970).
    ///
    /// The intent follows the optimistic view: a put on an absent entity creates it, on a present
    /// one updates the fields that differ. The base version is the version the view is built on:
    /// the server's, or the version an acknowledged write of this device reached. Over an entry
    /// whose result is unknown, the new entry follows it and gets its base version from that
    /// result. Consecutive unsent writes of one entity merge into one entry (create+update is a
    /// create, update+update one patch, update+delete a delete, create+delete nothing), which then
    /// carries the later timestamp.
    mutating func record(
        _ change: LocalChange, on key: EntityKey, at timestamp: Int64, sequence: Int64, newKey: () -> String
    ) throws(LocalChangeError) -> WriteEffect {
        let current = view(of: key).data
        let intent: WriteIntent
        let data: JSONObject?
        switch change {
        case .put(let document):
            if let current {
                let patch = current.patch(to: document)
                guard !patch.isEmpty else { return .unchanged }
                (intent, data) = (.update, patch)
            } else {
                (intent, data) = (.create, document)
            }
        case .patch(let fields):
            guard let current else { throw .notFound }
            let effective = fields.filter { field, value in value.isNull ? current[field] != nil : current[field] != value }
            guard !effective.isEmpty else { return .unchanged }
            (intent, data) = (.update, effective)
        case .delete:
            guard current != nil else { return .unchanged }
            (intent, data) = (.delete, nil)
        }

        if let last = outbox.lastIndex(where: { $0.key == key }), outbox[last].state == .pending {
            switch (outbox[last].intent, intent) {
            case (.create, .update):
                outbox[last].data = (outbox[last].data ?? [:]).patched(with: data ?? [:])
                outbox[last].clientTimestamp = timestamp
                return .merged(idempotencyKey: outbox[last].idempotencyKey)
            case (.update, .update):
                var merged = outbox[last].data ?? [:]
                merged.merge(data ?? [:]) { _, later in later }
                outbox[last].data = merged
                outbox[last].clientTimestamp = timestamp
                return .merged(idempotencyKey: outbox[last].idempotencyKey)
            case (.update, .delete):
                outbox[last].intent = .delete
                outbox[last].data = nil
                outbox[last].clientTimestamp = timestamp
                return .merged(idempotencyKey: outbox[last].idempotencyKey)
            case (.create, .delete):
                let cancelled = outbox.remove(at: last)
                return .cancelled(idempotencyKey: cancelled.idempotencyKey)
            default:
                break
            }
        }

        let entries = entries(of: key)
        let followsPending = entries.contains { !$0.isAcknowledged }
        let serverVersion = server[key]?.version ?? 0
        let acknowledged = entries.compactMap(\.acknowledgedVersion).filter { $0 > serverVersion }.max()
        let entry = OutboxEntry(
            sequence: sequence,
            idempotencyKey: newKey(),
            key: key,
            intent: intent,
            data: data,
            baseVersion: max(serverVersion, acknowledged ?? 0),
            followsPending: followsPending,
            clientTimestamp: timestamp,
            state: .pending
        )
        outbox.append(entry)
        return .appended(idempotencyKey: entry.idempotencyKey)
    }
}
