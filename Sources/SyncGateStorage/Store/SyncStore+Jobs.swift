import Logging
package import SyncGateCore
import SyncGateWire

extension SyncStore {
    package func enqueue(_ job: NewJob, limits: QueueLimits) async throws -> EnqueueResult {
        let insert = JobInsert(
            userID: job.userID, deviceID: job.deviceID, maximumAttempts: job.maximumAttempts,
            operationCount: job.operations.count, payload: JobCodec.encode(job.operations, traceContext: job.traceContext)
        )
        return try await driver.insertJob(insert, limits: limits, now: clock.now())
    }

    /// The job, its results in their stored form (``JobSnapshot/storedResults``, decoded on demand).
    package func job(id: Int64, userID: String) async throws -> JobSnapshot? {
        try await driver.job(id: id, userID: userID).map { try JobSnapshot(row: $0, decodingResults: false) }
    }

    package func claimJobs(workerID: String, limit: Int, leaseMilliseconds: Int64) async throws -> [ClaimedJob] {
        var claimed: [ClaimedJob] = []
        for row in try await driver.claimJobs(workerID: workerID, limit: limit, leaseMilliseconds: leaseMilliseconds, now: clock.now()) {
            let lease = JobLease(id: row.id, token: row.leaseToken)
            do {
                let (operations, traceContext) = try JobCodec.decodeJob(row.payload)
                claimed.append(
                    ClaimedJob(
                        id: row.id, leaseToken: row.leaseToken, userID: row.userID, deviceID: row.deviceID,
                        attempts: row.attempts, maximumAttempts: row.maximumAttempts, operations: operations,
                        createdAt: row.createdAt, traceContext: traceContext
                    )
                )
            } catch {
                // It can never run: it dies alone, and the queue behind it keeps moving.
                logger.error("a claimed job's payload does not decode; the job is dead", metadata: [
                    "syncgate.job": "\(row.id)", "syncgate.error": "\(error)",
                ])
                do {
                    _ = try await settle(lease: lease, userID: row.userID, deviceID: row.deviceID, error: error.message, settlement: .dead(results: []))
                } catch {
                    // The lease expires and the rescuer settles it the same way.
                    logger.error("recording the dead job failed", metadata: ["syncgate.job": "\(row.id)", "syncgate.error": "\(error)"])
                }
            }
        }
        return claimed
    }

    package func extendLeases(_ jobs: [JobLease], leaseMilliseconds: Int64) async throws {
        guard !jobs.isEmpty else { return }
        try await driver.extendLeases(jobs, leaseMilliseconds: leaseMilliseconds, now: clock.now())
    }

    @discardableResult
    package func fail(_ job: ClaimedJob, error: String, settlement: JobSettlement) async throws -> Bool {
        try await settle(lease: job.lease, userID: job.userID, deviceID: job.deviceID, error: error, settlement: settlement)
    }

    /// Settles a failed attempt of a job this worker holds; false when the lease was lost.
    func settle(lease: JobLease, userID: String, deviceID: String, error: String, settlement: JobSettlement) async throws -> Bool {
        try await driver.transaction(now: clock.now()) { transaction in
            guard try await transaction.lockJob(lease) else { return false }
            try await Self.record(settlement, id: lease.id, userID: userID, deviceID: deviceID, error: error, on: transaction)
            return true
        }
    }

    package func rescueExpiredLeases(policy: RetryPolicy, jitter: @escaping @Sendable () -> Double) async throws -> RescueReport {
        try await driver.transaction(now: clock.now()) { transaction in
            var report = RescueReport()
            for row in try await transaction.expiredLeases(limit: 100) {
                let error = "lease expired: the worker stopped before finishing the job"
                let settlement: JobSettlement
                do {
                    settlement = policy.settle(operations: try JobCodec.decode(row.payload), afterAttempts: row.attempts, jitter: jitter())
                } catch {
                    settlement = .dead(results: [])
                }
                try await Self.record(settlement, id: row.id, userID: row.userID, deviceID: row.deviceID, error: error, on: transaction)
                if case .dead = settlement { report.dead += 1 } else { report.requeued += 1 }
            }
            if report.requeued > 0 { try await transaction.announce([.jobsAvailable]) }
            return report
        }
    }

    /// Writes a settlement for a locked, running job.
    static func record(_ settlement: JobSettlement, id: Int64, userID: String, deviceID: String, error: String, on transaction: any StorageTransaction) async throws {
        let message = String(error.prefix(2000))
        switch settlement {
        case .retry(let delay):
            try await transaction.retryJob(id: id, delayMilliseconds: delay, error: message)
        case .dead(let results):
            let stored = JobCodec.encodeResults(results)
            try await transaction.finishJob(JobFinish(id: id, userID: userID, deviceID: deviceID, state: .dead, results: stored, lastError: message))
            try await transaction.announce([
                .jobFinished(id, device: DeviceKey(userID: userID, deviceID: deviceID), outcome: FinishedJob(state: .dead, results: stored))
            ])
        }
    }
}
