import Foundation
import SyncGateCore
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// A job's round trips to the database do not grow with its number of operations.
@Suite struct SetBasedApplyTests {
    /// A batch of `count` operations exercising every load and write: idempotency replays,
    /// creates and updates, a household, parent lookups and daily summaries.
    static func batch(_ count: Int, round: Int) -> [SyncOperation] {
        (0..<count).map { index in
            switch index % 4 {
            case 0: Op.create("foodLogs", "f\(round)-\(index)", ["loggedDate": .string("2026-01-\(10 + index % 10)"), "mealType": "lunch", "items": [["id": "a", "calories": 100]]])
            case 1: Op.create("timeEntries", "t\(round)-\(index)", ["project_id": .string("p\(index % 7)"), "minutes": 30])
            case 2: Op.create("inventory", "i\(round)-\(index)", ["qty": 1], household: "h1")
            default: Op.create("weightLogs", "w\(round)-\(index)", ["kg": 70])
            }
        }
    }

    @Test(arguments: Driver.selected)
    func statementsPerJobDoNotDependOnItsSize(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply([Op.create("households", "h1", ["name": "Home"])] + (0..<7).map { Op.create("projects", "p\($0)", ["name": "P"]) })
            var statements: [Int: Int] = [:]
            for (round, size) in [1, 4, 100, 1000].enumerated() {
                let id = try await harness.push(Self.batch(size, round: round))
                let job = try #require(try await harness.store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 60_000).first)
                #expect(job.id == id)
                guard case .done(let results, let count) = try await harness.store.apply(job, collections: harness.collections, now: .now()) else {
                    Issue.record("job \(id) was not applied")
                    return
                }
                #expect(results.allSatisfy { $0.outcome == "applied" }, "\(results.filter { $0.outcome != "applied" }.prefix(3))")
                statements[size] = count
            }
            // 1 operation needs fewer statements (no household, parents or summaries to touch);
            // from a batch touching everything up, the count is constant.
            let full = try #require(statements[4])
            #expect(statements[100] == full)
            #expect(statements[1000] == full)
            #expect(try #require(statements[1]) <= full)
            print("statements per job by batch size (\(driver)): \(statements.sorted { $0.key < $1.key })")
        }
    }
}
