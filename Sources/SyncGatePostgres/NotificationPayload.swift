import SyncGateCore
import SyncGateStorage

/// The text of a NOTIFY on ``PostgresDriver/channel``.
enum NotificationPayload {
    static func encode(_ event: StoreEvent) -> String {
        switch event {
        case .jobsAvailable: "queue"
        case .resynchronize: "resync"
        // The user id's length in UTF-8 bytes separates it from the device id.
        case .jobFinished(let id, let device): "job:\(id):\(device.userID.utf8.count):\(device.userID)\(device.deviceID)"
        // The number first: scope keys and user ids may hold ':'.
        case .feedAdvanced(let scope, let head): "feed:\(head):\(scope.key)"
        case .scopesChanged(let user, let version): "user:\(version):\(user)"
        }
    }

    static func event(from payload: String) -> StoreEvent? {
        if payload == "queue" { return .jobsAvailable }
        if payload == "resync" { return .resynchronize }
        if payload.hasPrefix("job:"), let (id, rest) = numbered(payload.dropFirst(4)), let (length, ids) = numbered(Substring(rest)),
            length >= 0, length <= ids.utf8.count
        {
            let userEnd = ids.utf8.index(ids.utf8.startIndex, offsetBy: Int(length))
            guard let userID = String(ids.utf8[..<userEnd]), let deviceID = String(ids.utf8[userEnd...]) else { return nil }
            return .jobFinished(id, device: DeviceKey(userID: userID, deviceID: deviceID))
        }
        if payload.hasPrefix("feed:"), let (head, rest) = numbered(payload.dropFirst(5)), let scope = Scope(key: rest) {
            return .feedAdvanced(scope, head: head)
        }
        if payload.hasPrefix("user:"), let (version, user) = numbered(payload.dropFirst(5)) {
            return .scopesChanged(userID: user, version: version)
        }
        return nil
    }

    /// `<number>:<rest>`.
    static func numbered(_ text: Substring) -> (Int64, String)? {
        guard let colon = text.firstIndex(of: ":"), let number = Int64(text[..<colon]) else { return nil }
        return (number, String(text[text.index(after: colon)...]))
    }
}
