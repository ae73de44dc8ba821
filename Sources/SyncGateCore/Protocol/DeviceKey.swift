import SyncGateWire
/// One device of one user (device ids are the client's, unique per user only).
package struct DeviceKey: Sendable, Hashable {
    package var userID: String
    package var deviceID: String

    package init(userID: String, deviceID: String) {
        self.userID = userID
        self.deviceID = deviceID
    }
}
