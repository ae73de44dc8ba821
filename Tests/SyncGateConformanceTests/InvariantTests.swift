import Foundation
import ServiceLifecycle
import Synchronization
import SyncGateCore
import SyncGateStorage
import SyncGateWorker
import SyncGateTestSupport
import Testing

/// DESIGN.md's invariants under concurrent workers, on every driver.
@Suite struct InvariantTests {
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
                        #expect(job.results?.map(\.outcome) == ["applied"], "job \(id) of \(user)")
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
            let users = (1...8).map { "user\($0)" }
            // Everyone shares one household, so all workers contend on its feed.
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

            let ids = pushed
            let reader = users[0]
            let seen = Locked<[Scope: [Int64]]>([:])
            let done = Locked(false)
            try await harness.withWorkers(4, concurrency: 4) {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        var cursor: SyncCursor?
                        while true {
                            let finished = done.update { $0 }
                            let page = try await harness.store.pull(PullQuery(userID: reader, deviceID: "reader", cursor: cursor, limit: 7))
                            seen.update { seen in
                                for change in page.changes { seen[change.scope, default: []].append(change.sequence) }
                            }
                            cursor = page.cursor
                            // Stop only after a complete pass that started once every job was done.
                            if !page.hasMore {
                                if finished { return }
                                try await Task.sleep(for: .milliseconds(3))
                            }
                        }
                    }
                    for (user, id) in ids {
                        let job = try await harness.waitFinished(id, user: user, timeout: .seconds(60))
                        #expect(job.state == .done)
                    }
                    done.update { $0 = true }
                    try await group.waitForAll()
                }
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

    /// The same idempotency key in two concurrent pushes applies once.
    @Test(arguments: Driver.selected)
    func theSameKeyPushedConcurrentlyAppliesOnce(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            let operation = Op.create("weightLogs", "w1", ["kg": 70], key: "retry-me")
            async let first = harness.push([operation], device: "phone")
            async let second = harness.push([operation], device: "phone")
            let ids = try await [first, second]
            try await harness.withWorkers(2, concurrency: 2) {
                let outcomes = try await ids.asyncMap { try await harness.waitFinished($0).results?.first?.outcome }
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
                #expect(dead.results?.map(\.outcome) == ["INTERNAL"])
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
            let started = AsyncStream.makeStream(of: Void.self)
            let release = AsyncStream.makeStream(of: Void.self)
            let worker = Worker(
                store: harness.store,
                collections: harness.collections,
                configuration: WorkerConfiguration(concurrency: 1, pollInterval: .milliseconds(50), workerID: "draining"),
                hooks: WorkerHooks(beforeApply: { _ in
                    started.continuation.yield()
                    for await _ in release.stream { break }
                }),
                logger: StoreHarness.logger
            )
            let group = ServiceGroup(services: [worker], gracefulShutdownSignals: [], logger: StoreHarness.logger)
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await group.run() }
                for await _ in started.stream { break }
                await group.triggerGracefulShutdown()
                let waiting = try await harness.push([Op.create("weightLogs", "w2", ["kg": 2])], user: "bob")
                release.continuation.yield()
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
