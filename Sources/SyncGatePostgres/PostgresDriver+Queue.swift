import Foundation
import PostgresNIO
import Synchronization
public import SyncGateCore
public import SyncGateStorage

extension PostgresDriver {
    static let unfinishedStates = "('queued', 'running', 'retrying')"
    static let jobColumns = """
        id, user_id, device_id, state, attempts, max_attempts, operation_count, results, last_error, created_at, finished_at
        """
    typealias JobColumns = (Int64, String, String, String, Int, Int, Int, String?, String?, Date, Date?)

    static func jobRow(_ columns: JobColumns) -> JobRow {
        let (id, user, device, state, attempts, maximumAttempts, count, results, lastError, created, finished) = columns
        return JobRow(
            id: id, userID: user, deviceID: device, state: state, attempts: attempts, maximumAttempts: maximumAttempts,
            operationCount: count, results: results, lastError: lastError, createdAt: Timestamp(created), finishedAt: finished.map(Timestamp.init)
        )
    }

    public func insertJob(_ job: JobInsert, limits: QueueLimits, now: Timestamp?) async throws -> EnqueueResult {
        let depth = try await globalQueueDepth()
        if depth >= limits.maximumQueuedTotal { return .overloaded(depth: depth) }
        // One statement: the user's queue limit (exact: counted under a per-user lock), the insert
        // and the notify (`syncgate_enqueue`, migration 0004).
        let rows = try await query(
            "enqueue", .request,
            """
            SELECT queued, job_id FROM syncgate_enqueue(
                \(job.userID), \(job.deviceID), \(job.maximumAttempts), \(job.operationCount), \(job.payload),
                coalesce(timestamptz 'epoch' + \(now.milliseconds)::bigint * interval '1 millisecond', now()),
                \(limits.maximumQueuedPerUser), \(Self.channel), \(NotificationPayload.encode(.jobsAvailable))
            )
            """,
            as: (Int, Int64?).self
        )
        guard let row = rows.first else { throw StoreUnavailableError("enqueue returned no row") }
        guard let id = row.1 else { return .rateLimited(queued: row.0) }
        return .accepted(jobID: id)
    }

    /// Unfinished jobs in all, cached briefly so the global limit costs no query per push.
    func globalQueueDepth() async throws -> Int {
        let now = ContinuousClock.now
        if let cached = depthCache.withLock({ $0 }), cached.at.duration(to: now) < configuration.queueDepthCacheDuration {
            return cached.depth
        }
        let depth = try await query(
            "queue depth", .request, "SELECT count(*)::int FROM jobs WHERE state IN \(unescaped: Self.unfinishedStates)", as: Int.self
        ).first ?? 0
        depthCache.withLock { $0 = (depth, now) }
        return depth
    }

    public func job(id: Int64, userID: String) async throws -> JobRow? {
        try await query(
            "job status", .request,
            "SELECT \(unescaped: Self.jobColumns) FROM jobs WHERE id = \(id) AND user_id = \(userID)",
            as: JobColumns.self
        ).first.map(Self.jobRow)
    }

    /// Evaluated in a statement's CTE (and referenced, so it runs), makes that statement's own
    /// implicit transaction commit without waiting for the WAL flush.
    static let relaxedCommit = "set_config('synchronous_commit', 'off', true) AS synchronous_commit"

    public func claimJobs(workerID: String, limit: Int, leaseMilliseconds: Int64, now: Timestamp?) async throws -> [ClaimedJobRow] {
        // Oldest runnable jobs first, skipping rows other workers are claiming, and only a user's
        // oldest unfinished job: one job per user at a time, in push order. The commit does not
        // wait for the WAL flush (`relaxed`): a claim lost in a crash only runs the job again
        // (docs/job-states.md, "Claims and heartbeats do not wait for fsync").
        let rows = try await query(
            "claim jobs", .job,
            """
            WITH relaxed AS (SELECT \(unescaped: Self.relaxedCommit)),
            candidates AS (
                SELECT j.id FROM jobs j
                WHERE j.state IN ('queued', 'retrying') AND j.run_at <= coalesce(timestamptz 'epoch' + \(now.milliseconds)::bigint * interval '1 millisecond', now())
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
                -- The database's clock, never a test's: the commit-time horizon (migration 0005).
                claimed_at = now(),
                lease_expires_at = coalesce(timestamptz 'epoch' + \(now.milliseconds)::bigint * interval '1 millisecond', now()) + \(leaseMilliseconds) * interval '1 millisecond',
                updated_at = coalesce(timestamptz 'epoch' + \(now.milliseconds)::bigint * interval '1 millisecond', now())
            FROM candidates, relaxed WHERE jobs.id = candidates.id
            RETURNING jobs.id, jobs.lease_token, jobs.user_id, jobs.device_id, jobs.attempts, jobs.max_attempts, jobs.payload, jobs.created_at
            """,
            as: (Int64, String, String, String, Int, Int, String, Date).self
        )
        return rows.sorted { $0.0 < $1.0 }.map { row in
            let (id, token, user, device, attempts, maximumAttempts, payload, created) = row
            return ClaimedJobRow(
                id: id, leaseToken: token, userID: user, deviceID: device, attempts: attempts, maximumAttempts: maximumAttempts, payload: payload,
                createdAt: Timestamp(created)
            )
        }
    }

    public func extendLeases(_ leases: [JobLease], leaseMilliseconds: Int64, now: Timestamp?) async throws {
        // A job whose row is locked is being applied right now, which protects it better than a
        // lease: skip it rather than wait for the apply transaction. Like a claim, it does not wait
        // for the WAL flush: a lost extension can only let a lease expire early, and fencing
        // makes that safe.
        try await execute(
            "extend leases", .job,
            """
            WITH relaxed AS (SELECT \(unescaped: Self.relaxedCommit))
            UPDATE jobs SET lease_expires_at = coalesce(timestamptz 'epoch' + \(now.milliseconds)::bigint * interval '1 millisecond', now()) + \(leaseMilliseconds) * interval '1 millisecond',
                updated_at = coalesce(timestamptz 'epoch' + \(now.milliseconds)::bigint * interval '1 millisecond', now())
            FROM relaxed
            WHERE id IN (
                SELECT j.id FROM jobs j
                JOIN unnest(\(leases.map(\.id))::bigint[], \(leases.map(\.token))::text[]) AS lease(id, token)
                  ON j.id = lease.id AND j.lease_token = lease.token
                WHERE j.state = 'running'
                FOR UPDATE OF j SKIP LOCKED
            )
            """
        )
    }
}
