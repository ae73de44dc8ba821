import SyncGateCore
import SyncGateStorage

/// The text of a NOTIFY on ``PostgresDriver/channel``.
enum NotificationPayload {
    static func encode(_ event: StoreEvent) -> String {
        switch event {
        case .jobsAvailable: "queue"
        case .resynchronize: "resync"
        case .jobFinished(let id): "job:\(id)"
        case .feedAdvanced(let scope): "feed:\(scope.key)"
        }
    }

    static func event(from payload: String) -> StoreEvent? {
        if payload == "queue" { return .jobsAvailable }
        if payload == "resync" { return .resynchronize }
        if payload.hasPrefix("job:"), let id = Int64(payload.dropFirst(4)) { return .jobFinished(id) }
        if payload.hasPrefix("feed:"), let scope = Scope(key: String(payload.dropFirst(5))) { return .feedAdvanced(scope) }
        return nil
    }
}
