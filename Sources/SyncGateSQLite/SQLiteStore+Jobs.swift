import Foundation
import GRDB
public import SyncGateCore
public import SyncGateStorage

extension SQLiteStore {
    static let unfinished = "('queued', 'running', 'retrying')"
    static let jobColumns = "id, user_id, device_id, state, attempts, max_attempts, operation_count, results, last_error, created_at, finished_at"

    static func snapshot(_ row: Row) -> JobSnapshot {
        let results: String? = row["results"]
        return JobSnapshot(
            id: row["id"],
            userID: row["user_id"],
            deviceID: row["device_id"],
            state: JobState(rawValue: row["state"]) ?? .queued,
            attempts: row["attempts"],
            maximumAttempts: row["max_attempts"],
            operationCount: row["operation_count"],
            results: results.map(JobPayload.decodeResults),
            lastError: row["last_error"],
            createdAt: Timestamp(millisecondsSinceEpoch: row["created_at"]),
            finishedAt: (row["finished_at"] as Int64?).map(Timestamp.init(millisecondsSinceEpoch:))
        )
    }

    public func enqueue(_ job: NewJob, limits: QueueLimits) async throws -> EnqueueResult {
        let payload = JobPayload.encode(job.operations)
        return try await write { statements in
            let depth: Int = try statements.value("SELECT count(*) FROM jobs WHERE state IN \(Self.unfinished)") ?? 0
            if depth >= limits.maximumQueuedTotal { return (.overloaded(depth: depth), []) }
            let queued: Int = try statements.value(
                "SELECT count(*) FROM jobs WHERE user_id = ? AND state IN \(Self.unfinished)", [job.userID]
            ) ?? 0
            if queued >= limits.maximumQueuedPerUser { return (.rateLimited(queued: queued), []) }
            let now = Self.now
            try statements.execute(
                """
                INSERT INTO jobs (user_id, device_id, max_attempts, operation_count, payload, run_at, created_at, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """,
                [job.userID, job.deviceID, job.maximumAttempts, job.operations.count, payload, now, now, now]
            )
            return (.accepted(jobID: statements.db.lastInsertedRowID), [.jobsAvailable])
        }
    }

    public func job(id: Int64, userID: String) async throws -> JobSnapshot? {
        try await read { statements in
            try statements.rows("SELECT \(Self.jobColumns) FROM jobs WHERE id = ? AND user_id = ?", [id, userID]).first.map(Self.snapshot)
        }
    }

    /// One `UPDATE … RETURNING` in an IMMEDIATE transaction: the oldest runnable job of each user
    /// whose earlier jobs are all finished.
    public func claimJobs(workerID: String, limit: Int, leaseMilliseconds: Int64) async throws -> [ClaimedJob] {
        let token = UUID().uuidString
        return try await write { statements in
            let now = Self.now
            let rows = try statements.rows(
                """
                UPDATE jobs SET state = 'running', attempts = attempts + 1, lease_owner = ?, lease_token = ?,
                    lease_expires_at = ?, updated_at = ?
                WHERE id IN (
                    SELECT j.id FROM jobs j
                    WHERE j.state IN ('queued', 'retrying') AND j.run_at <= ?
                      AND NOT EXISTS (
                          SELECT 1 FROM jobs earlier
                          WHERE earlier.user_id = j.user_id AND earlier.id < j.id AND earlier.state IN \(Self.unfinished)
                      )
                    ORDER BY j.id LIMIT ?
                )
                RETURNING id, lease_token, user_id, device_id, attempts, max_attempts, payload
                """,
                [workerID, token, now + leaseMilliseconds, now, now, limit]
            )
            let jobs = try rows.map { row in
                ClaimedJob(
                    id: row["id"], leaseToken: row["lease_token"], userID: row["user_id"], deviceID: row["device_id"],
                    attempts: row["attempts"], maximumAttempts: row["max_attempts"], operations: try JobPayload.decode(row["payload"])
                )
            }
            return (jobs.sorted { $0.id < $1.id }, [])
        }
    }

    public func extendLeases(_ jobs: [JobLease], leaseMilliseconds: Int64) async throws {
        guard !jobs.isEmpty else { return }
        let leases = JSONValue.rows(jobs.map { [.int($0.id), .string($0.token)] })
        try await write { statements in
            let now = Self.now
            try statements.execute(
                """
                UPDATE jobs SET lease_expires_at = ?, updated_at = ?
                WHERE state = 'running' AND EXISTS (
                    SELECT 1 FROM json_each(?) l WHERE json_extract(l.value, '$[0]') = jobs.id AND json_extract(l.value, '$[1]') = jobs.lease_token
                )
                """,
                [now + leaseMilliseconds, now, leases]
            )
            return ((), [])
        }
    }

    public func fail(_ job: ClaimedJob, error: String, next: RetryPolicy.Next) async throws -> Bool {
        try await write { statements in
            let held: Int64? = try statements.value(
                "SELECT id FROM jobs WHERE id = ? AND state = 'running' AND lease_token = ?", [job.id, job.leaseToken]
            )
            guard held != nil else { return (false, []) }
            let events = try Self.settleFailure(
                id: job.id, userID: job.userID, deviceID: job.deviceID, operations: job.operations,
                attempts: job.attempts, error: error, next: next, statements: statements
            )
            return (true, events)
        }
    }

    /// Moves a running job to `retrying` or `dead`; returns the events to publish.
    static func settleFailure(
        id: Int64, userID: String, deviceID: String, operations: [SyncOperation], attempts: Int,
        error: String, next: RetryPolicy.Next, statements: Statements
    ) throws -> [StoreEvent] {
        let message = String(error.prefix(2000))
        let now = now
        switch next {
        case .retry(let delay):
            try statements.execute(
                """
                UPDATE jobs SET state = 'retrying', run_at = ?, last_error = ?, lease_owner = NULL, lease_token = NULL,
                    lease_expires_at = NULL, updated_at = ?
                WHERE id = ?
                """,
                [now + delay, message, now, id]
            )
            return []
        case .dead:
            let results = JobPayload.encodeResults(OperationResult.deadJob(operations, attempts: attempts))
            try statements.execute(
                """
                UPDATE jobs SET state = 'dead', results = ?, last_error = ?, finished_at = ?, lease_owner = NULL,
                    lease_token = NULL, lease_expires_at = NULL, updated_at = ?
                WHERE id = ?
                """,
                [results, message, now, now, id]
            )
            try recordFinished(jobID: id, userID: userID, deviceID: deviceID, statements: statements)
            return [.jobFinished(id)]
        }
    }

    static func recordFinished(jobID: Int64, userID: String, deviceID: String, statements: Statements) throws {
        try statements.execute(
            """
            INSERT INTO devices (user_id, device_id, last_finished_job_id, updated_at) VALUES (?, ?, ?, ?)
            ON CONFLICT (user_id, device_id) DO UPDATE
            SET last_finished_job_id = max(devices.last_finished_job_id, excluded.last_finished_job_id), updated_at = excluded.updated_at
            """,
            [userID, deviceID, jobID, now]
        )
    }

    public func rescueExpiredLeases(policy: RetryPolicy, jitter: @escaping @Sendable () -> Double) async throws -> RescueReport {
        try await write { statements in
            let expired = try statements.rows(
                "SELECT id, user_id, device_id, attempts, payload FROM jobs WHERE state = 'running' AND lease_expires_at < ? ORDER BY id LIMIT 100",
                [Self.now]
            )
            var report = RescueReport()
            var events: [StoreEvent] = []
            for row in expired {
                let attempts: Int = row["attempts"]
                let next = policy.next(afterAttempts: attempts, jitter: jitter())
                events += try Self.settleFailure(
                    id: row["id"], userID: row["user_id"], deviceID: row["device_id"],
                    operations: (try? JobPayload.decode(row["payload"])) ?? [], attempts: attempts,
                    error: "lease expired: the worker stopped before finishing the job", next: next, statements: statements
                )
                if next == .dead { report.dead += 1 } else { report.requeued += 1 }
            }
            if report.requeued > 0 { events.append(.jobsAvailable) }
            return (report, events)
        }
    }
}
