import SyncGateWire
/// The optimistic document of an entity: the server's, with the device's unconfirmed writes applied in order.
///
/// Pending and sent entries always apply, and make the document pending. An acknowledged entry
/// (confirmed, so not pending) applies only while the server state is older than the version it
/// was acknowledged at: once a pull brings that version (or a later one), the server's document
/// already holds it (or something newer).
enum LocalView {
    struct Document: Sendable, Hashable {
        var data: JSONObject?
        var version: Int64?
        var hasPendingWrites: Bool
    }

    static func document(server: ServerRecord?, entries: [OutboxEntry]) -> Document {
        var data = server?.data
        var pending = false
        for entry in entries {
            if let acknowledged = entry.acknowledgedVersion {
                // Confirmed by the server: shown until the pulled document holds it, but not pending.
                if acknowledged <= (server?.version ?? 0) { continue }
            } else {
                pending = true
            }
            data = applying(entry, to: data)
        }
        return Document(data: data, version: server?.version, hasPendingWrites: pending)
    }

    /// One write on a document. An update of a missing document leaves it missing: deletes win,
    /// as on the server for every policy but `client_wins`.
    static func applying(_ entry: OutboxEntry, to data: JSONObject?) -> JSONObject? {
        switch entry.intent {
        case .create: return entry.data ?? [:]
        case .update: return data.map { $0.patched(with: entry.data ?? [:]) }
        case .delete: return nil
        }
    }
}
