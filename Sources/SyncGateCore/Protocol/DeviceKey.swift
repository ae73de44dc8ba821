import SyncGateWire
/// One device of one user (device ids are the client's, unique per user only).
public struct DeviceKey: Sendable, Hashable {
    public var userID: String
    public var deviceID: String

    public init(userID: String, deviceID: String) {
        self.userID = userID
        self.deviceID = deviceID
    }
}
