import Logging
package import SyncGateCore
import SyncGateWire

extension SyncStore {
    package func enqueue(_ job: QueuedJob, limits: QueueLimits) async throws -> EnqueueResult {
        try await driver.insertJob(job, limits: limits, now: clock.now())
    }

    /// The job, its results in their stored form.
    package func job(id: Int64, userID: String) async throws -> JobRecord? {
        try await driver.job(id: id, userID: userID)
    }

    package func claimJobs(workerID: String, limit: Int, leaseMilliseconds: Int64) async throws -> [ClaimedJob<JobPayload>] {
        var claimed: [ClaimedJob<JobPayload>] = []
        for job in try await driver.claimJobs(workerID: workerID, limit: limit, leaseMilliseconds: leaseMilliseconds, now: clock.now()) {
            do {
                claimed.append(job.with(payload: try JobPayload(stored: job.payload)))
            } catch {
                // It can never run: it dies alone, and the queue behind it keeps moving.
                logger.error("a claimed job's payload does not decode; the job is dead", metadata: [
                    "syncgate.job": "\(job.id)", "syncgate.error": "\(error)",
                ])
                do {
                    _ = try await settle(job, error: error.message, settlement: .dead(results: []))
                } catch {
                    // The lease expires and the rescuer settles it the same way.
                    logger.error("recording the dead job failed", metadata: ["syncgate.job": "\(job.id)", "syncgate.error": "\(error)"])
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
    package func fail(_ job: ClaimedJob<JobPayload>, error: String, settlement: JobSettlement) async throws -> Bool {
        try await settle(job, error: error, settlement: settlement)
    }

    /// Settles a failed attempt of a job this worker holds; false when the lease was lost.
    func settle<Payload>(_ job: ClaimedJob<Payload>, error: String, settlement: JobSettlement) async throws -> Bool {
        try await driver.transaction(now: clock.now()) { transaction in
            guard try await transaction.lockJob(job.lease) else { return false }
            try await Self.record(settlement, of: job, error: error, on: transaction)
            return true
        }
    }

    /// Expired leases a rescue transaction takes: their payloads (up to the push body limit each)
    /// are read with them, so a killed worker's many large jobs are rescued a batch at a time.
    static let rescueBatch = 16

    package func rescueExpiredLeases(policy: RetryPolicy, jitter: @escaping @Sendable () -> Double) async throws -> RescueReport {
        var report = RescueReport()
        // Batches until one comes back short (bounded: a rescue does not run forever behind a
        // queue that keeps expiring).
        for _ in 0..<64 {
            let batch = try await rescueBatch(policy: policy, jitter: jitter)
            report.requeued += batch.requeued
            report.dead += batch.dead
            if batch.requeued + batch.dead < Self.rescueBatch { break }
        }
        return report
    }

    private func rescueBatch(policy: RetryPolicy, jitter: @escaping @Sendable () -> Double) async throws -> RescueReport {
        try await driver.transaction(now: clock.now()) { transaction in
            var report = RescueReport()
            for job in try await transaction.expiredLeases(limit: Self.rescueBatch) {
                let error = "lease expired: the worker stopped before finishing the job"
                let settlement: JobSettlement
                switch policy.allowing(job.maximumAttempts).next(afterAttempts: job.attempts, jitter: jitter()) {
                case .retry(let delay):
                    settlement = .retry(afterMilliseconds: delay)
                case .dead:
                    // Only a dead job's operations are decoded: its results name them.
                    let operations = (try? JobPayload(stored: job.payload).operations) ?? []
                    settlement = .dead(results: OperationResult.deadJob(operations, attempts: job.attempts))
                }
                try await Self.record(settlement, of: job, error: error, on: transaction)
                if case .dead = settlement { report.dead += 1 } else { report.requeued += 1 }
            }
            if report.requeued > 0 { try await transaction.announce([.jobsAvailable]) }
            return report
        }
    }

    /// Writes a settlement for a locked, running job.
    static func record<Payload>(_ settlement: JobSettlement, of job: ClaimedJob<Payload>, error: String, on transaction: any StorageTransaction) async throws {
        let message = String(error.prefix(2000))
        switch settlement {
        case .retry(let delay):
            try await transaction.retryJob(id: job.id, delayMilliseconds: delay, error: message)
        case .dead(let results):
            let finished = FinishedJob(id: job.id, userID: job.userID, deviceID: job.deviceID, state: .dead, results: JobCodec.encodeResults(results))
            try await transaction.finishJob(finished, error: message)
            try await transaction.announce([.jobFinished(finished)])
        }
    }
}
