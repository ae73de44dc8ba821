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
                        environment = excluded.environment, updated_at = excluded.updated_at
                    """,
                arguments: [
                    device.userID, device.deviceID, registration.provider.rawValue, registration.token, registration.topic,
                    registration.environment?.rawValue, at, at,
                ]
            )
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
}
