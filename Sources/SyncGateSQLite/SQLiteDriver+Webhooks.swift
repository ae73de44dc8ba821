import GRDB
package import SyncGateCore
package import SyncGateStorage
package import SyncGateWire

/// Change webhooks on SQLite: as the PostgreSQL driver, each call one transaction of the one writer.
extension SQLiteDriver {
    static let webhookColumns = "id, name, url, secret, entity_types, events, created_at, paused_at, paused_reason"

    static func webhook(_ row: Row) -> WebhookSubscription {
        WebhookSubscription(
            id: row[0], name: row[1], url: row[2], secret: row[3], entityTypes: WebhookSubscription.parse(storedTypes: row[4]),
            events: WebhookEvent.parse(stored: row[5]), createdAt: Timestamp(millisecondsSinceEpoch: row[6]),
            pausedAt: (row[7] as Int64?).map(Timestamp.init(millisecondsSinceEpoch:)), pausedReason: row[8]
        )
    }

    package func insertWebhook(_ subscription: NewWebhookSubscription, now: Timestamp) async throws -> Bool {
        try await write { db in
            let existing = try Int.fetchOne(db, sql: "SELECT count(*) FROM webhook_subscriptions") ?? 0
            try db.execute(
                sql: """
                    INSERT INTO webhook_subscriptions (name, url, secret, entity_types, events, created_at) VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (name) DO NOTHING
                    """,
                arguments: [
                    subscription.name, subscription.url, subscription.secret, WebhookSubscription.storedTypes(subscription.entityTypes),
                    WebhookEvent.stored(subscription.events), now.millisecondsSinceEpoch,
                ]
            )
            guard db.changesCount == 1 else { return false }
            // Nobody heard the feeds until now: announcing starts from their heads.
            if existing == 0 { try db.execute(sql: "UPDATE feeds SET webhooked = head WHERE head > webhooked") }
            return true
        }
    }

    package func webhooks() async throws -> [WebhookSubscription] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT \(Self.webhookColumns) FROM webhook_subscriptions ORDER BY name").map(Self.webhook)
        }
    }

    package func deleteWebhook(name: String) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM webhook_subscriptions WHERE name = ?", arguments: [name])
            return db.changesCount == 1
        }
    }

    package func setWebhookPaused(name: String, reason: String?, now: Timestamp) async throws -> Bool {
        let at = now.millisecondsSinceEpoch
        return try await write { db in
            try db.execute(
                sql: "UPDATE webhook_subscriptions SET paused_at = ?, paused_reason = ? WHERE name = ?",
                arguments: [reason == nil ? nil : at, reason, name]
            )
            guard db.changesCount == 1 else { return false }
            if reason == nil {
                try db.execute(
                    sql: """
                        UPDATE webhook_deliveries SET attempts = 0, next_attempt_at = ?
                        WHERE delivered_at IS NULL AND subscription_id = (SELECT id FROM webhook_subscriptions WHERE name = ?)
                        """,
                    arguments: [at, name]
                )
            }
            return true
        }
    }

    package func announceChanges(
        after: String?, feedLimit: Int, changeLimit: Int, now: Timestamp, render: @escaping WebhookRenderer
    ) async throws -> WebhookAnnouncement {
        try await write { db in
            let subscriptions = try Row.fetchAll(db, sql: "SELECT \(Self.webhookColumns) FROM webhook_subscriptions ORDER BY id").map(Self.webhook)
            guard !subscriptions.isEmpty else { return WebhookAnnouncement() }
            let feeds = try Row.fetchAll(
                db,
                sql: "SELECT scope, webhooked, min(head, webhooked + ?), head FROM feeds WHERE head > webhooked AND scope > ? ORDER BY scope LIMIT ?",
                arguments: [Int64(changeLimit), after ?? "", feedLimit]
            ).map { row -> (scope: String, low: Int64, high: Int64, head: Int64) in (row[0], row[1], row[2], row[3]) }
            guard !feeds.isEmpty else { return WebhookAnnouncement(subscriptions: subscriptions.count) }
            var changes: [AnnouncedChange] = []
            for feed in feeds {
                guard let scope = Scope(key: feed.scope) else { continue }
                let rows = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT seq, entity_type, entity_id, version, data, updated_at, committed_at, origin FROM changes
                        WHERE scope = ? AND seq > ? AND seq <= ? ORDER BY seq
                        """,
                    arguments: [feed.scope, feed.low, feed.high]
                )
                for row in rows {
                    changes.append(
                        AnnouncedChange(
                            scope: scope,
                            row: ChangeRow(sequence: row[0], entityType: row[1], entityID: row[2], version: row[3], data: row[4], updatedAt: row[5], origin: row[7]),
                            committedAt: row[6]
                        )
                    )
                }
            }
            let at = now.millisecondsSinceEpoch
            let deliveries = render(subscriptions, changes, at)
            for delivery in deliveries {
                try db.execute(
                    sql: """
                        INSERT INTO webhook_deliveries
                            (subscription_id, scope, first_seq, last_seq, change_count, body, committed_at, created_at, next_attempt_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        delivery.subscriptionID, delivery.scope.key, delivery.firstSequence, delivery.lastSequence, delivery.changeCount,
                        delivery.body, delivery.committedAt, at, at,
                    ]
                )
            }
            for feed in feeds {
                try db.execute(sql: "UPDATE feeds SET webhooked = ? WHERE scope = ?", arguments: [feed.high, feed.scope])
            }
            return WebhookAnnouncement(
                subscriptions: subscriptions.count,
                feeds: feeds.count, changes: changes.count, deliveries: deliveries.count, lastScope: feeds.last?.scope,
                more: feeds.count == feedLimit || feeds.contains { $0.high < $0.head }
            )
        }
    }

    package func claimWebhookDeliveries(
        limit: Int, perSubscription: Int, excluding: [String], leaseMilliseconds: Int64, now: Timestamp
    ) async throws -> [WebhookDelivery] {
        let at = now.millisecondsSinceEpoch
        let excludedNames = excluding.isEmpty ? "" : "AND s.name NOT IN (\(excluding.map { _ in "?" }.joined(separator: ", ")))"
        return try await write { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT id, name, url, secret, scope, change_count, body, committed_at, created_at, attempts FROM (
                        SELECT d.id, s.name, s.url, s.secret, d.scope, d.change_count, d.body, d.committed_at, d.created_at, d.attempts,
                               d.next_attempt_at,
                               row_number() OVER (PARTITION BY d.subscription_id ORDER BY d.next_attempt_at, d.id) AS n
                        FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
                        WHERE d.delivered_at IS NULL AND d.next_attempt_at <= ? AND s.paused_at IS NULL \(excludedNames)
                          AND NOT EXISTS (
                              SELECT 1 FROM webhook_deliveries e
                              WHERE e.subscription_id = d.subscription_id AND e.scope = d.scope AND e.delivered_at IS NULL AND e.id < d.id
                          )
                    ) WHERE n <= ? ORDER BY next_attempt_at, id LIMIT ?
                    """,
                arguments: StatementArguments([at] + excluding.map { $0 as any DatabaseValueConvertible } + [perSubscription, limit])
            )
            return try rows.map { row in
                let id: Int64 = row[0]
                try db.execute(
                    sql: "UPDATE webhook_deliveries SET attempts = attempts + 1, next_attempt_at = ? WHERE id = ?", arguments: [at + leaseMilliseconds, id]
                )
                return WebhookDelivery(
                    id: id, subscriptionName: row[1], url: row[2], secret: row[3], scope: row[4], changeCount: row[5], body: row[6],
                    committedAt: row[7], createdAt: row[8], attempts: (row[9] as Int) + 1
                )
            }.sorted { $0.id < $1.id }
        }
    }

    package func finishWebhookDelivery(id: Int64, outcome: WebhookAttemptOutcome, now: Timestamp) async throws {
        let at = now.millisecondsSinceEpoch
        try await write { db in
            switch outcome {
            case .delivered:
                try db.execute(sql: "UPDATE webhook_deliveries SET delivered_at = ?, last_error = NULL WHERE id = ?", arguments: [at, id])
            case .retry(let next, let error):
                try db.execute(sql: "UPDATE webhook_deliveries SET next_attempt_at = ?, last_error = ? WHERE id = ?", arguments: [next, error, id])
            case .pause(let error):
                try db.execute(sql: "UPDATE webhook_deliveries SET next_attempt_at = ?, last_error = ? WHERE id = ?", arguments: [at, error, id])
                try db.execute(
                    sql: """
                        UPDATE webhook_subscriptions SET paused_at = ?, paused_reason = ?
                        WHERE id = (SELECT subscription_id FROM webhook_deliveries WHERE id = ?) AND paused_at IS NULL
                        """,
                    arguments: [at, error, id]
                )
            }
        }
    }

    package func replayWebhook(name: String, from: Timestamp, now: Timestamp) async throws -> Int? {
        try await write { db in
            guard let id = try Int64.fetchOne(db, sql: "SELECT id FROM webhook_subscriptions WHERE name = ?", arguments: [name]) else { return nil }
            try db.execute(sql: "UPDATE webhook_subscriptions SET paused_at = NULL, paused_reason = NULL WHERE id = ?", arguments: [id])
            try db.execute(
                sql: """
                    UPDATE webhook_deliveries SET delivered_at = NULL, attempts = 0, next_attempt_at = ?
                    WHERE subscription_id = ? AND (created_at >= ? OR delivered_at IS NULL)
                    """,
                arguments: [now.millisecondsSinceEpoch, id, from.millisecondsSinceEpoch]
            )
            return db.changesCount
        }
    }

    package func webhookBacklog() async throws -> [WebhookBacklog] {
        try await read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT s.name,
                           count(d.id) FILTER (WHERE d.delivered_at IS NULL),
                           count(d.id) FILTER (WHERE d.delivered_at IS NULL AND d.last_error IS NOT NULL),
                           count(d.id) FILTER (WHERE d.delivered_at IS NOT NULL),
                           min(d.committed_at) FILTER (WHERE d.delivered_at IS NULL)
                    FROM webhook_subscriptions s LEFT JOIN webhook_deliveries d ON d.subscription_id = s.id
                    GROUP BY s.name ORDER BY s.name
                    """
            ).map { WebhookBacklog(subscription: $0[0], pending: $0[1], failing: $0[2], delivered: $0[3], oldestPendingCommittedAt: $0[4]) }
        }
    }

    package func pendingWebhookDeliveries() async throws -> Int {
        try await read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM webhook_deliveries WHERE delivered_at IS NULL") ?? 0 }
    }

    package func deleteDeliveredWebhooks(before cutoff: Timestamp, limit: Int) async throws -> Int {
        try await write { db in
            try db.execute(
                sql: """
                    DELETE FROM webhook_deliveries WHERE id IN (
                        SELECT id FROM webhook_deliveries WHERE delivered_at < ? ORDER BY delivered_at LIMIT ?
                    )
                    """,
                arguments: [cutoff.millisecondsSinceEpoch, limit]
            )
            return db.changesCount
        }
    }
}
