import GRDB
import SyncGateCore
package import SyncGateStorage
package import SyncGateWire

/// Change webhooks on SQLite: as the PostgreSQL driver, each call one transaction of the one writer.
extension SQLiteDriver {
    static let webhookColumns = "id, name, url, secret, entity_types, events, created_at, paused_at, paused_reason"

    /// Of a `feeds` row, the last change every subscription has received (as PostgreSQL's
    /// ``PostgresDriver/webhookReceivedBound``): compaction and the tombstone purge stay at or
    /// below it while a subscription exists.
    static let webhookReceivedBound = """
        min(feeds.webhooked, coalesce((
            SELECT min(d.first_seq) - 1 FROM webhook_deliveries d WHERE d.scope = feeds.scope AND d.delivered_at IS NULL
        ), feeds.webhooked))
        """

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
                        UPDATE webhook_deliveries SET attempts = 0, next_attempt_at = ?, claims = claims + 1
                        WHERE delivered_at IS NULL AND subscription_id = (SELECT id FROM webhook_subscriptions WHERE name = ?)
                        """,
                    arguments: [at, name]
                )
            }
            return true
        }
    }

    package func announceChanges(after: String?, feedLimit: Int, changeLimit: Int, now: Timestamp) async throws -> WebhookAnnouncement {
        let at = now.millisecondsSinceEpoch
        // Without subscriptions a pass only reads: it does not take the writer each poll interval.
        let any = try await read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM webhook_subscriptions") ?? 0 }
        guard any > 0 else { return WebhookAnnouncement() }
        return try await write { db in
            let subscriptions = try Int.fetchOne(db, sql: "SELECT count(*) FROM webhook_subscriptions") ?? 0
            guard subscriptions > 0 else { return WebhookAnnouncement() }
            let feeds = try Row.fetchAll(
                db,
                sql: "SELECT scope, webhooked, min(head, webhooked + ?), head FROM feeds WHERE head > webhooked AND scope > ? ORDER BY scope LIMIT ?",
                arguments: [Int64(changeLimit), after ?? "", feedLimit]
            ).map { row -> (scope: String, low: Int64, high: Int64, head: Int64) in (row[0], row[1], row[2], row[3]) }
            guard !feeds.isEmpty else { return WebhookAnnouncement(subscriptions: subscriptions) }
            var made = 0
            for feed in feeds {
                try db.execute(
                    sql: """
                        INSERT INTO webhook_deliveries (subscription_id, scope, first_seq, last_seq, committed_at, created_at, next_attempt_at)
                        SELECT s.id, ?, ?, ?, coalesce((SELECT committed_at FROM changes WHERE scope = ? AND seq = ?), ?), ?, ?
                        FROM webhook_subscriptions s ORDER BY s.id
                        """,
                    arguments: [feed.scope, feed.low + 1, feed.high, feed.scope, feed.high, at, at, at]
                )
                made += db.changesCount
                try db.execute(sql: "UPDATE feeds SET webhooked = ? WHERE scope = ?", arguments: [feed.high, feed.scope])
            }
            return WebhookAnnouncement(
                subscriptions: subscriptions,
                feeds: feeds.count, changes: Int(feeds.reduce(0) { $0 + $1.high - $1.low }), deliveries: made, lastScope: feeds.last?.scope,
                more: feeds.count == feedLimit || feeds.contains { $0.high < $0.head }
            )
        }
    }

    package func claimWebhookDeliveries(
        delivered: [WebhookClaim], limit: Int, perSubscription: Int, excluding: [String], leaseMilliseconds: Int64, now: Timestamp
    ) async throws -> [WebhookDelivery] {
        let at = now.millisecondsSinceEpoch
        let excludedNames = excluding.isEmpty ? "" : "AND s.name NOT IN (\(excluding.map { _ in "?" }.joined(separator: ", ")))"
        return try await write { db in
            for claim in delivered { try Self.recordDelivered(db, claim, at: at) }
            guard limit > 0 else { return [] }
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT id, subscription_id, scope, first_seq, last_seq, committed_at, created_at, attempts, claims FROM (
                        SELECT d.id, d.subscription_id, d.scope, d.first_seq, d.last_seq, d.committed_at, d.created_at, d.attempts, d.claims,
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
            var subscriptions: [Int64: WebhookSubscription] = [:]
            return try rows.compactMap { row -> WebhookDelivery? in
                let (id, subscriptionID, scopeKey, first, last): (Int64, Int64, String, Int64, Int64) = (row[0], row[1], row[2], row[3], row[4])
                try db.execute(
                    sql: "UPDATE webhook_deliveries SET attempts = attempts + 1, next_attempt_at = ?, claims = claims + 1 WHERE id = ?",
                    arguments: [at + leaseMilliseconds, id]
                )
                if subscriptions[subscriptionID] == nil {
                    subscriptions[subscriptionID] = try Row.fetchOne(
                        db, sql: "SELECT \(Self.webhookColumns) FROM webhook_subscriptions WHERE id = ?", arguments: [subscriptionID]
                    ).map(Self.webhook)
                }
                guard let subscription = subscriptions[subscriptionID], let scope = Scope(key: scopeKey) else { return nil }
                let changes = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT seq, entity_type, entity_id, version, data, updated_at, committed_at, origin FROM changes
                        WHERE scope = ? AND seq BETWEEN ? AND ? ORDER BY seq
                        """,
                    arguments: [scopeKey, first, last]
                ).map { change in
                    AnnouncedChange(
                        scope: scope,
                        row: ChangeRow(sequence: change[0], entityType: change[1], entityID: change[2], version: change[3], data: change[4], updatedAt: change[5], origin: change[7]),
                        committedAt: change[6]
                    )
                }
                return WebhookDelivery(
                    id: id, subscription: subscription, scope: scope, firstSequence: first, lastSequence: last, committedAt: row[5],
                    createdAt: row[6], attempts: (row[7] as Int) + 1, leaseEnd: at + leaseMilliseconds, claimNumber: (row[8] as Int64) + 1,
                    changes: changes
                )
            }.sorted { $0.id < $1.id }
        }
    }

    package func finishWebhookDelivery(_ claim: WebhookClaim, outcome: WebhookAttemptOutcome, now: Timestamp) async throws {
        let at = now.millisecondsSinceEpoch
        let id = claim.id
        try await write { db in
            switch outcome {
            case .delivered:
                try Self.recordDelivered(db, claim, at: at)
            case .retry(let next, let error):
                try db.execute(
                    sql: "UPDATE webhook_deliveries SET next_attempt_at = ?, last_error = ? WHERE \(Self.holdsClaim)",
                    arguments: [next, error, id, claim.leaseEnd, claim.number]
                )
            case .pause(let error):
                try db.execute(
                    sql: "UPDATE webhook_deliveries SET next_attempt_at = ?, last_error = ? WHERE \(Self.holdsClaim)",
                    arguments: [at, error, id, claim.leaseEnd, claim.number]
                )
                // An attempt a resume or replay overtook pauses nothing.
                guard db.changesCount == 1 else { return }
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

    /// A message that still holds a claim: its id, lease end and number, in that order.
    private static let holdsClaim = "id = ? AND next_attempt_at = ? AND claims = ? AND delivered_at IS NULL"

    /// A delivery answered `2xx`: delivered at `at`, its last error cleared, if it still holds
    /// the claim.
    private static func recordDelivered(_ db: Database, _ claim: WebhookClaim, at: Int64) throws {
        try db.execute(
            sql: "UPDATE webhook_deliveries SET delivered_at = ?, last_error = NULL WHERE \(holdsClaim)",
            arguments: [at, claim.id, claim.leaseEnd, claim.number]
        )
    }

    package func replayWebhook(name: String, from: Timestamp, now: Timestamp) async throws -> Int? {
        try await write { db in
            guard let id = try Int64.fetchOne(db, sql: "SELECT id FROM webhook_subscriptions WHERE name = ?", arguments: [name]) else { return nil }
            try db.execute(sql: "UPDATE webhook_subscriptions SET paused_at = NULL, paused_reason = NULL WHERE id = ?", arguments: [id])
            try db.execute(
                sql: """
                    UPDATE webhook_deliveries SET delivered_at = NULL, attempts = 0, next_attempt_at = ?, claims = claims + 1
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
