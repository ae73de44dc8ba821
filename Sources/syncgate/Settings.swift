import ArgumentParser
import Foundation
import SyncGateCore
import SyncGateHTTP
import SyncGateStorage
import SyncGateWorker

/// Tuning read from the environment (documented in the README's configuration table).
struct Settings {
    var front = FrontConfiguration()
    var retention = RetentionConfiguration()
    var leaseMilliseconds: Int64 = 30_000
    var maintenanceInterval: Duration = .seconds(60)
    var pollInterval: Duration = .seconds(1)

    static func fromEnvironment() throws -> Settings {
        var settings = Settings()
        var front = settings.front
        if let value = try Environment.integer("SYNCGATE_MAX_BODY_BYTES") { front.maximumBodyBytes = try positive(value, "SYNCGATE_MAX_BODY_BYTES") }
        if let value = try Environment.integer("SYNCGATE_MAX_OPERATIONS") { front.pushLimits.maximumOperations = try positive(value, "SYNCGATE_MAX_OPERATIONS") }
        if let value = try Environment.integer("SYNCGATE_MAX_DATA_BYTES") { front.pushLimits.maximumDataBytes = try positive(value, "SYNCGATE_MAX_DATA_BYTES") }
        if let value = try Environment.integer("SYNCGATE_MAX_DATA_DEPTH") { front.pushLimits.maximumDataDepth = try positive(value, "SYNCGATE_MAX_DATA_DEPTH") }
        if let value = try Environment.integer("SYNCGATE_QUEUE_LIMIT_PER_USER") { front.queueLimits.maximumQueuedPerUser = try positive(value, "SYNCGATE_QUEUE_LIMIT_PER_USER") }
        if let value = try Environment.integer("SYNCGATE_QUEUE_LIMIT_TOTAL") { front.queueLimits.maximumQueuedTotal = try positive(value, "SYNCGATE_QUEUE_LIMIT_TOTAL") }
        if let value = try Environment.integer("SYNCGATE_MAX_ATTEMPTS") { front.maximumAttempts = try positive(value, "SYNCGATE_MAX_ATTEMPTS") }
        if let value = try Environment.duration("SYNCGATE_POLL_INTERVAL") {
            settings.pollInterval = .milliseconds(max(value, 10))
            front.pollInterval = settings.pollInterval
        }
        settings.front = front
        if let value = try Environment.duration("SYNCGATE_JOB_RETENTION") { settings.retention.finishedJobsMilliseconds = value }
        if let value = try Environment.duration("SYNCGATE_TOMBSTONE_RETENTION") { settings.retention.tombstonesMilliseconds = value }
        if let value = try Environment.duration("SYNCGATE_IDEMPOTENCY_RETENTION") { settings.retention.idempotencyMilliseconds = value }
        if let value = try Environment.duration("SYNCGATE_LEASE") { settings.leaseMilliseconds = max(value, 1000) }
        if let value = try Environment.duration("SYNCGATE_MAINTENANCE_INTERVAL") { settings.maintenanceInterval = .milliseconds(max(value, 100)) }
        return settings
    }

    func workerConfiguration(concurrency: Int) -> WorkerConfiguration {
        WorkerConfiguration(
            concurrency: concurrency,
            leaseMilliseconds: leaseMilliseconds,
            heartbeatInterval: .milliseconds(max(leaseMilliseconds / 3, 100)),
            pollInterval: pollInterval,
            retryPolicy: RetryPolicy(maximumAttempts: front.maximumAttempts),
            workerID: "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)-\(UInt16.random(in: .min ... .max))"
        )
    }

    static func positive(_ value: Int, _ name: String) throws -> Int {
        guard value > 0 else { throw ValidationError("\(name) must be positive") }
        return value
    }
}
