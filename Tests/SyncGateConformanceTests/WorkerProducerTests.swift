import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateTestSupport
@testable import SyncGateWorker
import Testing
import SyncGateConcurrency

/// One producer and one heartbeat per worker process: an idle worker costs one claim per poll
/// interval whatever its lanes, one claim hands out every runnable job, a busy worker opens
/// another lane only for a backlog or work that waited its patience, one statement extends every
/// lease.
@Suite(.timeLimit(.minutes(10))) struct WorkerProducerTests {
    static func worker(
        _ store: any WorkerStore, _ harness: StoreHarness, concurrency: Int, patience: Duration = .milliseconds(10),
        pollInterval: Duration = .milliseconds(200), hooks: WorkerHooks = .init(), schemaReady: Latch? = nil
    ) -> Worker {
        Worker(
            store: store,
            collections: harness.collections,
            configuration: WorkerConfiguration(
                concurrency: concurrency, backlogPatience: patience, heartbeatInterval: .milliseconds(100), pollInterval: pollInterval,
                rescueInterval: .seconds(60), workerID: "producer"
            ),
            hooks: hooks,
            schemaReady: schemaReady,
            logger: StoreHarness.logger
        )
    }

    static func running<Result: Sendable>(_ worker: Worker, _ body: @Sendable () async throws -> Result) async throws -> Result {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await worker.run() }
            defer { group.cancelAll() }
            return try await body()
        }
    }

    /// `serve` starts its workers while it migrates (milliseconds): a worker whose first look
    /// came before the migrations finished looks again within moments, backing off to every
    /// 500 ms for a database nobody migrates. (It waited 500 ms from the first look, which made
    /// a fresh SQLite server's first pushes wait ~0.4 s.)
    @Test func aWorkerLooksAgainSoonWhenTheSchemaWasNotMigratedYet() {
        let delays = (1...9).map { Worker.schemaRecheckDelay(afterChecks: $0) }
        #expect(delays == [10, 20, 40, 80, 160, 320, 500, 500, 500].map { Duration.milliseconds($0) })
        #expect(Worker.schemaRecheckDelay(afterChecks: 0) == .milliseconds(10))
        #expect(Worker.schemaRecheckDelay(afterChecks: 1_000_000) == .milliseconds(500))
    }

    /// A worker of `serve` waits for its own process's migrations (a latch the process opens),
    /// not for what a look at the schema says: however long migrating takes on a loaded machine,
    /// it neither reads the store before nor warns "run `syncgate migrate`" — which a fresh
    /// `serve` logged once its migrations took longer than the 3 s a worker waits quietly.
    @Test(arguments: Driver.selected)
    func aServeWorkerWaitsForItsProcessToMigrateWithoutLooking(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let id = try await harness.push([Op.create("weightLogs", "w1", ["kg": 70])])
            let store = CountingWorkerStore(harness.store)
            let migrated = Latch()
            let worker = Self.worker(store, harness, concurrency: 2, schemaReady: migrated)
            try await Self.running(worker) {
                try await eventually("the worker at the gate") { migrated.waiting == 1 }
                #expect(store.counts.isEmpty, "the worker touched the store before its process migrated: \(store.counts)")
                migrated.open()
                #expect(try await harness.waitFinished(id, user: "alice").state == .done)
                #expect(store.count("schemaStatus") == 0)
            }
        }
    }

    @Test(arguments: Driver.selected)
    func anIdleWorkerClaimsOncePerPollIntervalWhateverItsLanes(_ driver: Driver) async throws {
        let interval = Duration.milliseconds(200)
        try await StoreHarness.with(driver) { harness in
            let store = CountingWorkerStore(harness.store)
            try await Self.running(Self.worker(store, harness, concurrency: 8, pollInterval: interval)) {
                try await eventually("the first claim") { store.count("claimJobs") > 0 }
                store.reset()
                let counting = ContinuousClock.now
                try await eventually("five more claims", every: .milliseconds(10)) { store.count("claimJobs") >= 5 }
                let claims = store.count("claimJobs")
                // However slow the machine, claims come at most once per interval since counting
                // began (and one at its start): eight lanes each polling would make eight times as many.
                let intervals = counting.duration(to: .now) / interval
                #expect(Double(claims) <= intervals + 1, "\(claims) claims in \(intervals) poll intervals")
                #expect(store.claimLimits.allSatisfy { $0 == 8 * 16 }, "an idle worker asks for a batch for each of its lanes: \(store.claimLimits)")
                #expect(store.count("extendLeases") == 0, "no lease in hand, no heartbeat")
            }
        }
    }

    @Test(arguments: Driver.selected)
    func oneClaimHandsOutEveryRunnableJobAndOneHeartbeatExtendsEveryLease(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            var pushed: [Int64] = []
            for user in ["u1", "u2", "u3", "u4"] {
                pushed.append(try await harness.push([Op.create("weightLogs", "w-\(user)", ["kg": 1])], user: user))
            }
            let ids = pushed
            let store = CountingWorkerStore(harness.store)
            let inHand = Locked<[Int64]>([])
            let allInHand = TestGate("four jobs in hand")
            let release = TestGate("the jobs' release")
            let hooks = WorkerHooks(beforeApply: { job in
                if inHand.update({ $0.append(job.id); return $0.count }) == 4 { allInHand.open() }
                try await release.wait()
            })
            try await Self.running(Self.worker(store, harness, concurrency: 4, hooks: hooks)) {
                try await allInHand.wait()
                #expect(store.claims.first == ids.sorted(), "one claim handed out the four jobs: \(store.claims)")
                #expect(store.claimLimits.first == 4 * 16)
                try await eventually("a heartbeat") { !store.heartbeats.isEmpty }
                #expect(store.heartbeats.first == ids.sorted(), "one statement for every lease in hand")
                release.open()
                for (id, user) in zip(ids, ["u1", "u2", "u3", "u4"]) {
                    #expect(try await harness.waitFinished(id, user: user).state == .done)
                }
            }
        }
    }

    /// Failed attempts' jobs run again when their backoffs end, not at the worker's next poll (a
    /// retry is not announced: nothing else would wake the worker for it). Two jobs of one claim
    /// fail, with different backoffs: each comes back.
    @Test(arguments: Driver.selected)
    func retriedJobsRunWhenTheirBackoffsEndNotAtTheNextPoll(_ driver: Driver) async throws {
        struct Refused: Error {}
        try await StoreHarness.with(driver) { harness in
            let users = ["ann", "ben"]
            var pushed: [Int64] = []
            for user in users { pushed.append(try await harness.push([Op.create("weightLogs", "w-\(user)", ["kg": 1])], user: user)) }
            let ids = pushed
            let store = CountingWorkerStore(harness.store)
            let hooks = WorkerHooks(beforeApply: { job in if job.attempts == 1 { throw Refused() } })
            // A poll far beyond the hang guard: only the ends of the backoffs (about a second
            // each, jittered) can bring the jobs back.
            let worker = Self.worker(store, harness, concurrency: 1, pollInterval: .seconds(3600), hooks: hooks)
            try await Self.running(worker) {
                for (id, user) in zip(ids, users) {
                    let job = try await harness.waitFinished(id, user: user)
                    #expect(job.state == .done && job.attempts == 2, "\(user): \(job.state) after \(job.attempts) attempts")
                }
                #expect(store.claims.first == ids.sorted(), "one claim handed out both jobs: \(store.claims)")
            }
        }
    }

    /// Runs `whileHeld` with a two-lane worker one of whose lanes holds user "long"'s job (in its
    /// `beforeApply`) until `whileHeld` returns; then the job goes through and `afterwards` runs.
    /// `inHand`: when each user's job reached its lane.
    static func withALongJobHeld(
        _ driver: Driver, patience: Duration,
        _ whileHeld: @Sendable (StoreHarness, CountingWorkerStore, Locked<[String: ContinuousClock.Instant]>) async throws -> Void,
        afterwards: @Sendable (StoreHarness, CountingWorkerStore, Locked<[String: ContinuousClock.Instant]>) async throws -> Void = { _, _, _ in }
    ) async throws {
        try await StoreHarness.with(driver) { harness in
            let store = CountingWorkerStore(harness.store)
            let inHand = Locked<[String: ContinuousClock.Instant]>([:])
            let release = TestGate("the long job's release")
            let hooks = WorkerHooks(beforeApply: { job in
                inHand.update { $0[job.userID] = .now }
                if job.userID == "long" { try await release.wait() }
            })
            // No poll within the test: only the gate decides when the second lane claims.
            let worker = Self.worker(store, harness, concurrency: 2, patience: patience, pollInterval: .seconds(600), hooks: hooks)
            try await Self.running(worker) {
                try await eventually("the first claim") { store.count("claimJobs") > 0 }
                let long = try await harness.push([Op.create("weightLogs", "w-long", ["kg": 1])], user: "long")
                try await eventually("the long job in hand") { inHand.value["long"] != nil }
                try await whileHeld(harness, store, inHand)
                release.open()
                #expect(try await harness.waitFinished(long, user: "long").state == .done)
                try await afterwards(harness, store, inHand)
            }
        }
    }

    /// A worker whose lane is busy leaves a trickle of jobs to that lane (which takes them in one
    /// transaction when it finishes) instead of opening a lane per job: below saturation one job
    /// per transaction costs more CPU per push and a worse p99 (``ClaimGate``).
    @Test(arguments: Driver.selected)
    func aBusyWorkerLeavesATrickleToItsBusyLane(_ driver: Driver) async throws {
        // Patience far beyond the test: only the busy lane's end can take the short job.
        try await Self.withALongJobHeld(driver, patience: .seconds(600)) { harness, store, inHand in
            let claims = store.count("claimJobs")
            let heard = harness.store.notifier.jobsAnnounced
            _ = try await harness.push([Op.create("weightLogs", "w-short", ["kg": 1])], user: "short")
            // The short job's announcement heard, and a decision made on it.
            try await eventually("the short job's announcement heard") { harness.store.notifier.jobsAnnounced > heard }
            let announced = harness.store.notifier.jobsAnnounced
            try await eventually("a decision on the short job") { store.heardByDecisions >= announced }
            #expect(inHand.value["short"] == nil, "one job is no backlog: the busy worker left it to its busy lane")
            #expect(store.count("claimJobs") == claims, "\(store.counts)")
        } afterwards: { _, _, inHand in
            try await eventually("the short job in hand once the long one is done") { inHand.value["short"] != nil }
            #expect(inHand.value["short"]! > inHand.value["long"]!)
        }
    }

    /// A job waits for a busy lane at most the worker's patience: a push behind a large job in
    /// another lane is not stuck there.
    @Test(arguments: Driver.selected)
    func aJobWaitsForABusyLaneAtMostThePatience(_ driver: Driver) async throws {
        let patience = Duration.milliseconds(300)
        try await Self.withALongJobHeld(driver, patience: patience) { harness, _, inHand in
            let pushed = ContinuousClock.now
            let short = try await harness.push([Op.create("weightLogs", "w-short", ["kg": 1])], user: "short")
            try await eventually("the short job claimed beside the held one", every: .milliseconds(10)) { inHand.value["short"] != nil }
            let waited = pushed.duration(to: inHand.value["short"]!)
            #expect(waited >= patience, "claimed after \(waited), before the patience was out")
            #expect(try await harness.waitFinished(short, user: "short").state == .done)
            #expect(inHand.value.count == 2, "the long job is still held: \(inHand.value.keys.sorted())")
        }
    }

    /// A backlog opens another lane at once, however long the busy lane takes.
    @Test(arguments: Driver.selected)
    func aBacklogOpensAnotherLaneAtOnce(_ driver: Driver) async throws {
        // Patience far beyond the test's waits: only the backlog can open the lane.
        try await Self.withALongJobHeld(driver, patience: .seconds(600)) { harness, _, inHand in
            // Half a lane's batch (16) of jobs is a backlog.
            let users = (1...8).map { "u\($0)" }
            var pushed: [(Int64, String)] = []
            for user in users {
                pushed.append((try await harness.push([Op.create("weightLogs", "w-\(user)", ["kg": 1])], user: user), user))
            }
            try await eventually("the backlog in hand") { Set(inHand.value.keys).isSuperset(of: users) }
            for (id, user) in pushed {
                #expect(try await harness.waitFinished(id, user: user).state == .done)
            }
        }
    }

    /// A claim fills as few lanes as hold it — each transaction costs the same round trips
    /// however many jobs it applies — at most `batchLimit` jobs and, while lanes are free,
    /// ``Worker/operationsPerLane`` operations each, balanced by operations, in claim order.
    @Test func aClaimFillsAsFewLanesAsHoldIt() {
        func jobs(_ operations: [Int]) -> [ClaimedJob<JobPayload>] {
            operations.enumerated().map { index, count in
                ClaimedJob(
                    lease: JobLease(id: Int64(index + 1), token: "t"), userID: "u\(index + 1)", deviceID: "d", attempts: 1, maximumAttempts: 5,
                    createdAt: .now(), payload: JobPayload(operations: (0..<count).map { Op.create("weightLogs", "w\(index)-\($0)", ["kg": 1]) })
                )
            }
        }
        func ids(_ lanes: [[ClaimedJob<JobPayload>]]) -> [[Int64]] { lanes.map { $0.map(\.id) } }
        let seven = jobs(Array(repeating: 1, count: 7))
        #expect(ids(Worker.share(seven, lanes: 3, batchLimit: 16)) == [[1, 2, 3, 4, 5, 6, 7]], "small jobs share one transaction")
        #expect(ids(Worker.share(seven, lanes: 3, batchLimit: 3)) == [[1, 4, 7], [2, 5], [3, 6]], "at most batchLimit jobs a lane")
        #expect(ids(Worker.share(seven, lanes: 1, batchLimit: 16)) == [[1, 2, 3, 4, 5, 6, 7]])
        #expect(Worker.share([], lanes: 4, batchLimit: 16).isEmpty)
        // Twenty 10-op pushes: 200 operations, one lane's worth; 24 of them: two lanes, balanced.
        #expect(ids(Worker.share(jobs(Array(repeating: 10, count: 20)), lanes: 4, batchLimit: 32)) == [Array(1...20)])
        #expect(ids(Worker.share(jobs(Array(repeating: 10, count: 24)), lanes: 4, batchLimit: 32)) == [
            Array(stride(from: 1, through: 23, by: 2)), Array(stride(from: 2, through: 24, by: 2)),
        ])
        // A large push gets a lane of its own while lanes are free: the small ones do not wait for it.
        #expect(ids(Worker.share(jobs([1, 1000, 1]), lanes: 4, batchLimit: 16)) == [[2], [1], [3]])
        #expect(ids(Worker.share(jobs([1, 1000, 1, 5]), lanes: 2, batchLimit: 16)) == [[2], [1, 3, 4]])
        #expect(ids(Worker.share(jobs([1, 1000, 1]), lanes: 1, batchLimit: 16)) == [[1, 2, 3]])
        // Whatever the mix, every job goes to exactly one lane, none is empty, none exceeds its limits.
        for seed in 0..<200 {
            var random = SeededGenerator(seed: UInt64(seed))
            let claimed = jobs((0..<Int.random(in: 1...40, using: &random)).map { _ in [1, 3, 10, 50, 400].randomElement(using: &random)! })
            let lanes = Int.random(in: 1...5, using: &random)
            let batchLimit = Int.random(in: 8...16, using: &random)
            let shared = Worker.share(Array(claimed.prefix(lanes * batchLimit)), lanes: lanes, batchLimit: batchLimit)
            #expect(shared.flatMap { $0 }.map(\.id).sorted() == claimed.prefix(lanes * batchLimit).map(\.id), "seed \(seed)")
            #expect(shared.count <= lanes && shared.allSatisfy { !$0.isEmpty && $0.count <= batchLimit }, "seed \(seed)")
            #expect(shared.allSatisfy { $0.map(\.id) == $0.map(\.id).sorted() }, "claim order within a lane, seed \(seed)")
        }
    }

    /// A lane hands the jobs it took to the store at once, which applies the jobs that share no
    /// feed in one transaction (``GroupApplyTests``).
    @Test(arguments: Driver.selected)
    func aLaneAppliesTheJobsItTookTogether(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            var pushed: [(Int64, String)] = []
            for user in ["u1", "u2", "u3", "u4"] {
                pushed.append((try await harness.push([Op.create("weightLogs", "w-\(user)", ["kg": 1])], user: user), user))
            }
            let ids = pushed
            let store = CountingWorkerStore(harness.store)
            try await Self.running(Self.worker(store, harness, concurrency: 1)) {
                for (id, user) in ids {
                    let job = try await harness.waitFinished(id, user: user)
                    #expect(job.state == .done)
                }
            }
            #expect(store.count("claimJobs") >= 1)
            #expect(store.batches.first == ids.map(\.0), "one lane took the four jobs and applied them together: \(store.batches)")
            #expect(store.count("apply") == 0, "no job was applied alone: \(store.counts)")
        }
    }
}
