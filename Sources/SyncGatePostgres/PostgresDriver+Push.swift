import PostgresNIO
package import SyncGateCore
package import SyncGateStorage
package import SyncGateWire

/// Push registrations (docs/push.md): a device's address for silent nudges. The nudger's
/// statements commit without waiting for the WAL flush: one lost in a crash only marks, takes or
/// sends a nudge again (a nudge is a hint; the app syncs once more).
extension PostgresDriver {
    typealias PushRegistrationColumns = (String, String, String?, String?, Int64, Int64)

    /// Stores the address, and gives the feeds the device reads a position (at their heads) if
    /// they have none: the device is nudged for changes after it registered.
    package func upsertPushRegistration(_ device: DeviceKey, _ registration: PushRegistration, now: Timestamp) async throws {
        let at = now.millisecondsSinceEpoch
        let citus = try await isCitus()
        let logger = self.logger
        try await withConnection("register push", .request) { connection in
            try await connection.inTransaction(logger: logger) {
                _ = try await connection.query(
                    """
                    WITH registered AS (
                        INSERT INTO push_registrations (user_id, device_id, provider, token, topic, environment, created_at, updated_at)
                        VALUES (\(device.userID), \(device.deviceID), \(registration.provider.rawValue), \(registration.token), \(registration.topic),
                                \(registration.environment?.rawValue), \(at), \(at))
                        ON CONFLICT (user_id, device_id) DO UPDATE SET provider = excluded.provider, token = excluded.token, topic = excluded.topic,
                            environment = excluded.environment, updated_at = excluded.updated_at, attempts = 0, last_error = NULL
                        RETURNING user_id
                    ), moved AS (
                        -- A token is one app on one device: signed in as another user (or re-installed
                        -- under another device id), its earlier registration must not get that user's nudges.
                        DELETE FROM push_registrations
                        WHERE provider = \(registration.provider.rawValue) AND token = \(registration.token)
                          AND (user_id, device_id) <> (\(device.userID)::text, \(device.deviceID)::text)
                        RETURNING 1
                    )\(unescaped: citus ? "" : ", tracked AS (\(Self.trackFeeds(of: "SELECT user_id FROM registered")))")
                    SELECT (SELECT count(*)::int FROM registered) + (SELECT count(*)::int FROM moved)
                    """,
                    logger: logger
                ).collect(Int.self)
                // On Citus the positions (distributed) are written apart from the registration.
                if citus { _ = try await self.citusTrackPushFeeds(connection, userID: device.userID) }
            }
        }
    }

    /// Inserts a position, at its feed's head, for each feed that the users `users` returns
    /// (a statement) read and that has none: their own feeds and their households'.
    static func trackFeeds(of users: String) -> String {
        """
        INSERT INTO push_positions (scope, nudged)
        SELECT s.scope, coalesce(f.head, 0) FROM (
            SELECT 'u:' || u.user_id AS scope FROM (\(users)) u
            UNION SELECT 'h:' || m.household_id FROM (\(users)) u JOIN household_members m ON m.user_id = u.user_id
        ) s LEFT JOIN feeds f ON f.scope = s.scope
        ON CONFLICT (scope) DO NOTHING
        RETURNING 1
        """
    }

    package func pushRegistration(_ device: DeviceKey) async throws -> StoredPushRegistration? {
        try await query(
            "read push registration", .request,
            """
            SELECT provider, token, topic, environment, created_at, updated_at FROM push_registrations
            WHERE user_id = \(device.userID) AND device_id = \(device.deviceID)
            """,
            as: PushRegistrationColumns.self
        ).first.flatMap { provider, token, topic, environment, created, updated in
            StoredPushRegistration.registration(provider: provider, token: token, topic: topic, environment: environment).map {
                StoredPushRegistration(
                    device: device, registration: $0, createdAt: Timestamp(millisecondsSinceEpoch: created), updatedAt: Timestamp(millisecondsSinceEpoch: updated)
                )
            }
        }
    }

    package func deletePushRegistration(_ device: DeviceKey) async throws -> Bool {
        try await !query(
            "unregister push", .request,
            "DELETE FROM push_registrations WHERE user_id = \(device.userID) AND device_id = \(device.deviceID) RETURNING 1",
            as: Int.self
        ).isEmpty
    }

    package func trackPushFeeds() async throws -> Int {
        if try await isCitus() {
            return try await withConnection("track push feeds", .job) { try await self.citusTrackPushFeeds($0, userID: nil) }
        }
        return try await query(
            "track push feeds", .job,
            "WITH tracked AS (\(unescaped: Self.trackFeeds(of: "SELECT DISTINCT user_id FROM push_registrations"))) SELECT count(*)::int FROM tracked",
            as: Int.self
        ).first ?? 0
    }

    /// Of a mark pass: the registered devices that read the feeds of `taken` (scope), less those
    /// that have the feed pending already with no nudge out (they gain nothing: at saturation
    /// that is nearly every device, and its range is not read).
    static let nudgeReaders = """
        all_readers AS (
            SELECT t.scope, r.user_id, r.device_id, r.pending_scopes, r.leased_until FROM taken t
            -- By the key's parts, so the joins use the registrations' and members' keys.
            JOIN push_registrations r ON left(t.scope, 2) = 'u:' AND r.user_id = substr(t.scope, 3)
            UNION ALL
            SELECT t.scope, r.user_id, r.device_id, r.pending_scopes, r.leased_until FROM taken t
            JOIN household_members m ON left(t.scope, 2) = 'h:' AND m.household_id = substr(t.scope, 3)
            JOIN push_registrations r ON r.user_id = m.user_id
        ), readers AS (
            SELECT scope, user_id, device_id FROM all_readers
            WHERE pending_scopes IS NULL OR NOT pending_scopes @> ARRAY[scope] OR leased_until IS NOT NULL
        )
        """

    /// Of a mark pass: adds the feeds of `targets` (user_id, device_id, scopes, since) to their
    /// devices' pending sets, due a coalescing interval after the last nudge; `pending` counts them.
    static func nudgePending(at: String, intervalMilliseconds: String) -> String {
        """
        locked AS (
            -- In key order: two nudgers' passes over different feeds share devices (a
            -- household's and its members' own), and locking in plan order could deadlock.
            SELECT r.user_id, r.device_id FROM push_registrations r JOIN targets t USING (user_id, device_id)
            ORDER BY r.user_id, r.device_id
            FOR UPDATE OF r
        ), pending AS (
            UPDATE push_registrations r SET
                pending_scopes = ARRAY(SELECT DISTINCT s FROM unnest(coalesce(r.pending_scopes, '{}') || t.scopes) AS s ORDER BY s),
                pending_version = r.pending_version + 1,
                pending_since = least(r.pending_since, coalesce(t.since, \(at))),
                due_at = coalesce(r.due_at, greatest(\(at), greatest(coalesce(r.last_attempt_at, 0), coalesce(r.last_sent_at, 0)) + \(intervalMilliseconds)))
            FROM targets t JOIN locked l USING (user_id, device_id) WHERE r.user_id = t.user_id AND r.device_id = t.device_id
              -- A device that waits out its interval with these feeds pending already is not
              -- rewritten at every pass; one whose nudge is out is (its version tells the send).
              AND (r.pending_scopes IS NULL OR NOT r.pending_scopes @> t.scopes OR r.leased_until IS NOT NULL)
            RETURNING 1
        )
        """
    }

    package func markNudges(scopes: [Scope]?, feedLimit: Int, intervalMilliseconds: Int64, now: Timestamp) async throws -> NudgePass {
        let at = now.millisecondsSinceEpoch
        let keys = scopes?.map(\.key)
        if try await isCitus() {
            return try await citusMarkNudges(keys: keys, feedLimit: feedLimit, intervalMilliseconds: intervalMilliseconds, at: at)
        }
        let rows: [(Int, Int, Bool)]
        if let keys {
            rows = try await run(
                "mark nudges", .job,
                MarkNudgesStatement<NotifiedFeeds>(keys: keys, feedLimit: feedLimit, at: at, intervalMilliseconds: intervalMilliseconds)
            )
        } else {
            rows = try await run(
                "mark nudges", .job,
                MarkNudgesStatement<TrackedFeeds>(keys: [], feedLimit: feedLimit, at: at, intervalMilliseconds: intervalMilliseconds)
            )
        }
        guard let (feeds, devices, more) = rows.first else { return NudgePass() }
        return NudgePass(feeds: feeds, devices: devices, more: more)
    }

    package func claimNudges(
        limit: Int, providers: Set<PushRegistration.Provider>, leaseMilliseconds: Int64, recheckMilliseconds: Int64, now: Timestamp
    ) async throws -> NudgeClaim {
        let at = now.millisecondsSinceEpoch
        let rows = try await run(
            "claim nudges", .job,
            ClaimNudgesStatement(
                at: at, limit: limit, recheckAt: at + recheckMilliseconds, leasedUntil: at + leaseMilliseconds,
                providers: providers.map(\.rawValue).sorted()
            )
        )
        var claim = NudgeClaim()
        for (user, device, provider, token, topic, environment, scopes, version, attempts, since, held, present) in rows {
            claim.held = held
            claim.present = present
            guard let user, let device, let provider, let token, let version, let attempts,
                let registration = StoredPushRegistration.registration(provider: provider, token: token, topic: topic, environment: environment)
            else { continue }
            claim.nudges.append(
                ClaimedNudge(
                    device: DeviceKey(userID: user, deviceID: device), registration: registration,
                    scopes: (scopes ?? []).compactMap(Scope.init(key:)), version: version, attempts: attempts, pendingSince: since,
                    leasedUntil: at + leaseMilliseconds
                )
            )
        }
        return claim
    }

    package func finishNudge(_ nudge: ClaimedNudge, outcome: NudgeFinish, intervalMilliseconds: Int64, now: Timestamp) async throws {
        let at = now.millisecondsSinceEpoch
        let user = nudge.device.userID, device = nudge.device.deviceID, token = nudge.registration.token, version = nudge.version
        // An attempt is recorded only while its claim still holds the device.
        let lease = nudge.leasedUntil
        let query: PostgresQuery
        switch outcome {
        case .sent, .dropped:
            let error: String? = if case .dropped(let error) = outcome { error } else { nil }
            // One per nudge sent, a household's members' too: prepared (planned at every call,
            // it took longer to plan than to run).
            try await run(
                "finish nudge", .job,
                FinishNudgeStatement(
                    user: user, device: device, token: token, lease: lease, version: version, at: at, sent: error == nil,
                    error: error, intervalMilliseconds: intervalMilliseconds
                )
            )
            return
        case .retry(let due, let error):
            query = """
                WITH relaxed AS (SELECT \(unescaped: Self.relaxedCommit))
                UPDATE push_registrations SET leased_until = NULL, due_at = \(due), last_error = \(error), held_live_at = NULL
                FROM relaxed WHERE user_id = \(user) AND device_id = \(device) AND token = \(token) AND leased_until = \(lease)
                """
        case .unregistered:
            // Only this address: a device that registered a new token meanwhile keeps it.
            query = """
                WITH relaxed AS (SELECT \(unescaped: Self.relaxedCommit))
                DELETE FROM push_registrations USING relaxed WHERE user_id = \(user) AND device_id = \(device) AND token = \(token)
                """
        }
        try await execute("finish nudge", .job, query)
    }

    package func publishPresence(front: String, added: [DeviceKey], removed: [DeviceKey], expiresAt: Timestamp) async throws -> Bool {
        let at = expiresAt.millisecondsSinceEpoch
        return try await query(
            "publish presence", .job,
            """
            WITH prior AS (
                SELECT expires_at FROM push_fronts WHERE front = \(front)
            ), beat AS (
                INSERT INTO push_fronts (front, expires_at) VALUES (\(front), \(at))
                ON CONFLICT (front) DO UPDATE SET expires_at = excluded.expires_at
            ), gone AS (
                DELETE FROM push_presence p USING unnest(\(removed.map(\.userID))::text[], \(removed.map(\.deviceID))::text[]) AS g(u, d)
                WHERE p.front = \(front) AND p.user_id = g.u AND p.device_id = g.d
            ), came AS (
                INSERT INTO push_presence (user_id, device_id, front)
                SELECT u, d, \(front) FROM unnest(\(added.map(\.userID))::text[], \(added.map(\.deviceID))::text[]) AS a(u, d)
                ON CONFLICT DO NOTHING
                RETURNING 1
            )
            -- Whether the front's list was still valid (its rows not swept as a dead front's).
            SELECT coalesce((SELECT expires_at > \(Timestamp.now().millisecondsSinceEpoch) FROM prior), false) FROM (SELECT count(*) FROM came) c
            """,
            as: Bool.self
        ).first ?? false
    }

    package func endPresence(front: String) async throws {
        try await execute(
            "end presence", .job,
            "WITH gone AS (DELETE FROM push_presence WHERE front = \(front)) DELETE FROM push_fronts WHERE front = \(front)"
        )
    }

    package func deleteExpiredPresence(now: Timestamp) async throws -> Int {
        try await query(
            "delete expired presence", .maintenance,
            """
            WITH expired AS (
                DELETE FROM push_fronts WHERE expires_at <= \(now.millisecondsSinceEpoch) RETURNING front
            ), gone AS (
                DELETE FROM push_presence p USING expired e WHERE p.front = e.front RETURNING 1
            )
            SELECT count(*)::int FROM gone
            """,
            as: Int.self
        ).first ?? 0
    }

    package func nudgeBacklog() async throws -> (pending: Int, oldestPendingSince: Int64?) {
        try await query(
            "nudge backlog", .maintenance,
            "SELECT count(*)::int, min(pending_since) FROM push_registrations WHERE due_at IS NOT NULL",
            as: (Int, Int64?).self
        ).first ?? (0, nil)
    }
}

/// Which feeds a mark pass looks at: those notified as advanced, or every tracked one (a sweep,
/// or after missed notifications). Two statements, so that each has a plan of its own.
protocol MarkedFeeds {
    static var name: String { get }
    /// Of `push_positions p`; `$1` is the notified feeds' keys.
    static var filter: String { get }
}

enum NotifiedFeeds: MarkedFeeds {
    static let name = "sg_mark_nudges"
    static let filter = "p.scope = ANY($1::text[])"
}

enum TrackedFeeds: MarkedFeeds {
    static let name = "sg_mark_all_nudges"
    static let filter = "cardinality($1::text[]) = 0"
}

/// The nudger's mark pass (docs/push.md): takes the advanced feeds of `Feeds` that no other pass
/// holds, adds them to the pending set of each registered device that reads them (unless the
/// device itself wrote every change of the range), and moves the feeds' marks. Prepared: planned
/// anew at every pass, it cost more to plan than to run.
struct MarkNudgesStatement<Feeds: MarkedFeeds>: PostgresPreparedStatement {
    static var name: String { Feeds.name }
    static var sql: String {
        """
        WITH relaxed AS (SELECT \(PostgresDriver.relaxedCommit)), f AS (
            SELECT p.scope, p.nudged AS low, fe.head AS high FROM push_positions p JOIN feeds fe ON fe.scope = p.scope
            WHERE \(Feeds.filter) AND fe.head > p.nudged
            ORDER BY p.scope LIMIT $2::bigint + 1
            FOR UPDATE OF p SKIP LOCKED
        ), taken AS (
            SELECT * FROM f ORDER BY scope LIMIT $2::bigint
        ), \(PostgresDriver.nudgeReaders), writers AS (
            -- Only the ranges some device needs: each change's writer and commit time, read
            -- by the key's range per feed (a join let the planner scan every change).
            SELECT t.scope, c.w, c.since FROM taken t
            CROSS JOIN LATERAL (
                SELECT array_agg(DISTINCT coalesce(c.writer, '')) AS w, min(c.committed_at) AS since
                FROM changes c WHERE c.scope = t.scope AND c.seq > t.low AND c.seq <= t.high
            ) c
            WHERE t.scope IN (SELECT scope FROM readers)
        ), targets AS (
            SELECT rd.user_id, rd.device_id, array_agg(DISTINCT rd.scope) AS scopes, min(w.since) AS since
            FROM readers rd LEFT JOIN writers w ON w.scope = rd.scope
            -- A range of changes compacted away since has no writers left: nudge.
            WHERE w.w IS NULL OR w.w <> ARRAY[rd.device_id || '/' || rd.user_id]
            GROUP BY rd.user_id, rd.device_id
        ), \(PostgresDriver.nudgePending(at: "$3::bigint", intervalMilliseconds: "$4::bigint")), moved AS (
            UPDATE push_positions p SET nudged = t.high FROM taken t, relaxed WHERE p.scope = t.scope RETURNING 1
        )
        SELECT (SELECT count(*)::int FROM moved), (SELECT count(*)::int FROM pending), (SELECT count(*)::int FROM f) > $2::bigint
        """
    }
    typealias Row = (Int, Int, Bool)

    var keys: [String]
    var feedLimit: Int
    var at: Int64
    var intervalMilliseconds: Int64

    func makeBindings() throws -> PostgresBindings { PostgresBindings(keys, Int64(feedLimit), at, intervalMilliseconds) }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// Records a nudge sent (or given up, with its error): what was added to the pending set while it
/// was out stays pending, due a coalescing interval after it. Recorded only while the attempt's
/// claim still holds the device.
struct FinishNudgeStatement: PostgresPreparedStatement {
    static let name = "sg_finish_nudge"
    static let sql = """
        WITH relaxed AS (SELECT \(PostgresDriver.relaxedCommit))
        UPDATE push_registrations SET
            last_sent_at = CASE WHEN $7::boolean THEN $6::bigint ELSE last_sent_at END, last_attempt_at = $6::bigint,
            leased_until = NULL, attempts = 0,
            last_error = $8::text, held_live_at = NULL,
            pending_scopes = CASE WHEN pending_version = $5::bigint THEN NULL ELSE pending_scopes END,
            pending_since = CASE WHEN pending_version = $5::bigint THEN NULL ELSE pending_since END,
            due_at = CASE WHEN pending_version = $5::bigint THEN NULL ELSE $6::bigint + $9::bigint END
        FROM relaxed WHERE user_id = $1::text AND device_id = $2::text AND token = $3::text AND leased_until = $4::bigint
        """
    typealias Row = Void

    var user: String
    var device: String
    var token: String
    var lease: Int64
    var version: Int64
    var at: Int64
    var sent: Bool
    var error: String?
    var intervalMilliseconds: Int64

    func makeBindings() throws -> PostgresBindings { PostgresBindings(user, device, token, lease, version, at, sent, error, intervalMilliseconds) }

    func decodeRow(_ row: PostgresRow) throws {}
}

/// Leases the nudges due first: a device with a live connection is held back once (rechecked at
/// `recheckAt`) and dropped if it still has one then. Prepared: the claim loop runs it each time
/// sends end, and planned at every call it took longer to plan than to run.
struct ClaimNudgesStatement: PostgresPreparedStatement {
    static let name = "sg_claim_nudges"
    static let sql = """
        WITH relaxed AS (SELECT \(PostgresDriver.relaxedCommit)), due AS (
            SELECT user_id, device_id, held_live_at FROM push_registrations
            WHERE due_at <= $1::bigint AND (leased_until IS NULL OR leased_until <= $1::bigint) AND provider = ANY($5::text[])
            ORDER BY due_at LIMIT $2::bigint
            FOR UPDATE SKIP LOCKED
        ), present AS (
            SELECT DISTINCT d.user_id, d.device_id, d.held_live_at FROM due d
            JOIN push_presence p ON p.user_id = d.user_id AND p.device_id = d.device_id
            JOIN push_fronts fr ON fr.front = p.front AND fr.expires_at > $1::bigint
        ), held AS (
            UPDATE push_registrations r SET due_at = $3::bigint, held_live_at = $1::bigint
            FROM present p WHERE p.held_live_at IS NULL AND r.user_id = p.user_id AND r.device_id = p.device_id
            RETURNING 1
        ), dropped AS (
            UPDATE push_registrations r SET pending_scopes = NULL, pending_since = NULL, due_at = NULL, attempts = 0, leased_until = NULL,
                held_live_at = NULL
            FROM present p WHERE p.held_live_at IS NOT NULL AND r.user_id = p.user_id AND r.device_id = p.device_id
            RETURNING 1
        ), leased AS (
            UPDATE push_registrations r SET leased_until = $4::bigint, attempts = r.attempts + 1, held_live_at = NULL
            FROM due d
            WHERE r.user_id = d.user_id AND r.device_id = d.device_id
              AND NOT EXISTS (SELECT 1 FROM present p WHERE p.user_id = d.user_id AND p.device_id = d.device_id)
            RETURNING r.user_id, r.device_id, r.provider, r.token, r.topic, r.environment, coalesce(r.pending_scopes, '{}'),
                      r.pending_version, r.attempts, r.pending_since
        )
        SELECT leased.*, (SELECT count(*)::int FROM held), (SELECT count(*)::int FROM dropped) FROM leased, relaxed
        UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, (SELECT count(*)::int FROM held), (SELECT count(*)::int FROM dropped) FROM relaxed
        """
    typealias Row = (String?, String?, String?, String?, String?, String?, [String]?, Int64?, Int?, Int64?, Int, Int)

    var at: Int64
    var limit: Int
    var recheckAt: Int64
    var leasedUntil: Int64
    var providers: [String]

    func makeBindings() throws -> PostgresBindings { PostgresBindings(at, Int64(limit), recheckAt, leasedUntil, providers) }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}
