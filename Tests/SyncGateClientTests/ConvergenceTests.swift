import Foundation
import HummingbirdTesting
import SyncGateTestSupport
import Testing

/// The convergence proof: K simulated devices of three users sharing a household, each the SDK
/// on its own SQLite file, against the production server on each driver, through random
/// offline periods, conflicting edits under every policy, deletes, joins and leaves, lost
/// answers, double sends, a purge that invalidates cursors and an operator's forced resync.
/// See ``ConvergenceWorld`` for the run and its checks for what "converged", "never applied
/// twice" and "no acknowledged write lost" mean precisely.
///
/// CI runs a few seeds; a long run sets the knobs:
///
///     SYNCGATE_CONVERGENCE_SEEDS=1000 SYNCGATE_TEST_DRIVERS=sqlite scripts/test --filter ConvergenceTests
///
/// - `SYNCGATE_CONVERGENCE_SEEDS` (default 3) seeds per driver, from
///   `SYNCGATE_CONVERGENCE_FIRST_SEED` (default 1); `SYNCGATE_CONVERGENCE_STEPS` (default 100)
///   steps per seed. A failing seed is printed and runs again alone with `FIRST_SEED=N SEEDS=1`.
@Suite("Convergence", .timeLimit(.minutes(ConvergenceKnobs.minutes)))
struct ConvergenceTests {
    static let seeds = ConvergenceKnobs.seeds
    static let firstSeed = ConvergenceKnobs.firstSeed
    static let steps = ConvergenceKnobs.steps

    @Test("devices converge with the server; nothing acknowledged is lost or applied twice", arguments: Driver.selected)
    func converges(_ driver: Driver) async throws {
        let started = ContinuousClock.now
        var tally = ConvergenceWorld.Tally()
        var failed: [UInt64] = []
        for seed in Self.firstSeed..<Self.firstSeed + UInt64(Self.seeds) {
            let (problems, seedTally) = try await HTTPHarness.with(driver, setup: .live, workers: 2) { http in
                let world = try ConvergenceWorld(http: http, seed: seed)
                do {
                    try await world.run(steps: Self.steps)
                    try await world.quiesce()
                    try await world.check()
                } catch {
                    world.problems.append("the run failed: \(error)")
                }
                await world.close()
                return (world.problems, world.tally)
            }
            tally.add(seedTally)
            if !problems.isEmpty {
                failed.append(seed)
                let listed = problems.prefix(20).joined(separator: "\n")
                Issue.record("seed \(seed) on \(driver): \(problems.count) problem(s):\n\(listed)")
            }
        }
        let seconds = Double((ContinuousClock.now - started).components.seconds)
        print(
            "convergence[\(driver)]: seeds \(Self.firstSeed)...\(Self.firstSeed + UInt64(Self.seeds) - 1) (\(Self.seeds)), \(Self.steps) steps each, "
                + "\(Int(seconds)) s; failed seeds: \(failed); \(tally.writes) writes, \(tally.syncs) syncs, outcomes \(tally.outcomes.sorted { $0.key < $1.key }), "
                + "faults \(tally.faults.sorted { $0.key < $1.key }), resyncs \(tally.resyncs), households left \(tally.householdsLeft)"
        )
        // The run must have exercised what it claims to (over all seeds of a run).
        if Self.seeds >= 3, Self.steps >= 40 {
            #expect(tally.faults["dropAnswer", default: 0] > 0)
            #expect(tally.faults["sendTwice", default: 0] > 0)
            #expect(tally.faults["offline", default: 0] > 0)
            #expect(tally.outcomes["duplicate", default: 0] > 0)
            #expect(tally.outcomes["server_wins", default: 0] > 0)
            #expect(tally.outcomes["merged", default: 0] > 0)
            #expect(tally.outcomes.keys.contains { $0.hasPrefix("rejected") })
            #expect(tally.resyncs > 0)
            #expect(tally.householdsLeft > 0)
        }
    }
}

/// The environment's settings for a convergence run.
enum ConvergenceKnobs {
    static let environment = ProcessInfo.processInfo.environment
    static let seeds = environment["SYNCGATE_CONVERGENCE_SEEDS"].flatMap(Int.init) ?? 3
    static let firstSeed = environment["SYNCGATE_CONVERGENCE_FIRST_SEED"].flatMap(UInt64.init) ?? 1
    static let steps = environment["SYNCGATE_CONVERGENCE_STEPS"].flatMap(Int.init) ?? 100
    /// A generous bound: about ten seconds a seed on a loaded two-core machine.
    static let minutes = max(10, seeds / 6 + 2)
}
