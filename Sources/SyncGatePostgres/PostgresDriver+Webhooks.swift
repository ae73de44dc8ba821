import PostgresNIO
package import SyncGateCore
package import SyncGateStorage
package import SyncGateWire

/// Change webhooks: subscriptions, the announcer's copy of new changes and the senders' claims
/// (docs/webhooks.md). All of it runs beside the apply, never in it.
extension PostgresDriver {
    typealias WebhookColumns = (Int64, String, String, String, String?, String, Int64, Int64?, String?)

    static let webhookColumns = "id, name, url, secret, entity_types, events, created_at, paused_at, paused_reason"

    /// The transaction advisory lock of the one announcer pass at a time.
    static let announcerLockKey: Int64 = 0x5347_5748_4B31  // "SGWHK1"

    static func webhook(_ columns: WebhookColumns) -> WebhookSubscription {
        let (id, name, url, secret, types, events, created, paused, reason) = columns
        return WebhookSubscription(
            id: id, name: name, url: url, secret: secret, entityTypes: WebhookSubscription.parse(storedTypes: types),
            events: WebhookEvent.parse(stored: events), createdAt: Timestamp(millisecondsSinceEpoch: created),
            pausedAt: paused.map(Timestamp.init(millisecondsSinceEpoch:)), pausedReason: reason
        )
    }

    package func insertWebhook(_ subscription: NewWebhookSubscription, now: Timestamp) async throws -> Bool {
        let logger = self.logger
        return try await withConnection("create webhook", .maintenance) { connection in
            try await connection.inTransaction(logger: logger) {
                // One creation at a time: the first one decides where announcing starts.
                try await connection.query("LOCK TABLE webhook_subscriptions IN SHARE ROW EXCLUSIVE MODE", logger: logger)
                let existing = try await connection.query("SELECT count(*)::int FROM webhook_subscriptions", logger: logger).collect(Int.self)
                let inserted = try await connection.query(
                    """
                    INSERT INTO webhook_subscriptions (name, url, secret, entity_types, events, created_at)
                    VALUES (\(subscription.name), \(subscription.url), \(subscription.secret),
                            \(WebhookSubscription.storedTypes(subscription.entityTypes)), \(WebhookEvent.stored(subscription.events)),
                            \(now.millisecondsSinceEpoch))
                    ON CONFLICT (name) DO NOTHING RETURNING id
                    """,
                    logger: logger
                ).collect(Int64.self)
                guard !inserted.isEmpty else { return false }
                if existing.first == 0 {
                    // Nobody heard the feeds until now: announcing starts from their heads.
                    try await connection.query("UPDATE feeds SET webhooked = head WHERE head > webhooked", logger: logger)
                }
                return true
            }
        }
    }

    package func webhooks() async throws -> [WebhookSubscription] {
        try await query(
            "list webhooks", .maintenance, "SELECT \(unescaped: Self.webhookColumns) FROM webhook_subscriptions ORDER BY name", as: WebhookColumns.self
        ).map(Self.webhook)
    }

    package func deleteWebhook(name: String) async throws -> Bool {
        try await !query("delete webhook", .maintenance, "DELETE FROM webhook_subscriptions WHERE name = \(name) RETURNING id", as: Int64.self).isEmpty
    }

    package func setWebhookPaused(name: String, reason: String?, now: Timestamp) async throws -> Bool {
        let at = now.millisecondsSinceEpoch
        let paused: Int64? = reason == nil ? nil : at
        return try await !query(
            reason == nil ? "resume webhook" : "pause webhook", .maintenance,
            """
            WITH s AS (
                UPDATE webhook_subscriptions SET paused_at = \(paused), paused_reason = \(reason) WHERE name = \(name) RETURNING id
            ), due AS (
                UPDATE webhook_deliveries d SET attempts = 0, next_attempt_at = \(at)
                FROM s WHERE \(reason)::text IS NULL AND d.subscription_id = s.id AND d.delivered_at IS NULL
            )
            SELECT id FROM s
            """,
            as: Int64.self
        ).isEmpty
    }

    package func announceChanges(
        after: String?, feedLimit: Int, changeLimit: Int, now: Timestamp, render: @escaping WebhookRenderer
    ) async throws -> WebhookAnnouncement {
        let logger = self.logger
        return try await withConnection("announce changes", .maintenance) { connection in
            try await connection.inTransaction(logger: logger) {
                let subscriptions = try await connection.query(
                    "SELECT \(unescaped: Self.webhookColumns) FROM webhook_subscriptions ORDER BY id", logger: logger
                ).collect(WebhookColumns.self).map(Self.webhook)
                guard !subscriptions.isEmpty else { return WebhookAnnouncement() }
                // One announcer at a time, by a transaction lock rather than row locks: the feeds
                // are read without locking them, so no apply waits while changes are read and
                // deliveries written; only the closing update of `webhooked` takes the feeds'
                // rows, briefly. (Row locks held through the pass raised the push p99 by ~20 ms.)
                let locked = try await connection.query("SELECT pg_try_advisory_xact_lock(\(Self.announcerLockKey))", logger: logger).collect(Bool.self)
                guard locked.first == true else { return WebhookAnnouncement(subscriptions: subscriptions.count) }
                // A head read here covers changes that committed with it: a later statement sees them.
                let feeds = try await connection.query(
                    """
                    SELECT scope, webhooked, least(head, webhooked + \(Int64(changeLimit))), head FROM feeds
                    WHERE head > webhooked AND scope > \(after ?? "") ORDER BY scope LIMIT \(feedLimit)
                    """,
                    logger: logger
                ).collect((String, Int64, Int64, Int64).self)
                guard !feeds.isEmpty else { return WebhookAnnouncement(subscriptions: subscriptions.count) }
                let scopes = feeds.map(\.0)
                let uptos = feeds.map(\.2)
                let rows = try await connection.query(
                    """
                    SELECT c.scope, c.seq, c.entity_type, c.entity_id, c.version, c.data::text, c.updated_at, c.committed_at, c.origin
                    FROM unnest(\(scopes)::text[], \(feeds.map(\.1))::int8[], \(uptos)::int8[]) AS f(scope, low, high)
                    JOIN changes c ON c.scope = f.scope AND c.seq > f.low AND c.seq <= f.high
                    ORDER BY c.scope, c.seq
                    """,
                    logger: logger
                ).collect((String, Int64, String, String, Int64, String?, Int64, Int64, String?).self)
                let changes = rows.compactMap { scope, seq, type, id, version, data, updated, committed, origin -> AnnouncedChange? in
                    guard let scope = Scope(key: scope) else { return nil }
                    return AnnouncedChange(
                        scope: scope,
                        row: ChangeRow(sequence: seq, entityType: type, entityID: id, version: version, data: data, updatedAt: updated, origin: origin),
                        committedAt: committed
                    )
                }
                let at = now.millisecondsSinceEpoch
                let deliveries = render(subscriptions, changes, at)
                if !deliveries.isEmpty {
                    try await connection.query(
                        """
                        INSERT INTO webhook_deliveries
                            (subscription_id, scope, first_seq, last_seq, change_count, body, committed_at, created_at, next_attempt_at)
                        SELECT d.*, \(at)::int8, \(at)::int8
                        FROM unnest(\(deliveries.map(\.subscriptionID))::int8[], \(deliveries.map(\.scope.key))::text[],
                                    \(deliveries.map(\.firstSequence))::int8[], \(deliveries.map(\.lastSequence))::int8[],
                                    \(deliveries.map { Int32($0.changeCount) })::int4[], \(deliveries.map(\.body))::text[],
                                    \(deliveries.map(\.committedAt))::int8[]) AS d
                        """,
                        logger: logger
                    )
                }
                try await connection.query(
                    """
                    UPDATE feeds SET webhooked = greatest(feeds.webhooked, f.high)
                    FROM unnest(\(scopes)::text[], \(uptos)::int8[]) AS f(scope, high)
                    WHERE feeds.scope = f.scope
                    """,
                    logger: logger
                )
                return WebhookAnnouncement(
                    subscriptions: subscriptions.count,
                    feeds: feeds.count, changes: changes.count, deliveries: deliveries.count, lastScope: scopes.last,
                    more: feeds.count == feedLimit || feeds.contains { $0.2 < $0.3 }
                )
            }
        }
    }

    package func claimWebhookDeliveries(
        limit: Int, perSubscription: Int, excluding: [String], leaseMilliseconds: Int64, now: Timestamp
    ) async throws -> [WebhookDelivery] {
        let at = now.millisecondsSinceEpoch
        // `due` re-checks the row's state when it locks it: a row another sender claimed since
        // this statement's snapshot is no longer due, so no delivery is sent twice at once.
        return try await query(
            "claim webhook deliveries", .maintenance,
            """
            WITH ranked AS (
                SELECT d.id, d.next_attempt_at, row_number() OVER (PARTITION BY d.subscription_id ORDER BY d.next_attempt_at, d.id) AS n
                FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
                WHERE d.delivered_at IS NULL AND d.next_attempt_at <= \(at) AND s.paused_at IS NULL
                  AND s.name <> ALL(\(excluding)::text[])
                  AND NOT EXISTS (
                      SELECT 1 FROM webhook_deliveries e
                      WHERE e.subscription_id = d.subscription_id AND e.scope = d.scope AND e.delivered_at IS NULL AND e.id < d.id
                  )
            ), due AS (
                SELECT d.id FROM webhook_deliveries d JOIN ranked r ON r.id = d.id
                WHERE r.n <= \(perSubscription) AND d.delivered_at IS NULL AND d.next_attempt_at <= \(at)
                ORDER BY r.next_attempt_at, r.id LIMIT \(limit)
                FOR UPDATE OF d SKIP LOCKED
            )
            UPDATE webhook_deliveries d SET attempts = d.attempts + 1, next_attempt_at = \(at + leaseMilliseconds)
            FROM due, webhook_subscriptions s
            WHERE d.id = due.id AND s.id = d.subscription_id
            RETURNING d.id, s.name, s.url, s.secret, d.scope, d.change_count, d.body, d.committed_at, d.created_at, d.attempts
            """,
            as: (Int64, String, String, String, String, Int, String, Int64, Int64, Int).self
        ).map { id, name, url, secret, scope, count, body, committed, created, attempts in
            WebhookDelivery(
                id: id, subscriptionName: name, url: url, secret: secret, scope: scope, changeCount: count, body: body,
                committedAt: committed, createdAt: created, attempts: attempts
            )
        }.sorted { $0.id < $1.id }
    }

    package func finishWebhookDelivery(id: Int64, outcome: WebhookAttemptOutcome, now: Timestamp) async throws {
        let at = now.millisecondsSinceEpoch
        switch outcome {
        case .delivered:
            try await execute("finish webhook delivery", .maintenance, "UPDATE webhook_deliveries SET delivered_at = \(at), last_error = NULL WHERE id = \(id)")
        case .retry(let next, let error):
            try await execute(
                "finish webhook delivery", .maintenance, "UPDATE webhook_deliveries SET next_attempt_at = \(next), last_error = \(error) WHERE id = \(id)"
            )
        case .pause(let error):
            try await execute(
                "pause webhook", .maintenance,
                """
                WITH d AS (
                    UPDATE webhook_deliveries SET next_attempt_at = \(at), last_error = \(error) WHERE id = \(id) RETURNING subscription_id
                )
                UPDATE webhook_subscriptions s SET paused_at = \(at), paused_reason = \(error)
                FROM d WHERE s.id = d.subscription_id AND s.paused_at IS NULL
                """
            )
        }
    }

    package func replayWebhook(name: String, from: Timestamp, now: Timestamp) async throws -> Int? {
        let rows = try await query(
            "replay webhook", .maintenance,
            """
            WITH s AS (
                UPDATE webhook_subscriptions SET paused_at = NULL, paused_reason = NULL WHERE name = \(name) RETURNING id
            ), replayed AS (
                UPDATE webhook_deliveries d SET delivered_at = NULL, attempts = 0, next_attempt_at = \(now.millisecondsSinceEpoch)
                FROM s WHERE d.subscription_id = s.id AND (d.created_at >= \(from.millisecondsSinceEpoch) OR d.delivered_at IS NULL)
                RETURNING 1
            )
            SELECT (SELECT count(*)::int FROM replayed) FROM s
            """,
            as: Int.self
        )
        return rows.first
    }

    package func webhookBacklog() async throws -> [WebhookBacklog] {
        try await query(
            "webhook backlog", .maintenance,
            """
            SELECT s.name,
                   count(d.id) FILTER (WHERE d.delivered_at IS NULL)::int,
                   count(d.id) FILTER (WHERE d.delivered_at IS NULL AND d.last_error IS NOT NULL)::int,
                   count(d.id) FILTER (WHERE d.delivered_at IS NOT NULL)::int,
                   min(d.committed_at) FILTER (WHERE d.delivered_at IS NULL)
            FROM webhook_subscriptions s LEFT JOIN webhook_deliveries d ON d.subscription_id = s.id
            GROUP BY s.name ORDER BY s.name
            """,
            as: (String, Int, Int, Int, Int64?).self
        ).map { WebhookBacklog(subscription: $0, pending: $1, failing: $2, delivered: $3, oldestPendingCommittedAt: $4) }
    }

    package func pendingWebhookDeliveries() async throws -> Int {
        try await query(
            "pending webhook deliveries", .maintenance, "SELECT count(*)::int FROM webhook_deliveries WHERE delivered_at IS NULL", as: Int.self
        ).first ?? 0
    }

    package func deleteDeliveredWebhooks(before cutoff: Timestamp, limit: Int) async throws -> Int {
        try await query(
            "delete delivered webhooks", .maintenance,
            """
            WITH gone AS (
                DELETE FROM webhook_deliveries WHERE id IN (
                    SELECT id FROM webhook_deliveries WHERE delivered_at < \(cutoff.millisecondsSinceEpoch) ORDER BY delivered_at LIMIT \(limit)
                ) RETURNING 1
            )
            SELECT count(*)::int FROM gone
            """,
            as: Int.self
        ).first ?? 0
    }
}
