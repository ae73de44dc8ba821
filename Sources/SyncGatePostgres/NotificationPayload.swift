import SyncGateCore
import SyncGateStorage

/// The text of a NOTIFY on ``PostgresStore/channel``.
enum NotificationPayload {
    static let jobsAvailable = "queue"

    static func jobFinished(_ id: Int64) -> String { "job:\(id)" }

    static func feedAdvanced(_ scope: Scope) -> String { "feed:\(scope.key)" }

    static func event(from payload: String) -> StoreEvent? {
        if payload == jobsAvailable { return .jobsAvailable }
        if payload == resynchronize { return .resynchronize }
        if payload.hasPrefix("job:"), let id = Int64(payload.dropFirst(4)) { return .jobFinished(id) }
        if payload.hasPrefix("feed:"), let scope = Scope(key: String(payload.dropFirst(5))) { return .feedAdvanced(scope) }
        return nil
    }
}

extension NotificationPayload {
    /// Everything may have changed (a force-resync of all users): every waiter re-checks.
    static let resynchronize = "resync"
}
