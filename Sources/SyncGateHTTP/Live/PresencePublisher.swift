import Foundation
package import Logging
import ServiceLifecycle
import SyncGateConcurrency
import SyncGateCore
package import SyncGateStorage

/// Publishes which devices hold a live connection on this front, for push nudges (docs/push.md):
/// a nudge is not sent to a device whose long-poll or event stream is open, since that connection
/// delivers the change itself. Devices that come and go are published every `flushInterval`, and a
/// heartbeat every third of `lifetime` keeps this front's rows valid: a front that dies stops
/// holding nudges back once its heartbeat expires. Runs only when nudging is configured.
package final class PresencePublisher: Service {
    let store: any FrontStore
    let watcher: FeedWatcher
    let lifetime: Duration
    let flushInterval: Duration
    let logger: Logger
    /// This process's name in the presence table.
    package let front = "front-\(UUID().uuidString.lowercased())"

    package init(store: any FrontStore, watcher: FeedWatcher, lifetime: Duration, flushInterval: Duration = .milliseconds(250), logger: Logger) {
        self.store = store
        self.watcher = watcher
        self.lifetime = lifetime
        self.flushInterval = flushInterval
        self.logger = logger
    }

    package func run() async throws {
        let milliseconds = lifetime.wholeMilliseconds
        var pending: (added: Set<DeviceKey>, removed: Set<DeviceKey>) = (Set(watcher.trackPresence()), [])
        // The first publish replaces whatever an earlier process of this name left (none: names
        // are new per process) and announces the heartbeat.
        var replace = true
        var beat = ContinuousClock.now - lifetime
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            let changes = watcher.takePresenceChanges()
            for device in changes.appeared where pending.removed.remove(device) == nil { pending.added.insert(device) }
            for device in changes.left where pending.added.remove(device) == nil { pending.removed.insert(device) }
            if replace || !pending.added.isEmpty || !pending.removed.isEmpty || beat.duration(to: .now) >= lifetime / 3 {
                do {
                    if replace {
                        try await store.endPresence(front: front)
                        pending = (Set(watcher.trackPresence()), [])
                    }
                    let valid = try await store.publishPresence(
                        front: front, added: Array(pending.added), removed: Array(pending.removed), lifetimeMilliseconds: milliseconds
                    )
                    pending = ([], [])
                    // Late enough for the heartbeat to expire, the list may have been swept as a
                    // dead front's: the whole list goes again at once (not after a first publish).
                    replace = !valid && !replace
                    beat = .now
                    if replace { continue }
                } catch {
                    // What was not published is published in full once the database answers.
                    replace = true
                    logger.warning("live connections not published for push nudges", metadata: ["syncgate.error": "\(error)"])
                }
            }
            try? await Task.sleep(for: flushInterval)
        }
        do {
            try await store.endPresence(front: front)
        } catch {
            logger.info("presence not ended at shutdown; it expires with its heartbeat", metadata: ["syncgate.error": "\(error)"])
        }
    }
}
