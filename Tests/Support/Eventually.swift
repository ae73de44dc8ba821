/// How long a test waits for something that must happen — a job applied, a server listening, a
/// waiter woken, a process gone — before it calls the wait a hang. Far above what any of them
/// takes on an idle machine (milliseconds to seconds), so that a busy CI runner only makes a test
/// slower; only an event that never comes fails it.
package let hangGuard: Duration = .seconds(120)

/// Polls `condition` until it holds, failing the test with `what` when `timeout` passes first.
///
/// For conditions that depend on other processes: a fixed sleep followed by one check is flaky on
/// a loaded machine, while a deadline only fails when the condition never holds.
package func eventually(
    _ what: String, timeout: Duration = hangGuard, every interval: Duration = .milliseconds(100),
    _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: interval)
    }
    throw TestEnvironmentError(description: "timed out waiting for \(what)")
}
