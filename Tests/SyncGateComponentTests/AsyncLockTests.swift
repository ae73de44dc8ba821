import SyncGateConcurrency
import SyncGateTestSupport
import Testing

/// The async lock the SQLite driver and the SDK share: one holder at a time, in arrival order,
/// and a waiter that is cancelled leaves without the lock.
@Suite(.timeLimit(.minutes(10))) struct AsyncLockTests {
    @Test func holdersTakeTurnsInArrivalOrderAcrossSuspensions() async throws {
        let lock = AsyncLock()
        let log = Locked<[String]>([])
        let first = TestGate("the first holder in")
        let release = TestGate("the first holder's release")
        let holder = Task {
            try await lock.withLock {
                first.open()
                try await release.wait()
                log.update { $0.append("first") }
            }
        }
        try await first.wait()
        let second = Task { try await lock.withLock { log.update { $0.append("second") } } }
        // Queued behind the first: the second cannot run while the first holds the lock.
        try await eventually("the second holder waiting") { lock.waiting == 1 }
        #expect(log.value.isEmpty)
        release.open()
        try await holder.value
        try await second.value
        #expect(log.value == ["first", "second"])
    }

    @Test func aCancelledWaiterLeavesTheQueueAndTheLockPassesOn() async throws {
        let lock = AsyncLock()
        let inside = TestGate("the holder in")
        let release = TestGate("the holder's release")
        let holder = Task { try await lock.withLock { inside.open(); try await release.wait() } }
        try await inside.wait()
        let ran = Locked(false)
        let cancelled = Task { try await lock.withLock { ran.update { $0 = true } } }
        let after = Task { try await lock.withLock { "after" } }
        try await eventually("both waiting") { lock.waiting == 2 }
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(lock.waiting == 1, "the cancelled waiter left the queue")
        release.open()
        try await holder.value
        #expect(try await after.value == "after")
        #expect(!ran.value, "a cancelled waiter's body never ran")
    }

    @Test func aTaskCancelledBeforeItAsksDoesNotTakeTheLock() async throws {
        let lock = AsyncLock()
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await lock.withLock { true }
        }
        await #expect(throws: CancellationError.self) { try await task.value }
        #expect(try await lock.withLock { true }, "the lock is free")
    }
}
