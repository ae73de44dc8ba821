import SyncGateConcurrency
import SyncGateTestSupport
import Testing

/// The one-way gate `serve` opens once migrated: waiters go on when it opens, later ones at
/// once, and a waiter that is cancelled leaves.
@Suite(.timeLimit(.minutes(10))) struct LatchTests {
    @Test func waitersGoOnWhenItOpensAndLaterOnesAtOnce() async throws {
        let latch = Latch()
        let passed = Locked(0)
        let waiters = (0..<3).map { _ in Task { try await latch.wait(); passed.update { $0 += 1 } } }
        try await eventually("three waiters at the gate") { latch.waiting == 3 }
        #expect(passed.value == 0 && !latch.isOpen)
        latch.open()
        for waiter in waiters { try await waiter.value }
        #expect(passed.value == 3 && latch.waiting == 0)
        try await latch.wait()
        latch.open()
        #expect(latch.isOpen)
    }

    @Test func aCancelledWaiterLeavesWithCancellationError() async throws {
        let latch = Latch()
        let cancelled = Task { try await latch.wait() }
        let staying = Task { try await latch.wait() }
        try await eventually("two waiters at the gate") { latch.waiting == 2 }
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(latch.waiting == 1)
        latch.open()
        try await staying.value
    }

    @Test func aTaskCancelledBeforeItWaitsDoesNotQueue() async throws {
        let latch = Latch()
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await latch.wait()
        }
        await #expect(throws: CancellationError.self) { try await task.value }
        #expect(latch.waiting == 0)
    }
}
