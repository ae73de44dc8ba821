import SyncGateWire
/// One device of one user (device ids are the client's, unique per user only). Compared and
/// hashed by the ids' bytes, as the databases compare them (NFC and NFD "josé" are two users).
package struct DeviceKey: Sendable, Hashable {
    package var userID: String
    package var deviceID: String

    package init(userID: String, deviceID: String) {
        self.userID = userID
        self.deviceID = deviceID
    }

    package static func == (lhs: DeviceKey, rhs: DeviceKey) -> Bool {
        lhs.userID.sameBytes(as: rhs.userID) && lhs.deviceID.sameBytes(as: rhs.deviceID)
    }

    package func hash(into hasher: inout Hasher) {
        userID.hashBytes(into: &hasher)
        deviceID.hashBytes(into: &hasher)
    }
}
