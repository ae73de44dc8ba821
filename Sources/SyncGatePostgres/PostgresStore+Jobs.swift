public import Logging
import PostgresNIO
import Synchronization
public import SyncGateCore
public import SyncGateStorage

extension PostgresStore {
    static let unfinishedStates = "('queued', 'running', 'retrying')"
    static let jobColumns = """
        id, user_id, device_id, state, attempts, max_attempts, operation_count, results, last_error,
        (extract(epoch FROM created_at) * 1000)::bigint, (extract(epoch FROM finished_at) * 1000)::bigint
        """
    typealias JobRow = (Int64, String, String, String, Int, Int, Int, String?, String?, Int64, Int64?)

    static func snapshot(_ row: JobRow) -> JobSnapshot {
        let (id, user, device, state, attempts, maximumAttempts, count, results, lastError, created, finished) = row
        return JobSnapshot(
            id: id,
            userID: user,
            deviceID: device,
            state: JobState(rawValue: state) ?? .queued,
            attempts: attempts,
            maximumAttempts: maximumAttempts,
            operationCount: count,
            results: results.map(JobPayload.decodeResults),
            lastError: lastError,
            createdAt: Timestamp(millisecondsSinceEpoch: created),
            finishedAt: finished.map(Timestamp.init(millisecondsSinceEpoch:))
        )
    }

    public func enqueue(_ job: NewJob, limits: QueueLimits) async throws -> EnqueueResult {
        try await withDeadline("enqueue", .request) { [self] in
            let depth = try await self.globalQueueDepth()
            if depth >= limits.maximumQueuedTotal { return .overloaded(depth: depth) }
            let queued = try await self.client.query(
                "SELECT count(*)::int FROM jobs WHERE user_id = \(job.userID) AND state IN \(unescaped: Self.unfinishedStates)"
            ).collect(Int.self).first ?? 0
            if queued >= limits.maximumQueuedPerUser { return .rateLimited(queued: queued) }
            let payload = JobPayload.encode(job.operations)
            let rows = try await self.client.query(
                """
                WITH job AS (
                    INSERT INTO jobs (user_id, device_id, max_attempts, operation_count, payload)
                    VALUES (\(job.userID), \(job.deviceID), \(job.maximumAttempts), \(job.operations.count), \(payload))
                    RETURNING id
                )
                SELECT id, pg_notify(\(Self.channel), \(NotificationPayload.jobsAvailable))::text FROM job
                """
            ).collect((Int64, String).self)
            guard let id = rows.first?.0 else { throw StoreUnavailableError("enqueue returned no job id") }
            return .accepted(jobID: id)
        }
    }

    /// Unfinished jobs in all, cached for a second so the global limit costs no query per push.
    func globalQueueDepth() async throws -> Int {
        let now = ContinuousClock.now
        if let cached = depthCache.withLock({ $0 }), cached.at.duration(to: now) < .seconds(1) {
            return cached.depth
        }
        let depth = try await client.query(
            "SELECT count(*)::int FROM jobs WHERE state IN \(unescaped: Self.unfinishedStates)"
        ).collect(Int.self).first ?? 0
        depthCache.withLock { $0 = (depth, now) }
        return depth
    }

    public func job(id: Int64, userID: String) async throws -> JobSnapshot? {
        try await withDeadline("job status", .request) { [self] in
            try await self.client.query(
                "SELECT \(unescaped: Self.jobColumns) FROM jobs WHERE id = \(id) AND user_id = \(userID)"
            ).collect(JobRow.self).first.map(Self.snapshot)
        }
    }

    public func claimJobs(workerID: String, limit: Int, leaseMilliseconds: Int64) async throws -> [ClaimedJob] {
        try await withDeadline("claim jobs", .job) { [self] in
            // Oldest runnable jobs first, skipping rows other workers are claiming, and only a user's
            // oldest unfinished job: one job per user at a time, in push order.
            let rows = try await client.query(
                """
                WITH candidates AS (
                    SELECT j.id FROM jobs j
                    WHERE j.state IN ('queued', 'retrying') AND j.run_at <= now()
                      AND NOT EXISTS (
                          SELECT 1 FROM jobs earlier
                          WHERE earlier.user_id = j.user_id AND earlier.id < j.id
                            AND earlier.state IN \(unescaped: Self.unfinishedStates)
                      )
                    ORDER BY j.id
                    LIMIT \(limit)
                    FOR UPDATE SKIP LOCKED
                )
                UPDATE jobs SET
                    state = 'running',
                    attempts = jobs.attempts + 1,
                    lease_owner = \(workerID),
                    lease_token = md5(random()::text || clock_timestamp()::text),
                    lease_expires_at = now() + \(leaseMilliseconds) * interval '1 millisecond',
                    updated_at = now()
                FROM candidates WHERE jobs.id = candidates.id
                RETURNING jobs.id, jobs.lease_token, jobs.user_id, jobs.device_id, jobs.attempts, jobs.max_attempts, jobs.payload
                """
            ).collect((Int64, String, String, String, Int, Int, String).self)
            return try rows.sorted { $0.0 < $1.0 }.map { row in
                let (id, token, user, device, attempts, maximumAttempts, payload) = row
                return ClaimedJob(
                    id: id, leaseToken: token, userID: user, deviceID: device, attempts: attempts,
                    maximumAttempts: maximumAttempts, operations: try JobPayload.decode(payload)
                )
            }
        }
    }

    public func extendLeases(_ jobs: [JobLease], leaseMilliseconds: Int64) async throws {
        try await withDeadline("extend leases", .job) { [self] in
            guard !jobs.isEmpty else { return }
            // A job whose row is locked is being applied right now, which protects it better than a
            // lease: skip it rather than wait for the apply transaction.
            try await client.query(
                """
                UPDATE jobs SET lease_expires_at = now() + \(leaseMilliseconds) * interval '1 millisecond', updated_at = now()
                WHERE id IN (
                    SELECT j.id FROM jobs j
                    JOIN unnest(\(jobs.map(\.id))::bigint[], \(jobs.map(\.token))::text[]) AS lease(id, token)
                      ON j.id = lease.id AND j.lease_token = lease.token
                    WHERE j.state = 'running'
                    FOR UPDATE OF j SKIP LOCKED
                )
                """
            )
        }
    }

    public func fail(_ job: ClaimedJob, error: String, next: RetryPolicy.Next) async throws -> Bool {
        try await withDeadline("record a failure", .job) { [self] in
            try await transaction { transaction in
                let held = try await transaction.query(
                    "SELECT id FROM jobs WHERE id = \(job.id) AND state = 'running' AND lease_token = \(job.leaseToken) FOR UPDATE"
                ).collect(Int64.self)
                guard !held.isEmpty else { return false }
                try await self.settleFailure(id: job.id, userID: job.userID, deviceID: job.deviceID, operations: job.operations,
                                             attempts: job.attempts, error: error, next: next, on: transaction)
                return true
            }
        }
    }

    /// Moves a locked, running job to `retrying` or `dead`.
    func settleFailure(
        id: Int64, userID: String, deviceID: String, operations: [SyncOperation], attempts: Int,
        error: String, next: RetryPolicy.Next, on transaction: Transaction
    ) async throws {
        let message = String(error.prefix(2000))
        switch next {
        case .retry(let delay):
            try await transaction.query(
                """
                UPDATE jobs SET state = 'retrying', run_at = now() + \(delay) * interval '1 millisecond', last_error = \(message),
                    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = now()
                WHERE id = \(id)
                """
            )
        case .dead:
            let results = JobPayload.encodeResults(OperationResult.deadJob(operations, attempts: attempts))
            try await transaction.query(
                """
                UPDATE jobs SET state = 'dead', results = \(results), last_error = \(message), finished_at = now(),
                    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = now()
                WHERE id = \(id)
                """
            )
            try await recordFinished(jobID: id, userID: userID, deviceID: deviceID, on: transaction)
            try await notify([NotificationPayload.jobFinished(id)], on: transaction)
        }
    }

    /// Advances the device watermark; called in the transaction that finishes the job.
    func recordFinished(jobID: Int64, userID: String, deviceID: String, on transaction: Transaction) async throws {
        try await transaction.query(
            """
            INSERT INTO devices (user_id, device_id, last_finished_job_id) VALUES (\(userID), \(deviceID), \(jobID))
            ON CONFLICT (user_id, device_id) DO UPDATE
            SET last_finished_job_id = greatest(devices.last_finished_job_id, excluded.last_finished_job_id), updated_at = now()
            """
        )
    }

    /// Queues notifications; PostgreSQL delivers them when the transaction commits.
    func notify(_ payloads: [String], on transaction: Transaction) async throws {
        guard !payloads.isEmpty else { return }
        try await transaction.query(
            "SELECT pg_notify(\(Self.channel), payload)::text FROM unnest(\(payloads)::text[]) AS payload"
        )
    }

    public func rescueExpiredLeases(policy: RetryPolicy, jitter: @escaping @Sendable () -> Double) async throws -> RescueReport {
        try await withDeadline("rescue expired leases", .job) { [self] in
            try await transaction { transaction in
                // SKIP LOCKED: a locked row is being applied right now by a live worker.
                let expired = try await transaction.query(
                    """
                    SELECT id, user_id, device_id, attempts, payload FROM jobs
                    WHERE state = 'running' AND lease_expires_at < now()
                    ORDER BY id LIMIT 100
                    FOR UPDATE SKIP LOCKED
                    """
                ).collect((Int64, String, String, Int, String).self)
                var report = RescueReport()
                for (id, user, device, attempts, payload) in expired {
                    let next = policy.next(afterAttempts: attempts, jitter: jitter())
                    try await self.settleFailure(
                        id: id, userID: user, deviceID: device, operations: (try? JobPayload.decode(payload)) ?? [],
                        attempts: attempts, error: "lease expired: the worker stopped before finishing the job", next: next, on: transaction
                    )
                    if next == .dead { report.dead += 1 } else { report.requeued += 1 }
                }
                if report.requeued > 0 { try await self.notify([NotificationPayload.jobsAvailable], on: transaction) }
                return report
            }
        }
    }
}
