package import SyncGateCore
package import SyncGateWire

/// A device's push address as stored (docs/push.md).
package struct StoredPushRegistration: Sendable, Hashable {
    package var device: DeviceKey
    package var registration: PushRegistration
    package var createdAt: Timestamp
    /// When the device last registered it (each registration replaces the one before).
    package var updatedAt: Timestamp

    package init(device: DeviceKey, registration: PushRegistration, createdAt: Timestamp, updatedAt: Timestamp) {
        self.device = device
        self.registration = registration
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }

    /// The registration from its columns, or `nil` for a row no current server would write.
    package static func registration(provider: String, token: String, topic: String?, environment: String?) -> PushRegistration? {
        switch PushRegistration.Provider(rawValue: provider) {
        case .apns:
            guard let topic, let environment = environment.flatMap(PushRegistration.Environment.init(rawValue:)) else { return nil }
            return .apns(token: token, topic: topic, environment: environment)
        case .fcm: return .fcm(token: token)
        case nil: return nil
        }
    }

    package var json: JSONValue {
        guard case .object(var object) = registration.json else { return registration.json }
        object["registered_at"] = .string(updatedAt.rfc3339)
        return .object(object)
    }
}
