import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateTestSupport
import Testing
import Tracing
import SyncGateConcurrency

/// Claimed jobs of different users applied together: jobs that share no feed commit in one
/// transaction, each decided as if alone; jobs of one feed in claim order; one job's failure
/// (a refused operation, a lost lease) never fails another.
@Suite(.timeLimit(.minutes(10))) struct GroupApplyTests {
    static func claim(_ harness: StoreHarness, _ count: Int) async throws -> [ClaimedJob<JobPayload>] {
        let claimed = try await harness.store.claimJobs(workerID: "w", limit: count, leaseMilliseconds: 60_000)
        #expect(claimed.count == count)
        return claimed
    }

    static func together(_ harness: StoreHarness, _ jobs: [ClaimedJob<JobPayload>]) async -> [Result<ApplyOutcome, any Error>] {
        await harness.store.apply(jobs.map { (job: $0, context: ServiceContext.topLevel) }, collections: harness.collections, now: .now())
    }

    static func results(_ outcome: Result<ApplyOutcome, any Error>) throws -> [OperationResult] {
        guard case .success(.done(let results, _)) = outcome else { throw TestEnvironmentError(description: "not applied: \(outcome)") }
        return results
    }

    /// While any job of the group is still being written, none is visible as finished: they
    /// commit together. And each job's round trips are those of one job alone.
    @Test(arguments: Driver.selected)
    func jobsThatShareNoFeedCommitTogether(_ driver: Driver) async throws {
        let store = Locked<SyncStore?>(nil)
        let seenDuringApply = Locked<[Int64: [JobState]]>([:])
        let watched = Locked<[(id: Int64, user: String)]>([])
        let hooks = StoreHooks(midApply: { job, _ in
            guard let store = store.value else { return }
            var states: [JobState] = []
            for (id, user) in watched.value where id != job.id {
                states.append(try await store.job(id: id, userID: user)?.state ?? .dead)
            }
            seenDuringApply.update { $0[job.id] = states }
        })
        try await StoreHarness.with(driver, hooks: hooks) { harness in
            store.update { $0 = harness.store }
            let users = ["u1", "u2", "u3", "u4"]
            var ids: [(Int64, String)] = []
            for user in users {
                ids.append((try await harness.push([Op.create("weightLogs", "w-\(user)", ["kg": 70]), Op.create("contacts", "c-\(user)", ["name": "x"])], user: user), user))
            }
            watched.update { $0 = ids }
            let outcomes = await Self.together(harness, try await Self.claim(harness, 4))
            var counts: Set<Int> = []
            for outcome in outcomes {
                #expect(try Self.results(outcome).map(\.outcome) == ["applied", "applied"])
                if case .success(.done(_, let roundTrips)) = outcome { counts.insert(roundTrips) }
            }
            #expect(seenDuringApply.value.count == 4)
            #expect(seenDuringApply.value.values.allSatisfy { $0 == [.running, .running, .running] }, "\(seenDuringApply.value)")
            for (id, user) in ids {
                #expect(try await harness.store.job(id: id, userID: user)?.state == .done)
                #expect(try await harness.pullAll(user: user).changes.map(\.entityID).sorted() == ["c-\(user)", "w-\(user)"])
            }
            // The same shape alone takes as many round trips: the group's are the transaction's.
            watched.update { $0 = [] }
            _ = try await harness.push([Op.create("weightLogs", "w-u5", ["kg": 70]), Op.create("contacts", "c-u5", ["name": "x"])], user: "u5")
            let alone = await Self.together(harness, try await Self.claim(harness, 1))
            guard case .success(.done(_, let single)) = alone[0] else { throw TestEnvironmentError(description: "\(alone)") }
            #expect(counts == [single], "one transaction for the group: \(counts) vs \(single) alone")
        }
    }

    /// Two users writing one household feed are applied one after the other, in claim order
    /// (their sequence numbers follow it); a third user's job joins the first transaction.
    @Test(arguments: Driver.selected)
    func jobsThatShareAFeedApplyInClaimOrder(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply([Op.create("households", "h", ["name": "Home"]), HouseholdTests.member("h", "bob")], user: "alice")
            _ = try await harness.push([Op.create("inventory", "from-alice", ["n": 1], household: "h")], user: "alice")
            _ = try await harness.push([Op.create("inventory", "from-bob", ["n": 2], household: "h")], user: "bob")
            _ = try await harness.push([Op.create("weightLogs", "carol-w", ["kg": 60])], user: "carol")
            let outcomes = await Self.together(harness, try await Self.claim(harness, 3))
            for outcome in outcomes { #expect(try Self.results(outcome).map(\.outcome) == ["applied"]) }
            let household = try await harness.pullAll(user: "bob").changes.filter { $0.entityType == "inventory" }
            #expect(household.map(\.entityID) == ["from-alice", "from-bob"])
            #expect(household.map(\.sequence) == household.map(\.sequence).sorted())
        }
    }

    /// An operation the database refuses fails its group's transaction: each job is applied again
    /// alone, the refused operation is rejected and everything else applies.
    @Test(arguments: Driver.selected)
    func aRefusedOperationFailsOnlyItself(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            try await StoredDataTests.refusePoison(harness)
            _ = try await harness.push([Op.create("weightLogs", "a1", ["kg": 70])], user: "ann")
            _ = try await harness.push([Op.create("weightLogs", "b1", ["kg": 70]), Op.create("weightLogs", "b2", ["kg": 71, "poison": true])], user: "ben")
            _ = try await harness.push([Op.create("weightLogs", "c1", ["kg": 70])], user: "cat")
            let outcomes = await Self.together(harness, try await Self.claim(harness, 3))
            #expect(try Self.results(outcomes[0]).map(\.outcome) == ["applied"])
            #expect(try Self.results(outcomes[1]).map(\.outcome) == ["applied", "VALIDATION_ERROR"])
            #expect(try Self.results(outcomes[2]).map(\.outcome) == ["applied"])
            #expect(try await harness.pullAll(user: "ben").changes.map(\.entityID) == ["b1"])
        }
    }

    /// A job whose lease was lost (rescued, claimed elsewhere) writes nothing; the rest of its
    /// group applies.
    @Test(arguments: Driver.selected)
    func aJobWhoseLeaseWasLostWritesNothingAndItsGroupApplies(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            for user in ["ann", "ben", "cat"] { _ = try await harness.push([Op.create("weightLogs", "w-\(user)", ["kg": 70])], user: user) }
            var claimed = try await Self.claim(harness, 3)
            claimed[1].lease.token = "someone-else's"
            let outcomes = await Self.together(harness, claimed)
            #expect(try Self.results(outcomes[0]).map(\.outcome) == ["applied"])
            guard case .success(.leaseLost) = outcomes[1] else { throw TestEnvironmentError(description: "\(outcomes[1])") }
            #expect(try Self.results(outcomes[2]).map(\.outcome) == ["applied"])
            #expect(try await harness.pullAll(user: "ben").changes.isEmpty)
            #expect(try await harness.store.job(id: claimed[1].id, userID: "ben")?.state == .running)
        }
    }
}
