import Foundation
import SyncGateCore
import SyncGateWire
@testable import SyncGateStorage
import SyncGateTestSupport
import SyncGateWorker
import ServiceLifecycle
import Testing
import SyncGateConcurrency

/// The job queue's state machine (docs/job-states.md), on every driver.
@Suite(.timeLimit(.minutes(10))) struct JobQueueTests {
    @Test(arguments: Driver.selected)
    func anAcceptedPushIsDurableAcrossProcesses(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let id = try await harness.push([Op.create("weightLogs", "w1", ["kg": 70])])
            let (other, run) = try harness.sibling()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await run() }
                let job = try await other.job(id: id, userID: "alice")
                #expect(job?.state == .queued)
                #expect(job?.operationCount == 1)
                #expect(try await other.job(id: id, userID: "bob") == nil)
                group.cancelAll()
            }
        }
    }

    @Test(arguments: Driver.selected)
    func claimsHandOutOneJobPerUserOldestFirst(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let a1 = try await harness.push([Op.create("weightLogs", "a1", ["kg": 1])], user: "alice")
            let a2 = try await harness.push([Op.create("weightLogs", "a2", ["kg": 2])], user: "alice")
            let b1 = try await harness.push([Op.create("weightLogs", "b1", ["kg": 3])], user: "bob")
            let first = try await harness.store.claimJobs(workerID: "w", limit: 10, leaseMilliseconds: 30_000)
            #expect(first.map(\.id) == [a1, b1])
            #expect(first.allSatisfy { $0.attempts == 1 })
            // alice's second job waits for her first, even with free capacity.
            #expect(try await harness.store.claimJobs(workerID: "w", limit: 10, leaseMilliseconds: 30_000).isEmpty)
            _ = try await harness.store.apply(first[0], collections: harness.collections, now: .now())
            let second = try await harness.store.claimJobs(workerID: "w", limit: 10, leaseMilliseconds: 30_000)
            #expect(second.map(\.id) == [a2])
        }
    }

    @Test(arguments: Driver.selected)
    func aFailedAttemptWaitsForItsBackoffAndHoldsTheUsersLaterJobs(_ driver: Driver) async throws {
        let clock = ManualClock()
        try await StoreHarness.with(driver, clock: clock) { harness in
            let first = try await harness.push([Op.create("weightLogs", "w1", ["kg": 1])])
            try await harness.push([Op.create("weightLogs", "w2", ["kg": 2])])
            let job = try #require(try await harness.store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 30_000).first)
            #expect(try await harness.store.fail(job, error: "connection reset", settlement: .retry(afterMilliseconds: 4_000)))
            let retrying = try #require(try await harness.store.job(id: first, userID: "alice"))
            #expect(retrying.state == .retrying)
            #expect(retrying.lastError == "connection reset")
            // Not yet, a millisecond before its backoff ends, and the user's later job waits behind it.
            clock.advance(milliseconds: 3_999)
            #expect(try await harness.store.claimJobs(workerID: "w", limit: 5, leaseMilliseconds: 30_000).isEmpty)
            // Once the backoff has passed the job is claimable again, still ahead of the user's later job.
            clock.advance(milliseconds: 1)
            let again = try await harness.store.claimJobs(workerID: "w", limit: 5, leaseMilliseconds: 30_000)
            #expect(again.map(\.id) == [first])
            #expect(again.first?.attempts == 2)
        }
    }

    @Test(arguments: Driver.selected)
    func aDeadJobAnswersInternalForEveryOperationAndAppliesNothing(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let operations = [Op.create("weightLogs", "w1", ["kg": 1], key: "k1"), Op.create("weightLogs", "w2", ["kg": 2], key: "k2")]
            let id = try await harness.push(operations, device: "phone")
            let next = try await harness.push([Op.create("weightLogs", "w3", ["kg": 3])], device: "phone")
            let job = try #require(try await harness.store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 30_000).first)
            try await harness.store.fail(job, error: "boom", settlement: .dead(results: OperationResult.deadJob(job.operations, attempts: job.attempts)))

            let dead = try #require(try await harness.store.job(id: id, userID: "alice"))
            #expect(dead.state == .dead)
            #expect(try dead.decodedResults()?.map(\.outcome) == ["INTERNAL", "INTERNAL"])
            #expect(try dead.decodedResults()?.allSatisfy { if case .rejected(_, _, true) = $0.status { true } else { false } } == true)
            // Nothing of it was applied, and its keys were not remembered: pushing again applies.
            #expect(try await harness.pullAll().changes.isEmpty)
            // It counts as finished for the device watermark, and the user's next job runs.
            #expect(try await harness.pullAll(device: "phone").last.deviceWatermark == id)
            try await harness.drain()
            #expect(try await harness.pullAll(device: "phone").last.deviceWatermark == next)
            let again = try await harness.apply(operations)
            #expect(again.map(\.outcome) == ["applied", "applied"])
        }
    }

    @Test(arguments: Driver.selected)
    func anExpiredLeaseIsRescuedAndTheStaleWorkerCannotCommit(_ driver: Driver) async throws {
        let clock = ManualClock()
        try await StoreHarness.with(driver, clock: clock) { harness in
            let id = try await harness.push([Op.create("weightLogs", "w1", ["kg": 70], key: "once")])
            let stalled = try #require(try await harness.store.claimJobs(workerID: "stalled", limit: 1, leaseMilliseconds: 50).first)
            clock.advance(milliseconds: 50)
            #expect(try await harness.store.rescueExpiredLeases(policy: RetryPolicy(), jitter: { 0 }) == RescueReport(), "not before the lease ends")
            clock.advance(milliseconds: 1)
            let report = try await harness.store.rescueExpiredLeases(policy: RetryPolicy(maximumAttempts: 5, baseDelayMilliseconds: 0), jitter: { 0 })
            #expect(report == RescueReport(requeued: 1, dead: 0))
            let rescued = try #require(try await harness.store.claimJobs(workerID: "healthy", limit: 1, leaseMilliseconds: 30_000).first)
            #expect(rescued.id == id && rescued.attempts == 2)
            #expect(try await harness.store.apply(rescued, collections: harness.collections, now: .now()).isDone)
            // The stalled worker wakes up and tries to commit with its old lease.
            #expect(try await harness.store.apply(stalled, collections: harness.collections, now: .now()) == .leaseLost)
            #expect(try await harness.store.fail(stalled, error: "late", settlement: .dead(results: [])) == false)
            let changes = try await harness.pullAll().changes
            #expect(changes.map(\.version) == [1])
            #expect(try await harness.store.job(id: id, userID: "alice")?.state == .done)
        }
    }

    /// A killed worker's many expired leases are rescued in one call, a batch per transaction
    /// (each batch reads its jobs' payloads), however many there are.
    @Test(arguments: Driver.selected)
    func manyExpiredLeasesAreRescuedInBatches(_ driver: Driver) async throws {
        let clock = ManualClock()
        try await StoreHarness.with(driver, clock: clock) { harness in
            // More than the 100 the rescuer took at once before it took batches.
            let count = SyncStore.rescueBatch * 7 + 3
            for index in 0..<count { _ = try await harness.push([Op.create("weightLogs", "w", ["kg": 70])], user: "u\(index)") }
            #expect(try await harness.store.claimJobs(workerID: "killed", limit: count, leaseMilliseconds: 50).count == count)
            clock.advance(milliseconds: 51)
            let report = try await harness.store.rescueExpiredLeases(policy: RetryPolicy(baseDelayMilliseconds: 0), jitter: { 0 })
            #expect(report == RescueReport(requeued: count, dead: 0))
            #expect(try await harness.store.rescueExpiredLeases(policy: RetryPolicy(), jitter: { 0 }) == RescueReport())
        }
    }

    /// A job's attempts are the budget its front gave it when it was queued (`max_attempts`, as
    /// the admin API shows it), not the rescuing process's: here 1 against the policy's 5.
    @Test(arguments: Driver.selected)
    func aRescuedJobOutOfAttemptsIsDead(_ driver: Driver) async throws {
        let clock = ManualClock()
        try await StoreHarness.with(driver, clock: clock) { harness in
            let queued = QueuedJob(userID: "alice", deviceID: "d1", operations: [Op.create("weightLogs", "w1", ["kg": 70])], maximumAttempts: 1)
            guard case .accepted(let id) = try await harness.store.enqueue(queued, limits: .init(maximumQueuedPerUser: .max, maximumQueuedTotal: .max)) else {
                Issue.record("enqueue refused")
                return
            }
            _ = try await harness.store.claimJobs(workerID: "dies", limit: 1, leaseMilliseconds: 20)
            clock.advance(milliseconds: 21)
            let report = try await harness.store.rescueExpiredLeases(policy: RetryPolicy(maximumAttempts: 5), jitter: { 0 })
            #expect(report == RescueReport(requeued: 0, dead: 1))
            let job = try #require(try await harness.store.job(id: id, userID: "alice"))
            #expect(job.state == .dead)
            #expect(try job.decodedResults()?.map(\.outcome) == ["INTERNAL"])
        }
    }

    @Test(arguments: Driver.selected)
    func heartbeatsKeepALeaseAlive(_ driver: Driver) async throws {
        let clock = ManualClock()
        try await StoreHarness.with(driver, clock: clock) { harness in
            try await harness.push([Op.create("weightLogs", "w1", ["kg": 70])])
            let job = try #require(try await harness.store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 100).first)
            try await harness.store.extendLeases([job.lease], leaseMilliseconds: 60_000)
            clock.advance(milliseconds: 59_999)
            let report = try await harness.store.rescueExpiredLeases(policy: RetryPolicy(), jitter: { 0 })
            #expect(report == RescueReport())
            #expect(try await harness.store.apply(job, collections: harness.collections, now: .now()).isDone)
        }
    }

    @Test(arguments: Driver.selected)
    func queueLimitsRefuseWithoutEnqueueing(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness throws in
            let job = QueuedJob(userID: "alice", deviceID: "d", operations: [Op.create("weightLogs", "w", ["kg": 1])], maximumAttempts: 5)
            #expect(try await harness.store.enqueue(job, limits: .init(maximumQueuedPerUser: 2, maximumQueuedTotal: 100)).isAccepted)
            #expect(try await harness.store.enqueue(job, limits: .init(maximumQueuedPerUser: 2, maximumQueuedTotal: 100)).isAccepted)
            #expect(try await harness.store.enqueue(job, limits: .init(maximumQueuedPerUser: 2, maximumQueuedTotal: 100)) == .rateLimited(queued: 2))
            // Another user is not limited by alice's queue ...
            var bobs = job
            bobs.userID = "bob"
            #expect(try await harness.store.enqueue(bobs, limits: .init(maximumQueuedPerUser: 2, maximumQueuedTotal: 100)).isAccepted)
            // ... but by the global depth (the harness reads it fresh for every push).
            #expect(try await harness.store.enqueue(bobs, limits: .init(maximumQueuedPerUser: 10, maximumQueuedTotal: 3)) == .overloaded(depth: 3))
            #expect(try await harness.store.stats().queueDepth == 3)
        }
    }

    /// The count and the insert are one decision per user: 200 concurrent pushes against a
    /// limit of 100 accept exactly 100 (a count-then-insert lets several see 99).
    @Test(arguments: Driver.selected)
    func theUserQueueLimitIsExactUnderConcurrentPushes(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness throws in
            #expect(try await Self.enqueueAtOnce(200, user: "alice", limit: 100, in: harness) == 100)
            #expect(try await harness.store.stats().queueDepth == 100)

            // The race is only at the crossing: cross it again, ten times (one user per round, 60
            // pushes at once, limit 30), so a count that is not serialised is caught reliably.
            for round in 0..<10 {
                #expect(try await Self.enqueueAtOnce(60, user: "round\(round)", limit: 30, in: harness) == 30, "round \(round)")
            }
        }
    }

    /// `count` one-operation pushes of `user`'s device `d` enqueued all at once against a per-user
    /// `limit`; how many were accepted.
    static func enqueueAtOnce(_ count: Int, user: String, limit: Int, in harness: StoreHarness) async throws -> Int {
        let job = QueuedJob(userID: user, deviceID: "d", operations: [Op.create("weightLogs", "w", ["kg": 1])], maximumAttempts: 5)
        return try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<count {
                group.addTask { try await harness.store.enqueue(job, limits: .init(maximumQueuedPerUser: limit, maximumQueuedTotal: 10_000)).isAccepted }
            }
            return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
    }

    /// A user's jobs commit in id order, so the worker (which runs a user's lowest unfinished id)
    /// never finishes a later push while an earlier one is still to commit, and the device
    /// watermark never passes an unfinished push. Checked on PostgreSQL's commit timestamps
    /// (the test server runs with `track_commit_timestamp`); SQLite has one writer.
    @Test func aUsersJobsCommitInIdOrderUnderConcurrentPushes() async throws {
        try await StoreHarness.with(.postgres) { harness throws in
            #expect(try await Self.enqueueAtOnce(200, user: "alice", limit: 1_000, in: harness) == 200)
            let order = try await harness.queryTexts(
                "SELECT id::text FROM jobs WHERE user_id = 'alice' ORDER BY pg_xact_commit_timestamp(xmin), id"
            )
            #expect(order.count == 200)
            #expect(order.map { Int64($0)! } == order.map { Int64($0)! }.sorted(), "commit order: \(order)")
        }
    }
}

extension ApplyOutcome {
    var isDone: Bool {
        if case .done = self { return true }
        return false
    }
}

extension EnqueueResult {
    var isAccepted: Bool {
        if case .accepted = self { return true }
        return false
    }
}

extension JobQueueTests {
    /// Moves the clock `count` times by 600 ms (under a 1 s lease), each time waiting for a
    /// heartbeat that began after the move (one in flight read the old time, and the next step
    /// would pass the lease it set). Heartbeats run one at a time.
    static func stepsWithHeartbeats(_ count: Int, clock: ManualClock, store: HeartbeatCounter) async throws {
        for _ in 0..<count {
            clock.advance(milliseconds: 600)
            let begun = store.begun.value
            try await eventually("a heartbeat", every: .milliseconds(5)) { store.heartbeats.value > begun }
        }
    }

    /// The worker's heartbeat keeps a job's lease while the job stays in hand for several times
    /// the lease: the clock moves in steps shorter than the lease, each followed by a heartbeat,
    /// and the rescuer (running all along) never takes the job, which applies once, in one attempt.
    @Test(arguments: Driver.selected)
    func theHeartbeatKeepsALongJobsLease(_ driver: Driver) async throws {
        let clock = ManualClock()
        try await StoreHarness.with(driver, clock: clock) { harness in
            let id = try await harness.push([Op.create("weightLogs", "slow", ["kg": 1], key: "slow")])
            let store = HeartbeatCounter(store: harness.store)
            let hooks = WorkerHooks(beforeApply: { job in
                guard job.id == id else { return }
                try await Self.stepsWithHeartbeats(5, clock: clock, store: store)
            })
            // A 1 s lease, 3 s in hand; a second lane would take the job the moment it was rescued.
            let worker = Worker(
                store: store, collections: harness.collections,
                configuration: StoreHarness.workerConfiguration(concurrency: 2, leaseMilliseconds: 1_000), hooks: hooks, logger: StoreHarness.logger
            )
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await worker.run() }
                defer { group.cancelAll() }
                let job = try await harness.waitFinished(id)
                #expect(job.state == .done && job.attempts == 1, "\(job.state) after \(job.attempts) attempts")
                #expect(try job.decodedResults()?.map(\.outcome) == ["applied"])
            }
            #expect(try await harness.pullAll().changes.map(\.version) == [1])
        }
    }

    /// A graceful shutdown stops the claims, not the heartbeat: a job still in hand when it
    /// comes keeps its lease until it finishes (a lane may hold several, each up to the job
    /// deadline), and applies in its one attempt.
    @Test(arguments: Driver.selected)
    func theHeartbeatKeepsTheLeasesOfJobsFinishingAfterAShutdown(_ driver: Driver) async throws {
        let clock = ManualClock()
        try await StoreHarness.with(driver, clock: clock) { harness in
            let id = try await harness.push([Op.create("weightLogs", "slow", ["kg": 1], key: "slow")])
            let store = HeartbeatCounter(store: harness.store)
            let started = TestGate("the job in hand")
            let release = TestGate("the job's release")
            let hooks = WorkerHooks(beforeApply: { _ in
                started.open()
                try await release.wait()
            })
            let worker = Worker(
                store: store, collections: harness.collections,
                configuration: StoreHarness.workerConfiguration(concurrency: 1, leaseMilliseconds: 1_000), hooks: hooks, logger: StoreHarness.logger
            )
            let group = ServiceGroup(services: [worker], gracefulShutdownSignals: [], logger: StoreHarness.logger)
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await group.run() }
                try await started.wait()
                await group.triggerGracefulShutdown()
                try await Self.stepsWithHeartbeats(5, clock: clock, store: store)
                release.open()
                try await tasks.waitForAll()
            }
            let job = try #require(try await harness.store.job(id: id, userID: "alice"))
            #expect(job.state == .done && job.attempts == 1, "\(job.state) after \(job.attempts) attempts")
        }
    }

    /// An operator sends dead jobs back to the queue (`syncgate admin retry-dead`): with fresh
    /// attempts, they apply, and none of their keys was remembered while they were dead.
    @Test(arguments: Driver.selected)
    func deadJobsRetriedByAnOperatorApply(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let first = try await harness.push([Op.create("weightLogs", "a", ["kg": 1], key: "a")])
            let second = try await harness.push([Op.create("weightLogs", "b", ["kg": 1], key: "b")], user: "bob")
            for (user, _) in [("alice", first), ("bob", second)] {
                let job = try #require(try await harness.store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 30_000).first)
                #expect(job.userID == user)
                try await harness.store.fail(job, error: "broken", settlement: .dead(results: OperationResult.deadJob(job.operations, attempts: job.attempts)))
            }
            #expect(try await harness.store.retryDeadJobs(ids: [first]) == 1)
            let requeued = try #require(try await harness.store.job(id: first, userID: "alice"))
            #expect(requeued.state == .queued && requeued.attempts == 0 && requeued.storedResults == nil)
            #expect(requeued.lastError?.hasPrefix("retried by an operator after: broken") == true)
            #expect(try await harness.store.job(id: second, userID: "bob")?.state == .dead)
            #expect(try await harness.store.retryDeadJobs(ids: nil) == 1)
            #expect(try await harness.store.retryDeadJobs(ids: nil) == 0)
            let results = try await harness.drain()
            #expect(results[first]?.map(\.outcome) == ["applied"])
            #expect(results[second]?.map(\.outcome) == ["applied"])
        }
    }

    /// A dead job is queued again only once its user's later jobs finished: a claim waits only
    /// for a user's earlier jobs, so queued beside a later unfinished one (here running) it would
    /// be claimed and applied at the same time, two of one user's jobs at once.
    @Test(arguments: Driver.selected)
    func aDeadJobIsRetriedOnlyOnceItsUsersLaterJobsFinished(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let dead = try await harness.push([Op.create("weightLogs", "a", ["kg": 1], key: "a")])
            #expect(try await harness.store.cancelJob(id: dead, reason: "cancelled by the test") == .applied)
            let later = try await harness.push([Op.create("weightLogs", "b", ["kg": 2], key: "b")])
            let running = try #require(try await harness.store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 600_000).first)
            #expect(running.id == later)
            #expect(try await harness.store.retryDeadJob(id: dead) == .waitsForLaterJobs)
            #expect(try await harness.store.retryDeadJobs(ids: nil) == 0)
            #expect(try await harness.store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 600_000).isEmpty)
            #expect(try await harness.store.job(id: dead, userID: "alice")?.state == .dead)
            // The later job done, the retry goes through and the job applies after it.
            _ = try await harness.store.apply(running, collections: .default, now: .now())
            #expect(try await harness.store.retryDeadJob(id: dead) == .applied)
            let results = try await harness.drain()
            #expect(results[dead]?.map(\.outcome) == ["applied"])
        }
    }

    /// A device's jobs finish in push order (its watermark counts on it): a waiting job is not
    /// cancelled while an earlier job of its device is unfinished (here retrying); another
    /// device's is.
    @Test(arguments: Driver.selected)
    func aJobIsCancelledOnlyOnceItsDevicesEarlierJobsFinished(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let first = try await harness.push([Op.create("weightLogs", "a", ["kg": 1], key: "a")])
            let second = try await harness.push([Op.create("weightLogs", "b", ["kg": 2], key: "b")])
            let other = try await harness.push([Op.create("weightLogs", "c", ["kg": 3], key: "c")], device: "d2")
            let claimed = try #require(try await harness.store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 600_000).first)
            #expect(claimed.id == first)
            #expect(try await harness.store.fail(claimed, error: "connection reset", settlement: .retry(afterMilliseconds: 600_000)))
            #expect(try await harness.store.cancelJob(id: second, reason: "test") == .waitsForEarlierJobs)
            #expect(try await harness.store.job(id: second, userID: "alice")?.state == .queued)
            #expect(try await harness.store.cancelJob(id: other, reason: "test") == .applied)
            #expect(try await harness.store.cancelJob(id: first, reason: "test") == .applied)
            #expect(try await harness.store.cancelJob(id: second, reason: "test") == .applied)
        }
    }
}

/// A worker's store that counts its heartbeats.
struct HeartbeatCounter: WorkerStore {
    let store: SyncStore
    /// Heartbeats begun and finished.
    let begun = Locked(0)
    let heartbeats = Locked(0)

    var notifier: ChangeNotifier { store.notifier }

    func claimJobs(workerID: String, limit: Int, leaseMilliseconds: Int64) async throws -> [ClaimedJob<JobPayload>] {
        try await store.claimJobs(workerID: workerID, limit: limit, leaseMilliseconds: leaseMilliseconds)
    }

    func extendLeases(_ jobs: [JobLease], leaseMilliseconds: Int64) async throws {
        begun.update { $0 += 1 }
        try await store.extendLeases(jobs, leaseMilliseconds: leaseMilliseconds)
        heartbeats.update { $0 += 1 }
    }

    func apply(_ job: ClaimedJob<JobPayload>, collections: Collections, now: Timestamp) async throws -> ApplyOutcome {
        try await store.apply(job, collections: collections, now: now)
    }

    func fail(_ job: ClaimedJob<JobPayload>, error: String, settlement: JobSettlement) async throws -> Bool {
        try await store.fail(job, error: error, settlement: settlement)
    }

    func rescueExpiredLeases(policy: RetryPolicy, jitter: @escaping @Sendable () -> Double) async throws -> RescueReport {
        try await store.rescueExpiredLeases(policy: policy, jitter: jitter)
    }

    func schemaStatus() async throws -> SchemaStatus {
        try await store.schemaStatus()
    }
}
