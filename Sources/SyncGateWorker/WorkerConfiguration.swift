package import SyncGateCore
package import SyncGateStorage
import SyncGateWire

/// How a worker process claims and applies jobs.
package struct WorkerConfiguration: Sendable {
    /// Lanes: transactions applying jobs at the same time.
    package var concurrency: Int
    /// The most jobs one lane takes at once. A busy worker claims this many per free lane and
    /// applies those that share no feed in one transaction (one lock, load, write and commit for
    /// all of them); an idle one finds one job at a time and applies it at once.
    package var batchLimit: Int
    /// A busy worker opens another lane at once for a backlog — half a lane's `batchLimit` of
    /// jobs announced since its last claim — and otherwise only after work has waited this long;
    /// below that its busy lanes take the jobs as they finish (``ClaimGate``).
    package var backlogPatience: Duration
    /// How long a claim is valid without a heartbeat; a killed worker's jobs are re-claimed after it.
    package var leaseMilliseconds: Int64
    package var heartbeatInterval: Duration
    /// Idle workers re-check the queue this often even without a notification.
    package var pollInterval: Duration
    /// How often expired leases are looked for.
    package var rescueInterval: Duration
    package var retryPolicy: RetryPolicy
    /// Identifies this worker in leases and logs.
    package var workerID: String

    var claimGate: ClaimGate {
        ClaimGate(backlog: max(1, batchLimit / 2), patience: backlogPatience, pollInterval: pollInterval)
    }

    package init(
        concurrency: Int = 4,
        batchLimit: Int = 16,
        backlogPatience: Duration = .milliseconds(10),
        leaseMilliseconds: Int64 = 30_000,
        heartbeatInterval: Duration = .seconds(10),
        pollInterval: Duration = .seconds(1),
        rescueInterval: Duration = .seconds(5),
        retryPolicy: RetryPolicy = RetryPolicy(),
        workerID: String
    ) {
        self.concurrency = concurrency
        self.batchLimit = max(1, batchLimit)
        self.backlogPatience = backlogPatience
        self.leaseMilliseconds = leaseMilliseconds
        self.heartbeatInterval = heartbeatInterval
        self.pollInterval = pollInterval
        self.rescueInterval = rescueInterval
        self.retryPolicy = retryPolicy
        self.workerID = workerID
    }
}

/// Test seams: code run at points of a job's life, so tests can pause or fail a worker there.
package struct WorkerHooks: Sendable {
    /// Runs after a job is claimed, before it is applied; throwing fails the attempt. `nil`: none.
    package var beforeApply: (@Sendable (ClaimedJob<JobPayload>) async throws -> Void)?

    package init(beforeApply: (@Sendable (ClaimedJob<JobPayload>) async throws -> Void)? = nil) {
        self.beforeApply = beforeApply
    }
}
