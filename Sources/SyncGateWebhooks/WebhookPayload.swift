package import SyncGateCore
package import SyncGateStorage
import SyncGateWire

/// The body of a webhook request, in the Standard Webhooks shape `{"type", "timestamp", "data"}`:
/// one feed's changes in feed order (docs/webhooks.md shows one).
package enum WebhookPayload {
    /// A message's body and how many changes it carries: the changes of its range its
    /// subscription wants, in feed order; `nil` when it wants none (nothing is sent). Pure and
    /// the same at every attempt: its `timestamp` is when the message was made.
    package static func render(_ delivery: WebhookDelivery) -> (body: String, changes: Int)? {
        let wanted = delivery.changes.filter(delivery.subscription.wants)
        guard !wanted.isEmpty else { return nil }
        return (body(scope: delivery.scope, changes: wanted, now: delivery.createdAt), wanted.count)
    }

    /// The body's JSON, written by hand to splice each stored document's text in unparsed. Keys
    /// are in sorted order, as ``JSONValue/serialized()`` writes them.
    package static func body(scope: Scope, changes: [AnnouncedChange], now: Int64) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(256 + changes.reduce(0) { $0 + 160 + ($1.row.data?.utf8.count ?? 4) })
        func key(_ name: StaticString) {
            out.append(UInt8(ascii: "\""))
            name.withUTF8Buffer { out.append(contentsOf: $0) }
            out.append(contentsOf: "\":".utf8)
        }
        func string(_ value: String) { JSONValue.writeString(value, to: &out) }
        out.append(contentsOf: "{".utf8)
        key("data")
        out.append(contentsOf: "{".utf8)
        key("changes")
        out.append(contentsOf: "[".utf8)
        for (index, change) in changes.enumerated() {
            let row = change.row
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            key("data")
            // Stored documents are JSON the server wrote (jsonb on PostgreSQL).
            out.append(contentsOf: (row.data ?? "null").utf8)
            out.append(UInt8(ascii: ","))
            key("entity_id")
            string(row.entityID)
            out.append(UInt8(ascii: ","))
            key("entity_type")
            string(row.entityType)
            out.append(UInt8(ascii: ","))
            key("event")
            string(change.event.rawValue)
            if let origin = row.origin {
                out.append(UInt8(ascii: ","))
                key("origin")
                string(origin)
            }
            out.append(UInt8(ascii: ","))
            key("seq")
            out.append(contentsOf: String(row.sequence).utf8)
            out.append(UInt8(ascii: ","))
            key("updated_at")
            string(Timestamp(millisecondsSinceEpoch: row.updatedAt).rfc3339)
            out.append(UInt8(ascii: ","))
            key("version")
            out.append(contentsOf: String(row.version).utf8)
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: "],".utf8)
        switch scope {
        case .household(let id):
            key("household_id")
            string(id)
        case .user(let id):
            key("user_id")
            string(id)
        }
        out.append(contentsOf: "},".utf8)
        key("timestamp")
        string(Timestamp(millisecondsSinceEpoch: now).rfc3339)
        out.append(UInt8(ascii: ","))
        key("type")
        string("sync.changes")
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }
}
