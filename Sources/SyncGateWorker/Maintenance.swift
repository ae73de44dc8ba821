import CoreMetrics
package import Logging
import Metrics
import ServiceLifecycle
import SyncGateCore
package import SyncGateWire
package import SyncGateStorage

/// Retention settings for the periodic maintenance loop and `syncgate admin prune`.
package struct RetentionConfiguration: Sendable, Hashable {
    /// Finished (`done`/`dead`) jobs are deleted after this long; their results are gone with them.
    package var finishedJobsMilliseconds: Int64
    /// Tombstones leave the feeds after this long; cursors older than the purge get `CURSOR_INVALID`.
    package var tombstonesMilliseconds: Int64
    /// Idempotency records are forgotten after this long; a replay after it applies again.
    package var idempotencyMilliseconds: Int64

    package init(
        finishedJobsMilliseconds: Int64 = 24 * 3_600_000,
        tombstonesMilliseconds: Int64 = 30 * 86_400_000,
        idempotencyMilliseconds: Int64 = 30 * 86_400_000
    ) {
        self.finishedJobsMilliseconds = finishedJobsMilliseconds
        self.tombstonesMilliseconds = tombstonesMilliseconds
        self.idempotencyMilliseconds = idempotencyMilliseconds
    }
}

/// What one maintenance pass did.
package struct MaintenanceReport: Sendable, Hashable {
    package var deletedJobs = 0
    package var prunedIdempotencyRecords = 0
    package var purge = PurgeReport()
    package var compaction = CompactionReport()

    package init() {}
}

/// One maintenance pass: job and idempotency retention, compaction, then tombstone purge.
package enum MaintenanceTasks {
    package static func run(on store: any MaintenanceStore, retention: RetentionConfiguration) async throws -> MaintenanceReport {
        var report = MaintenanceReport()
        report.deletedJobs = try await store.deleteFinishedJobs(olderThanMilliseconds: retention.finishedJobsMilliseconds)
        report.prunedIdempotencyRecords = try await store.pruneIdempotencyRecords(olderThanMilliseconds: retention.idempotencyMilliseconds)
        report.compaction = try await store.compactFeeds()
        report.purge = try await store.purgeTombstones(olderThanMilliseconds: retention.tombstonesMilliseconds)
        return report
    }

    /// One pass under the cluster-wide maintenance lock, recorded for operators and in the
    /// metrics; `nil` when another process holds the lock (the workers' loop, `syncgate admin
    /// maintain` and the admin API all run passes this way).
    package static func runAndRecord(on store: any MaintenanceStore, retention: RetentionConfiguration) async throws -> (MaintenanceReport, Duration)? {
        let started = ContinuousClock.now
        guard let report = try await store.withMaintenanceLock({ try await run(on: store, retention: retention) }) else { return nil }
        let duration = started.duration(to: .now)
        report.record(duration: duration)
        try await store.recordMaintenanceRun(milliseconds: Int64(duration / .milliseconds(1)), report: report.json(milliseconds: Int64(duration / .milliseconds(1))))
        return (report, duration)
    }
}

/// Runs ``MaintenanceTasks`` periodically in a worker process. Only the process holding the
/// store's maintenance lock (a PostgreSQL advisory lock) runs a pass; the others skip it.
package final class MaintenanceService: Service {
    let store: any MaintenanceStore
    let retention: RetentionConfiguration
    let interval: Duration
    let logger: Logger

    package init(store: any MaintenanceStore, retention: RetentionConfiguration, interval: Duration = .seconds(60), logger: Logger) {
        self.store = store
        self.retention = retention
        self.interval = interval
        self.logger = logger
    }

    package func run() async throws {
        let stop = StopSignal()
        await withGracefulShutdownHandler {
            while !stop.isTriggered, !Task.isCancelled {
                await stop.sleep(for: interval)
                guard !stop.isTriggered else { break }
                do {
                    let store = self.store
                    let retention = self.retention
                    if let (report, _) = try await MaintenanceTasks.runAndRecord(on: store, retention: retention) {
                        logger.info("maintenance pass", metadata: [
                            "syncgate.jobs_deleted": "\(report.deletedJobs)",
                            "syncgate.idempotency_pruned": "\(report.prunedIdempotencyRecords)",
                            "syncgate.tombstones_purged": "\(report.purge.purgedTombstones)",
                            "syncgate.changes_compacted": "\(report.compaction.deletedChanges)",
                        ])
                    }
                } catch {
                    logger.warning("maintenance pass failed", metadata: ["syncgate.error": "\(error)"])
                }
            }
        } onGracefulShutdown: {
            stop.trigger()
        }
    }
}

extension MaintenanceReport {
    /// Adds this pass to the maintenance series (see ``MetricName``).
    func record(duration: Duration) {
        Metrics.Timer(label: MetricName.maintenanceDuration).record(duration: duration)
        let removed = [
            ("jobs", deletedJobs), ("idempotency_records", prunedIdempotencyRecords),
            ("tombstones", purge.purgedTombstones), ("compacted_changes", compaction.deletedChanges),
        ]
        for (kind, count) in removed {
            Counter(label: MetricName.maintenanceRemoved, dimensions: [("kind", kind)]).increment(by: count)
        }
    }
}

extension MaintenanceReport {
    /// As `syncgate admin maintain --json` and the admin API's maintenance pass show it.
    package func json(milliseconds: Int64) -> JSONValue {
        [
            "ran": true, "milliseconds": .int(milliseconds), "deleted_jobs": .int(Int64(deletedJobs)),
            "forgotten_idempotency_records": .int(Int64(prunedIdempotencyRecords)), "compacted_changes": .int(Int64(compaction.deletedChanges)),
            "purged_tombstones": .int(Int64(purge.purgedTombstones)), "raised_floors": .int(Int64(purge.raisedFloors)),
        ]
    }
}
