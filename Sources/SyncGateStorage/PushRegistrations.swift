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

/// The `changes.writer` of a device's change: `<device id>/<user id>` (a device id holds no `/`).
package enum PushWriter {
    package static func key(_ device: DeviceKey) -> String { "\(device.deviceID)/\(device.userID)" }
}

/// A pending nudge a nudger took to send: the device's address and the feeds advanced for it.
package struct ClaimedNudge: Sendable, Hashable {
    package var device: DeviceKey
    package var registration: PushRegistration
    package var scopes: [Scope]
    /// The pending set's version when it was taken: a pass that adds to it meanwhile keeps it
    /// pending after this nudge is sent.
    package var version: Int64
    /// This attempt's number (1 for the first).
    package var attempts: Int
    /// Commit time of the oldest change pending (milliseconds since the epoch).
    package var pendingSince: Int64?
    /// The end of this claim's lease (milliseconds since the epoch), which also names the claim:
    /// once it passed and another nudger took the device, what this one records changes nothing.
    package var leasedUntil: Int64

    package init(
        device: DeviceKey, registration: PushRegistration, scopes: [Scope], version: Int64, attempts: Int, pendingSince: Int64?, leasedUntil: Int64
    ) {
        self.device = device
        self.registration = registration
        self.scopes = scopes
        self.version = version
        self.attempts = attempts
        self.pendingSince = pendingSince
        self.leasedUntil = leasedUntil
    }
}

/// What a nudger took: nudges to send; due ones whose device holds a live connection, held for
/// a second look; and those dropped because it still held one then (it delivers the changes).
package struct NudgeClaim: Sendable, Hashable {
    package var nudges: [ClaimedNudge] = []
    package var held = 0
    package var present = 0

    package init(nudges: [ClaimedNudge] = [], held: Int = 0, present: Int = 0) {
        self.nudges = nudges
        self.held = held
        self.present = present
    }
}

/// How a nudge attempt ended, as the nudger records it.
package enum NudgeFinish: Sendable, Hashable {
    case sent
    /// Due again at `at` (milliseconds since the epoch).
    case retry(at: Int64, error: String)
    /// The provider says the address is gone: the registration is deleted (unless the device
    /// registered another address meanwhile).
    case unregistered(reason: String)
    /// Given up; the pending set is cleared (the next change nudges the device again).
    case dropped(error: String)
}

/// What one nudge pass found: feeds that advanced past their position, and devices whose
/// pending set grew.
package struct NudgePass: Sendable, Hashable {
    package var feeds = 0
    package var devices = 0
    /// Whether feeds were left for a next pass (the limit was reached).
    package var more = false

    package init(feeds: Int = 0, devices: Int = 0, more: Bool = false) {
        self.feeds = feeds
        self.devices = devices
        self.more = more
    }
}
