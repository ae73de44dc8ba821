import PostgresNIO
package import SyncGateCore
package import SyncGateStorage
package import SyncGateWire

/// Change webhooks: subscriptions, the announcer's messages of new feed ranges and the senders'
/// claims (docs/webhooks.md). All of it runs beside the apply, never in it. The sender's and the
/// announcer's statements take a worker's deadlines (`.job`), not maintenance's 30 minutes: a
/// statement in flight when the database went away can stay unanswered until its deadline, and
/// every message waited behind it.
extension PostgresDriver {
    typealias WebhookColumns = (Int64, String, String, String, String?, String, Int64, Int64?, String?)

    static let webhookColumns = "id, name, url, secret, entity_types, events, created_at, paused_at, paused_reason"

    /// Of a `feeds` row, the last change every subscription has received: below what is not yet
    /// announced and below the feed's oldest undelivered message. Compaction and the tombstone
    /// purge stay at or below it while a subscription exists (read in one snapshot: the announcer
    /// adds messages and raises `webhooked` in one commit).
    static let webhookReceivedBound = """
        least(feeds.webhooked, coalesce((
            SELECT min(d.first_seq) - 1 FROM webhook_deliveries d WHERE d.scope = feeds.scope AND d.delivered_at IS NULL
        ), feeds.webhooked))
        """

    /// A message's range of its feed.
    struct WebhookRange: Hashable {
        var scope: String
        var first: Int64
        var last: Int64
    }

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

    package func announceChanges(after: String?, feedLimit: Int, changeLimit: Int, now: Timestamp) async throws -> WebhookAnnouncement {
        let logger = self.logger
        let at = now.millisecondsSinceEpoch
        let citus = try await isCitus()
        return try await withConnection("announce changes", .job) { connection in
            // Without subscriptions a pass is this one statement, in no transaction of its own:
            // every worker makes one each poll interval, however idle the deployment.
            let subscriptions = try await connection.query("SELECT count(*)::int FROM webhook_subscriptions", logger: logger).collect(Int.self).first ?? 0
            guard subscriptions > 0 else { return WebhookAnnouncement() }
            return try await connection.inTransaction(logger: logger) {
                // One announcer at a time, by a transaction lock. Feeds an apply holds are skipped
                // (announced next pass): waiting for one while holding the rows already updated
                // made every apply of those feeds wait in turn (~0.5 s a pass at saturation).
                let locked = try await connection.query("SELECT pg_try_advisory_xact_lock(\(Self.announcerLockKey))", logger: logger).collect(Bool.self)
                guard locked.first == true else { return WebhookAnnouncement(subscriptions: subscriptions) }
                // The planner cannot know the subscriptions are few (a table too small to be
                // analyzed), and its estimate made PostgreSQL compile the statement with JIT at
                // every pass: ~0.4 s of CPU beside the applies, for a statement that runs in ms.
                try await connection.query("SET LOCAL jit = off", logger: logger)
                if citus {
                    return try await self.citusAnnounce(
                        connection, subscriptions: subscriptions, after: after, feedLimit: feedLimit, changeLimit: changeLimit, at: at
                    )
                }
                // One statement: the rows it locks, the messages and the marks commit together.
                // A range's end read newer than the statement's snapshot has no commit time to
                // read here: the message then counts its lag from now.
                let rows = try await connection.query(
                    """
                    WITH f AS (
                        SELECT scope, webhooked AS low, least(head, webhooked + \(Int64(changeLimit))) AS high, head FROM feeds
                        WHERE head > webhooked AND scope > \(after ?? "") ORDER BY scope LIMIT \(feedLimit)
                        FOR UPDATE SKIP LOCKED
                    ), made AS (
                        INSERT INTO webhook_deliveries (subscription_id, scope, first_seq, last_seq, committed_at, created_at, next_attempt_at)
                        SELECT s.id, f.scope, f.low + 1, f.high,
                               coalesce((SELECT c.committed_at FROM changes c WHERE c.scope = f.scope AND c.seq = f.high), \(at)), \(at), \(at)
                        FROM f CROSS JOIN webhook_subscriptions s
                        RETURNING 1
                    ), marked AS (
                        UPDATE feeds SET webhooked = greatest(feeds.webhooked, f.high) FROM f WHERE feeds.scope = f.scope RETURNING 1
                    )
                    SELECT (SELECT count(*)::int FROM f), (SELECT coalesce(sum(high - low), 0)::int FROM f), (SELECT count(*)::int FROM made),
                           (SELECT count(*)::int FROM marked), (SELECT max(scope) FROM f), (SELECT coalesce(bool_or(high < head), false) FROM f)
                    """,
                    logger: logger
                ).collect((Int, Int, Int, Int, String?, Bool).self)
                guard let (feeds, changes, made, _, last, partial) = rows.first else { return WebhookAnnouncement(subscriptions: subscriptions) }
                return WebhookAnnouncement(
                    subscriptions: subscriptions, feeds: feeds, changes: changes, deliveries: made, lastScope: last,
                    more: feeds == feedLimit || partial
                )
            }
        }
    }

    package func claimWebhookDeliveries(
        limit: Int, perSubscription: Int, excluding: [String], leaseMilliseconds: Int64, now: Timestamp
    ) async throws -> [WebhookDelivery] {
        let logger = self.logger
        let at = now.millisecondsSinceEpoch
        return try await withConnection("claim webhook deliveries", .job) { connection in
            // `due` re-checks the row's state when it locks it: a row another sender claimed since
            // this statement's snapshot is no longer due, so no message is sent twice at once. A
            // claim lost in a crash only makes its message due again: no WAL flush is waited for.
            let claimed = try await connection.query(
                """
                WITH relaxed AS (SELECT \(unescaped: Self.relaxedCommit)), ranked AS (
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
                FROM due, relaxed WHERE d.id = due.id
                RETURNING d.id, d.subscription_id, d.scope, d.first_seq, d.last_seq, d.committed_at, d.created_at, d.attempts
                """,
                logger: logger
            ).collect((Int64, Int64, String, Int64, Int64, Int64, Int64, Int).self)
            guard !claimed.isEmpty else { return [] }
            let subscriptionIDs = Array(Set(claimed.map(\.1)))
            let subscriptions = Dictionary(
                uniqueKeysWithValues: try await connection.query(
                    "SELECT \(unescaped: Self.webhookColumns) FROM webhook_subscriptions WHERE id = ANY(\(subscriptionIDs)::int8[])", logger: logger
                ).collect(WebhookColumns.self).map(Self.webhook).map { ($0.id, $0) }
            )
            // Each range once, however many subscriptions' messages announce it.
            let ranges = Array(Set(claimed.map { WebhookRange(scope: $0.2, first: $0.3, last: $0.4) }))
            let rows = try await connection.query(
                """
                SELECT c.scope, c.seq, c.entity_type, c.entity_id, c.version, c.data::text, c.updated_at, c.committed_at, c.origin
                FROM unnest(\(ranges.map(\.scope))::text[], \(ranges.map(\.first))::int8[], \(ranges.map(\.last))::int8[]) AS r(scope, low, high)
                JOIN changes c ON c.scope = r.scope AND c.seq BETWEEN r.low AND r.high
                """,
                logger: logger
            ).collect((String, Int64, String, String, Int64, String?, Int64, Int64, String?).self)
            // By feed and sequence number: ranges of one feed may overlap (messages made before
            // migration 0013 end at the last change their subscription wanted), and a change two
            // ranges read comes back twice.
            var changes: [String: [Int64: (row: ChangeRow, committed: Int64)]] = [:]
            for (scope, seq, type, id, version, data, updated, committed, origin) in rows {
                changes[scope, default: [:]][seq] = (ChangeRow(sequence: seq, entityType: type, entityID: id, version: version, data: data, updatedAt: updated, origin: origin), committed)
            }
            return claimed.compactMap { id, subscriptionID, scopeKey, first, last, committed, created, attempts -> WebhookDelivery? in
                // A subscription deleted since the claim takes its messages with it.
                guard let subscription = subscriptions[subscriptionID], let scope = Scope(key: scopeKey) else { return nil }
                let inRange = (changes[scopeKey] ?? [:]).filter { (first...last).contains($0.key) }.sorted { $0.key < $1.key }
                return WebhookDelivery(
                    id: id, subscription: subscription, scope: scope, firstSequence: first, lastSequence: last, committedAt: committed,
                    createdAt: created, attempts: attempts, changes: inRange.map { AnnouncedChange(scope: scope, row: $0.value.row, committedAt: $0.value.committed) }
                )
            }.sorted { $0.id < $1.id }
        }
    }

    package func finishWebhookDelivery(id: Int64, outcome: WebhookAttemptOutcome, now: Timestamp) async throws {
        let at = now.millisecondsSinceEpoch
        switch outcome {
        // Neither waits for the WAL flush: a record lost in a crash only sends the message again,
        // the same bytes under the same id (at least once). Each flush cost the applies' commits.
        case .delivered:
            try await execute(
                "finish webhook delivery", .job,
                """
                UPDATE webhook_deliveries SET delivered_at = \(at), last_error = NULL
                FROM (SELECT \(unescaped: Self.relaxedCommit)) relaxed WHERE id = \(id)
                """
            )
        case .retry(let next, let error):
            try await execute(
                "finish webhook delivery", .job,
                """
                UPDATE webhook_deliveries SET next_attempt_at = \(next), last_error = \(error)
                FROM (SELECT \(unescaped: Self.relaxedCommit)) relaxed WHERE id = \(id)
                """
            )
        case .pause(let error):
            try await execute(
                "pause webhook", .job,
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
            "pending webhook deliveries", .job, "SELECT count(*)::int FROM webhook_deliveries WHERE delivered_at IS NULL", as: Int.self
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
