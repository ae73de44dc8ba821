import PostgresNIO
import SyncGateCore
import SyncGateStorage

// What runs beside the apply on a Citus coordinator: the nudger's and the webhook announcer's
// statements, split as the apply's are (PostgresDriver+Citus.swift). Both lock a feed's row to
// mark it, and Citus refuses a `FOR UPDATE` over several shards and a statement that joins the
// coordinator's tables (push_registrations, webhook_deliveries) with distributed ones (feeds,
// push_positions, changes): each feed is locked on its own node, skipped while another holds it,
// and the rest is read and written in one statement per kind of table, in the same transaction.

extension PostgresDriver {
    /// ``trackPushFeeds()`` and a registration's positions on Citus: the feeds the registered
    /// users (or `userID` alone) read, their heads, then the positions the feeds lack.
    func citusTrackPushFeeds(_ connection: PostgresConnection, userID: String?) async throws -> Int {
        let users = userID.map { [$0] }
        let scopes = try await connection.query(
            """
            SELECT 'u:' || r.user_id FROM push_registrations r WHERE \(users)::text[] IS NULL OR r.user_id = ANY(\(users)::text[])
            UNION SELECT 'h:' || m.household_id FROM push_registrations r JOIN household_members m ON m.user_id = r.user_id
            WHERE \(users)::text[] IS NULL OR r.user_id = ANY(\(users)::text[])
            """,
            logger: logger
        ).collect(String.self)
        guard !scopes.isEmpty else { return 0 }
        var heads = Dictionary(uniqueKeysWithValues: scopes.map { ($0, Int64(0)) })
        for (scope, head) in try await connection.query("SELECT scope, head FROM feeds WHERE scope = ANY(\(scopes)::text[])", logger: logger)
            .collect((String, Int64).self)
        {
            heads[scope] = head
        }
        let keys = heads.keys.sorted()
        return try await connection.query(
            """
            INSERT INTO push_positions (scope, nudged) SELECT s, n FROM unnest(\(keys)::text[], \(keys.map { heads[$0] ?? 0 })::bigint[]) AS p(s, n)
            ON CONFLICT (scope) DO NOTHING RETURNING 1
            """,
            logger: logger
        ).collect(Int.self).count
    }

    /// ``markNudges(scopes:feedLimit:intervalMilliseconds:now:)`` on Citus, by the same rules:
    /// the feeds behind their positions, each locked on its node; their readers (coordinator and
    /// reference tables); who wrote the ranges some reader needs (the feeds' nodes); the pending
    /// sets (coordinator); the positions moved (the feeds' nodes).
    func citusMarkNudges(keys: [String]?, feedLimit: Int, intervalMilliseconds: Int64, at: Int64) async throws -> NudgePass {
        let logger = self.logger
        return try await withConnection("mark nudges", .job) { connection in
            try await connection.inTransaction(logger: logger) {
                try await connection.query("SET LOCAL synchronous_commit = off", logger: logger)
                var taken: [(scope: String, low: Int64, high: Int64)] = []
                var more = false
                var from = ""
                pages: while true {
                    let page = try await connection.query(
                        """
                        SELECT p.scope FROM push_positions p JOIN feeds fe ON fe.scope = p.scope
                        WHERE (\(keys)::text[] IS NULL OR p.scope = ANY(\(keys)::text[])) AND fe.head > p.nudged AND p.scope > \(from)
                        ORDER BY p.scope LIMIT \(Int64(feedLimit) + 1)
                        """,
                        logger: logger
                    ).collect(String.self)
                    for scope in page {
                        guard taken.count < feedLimit else {
                            more = true
                            break pages
                        }
                        let locked = try await connection.query(
                            """
                            SELECT p.nudged, fe.head FROM push_positions p JOIN feeds fe ON fe.scope = p.scope
                            WHERE p.scope = \(scope) AND fe.scope = \(scope) AND fe.head > p.nudged
                            FOR UPDATE OF p SKIP LOCKED
                            """,
                            logger: logger
                        ).collect((Int64, Int64).self)
                        if let (low, high) = locked.first { taken.append((scope, low, high)) }
                    }
                    guard page.count > feedLimit, let last = page.last else { break }
                    from = last
                }
                guard !taken.isEmpty else { return NudgePass() }
                let scopes = taken.map(\.scope)
                let readers = try await connection.query(
                    "WITH taken AS (SELECT unnest(\(scopes)::text[]) AS scope), \(unescaped: Self.nudgeReaders) SELECT scope, user_id, device_id FROM readers",
                    logger: logger
                ).collect((String, String, String).self)
                // Of each range some device reads: its one writer ('' when there are several or
                // none is a device) and the commit time of its oldest change.
                let needed = Set(readers.map(\.0))
                let ranges = taken.filter { needed.contains($0.scope) }
                let writers =
                    ranges.isEmpty
                    ? []
                    : try await connection.query(
                        """
                        SELECT c.scope, CASE WHEN count(DISTINCT coalesce(c.writer, '')) = 1 THEN min(coalesce(c.writer, '')) ELSE '' END, min(c.committed_at)
                        FROM changes c JOIN unnest(\(ranges.map(\.scope))::text[], \(ranges.map(\.low))::bigint[], \(ranges.map(\.high))::bigint[]) AS t(scope, low, high)
                          ON c.scope = t.scope AND c.seq > t.low AND c.seq <= t.high
                        GROUP BY c.scope
                        """,
                        logger: logger
                    ).collect((String, String, Int64).self)
                let devices =
                    readers.isEmpty
                    ? 0
                    : try await connection.query(
                        """
                        WITH readers AS (
                            SELECT * FROM unnest(\(readers.map(\.0))::text[], \(readers.map(\.1))::text[], \(readers.map(\.2))::text[]) AS r(scope, user_id, device_id)
                        ), writers AS (
                            SELECT * FROM unnest(\(writers.map(\.0))::text[], \(writers.map(\.1))::text[], \(writers.map(\.2))::bigint[]) AS w(scope, sole, since)
                        ), targets AS (
                            SELECT rd.user_id, rd.device_id, array_agg(DISTINCT rd.scope) AS scopes, min(w.since) AS since
                            FROM readers rd LEFT JOIN writers w ON w.scope = rd.scope
                            -- A range of changes compacted away since has no writers left: nudge.
                            WHERE w.sole IS DISTINCT FROM rd.device_id || '/' || rd.user_id
                            GROUP BY rd.user_id, rd.device_id
                        ), \(unescaped: Self.nudgePending(at: "\(at)", intervalMilliseconds: "\(intervalMilliseconds)"))
                        SELECT count(*)::int FROM pending
                        """,
                        logger: logger
                    ).collect(Int.self).first ?? 0
                let moved = try await connection.query(
                    """
                    UPDATE push_positions p SET nudged = t.high FROM unnest(\(scopes)::text[], \(taken.map(\.high))::bigint[]) AS t(scope, high)
                    WHERE p.scope = t.scope RETURNING 1
                    """,
                    logger: logger
                ).collect(Int.self).count
                return NudgePass(feeds: moved, devices: devices, more: more)
            }
        }
    }

    /// The statement of ``announceChanges(after:feedLimit:changeLimit:now:)`` on Citus, in its
    /// transaction (the announcer's lock held): the feeds with changes not yet announced, each
    /// locked on its node; the commit time of each range's end; the messages (coordinator); the
    /// marks (the feeds' nodes).
    func citusAnnounce(
        _ connection: PostgresConnection, subscriptions: Int, after: String?, feedLimit: Int, changeLimit: Int, at: Int64
    ) async throws -> WebhookAnnouncement {
        var taken: [(scope: String, low: Int64, high: Int64, head: Int64)] = []
        var from = after ?? ""
        while taken.count < feedLimit {
            let page = try await connection.query(
                "SELECT scope FROM feeds WHERE head > webhooked AND scope > \(from) ORDER BY scope LIMIT \(Int64(feedLimit))", logger: logger
            ).collect(String.self)
            for scope in page where taken.count < feedLimit {
                let locked = try await connection.query(
                    """
                    SELECT webhooked, least(head, webhooked + \(Int64(changeLimit))), head FROM feeds
                    WHERE scope = \(scope) AND head > webhooked FOR UPDATE SKIP LOCKED
                    """,
                    logger: logger
                ).collect((Int64, Int64, Int64).self)
                if let (low, high, head) = locked.first { taken.append((scope, low, high, head)) }
            }
            guard page.count == feedLimit, let last = page.last else { break }
            from = last
        }
        guard let last = taken.last?.scope else { return WebhookAnnouncement(subscriptions: subscriptions) }
        let scopes = taken.map(\.scope), highs = taken.map(\.high)
        var committed: [String: Int64] = [:]
        for (scope, time) in try await connection.query(
            """
            SELECT c.scope, c.committed_at FROM changes c JOIN unnest(\(scopes)::text[], \(highs)::bigint[]) AS t(scope, seq)
              ON c.scope = t.scope AND c.seq = t.seq
            """,
            logger: logger
        ).collect((String, Int64).self) {
            committed[scope] = time
        }
        // A range's end not read (as on PostgreSQL): the message counts its lag from now.
        let made = try await connection.query(
            """
            INSERT INTO webhook_deliveries (subscription_id, scope, first_seq, last_seq, committed_at, created_at, next_attempt_at)
            SELECT s.id, t.scope, t.low + 1, t.high, t.committed, \(at), \(at)
            FROM unnest(\(scopes)::text[], \(taken.map(\.low))::bigint[], \(highs)::bigint[], \(scopes.map { committed[$0] ?? at })::bigint[])
                 AS t(scope, low, high, committed)
            CROSS JOIN webhook_subscriptions s
            RETURNING 1
            """,
            logger: logger
        ).collect(Int.self).count
        try await connection.query(
            """
            UPDATE feeds SET webhooked = greatest(feeds.webhooked, t.high) FROM unnest(\(scopes)::text[], \(highs)::bigint[]) AS t(scope, high)
            WHERE feeds.scope = t.scope
            """,
            logger: logger
        )
        return WebhookAnnouncement(
            subscriptions: subscriptions, feeds: taken.count, changes: Int(taken.reduce(0) { $0 + $1.high - $1.low }), deliveries: made,
            lastScope: last, more: taken.count == feedLimit || taken.contains { $0.high < $0.head }
        )
    }
}
