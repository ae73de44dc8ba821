import Foundation
@testable import SyncGatePostgres
import SyncGateConcurrency
import SyncGateTestSupport
import Testing

/// A cancelled PostgreSQL driver waits a bounded time for its parts (pools, listener,
/// announcer): one that does not end is named and left behind instead of holding the process.
struct DriverPartsTests {
    @Test func aPartThatIgnoresCancellationIsNamedAndLeftAfterTheGrace() async throws {
        let stuck = Latch()
        let started = Locked(0)
        let run = Task {
            await PostgresDriver.runParts(stopGrace: .milliseconds(50), [
                ("stops", { @Sendable in
                    started.update { $0 += 1 }
                    try? await Task.sleep(for: .seconds(3600))
                }),
                ("stuck", { @Sendable in
                    started.update { $0 += 1 }
                    // Waits in a task of its own, which the part's cancellation does not reach.
                    await Task { try? await stuck.wait() }.value
                }),
            ])
        }
        try await eventually("both parts to start") { started.value == 2 }
        run.cancel()
        #expect(try await value(of: run.asThrowing, "the driver to stop") == ["stuck"])
        stuck.open()
    }

    @Test func partsThatEndAreNotWaitedFor() async throws {
        let left = await PostgresDriver.runParts(stopGrace: .seconds(3600), [
            ("one", { @Sendable in }),
            ("two", { @Sendable in await Task.yield() }),
        ])
        #expect(left.isEmpty)
    }
}

extension Task where Failure == Never {
    /// The task as one that may throw (for ``value(of:within:_:)``).
    var asThrowing: Task<Success, any Error> { Task<Success, any Error> { await self.value } }
}
