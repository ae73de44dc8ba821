package import SyncGateStorage
import SyncGateConcurrency

/// A one-shot signal between test tasks, waited on with a deadline: a test that waits for
/// something that never happens fails with a message instead of hanging.
package final class TestGate: Sendable {
    private let latch = Latch()
    package let name: String

    package init(_ name: String) {
        self.name = name
    }

    package var isOpen: Bool { latch.isOpen }

    package func open() { latch.open() }

    /// Waits until the gate opens; throws once `timeout` passes.
    package func wait(timeout: Duration = hangGuard) async throws {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                try await self.latch.wait()
                return true
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                return false
            }
            let opened = try await group.next() ?? false
            // The other task ends at its cancellation (its error is dropped with the group).
            group.cancelAll()
            if !opened { throw TestEnvironmentError(description: "timed out after \(timeout) waiting for \(self.name)") }
        }
    }
}

/// The first element of an async sequence, or an error once `timeout` passes (a stream that never
/// yields fails the test instead of hanging it).
package func first<Stream: AsyncSequence & Sendable>(of stream: Stream, within timeout: Duration, _ what: String) async throws -> Stream.Element
where Stream.Element: Sendable {
    try await withThrowingTaskGroup(of: Stream.Element?.self) { group in
        group.addTask {
            for try await element in stream { return element }
            return nil
        }
        group.addTask {
            try await Task.sleep(for: timeout)
            return nil
        }
        defer { group.cancelAll() }
        guard let element = try await group.next() ?? nil else {
            throw TestEnvironmentError(description: "timed out after \(timeout) waiting for \(what)")
        }
        return element
    }
}

/// One job's apply held inside its transaction (at ``StoreHooks/midApply``, its writes numbered and
/// its feeds locked) until the test releases it: pass ``hooks`` to the store, name the job with
/// ``hold(_:)``, wait for ``held``, open ``release``.
package final class HeldApply: Sendable {
    package let held: TestGate
    package let release: TestGate
    private let target = Locked<Int64?>(nil)

    package init(_ what: String) {
        held = TestGate(what)
        release = TestGate("\(what): its release")
    }

    package var hooks: StoreHooks {
        StoreHooks(midApply: { [held, release, target] job, _ in
            guard job.id == target.value else { return }
            held.open()
            try await release.wait()
        })
    }

    package func hold(_ jobID: Int64) { target.update { $0 = jobID } }
}

/// The value of an unstructured task, or an error naming `what` once `timeout` passes (the task is
/// then cancelled). Awaiting `task.value` directly ignores the waiter's cancellation, so a task
/// that never ends would outlive the test's time limit and hang the whole run.
package func value<Success: Sendable>(
    of task: Task<Success, any Error>, within timeout: Duration = hangGuard, _ what: String
) async throws -> Success {
    let (outcomes, outcome) = AsyncStream<Result<Success, any Error>>.makeStream()
    // Both racers are unstructured for the same reason: neither may hold the waiter.
    let watcher = Task {
        do { outcome.yield(.success(try await task.value)) } catch { outcome.yield(.failure(error)) }
    }
    let timer = Task {
        try await Task.sleep(for: timeout)
        outcome.yield(.failure(TestEnvironmentError(description: "timed out after \(timeout) waiting for \(what)")))
    }
    defer { timer.cancel(); outcome.finish() }
    // Iterating an AsyncStream ends at the waiter's cancellation.
    for await result in outcomes {
        if case .failure(let error) = result, error is TestEnvironmentError { task.cancel() }
        return try result.get()
    }
    task.cancel()
    _ = watcher
    throw CancellationError()
}
