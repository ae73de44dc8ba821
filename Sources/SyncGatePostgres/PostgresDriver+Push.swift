import PostgresNIO
package import SyncGateCore
package import SyncGateStorage
package import SyncGateWire

/// Push registrations (docs/push.md): a device's address for silent nudges.
extension PostgresDriver {
    typealias PushRegistrationColumns = (String, String, String?, String?, Int64, Int64)

    package func upsertPushRegistration(_ device: DeviceKey, _ registration: PushRegistration, now: Timestamp) async throws {
        let at = now.millisecondsSinceEpoch
        _ = try await query(
            "register push", .request,
            """
            INSERT INTO push_registrations (user_id, device_id, provider, token, topic, environment, created_at, updated_at)
            VALUES (\(device.userID), \(device.deviceID), \(registration.provider.rawValue), \(registration.token), \(registration.topic),
                    \(registration.environment?.rawValue), \(at), \(at))
            ON CONFLICT (user_id, device_id) DO UPDATE SET provider = excluded.provider, token = excluded.token, topic = excluded.topic,
                environment = excluded.environment, updated_at = excluded.updated_at
            RETURNING 1
            """,
            as: Int.self
        )
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
}
