package import SyncGateCore
package import SyncGateWire
package import SyncGateStorage
import SyncGateConcurrency
package import Tracing

/// A worker store that counts its calls and the jobs each claim asked for: tests of how often a
/// worker touches the database.
package final class CountingWorkerStore: WorkerStore {
    package let base: any WorkerStore
    private let calls = Locked<[String: Int]>([:])
    private let limits = Locked<[Int]>([])
    private let handedOut = Locked<[[Int64]]>([])
    private let extended = Locked<[[Int64]]>([])
    private let together = Locked<[[Int64]]>([])
    /// The most "jobs available" announcements the worker had heard when it last asked for the
    /// notifier: its producer asks just before each decision, so a count here means a decision
    /// on what it counts is made (or being made, synchronously, right now).
    private let heard = Locked(0)
    package var heardByDecisions: Int { heard.value }

    package init(_ base: any WorkerStore) {
        self.base = base
    }

    package var notifier: ChangeNotifier {
        let notifier = base.notifier
        heard.update { $0 = max($0, notifier.jobsAnnounced) }
        return notifier
    }

    package var counts: [String: Int] { calls.value }
    package func count(_ name: String) -> Int { calls.value[name, default: 0] }
    /// The `limit` of every claim so far.
    package var claimLimits: [Int] { limits.value }
    /// The job ids each claim so far handed out, in claim order.
    package var claims: [[Int64]] { handedOut.value }
    /// The job ids of every heartbeat so far.
    package var heartbeats: [[Int64]] { extended.value }
    /// The job ids of every call applying jobs together so far.
    package var batches: [[Int64]] { together.value }
    package func reset() {
        calls.update { $0 = [:] }
        limits.update { $0 = [] }
        handedOut.update { $0 = [] }
        extended.update { $0 = [] }
        together.update { $0 = [] }
    }

    private func record(_ name: String) {
        calls.update { $0[name, default: 0] += 1 }
    }

    package func claimJobs(workerID: String, limit: Int, leaseMilliseconds: Int64) async throws -> [ClaimedJob<JobPayload>] {
        record("claimJobs")
        limits.update { $0.append(limit) }
        let claimed = try await base.claimJobs(workerID: workerID, limit: limit, leaseMilliseconds: leaseMilliseconds)
        handedOut.update { $0.append(claimed.map(\.id)) }
        return claimed
    }

    package func extendLeases(_ jobs: [JobLease], leaseMilliseconds: Int64) async throws {
        record("extendLeases")
        extended.update { $0.append(jobs.map(\.id)) }
        try await base.extendLeases(jobs, leaseMilliseconds: leaseMilliseconds)
    }

    package func apply(_ job: ClaimedJob<JobPayload>, collections: Collections, now: Timestamp) async throws -> ApplyOutcome {
        record("apply")
        return try await base.apply(job, collections: collections, now: now)
    }

    package func apply(_ jobs: [(job: ClaimedJob<JobPayload>, context: ServiceContext)], collections: Collections, now: Timestamp) async -> [Result<ApplyOutcome, any Error>] {
        record("applyTogether")
        together.update { $0.append(jobs.map { $0.job.id }) }
        return await base.apply(jobs, collections: collections, now: now)
    }

    @discardableResult
    package func fail(_ job: ClaimedJob<JobPayload>, error: String, settlement: JobSettlement) async throws -> Bool {
        record("fail")
        return try await base.fail(job, error: error, settlement: settlement)
    }

    package func rescueExpiredLeases(policy: RetryPolicy, jitter: @escaping @Sendable () -> Double) async throws -> RescueReport {
        record("rescueExpiredLeases")
        return try await base.rescueExpiredLeases(policy: policy, jitter: jitter)
    }

    package func schemaStatus() async throws -> SchemaStatus {
        record("schemaStatus")
        return try await base.schemaStatus()
    }
}
