import SyncGateCore
import SyncGateWire
import SyncGateStorage

/// The text of a NOTIFY on ``PostgresDriver/channel``.
enum NotificationPayload {
    /// PostgreSQL refuses payloads of 8,000 bytes or more: a finished job's results travel with
    /// its notification only below this (a push of a few dozen operations); the front reads the
    /// others back.
    static let maximumBytes = 7_900

    static func encode(_ event: StoreEvent) -> String {
        switch event {
        case .jobsAvailable: "queue"
        case .resynchronize: "resync"
        // The user id's length in UTF-8 bytes separates it from the device id; a space (never in
        // a device id) then the state and the results, when they fit. A release that predates
        // them reads the device id with the rest appended, which matches no device: it re-reads
        // the job, as it always did, and its long-polls take the device's watermark from the
        // next read instead.
        case .jobFinished(let job):
            Self.finished(job)
        case .jobFinishedWithoutResults(let id, let device):
            Self.finished(id, device: device)
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
            let deviceEnd = ids.utf8[userEnd...].firstIndex(of: UInt8(ascii: " ")) ?? ids.utf8.endIndex
            guard let userID = String(ids.utf8[..<userEnd]), let deviceID = String(ids.utf8[userEnd..<deviceEnd]) else { return nil }
            let device = DeviceKey(userID: userID, deviceID: deviceID)
            guard deviceEnd < ids.utf8.endIndex else { return .jobFinishedWithoutResults(id, device: device) }
            let outcome = ids.utf8[ids.utf8.index(after: deviceEnd)...]
            guard let stateEnd = outcome.firstIndex(of: UInt8(ascii: " ")), let stateText = String(outcome[..<stateEnd]),
                let state = JobState(rawValue: stateText), let results = String(outcome[outcome.index(after: stateEnd)...])
            else { return nil }
            return .jobFinished(FinishedJob(id: id, userID: userID, deviceID: deviceID, state: state, results: results))
        }
        if payload.hasPrefix("feed:"), let (head, rest) = numbered(payload.dropFirst(5)), let scope = Scope(key: rest) {
            return .feedAdvanced(scope, head: head)
        }
        if payload.hasPrefix("user:"), let (version, user) = numbered(payload.dropFirst(5)) {
            return .scopesChanged(userID: user, version: version)
        }
        return nil
    }

    static func finished(_ id: Int64, device: DeviceKey) -> String {
        "job:\(id):\(device.userID.utf8.count):\(device.userID)\(device.deviceID)"
    }

    /// With the state and the results when they fit, without them otherwise.
    static func finished(_ job: FinishedJob) -> String {
        let plain = finished(job.id, device: job.device)
        let full = "\(plain) \(job.state.rawValue) \(job.results)"
        return full.utf8.count <= maximumBytes ? full : plain
    }

    /// `<number>:<rest>`.
    static func numbered(_ text: Substring) -> (Int64, String)? {
        guard let colon = text.firstIndex(of: ":"), let number = Int64(text[..<colon]) else { return nil }
        return (number, String(text[text.index(after: colon)...]))
    }
}
