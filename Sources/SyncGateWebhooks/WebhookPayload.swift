package import SyncGateCore
package import SyncGateStorage
package import SyncGateWire

/// The body of a webhook request, in the Standard Webhooks shape `{"type", "timestamp", "data"}`:
/// one feed's changes in feed order (docs/webhooks.md shows one).
package enum WebhookPayload {
    /// The deliveries of one announcer pass: for each subscription and feed, the changes it
    /// wants, in feed order, as one request. Pure: the announcer runs it in its transaction.
    package static func render(subscriptions: [WebhookSubscription], changes: [AnnouncedChange], now: Int64) -> [NewWebhookDelivery] {
        // Changes arrive grouped by feed in sequence order; keep the feeds' order.
        var feeds: [(Scope, [AnnouncedChange])] = []
        for change in changes {
            if let last = feeds.last, last.0 == change.scope {
                feeds[feeds.count - 1].1.append(change)
            } else {
                feeds.append((change.scope, [change]))
            }
        }
        var deliveries: [NewWebhookDelivery] = []
        for subscription in subscriptions {
            for (scope, feedChanges) in feeds {
                let wanted = feedChanges.filter(subscription.wants)
                guard let first = wanted.first, let last = wanted.last else { continue }
                deliveries.append(
                    NewWebhookDelivery(
                        subscriptionID: subscription.id, scope: scope, firstSequence: first.sequence, lastSequence: last.sequence,
                        changeCount: wanted.count, body: body(scope: scope, changes: wanted, now: now),
                        committedAt: wanted.map(\.committedAt).max() ?? now
                    )
                )
            }
        }
        return deliveries
    }

    static func body(scope: Scope, changes: [AnnouncedChange], now: Int64) -> String {
        var data: [String: JSONValue] = ["changes": .array(changes.map(json))]
        switch scope {
        case .user(let id): data["user_id"] = .string(id)
        case .household(let id): data["household_id"] = .string(id)
        }
        return JSONValue.object([
            "type": "sync.changes",
            "timestamp": .string(Timestamp(millisecondsSinceEpoch: now).rfc3339),
            "data": .object(data),
        ]).serialized()
    }

    static func json(_ change: AnnouncedChange) -> JSONValue {
        var object: [String: JSONValue] = [
            "seq": .int(change.sequence),
            "event": .string(change.event.rawValue),
            "entity_type": .string(change.entityType),
            "entity_id": .string(change.entityID),
            "version": .int(change.version),
            "data": change.data ?? .null,
            "updated_at": .string(Timestamp(millisecondsSinceEpoch: change.updatedAt).rfc3339),
        ]
        if let origin = change.origin { object["origin"] = .string(origin) }
        return .object(object)
    }
}
