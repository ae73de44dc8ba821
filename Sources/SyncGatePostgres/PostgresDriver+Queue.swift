import Foundation
import PostgresNIO
import Synchronization
import SyncGateCore
package import SyncGateWire
package import SyncGateStorage

extension PostgresDriver {
    static let unfinishedStates = "('queued', 'running', 'retrying')"
    static let jobColumns = """
        id, user_id, device_id, state, attempts, max_attempts, operation_count, results, last_error, created_at, finished_at
        """
    typealias JobColumns = (Int64, String, String, String, Int, Int, Int, String?, String?, Date, Date?)

    static func jobRecord(_ columns: JobColumns) throws(StoredDataError) -> JobRecord {
        let (id, user, device, state, attempts, maximumAttempts, count, results, lastError, created, finished) = columns
        return try JobRecord(
            id: id, userID: user, deviceID: device, state: state, attempts: attempts, maximumAttempts: maximumAttempts,
            operationCount: count, storedResults: results, lastError: lastError, createdAt: Timestamp(created), finishedAt: finished.map(Timestamp.init)
        )
    }

    /// ``jobColumns`` and what an operator sees besides (``jobDetail(_:)``).
    static let jobDetailColumns = "\(jobColumns), payload, run_at, updated_at, lease_owner, lease_expires_at, errors::text"
    typealias JobDetailColumns = (Int64, String, String, String, Int, Int, Int, String?, String?, Date, Date?, String, Date, Date, String?, Date?, String?)

    static func jobDetail(_ columns: JobDetailColumns) throws(StoredDataError) -> JobDetail {
        let (id, user, device, state, attempts, maximumAttempts, count, results, lastError, created, finished) =
            (columns.0, columns.1, columns.2, columns.3, columns.4, columns.5, columns.6, columns.7, columns.8, columns.9, columns.10)
        var detail = JobDetail(
            record: try jobRecord((id, user, device, state, attempts, maximumAttempts, count, results, lastError, created, finished)),
            payload: columns.11, runAt: Timestamp(columns.12), updatedAt: Timestamp(columns.13)
        )
        detail.leaseOwner = columns.14
        detail.leaseExpiresAt = columns.15.map(Timestamp.init)
        detail.errors = columns.16
        return detail
    }

    /// A running job's columns, in the order ``claimedJob(_:)`` decodes them: the lease rescuer
    /// selects these; a claim returns the same (``ClaimStatement``, qualified by table).
    static let claimedColumns = "id, lease_token, user_id, device_id, attempts, max_attempts, payload, created_at"
    typealias ClaimedColumns = (Int64, String, String, String, Int, Int, String, Date)

    static func claimedJob(_ columns: ClaimedColumns) -> ClaimedJob<String> {
        let (id, token, user, device, attempts, maximumAttempts, payload, created) = columns
        return ClaimedJob(
            lease: JobLease(id: id, token: token), userID: user, deviceID: device, attempts: attempts, maximumAttempts: maximumAttempts,
            createdAt: Timestamp(created), payload: payload
        )
    }

    package func insertJob(_ job: QueuedJob, limits: QueueLimits, now: Timestamp?) async throws -> EnqueueResult {
        let depth = try await globalQueueDepth()
        if depth >= limits.maximumQueuedTotal { return .overloaded(depth: depth) }
        // One statement: the user's queue limit (exact: counted under a per-user lock) and the
        // insert (`syncgate_enqueue`, migrations 0004 and 0008); workers hear of it after it
        // committed, from the announcement.
        let statement = EnqueueStatement(job: job, now: now.milliseconds, limit: limits.maximumQueuedPerUser, notification: nil)
        let (logger, announcements) = (self.logger, self.announcements)
        // A statement that outlives its request's deadline still commits a job, which must be
        // announced as its NOTIFY used to commit with it: the work is not cancelled when the
        // request stops waiting for it, so it reads the answer to the end and announces.
        let rows = try await withConnection("enqueue", .request, cancelsAbandonedWork: false) { connection in
            let rows = try await connection.rows(statement, logger: logger)
            if rows.first?.1 != nil { announcements.yield() }
            return rows
        }
        guard let row = rows.first else { throw StoreUnavailableError("enqueue returned no row") }
        guard let id = row.1 else { return .rateLimited(queued: row.0) }
        return .accepted(jobID: id)
    }

    /// Announces queued jobs to every worker (``AnnounceJobsStatement``) while the driver runs:
    /// one announcement at a time, started after each request for one, so the pushes that commit
    /// while one is on its way share the next. A failed announcement is only logged: workers also
    /// claim every poll interval.
    func announceJobs(_ requests: AsyncStream<Void>) async {
        for await _ in requests {
            do {
                try await run("announce jobs", .request, AnnounceJobsStatement(lockTimeout: configuration.requestTimeout))
            } catch {
                logger.debug("could not announce queued jobs; workers find them at their next poll", metadata: ["error": "\(error)"])
            }
        }
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

    package func job(id: Int64, userID: String) async throws -> JobRecord? {
        try await run("job status", .request, JobStatusStatement(id: id, userID: userID)).first.map(Self.jobRecord)
    }

    /// Evaluated in a statement's CTE (and referenced, so it runs), makes that statement's own
    /// implicit transaction commit without waiting for the WAL flush.
    static let relaxedCommit = "set_config('synchronous_commit', 'off', true) AS synchronous_commit"

    package func claimJobs(workerID: String, limit: Int, leaseMilliseconds: Int64, now: Timestamp?) async throws -> [ClaimedJob<String>] {
        let rows = try await run(
            "claim jobs", .job, ClaimStatement(workerID: workerID, limit: limit, leaseMilliseconds: leaseMilliseconds, now: now.milliseconds)
        )
        return rows.sorted { $0.0 < $1.0 }.map(Self.claimedJob)
    }

    package func extendLeases(_ leases: [JobLease], leaseMilliseconds: Int64, now: Timestamp?) async throws {
        try await run("extend leases", .job, ExtendLeasesStatement(leases: leases, leaseMilliseconds: leaseMilliseconds, now: now.milliseconds))
    }
}
