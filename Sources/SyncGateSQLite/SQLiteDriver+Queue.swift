import Foundation
import GRDB
import SyncGateConcurrency
import SyncGateRuntime
import SyncGateCore
package import SyncGateWire
package import SyncGateStorage

extension SQLiteDriver {
    static let unfinished = "('queued', 'running', 'retrying')"
    static let jobColumns = "id, user_id, device_id, state, attempts, max_attempts, operation_count, results, last_error, created_at, finished_at"

    static func jobRecord(_ row: Row) throws(StoredDataError) -> JobRecord {
        try JobRecord(
            id: row["id"], userID: row["user_id"], deviceID: row["device_id"], state: row["state"], attempts: row["attempts"],
            maximumAttempts: row["max_attempts"], operationCount: row["operation_count"], storedResults: row["results"], lastError: row["last_error"],
            createdAt: Timestamp(millisecondsSinceEpoch: row["created_at"]),
            finishedAt: (row["finished_at"] as Int64?).map(Timestamp.init(millisecondsSinceEpoch:))
        )
    }

    /// ``jobColumns`` and what an operator sees besides (``jobDetail(_:)``).
    static let jobDetailColumns = "\(jobColumns), payload, run_at, updated_at, lease_owner, lease_expires_at, errors"

    static func jobDetail(_ row: Row) throws(StoredDataError) -> JobDetail {
        var detail = JobDetail(
            record: try jobRecord(row), payload: row["payload"], runAt: Timestamp(millisecondsSinceEpoch: row["run_at"]),
            updatedAt: Timestamp(millisecondsSinceEpoch: row["updated_at"])
        )
        detail.leaseOwner = row["lease_owner"]
        detail.leaseExpiresAt = (row["lease_expires_at"] as Int64?).map(Timestamp.init(millisecondsSinceEpoch:))
        detail.errors = row["errors"]
        return detail
    }

    /// A running job's columns, as claims and the lease rescuer read them.
    static let claimedColumns = "id, lease_token, user_id, device_id, attempts, max_attempts, payload, created_at"

    static func claimedJob(_ row: Row) -> ClaimedJob<String> {
        ClaimedJob(
            lease: JobLease(id: row["id"], token: row["lease_token"]), userID: row["user_id"], deviceID: row["device_id"], attempts: row["attempts"],
            maximumAttempts: row["max_attempts"], createdAt: Timestamp(millisecondsSinceEpoch: row["created_at"]), payload: row["payload"]
        )
    }

    package func insertJob(_ job: QueuedJob, limits: QueueLimits, now: Timestamp?) async throws -> EnqueueResult {
        let result = try await enqueues.submit(PendingEnqueue(job: job, limits: limits, now: (now ?? .now()).millisecondsSinceEpoch)).get()
        if case .accepted = result { notifier.publish(.jobsAvailable) }
        return result
    }

    /// Enqueues in one write transaction, in order: each job's limits count the jobs before it.
    /// If that transaction fails, each is tried again alone, so that one job's failure is not its
    /// neighbours'; unless the file was unavailable (another process held its lock past the busy
    /// timeout), which each would only wait for again.
    static func insertJobs(_ batch: [PendingEnqueue], pool: DatabasePool, writer: AsyncLock) async -> [Result<EnqueueResult, any Error>] {
        do {
            return try await write(pool, writer) { db in try batch.map { .success(try insertJob(db, $0)) } }
        } catch {
            guard batch.count > 1, !(error is StoreUnavailableError) else { return batch.map { _ in .failure(error) } }
            var results: [Result<EnqueueResult, any Error>] = []
            for pending in batch {
                do {
                    results.append(.success(try await write(pool, writer) { db in try insertJob(db, pending) }))
                } catch {
                    results.append(.failure(error))
                }
            }
            return results
        }
    }

    private static func insertJob(_ db: Database, _ pending: PendingEnqueue) throws -> EnqueueResult {
        let (job, limits, now) = (pending.job, pending.limits, pending.now)
        // One writer at a time: the counts and the insert cannot interleave with another push.
        let depth = try Int.fetchOne(db, cached: "SELECT count(*) FROM jobs WHERE state IN \(Self.unfinished)") ?? 0
        if depth >= limits.maximumQueuedTotal { return .overloaded(depth: depth) }
        let queued = try Int.fetchOne(db, cached: "SELECT count(*) FROM jobs WHERE user_id = ? AND state IN \(Self.unfinished)", arguments: [job.userID]) ?? 0
        if queued >= limits.maximumQueuedPerUser { return .rateLimited(queued: queued) }
        try db.execute(
            cached: """
                INSERT INTO jobs (user_id, device_id, max_attempts, operation_count, payload, run_at, created_at, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [job.userID, job.deviceID, job.maximumAttempts, job.operationCount, job.payload, now, now, now]
        )
        return .accepted(jobID: db.lastInsertedRowID)
    }

    package func job(id: Int64, userID: String) async throws -> JobRecord? {
        try await read { db in
            try Row.fetchOne(db, cached: "SELECT \(Self.jobColumns) FROM jobs WHERE id = ? AND user_id = ?", arguments: [id, userID]).map(Self.jobRecord)
        }
    }

    /// One `UPDATE … RETURNING`: the oldest runnable job of each user whose earlier jobs are all
    /// finished. Its commit does not sync the log: a claim lost in a power cut only runs the job
    /// again (docs/job-states.md).
    package func claimJobs(workerID: String, limit: Int, leaseMilliseconds: Int64, now given: Timestamp?) async throws -> [ClaimedJob<String>] {
        let token = UUID().uuidString
        return try await write(durable: false) { db in
            // Read once the writer is held, as the rescuer's is: a lease dated from before a wait
            // behind a long write could end before the claim commits.
            let now = (given ?? .now()).millisecondsSinceEpoch
            return try Row.fetchAll(
                db,
                cached: """
                    UPDATE jobs SET state = 'running', attempts = attempts + 1, lease_owner = ?, lease_token = ?,
                        lease_expires_at = ?, updated_at = ?, claimed_at = \(Self.clockMilliseconds)
                    WHERE id IN (
                        SELECT j.id FROM jobs j
                        WHERE j.state IN ('queued', 'retrying') AND j.run_at <= ?
                          AND NOT EXISTS (
                              SELECT 1 FROM jobs earlier
                              WHERE earlier.user_id = j.user_id AND earlier.id < j.id AND earlier.state IN \(Self.unfinished)
                          )
                        ORDER BY j.id LIMIT ?
                    )
                    RETURNING \(Self.claimedColumns)
                    """,
                arguments: [workerID, token, now + leaseMilliseconds, now, now, limit]
            ).map(Self.claimedJob).sorted { $0.id < $1.id }
        }
    }

    package func extendLeases(_ leases: [JobLease], leaseMilliseconds: Int64, now given: Timestamp?) async throws {
        let list = JSONValue.rows(leases.map { [.int($0.id), .string($0.token)] })
        // Not synced: a lease extension lost in a power cut lets the job be rescued and run again.
        try await write(durable: false) { db in
            // Read once the writer is held: a heartbeat that waited behind a long write (a big
            // erase, a maintenance pass) must not extend a lease to a time already past, which
            // the rescuer, reading its clock after the same wait, would find expired.
            let now = (given ?? .now()).millisecondsSinceEpoch
            try db.execute(
                cached: """
                    UPDATE jobs SET lease_expires_at = ?, updated_at = ?
                    WHERE state = 'running' AND EXISTS (
                        SELECT 1 FROM json_each(?) l WHERE json_extract(l.value, '$[0]') = jobs.id AND json_extract(l.value, '$[1]') = jobs.lease_token
                    )
                    """,
                arguments: [now + leaseMilliseconds, now, list]
            )
        }
    }
}

/// A push's enqueue waiting for its transaction.
struct PendingEnqueue: Sendable {
    var job: QueuedJob
    var limits: QueueLimits
    /// Milliseconds since the epoch.
    var now: Int64
}
