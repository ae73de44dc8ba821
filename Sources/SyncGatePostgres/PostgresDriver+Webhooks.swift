import PostgresNIO
import SyncGateCore
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
                UPDATE webhook_deliveries d SET attempts = 0, next_attempt_at = \(at), claims = d.claims + 1
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
        delivered: [WebhookClaim], limit: Int, perSubscription: Int, excluding: [String], leaseMilliseconds: Int64, now: Timestamp
    ) async throws -> [WebhookDelivery] {
        let rows = try await run(
            "claim webhook deliveries", .job,
            ClaimWebhookDeliveriesStatement(
                delivered: delivered.map(\.id), leases: delivered.map(\.leaseEnd), numbers: delivered.map(\.number), now: now.millisecondsSinceEpoch, excluding: excluding, perSubscription: perSubscription, limit: limit,
                leaseMilliseconds: leaseMilliseconds
            )
        )
        var claimed: [(id: Int64, subscription: WebhookSubscription, scope: String, first: Int64, last: Int64, committed: Int64, created: Int64, attempts: Int, number: Int64)] = []
        // By feed (its key's bytes: NFC and NFD "josé" are two feeds) and sequence number: ranges
        // of one feed may overlap (messages made before migration 0013 end at the last change
        // their subscription wanted).
        var changes: [ExactKey: [Int64: (row: ChangeRow, committed: Int64)]] = [:]
        for row in rows {
            switch row {
            case .delivery(let id, let subscription, let scope, let first, let last, let committed, let created, let attempts, let number):
                claimed.append((id, subscription, scope, first, last, committed, created, attempts, number))
            case .change(let scope, let row, let committed):
                changes[ExactKey(scope), default: [:]][row.sequence] = (row, committed)
            }
        }
        return claimed.compactMap { claim -> WebhookDelivery? in
            guard let scope = Scope(key: claim.scope) else { return nil }
            let inRange = (changes[ExactKey(claim.scope)] ?? [:]).filter { (claim.first...claim.last).contains($0.key) }.sorted { $0.key < $1.key }
            return WebhookDelivery(
                id: claim.id, subscription: claim.subscription, scope: scope, firstSequence: claim.first, lastSequence: claim.last,
                committedAt: claim.committed, createdAt: claim.created, attempts: claim.attempts,
                leaseEnd: now.millisecondsSinceEpoch + leaseMilliseconds, claimNumber: claim.number,
                changes: inRange.map { AnnouncedChange(scope: scope, row: $0.value.row, committedAt: $0.value.committed) }
            )
        }.sorted { $0.id < $1.id }
    }

    package func finishWebhookDelivery(_ claim: WebhookClaim, outcome: WebhookAttemptOutcome, now: Timestamp) async throws {
        let at = now.millisecondsSinceEpoch
        let (id, lease, number) = (claim.id, claim.leaseEnd, claim.number)
        switch outcome {
        // Neither waits for the WAL flush: a record lost in a crash only sends the message again,
        // the same bytes under the same id (at least once). Each flush cost the applies' commits.
        case .delivered:
            // The claim's record of a delivery, claiming nothing.
            _ = try await claimWebhookDeliveries(delivered: [claim], limit: 0, perSubscription: 0, excluding: [], leaseMilliseconds: 0, now: now)
        case .retry(let next, let error):
            try await execute(
                "finish webhook delivery", .job,
                """
                UPDATE webhook_deliveries SET next_attempt_at = \(next), last_error = \(error)
                FROM (SELECT \(unescaped: Self.relaxedCommit)) relaxed
                WHERE id = \(id) AND next_attempt_at = \(lease) AND claims = \(number) AND delivered_at IS NULL
                """
            )
        case .pause(let error):
            try await execute(
                "pause webhook", .job,
                """
                WITH d AS (
                    UPDATE webhook_deliveries SET next_attempt_at = \(at), last_error = \(error)
                    WHERE id = \(id) AND next_attempt_at = \(lease) AND claims = \(number) AND delivered_at IS NULL RETURNING subscription_id
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
                UPDATE webhook_deliveries d SET delivered_at = NULL, attempts = 0, next_attempt_at = \(now.millisecondsSinceEpoch), claims = d.claims + 1
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

/// A sender's claim (``PostgresDriver/claimWebhookDeliveries(delivered:limit:perSubscription:excluding:leaseMilliseconds:now:)``)
/// in one round trip: it records the messages the sender delivered since its last claim (each
/// only while it still holds the lease it was claimed with: a resume or replay since then sends
/// it again), takes the next due ones, and reads their subscriptions and the changes of their
/// ranges (each range once, however many subscriptions' messages announce it). The claim's
/// checks leave out the messages it recorded, which its snapshot still sees as undelivered: the
/// next message of their feed is due at once. `due` re-checks a row's state when it locks it: a row another sender
/// claimed since the snapshot is no longer due, so no message is sent twice at once. Neither the
/// records nor the claim wait for the WAL flush: one lost in a crash only sends a message again,
/// the same bytes under the same id (at least once).
struct ClaimWebhookDeliveriesStatement: PostgresPreparedStatement {
    static let name = "sg_claim_webhook_deliveries"
    static let sql = """
        WITH relaxed AS (SELECT \(PostgresDriver.relaxedCommit)), recorded AS (
            UPDATE webhook_deliveries d SET delivered_at = $2::bigint, last_error = NULL
            FROM relaxed, unnest($1::bigint[], $7::bigint[], $8::bigint[]) AS a(id, lease, claim)
            WHERE d.id = a.id AND d.next_attempt_at = a.lease AND d.claims = a.claim AND d.delivered_at IS NULL
            RETURNING d.id
        ), ranked AS (
            SELECT d.id, d.next_attempt_at, row_number() OVER (PARTITION BY d.subscription_id ORDER BY d.next_attempt_at, d.id) AS n
            FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
            WHERE d.delivered_at IS NULL AND d.next_attempt_at <= $2::bigint AND s.paused_at IS NULL
              AND s.name <> ALL($3::text[]) AND d.id <> ALL(ARRAY(SELECT id FROM recorded))
              AND NOT EXISTS (
                  SELECT 1 FROM webhook_deliveries e
                  WHERE e.subscription_id = d.subscription_id AND e.scope = d.scope AND e.delivered_at IS NULL AND e.id < d.id
                    AND e.id <> ALL(ARRAY(SELECT id FROM recorded))
              )
        ), due AS (
            SELECT d.id FROM webhook_deliveries d JOIN ranked r ON r.id = d.id
            WHERE r.n <= $4::bigint AND d.delivered_at IS NULL AND d.next_attempt_at <= $2::bigint
            ORDER BY r.next_attempt_at, r.id LIMIT $5::bigint
            FOR UPDATE OF d SKIP LOCKED
        ), claimed AS (
            UPDATE webhook_deliveries d SET attempts = d.attempts + 1, next_attempt_at = $6::bigint, claims = d.claims + 1
            FROM due, relaxed WHERE d.id = due.id
            RETURNING d.id, d.subscription_id, d.scope, d.first_seq, d.last_seq, d.committed_at, d.created_at, d.attempts, d.claims
        ), ranges AS (
            SELECT DISTINCT scope, first_seq, last_seq FROM claimed
        )
        SELECT 0, c.id, c.scope, c.first_seq, c.last_seq, c.committed_at, c.created_at, c.attempts,
               s.id, s.name, s.url, s.secret, s.entity_types, s.events, s.created_at, s.paused_at, s.paused_reason,
               NULL::text, NULL::text, NULL::text, NULL::text, c.claims
        FROM claimed c JOIN webhook_subscriptions s ON s.id = c.subscription_id
        UNION ALL
        SELECT 1, NULL, c.scope, c.seq, c.version, c.committed_at, c.updated_at, NULL,
               NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
               c.entity_type, c.entity_id, c.data::text, c.origin, NULL::bigint
        FROM ranges r JOIN changes c ON c.scope = r.scope AND c.seq BETWEEN r.first_seq AND r.last_seq
        """

    enum Row: Sendable {
        /// A message claimed, with its subscription.
        case delivery(
            id: Int64, subscription: WebhookSubscription, scope: String, first: Int64, last: Int64, committed: Int64, created: Int64, attempts: Int,
            number: Int64
        )
        /// A change of a claimed message's range.
        case change(scope: String, row: ChangeRow, committed: Int64)
    }

    var delivered: [Int64]
    /// The lease and the claim number each of `delivered` was claimed with: recorded only while it
    /// still holds both.
    var leases: [Int64]
    var numbers: [Int64]
    var now: Int64
    var excluding: [String]
    var perSubscription: Int
    var limit: Int
    var leaseMilliseconds: Int64

    func makeBindings() throws -> PostgresBindings {
        PostgresBindings(delivered, now, excluding, Int64(perSubscription), Int64(limit), now + leaseMilliseconds, leases, numbers)
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        let cells = row.makeRandomAccess()
        let scope = try cells[2].decode(String.self)
        let (number, version, committed, time) = try (
            cells[3].decode(Int64.self), cells[4].decode(Int64.self), cells[5].decode(Int64.self), cells[6].decode(Int64.self)
        )
        if try cells[0].decode(Int.self) == 1 {
            let row = try ChangeRow(
                sequence: number, entityType: cells[17].decode(String.self), entityID: cells[18].decode(String.self), version: version,
                data: cells[19].decode(String?.self), updatedAt: time, origin: cells[20].decode(String?.self)
            )
            return .change(scope: scope, row: row, committed: committed)
        }
        let subscription = try PostgresDriver.webhook((
            cells[8].decode(Int64.self), cells[9].decode(String.self), cells[10].decode(String.self), cells[11].decode(String.self),
            cells[12].decode(String?.self), cells[13].decode(String.self), cells[14].decode(Int64.self), cells[15].decode(Int64?.self),
            cells[16].decode(String?.self)
        ))
        return try .delivery(
            id: cells[1].decode(Int64.self), subscription: subscription, scope: scope, first: number, last: version, committed: committed,
            created: time, attempts: cells[7].decode(Int.self), number: cells[21].decode(Int64.self)
        )
    }
}
