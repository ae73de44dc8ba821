import Foundation
import SyncGateCore
import SyncGateWire
import SyncGateStorage
import SyncGateTestSupport
import Testing

/// A job's round trips to the database do not grow with its number of operations.
@Suite(.timeLimit(.minutes(10))) struct SetBasedApplyTests {
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

    /// The same entities updated (base 1), then half deleted and half updated again (base 2).
    static func updates(_ count: Int, round: Int, base: Int64) -> [SyncOperation] {
        batch(count, round: round).enumerated().map { index, created in
            let household = created.householdID
            if base == 2, index % 2 == 0 { return Op.delete(created.entityType, created.entityID, base: base, household: household) }
            var data = created.data ?? [:]
            if created.entityType == "weightLogs" { data["kg"] = .int(Int64(71 + index)) }
            if created.entityType == "timeEntries" { data["minutes"] = .int(Int64(31 + index)) }
            return Op.update(created.entityType, created.entityID, base: base, data, household: household)
        }
    }

    /// The most round trips an apply may take on each driver, by kind of batch. Lower is fine (and
    /// welcome): what must hold is that the count does not grow with the batch. On PostgreSQL,
    /// statements: BEGIN, lock (jobs and feeds), load (entities, idempotency records, households
    /// and the inputs of the daily summaries the pushed logs name), one write, COMMIT (17 before
    /// the apply's statements were fused). A batch that deletes a log, or moves one to another
    /// day, reads the stored document's day after deciding: one more (as parents only stored
    /// documents name would add one). On SQLite, accesses to the writer: the same steps, BEGIN
    /// run in the first (its statements are library calls in process, a cached one per row where
    /// that is cheaper).
    static let maximum: [Driver: [String: Int]] = [
        .postgres: ["creates": 5, "updates": 5, "deletes and updates": 6],
        .sqlite: ["creates": 4, "updates": 4, "deletes and updates": 5],
    ]

    @Test(arguments: Driver.selected)
    func roundTripsPerJobDoNotDependOnItsSize(_ driver: Driver) async throws {
        try await StoreHarness.with(driver) { harness in
            _ = try await harness.apply([Op.create("households", "h1", ["name": "Home"])] + (0..<7).map { Op.create("projects", "p\($0)", ["name": "P"]) })
            func roundTrips(_ operations: [SyncOperation]) async throws -> Int {
                let id = try await harness.push(operations)
                let job = try #require(try await harness.store.claimJobs(workerID: "w", limit: 1, leaseMilliseconds: 60_000).first)
                #expect(job.id == id)
                guard case .done(let results, let count) = try await harness.store.apply(job, collections: harness.collections, now: .now()) else {
                    throw TestEnvironmentError(description: "job \(id) was not applied")
                }
                #expect(results.allSatisfy { $0.outcome == "applied" }, "\(results.filter { $0.outcome != "applied" }.prefix(3))")
                return count
            }
            var counts: [String: [Int: Int]] = [:]
            for (round, size) in [1, 4, 100, 1000].enumerated() {
                counts["creates", default: [:]][size] = try await roundTrips(Self.batch(size, round: round))
                counts["updates", default: [:]][size] = try await roundTrips(Self.updates(size, round: round, base: 1))
                counts["deletes and updates", default: [:]][size] = try await roundTrips(Self.updates(size, round: round, base: 2))
            }
            for (kind, bySize) in counts.sorted(by: { $0.key < $1.key }) {
                // One operation touches less (no household, parents or summaries); from a batch
                // that touches everything up, the count is constant.
                let full = try #require(bySize[4])
                #expect(bySize[100] == full, "\(kind)")
                #expect(bySize[1000] == full, "\(kind)")
                #expect(try #require(bySize[1]) <= full, "\(kind)")
                #expect(full <= Self.maximum[driver]![kind]!, "\(kind): \(full) round trips per job on \(driver)")
                print("round trips per job (\(driver), \(kind)) by batch size: \(bySize.sorted { $0.key < $1.key })")
            }
        }
    }
}
