import Foundation
import ServiceLifecycle
import Synchronization
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateWorker
import SyncGateTestSupport
import Testing

@testable import SyncGateSQLite
import SyncGateConcurrency

/// DESIGN.md's invariants under concurrent workers, on every driver.
@Suite(.timeLimit(.minutes(10))) struct InvariantTests {
    /// Invariant 2: jobs of one user apply one at a time, in push order.
    @Test(arguments: Driver.selected)
    func oneUsersJobsApplyOneAtATimeInPushOrder(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let users = ["alice", "bob", "carol"]
            let jobsPerUser = 12
            var pushed: [String: [Int64]] = [:]
            // Job i of a user writes version i of that user's counter, based on version i - 1:
            // out of order it would be rejected (base ahead of the server) or conflict.
            for index in 0..<jobsPerUser {
                for user in users {
                    let operation = index == 0
                        ? Op.create("weightLogs", "counter", ["n": 0])
                        : Op.update("weightLogs", "counter", base: Int64(index), ["n": .int(Int64(index))])
                    pushed[user, default: []].append(try await harness.push([operation], user: user))
                }
            }
            let violations = Locked<[String]>([])
            let store = harness.store
            let ids = pushed
            let hooks = WorkerHooks(beforeApply: { job in
                // When a job starts, every earlier job of its user must be finished.
                for earlier in ids[job.userID, default: []] where earlier < job.id {
                    let state = try await store.job(id: earlier, userID: job.userID)?.state
                    if state?.isFinished != true {
                        violations.update { $0.append("job \(job.id) of \(job.userID) started while \(earlier) was \(String(describing: state))") }
                    }
                }
            })
            try await harness.withWorkers(3, concurrency: 3, hooks: hooks) {
                for (user, userIDs) in ids {
                    for id in userIDs {
                        let job = try await harness.waitFinished(id, user: user)
                        #expect(try job.decodedResults()?.map(\.outcome) == ["applied"], "job \(id) of \(user)")
                    }
                }
            }
            #expect(violations.update { $0 } == [])
            for user in users {
                let changes = try await harness.pullAll(user: user).changes
                #expect(changes.map(\.version) == Array(1...Int64(jobsPerUser)))
            }
        }
    }

    /// Invariant 3: a reader paging while concurrent workers commit misses no change.
    @Test(arguments: Driver.selected)
    func aPagingReaderMissesNothingWhileWorkersCommitConcurrently(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let (users, ids) = try await Self.contendedHouseholdWorkload(harness)
            let reader = users[0]
            let seen = Locked<[Scope: [Int64]]>([:])
            let cursor = Locked<SyncCursor?>(nil)
            try await Self.pageWhileWorkersCommit(harness, jobs: ids) {
                let page = try await harness.store.pull(PullQuery(userID: reader, deviceID: "reader", cursor: cursor.value, limit: 7))
                seen.update { seen in
                    for change in page.changes { seen[change.scope, default: []].append(change.sequence) }
                }
                cursor.update { $0 = page.cursor }
                return page.hasMore
            }
            let stats = try await harness.store.stats()
            #expect(stats.jobsByState[.done] == ids.count + 1)
            let observed = seen.update { $0 }
            let household = observed[.household("h1")] ?? []
            let own = observed[.user(reader)] ?? []
            // Every change of both feeds, each once, in order, without a gap.
            #expect(household == Array(1...Int64(household.count)))
            // The household and its owner's membership, the other members, then every inventory item.
            #expect(household.count == 2 + (users.count - 1) + users.count * 6 * 3)
            #expect(own == Array(1...6))
        }
    }

    /// Eight users sharing one household (the first owns it) push six rounds of three household
    /// items and one weight log each, queued before any worker runs: every worker contends on
    /// the household's feed. Returns the users and their jobs in push order.
    static func contendedHouseholdWorkload(_ harness: StoreHarness) async throws -> (users: [String], jobs: [(String, Int64)]) {
        let users = (1...8).map { "user\($0)" }
        var setup = [Op.create("households", "h1", ["name": "Shared"])]
        setup += users.dropFirst().map { Op.create("household_members", "h1:\($0)", ["user_id": .string($0), "role": "member"]) }
        #expect(try await harness.apply(setup, user: users[0]).allSatisfy { $0.outcome == "applied" })
        var pushed: [(String, Int64)] = []
        for round in 0..<6 {
            for user in users {
                var operations: [SyncOperation] = (0..<3).map { item in
                    Op.create("inventory", "\(user)-r\(round)-i\(item)", ["qty": .int(Int64(item))], household: "h1")
                }
                operations.append(Op.create("weightLogs", "\(user)-r\(round)", ["kg": 70]))
                pushed.append((user, try await harness.push(operations, user: user)))
            }
        }
        return (users, pushed)
    }

    /// Runs 4 workers × 4 lanes on `jobs` while `page` reads one page (returning `has_more`)
    /// again and again; stops after a complete pass that started once every job was done.
    static func pageWhileWorkersCommit(_ harness: StoreHarness, jobs: [(String, Int64)], page: @escaping @Sendable () async throws -> Bool) async throws {
        let done = Locked(false)
        try await harness.withWorkers(4, concurrency: 4) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    while true {
                        let finished = done.update { $0 }
                        if try await !page() {
                            if finished { return }
                            try await Task.sleep(for: .milliseconds(3))
                        }
                    }
                }
                for (user, id) in jobs {
                    #expect(try await harness.waitFinished(id, user: user).state == .done)
                }
                done.update { $0 = true }
                try await group.waitForAll()
            }
        }
    }

    /// Different users write the same household entity from the same stale base, applied by
    /// several workers at once: they contend on the household's feed and the entity's row, and
    /// nothing is lost — every writer gets its own version, lww keeps the latest timestamp, the
    /// feed has no gap, and no job needs a second attempt (no transaction ever collided).
    @Test(arguments: Driver.selected)
    func usersWritingOneHouseholdEntityAtOnceLoseNoUpdate(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let users = (0..<10).map { "member\($0)" }
            let start = Timestamp.now().adding(milliseconds: -60_000)
            var setup = [Op.create("households", "h", ["name": "Shared"])]
            setup += users.dropFirst().map { Op.create("household_members", "h:\($0)", ["user_id": .string($0), "role": "member"]) }
            setup.append(Op.create("inventory", "shared", ["by": "nobody"], household: "h", at: start))
            #expect(try await harness.apply(setup, user: users[0]).allSatisfy { $0.outcome == "applied" })

            var pushed: [(String, Int64)] = []
            for (index, user) in users.enumerated() {
                // Timestamps grow with the index, whatever order the workers apply them in.
                let update = Op.update("inventory", "shared", base: 1, ["by": .string(user)], household: "h", at: start.adding(milliseconds: Int64(index + 1) * 1000))
                pushed.append((user, try await harness.push([update, Op.create("inventory", "own-\(user)", ["n": 1], household: "h")], user: user)))
            }
            let jobs = pushed
            let results = try await harness.withWorkers(3, concurrency: 4) {
                var results: [OperationResult] = []
                for (user, id) in jobs {
                    let job = try await harness.waitFinished(id, user: user)
                    #expect(job.state == .done && job.attempts == 1, "job \(id) of \(user): \(job.state) after \(job.attempts) attempts")
                    results += try job.decodedResults() ?? []
                }
                return results
            }
            let writes = results.filter { $0.entityID == "shared" && ($0.outcome == "applied" || $0.outcome == "client_wins") }
            let versions = writes.compactMap(\.version).sorted()
            #expect(versions == Array(2...Int64(1 + writes.count)), "every winning write has its own version")
            #expect(results.filter { $0.entityID.hasPrefix("own-") }.allSatisfy { $0.outcome == "applied" })
            let feed = try await harness.pullAll(user: users[3]).changes.filter { $0.scope == .household("h") }
            #expect(feed.map(\.sequence) == Array(1...Int64(feed.count)), "the household feed has no gap")
            let shared = feed.filter { $0.entityID == "shared" }
            #expect(shared.last?.version == Int64(1 + writes.count))
            // lww: the latest timestamp wins whatever the order of arrival.
            #expect(shared.last?.data?["by"] == .string(users.last!))
        }
    }

    /// Invariant 3, deterministically: one job is held inside its transaction after its changes are
    /// numbered and written; another user's job writes the same household feed; a reader pages meanwhile. The
    /// second job cannot commit past the held one (it waits for the feed's lock), so the reader never
    /// moves its cursor past a number that is not committed yet, and sees both changes in the end.
    @Test(arguments: Driver.selected)
    func aReaderNeverPagesPastAChangeHeldUncommitted(_ driver: Driver) async throws {
        let hold = HeldApply("the first job to be held before it writes")
        try await StoreHarness.with(driver, hooks: hold.hooks) { harness in
            _ = try await harness.apply([
                Op.create("households", "h", ["name": "Shared"]),
                Op.create("household_members", "h:bob", ["user_id": "bob", "role": "member"]),
                Op.create("household_members", "h:carol", ["user_id": "carol", "role": "member"]),
            ])
            var cursor = try await harness.pullAll(user: "carol").last.cursor
            let first = try await harness.push([Op.create("inventory", "from-alice", ["n": 1], household: "h")], user: "alice")
            hold.hold(first)
            let second = try await harness.push([Op.create("inventory", "from-bob", ["n": 2], household: "h")], user: "bob")
            let store = harness.store
            let collections = harness.collections
            // Both claimed up front (SQLite's claim would wait for the held transaction's writer).
            let claimed = try await store.claimJobs(workerID: "w", limit: 2, leaseMilliseconds: 60_000)
            #expect(claimed.map(\.id) == [first, second])
            let applyFirst = Task { try await store.apply(claimed[0], collections: collections, now: .now()) }
            try await hold.held.wait()
            let applySecond = Task { try await store.apply(claimed[1], collections: collections, now: .now()) }
            // Give the second job every chance to commit past the held one: until it is seen waiting
            // for the feed's lock (PostgreSQL), or its commit reaches the reader.
            var seen: [Int64] = []
            try await eventually("the second job to wait for the held one, or to commit", every: .milliseconds(20)) {
                let page = try await harness.store.pull(PullQuery(userID: "carol", deviceID: "c", cursor: cursor, limit: 100))
                seen += page.changes.map(\.sequence)
                cursor = page.cursor
                if !page.changes.isEmpty { return true }
                return try await Self.waitsForALock(harness)
            }
            hold.release.open()
            #expect(try await applyFirst.value.isDone)
            #expect(try await applySecond.value.isDone)
            seen += try await harness.pullAll(user: "carol", from: cursor).changes.map(\.sequence)
            let all = try await harness.pullAll(user: "carol").changes.filter { $0.entityType == "inventory" }
            #expect(all.count == 2)
            #expect(Set(all.map(\.sequence)).isSubset(of: Set(seen)), "the reader saw \(seen), the feed holds \(all.map(\.sequence))")
        }
    }

    /// Whether a transaction is waiting for a lock: a writer queued behind the held one (on
    /// SQLite, one writer at a time: a transaction waiting for the driver's writer lock).
    static func waitsForALock(_ harness: StoreHarness) async throws -> Bool {
        switch harness.url {
        case .postgres(let location):
            // On Citus (scripts/citus test) the feed's row, and the wait for it, are on a worker.
            let waiting = TestDatabases.citusWorkers == nil
                ? "SELECT count(*)::int FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
                : """
                    SELECT coalesce(sum(result::int), 0)::int FROM run_command_on_workers(
                        $$SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()$$)
                    """
            return try await withConnection(location) { try await $0.integer(waiting) } > 0
        case .sqlite:
            let driver = try #require(harness.store.driver as? SQLiteDriver)
            return driver.writer.waiting > 0
        }
    }

    /// The same idempotency key in two concurrent pushes applies once.
    @Test(arguments: Driver.selected)
    func theSameKeyPushedConcurrentlyAppliesOnce(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let operation = Op.create("weightLogs", "w1", ["kg": 70], key: "retry-me")
            async let first = harness.push([operation], device: "phone")
            async let second = harness.push([operation], device: "phone")
            let ids = try await [first, second]
            try await harness.withWorkers(2, concurrency: 2) {
                let outcomes = try await ids.asyncMap { try await harness.waitFinished($0).decodedResults()?.first?.outcome }
                #expect(outcomes.sorted { ($0 ?? "") < ($1 ?? "") } == ["applied", "duplicate"])
            }
            let changes = try await harness.pullAll().changes
            #expect(changes.count == 1 && changes[0].version == 1)
        }
    }

    @Test(arguments: Driver.selected)
    func failingAttemptsRetryWithBackoffThenDie(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let flaky = try await harness.push([Op.create("weightLogs", "flaky", ["kg": 1])], user: "alice")
            let broken = try await harness.push([Op.create("weightLogs", "broken", ["kg": 1])], user: "bob")
            let after = try await harness.push([Op.create("weightLogs", "after", ["kg": 1])], user: "bob")
            let hooks = WorkerHooks(beforeApply: { job in
                struct InjectedFailure: Error {}
                if job.id == flaky, job.attempts == 1 { throw InjectedFailure() }
                if job.id == broken { throw InjectedFailure() }
            })
            try await harness.withWorkers(1, concurrency: 2, hooks: hooks) {
                let recovered = try await harness.waitFinished(flaky)
                #expect(recovered.state == .done && recovered.attempts == 2)
                let dead = try await harness.waitFinished(broken, user: "bob")
                #expect(dead.state == .dead && dead.attempts == 3)
                #expect(try dead.decodedResults()?.map(\.outcome) == ["INTERNAL"])
                #expect(dead.lastError?.contains("InjectedFailure") == true)
                // The dead job applied nothing, and bob's next job was not held back for ever.
                #expect(try await harness.waitFinished(after, user: "bob").state == .done)
            }
            #expect(try await harness.pullAll(user: "bob").changes.map(\.entityID) == ["after"])
        }
    }

    /// SIGTERM drains: the worker stops claiming but finishes the job in hand.
    @Test(arguments: Driver.selected)
    func gracefulShutdownFinishesTheJobInHand(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let inHand = try await harness.push([Op.create("weightLogs", "w1", ["kg": 1])], user: "alice")
            let started = TestGate("the job to be in hand")
            let release = TestGate("the job's release")
            let worker = Worker(
                store: harness.store,
                collections: harness.collections,
                configuration: WorkerConfiguration(concurrency: 1, pollInterval: .milliseconds(50), workerID: "draining"),
                hooks: WorkerHooks(beforeApply: { _ in
                    started.open()
                    try await release.wait()
                }),
                logger: StoreHarness.logger
            )
            let group = ServiceGroup(services: [worker], gracefulShutdownSignals: [], logger: StoreHarness.logger)
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await group.run() }
                try await started.wait()
                await group.triggerGracefulShutdown()
                let waiting = try await harness.push([Op.create("weightLogs", "w2", ["kg": 2])], user: "bob")
                release.open()
                try await tasks.waitForAll()
                #expect(try await harness.store.job(id: inHand, userID: "alice")?.state == .done)
                // Shut down: the later job stays queued for the next worker.
                #expect(try await harness.store.job(id: waiting, userID: "bob")?.state == .queued)
            }
        }
    }
}

extension Sequence where Element: Sendable {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}
