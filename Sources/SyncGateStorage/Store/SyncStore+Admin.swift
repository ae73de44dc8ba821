import SyncGateCore
import SyncGateWire

/// An operator's actions on one job, as `syncgate admin job …` and the admin API take them
/// (docs/admin.md).
extension SyncStore {
    package func jobDetail(id: Int64) async throws -> JobDetail? {
        try await driver.jobDetail(id: id)
    }

    /// Finishes a job no worker has started (`queued` or `retrying`) as `dead`: every operation
    /// answers `INTERNAL`, retryable (none took effect; the device may push them again), its
    /// device's watermark advances and a client waiting for it is answered. A running job is
    /// refused: its attempt ends on its own (done, retried or dead).
    package func cancelJob(id: Int64, reason: String) async throws -> JobActionOutcome {
        let cancelled = try await driver.transaction(now: clock.now()) { transaction -> Bool in
            guard let job = try await transaction.lockWaitingJob(id: id) else { return false }
            let operations: [SyncOperation]
            do {
                operations = try JobPayload(stored: job.payload).operations
            } catch {
                // It could never have run: no results, as the claim's dead path gives it.
                operations = []
            }
            let finished = FinishedJob(
                id: id, userID: job.record.userID, deviceID: job.record.deviceID, state: .dead,
                results: JobCodec.encodeResults(OperationResult.cancelledJob(operations))
            )
            try await transaction.finishJob(finished, error: String(reason.prefix(2000)))
            try await transaction.announce([.jobFinished(finished)])
            return true
        }
        return cancelled ? .applied : try await refusal(id)
    }

    /// Queues a dead job again with fresh attempts.
    package func retryDeadJob(id: Int64) async throws -> JobActionOutcome {
        try await retryDeadJobs(ids: [id]) > 0 ? .applied : try await refusal(id)
    }

    /// Deletes a finished job (its client then gets 404 for it, as after the job retention).
    package func deleteFinishedJob(id: Int64) async throws -> JobActionOutcome {
        try await driver.deleteFinishedJob(id: id) ? .applied : try await refusal(id)
    }

    /// Why an action found nothing to do: no such job, or the state it is in.
    private func refusal(_ id: Int64) async throws -> JobActionOutcome {
        guard let job = try await driver.jobDetail(id: id) else { return .notFound }
        return .refused(job.record.state)
    }
}
