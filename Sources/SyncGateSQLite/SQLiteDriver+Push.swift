import GRDB
package import SyncGateCore
package import SyncGateStorage
package import SyncGateWire

/// Push registrations (docs/push.md): a device's address for silent nudges.
extension SQLiteDriver {
    package func upsertPushRegistration(_ device: DeviceKey, _ registration: PushRegistration, now: Timestamp) async throws {
        let at = now.millisecondsSinceEpoch
        try await write { db in
            try db.execute(
                sql: """
                    INSERT INTO push_registrations (user_id, device_id, provider, token, topic, environment, created_at, updated_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (user_id, device_id) DO UPDATE SET provider = excluded.provider, token = excluded.token, topic = excluded.topic,
                        environment = excluded.environment, updated_at = excluded.updated_at, attempts = 0, last_error = NULL
                    """,
                arguments: [
                    device.userID, device.deviceID, registration.provider.rawValue, registration.token, registration.topic,
                    registration.environment?.rawValue, at, at,
                ]
            )
            // A token is one app on one device: its registration under another user or device goes.
            try db.execute(
                sql: "DELETE FROM push_registrations WHERE provider = ? AND token = ? AND NOT (user_id = ? AND device_id = ?)",
                arguments: [registration.provider.rawValue, registration.token, device.userID, device.deviceID]
            )
            // The feeds it reads get a position at their heads: it is nudged for what comes after.
            try Self.track(db, readersOf: "SELECT ? AS user_id", arguments: [device.userID])
        }
    }

    package func pushRegistration(_ device: DeviceKey) async throws -> StoredPushRegistration? {
        try await read { db in
            try Row.fetchOne(
                db,
                sql: "SELECT provider, token, topic, environment, created_at, updated_at FROM push_registrations WHERE user_id = ? AND device_id = ?",
                arguments: [device.userID, device.deviceID]
            ).flatMap { row in
                StoredPushRegistration.registration(provider: row[0], token: row[1], topic: row[2], environment: row[3]).map {
                    StoredPushRegistration(
                        device: device, registration: $0, createdAt: Timestamp(millisecondsSinceEpoch: row[4]), updatedAt: Timestamp(millisecondsSinceEpoch: row[5])
                    )
                }
            }
        }
    }

    package func deletePushRegistration(_ device: DeviceKey) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM push_registrations WHERE user_id = ? AND device_id = ?", arguments: [device.userID, device.deviceID])
            return db.changesCount == 1
        }
    }

    /// The stored pending set (a JSON array of scope keys; `NULL`: none).
    static func pendingScopes(_ text: String?) -> [String] {
        text.flatMap { try? JSONParser().parse($0).arrayValue }?.compactMap(\.stringValue) ?? []
    }

    /// Positions, at their heads, for the feeds the users of `users` (a query of `user_id`s) read.
    @discardableResult
    static func track(_ db: Database, readersOf users: String, arguments: StatementArguments = []) throws -> Int {
        try db.execute(
            sql: """
                INSERT INTO push_positions (scope, nudged)
                SELECT s.scope, coalesce(f.head, 0) FROM (
                    SELECT 'u:' || user_id AS scope FROM (\(users))
                    UNION SELECT 'h:' || m.household_id FROM (\(users)) r JOIN household_members m ON m.user_id = r.user_id
                ) s LEFT JOIN feeds f ON f.scope = s.scope
                WHERE true
                ON CONFLICT (scope) DO NOTHING
                """,
            arguments: arguments + arguments
        )
        return db.changesCount
    }

    package func trackPushFeeds() async throws -> Int {
        try await write { db in try Self.track(db, readersOf: "SELECT DISTINCT user_id FROM push_registrations") }
    }

    package func markNudges(scopes: [Scope]?, feedLimit: Int, intervalMilliseconds: Int64, now: Timestamp) async throws -> NudgePass {
        let at = now.millisecondsSinceEpoch
        return try await write { db in
            let wanted = scopes.map { Set($0.map(\.key)) }
            // SQLite has one writer at a time: no row is held by another pass.
            var ranges: [(scope: String, low: Int64, high: Int64)] = []
            let rows = try Row.fetchCursor(
                db, sql: "SELECT p.scope, p.nudged, f.head FROM push_positions p JOIN feeds f ON f.scope = p.scope WHERE f.head > p.nudged ORDER BY p.scope"
            )
            var more = false
            while let row = try rows.next() {
                let scope: String = row[0]
                guard wanted?.contains(scope) ?? true else { continue }
                guard ranges.count < feedLimit else {
                    more = true
                    break
                }
                ranges.append((scope, row[1], row[2]))
            }
            var targets: [DeviceKey: (scopes: Set<String>, since: Int64?)] = [:]
            for range in ranges {
                let rows: [Row]
                if let scope = Scope(key: range.scope), case .household(let household) = scope {
                    rows = try Row.fetchAll(
                        db,
                        sql: """
                            SELECT r.user_id, r.device_id, r.pending_scopes, r.leased_until FROM household_members m
                            JOIN push_registrations r ON r.user_id = m.user_id WHERE m.household_id = ?
                            """,
                        arguments: [household]
                    )
                } else if let scope = Scope(key: range.scope), case .user(let user) = scope {
                    // By the user's id, so the look-up uses the key.
                    rows = try Row.fetchAll(
                        db, sql: "SELECT user_id, device_id, pending_scopes, leased_until FROM push_registrations WHERE user_id = ?",
                        arguments: [user]
                    )
                } else {
                    continue
                }
                // A device with the feed pending already and no nudge out gains nothing (as PostgreSQL's pass).
                let readers = rows.filter { row in
                    !Self.pendingScopes(row[2]).contains(range.scope) || (row[3] as Int64?) != nil
                }.map { DeviceKey(userID: $0[0], deviceID: $0[1]) }
                guard !readers.isEmpty else { continue }
                let writers = try Row.fetchAll(
                    db, sql: "SELECT DISTINCT coalesce(writer, ''), min(committed_at) OVER () FROM changes WHERE scope = ? AND seq > ? AND seq <= ?",
                    arguments: [range.scope, range.low, range.high]
                )
                let writerKeys = Set(writers.map { $0[0] as String })
                let since: Int64? = writers.first?[1]
                for reader in readers where writerKeys != [PushWriter.key(reader)] {
                    targets[reader, default: ([], nil)].scopes.insert(range.scope)
                    if let since { targets[reader]!.since = min(targets[reader]!.since ?? since, since) }
                }
            }
            var devices = 0
            for (device, target) in targets {
                let stored = try String.fetchOne(
                    db, sql: "SELECT pending_scopes FROM push_registrations WHERE user_id = ? AND device_id = ?", arguments: [device.userID, device.deviceID]
                )
                let pending = Set(Self.pendingScopes(stored))
                let merged = JSONValue.array(pending.union(target.scopes).sorted().map(JSONValue.string)).serialized()
                try db.execute(
                    sql: """
                        UPDATE push_registrations SET pending_scopes = ?, pending_version = pending_version + 1,
                            pending_since = min(coalesce(pending_since, ?), ?),
                            due_at = coalesce(due_at, max(?, max(coalesce(last_attempt_at, 0), coalesce(last_sent_at, 0)) + ?))
                        WHERE user_id = ? AND device_id = ?
                        """,
                    arguments: [merged, target.since ?? at, target.since ?? at, at, intervalMilliseconds, device.userID, device.deviceID]
                )
                devices += 1
            }
            for range in ranges {
                try db.execute(sql: "UPDATE push_positions SET nudged = ? WHERE scope = ?", arguments: [range.high, range.scope])
            }
            return NudgePass(feeds: ranges.count, devices: devices, more: more)
        }
    }

    package func claimNudges(
        limit: Int, providers: Set<PushRegistration.Provider>, leaseMilliseconds: Int64, recheckMilliseconds: Int64, now: Timestamp
    ) async throws -> NudgeClaim {
        let at = now.millisecondsSinceEpoch
        let names = providers.map(\.rawValue).sorted()
        let listed = names.isEmpty ? "NULL" : names.map { _ in "?" }.joined(separator: ", ")
        return try await write { db in
            let due = try Row.fetchAll(
                db,
                sql: """
                    SELECT user_id, device_id, provider, token, topic, environment, pending_scopes, pending_version, attempts, pending_since,
                           EXISTS (SELECT 1 FROM push_presence p JOIN push_fronts fr ON fr.front = p.front AND fr.expires_at > ?
                                   WHERE p.user_id = r.user_id AND p.device_id = r.device_id),
                           held_live_at
                    FROM push_registrations r
                    WHERE due_at <= ? AND (leased_until IS NULL OR leased_until <= ?) AND provider IN (\(listed))
                    ORDER BY due_at LIMIT ?
                    """,
                arguments: StatementArguments([at, at, at] + names.map { $0 as any DatabaseValueConvertible } + [limit])
            )
            var claim = NudgeClaim()
            for row in due {
                let device = DeviceKey(userID: row[0], deviceID: row[1])
                if row[10] as Bool {
                    if (row[11] as Int64?) == nil {
                        try db.execute(
                            sql: "UPDATE push_registrations SET due_at = ?, held_live_at = ? WHERE user_id = ? AND device_id = ?",
                            arguments: [at + recheckMilliseconds, at, device.userID, device.deviceID]
                        )
                        claim.held += 1
                    } else {
                        try db.execute(
                            sql: """
                                UPDATE push_registrations SET pending_scopes = NULL, pending_since = NULL, due_at = NULL, attempts = 0,
                                    leased_until = NULL, held_live_at = NULL
                                WHERE user_id = ? AND device_id = ?
                                """,
                            arguments: [device.userID, device.deviceID]
                        )
                        claim.present += 1
                    }
                    continue
                }
                try db.execute(
                    sql: "UPDATE push_registrations SET leased_until = ?, attempts = attempts + 1, held_live_at = NULL WHERE user_id = ? AND device_id = ?",
                    arguments: [at + leaseMilliseconds, device.userID, device.deviceID]
                )
                guard let registration = StoredPushRegistration.registration(provider: row[2], token: row[3], topic: row[4], environment: row[5]) else { continue }
                let scopes = Self.pendingScopes(row[6])
                claim.nudges.append(
                    ClaimedNudge(
                        device: device, registration: registration, scopes: scopes.compactMap(Scope.init(key:)), version: row[7],
                        attempts: (row[8] as Int) + 1, pendingSince: row[9], leasedUntil: at + leaseMilliseconds
                    )
                )
            }
            return claim
        }
    }

    package func finishNudge(_ nudge: ClaimedNudge, outcome: NudgeFinish, intervalMilliseconds: Int64, now: Timestamp) async throws {
        let at = now.millisecondsSinceEpoch
        let key: StatementArguments = [nudge.device.userID, nudge.device.deviceID, nudge.registration.token]
        // An attempt is recorded only while its claim still holds the device.
        let claimed: StatementArguments = key + [nudge.leasedUntil]
        try await write { db in
            switch outcome {
            case .sent, .dropped:
                let error: String? = if case .dropped(let error) = outcome { error } else { nil }
                let sent: Int64? = error == nil ? at : nil
                try db.execute(
                    sql: """
                        UPDATE push_registrations SET
                            last_sent_at = coalesce(?, last_sent_at), last_attempt_at = ?, leased_until = NULL, attempts = 0, last_error = ?,
                            held_live_at = NULL,
                            pending_scopes = CASE WHEN pending_version = ? THEN NULL ELSE pending_scopes END,
                            pending_since = CASE WHEN pending_version = ? THEN NULL ELSE pending_since END,
                            due_at = CASE WHEN pending_version = ? THEN NULL ELSE ? END
                        WHERE user_id = ? AND device_id = ? AND token = ? AND leased_until = ?
                        """,
                    arguments: [sent, at, error, nudge.version, nudge.version, nudge.version, at + intervalMilliseconds] + claimed
                )
            case .retry(let due, let error):
                try db.execute(
                    sql: """
                        UPDATE push_registrations SET leased_until = NULL, due_at = ?, last_error = ?, held_live_at = NULL
                        WHERE user_id = ? AND device_id = ? AND token = ? AND leased_until = ?
                        """,
                    arguments: [due, error] + claimed
                )
            case .unregistered:
                try db.execute(sql: "DELETE FROM push_registrations WHERE user_id = ? AND device_id = ? AND token = ?", arguments: key)
            }
        }
    }

    package func publishPresence(front: String, added: [DeviceKey], removed: [DeviceKey], expiresAt: Timestamp) async throws -> Bool {
        try await write { db in
            let prior = try Int64.fetchOne(db, sql: "SELECT expires_at FROM push_fronts WHERE front = ?", arguments: [front])
            try db.execute(
                sql: "INSERT INTO push_fronts (front, expires_at) VALUES (?, ?) ON CONFLICT (front) DO UPDATE SET expires_at = excluded.expires_at",
                arguments: [front, expiresAt.millisecondsSinceEpoch]
            )
            for device in removed {
                try db.execute(sql: "DELETE FROM push_presence WHERE user_id = ? AND device_id = ? AND front = ?", arguments: [device.userID, device.deviceID, front])
            }
            for device in added {
                try db.execute(
                    sql: "INSERT INTO push_presence (user_id, device_id, front) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                    arguments: [device.userID, device.deviceID, front]
                )
            }
            return prior.map { $0 > Timestamp.now().millisecondsSinceEpoch } ?? false
        }
    }

    package func endPresence(front: String) async throws {
        try await write { db in
            try db.execute(sql: "DELETE FROM push_presence WHERE front = ?", arguments: [front])
            try db.execute(sql: "DELETE FROM push_fronts WHERE front = ?", arguments: [front])
        }
    }

    package func deleteExpiredPresence(now: Timestamp) async throws -> Int {
        try await write { db in
            let at = now.millisecondsSinceEpoch
            try db.execute(
                sql: "DELETE FROM push_presence WHERE front IN (SELECT front FROM push_fronts WHERE expires_at <= ?)", arguments: [at]
            )
            let deleted = db.changesCount
            try db.execute(sql: "DELETE FROM push_fronts WHERE expires_at <= ?", arguments: [at])
            return deleted
        }
    }

    package func nudgeBacklog() async throws -> (pending: Int, oldestPendingSince: Int64?) {
        try await read { db in
            let row = try Row.fetchOne(db, sql: "SELECT count(*), min(pending_since) FROM push_registrations WHERE due_at IS NOT NULL")
            return (row?[0] ?? 0, row?[1])
        }
    }
}
